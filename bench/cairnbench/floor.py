"""The FUSE floor (issue #37): cairn beside a null FUSE server on the same
transport, and beside the kernel file systems, in one run.

`nullfs` (`cairn-bench-driver nullfs`) is cairn's own transport, INIT, mount
options and TTLs with nothing behind them, so its rates are what FUSE alone
allows on this machine; cairn / nullfs says how far cairn is from that floor,
cairn / ext4 how far from the kernel. Requests per operation come from both
servers' counters (`cairn stats`, the null server's root xattr), so the
difference in requests and in time inside the server is visible per phase.
"""

import os
import re
import statistics
import time

from . import fs as fsmod
from .experiments import Experiment, Metric, fsmark_empty_files, request_budget, run_parallel
from .fs import run

PHASES = [
    ("create", "files/s", "create (fs_mark, 2 threads)"),
    ("stat", "files/s", "warm stat (find again)"),
    ("walk", "entries/s", "cold walk (find, caches dropped)"),
    ("unlink", "files/s", "unlink (rm -rf, 2 trees)"),
    ("read", "MB/s", "cold 1 MiB reads of a 512 MiB file"),
]

# Page cache grown by the cold read, MiB per GiB read (lower is better: one
# copy of each byte is 1,024).
CACHE = ("read_cache", "MiB/GiB", "page cache grown per GiB read cold")


def page_cache_kib():
    """The host's page cache, KiB: files' pages (`Cached:` in /proc/meminfo)
    and block devices' (`Buffers:`, where a loop device's pages go)."""
    seen = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            seen[key] = int(value.split()[0])
    return seen["Cached"] + seen["Buffers"]


