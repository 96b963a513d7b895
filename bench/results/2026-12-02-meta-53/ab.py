#!/usr/bin/env python3
"""Issue #53's last bullet, A/B in one run: fs_mark's create (2 threads, 100
directories each) and `rm -rf` on cairn from two builds beside the null
server and ext4; dbench (1 client, `sync` every 4 s); a loop of
create-write-fsync (`fsyncloop`); and a 256 MiB `dd conv=fsync` (`bigwrite`).

    sudo python3 ab.py NEW_DIR OLD_DIR [--reps 3] [--per 25000] [--dbench-time 30]
                       [--only cairn-new,cairn-old,nullfs,ext4,cairn-nowritestep]
                       [--what fsmark,dbench,fsyncloop,bigwrite] [--out results.json]

`--dbench-time` is also the fsync loop's length. The cell `cairn-nowritestep`
(NEW_DIR's build with `-o write_step_kib=0`) needs the fs.py variant of commit
40353fa, which was reverted.

NEW_DIR and OLD_DIR each hold `cairn` and `cairn-bench-driver` of one build.
Cells are made fresh (mkfs, mount) for every repetition, interleaved in a
rotated order. Besides each phase's rate it records the server's CPU (user +
system, every thread, /proc/PID/stat) per file (µs) for fs_mark, and per
second of dbench: on a shared machine the rates swing, the CPU per unit much
less. fs_mark runs as the floor experiment runs it
(`cairnbench.experiments.fsmark_empty_files`: `-S 0 -s 0 -L 1 -D 100 -N
PER/100 -n PER`, one `-d` per thread).
"""

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

from cairnbench import fs as fsmod  # noqa: E402
from cairnbench.experiments import fsmark_empty_files, parse_dbench_ops, request_budget, run_parallel, DBENCH_LOAD  # noqa: E402


