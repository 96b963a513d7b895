"""The report of `bench/mballoc` (seed 002): Markdown in the seed's two table
shapes, plus results.json with every raw number.

The seed's tables are (1) dd run × {without, with} the optimized scan, in
wall time, and (2) `useless_cX_loops` × {without, with}. The same shapes are
used here for cairn through a mount and through the engine alone, and, in a
separate, clearly labelled section, for kernel ext4 at its own (smaller)
size. Counters this build does not publish (the buddy allocator's
`alloc.mb.*` before it lands) print as "-", never as 0: a missing counter is
not a measured zero.
"""

import json
import os

from .mb_ext4 import CRITERIA

MB_CR = ["hits", "groups_considered", "extents_scanned", "useless_loops"]
MB_KEYS = (
    ["alloc.mb.reqs"]
    + [f"alloc.mb.cr{c}.{k}" for c in range(4) for k in MB_CR]
    + ["alloc.mb.goal_hits", "alloc.mb.buddies_generated", "alloc.mb.time_ns"]
)
# The allocator of today publishes these; they say what the old walk did.
OLD_KEYS = ["alloc.calls", "alloc.groups_scanned", "alloc.goal_hits", "alloc.blocks_allocated"]
MODES = ("0", "1")
HEAD = "| | without (`mb_optimize_scan=0`) | with (`mb_optimize_scan=1`) |\n|---|---|---|\n"
ORD = ["1st", "2nd", "3rd"]

SEED = """The seed's numbers (ext4, 65 TB, no free 2 MB run; Harshad Shirwadkar, March 2021):

|         | Without CR 0/1 Optimizations | With CR 0/1 Optimizations |
|---------|------------------------------|---------------------------|
| 1st run | 5m1.871s                     | 2m47.642s                 |
| 2nd run | 2m28.390s                    | 0m0.611s                  |
| 3rd run | 2m26.530s                    | 0m1.255s                  |

and for `dd if=/dev/zero of=/mnt/file bs=2M count=2 conv=fsync`: useless_c0_loops 3 → 0,
useless_c1_loops 39 → 0, useless_c2_loops and useless_c3_loops 0 → 0."""


def dash(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}{unit}"
    return f"{v:,}{unit}"


def secs(v):
    return "-" if v is None else f"{v:.3f} s"


def mib(v):
    return "-" if v is None else f"{v / (1 << 20):,.1f} MiB"


def human(v):
    if v is None:
        return "-"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if v >= 1 << shift:
            return f"{v / (1 << shift):,.1f} {unit}"
    return f"{v} B"


def size_bytes(s):
    """e2freefrag's range bound: `2M-`, `512K-`, `1G-` -> bytes."""
    s = s.strip().rstrip("-")
    shift = {"K": 10, "M": 20, "G": 30, "T": 40}.get(s[-1:], 0)
    try:
        return int(s[:-1] if shift else s) << shift
    except ValueError:
        return 1 << 62


def get(d, *path):
    for p in path:
        if d is None:
            return None
        d = d.get(p) if isinstance(d, dict) else (d[p] if isinstance(d, list) and len(d) > p else None)
    return d


CRITERIA_KEYS = [f"{n}.groups_considered" for n, _, _ in CRITERIA]
CAIRN_CONSIDERED = [f"alloc.mb.cr{c}.groups_considered" for c in range(4)]


def considered(delta, keys):
    """Sum of groups considered over the criteria (None if none is published)."""
    vals = [delta[k] for k in keys if delta and k in delta]
    return sum(vals) if vals else None


def seed_loops_text(label, delta, names):
    """The seed's printout: `useless_cX_loops: N` lines."""
    lines = [f"{label}:", ""]
    for name, key in names:
        lines.append(f"useless_{name}_loops: {dash(delta.get(key) if delta else None)}")
    return "\n".join(lines)


def cairn_loop_names():
    return [(f"c{c}", f"alloc.mb.cr{c}.useless_loops") for c in range(4)]


def counters_table(parts, keys):
    """parts: [(column label, delta dict or None)] -> a counter × column table."""
    t = "| counter | " + " | ".join(lbl for lbl, _ in parts) + " |\n"
    t += "|---|" + "---|" * len(parts) + "\n"
    for k in keys:
        t += f"| `{k}` | " + " | ".join(dash(d.get(k) if d else None) for _, d in parts) + " |\n"
    return t


