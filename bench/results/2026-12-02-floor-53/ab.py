#!/usr/bin/env python3
"""Issue #53's floor phases, A/B in one run, without a global cache drop.

Runs the floor experiment's big-file and xattr phases (`Floor.run_big`,
`Floor.run_xattr` from bench/cairnbench/floor.py) on cairn and the null
server, each from two builds (NEW and OLD: `cairn` and `cairn-bench-driver`
side by side in each directory), repetitions interleaved with a rotated
order. The floor experiment drops every cache of the host
(/proc/sys/vm/drop_caches) before a cold read; this machine is shared, so
here a "cold" read is made cold per file instead: cairn remounts (its FUSE
inodes and page cache go with the mount; its image is in a tmpfs in both
cases), and the null server, whose tree lives only in it, gets
posix_fadvise(DONTNEED) on each big file (its clean pages leave the cache).

    sudo python3 ab.py NEW_DIR OLD_DIR [--third DIR] [--reps 3] [--big 256] [--xfiles 1000]
                       [--phases big,xattr] [--only cairn-new,cairn-old,nullfs-new,nullfs-old]
                       [--out results.json]

Besides each phase's rate it records the server's CPU (user + system, every
thread, from /proc/PID/stat) per MiB or per 1,000 calls: on a loaded machine
the rates swing, the CPU per unit much less.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

from cairnbench import fs as fsmod  # noqa: E402
from cairnbench.experiments import run_parallel  # noqa: E402
from cairnbench.floor import Floor  # noqa: E402

MOUNTED = []


def drop_file_caches():
    """sync, then drop the clean pages of the big files on the mounts still
    mounted (the null server's: cairn's mount is down when this runs)."""
    os.sync()
    for mp in MOUNTED:
        if not fsmod.is_mounted(mp):
            continue
        for name in os.listdir(mp):
            p = os.path.join(mp, name)
            if name.startswith("big") and os.path.isfile(p):
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


fsmod.drop_caches = drop_file_caches

KEYS = ["bigwrite", "bigread", "par4read", "setxattr", "getxattr"]


def cpu_s(pid):
    """CPU seconds (user + system, every thread) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fs, res, key, units, fn):
    """Runs `fn`; records its rate (units per second) under `key` and the
    server's CPU per unit (ms) under `key`_cpu_ms."""
    pid = fs.daemon_pid()
    c0, t0 = cpu_s(pid), time.time()
    fn()
    t1, c1 = time.time(), cpu_s(pid)
    res[key] = units / (t1 - t0)
    res[f"{key}_cpu_ms"] = (c1 - c0) * 1000 / units


def run_cell(fs, v, phases):
    """The floor's issue #53 phases (as `Floor.run_big` and `run_xattr`),
    each also giving the server's CPU per MiB or per 1,000 calls."""
    res = run_big(fs, v) if "big" in phases else {}
    if "xattr" in phases:
        res.update(run_xattr(fs, v))
    return res


def run_big(fs, v):
    """The big-file phases: write + fsync, cold read, four cold readers."""
    res, mib = {}, v["big_mib"]
    paths = [os.path.join(fs.mp, f"big{i}") for i in range(4)]

    def dd_write(p):
        return ["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={mib}", "conv=fsync", "status=none"]

    def dd_read(p):
        return ["dd", f"if={p}", "of=/dev/null", "bs=1M", "status=none"]

    timed(fs, res, "bigwrite", mib * 1.048576, lambda: fsmod.run(dd_write(paths[0])))
    fs.remount_cold()
    timed(fs, res, "bigread", mib * 1.048576, lambda: fsmod.run(dd_read(paths[0])))
    for p in paths[1:]:
        fsmod.run(dd_write(p))
    fs.remount_cold()
    timed(fs, res, "par4read", 4 * mib * 1.048576, lambda: run_parallel([dd_read(p) for p in paths]))
    for p in paths:
        os.unlink(p)
    return res


def run_xattr(fs, v):
    """setxattr, then getxattr, by two processes on their own files."""
    res = {}
    dirs = [os.path.join(fs.mp, f"x{i}") for i in range(2)]
    per = v["xfiles"] // 2
    for d in dirs:
        os.mkdir(d)
        for i in range(per):
            os.close(os.open(os.path.join(d, f"f{i:06d}"), os.O_CREAT | os.O_WRONLY, 0o644))
    calls = per * 2 * v["xrounds"]
    for op in ("set", "get"):
        def go(op=op):
            start = time.time() + 0.2
            procs = [subprocess.Popen(["python3", "-c", Floor.XATTR_PROG, d, str(v["xrounds"]), str(start), op,
                                       str(k)], stdout=subprocess.PIPE, text=True) for k, d in enumerate(dirs)]
            for p in procs:
                p.communicate()
                if p.returncode:
                    raise RuntimeError(f"{op}xattr exited {p.returncode}")
        timed(fs, res, f"{op}xattr", calls / 1000, go)
        res[f"{op}xattr"] *= 1000
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("new")
    ap.add_argument("old")
    ap.add_argument("--third", default=None, help="a third build's directory (cell cairn-third)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--big", type=int, default=256)
    ap.add_argument("--xfiles", type=int, default=1000)
    ap.add_argument("--only", default="cairn-new,cairn-old,nullfs-new,nullfs-old")
    ap.add_argument("--phases", default="big,xattr")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    cells = {
        "cairn-new": ("cairn", os.path.join(a.new, "cairn")),
        "cairn-old": (fsmod.BASELINE, os.path.join(a.old, "cairn")),
        "nullfs-new": (fsmod.NULLFS, os.path.join(a.new, "cairn")),
        "nullfs-old": (fsmod.NULLFS, os.path.join(a.old, "cairn")),
    }
    if a.third:
        cells["cairn-third"] = (fsmod.BASELINE, os.path.join(a.third, "cairn"))
    order = [c for c in a.only.split(",")]
    v = {"big_mib": a.big, "xfiles": a.xfiles, "xrounds": 10}
    scratch = fsmod.Scratch(f"{4 * a.big + 1024}M")
    results = {c: [] for c in order}
    try:
        for r in range(a.reps):
            for c in order[r % len(order):] + order[: r % len(order)]:
                name, binary = cells[c]
                fs = fsmod.FileSystem(name, scratch, binary, (4 * a.big << 20) + (1 << 30), cairn_on="file")
                MOUNTED[:] = [fs.mp]
                fs.make()
                try:
                    res = run_cell(fs, v, a.phases.split(","))
                finally:
                    fs.teardown()
                results[c].append(res)
                print(r, c, {k: round(x, 2) for k, x in res.items()}, flush=True)
    finally:
        scratch.teardown()
    keys = [k for k in KEYS if any(k in x for c in order for x in results[c])]
    print()
    print("| phase | " + " | ".join(order) + " |")
    print("|---|" + "---|" * len(order))
    for k in keys + [f"{k}_cpu_ms" for k in keys]:
        row = []
        for c in order:
            xs = [x.get(k) for x in results[c] if x.get(k) is not None]
            nd = 2 if k.endswith("_cpu_ms") else 0
            row.append(f"{statistics.median(xs):,.{nd}f} ({min(xs):,.{nd}f}–{max(xs):,.{nd}f})" if xs else "—")
        print(f"| {k} | " + " | ".join(row) + " |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
