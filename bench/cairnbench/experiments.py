"""The experiments: each seed's benchmark, scaled to this 2-core machine, plus
sequential I/O and a metadata-latency micro-benchmark.

An experiment has variants (a parameter point, e.g. fio with 4 jobs); one
*cell* is (experiment, variant, file system, repetition) and always starts on
a freshly made file system. `run(fs, variant)` returns {metric: value}; a
metric a file system cannot produce (bytes written on tmpfs) is left out.
Every parameter is stated in the report next to its table.
"""

import json
import os
import re
import subprocess
import threading
import time

from . import fs as fsmod
from . import report
from .fs import run

HERE = os.path.dirname(os.path.abspath(__file__))
XATTR_TOOL = os.path.join(os.path.dirname(HERE), "xattr_bench.py")
DBENCH_LOAD = "/usr/share/dbench/client.txt"


class Metric:
    """One measured quantity; `table=False` keeps it out of the per-metric
    tables and charts (it is still in results.json and in an experiment's
    own summary tables)."""

    def __init__(self, key, unit, higher_better, label, table=True):
        self.key, self.unit, self.higher_better, self.label = key, unit, higher_better, label
        self.table = table


class Experiment:
    name = ""
    seed = ""
    title = ""
    metrics = []
    tools = []  # (command, Debian package)
    # What cairn serves: "loop", a loop device over its image file, as the
    # kernel file systems (the device-bytes figures need it); or "file", the
    # image file itself, as a user runs `cairn mount IMG MP` (fuse2fs then
    # serves its image file too; see fs.py).
    cairn_on = "loop"
    # File systems this experiment adds to the default list (not to an
    # explicit --fs), e.g. a cairn variant it exists to compare. Every one
    # shows the /dev/fuse transport beside the default, FUSE over io_uring.
    extra_fs = ["cairn-devfuse"]
    # "bars": horizontal bars grouped by variant; "columns": vertical bars,
    # one cluster per variant (e.g. IOPS against job count, as seed 004's charts).
    chart = "bars"
    # In the list `bench/run` runs when no experiment is named.
    in_default = True
    # The file systems it runs when --fs is not given (None: the default list
    # and `extra_fs`), for an experiment about other file systems (crypt).
    default_fs = None
    # At most this many repetitions per cell, whatever `--reps` says (None:
    # as many as asked), for an experiment whose cell takes many minutes.
    max_reps = None
    # Extra kernel mount options per file system, e.g. {"ext4": ["noinit_itable"]}.
    mount_options = {}
    # Write every image file in full before formatting it (fs.write_zeros):
    # where each file system places data must not decide whether it lands on
    # memory the host has to fault in first.
    dense_image = False
    # Set by `bench/run --profile`: where per-phase profiles go (or None).
    profile_dir = None

    def variants(self, quick):
        return [{"label": "-"}]

    def fs_size(self, quick):
        """Size of each file system in bytes, or None for the runner's default."""
        return None

    def variant_fs_size(self, v):
        """Size of each file system for variant `v`, or None for `fs_size`."""
        return None

    def summary(self, cells, fs_order, quick):
        """Markdown lines shown above the per-metric tables (or [])."""
        return []

    def details(self, cells, fs_order, quick):
        """Markdown lines shown below the per-metric tables (or [])."""
        return []

    def describe(self, quick):
        return ""

    def prepare(self, quick, log):
        """Runs once before the first cell (e.g. fetches and caches source
        material); `log(text)` prints progress. An exception stops the run."""

    def run(self, fs, v):
        raise NotImplementedError


def run_parallel(cmds):
    """Runs the commands at once; returns the seconds until all have ended.
    A command that fails fails the cell (its rate would mean nothing)."""
    t0 = time.time()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in cmds]
    codes = [p.wait() for p in procs]
    elapsed = time.time() - t0
    if any(codes):
        raise RuntimeError(f"{cmds[0][0]} exited {codes}")
    return elapsed


def bytes_per(fs, s0, n):
    s1 = fs.sectors_written()
    return None if s0 is None or s1 is None else (s1 - s0) * 512 / n


# ------------------------------------------------------------ seed 003


# dbench's operations in the order it prints them (the seed's rows, then
# Flush, which dbench 4 prints last and the seed's build did not).
DBENCH_OPS = ["NTCreateX", "Close", "Rename", "Unlink", "Deltree", "Mkdir", "Qpathinfo", "Qfileinfo", "Qfsinfo",
              "Sfileinfo", "Find", "WriteX", "ReadX", "LockX", "UnlockX", "Flush"]
# The rows the seed points at: the work Tux3 hands to its backend.
DBENCH_FOCUS = ["Unlink", "Deltree"]
SEED_003 = (
    "The seed (1 client, client2.txt, its KVM guest on a spinning disk), Tux3 / tmpfs / ext4: Unlink AvgLat "
    "0.002 / 0.004 / 0.022, MaxLat 0.345 / 0.607 / 1441.552; Deltree AvgLat 0.083 / 0.651 / 1.517, MaxLat "
    "0.157 / 1.352 / 3.358; throughput 1546.81 / 1489.00 / 1017.84 MB/s."
)


