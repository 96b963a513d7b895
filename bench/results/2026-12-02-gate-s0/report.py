import json, sys, glob, os
D = sys.argv[1] if len(sys.argv) > 1 else "/tmp/s/s0"
ROLES = ["fixed","block_bitmap","inode_bitmap","inode_table","extent_node","dir_node","orphan_node","xattr","other"]
def probe(stats):
    return {k[len("probe."):]: v for k, v in stats.items() if k.startswith("probe.")}
def walk(o, path=""):
    # find dicts that contain "stats" with probe counters
    if isinstance(o, dict):
        if "stats" in o and isinstance(o["stats"], dict) and any(k.startswith("probe.") for k in o["stats"]):
            yield path, o["stats"]
        for k, v in o.items():
            yield from walk(v, path + "/" + str(k))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from walk(v, path + f"[{i}]")
rows = []
for f in sorted(glob.glob(D + "/engine-*.json")):
    txt = open(f).read()
    try:
        doc = json.loads(txt)
    except Exception:
        docs = [json.loads(l) for l in txt.splitlines() if l.strip().startswith("{")]
        doc = docs
    for p, st in walk(doc):
        rows.append((os.path.basename(f) + p, probe(st)))
prev = None
for name in ["fuse-create", "fuse-unlink", "dbench"]:
    f = f"{D}/{name}.json"
    if not os.path.exists(f): continue
    d = json.load(open(f))
    st = d.get("counters", d)
    cur = probe(st)
    if prev:
        cur = {k: v - prev.get(k, 0) for k, v in cur.items()}
    rows.append((name + (" (delta)" if prev else ""), cur))
    prev = probe(st)
print("| run/phase | handles | conflicting (private) | % | shared only | % | " + " | ".join(ROLES) + " |")
print("|---" * (6 + len(ROLES)) + "|")
for name, p in rows:
    h = p.get("handles", 0) or 1
    c = p.get("handles_conflicting", 0); s = p.get("handles_shared_only", 0)
    print(f"| {name} | {p.get('handles',0):,} | {c:,} | {100*c/h:.3f} | {s:,} | {100*s/h:.3f} | " + " | ".join(f"{p.get('conflicts.'+r,0):,}" for r in ROLES) + " |")