def mount_section(res):
    c = res["cairn"]
    m = {x: get(c, x, "mount") for x in MODES}
    if not any(m.values()):
        return "## 1. The seed's dd through a real mount\n\nNot run: " + res["meta"].get("mount_skipped", "?") + "\n"
    s = "## 1. The seed's dd through a real mount\n\n"
    s += ("`time dd if=/dev/urandom of=MNT/file bs=2M count=10`, three times in a row in one mount "
          "(`cairn mount IMG MNT -o mb_optimize_scan=X`, fuseblk as root) of a fresh copy of the fragmented image. Wall time of dd alone (the seed's measure):\n\n")
    s += HEAD
    for i in range(3):
        s += f"| {ORD[i]} run | " + " | ".join(secs(get(m[x], "runs", i, "dd_seconds")) for x in MODES) + " |\n"
    u = res.get("urandom_seconds")
    s += "| groups considered, all criteria (`alloc.mb.crN.groups_considered`) | " + " | ".join(
        " / ".join(dash(considered(r.get("delta"), CAIRN_CONSIDERED)) for r in (get(m[x], "runs") or [])) or "-"
        for x in MODES) + " |\n"
    s += (f"\n`dd if=/dev/urandom of=/dev/null bs=2M count=10` alone takes {secs(u)} here: that much of each "
          "run is the random source, not the file system.\n\n")
    s += HEAD
    s += "| `cairn mount` (returns when mounted and answering) | " + " | ".join(
        secs(get(m[x], "mount_seconds")) for x in MODES) + " |\n"
    s += "| daemon VmRSS after mount | " + " | ".join(mib(get(m[x], "rss_after_mount")) for x in MODES) + " |\n"
    s += "| daemon VmRSS after the 3 runs (VmHWM) | " + " | ".join(
        f"{mib(get(m[x], 'rss_after_runs'))} ({mib(get(m[x], 'hwm_after_runs'))})" for x in MODES) + " |\n"
    s += "| `sync -f` after each run (untimed above) | " + " | ".join(
        " / ".join(secs(r.get("sync_seconds")) for r in (get(m[x], "runs") or [])) or "-" for x in MODES) + " |\n"
    s += "| `cairn umount` | " + " | ".join(secs(get(m[x], "umount_seconds")) for x in MODES) + " |\n\n"
    s += "Allocator counters, difference over each run (dd and its `sync -f`):\n\n"
    parts = [(f"={x} run {i + 1}", get(m[x], "runs", i, "delta")) for x in MODES for i in range(3)]
    s += counters_table(parts, OLD_KEYS + MB_KEYS)
    return s


def loops_section(res):
    c = res["cairn"]
    z = {x: get(c, x, "dd_zero") for x in MODES}
    s = "## 2. Useless loops (the seed's second table)\n\n"
    if not any(z.values()):
        return s + "Not run: " + res["meta"].get("mount_skipped", "?") + "\n"
    s += ("`dd if=/dev/zero of=MNT/file bs=2M count=2 conv=fsync` on a fresh copy, through a mount; the counters' "
          "difference over the dd (`alloc.mb.crN.useless_loops`: criterion N found nothing and passed on):\n\n")
    s += HEAD
    for name, key in cairn_loop_names():
        s += f"| useless_{name}_loops | " + " | ".join(dash(get(z[x], "delta", key)) for x in MODES) + " |\n"
    for cr in range(4):
        key = f"alloc.mb.cr{cr}.groups_considered"
        s += f"| groups considered, cr{cr} | " + " | ".join(dash(get(z[x], "delta", key)) for x in MODES) + " |\n"
    for key in ("alloc.calls", "alloc.groups_scanned"):
        s += f"| `{key}` (today's allocator) | " + " | ".join(dash(get(z[x], "delta", key)) for x in MODES) + " |\n"
    s += "| dd time | " + " | ".join(secs(get(z[x], "dd_seconds")) for x in MODES) + " |\n\n"
    s += "As the seed prints them:\n\n```\n"
    s += seed_loops_text("Without optimizations", get(z["0"], "delta"), cairn_loop_names()) + "\n\n"
    s += seed_loops_text("With optimizations", get(z["1"], "delta"), cairn_loop_names()) + "\n```\n"
    return s


def engine_section(res):
    e = {x: get(res["cairn"], x, "engine") for x in MODES}
    s = "## 3. The engine alone (`cairn-bench-driver dd`)\n\n"
    s += ("`cairn-bench-driver dd IMG --path file --bs 2M --count 10 --repeat 3 -o mb_optimize_scan=X` on a fresh copy: "
          "the engine mounted in-process (no FUSE, no kernel), xorshift data generated outside the timed region; "
          "seconds of the file-system calls per run:\n\n")
    s += HEAD
    s += "| mount (`Fs::mount`) | " + " | ".join(secs(get(e[x], "mount_seconds")) for x in MODES) + " |\n"
    for i in range(3):
        s += f"| {ORD[i]} run | " + " | ".join(secs(get(e[x], "runs", i, "seconds")) for x in MODES) + " |\n"
    s += "| unmount | " + " | ".join(secs(get(e[x], "unmount_seconds")) for x in MODES) + " |\n\n"
    parts = [(f"={x} run {i + 1}", get(e[x], "runs", i, "delta")) for x in MODES for i in range(3)]
    s += "Allocator counters, difference over each run:\n\n" + counters_table(parts, OLD_KEYS + MB_KEYS)
    return s


