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
import subprocess
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
    # Issue #53: big files and extended attributes.
    ("bigwrite", "MB/s", "{big} written + fsync (dd bs=1M conv=fsync)"),
    ("bigread", "MB/s", "{big} read cold (dd bs=1M)"),
    ("par4read", "MB/s", "4 × {big} read cold by 4 readers at once"),
    ("setxattr", "ops/s", "setxattr (2 processes, {xfiles} files, 200 B values)"),
    ("getxattr", "ops/s", "getxattr of the same"),
]

# Phases whose requests are counted per operation (files, entries, xattr
# calls); the big-file phases are counted per MiB instead (BYTES).
PER_OP = ["create", "walk", "stat", "unlink", "setxattr", "getxattr"]
# Big-file phase -> the request that moves its bytes: requests per MiB and
# the mean request size (KiB) come from the servers' counters.
BYTES = {"bigwrite": "write", "bigread": "read", "par4read": "read"}

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


def big(v):
    """A big file's size as said in the tables: "1 GiB", "256 MiB"."""
    return f"{v['big_mib'] >> 10} GiB" if v["big_mib"] % 1024 == 0 else f"{v['big_mib']} MiB"


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
    extra_fs = [fsmod.NULLFS, fsmod.NULLFS_DATA, "cairn-loop"]
    metrics = [Metric(k, unit, True, label.format(big="1 GiB", xfiles="N")) for k, unit, label in PHASES] + [
        Metric(f"{k}_reqs", "requests", False, f"FUSE requests per {k}", table=False) for k in PER_OP
    ] + [
        Metric(f"{k}_server_us", "µs", False, f"time inside the server per {k}", table=False) for k in PER_OP
    ] + [
        Metric(f"{k}_req_kib", "KiB", True, f"mean {op.upper()} request in {k}", table=False)
        for k, op in BYTES.items()
    ] + [
        Metric(f"{k}_server_us", "µs", False, f"time inside the server per MiB in {k}", table=False)
        for k in BYTES
    ] + [Metric(CACHE[0], CACHE[1], False, CACHE[2], table=False)]

    # The xattr phases: each process sets `user.bench` (200 bytes, one of
    # ten values) on each of its files in turn, ROUNDS times; then reads it
    # back as often, through libc with a 4 KiB buffer (Python's os.getxattr
    # tries 128 bytes first: two GETXATTRs for a 200-byte value). It times
    # itself from a shared start (`time.time()`), so Python's start-up is not
    # in the rate. Process k runs on CPU k (mod the CPUs): unpinned, the rate
    # of either server jumped between about 22,000 and 55,000 calls/s from
    # one run to the next with where the scheduler put the two (2026-12-02).
    XATTR_PROG = (
        "import ctypes,os,sys,time\n"
        "d, rounds, start, op = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]\n"
        "os.sched_setaffinity(0, {int(sys.argv[5]) % os.cpu_count()})\n"
        "names = [os.path.join(d, n).encode() for n in sorted(os.listdir(d))]\n"
        "vals = [b'%d-' % i + bytes(198) for i in range(10)]\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "buf = ctypes.create_string_buffer(4096)\n"
        "while time.time() < start: time.sleep(0.001)\n"
        "t0 = time.time()\n"
        "for r in range(rounds):\n"
        "    for i, p in enumerate(names):\n"
        "        if op == 'set': os.setxattr(p, b'user.bench', vals[(i + r) % 10])\n"
        "        elif libc.getxattr(p, b'user.bench', buf, 4096) != 200:\n"
        "            sys.exit('getxattr: %d' % ctypes.get_errno())\n"
        "print(t0, time.time())\n"
    )

    def variants(self, quick):
        return [{"label": "2 threads", "threads": 2, "files": 10_000 if quick else 100_000,
                 "read_mib": 128 if quick else 512, "big_mib": 256 if quick else 1024,
                 "xfiles": 1_000 if quick else 10_000, "xrounds": 10}]

    def fs_size(self, quick):
        # The four big files, the 512 MiB one and room to spare.
        return (4 * self.variants(quick)[0]["big_mib"] << 20) + (2 << 30)

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
            "µs inside the server per operation come from each server's counters. "
            f"Issue #53's phases: a file of {big(v)} written and fsync'd (`dd if=/dev/zero bs=1M "
            f"count={v['big_mib']} conv=fsync`), read back cold (`dd bs=1M` after a remount and drop_caches); three "
            "more written alike (untimed), then all four read cold at once by four `dd bs=1M` (MB/s: the bytes of "
            f"all four over the time until the last ends); then {v['xfiles']:,} empty files in two directories "
            "(untimed), one process per directory (process k pinned to CPU k) setting `user.bench` (200 bytes, one of "
            f"10 values) on each of its files in turn, {v['xrounds']} rounds (`os.setxattr`: a SETXATTR and, the kernel's ctime update under "
            "the writeback cache, a SETATTR), then reading it back as often (libc `getxattr` with a 4 KiB buffer, "
            "one GETXATTR): "
            "calls per second from the two processes' shared start to the last one's end. The null server keeps "
            "the extended attributes it is given (in memory). For the big-file phases the servers' counters give "
            "the mean READ or WRITE request (KiB) and µs inside the server per MiB. `nullfs-data` is the null "
            "server keeping file bytes in a file in the scratch tmpfs (`--data`: pwrite in, pread out), the floor "
            "of a server that must move its bytes, as cairn moves them through its image: `nullfs` answers "
            "READs with zeros and copies nothing."
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
        os.unlink(p)
        res.update(self.run_big(fs, v, counters if server else None))
        res.update(self.run_xattr(fs, v, counters if server else None))
        return res

    def run_big(self, fs, v, counters):
        """Issue #53: a big file written + fsync'd, read cold; four read cold
        at once. Returns MB/s per phase and, for a server, its requests."""
        res = {}
        mib = v["big_mib"]
        paths = [os.path.join(fs.mp, f"big{i}") for i in range(4)]

        def dd_write(p):
            return ["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={mib}", "conv=fsync"]

        def budget(key, a, b, mib_moved):
            if counters is None:
                return
            op = BYTES[key]
            reqs = b.get(f"fuse.{op}.requests", 0) - a.get(f"fuse.{op}.requests", 0)
            res[f"{key}_req_kib"] = mib_moved * 1024 / reqs if reqs else None
            us = sum(x - a.get(k, 0) for k, x in b.items() if k.endswith(".reply_us_total"))
            res[f"{key}_server_us"] = us / mib_moved

        c0 = counters() if counters else {}
        t0 = time.time()
        run(dd_write(paths[0]), capture_output=True)
        res["bigwrite"] = mib * 1.048576 / (time.time() - t0)
        budget("bigwrite", c0, counters() if counters else {}, mib)
        fs.remount_cold()
        c0 = counters() if counters else {}
        t0 = time.time()
        run(["dd", f"if={paths[0]}", "of=/dev/null", "bs=1M"], capture_output=True)
        res["bigread"] = mib * 1.048576 / (time.time() - t0)
        budget("bigread", c0, counters() if counters else {}, mib)
        for p in paths[1:]:
            run(dd_write(p), capture_output=True)
        fs.remount_cold()
        c0 = counters() if counters else {}
        res["par4read"] = 4 * mib * 1.048576 / run_parallel([["dd", f"if={p}", "of=/dev/null", "bs=1M", "status=none"]
                                                              for p in paths])
        budget("par4read", c0, counters() if counters else {}, 4 * mib)
        for p in paths:
            os.unlink(p)
        return res

    def run_xattr(self, fs, v, counters):
        """Issue #53: setxattr, then getxattr, by two processes on their own
        files. Returns calls/s per phase and, for a server, its requests."""
        res = {}
        dirs = [os.path.join(fs.mp, f"x{i}") for i in range(2)]
        per = v["xfiles"] // len(dirs)
        for d in dirs:
            os.mkdir(d)
            for i in range(per):
                # Not open(): its isatty() is an ioctl, which the null server logs.
                os.close(os.open(os.path.join(d, f"f{i:06d}"), os.O_CREAT | os.O_WRONLY, 0o644))
        calls = per * len(dirs) * v["xrounds"]
        for op in ("set", "get"):
            c0 = counters() if counters else {}
            start = time.time() + 0.5
            procs = [subprocess.Popen(["python3", "-c", self.XATTR_PROG, d, str(v["xrounds"]), str(start), op, str(k)],
                                      stdout=subprocess.PIPE, text=True) for k, d in enumerate(dirs)]
            outs = [p.communicate()[0] for p in procs]
            if any(p.returncode for p in procs):
                raise RuntimeError(f"{op}xattr: exited {[p.returncode for p in procs]}")
            spans = [tuple(map(float, o.split())) for o in outs]
            res[f"{op}xattr"] = calls / (max(b for _, b in spans) - min(a for a, _ in spans))
            if counters:
                res[f"{op}xattr_reqs"], res[f"{op}xattr_server_us"] = request_budget(c0, counters(), calls)
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
            data_floor = fsmod.NULLFS_DATA if fsmod.NULLFS_DATA in shown else None
            md += [
                f"**{lab}** (medians of runs): cairn beside the floor (`nullfs`"
                + ("; `nullfs-data`: the floor moving its bytes through a file" if data_floor else "")
                + ") and beside ext4",
                "",
                "| phase | " + " | ".join(shown) + " | cairn / floor |"
                + (" cairn / nullfs-data |" if data_floor else "") + " cairn / ext4 |",
                "|---|" + "---|" * (len(shown) + 2 + bool(data_floor)),
            ]
            for key, unit, label in PHASES:
                label = label.format(big=big(v), xfiles=f"{v['xfiles']:,}")
                c = med(lab, "cairn", key)
                row = [f(med(lab, x, key), 1 if unit == "MB/s" else 0) for x in shown]
                md.append(f"| {label} ({unit}) | " + " | ".join(row) + " | "
                          f"{ratio(c, med(lab, floor, key)) if floor else '—'} | "
                          + (f"{ratio(c, med(lab, data_floor, key))} | " if data_floor else "")
                          + f"{ratio(c, med(lab, 'ext4', key))} |")
            key, unit, label = CACHE
            md.append(f"| {label} ({unit}, lower is better) | " + " | ".join(f(med(lab, x, key)) for x in shown)
                      + " | — |" + (" — |" if data_floor else "") + " — |")
            servers = [x for x in shown if fsmod.is_cairn(x) or x in fsmod.NULL_SERVERS]
            md += [
                "",
                "Requests per operation and µs inside the server per operation (each server's counters):",
                "",
                "| phase | " + " | ".join(f"{x} requests | {x} µs" for x in servers) + " |",
                "|---|" + "---|---|" * len(servers),
            ]
            for key, _, label in PHASES:
                label = label.format(big=big(v), xfiles=f"{v['xfiles']:,}")
                if key not in PER_OP:
                    continue
                cols = []
                for x in servers:
                    cols += [f(med(lab, x, f"{key}_reqs"), 2), f(med(lab, x, f"{key}_server_us"), 1)]
                md.append(f"| {label} | " + " | ".join(cols) + " |")
            md += [
                "",
                "Big files: the mean READ or WRITE request (KiB) and µs inside the server per MiB (each server's "
                "counters):",
                "",
                "| phase | " + " | ".join(f"{x} KiB/request | {x} µs/MiB" for x in servers) + " |",
                "|---|" + "---|---|" * len(servers),
            ]
            for key, _, label in PHASES:
                if key not in BYTES:
                    continue
                label = label.format(big=big(v), xfiles=f"{v['xfiles']:,}")
                cols = []
                for x in servers:
                    cols += [f(med(lab, x, f"{key}_req_kib")), f(med(lab, x, f"{key}_server_us"))]
                md.append(f"| {label} | " + " | ".join(cols) + " |")
            md.append("")
        return md