def parse_dbench_ops(stdout):
    """dbench's per-operation table (the lines after "Operation Count
    AvgLat MaxLat") as {op: {"count", "avg_ms", "max_ms"}}."""
    ops = {}
    lines = stdout.splitlines()
    head = next((i for i, ln in enumerate(lines) if re.match(r"^\s*Operation\s+Count\s+AvgLat\s+MaxLat", ln)), None)
    if head is None:
        return ops
    for ln in lines[head + 1:]:
        if re.match(r"^\s*-+\s*$", ln):
            continue
        m = re.match(r"^\s*(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$", ln)
        if not m:
            if ops:
                break
            continue
        ops[m.group(1)] = {"count": int(m.group(2)), "avg_ms": float(m.group(3)), "max_ms": float(m.group(4))}
    return ops


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid`, all its threads (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class DbenchSync(Experiment):
    name = "dbench"
    seed = "003 (Tux3 front/back end)"
    title = "dbench with a sync every 4 s"
    tools = [("dbench", "dbench")]
    # cairn and fuse2fs on their image files, as users run them: through a
    # loop device cairn's buffered writes and every `sync` would cross a block
    # device page cache and the loop driver, a copy the kernel file systems'
    # bios do not make (fs.py). No device-bytes figure is reported here.
    cairn_on = "file"
    # cairn with deferred deletes off, beside cairn (issue #13).
    extra_fs = ["cairn-syncdelete", "cairn-devfuse", "cairn-nowbcache"]
    CLIENTS = [1, 2, 4]
    metrics = [
        Metric("mbps", "MB/s", True, "throughput"),
        Metric("max_ms", "ms", False, "max latency"),
        Metric("seconds", "s", False, "dbench wall time (run and cleanup)", table=False),
        Metric("cpu_client", "cores", False, "CPU of dbench and its clients", table=False),
        Metric("cpu_daemon", "cores", False, "CPU of the FUSE daemon", table=False),
    ]

    def __init__(self):
        self.profiled = set()  # (fs, clients) profiled already: only the first repetition is

    def variants(self, quick):
        t = 8 if quick else 30
        return [{"label": f"{c} client{'s' if c > 1 else ''}", "clients": c, "time": t} for c in self.CLIENTS]

    def describe(self, quick):
        t = self.variants(quick)[0]["time"]
        prof = (
            " `--profile`: the first 1-client run on each file system runs under `perf record -g -F 999` "
            "(dbench and its clients: `profiles/dbench-FS-client.txt`), and on cairn also with `perf record "
            "-g -F 999 -p DAEMON` of the `cairn mount` daemon (`profiles/dbench-FS-daemon.txt`); perf costs "
            "that run some throughput, so the figures come from the other repetitions (with one repetition "
            "it is the only one)."
            if self.profile_dir else ""
        )
        return (
            f"`dbench -t {t} -c {DBENCH_LOAD} -D MOUNTPOINT N`, N = {', '.join(map(str, self.CLIENTS))} "
            "clients, while a loop runs `sync` every 4 s (the seed ran `dbench -t 30 -c client2.txt 1` with "
            "the same sync loop; Debian ships client.txt). Throughput and max latency from dbench's last line; "
            "below them the per-operation table dbench prints (Count, AvgLat, MaxLat), the median over runs "
            "of each column separately. `cairn-syncdelete` is cairn mounted with `-o sync_delete`: the last "
            "unlink frees the file on the calling FUSE thread instead of handing it to the reaper thread "
            "(the seed's frontend/backend split, off). `cairn-devfuse` is cairn mounted with `-o io_uring=0`: "
            "every request through /dev/fuse instead of FUSE over io_uring's per-CPU queues. `cairn-nowbcache` is "
            "cairn mounted with `-o writeback_cache=0`: every write sent to cairn as it is made, instead of "
            "kept in the kernel's page cache until close, fsync or writeback (which then also sends the "
            "file's mtime in a SETATTR). CPU: user + system seconds of dbench and its client "
            "processes, and of the FUSE daemon (cairn, fuse2fs), per second of dbench's wall time; kernel "
            "file systems' own threads (writeback, journal) are in neither." + prof
        )

    def run(self, fs, v):
        stop = threading.Event()

        def syncer():
            while not stop.wait(4):
                subprocess.run(["sync"])

        cmd = ["dbench", "-t", str(v["time"]), "-c", DBENCH_LOAD, "-D", fs.mp, str(v["clients"])]
        pid = fs.daemon_pid()
        client_data = daemon = None
        if self.profile_dir and v["clients"] == 1 and (fs.name, 1) not in self.profiled:
            self.profiled.add((fs.name, 1))
            os.makedirs(self.profile_dir, exist_ok=True)
            client_data = os.path.join(self.profile_dir, f"dbench-{fs.name}-client.perf.data")
            cmd = ["perf", "record", "-g", "-F", "999", "-o", client_data, "--", *cmd]
            if fs.is_cairn:
                daemon = Profile(self.profile_dir, f"dbench-{fs.name}-daemon", pid)
        t = threading.Thread(target=syncer, daemon=True)
        u0, d0, t0 = os.times(), cpu_seconds(pid) if pid else None, time.time()
        t.start()
        try:
            r = run(cmd, check=False, capture_output=True, text=True)
        finally:
            stop.set()
            t.join()
            secs = time.time() - t0
            u1, d1 = os.times(), cpu_seconds(pid) if pid else None
            if daemon:
                daemon.stop()
        if r.returncode:
            raise RuntimeError(f"dbench exited {r.returncode}: " + " / ".join((r.stderr or r.stdout).strip()
                                                                              .splitlines()[-3:]))
        m = re.search(r"Throughput ([\d.]+) MB/sec.*max_latency=([\d.]+) ms", r.stdout)
        ops = parse_dbench_ops(r.stdout)
        if not m or not ops:
            raise RuntimeError("dbench printed no throughput line or no per-operation table:\n" + r.stdout[-2000:])
        res = {
            "mbps": float(m.group(1)),
            "max_ms": float(m.group(2)),
            "seconds": secs,
            # Children's CPU: dbench, which waits for its clients; the sync
            # loop's `sync`s; perf when profiling.
            "cpu_client": (u1.children_user + u1.children_system - u0.children_user - u0.children_system) / secs,
            "cpu_daemon": (d1 - d0) / secs if d0 is not None and d1 is not None else None,
            "ops": ops,
        }
        if client_data:
            perf_summary(client_data, os.path.join(self.profile_dir, f"dbench-{fs.name}-client.txt"),
                         f"perf record -g -F 999 -- dbench -t {v['time']} ... 1 on {fs.name} (dbench and its "
                         "client process; the kernel's work in their context included)", own_dso=None,
                         inclusive=True)
            os.unlink(client_data)
            res["profiled"] = True
        return res

    def details(self, cells, fs_order, quick):
        """Per client count: Unlink and Deltree in one line each, then dbench's
        per-operation table as three tables (AvgLat, MaxLat, Count), one
        column per file system; then CPU use."""
        import statistics

        def runs(lab, fs):
            return [r for r in report.measured(cells.get((self.name, lab, fs), [])) if "ops" in r]

        def med(lab, fs, op, key):
            vals = [r["ops"][op][key] for r in runs(lab, fs) if op in r["ops"]]
            return statistics.median(vals) if vals else None

        def ms(x):
            return "—" if x is None else f"{x:.3f}"

        md = []
        for v in self.variants(quick):
            lab = v["label"]
            shown = [fs for fs in fs_order if runs(lab, fs)]
            if not shown:
                continue
            n = max(len(runs(lab, fs)) for fs in shown)
            ops = DBENCH_OPS + sorted({op for fs in shown for r in runs(lab, fs) for op in r["ops"]} - set(DBENCH_OPS))
            md += [f"**dbench per operation, {lab}** (median of {n} run{'s' if n > 1 else ''}, each column "
                   "separately; latencies in ms; — where dbench printed no row: none of that operation completed in "
                   "the timed part):", ""]
            for op in DBENCH_FOCUS:
                md.append(f"- {self.focus_line(op, shown, lambda fs, k, op=op: med(lab, fs, op, k))}")
            if v["clients"] == 1:
                md.append(f"- {SEED_003}")
            md.append("")
            for title, key, f in (("AvgLat (ms)", "avg_ms", ms), ("MaxLat (ms)", "max_ms", ms),
                                  ("Count", "count", lambda x: "—" if x is None else f"{x:,.0f}")):
                md += [f"| {title}, {lab} | " + " | ".join(shown) + " |", "|---" + "|--:" * len(shown) + "|"]
                for op in ops:
                    vals = [med(lab, fs, op, key) for fs in shown]
                    if all(x is None for x in vals):
                        continue
                    name = f"**{op}**" if op in DBENCH_FOCUS else op
                    md.append(f"| {name} | " + " | ".join(f(x) for x in vals) + " |")
                md.append("")
        cpu = []
        for fs in fs_order:
            row = []
            for v in self.variants(quick):
                rs = runs(v["label"], fs)
                c = [r["cpu_client"] for r in rs if r.get("cpu_client") is not None]
                d = [r["cpu_daemon"] for r in rs if r.get("cpu_daemon") is not None]
                row.append(("—" if not c else f"{statistics.median(c):.2f}")
                           + (f" / {statistics.median(d):.2f}" if d else ""))
            if any(x != "—" for x in row):
                cpu.append(f"| {fs} | " + " | ".join(row) + " |")
        if cpu:
            labs = [v["label"] for v in self.variants(quick)]
            md += ["CPU busy (cores; dbench and its clients / the FUSE daemon, median; this machine has "
                   f"{os.cpu_count()}):", "", "| file system | " + " | ".join(labs) + " |",
                   "|---" * (len(labs) + 1) + "|", *cpu, ""]
        if self.profile_dir:
            md += ["Profiles of the first 1-client run: `profiles/dbench-FS-client.txt` (dbench's side, kernel "
                   "included), `profiles/dbench-FS-daemon.txt` (cairn's daemon).", ""]
        return md

    @staticmethod
    def focus_line(op, shown, med):
        """One line on operation `op`: AvgLat / MaxLat per file system, cairn
        against cairn-syncdelete (deferral on and off) and against the peers."""
        avg = {fs: med(fs, "avg_ms") for fs in shown}
        mx = {fs: med(fs, "max_ms") for fs in shown}
        each = ", ".join(f"{fs} {avg[fs]:.3f} / {mx[fs]:.3f}" if avg[fs] is not None else f"{fs} —"
                         for fs in shown)
        line = f"**{op}** AvgLat / MaxLat: {each}."
        a, b = avg.get("cairn"), avg.get("cairn-syncdelete")
        if a is not None and b is not None:
            if a == b:
                line += " Deferral: the same average with and without."
            elif not a or not b:
                line += f" Deferral: {'cairn' if not a else 'cairn-syncdelete'}'s average rounds to 0, the other's not."
            elif a < b:
                line += f" Deferral: cairn's average is {b / a:.1f}× lower than cairn-syncdelete's."
            else:
                line += f" Deferral: cairn's average is {a / b:.1f}× *higher* than cairn-syncdelete's."
        if a is not None:
            peers = [fs for fs in shown if not fsmod.is_cairn(fs) and avg[fs] is not None]
            below = [fs for fs in peers if a < avg[fs]]
            above = [fs for fs in peers if a > avg[fs]]
            def names(fss):
                return ", ".join(f"{fs}'s" for fs in fss)

            if below and above:
                line += f" cairn's average is below {names(below)}, above {names(above)}."
            elif below or above:
                line += f" cairn's average is {'below' if below else 'above'} {names(below or above)}."
        return line