def ext4_section(res):
    x4 = res.get("ext4")
    s = "## 4. Kernel ext4, for comparison (a different, smaller size)\n\n"
    if not x4 or x4.get("skipped"):
        return s + "Not run: " + (x4 or {}).get("skipped", "not requested") + ".\n"
    p = x4["prepare"]
    ff = p.get("freefrag", {})
    small = sum(r["percent"] for r in ff.get("histogram", []) if size_bytes(r["range"].split("...")[-1]) <= 2 << 20)
    s += (f"**ext4, {x4['size']}** ({p['groups']:,} groups of 128 MiB), on a loop device over a sparse file in the "
          f"same tmpfs; `mkfs.ext4 -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard`, mounted "
          f"`-o mb_optimize_scan=X,noinit_itable`. Fragmented by fallocating files over the free space and "
          f"punching every other MiB of them ({p['holes']:,} holes, {p['punch_seconds']:.1f} s). e2freefrag after: "
          f"largest free extent {ff.get('max_free_extent_kib', '?')} KiB, {small:.2f}% of the free space in "
          f"extents of at most 2 MiB. Not the cairn image's size: compare shapes, not absolute times.\n\n")
    a = {m: get(x4, "mount", m) for m in MODES}
    s += "ext4 — the seed's dd, three times in a row in one mount (dd wall time; then `sync -f`, untimed):\n\n"
    s += HEAD
    s += "| mount | " + " | ".join(secs(get(a[m], "mount_seconds")) for m in MODES) + " |\n"
    for i in range(3):
        s += f"| {ORD[i]} run | " + " | ".join(
            f"{secs(get(a[m], 'runs', i, 'dd_seconds'))} (+ sync {secs(get(a[m], 'runs', i, 'sync_seconds'))})"
            for m in MODES) + " |\n"
    s += "| groups considered, all criteria | " + " | ".join(
        " / ".join(dash(considered(r.get("delta"), CRITERIA_KEYS)) for r in (get(a[m], "runs") or [])) or "-"
        for m in MODES) + " |\n"
    names = [(n, f"{n}.useless_loops") for n, _, _ in CRITERIA]
    z = {m: get(x4, "dd_zero", m) for m in MODES}
    s += ("\next4 — useless loops for `dd if=/dev/zero bs=2M count=2 conv=fsync` "
          "(/proc/fs/ext4/DEV/mb_stats, difference over the dd; c1.5 is the kernel's newer best_avail criterion):\n\n")
    s += HEAD
    for n, key in names:
        s += f"| useless_{n}_loops | " + " | ".join(dash(get(z[m], "delta", key)) for m in MODES) + " |\n"
    for n, _ in names:
        key = f"{n}.groups_considered"
        s += f"| groups considered, {n} | " + " | ".join(dash(get(z[m], "delta", key)) for m in MODES) + " |\n"
    s += "| dd time | " + " | ".join(secs(get(z[m], "dd_seconds")) for m in MODES) + " |\n\n"
    s += "```\n" + seed_loops_text("ext4 without optimizations", get(z["0"], "delta"), names) + "\n\n"
    s += seed_loops_text("ext4 with optimizations", get(z["1"], "delta"), names) + "\n```\n"
    return s


def write(outdir, res):
    os.makedirs(outdir, exist_ok=True)
    meta = res["meta"]
    pr = res.get("prepare", {})
    s = f"# Seed 002 on cairn: 2 MiB writes on a fragmented {meta['size']} file system\n\n"
    s += (f"{meta['date']}, {meta['machine']}; cairn {meta['cairn_version']}; `{meta['command']}`; "
          f"{meta.get('wall_seconds', 0)} s in all.\n\n")
    s += (f"Image: `cairn mkfs --size {meta['size']}` ({pr.get('groups', 0):,} groups of "
          f"{pr.get('group_bytes', 0) >> 20} MiB), sparse, in a private tmpfs; `cairn-bench-driver fragment` "
          f"(every other MiB of every group marked used; {pr.get('fragment_seconds', 0):.1f} s) left "
          f"{human(pr.get('free_bytes'))} free in 1 MiB runs and no free 2 MiB run; it holds "
          f"{human(pr.get('bytes_on_disk'))} of metadata. Every measurement starts from a fresh "
          f"`cp --sparse=always` of it ({pr.get('copy_seconds', 0):.1f} s per copy).\n\n")
    if not meta.get("has_mb_counters"):
        s += ("**This build publishes no `alloc.mb.*` counters**: the buddy allocator has not landed, so the "
              "times below are those of today's allocator (a walk of the group bitmaps from the goal, first fit, "
              "which takes the first 1 MiB hole it meets and never looks for a 2 MiB run), `mb_optimize_scan` "
              "changes nothing yet, and every `alloc.mb.*` cell is \"-\" (not measured, not zero).\n\n")
    for n in meta.get("notes", []):
        s += f"- {n}\n"
    if meta.get("notes"):
        s += "\n"
    s += mount_section(res) + "\n" + loops_section(res) + "\n" + engine_section(res) + "\n" + ext4_section(res)
    s += "\n## Reference\n\n" + SEED + "\n\nRaw numbers: `results.json`.\n"
    path = os.path.join(outdir, "report.md")
    with open(path, "w") as f:
        f.write(s)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    return path
