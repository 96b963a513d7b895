#!/usr/bin/env python3
"""Table of the engine A/B runs in this folder (run.sh): per variant and
thread count, the median and range of create and unlink rates, CPU per
million files, and the gate's counters."""
import glob, json, os, statistics as st, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
for path in sorted(glob.glob(os.path.join(here, "*-t*-*.json"))):
    name = os.path.basename(path)[:-5]
    variant, threads, _ = name.split("-")
    d = json.load(open(path))
    user, sys_ = map(float, open(path[:-5] + ".time").read().split()[-2:])
    r = rows.setdefault((variant, threads), [])
    r.append((d, (user + sys_) / (d["files"] / 1e6)))

keys = ["cil.writer_wait_on_cpu_us_max", "cil.writer_wait_us_p99", "tx.gate_closed_us_max",
        "tx.join_us_max", "tx.credit_overruns", "cil.capture_restores"]
print("| variant | threads | runs | create files/s median (range) | unlink files/s median (range) | CPU s per 1M files | " + " | ".join(keys) + " |")
print("|---" * (6 + len(keys)) + "|")
for (variant, threads), runs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    def col(phase):
        v = [d[phase]["files_per_s"] for d, _ in runs]
        return f"{st.median(v)/1000:.1f}k ({min(v)/1000:.0f}–{max(v)/1000:.0f}k)"
    cpu = st.median([c for _, c in runs])
    stats = []
    for k in keys:
        v = [max(d["create"]["stats"].get(k, 0), d["unlink"]["stats"].get(k, 0)) for d, _ in runs]
        stats.append(str(max(v)))
    print(f"| {variant} | {threads} | {len(runs)} | {col('create')} | {col('unlink')} | {cpu:.2f} | " + " | ".join(stats) + " |")