# ------------------------------------------------------------ seed 001


class FsMark(Experiment):
    name = "fsmark"
    seed = "001 (XFS delayed logging, list_lru)"
    title = "fs_mark create, cold walk, parallel unlink of empty files"
    tools = [("fs_mark", "fsmark")]
    extra_fs = ["cairn-devfuse"]
    metrics = [
        Metric("create", "files/s", True, "create"),
        Metric("walk", "entries/s", True, "cold walk"),
        Metric("unlink", "files/s", True, "unlink"),
        Metric("bytes_per_file", "B", False, "device bytes per file"),
        Metric("create_reqs", "requests", False, "FUSE requests per create (cairn)"),
        Metric("create_cairn_us", "µs", False, "time inside cairn per create (cairn)"),
        Metric("walk_reqs", "requests", False, "FUSE requests per entry walked (cairn)"),
        Metric("walk_cairn_us", "µs", False, "time inside cairn per entry walked (cairn)"),
        Metric("unlink_reqs", "requests", False, "FUSE requests per unlink (cairn)"),
        Metric("unlink_cairn_us", "µs", False, "time inside cairn per unlink (cairn)"),
    ]

    def variants(self, quick):
        return [{"label": "2 threads", "threads": 2, "files": 10_000 if quick else 100_000}]

    def describe(self, quick):
        v = self.variants(quick)[0]
        per = v["files"] // v["threads"]
        return (
            f"{v['files']:,} empty files: `fs_mark -S 0 -s 0 -L 1 -D 100 -N {per // 100} -n {per} "
            f"-d MP/0 -d MP/1` (one thread per directory); then unmount (bytes written to the device "
            "per file: loop device's written sectors), remount with every cache dropped, a parallel "
            "`lstat` walk of each directory tree (one process per tree) and a parallel `rm -rf` "
            "per tree. The seed ran 16 threads and 51 million files on XFS. `cairn-devfuse` is cairn "
            "mounted with `-o io_uring=0` (every request through /dev/fuse, not FUSE over io_uring). "
            "Where a cairn phase's time goes, from `cairn stats` before and after it: FUSE requests per "
            "file, and µs per file inside cairn (every request's handler entry to its reply written, "
            "summed). A caller spends `threads × 10⁶ / rate` µs per file (2 threads for create and "
            "unlink, 1 process per tree for the walk); the part not inside cairn is the kernel's FUSE "
            "work and the wake-ups between caller and daemon."
        )

    def run(self, fs, v):
        n, th = v["files"], v["threads"]
        per = n // th
        dirs = [os.path.join(fs.mp, str(i)) for i in range(th)]
        s0 = fs.sectors_written()
        cmd = fsmark_empty_files(dirs, per)
        c0 = fs.cairn_counters()
        r = run(cmd, capture_output=True, text=True, cwd=fs.scratch.path)
        rows = [ln.split() for ln in r.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d+\s+[\d.]+", ln)]
        if not rows:
            raise RuntimeError("fs_mark printed no result row:\n" + r.stdout[-2000:] + r.stderr[-2000:])
        res = {"create": float(rows[-1][3])}
        c1 = fs.cairn_counters()
        if fs.name != "tmpfs":
            fs.unmount()
            res["bytes_per_file"] = bytes_per(fs, s0, n)
        fs.remount_cold()
        walked = n + th * 101
        c2 = fs.cairn_counters()
        res["walk"] = walked / run_parallel([["find", d, "-printf", "%y %s\n"] for d in dirs])
        c3 = fs.cairn_counters()
        res["unlink"] = n / run_parallel([["rm", "-rf", d] for d in dirs])
        c4 = fs.cairn_counters()
        if fs.is_cairn:
            for phase, a, b, files in [("create", c0, c1, n), ("walk", c2, c3, walked), ("unlink", c3, c4, n)]:
                res[f"{phase}_reqs"], res[f"{phase}_cairn_us"] = request_budget(a, b, files)
        return res


def fsmark_empty_files(dirs, per):
    """fs_mark making `per` empty files in each of `dirs` (one thread each),
    in 100 subdirectories, one loop."""
    cmd = ["fs_mark", "-S", "0", "-s", "0", "-L", "1", "-D", "100", "-N", str(max(1, per // 100)), "-n", str(per)]
    for d in dirs:
        cmd += ["-d", d]
    return cmd


def request_budget(before, after, files):
    """FUSE requests and µs inside cairn (handler entry to reply written,
    every request summed) per file between two `cairn stats` snapshots."""
    reqs = after.get("fuse.requests", 0) - before.get("fuse.requests", 0)
    us = sum(v - before.get(k, 0) for k, v in after.items() if k.endswith(".reply_us_total"))
    return reqs / files, us / files


def parse_count(s):
    """A file count: 100000, 100k, 1M, 5M."""
    t = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise ValueError(f"{s!r} is not a file count (e.g. 100k, 1M, 5M)") from None
    if n < 1000:
        raise ValueError(f"{s!r}: at least 1000 files")
    return n


def count_label(n):
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


def fsmark_rows(stdout):
    """fs_mark's result rows: [(cumulative count, files/s)], one per loop."""
    rows = [ln.split() for ln in stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d+\s+[\d.]+", ln)]
    return [(int(r[1]), float(r[3])) for r in rows]


def window_rate(rows, first, window):
    """files/s over the first (or last) `window` files of fs_mark's rows
    [(files in the row, files/s)]: files over the sum of the rows' times."""
    seq = rows if first else rows[::-1]
    files = secs = 0
    for n, rate in seq:
        if files >= window:
            break
        files += n
        secs += n / rate if rate else 0
    return files / secs if secs else None


def peak_rss_mib(pid):
    """VmHWM of process `pid` in MiB (None if gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kib = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
        return kib / 1024
    except (OSError, StopIteration, TypeError):
        return None


def reset_peak_rss(pid):
    """Resets VmHWM of `pid` to its current RSS (clear_refs 5), so the next
    reading is the peak of what follows."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


PERF_TOP = 15


def perf_summary(data, path, title, time_range=None, own_dso="cairn", inclusive=False):
    """Writes the top symbols (self time: all, `own_dso`'s own unless None;
    with `inclusive` also time including callees, which names the system
    calls the time went to) and threads of perf data file `data` to `path`;
    `time_range` (start, end) in the recording's clock cuts out one phase."""
    lines = [f"# {title}; self time, top {PERF_TOP}", ""]
    cut = ["--time", f"{time_range[0]:.6f},{time_range[1]:.6f}"] if time_range else []
    self_time = ["--no-children"]
    views = [
        ("all samples, by dso,symbol", [*self_time, "--sort", "dso,symbol"], PERF_TOP),
        *([(f"{own_dso}'s own code only (--dsos {own_dso}; % of all samples)",
            [*self_time, "--sort", "symbol", "--dsos", own_dso, "--percentage", "absolute"], PERF_TOP)]
          if own_dso else []),
        *([("including callees (--children: Children, Self), by symbol", ["--children", "--sort", "symbol"],
            2 * PERF_TOP)] if inclusive else []),
        ("by thread", [*self_time, "--sort", "comm"], PERF_TOP),
    ]
    for name, args, top in views:
        r = run(["perf", "report", "-i", data, "--stdio", "-g", "none", *cut, *args],
                check=False, capture_output=True, text=True)
        rows = [re.sub(r"(\s+-)+\s*$", "", ln).rstrip() for ln in r.stdout.splitlines()
                if re.match(r"^\s+[\d.]+%", ln)]
        lines += [f"## {name}", "", *rows[:top], ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


class Profile:
    """`perf record -g -p PID` for one phase, then `perf_summary` as
    PROFILE_DIR/TAG.txt."""

    def __init__(self, outdir, tag, pid):
        self.outdir, self.tag, self.proc = outdir, tag, None
        if not outdir or not pid:
            return
        os.makedirs(outdir, exist_ok=True)
        self.data = os.path.join(outdir, f"{tag}.perf.data")
        self.proc = subprocess.Popen(
            ["perf", "record", "-g", "-F", "999", "-o", self.data, "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # perf attaches

    def stop(self):
        if not self.proc:
            return
        self.proc.send_signal(2)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        perf_summary(self.data, os.path.join(self.outdir, f"{self.tag}.txt"),
                     f"perf record -g -F 999 -p DAEMON ({self.tag})")
        os.unlink(self.data)


# Writer waits at a push, per phase: (result key, `cairn stats` counter, unit, label).
WRITER_WAITS = (
    ("waits", "cil.writer_waits", "waits", "operations that found the gate closed by a push"),
    ("wait_p99_us", "cil.writer_wait_us_p99", "µs", "p99 of their waits"),
    ("wait_max_us", "cil.writer_wait_us_max", "µs", "longest wait kept out by a push"),
    ("wait_wall_max_us", "cil.writer_wait_wall_us_max", "µs", "longest wait by the clock"),
    ("wait_preempted", "cil.writer_waits_preempted", "waits", "waits whose spinning thread was preempted"),
    ("wait_on_cpu_max_us", "cil.writer_wait_on_cpu_us_max", "µs",
     "longest wait by the clock of a thread not preempted"),
    ("gate_closed_max_us", "tx.gate_closed_us_max", "µs", "longest the gate stayed closed"),
    ("swaps_preempted", "tx.swaps_preempted", "swaps", "swaps whose thread the kernel switched out"),
    ("empty_swaps", "tx.push_empty_swaps", "pushes", "pushes that swapped at a moment the gate was empty"),
    ("impatient_closes", "tx.push_impatient_closes", "pushes",
     "pushes that closed the gate on operations inside"),
)


def writer_waits(phase, c):
    """The writer-wait counters of a cairn phase (`cairn stats` names), keyed
    `PHASE_...`; those a build does not have are left out."""
    out = {f"{phase}_{key}": c[name] for key, name, _, _ in WRITER_WAITS if name in c}
    # Since the gate stopped reopening closes, a wait is measured by the
    # clock alone (`cil.writer_wait_us_max`).
    if "cil.writer_wait_wall_us_max" not in c and "cil.writer_wait_us_max" in c:
        out[f"{phase}_wait_wall_max_us"] = c["cil.writer_wait_us_max"]
    return out


class FsMarkScale(FsMark):
    """Seed 001 at the seed's scale, as far as 2 cores and 24 GiB allow."""

    name = "fsmark-scale"
    seed = "001 (XFS delayed logging, list_lru), at 1 and 5 million files"
    title = "fs_mark create, cold find walk, parallel rm -rf, at millions of empty files"
    in_default = False
    extra_fs = [fsmod.ENGINE]
    # ext4's lazyinit thread zeroes the inode tables of a new file system in
    # the background, hundreds of MB on these sizes: it would count as the
    # benchmark's writes. noinit_itable keeps it from starting.
    mount_options = {"ext4": ["noinit_itable"]}
    files = None  # bench/run --files
    # fuse2fs creates about 2,000 files/s and walks 1,500 entries/s here
    # (100k files: 47 s, 66 s, 36 s): above this count it is left out.
    FUSE2FS_MAX = 1_000_000
    THREADS = 2
    PER_DIR = 2_500  # files per subdirectory at the end (fs_mark 3.3 overflows at 10,000)
    metrics = [
        Metric("create", "files/s", True, "create"),
        Metric("create_first", "files/s", True, "create, first million (first fifth below 5M)"),
        Metric("create_last", "files/s", True, "create, last million (last fifth below 5M)"),
        Metric("walk", "entries/s", True, "cold walk (find -ctime 1)"),
        Metric("unlink", "files/s", True, "parallel rm -rf"),
        Metric("bytes_per_file", "B", False, "device bytes written per file created"),
        Metric("journal_bytes_per_file", "B", False, "journal bytes per file created (cairn)"),
        Metric("rss_create", "MiB", False, "daemon peak RSS, create"),
        Metric("rss_walk", "MiB", False, "daemon peak RSS, walk", table=False),
        Metric("rss_unlink", "MiB", False, "daemon peak RSS, unlink", table=False),
        Metric("fsck_s", "s", False, "cairn fsck of the image after create", table=False),
        Metric("create_s", "s", False, "create time", table=False),
        Metric("walk_s", "s", False, "walk time", table=False),
        Metric("unlink_s", "s", False, "unlink time", table=False),
        Metric("unlink_journal_bytes_per_file", "B", False, "journal bytes per file removed", table=False),
        *[
            Metric(f"{ph}_{key}", unit, False, f"{ph}: {label}", table=False)
            for ph in ("create", "unlink")
            for key, _, unit, label in WRITER_WAITS
        ],
        *[
            Metric(f"{ph}_{d}_{u}", unit, True, f"{ph} {d} {unit}", table=False)
            for ph in ("create", "walk", "unlink")
            for d in ("read", "write")
            for u, unit in (("iops", "IOPS"), ("mbps", "MB/s"))
        ],
    ]

    def params(self, n):
        per_loop = 100_000 if n >= 1_000_000 else max(self.THREADS, n // 10)
        per_thread_loop = per_loop // self.THREADS
        dirs = max(1, n // self.THREADS // self.PER_DIR)
        return {
            "label": f"{count_label(n)} files",
            "files": per_loop * max(1, n // per_loop),
            "loops": max(1, n // per_loop),
            "per_loop": per_loop,
            "n": per_thread_loop,
            "dirs": dirs,
            "per_dir": max(1, per_thread_loop // dirs),
            "window": 1_000_000 if n >= 5_000_000 else max(1, n // 5),
        }

    def variants(self, quick):
        return [self.params(n) for n in (self.files or ([100_000] if quick else [1_000_000, 5_000_000]))]

    def variant_fs_size(self, v):
        # 24 KiB per file, at least 4 GiB: ext4's and cairn's default 16 KiB
        # per inode then hold 1.5x the files; XFS and btrfs allocate inodes
        # as they go. Sparse: only what is written takes RAM.
        return max(4 << 30, -(-v["files"] * 24 * 1024 // (1 << 30)) << 30)

    def fsmark_cmd(self, v, mp):
        cmd = ["fs_mark", "-S", "0", "-s", "0", "-L", str(v["loops"]), "-D", str(v["dirs"]), "-N",
               str(v["per_dir"]), "-n", str(v["n"])]
        for t in range(self.THREADS):
            cmd += ["-d", os.path.join(mp, str(t))]
        return cmd

    def describe(self, quick):
        vs = self.variants(quick)
        cmds = "; ".join(f"{v['label']}: `{' '.join(self.fsmark_cmd(v, 'MP'))}`" for v in vs)
        return (
            f"Seed 001's three phases with {self.THREADS} fs_mark threads ({cmds}): one row per loop of "
            f"{vs[0]['per_loop']:,} files, so the create rate of the first and of the last million files (the "
            "first and last fifth below 5M) can be compared; each thread's directory ends with "
            f"{self.PER_DIR:,} files in each subdirectory. Then `sync`, unmount (cairn: `cairn fsck` of the image, "
            "timed), `echo 3 > /proc/sys/vm/drop_caches`, mount, and the seed's cold walk `find MP -ctime 1` (one process; "
            "it stats every inode, matches none), then `rm -rf MP/0` and `rm -rf MP/1` at once. Device "
            "figures from the loop device's /sys/block/loopN/stat: bytes written per file from before "
            "fs_mark until the unmount has finished; per phase, reads and writes completed (IOPS) and "
            "sectors (MB/s = 10^6 B/s) over the phase's seconds, as the seed's iostat table. cairn: "
            "journal bytes per file from `cairn stats` (`journal.bytes_logged` after fs_mark and a "
            "`sync`), and the daemon's peak RSS per phase (VmHWM of the `cairn mount` process, reset at "
            "the phase's start with `clear_refs`, read at its end; fuse2fs's likewise). `cairn-engine`: "
            "the same three phases on cairn's engine in one process, no FUSE, no kernel caches "
            "(`cairn-bench-driver fsmark IMG --files N --threads 2 --dirs D --per-dir N --rows LOOPS`: "
            "`Fs::mknod`s in the same directory shape with fs_mark's 40-byte names, commit, unmount, "
            "drop_caches, a new mount, a one-thread walk that looks up every entry, two threads that "
            "unlink and rmdir); its device bytes are the bytes it `pwrite`s to the image file (it has "
            "no loop device), its RSS that process's. File systems are sized 24 KiB per file (at least "
            "4 GiB), sparse in the tmpfs, so that the default inode ratios of ext4 and cairn (16 KiB) "
            "hold the files: no mkfs options. ext4 is mounted `-o noinit_itable` (its lazy inode-table "
            "zeroing thread would otherwise write hundreds of MB during the run). The seed ran 16 threads "
            "and 51 million files on XFS (`-D 10000 -N 1800`)."
        )

    def run(self, fs, v):
        if fs.name == fsmod.ENGINE:
            return self.run_engine(fs, v)
        if fs.name == "fuse2fs" and v["files"] > self.FUSE2FS_MAX:
            return {"skipped": f"fuse2fs runs up to {count_label(self.FUSE2FS_MAX)} files (hours above)"}
        res = {}
        n = v["files"]
        prof = self.profile_dir if fs.is_cairn else None
        tag = f"{fs.name}-{count_label(n)}"

        def phase(name, fn):
            pid = fs.daemon_pid()
            if pid:
                reset_peak_rss(pid)
            p = Profile(prof, f"{tag}-{name}", pid)
            st0, t0 = fs.device_stat(), time.time()
            try:
                out = fn()
            finally:
                secs = time.time() - t0
                st1 = fs.device_stat()
                p.stop()
            res[f"{name}_s"] = secs
            if pid:
                res[f"rss_{name}"] = peak_rss_mib(pid)
            if st0 and st1:
                for d in ("read", "write"):
                    res[f"{name}_{d}_iops"] = (st1[f"{d}s"] - st0[f"{d}s"]) / secs
                    res[f"{name}_{d}_mbps"] = (st1[f"{d}_sectors"] - st0[f"{d}_sectors"]) * 512 / 1e6 / secs
            return out

        s0 = fs.sectors_written()
        r = phase("create", lambda: run(self.fsmark_cmd(v, fs.mp), capture_output=True, text=True,
                                        cwd=fs.scratch.path))
        rows = fsmark_rows(r.stdout)
        if len(rows) != v["loops"] or rows[-1][0] != n:
            raise RuntimeError(f"fs_mark printed {len(rows)} of {v['loops']} rows:\n" + r.stdout[-2000:] + r.stderr[-2000:])
        per_row = [(c - p, rate) for (c, rate), p in zip(rows, [0] + [c for c, _ in rows])]
        res["create"] = n / res["create_s"]
        res["create_first"] = window_rate(per_row, True, v["window"])
        res["create_last"] = window_rate(per_row, False, v["window"])
        run(["sync"])
        c = fs.cairn_counters()
        if c:
            res["journal_bytes_per_file"] = c["journal.bytes_logged"] / n
            res.update(writer_waits("create", c))
        if fs.name != "tmpfs":
            fs.unmount()  # everything on the device (the daemons have exited)
            res["bytes_per_file"] = bytes_per(fs, s0, n)
        if fs.is_cairn:
            # The "fsck clean" at this count: the full check of the
            # unmounted image, every inode, directory and bitmap.
            t0 = time.time()
            p = run([fs.cairn, "fsck", fs.src], check=False, capture_output=True, text=True)
            res["fsck_s"] = time.time() - t0
            res["fsck_clean"] = int(p.returncode == 0)
            if p.returncode != 0:
                raise RuntimeError(f"cairn fsck after {n} creates exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        fs.remount_cold()  # drop caches, mount
        entries = 1 + self.THREADS * (1 + v["dirs"]) + n
        phase("walk", lambda: run(["find", fs.mp, "-ctime", "1"], stdout=subprocess.DEVNULL))
        res["walk"] = entries / res["walk_s"]
        c0 = fs.cairn_counters()
        phase("unlink", lambda: run_parallel([["rm", "-rf", os.path.join(fs.mp, str(t))]
                                              for t in range(self.THREADS)]))
        res["unlink"] = n / res["unlink_s"]
        if c0:
            run(["sync"])
            c1 = fs.cairn_counters()
            res["unlink_journal_bytes_per_file"] = (c1["journal.bytes_logged"] - c0["journal.bytes_logged"]) / n
            # This mount's counters: the walk (no pushes to speak of) and the unlink.
            res.update(writer_waits("unlink", c1))
        left = os.listdir(fs.mp)
        if any(x in left for x in map(str, range(self.THREADS))):
            raise RuntimeError(f"rm -rf left {left}")
        return res

    def run_engine(self, fs, v):
        cmd = [fsmod.driver_of(fs.cairn), "fsmark", fs.image, "--files", str(v["files"]), "--threads",
               str(self.THREADS), "--dirs", str(v["dirs"]), "--per-dir", str(v["per_dir"]), "--rows",
               str(v["loops"])]
        data = None
        if self.profile_dir:  # the whole run on CLOCK_MONOTONIC, cut by phase below
            os.makedirs(self.profile_dir, exist_ok=True)
            data = os.path.join(self.profile_dir, f"{fs.name}-{count_label(v['files'])}.perf.data")
            cmd = ["perf", "record", "-g", "-F", "999", "-k", "CLOCK_MONOTONIC", "-o", data, "--", *cmd]
        r = run(cmd, capture_output=True, text=True, check=False)
        if r.returncode:
            raise RuntimeError(f"cairn-bench-driver fsmark failed: {r.stderr.strip()[-500:]}")
        j = json.loads(r.stdout)
        if data:
            for ph in ("create", "walk", "unlink"):
                if j.get(ph):
                    tag = f"{fs.name}-{count_label(v['files'])}-{ph}"
                    perf_summary(data, os.path.join(self.profile_dir, f"{tag}.txt"),
                                 f"perf record -g -F 999 -k CLOCK_MONOTONIC -- cairn-bench-driver fsmark ({tag})",
                                 j[ph]["monotonic"])
            os.unlink(data)
        n = j["create"]["files"]
        per_row = [(v["per_loop"], row["files_per_s"]) for row in j["create"]["rows"]]
        res = {
            "create": j["create"]["files_per_s"],
            "create_s": j["create"]["seconds"],
            "create_first": window_rate(per_row, True, v["window"]),
            "create_last": window_rate(per_row, False, v["window"]),
            "walk": j["walk"]["entries_per_s"],
            "walk_s": j["walk"]["seconds"],
            "bytes_per_file": j["image_bytes_per_file"],
            "journal_bytes_per_file": j["journal_bytes_per_file"],
            "rss_create": j["create"]["peak_rss_kib"] / 1024,
            "rss_walk": j["walk"]["peak_rss_kib"] / 1024,
            "engine_commit_s": j["create"]["commit_seconds"],
        }
        if j["walk"]["files"] != n:
            raise RuntimeError(f"the engine's walk found {j['walk']['files']} of {n} files")
        if j.get("unlink"):
            u = j["unlink"]
            res.update(unlink=u["files_per_s"], unlink_s=u["seconds"], rss_unlink=u["peak_rss_kib"] / 1024,
                       unlink_journal_bytes_per_file=u["journal_bytes"] / n)
            res.update(writer_waits("unlink", u.get("stats", {})))
        res.update(writer_waits("create", j["create"].get("stats", {})))
        return res

    def summary(self, cells, fs_order, quick):
        """The seed's two tables per file count: times and rates, and the
        device's IOPS and bandwidth per phase."""
        import statistics

        def med(label, fs, key, over_runs=statistics.median):
            vals = [r.get(key) for r in cells.get((self.name, label, fs), []) if "error" not in r]
            vals = [x for x in vals if x is not None]
            return over_runs(vals) if vals else None

        def worst(label, fs, key):
            return med(label, fs, key, over_runs=max)

        def f(x, nd=0):
            return "—" if x is None else f"{x:,.{nd}f}"

        md = []
        for v in self.variants(quick):
            lab = v["label"]
            shown = [fs for fs in fs_order if any(len(r) > 1 or "skipped" not in r
                                                  for r in cells.get((self.name, lab, fs), []))]
            if not shown:
                continue
            win = count_label(v["window"])
            md += [
                f"**{lab}** (median of runs; create rate of the first and last {win} files from fs_mark's "
                "per-loop rows):",
                "",
                f"| file system | create (s) | rate (files/s) | first {win} | last {win} | last/first | walk (s) "
                "| unlink (s) | device B/file | journal B/file | peak RSS create / walk / unlink (MiB) |",
                "|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            for fs in shown:
                g = lambda k: med(lab, fs, k)  # noqa: E731
                ratio = g("create_last") / g("create_first") if g("create_last") and g("create_first") else None
                rss = " / ".join(f(g(k)) for k in ("rss_create", "rss_walk", "rss_unlink"))
                md.append(
                    f"| {fs} | {f(g('create_s'), 1)} | {f(g('create'))} | {f(g('create_first'))} | "
                    f"{f(g('create_last'))} | {f(ratio, 2)} | {f(g('walk_s'), 1)} | {f(g('unlink_s'), 1)} | "
                    f"{f(g('bytes_per_file'))} | {f(g('journal_bytes_per_file'))} | "
                    f"{rss if fs.startswith('cairn') or fs == 'fuse2fs' else '—'} |"
                )
            for fs in shown:
                if fs.startswith("cairn") and fs != fsmod.ENGINE:
                    runs = [r for r in cells.get((self.name, lab, fs), []) if "fsck_clean" in r]
                    if runs:
                        clean = sum(r["fsck_clean"] for r in runs)
                        md.append(f"\n`cairn fsck` of {fs}'s image after create: clean in {clean} of {len(runs)} "
                                  f"runs, {f(med(lab, fs, 'fsck_s'), 1)} s.")
            cairns = [fs for fs in shown if fs.startswith("cairn")
                      and any(r.get("create_waits") is not None for r in cells.get((self.name, lab, fs), []))]
            if cairns:
                md += [
                    "",
                    f"Writers at a push, {lab} (cairn's `cil.writer_wait_*` counters at the end of the phase; "
                    "an operation that finds the transaction gate closed by a push waits: kept out = until the "
                    "gate next opened, by the clock = until it got in, which also counts time its spinning thread "
                    "was preempted (the kernel switched it out: `getrusage`'s involuntary switches rose); the "
                    "longest over all runs, the others the median of runs; pushes that swapped at an empty "
                    "moment kept nobody out but for the swap, those out of patience closed the gate on the "
                    "operations inside):",
                    "",
                    "| file system | phase | waits | p99 (µs) | longest kept out (µs) | longest by the clock (µs) "
                    "| preempted waits | longest of the others by the clock (µs) | longest close (µs) "
                    "| swaps preempted | pushes at an empty moment | out of patience |",
                    "|---|---|---|---|---|---|---|---|---|---|---|---|",
                ]
                for fs in cairns:
                    for ph in ("create", "unlink"):
                        g = lambda k: med(lab, fs, f"{ph}_{k}")  # noqa: E731
                        md.append(
                            f"| {fs} | {ph} | {f(g('waits'))} | {f(g('wait_p99_us'))} | "
                            f"{f(worst(lab, fs, f'{ph}_wait_max_us'))} | "
                            f"{f(worst(lab, fs, f'{ph}_wait_wall_max_us'))} | {f(g('wait_preempted'))} | "
                            f"{f(worst(lab, fs, f'{ph}_wait_on_cpu_max_us'))} | "
                            f"{f(worst(lab, fs, f'{ph}_gate_closed_max_us'))} | {f(g('swaps_preempted'))} | "
                            f"{f(g('empty_swaps'))} | "
                            f"{f(g('impatient_closes'))} |"
                        )
            md += [
                "",
                f"Device I/O per phase, {lab} (loop device; IOPS and MB/s averaged over the phase):",
                "",
                "| file system | create write IOPS | MB/s | walk read IOPS | MB/s | unlink read IOPS | MB/s "
                "| unlink write IOPS | MB/s |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for fs in shown:
                if fs == fsmod.ENGINE:
                    continue
                g = lambda k: med(lab, fs, k)  # noqa: E731
                md.append(
                    f"| {fs} | {f(g('create_write_iops'))} | {f(g('create_write_mbps'), 1)} | "
                    f"{f(g('walk_read_iops'))} | {f(g('walk_read_mbps'), 1)} | {f(g('unlink_read_iops'))} | "
                    f"{f(g('unlink_read_mbps'), 1)} | {f(g('unlink_write_iops'))} | {f(g('unlink_write_mbps'), 1)} |"
                )
            md.append("")
        return md


# ------------------------------------------------------------ seed 000


class XattrBench(Experiment):
    name = "xattr"
    seed = "000 (mbcache: shared xattr blocks)"
    title = "xattr-bench: P processes x F files x V values"
    tools = [("setfattr", "attr")]
    metrics = [Metric("ops", "setxattr/s", True, "setxattr rate")]

    def variants(self, quick):
        ops = 2_000 if quick else 20_000
        grid = [(2, 100, 100)] if quick else [(1, 100, 10), (2, 100, 10), (2, 100, 10_000), (2, 1000, 100)]
        return [{"label": f"P={p} F={f} V={val}", "p": p, "f": f, "v": val, "ops": ops} for p, f, val in grid]

    def describe(self, quick):
        v = self.variants(quick)[0]
        return (
            f"`bench/xattr_bench.py`: P processes each set `user.bench` on one of its F files to one of "
            f"V values (200 bytes each, too big for ext4's in-inode space), chosen at random, "
            f"{v['ops']:,} times per process; setxattr calls per second over all processes. "
            "The seed ran 50,000 per process with P up to 64 on 24 CPUs."
        )

    def run(self, fs, v):
        r = run(
            ["python3", XATTR_TOOL, fs.mp, str(v["p"]), str(v["f"]), str(v["v"]), str(v["ops"])],
            capture_output=True,
            text=True,
        )
        return {"ops": json.loads(r.stdout)["ops_per_s"]}


# ------------------------------------------------------------ seed 002


class Fragmented(Experiment):
    name = "frag"
    seed = "002 (mballoc optimized scan)"
    title = "2 MiB writes on a fragmented file system"
    tools = []
    # An allocator that takes aligned free chunks (cairn's, ext4's) often finds
    # them in never-written space; one that reuses the holes just freed does
    # not. On a sparse image in this VM's tmpfs, or through a loop device's page
    # cache (emptied at each last close), a never-written block first costs the
    # host a page fault: 0.4-0.5x on this experiment, in placement alone (issue
    # #10). So every image is written in full first, and cairn serves its image
    # file, as users run it, with no block device page cache between.
    dense_image = True
    cairn_on = "file"
    metrics = [
        Metric("mbps", "MB/s", True, "2 MiB write rate"),
        Metric("groups_scanned_per_alloc", "groups", False, "groups scanned per allocation (cairn)"),
    ]

    def variants(self, quick):
        return [{"label": "-", "files": 50 if quick else 200}]

    def fs_size(self, quick):
        return (1 if quick else 2) << 30

    def describe(self, quick):
        v = self.variants(quick)[0]
        return (
            "Fill the file system to ~85% with 1 MiB files, delete every other one (free space is then "
            f"in ~1 MiB holes, no free 2 MiB run), then write {v['files']} files of 2 MiB, each with one "
            "`write` and an `fsync`; MB/s. For cairn also the allocator's groups scanned per allocation "
            "(`alloc.groups_scanned` / `alloc.calls` during the 2 MiB writes). Every image file is written "
            "in full before mkfs, and cairn serves its image file: on a sparse image, where each allocator "
            "puts the 2 MiB files would decide whether they land on memory the VM host must fault in first."
        )

    def run(self, fs, v):
        st = os.statvfs(fs.mp)
        n1 = int(st.f_bavail * st.f_frsize * 0.85) // (1 << 20)
        blob = os.urandom(2 << 20)
        d = os.path.join(fs.mp, "fill")
        os.mkdir(d)
        for i in range(n1):
            with open(os.path.join(d, str(i)), "wb") as f:
                f.write(blob[: 1 << 20])
        subprocess.run(["sync"])
        for i in range(0, n1, 2):
            os.unlink(os.path.join(d, str(i)))
        subprocess.run(["sync"])
        c0 = fs.cairn_counters()
        t0 = time.time()
        for i in range(v["files"]):
            fd = os.open(os.path.join(fs.mp, f"big{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, blob)
            os.fsync(fd)
            os.close(fd)
        res = {"mbps": v["files"] * 2 / (time.time() - t0)}
        c1 = fs.cairn_counters()
        if c0 and c1:
            calls = c1["alloc.calls"] - c0["alloc.calls"]
            res["groups_scanned_per_alloc"] = (c1["alloc.groups_scanned"] - c0["alloc.groups_scanned"]) / max(1, calls)
        return res


# ------------------------------------------------------------ seed 004 and fio peers

CAIRN_ON_FILE = (
    "cairn runs on its image file in the tmpfs (`cairn mount IMG MP -o allow_other`, as users mount it), "
    "the other block file systems on loop devices over files in the same tmpfs: a write is done, for "
    "each, once it is copied into the tmpfs file. Through a loop device cairn's `pwrite`s would first "
    "land in /dev/loopN's page cache and be copied again by the loop driver, a layer no kernel file "
    "system crosses: half of cairn's O_DIRECT overwrite IOPS here (issue #14)."
)


def fio(args):
    """Runs fio with JSON output; returns the parsed report. A failure names
    fio's own message (the runner shows an exception's last line)."""
    r = run(["fio", *args, "--output-format=json"], check=False, capture_output=True, text=True)
    if r.returncode:
        msg = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()
        raise RuntimeError(f"fio {args[0]} failed: {' / '.join(msg[-3:])}")
    return json.loads(r.stdout[r.stdout.index("{"):])


def check_written(paths, size):
    """The files hold `size` bytes in all, allocated (written, not sparse)."""
    have = sum(os.stat(p).st_blocks * 512 for p in paths)
    if have < size:
        raise RuntimeError(f"prefill left {have} of {size} bytes allocated")


def size_bytes(s):
    return int(s[:-1]) << {"M": 20, "G": 30}[s[-1]]


def job_variants(p):
    """One variant of the parameters `p` per job count in `p["jobs"]`."""
    return [{**p, "label": f"{j} job{'s' if j > 1 else ''}", "jobs": j} for j in p["jobs"]]


def fio_prefill(paths, v, common, direct=()):
    """Writes the job's files in full (`fio --rw=write --bs=1M --end_fsync=1`,
    `direct` adds its options), checks they are allocated, and syncs: every
    later write is an overwrite, every read finds data."""
    fio(["--name=prefill", "--rw=write", "--bs=1M", *direct, "--end_fsync=1", *common])
    check_written(paths, size_bytes(v["size"]))
    run(["sync"])


def fio_timed_4k(name, rw, v, common, extra=()):
    """A time-based 4 KiB psync O_DIRECT fio job of `v`'s ramp, runtime and
    job count over random offsets (`extra` adds options); fio's report."""
    return fio(
        [
            f"--name={name}",
            f"--rw={rw}",
            "--bs=4k",
            "--ioengine=psync",
            "--direct=1",
            "--norandommap=1",
            *extra,
            "--time_based=1",
            f"--ramp_time={v['ramp']}",
            f"--runtime={v['runtime']}",
            f"--numjobs={v['jobs']}",
            "--group_reporting=1",
            *common,
        ]
    )


class FioOverwrite(Experiment):
    name = "fio"
    seed = "004 (overwrite fast path)"
    title = "fio 4 KiB random overwrite, O_DIRECT, psync, 32 files shared by all jobs"
    tools = [("fio", "fio")]
    metrics = [Metric("iops", "IOPS", True, "IOPS")]
    cairn_on = "file"
    extra_fs = ["cairn-nofast", "cairn-devfuse", "cairn-pdio", "cairn-pdio-nofast"]
    chart = "columns"
    FILES = [f"file1.0.{i}" for i in range(32)]

    def params(self, quick):
        if quick:
            return {"size": "256M", "ramp": 1, "runtime": 3, "jobs": [1, 2, 4]}
        return {"size": "2G", "ramp": 3, "runtime": 10, "jobs": [1, 2, 4, 8, 16]}

    def variants(self, quick):
        return job_variants(self.params(quick))

    def describe(self, quick):
        p = self.params(quick)
        per = size_bytes(p["size"]) // 32 >> 20
        return (
            f"Seed 004's fio job scaled to 2 cores: 32 files `file1.0.0` … `file1.0.31` of {per} MiB "
            f"({p['size']} in all) shared by all jobs, written in full first (`fio --rw=write --bs=1M "
            "--end_fsync=1`, checked allocated), so every write is an overwrite; then `fio --rw=randwrite "
            "--bs=4k --ioengine=psync --direct=1 --norandommap=1 --invalidate=0 --nrfiles=32 "
            f"--file_service_type=random --filename=file1.0.0:…:file1.0.31 --size={p['size']} --time_based "
            f"--ramp_time={p['ramp']} --runtime={p['runtime']} --numjobs=N --group_reporting`, N = "
            f"{', '.join(map(str, p['jobs']))}. The seed ran 16 GiB, numjobs 1–16, ramp_time=30, runtime=60 "
            f"on simulated pmem. {CAIRN_ON_FILE} `cairn-nofast` is cairn mounted with "
            "`-o overwrite_fastpath=0` (every overwrite through the journaled path); `cairn-pdio` with "
            "`-o parallel_dio=1` (OPEN answered, an O_DIRECT open gets FOPEN_DIRECT_IO | "
            "FOPEN_PARALLEL_DIRECT_WRITES: the kernel takes the inode lock shared for these writes, where by "
            "default it holds it exclusively for each, so jobs writing the same file wait for each other); `cairn-pdio-nofast` with both."
        )

    def run(self, fs, v):
        common = [
            f"--directory={fs.mp}",
            "--filename=" + ":".join(self.FILES),
            "--nrfiles=32",
            f"--size={v['size']}",
        ]
        fio_prefill([os.path.join(fs.mp, f) for f in self.FILES], v, common)
        j = fio_timed_4k("overwrite", "randwrite", v, common, ["--invalidate=0", "--file_service_type=random"])
        return {"iops": j["jobs"][0]["write"]["iops"]}


class FioRandRead(Experiment):
    name = "fio-randread"
    seed = "- (beside 004's fio)"
    title = "fio 4 KiB random read, O_DIRECT, psync, one written file"
    tools = [("fio", "fio")]
    metrics = [Metric("iops", "IOPS", True, "IOPS")]
    cairn_on = "file"
    chart = "columns"

    def params(self, quick):
        if quick:
            return {"size": "512M", "ramp": 1, "runtime": 3, "jobs": [1]}
        return {"size": "4G", "ramp": 3, "runtime": 10, "jobs": [1, 2]}

    def fs_size(self, quick):
        return size_bytes(self.params(quick)["size"]) + (2 << 30)

    def variants(self, quick):
        return job_variants(self.params(quick))

    def describe(self, quick):
        p = self.params(quick)
        return (
            f"One {p['size']} file written in full first (`fio --rw=write --bs=1M --direct=1 --end_fsync=1`, "
            "checked allocated), then `fio --rw=randread --bs=4k --ioengine=psync --direct=1 --norandommap=1 "
            f"--size={p['size']} --time_based --ramp_time={p['ramp']} --runtime={p['runtime']} --numjobs=N "
            f"--group_reporting` on that file, N = {', '.join(map(str, p['jobs']))}. {CAIRN_ON_FILE}"
        )

    def run(self, fs, v):
        common = [f"--filename={os.path.join(fs.mp, 'rr')}", f"--size={v['size']}"]
        fio_prefill([os.path.join(fs.mp, "rr")], v, common, ["--direct=1"])
        j = fio_timed_4k("randread", "randread", v, common)
        return {"iops": j["jobs"][0]["read"]["iops"]}


class FioSeqWrite(Experiment):
    name = "fio-seqwrite"
    seed = "- (beside 004's fio)"
    title = "fio 1 MiB sequential write of one file, with a final fsync"
    tools = [("fio", "fio")]
    metrics = [Metric("mbps", "MB/s", True, "write rate (with final fsync)")]
    cairn_on = "file"

    def params(self, quick):
        return {"size": "512M" if quick else "4G"}

    def fs_size(self, quick):
        return size_bytes(self.params(quick)["size"]) + (2 << 30)

    def variants(self, quick):
        return [{"label": "1 MiB writes", **self.params(quick)}]

    def describe(self, quick):
        p = self.params(quick)
        return (
            f"`fio --rw=write --bs=1M --ioengine=psync --size={p['size']} --fallocate=none --end_fsync=1` "
            "(buffered, one job, a new file, no preallocation): bytes / wall time of the whole fio run, "
            f"the final fsync included; MB/s = 10^6 bytes/s. {CAIRN_ON_FILE}"
        )

    def run(self, fs, v):
        path = os.path.join(fs.mp, "sw")
        t0 = time.time()
        fio(["--name=seqwrite", "--rw=write", "--bs=1M", "--ioengine=psync", f"--filename={path}",
             f"--size={v['size']}", "--fallocate=none", "--end_fsync=1"])
        elapsed = time.time() - t0
        size = size_bytes(v["size"])
        if os.stat(path).st_size != size:
            raise RuntimeError(f"fio wrote {os.stat(path).st_size} of {size} bytes")
        return {"mbps": size / 1e6 / elapsed}


# ------------------------------------------------------------ extras


class Sequential(Experiment):
    name = "seq"
    seed = "-"
    title = "sequential write and cold read"
    # cairn and fuse2fs on their image files, as users run them (CAIRN_ON_FILE).
    cairn_on = "file"
    metrics = [
        Metric("write", "MB/s", True, "write (with final fsync)"),
        Metric("read", "MB/s", True, "cold read"),
    ]

    def variants(self, quick):
        return [{"label": "1 MiB I/O", "mib": 256 if quick else 1024}]

    def describe(self, quick):
        v = self.variants(quick)[0]
        return (
            f"`dd if=/dev/zero of=MP/seq bs=1M count={v['mib']} conv=fsync`, then every cache "
            "dropped (unmount, drop_caches, mount) and `dd if=MP/seq of=/dev/null bs=1M`. The image files "
            "and the loop devices' backing files stay in the tmpfs: a cold read reads them from RAM. "
            + CAIRN_ON_FILE
            + " fuse2fs serves its image file too."
        )

    def run(self, fs, v):
        p = os.path.join(fs.mp, "seq")
        t0 = time.time()
        run(["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={v['mib']}", "conv=fsync"], capture_output=True)
        res = {"write": v["mib"] * 1.048576 / (time.time() - t0)}
        fs.remount_cold()
        t0 = time.time()
        run(["dd", f"if={p}", "of=/dev/null", "bs=1M"], capture_output=True)
        res["read"] = v["mib"] * 1.048576 / (time.time() - t0)
        return res


class MetaLatency(Experiment):
    name = "metalat"
    seed = "-"
    title = "metadata latency (one process, one directory)"
    metrics = [
        Metric("create_us", "µs", False, "create+close p50"),
        Metric("stat_us", "µs", False, "stat p50"),
        Metric("rename_us", "µs", False, "rename p50"),
        Metric("unlink_us", "µs", False, "unlink p50"),
        Metric("create_p99_us", "µs", False, "create+close p99"),
    ]

    def variants(self, quick):
        return [{"label": "-", "n": 1000 if quick else 5000}]

    def describe(self, quick):
        n = self.variants(quick)[0]["n"]
        return (
            f"Python, {n} files in one directory: `open(O_CREAT)`+`close`, `stat` (a different, "
            "uncached name each time is not possible: this is the warm-cache stat), `rename` to a "
            "new name, `unlink`; median and 99th percentile per call in µs."
        )

    def run(self, fs, v):
        n = v["n"]
        d = os.path.join(fs.mp, "lat")
        os.mkdir(d)

        def timed(fn):
            lat = []
            for i in range(n):
                t = time.perf_counter_ns()
                fn(i)
                lat.append((time.perf_counter_ns() - t) / 1000)
            lat.sort()
            return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]

        c50, c99 = timed(lambda i: os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)))
        s50, _ = timed(lambda i: os.stat(f"{d}/f{i}"))
        r50, _ = timed(lambda i: os.rename(f"{d}/f{i}", f"{d}/g{i}"))
        u50, _ = timed(lambda i: os.unlink(f"{d}/g{i}"))
        return {"create_us": c50, "stat_us": s50, "rename_us": r50, "unlink_us": u50, "create_p99_us": c99}