class Floor(Experiment):
    name = "floor"
    seed = "— (issue #37)"
    title = "The FUSE floor: cairn beside a null FUSE server on cairn's own transport"
    tools = [("fs_mark", "fsmark")]
    # cairn serves its image file, as a user runs it and as the other
    # experiments beside user-space peers do: the null server has no device,
    # and a loop device would add a layer that is neither cairn nor the
    # transport (its block-device page cache, a second copy, a kworker per
    # read). `cairn-loop` measures cairn on the loop device beside it.
    cairn_on = "file"
    extra_fs = [fsmod.NULLFS, "cairn-loop"]
    metrics = [Metric(k, unit, True, label) for k, unit, label in PHASES] + [
        Metric(f"{k}_reqs", "requests", False, f"FUSE requests per {k.split('_')[0]}", table=False)
        for k, _, _ in PHASES if k != "read"
    ] + [
        Metric(f"{k}_server_us", "µs", False, f"time inside the server per {k}", table=False)
        for k, _, _ in PHASES if k != "read"
    ] + [Metric(CACHE[0], CACHE[1], False, CACHE[2], table=False)]

    def variants(self, quick):
        return [{"label": "2 threads", "threads": 2, "files": 10_000 if quick else 100_000,
                 "read_mib": 128 if quick else 512}]

    def describe(self, quick):
        v = self.variants(quick)[0]
        per = v["files"] // v["threads"]
        return (
            f"{v['files']:,} empty files by `fs_mark -S 0 -s 0 -L 1 -D 100 -N {per // 100} -n {per}` in two "
            "trees (one thread each); the cold walk (every cache dropped: cairn and ext4 remount, the null "
            "server keeps its tree and only the kernel's caches are dropped; `find -printf '%y %s'`, one "
            "process per tree); a warm stat (the same `find` again at once: with cairn's 60 s TTLs no FUSE "
            "server sees a request, so this is the kernel's cost); a parallel `rm -rf` per tree; and a file of "
            f"{v['read_mib']} MiB written (`dd bs=1M conv=fsync`) and read back cold with `dd bs=1M`, with the growth "
            "of the host's page cache (`Cached:` plus `Buffers:` in /proc/meminfo) during that read, per GiB read (1,024 MiB is one "
            "copy of each byte; `cairn-nodirect`, `-o direct_data=0`, reads the image through the host's page cache). "
            "cairn serves its image file (`cairn mount IMG MP`, as a user runs it); `cairn-loop` is cairn on a loop "
            "device over its image, as the kernel file systems are. "
            "`nullfs` is `cairn-bench-driver nullfs`: cairn's vendored fuser, transport (FUSE over io_uring), "
            "threads, INIT flags, mount options (default_permissions) and TTLs, OPEN/OPENDIR/FLUSH answered "
            "ENOSYS as cairn does, a tree in hash maps and no file bytes (reads answer zeros). Requests and "
            "µs inside the server per operation come from each server's counters."
        )

    def run(self, fs, v):
        n, th = v["files"], v["threads"]
        per = n // th
        dirs = [os.path.join(fs.mp, str(i)) for i in range(th)]
        cmd = fsmark_empty_files(dirs, per)
        server = fs.is_cairn or fs.is_null
        counters = fs.cairn_counters if server else (lambda: {})
        res = {}
        c0 = counters()
        r = run(cmd, capture_output=True, text=True, cwd=fs.scratch.path)
        rows = [ln.split() for ln in r.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d+\s+[\d.]+", ln)]
        if not rows:
            raise RuntimeError("fs_mark printed no result row:\n" + r.stdout[-2000:] + r.stderr[-2000:])
        res["create"] = float(rows[-1][3])
        c1 = counters()
        walked = n + th * 101
        fs.remount_cold()
        c2 = counters()
        res["walk"] = walked / run_parallel([["find", d, "-printf", "%y %s\n"] for d in dirs])
        c3 = counters()
        res["stat"] = walked / run_parallel([["find", d, "-printf", "%y %s\n"] for d in dirs])
        c4 = counters()
        res["unlink"] = n / run_parallel([["rm", "-rf", d] for d in dirs])
        c5 = counters()
        if server:
            for phase, a, b, count in [("create", c0, c1, n), ("walk", c2, c3, walked), ("stat", c3, c4, walked),
                                       ("unlink", c4, c5, n)]:
                res[f"{phase}_reqs"], res[f"{phase}_server_us"] = request_budget(a, b, count)
        p = os.path.join(fs.mp, "big")
        run(["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={v['read_mib']}", "conv=fsync"], capture_output=True)
        fs.remount_cold()
        cached0 = page_cache_kib()
        t0 = time.time()
        run(["dd", f"if={p}", "of=/dev/null", "bs=1M"], capture_output=True)
        res["read"] = v["read_mib"] * 1.048576 / (time.time() - t0)
        res["read_cache"] = (page_cache_kib() - cached0) / 1024 / (v["read_mib"] / 1024)
        return res

    def summary(self, cells, fs_order, quick):
        def med(label, fsname, key):
            vals = [r.get(key) for r in cells.get((self.name, label, fsname), []) if "error" not in r]
            vals = [x for x in vals if x is not None]
            return statistics.median(vals) if vals else None

        def f(x, nd=0):
            return "—" if x is None else f"{x:,.{nd}f}"

        def ratio(a, b):
            return f"{a / b:.2f}×" if a and b else "—"

        md = []
        for v in self.variants(quick):
            lab = v["label"]
            shown = [x for x in fs_order if cells.get((self.name, lab, x))]
            if "cairn" not in shown:
                continue
            floor = fsmod.NULLFS if fsmod.NULLFS in shown else None
            md += [
                f"**{lab}** (medians of runs): cairn beside the floor (`nullfs`) and beside ext4",
                "",
                "| phase | " + " | ".join(shown) + " | cairn / floor | cairn / ext4 |",
                "|---|" + "---|" * (len(shown) + 2),
            ]
            for key, unit, label in PHASES:
                c = med(lab, "cairn", key)
                row = [f(med(lab, x, key), 1 if unit == "MB/s" else 0) for x in shown]
                md.append(f"| {label} ({unit}) | " + " | ".join(row) + " | "
                          f"{ratio(c, med(lab, floor, key)) if floor else '—'} | {ratio(c, med(lab, 'ext4', key))} |")
            key, unit, label = CACHE
            md.append(f"| {label} ({unit}, lower is better) | " + " | ".join(f(med(lab, x, key)) for x in shown)
                      + " | — | — |")
            servers = [x for x in shown if fsmod.is_cairn(x) or x == fsmod.NULLFS]
            md += [
                "",
                "Requests per operation and µs inside the server per operation (each server's counters):",
                "",
                "| phase | " + " | ".join(f"{x} requests | {x} µs" for x in servers) + " |",
                "|---|" + "---|---|" * len(servers),
            ]
            for key, _, label in PHASES:
                if key == "read":
                    continue
                cols = []
                for x in servers:
                    cols += [f(med(lab, x, f"{key}_reqs"), 2), f(med(lab, x, f"{key}_server_us"), 1)]
                md.append(f"| {label} | " + " | ".join(cols) + " |")
            md.append("")
        return md