def cpu_s(pid):
    """CPU seconds (user + system, every thread) of process `pid` so far."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_fsmark(fs, per, threads=2):
    res = {}
    dirs = [os.path.join(fs.mp, str(i)) for i in range(threads)]
    n = per * threads
    server = fs.is_cairn or fs.is_null
    pid = fs.daemon_pid()
    c0 = fs.cairn_counters() if server else {}
    p0 = cpu_s(pid)
    r = fsmod.run(fsmark_empty_files(dirs, per), capture_output=True, text=True, cwd=fs.scratch.path)
    p1 = cpu_s(pid)
    rows = [ln.split() for ln in r.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d+\s+[\d.]+", ln)]
    res["create"] = float(rows[-1][3])
    res["create_cpu_us"] = (p1 - p0) * 1e6 / n
    if server:
        res["create_reqs"], res["create_server_us"] = request_budget(c0, fs.cairn_counters(), n)
    os.sync()
    p0 = cpu_s(pid)
    res["unlink"] = n / run_parallel([["rm", "-rf", d] for d in dirs])
    res["unlink_cpu_us"] = (cpu_s(pid) - p0) * 1e6 / n
    return res


def run_dbench(fs, secs):
    stop = threading.Event()

    def syncer():
        while not stop.wait(4):
            subprocess.run(["sync"])

    pid = fs.daemon_pid()
    t = threading.Thread(target=syncer, daemon=True)
    p0, t0 = cpu_s(pid), time.time()
    c0 = fs.cairn_counters() if fs.is_cairn else {}
    t.start()
    try:
        r = fsmod.run(["dbench", "-t", str(secs), "-c", DBENCH_LOAD, "-D", fs.mp, "1"], capture_output=True, text=True)
    finally:
        stop.set()
        t.join()
    wall = time.time() - t0
    m = re.search(r"Throughput ([\d.]+) MB/sec.*max_latency=([\d.]+) ms", r.stdout)
    ops = parse_dbench_ops(r.stdout)
    res = {"mbps": float(m.group(1)), "max_ms": float(m.group(2)), "cpu_cores": (cpu_s(pid) - p0) / wall}
    worst = max(ops.items(), key=lambda kv: kv[1]["max_ms"])
    res["worst_op"] = worst[0]
    for op in ("NTCreateX", "Close", "Rename", "Unlink", "Deltree", "Mkdir", "WriteX", "ReadX", "Flush", "Qpathinfo"):
        if op in ops:
            res[f"{op}_max_ms"] = ops[op]["max_ms"]
            res[f"{op}_avg_ms"] = ops[op]["avg_ms"]
    if fs.is_cairn:
        c1 = fs.cairn_counters()
        res["stats_delta"] = {k: v - c0.get(k, 0) for k, v in c1.items() if isinstance(v, (int, float))}
        res["stats_after"] = {k: v for k, v in c1.items() if "max" in k}
        res["commit_us_max"] = c1.get("journal.commit_us_max")
        res["commit_us_p99"] = c1.get("journal.commit_us_p99")
        res["gate_hold_us_max"] = c1.get("tx.gate_hold_us_max")
        res["gate_closed_us_max"] = c1.get("tx.gate_closed_us_max")
        res["steps"] = res["stats_delta"].get("tx.steps")
        res["commits"] = res["stats_delta"].get("journal.commits")
        res["write_backs"] = res["stats_delta"].get("ail.write_backs")
        res["early_write_backs"] = res["stats_delta"].get("ail.early_write_backs")
    return res


FSYNC_PROG = (
    "import os,sys,time,json\n"
    "d, secs = sys.argv[1], float(sys.argv[2])\n"
    "buf = b'x' * 4096\n"
    "lat = []\n"
    "end = time.time() + secs\n"
    "i = 0\n"
    "while time.time() < end:\n"
    "    p = os.path.join(d, 'f%d' % (i % 200))\n"
    "    t0 = time.perf_counter()\n"
    "    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)\n"
    "    os.write(fd, buf)\n"
    "    os.fsync(fd)\n"
    "    os.close(fd)\n"
    "    lat.append(time.perf_counter() - t0)\n"
    "    i += 1\n"
    "print(json.dumps(lat))\n"
)


def run_fsyncloop(fs, secs):
    """One process: create-or-truncate one of 200 files, write 4 KiB, fsync,
    close, for `secs` seconds; the latency of each round (ms)."""
    pid = fs.daemon_pid()
    p0, t0 = cpu_s(pid), time.time()
    c0 = fs.cairn_counters() if fs.is_cairn else {}
    r = fsmod.run(["python3", "-c", FSYNC_PROG, fs.mp, str(secs)], capture_output=True, text=True)
    wall = time.time() - t0
    lat = sorted(x * 1000 for x in json.loads(r.stdout))
    n = len(lat)
    res = {"ops": n / secs, "p50_ms": lat[n // 2], "p99_ms": lat[int(n * 0.99)], "p999_ms": lat[int(n * 0.999)],
           "max_ms": lat[-1], "over2ms": sum(x > 2 for x in lat), "over5ms": sum(x > 5 for x in lat),
           "cpu_us_per_op": (cpu_s(pid) - p0) * 1e6 / n, "wall": wall}
    if fs.is_cairn:
        c1 = fs.cairn_counters()
        res["commit_us_max"] = c1.get("journal.commit_us_max")
        res["write_backs"] = c1.get("ail.write_backs", 0) - c0.get("ail.write_backs", 0)
        res["early_write_backs"] = c1.get("ail.early_write_backs", 0) - c0.get("ail.early_write_backs", 0)
    return res


def run_bigwrite(fs, mib=256):
    """`dd if=/dev/zero bs=1M count=MIB conv=fsync` into a new file: MB/s and
    the server's CPU per MiB (ms)."""
    pid = fs.daemon_pid()
    c0 = fs.cairn_counters() if fs.is_cairn else {}
    p0, t0 = cpu_s(pid), time.time()
    fsmod.run(["dd", "if=/dev/zero", f"of={os.path.join(fs.mp, 'big')}", "bs=1M", f"count={mib}", "conv=fsync",
               "status=none"])
    t1 = time.time()
    res = {"mbps": mib * 1.048576 / (t1 - t0), "cpu_ms_per_mib": (cpu_s(pid) - p0) * 1000 / mib}
    if fs.is_cairn:
        c1 = fs.cairn_counters()
        res["steps"] = c1.get("tx.steps", 0) - c0.get("tx.steps", 0)
        res["gate_hold_us_max"] = c1.get("tx.gate_hold_us_max")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("new")
    ap.add_argument("old")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--per", type=int, default=25_000)
    ap.add_argument("--dbench-time", type=int, default=30)
    ap.add_argument("--only", default="cairn-new,cairn-old,nullfs,ext4")
    ap.add_argument("--what", default="fsmark,dbench", help="fsmark, dbench, fsyncloop, bigwrite")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    cells = {
        "cairn-new": ("cairn", os.path.join(a.new, "cairn")),
        "cairn-old": (fsmod.BASELINE, os.path.join(a.old, "cairn")),
        "nullfs": (fsmod.NULLFS, os.path.join(a.new, "cairn")),
        # The new build with `-o write_step_kib=0` (the variant in fs.py).
        "cairn-nowritestep": ("cairn-nowritestep", os.path.join(a.new, "cairn")),
        "ext4": ("ext4", os.path.join(a.new, "cairn")),
    }
    order = a.only.split(",")
    what = a.what.split(",")
    scratch = fsmod.Scratch("6G")
    results = {f"{w}:{c}": [] for w in what for c in order}
    try:
        for r in range(a.reps):
            for w in what:
                for c in order[r % len(order):] + order[: r % len(order)]:
                    if w in ("dbench", "fsyncloop", "bigwrite") and c == "nullfs":
                        continue  # the null server keeps no bytes: dbench's reads fail
                    name, binary = cells[c]
                    fs = fsmod.FileSystem(name, scratch, binary, 4 << 30, cairn_on="file")
                    fs.make()
                    try:
                        if w == "fsmark":
                            res = run_fsmark(fs, a.per)
                        elif w == "fsyncloop":
                            res = run_fsyncloop(fs, a.dbench_time)
                        elif w == "bigwrite":
                            res = run_bigwrite(fs)
                        else:
                            res = run_dbench(fs, a.dbench_time)
                    finally:
                        fs.teardown()
                    results[f"{w}:{c}"].append(res)
                    show = {k: (round(x, 2) if isinstance(x, float) else x) for k, x in res.items()
                            if not isinstance(x, dict)}
                    print(r, w, c, show, flush=True)
    finally:
        scratch.teardown()
    print()
    for w in what:
        cols = [c for c in order if results[f"{w}:{c}"]]
        keys = []
        for c in cols:
            for x in results[f"{w}:{c}"]:
                keys += [k for k, v in x.items() if isinstance(v, (int, float)) and k not in keys]
        print(f"{w}: median (min–max)\n")
        print("| metric | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for k in keys:
            row = []
            for c in cols:
                xs = [x[k] for x in results[f"{w}:{c}"] if isinstance(x.get(k), (int, float))]
                nd = 2 if (k.endswith("_ms") or k.endswith("_us") or k.endswith("reqs") or k == "cpu_cores") else 0
                row.append(f"{statistics.median(xs):,.{nd}f} ({min(xs):,.{nd}f}–{max(xs):,.{nd}f})" if xs else "—")
            print(f"| {k} | " + " | ".join(row) + " |")
        print()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
