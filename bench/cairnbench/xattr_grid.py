"""bench/xattr-grid's parts: the four file systems (make, mount, unmount,
check) and the report (Markdown tables, SVG plots, results.json).

Self-contained on purpose: it imports nothing else from cairnbench but
mounts.py (standard library only, shared with fs.py and tests/external), so
the grid keeps working while the main suite's modules change.

    python3 bench/cairnbench/xattr_grid.py RESULTS.json [OUTDIR]

re-writes report.md and the SVGs from a results.json.
"""

import html
import json
import math
import os
import statistics
import subprocess
import sys
import time

# bench/ on the path, as when run as a script (bench/cairnbench is first then).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cairnbench.mounts import image_free, is_mounted, wait_until  # noqa: E402

# The file systems, in report order: (name, kind, mount option or None).
FILESYSTEMS = [
    ("cairn", "cairn", None),
    ("cairn-nombcache", "cairn", "nombcache"),
    ("ext4", "ext4", None),
    ("ext4-nombcache", "ext4", "nombcache"),
]
FS_NAMES = [n for n, _, _ in FILESYSTEMS]
COLORS = {"cairn": "#d95f02", "cairn-nombcache": "#fdae61", "ext4": "#1b9e77", "ext4-nombcache": "#a6dba0"}
DASH = {"cairn": "", "cairn-nombcache": "5,3", "ext4": "", "ext4-nombcache": "5,3"}
IMAGE_BYTES = 1 << 30
MBCACHE = ["lookups", "hits", "misses", "inserts", "insert_exists", "reclaimed", "second_chances",
           "refcount_limit", "false_matches"]


def run(cmd, check=True, timeout=None, **kw):
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[-800:]}")
    return p


def gone(pid):
    """The process has exited: no /proc entry, or only its thread-group
    leader is left, as a zombie (its parent, init here since `cairn mount`
    returns at once, can take a second or two to reap it). A zombie leader
    with other threads still listed is still exiting."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                return False
        return os.listdir(f"/proc/{pid}/task") in ([], [str(pid)])
    except OSError:
        return True


class Scratch:
    """A private tmpfs holding every image and mount point."""

    def __init__(self, size):
        self.path = run(["mktemp", "-d", "/tmp/cairn-xattr-grid.XXXXXX"]).stdout.strip()
        run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", self.path])
        self.mounted = True

    def teardown(self):
        if not self.mounted:
            return
        # Anything still mounted below it (should be nothing by now).
        for line in reversed(open("/proc/self/mountinfo").read().splitlines()):
            mp = line.split()[4]
            if mp.startswith(self.path + "/"):
                run(["umount", "-l", mp], check=False)
        run(["umount", "-l", self.path], check=False)
        self.mounted = False
        try:
            os.rmdir(self.path)
        except OSError:
            pass


class FileSystem:
    """One of the four; `make()` gives a fresh one for every cell."""

    def __init__(self, name, kind, option, scratch, cairn_bin):
        self.name, self.kind, self.option = name, kind, option
        self.cairn = cairn_bin
        self.image = os.path.join(scratch, f"{name}.img")
        self.mp = os.path.join(scratch, name)
        self.log = os.path.join(scratch, f"{name}.log")
        self.dev = None
        self.pid = None
        self.mkfs_retries = 0
        os.makedirs(self.mp, exist_ok=True)

    def mount_options(self):
        if self.kind == "cairn":
            return "allow_other" + (f",{self.option}" if self.option else "")
        return self.option or "defaults"

    def make(self):
        """A fresh file system, mounted."""
        if self.kind == "cairn":
            if os.path.exists(self.image):
                os.unlink(self.image)
            with open(self.image, "wb") as f:
                f.truncate(IMAGE_BYTES)
            run([self.cairn, "mkfs", self.image, "--force", "--quiet"])
        else:
            if self.dev is None:
                with open(self.image, "wb") as f:
                    f.truncate(IMAGE_BYTES)
                self.dev = run(["losetup", "--find", "--show", self.image]).stdout.strip()
            # 256-byte inodes (the default, made explicit), no lazy init (no
            # ext4lazyinit thread writing inode tables during the run);
            # mkfs's discard punches the old contents out of the tmpfs file.
            # The loop device can be briefly busy right after the last cell
            # (something on the machine opening it exclusively): retry.
            for attempt in range(20):
                p = run(["mkfs.ext4", "-q", "-F", "-I", "256", "-E", "lazy_itable_init=0,lazy_journal_init=0",
                         self.dev], check=False)
                if p.returncode == 0:
                    break
                if "in use" not in (p.stderr + p.stdout) or attempt == 19:
                    raise RuntimeError(f"mkfs.ext4 {self.dev}: exit {p.returncode}: {(p.stderr or p.stdout).strip()}")
                self.mkfs_retries += 1
                time.sleep(0.5)
            back = run(["losetup", "--noheadings", "-O", "BACK-FILE", self.dev]).stdout.strip()
            if os.path.realpath(back) != os.path.realpath(self.image):
                raise RuntimeError(f"{self.dev} is no longer attached to {self.image} (now: {back or 'nothing'})")
        self.mount()

    def mount(self):
        if self.kind == "cairn":
            run([self.cairn, "mount", self.image, self.mp, "-o", self.mount_options(), "--log", self.log])
            self.pid = self.stats()["pid"]
        else:
            run(["mount", "-t", "ext4", "-o", self.mount_options(), self.dev, self.mp])
        os.chmod(self.mp, 0o777)

    def stats(self):
        return json.loads(run([self.cairn, "stats", self.mp, "--json"]).stdout)

    def server_pids(self):
        """What works for this file system outside the benchmark's processes:
        cairn's daemon; ext4's journal thread (jbd2/loopN-8)."""
        if self.kind == "cairn":
            return [self.pid] if self.pid else []
        want = f"jbd2/{os.path.basename(self.dev)}-8"
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if open(f"/proc/{d}/comm").read().strip() == want:
                        return [int(d)]
                except OSError:
                    pass
        return []

    def counters(self):
        return self.stats()["counters"] if self.kind == "cairn" else {}

    def unmount(self):
        """umount; for cairn also waits until the daemon has exited (the
        image is then consistent and released)."""
        if not is_mounted(self.mp):
            return
        run(["umount", self.mp], timeout=120)
        if self.kind == "cairn" and self.pid:
            pid = self.pid
            wait_until(
                lambda: gone(pid) and image_free(self.image), 120, f"the cairn daemon {pid} to exit", step=0.02
            )
            self.pid = None

    def fsck(self):
        """(clean?, last line of the checker's output)."""
        if self.kind == "cairn":
            p = run([self.cairn, "fsck", self.image], check=False)
        else:
            p = run(["e2fsck", "-f", "-n", self.dev], check=False)
        text = (p.stdout + p.stderr).strip()
        last = text.splitlines()[-1] if text else ""
        return p.returncode == 0, f"exit {p.returncode}: {last}"

    def teardown(self):
        """Undoes everything (on success, failure and Ctrl-C alike)."""
        try:
            self.unmount()
        except Exception:
            run(["umount", "-l", self.mp], check=False)
        if self.dev:
            run(["losetup", "-d", self.dev], check=False)
            self.dev = None
        if os.path.exists(self.image):
            os.unlink(self.image)


# ------------------------------------------------------------ report


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=3):
    if x is None:
        return "—"
    if digits == 0:
        return f"{round(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}" if abs(x) < 1 else f"{x:.2f}"


def kfmt(x):
    if x is None:
        return "—"
    if x < 1000:
        return f"{x:.0f}"
    return f"{x / 1000:.1f}k" if x < 100_000 else f"{x / 1000:.0f}k"


def cells_by_key(res):
    """{(P, F, V, fs): [run dicts]}"""
    out = {}
    for r in res["runs"]:
        out.setdefault((r["p"], r["f"], r["v"], r["fs"]), []).append(r)
    return out


def cpu_total(r):
    """CPU seconds of the timed part: the benchmark's processes plus the file
    system's own (cairn's daemon, ext4's jbd2 thread)."""
    if r.get("cpu_seconds") is None:
        return None
    return r["cpu_seconds"] + (r.get("server_cpu_seconds") or 0)


def cell_value(runs, key):
    return median([r.get(key) for r in runs if "error" not in r])


def summary(res):
    """Per-cell medians and the issue's bars, computed from the raw runs."""
    g = res["meta"]["grid"]
    by = cells_by_key(res)
    med = {}
    for (p, f, v, fs), runs in by.items():
        med[(p, f, v, fs)] = {
            "seconds": cell_value(runs, "seconds"),
            "ops_per_s": cell_value(runs, "ops_per_s"),
            "xattr_blocks": cell_value(runs, "xattr_blocks"),
            "cpu": median([cpu_total(r) for r in runs if "error" not in r]),
            "n_runs": sum(1 for r in runs if "error" not in r),
            "spread": spread([r.get("seconds") for r in runs if "error" not in r]),
            "errors": [r["error"] for r in runs if "error" in r],
        }
    ratio_cache, ratio_ext4, ratio_nocache_ext4, ratio_cpu = {}, {}, {}, {}
    for p in g["P"]:
        for f in g["F"]:
            for v in g["V"]:
                def s(fs):
                    return med.get((p, f, v, fs), {}).get("seconds")
                a, b, e, en = s("cairn"), s("cairn-nombcache"), s("ext4"), s("ext4-nombcache")
                if a and b:
                    ratio_cache[(p, f, v)] = a / b
                ca = med.get((p, f, v, "cairn"), {}).get("cpu")
                cb = med.get((p, f, v, "cairn-nombcache"), {}).get("cpu")
                if ca and cb:
                    ratio_cpu[(p, f, v)] = ca / cb
                if a and e:
                    ratio_ext4[(p, f, v)] = a / e
                if b and en:
                    ratio_nocache_ext4[(p, f, v)] = b / en
    runs = res["runs"]
    verified = [r for r in runs if "lost_updates" in r]
    rechecked = [r for r in runs if "remount_check" in r]
    fscks = [r for r in runs if "fsck_clean" in r]
    pmax = max(g["P"])
    bars = {
        "a_max_cache_over_nocache": max(ratio_cache.values()) if ratio_cache else None,
        "a_worst_cell": max(ratio_cache, key=ratio_cache.get) if ratio_cache else None,
        "a_pass": bool(ratio_cache) and max(ratio_cache.values()) <= 2.0,
        "b_lost_updates_pmax": sum(r["lost_updates"] for r in verified if r["p"] == pmax),
        "b_lost_updates_all": sum(r["lost_updates"] for r in verified),
        "b_files_checked_pmax": sum(r["files_checked"] for r in verified if r["p"] == pmax),
        "b_remount_lost_pmax": sum(r["remount_check"]["lost_updates"] for r in rechecked if r["p"] == pmax),
        "b_fsck_pmax": [sum(1 for r in fscks if r["p"] == pmax and r["fsck_clean"]),
                        sum(1 for r in fscks if r["p"] == pmax)],
        "b_fsck_all": [sum(1 for r in fscks if r["fsck_clean"]), len(fscks)],
        "b_fsck_cairn_pmax": [sum(1 for r in fscks if r["p"] == pmax and r["fsck_clean"] and r["fs"].startswith("cairn")),
                              sum(1 for r in fscks if r["p"] == pmax and r["fs"].startswith("cairn"))],
        "errors": sum(1 for r in runs if "error" in r),
    }
    bars["a_cpu_max"] = max(ratio_cpu.values()) if ratio_cpu else None
    bars["a_cpu_worst_cell"] = max(ratio_cpu, key=ratio_cpu.get) if ratio_cpu else None
    bars["ratio_cpu"] = ratio_cpu
    bars["b_pass"] = (bars["b_lost_updates_pmax"] == 0 and bars["b_remount_lost_pmax"] == 0
                      and bars["b_fsck_cairn_pmax"][0] == bars["b_fsck_cairn_pmax"][1] > 0
                      and bars["b_files_checked_pmax"] > 0)
    return med, ratio_cache, ratio_ext4, ratio_nocache_ext4, bars


def spread(xs):
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return 0.0
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m if m else 0.0


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(g, rowfn, header_note=""):
    md = ["| P | F | " + " | ".join(f"V={v:,}" for v in g["V"]) + " |",
          "|---:|---:|" + "---:|" * len(g["V"])]
    for p in g["P"]:
        for f in g["F"]:
            md.append(f"| {p} | {f:,} | " + " | ".join(rowfn(p, f, v) for v in g["V"]) + " |")
    return md


def ratio_text(r):
    if r is None:
        return "—"
    t = f"{r:.2f}"
    return f"**{t}**" if r > 2 or r < 0.5 else t


def write_report(outdir, res):
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    meta, g = res["meta"], res["meta"]["grid"]
    med, rc, re4, rne, bars = summary(res)
    res_summary = {"bars": bars}
    by = cells_by_key(res)
    reps = meta["reps"]

    def secs(fs):
        def f(p, ff, v):
            c = med.get((p, ff, v, fs))
            if not c or c["seconds"] is None:
                return "err" if c and c["errors"] else "—"
            t = fmt(c["seconds"])
            if c["spread"] > 0.25:
                t += " ~"
            if fs.startswith("cairn") and (p, ff, v) in rechecked:
                t += " ↻"
            return t
        return f

    def rate(fs):
        def f(p, ff, v):
            c = med.get((p, ff, v, fs))
            return fmt(c["ops_per_s"] / 1000) if c and c["ops_per_s"] else "—"
        return f

    ratio_cpu = bars.pop("ratio_cpu")
    rechecked = {tuple(x[:3]): x[3] for x in meta.get("rechecked", [])}

    def cpu(fs):
        def f(p, ff, v):
            c = med.get((p, ff, v, fs))
            return fmt(c["cpu"]) if c and c.get("cpu") is not None else "—"
        return f

    ncells = len(g["P"]) * len(g["F"]) * len(g["V"])
    md = [f"# xattr-grid: seed 000's xattr-bench on cairn and ext4, mbcache on and off{' (quick)' if meta['quick'] else ''}",
          "",
          f"{meta['date']}, {meta['machine']}. cairn: `{meta['cairn']}`"
          + (f", built {meta['cairn_binary']['mtime']} (sha256 {meta['cairn_binary']['sha256'][:12]}…)"
             if meta.get("cairn_binary") else "")
          + f"; source tree at {meta['cairn_version']} when the run started. "
          f"Command: `{meta['command']}`; {meta['wall_seconds']:,} s in all.",
          "",
          "## What ran",
          "",
          f"- `bench/xattr_bench.py`: P processes each make F empty files, then (the clock starts once all have) each "
          f"sets `user.bench` N = {g['N']:,} times on one of its F files, chosen at random, to one of V values "
          f"chosen at random. Grid P ∈ {g['P']}, F ∈ {g['F']}, V ∈ {g['V']}: {ncells} cells × {len(FS_NAMES)} file "
          f"systems. The seed ran N = 50,000 on 24 CPUs with P up to 64; here {meta['cpus']} CPUs ({meta['n_reason']}).",
          f"- Values are {g['value_bytes']} bytes. ext4's 256-byte inode leaves 256 − 128 − 32 (extra_isize) = 96 bytes "
          "for in-inode xattrs; less the 4-byte header, a 16-byte entry header and 8 bytes for the name `bench`, at "
          f"most ~68 bytes of value fit. {g['value_bytes']} bytes therefore always goes to an xattr block, where mbcache "
          "sharing happens. cairn stores values the same way (see the block counts below).",
          "- The file systems are measured in the same run, interleaved cell by cell, and the order of the four "
          "rotates from cell to cell. **cairn**: `cairn mount IMG MP -o allow_other` (as root cairn serves the "
          "image through a loop device it attaches, fuseblk). **cairn-nombcache**: `-o allow_other,nombcache`, so "
          "every inode gets its own xattr block. **ext4** and **ext4-nombcache**: kernel ext4 "
          "(`mkfs.ext4 -I 256 -E lazy_itable_init=0,lazy_journal_init=0`) on a loop device over a file, the second "
          "mounted with `-o nombcache`. All images are 1 GiB files in one private tmpfs (RAM, like the seed's "
          "ramdisk).",
          f"- **A fresh file system for every cell**: mkfs and mount before it, unmount after it. {reps} run(s) per "
          "cell" + ("; the tables show medians, and a `~` marks a spread above 25% of the median." if reps > 1 else ".")
          + (" A cell where cairn / cairn-nombcache came out beyond 2× either way was measured "
             "again (`--recheck`, cairn and cairn-nombcache only). Its cairn figures are medians over all its "
             "runs; ↻ marks it." if "rechecked" in meta else ""),
          "- Time: wall seconds from the start barrier until the last of the P processes has finished, as the seed "
          "reports it. CPU: the CPU seconds of that timed part, counting the benchmark's processes (user + system, so "
          "a kernel file system's work and FUSE's request passing are included) plus the file system's own threads "
          "(cairn's daemon, with all its threads; ext4's jbd2 thread). Work ext4 defers to kworkers (the loop "
          "device's writes) is not counted. Wall time is the seed's metric. CPU time is much less disturbed by other "
          "work sharing the machine.",
          "- After the timed part of every cell, untimed: syncfs and statfs (xattr blocks = used blocks after − "
          "before the setxattr calls); the `cairn stats` counters (mbcache.*); then `--verify`, which checks that "
          "every file's getxattr equals the value its process set last (`lost_updates`). Then unmount and fsck "
          "(`cairn fsck IMG`, `e2fsck -f -n`) after **every** cell. For cairn, unmount means `umount`, then wait "
          "until the daemon has exited. At "
          f"P = {max(g['P'])} the file system is also mounted again, and every file's value is checked once more from disk.",
          f"- Machine load: the 1-minute load average was {meta['load_start']} at the start and "
          f"{meta.get('load_end', '?')} at the end. The machine is shared, and other work ran during the grid. "
          "results.json records the load for every run (`load1`).",
          ""]
    if meta.get("notes"):
        md += ["Notes:", ""] + [f"- {n}" for n in meta["notes"]] + [""]

    # ---- the bars
    md += ["## The issue's bars", ""]
    a = bars["a_max_cache_over_nocache"]
    if a is not None:
        w = bars["a_worst_cell"]
        line = (f"- (a) cairn with the cache vs without, by wall time per cell: the worst cell is {a:.2f}× "
                f"(P={w[0]} F={w[1]} V={w[2]}). Bar ≤ 2×: **{'PASS' if bars['a_pass'] else 'FAIL'}**. "
                f"Geometric mean over all cells {fmt(geomean(list(rc.values())), 2)}×. "
                f"{sum(1 for x in rc.values() if x > 1.1)} cells are more than 10% slower with the cache and "
                f"{sum(1 for x in rc.values() if x < 1 / 1.1)} more than 10% faster.")
        if rechecked:
            line += (f" {len(rechecked)} cell(s) were re-measured: "
                     + ", ".join(f"P={k[0]} F={k[1]} V={k[2]} first {x:.2f}× → {rc.get(k, float('nan')):.2f}×"
                                 for k, x in rechecked.items()) + ".")
        if bars.get("a_cpu_max") is not None:
            cw = bars["a_cpu_worst_cell"]
            line += (f" By CPU seconds: worst {bars['a_cpu_max']:.2f}× (P={cw[0]} F={cw[1]} V={cw[2]}), geometric "
                     f"mean {fmt(geomean(list(ratio_cpu.values())), 2)}×.")
        md.append(line)
    md.append(f"- (b) at P = {max(g['P'])}: {bars['b_lost_updates_pmax']} lost updates over "
              f"{bars['b_files_checked_pmax']:,} file checks (all file systems; "
              f"{bars['b_lost_updates_all']} over the whole grid), and {bars['b_remount_lost_pmax']} after the "
              f"remount. cairn fsck was clean {bars['b_fsck_cairn_pmax'][0]}/{bars['b_fsck_cairn_pmax'][1]} times at "
              f"P = {max(g['P'])}; over the whole grid, for both file systems, {bars['b_fsck_all'][0]}/"
              f"{bars['b_fsck_all'][1]} fscks were clean. **{'PASS' if bars['b_pass'] else 'FAIL'}**.")
    if re4:
        faster = {k: x for k, x in re4.items() if x < 1}
        md.append(f"- (c) cairn vs kernel ext4 (both with the cache), as the time ratio cairn / ext4: geometric mean "
                  f"{fmt(geomean(list(re4.values())), 2)}, range {min(re4.values()):.2f}–{max(re4.values()):.2f}. cairn is "
                  f"faster in {len(faster)} of {len(re4)} cells. Per P: "
                  + "; ".join(f"P={p} {fmt(geomean([x for k, x in re4.items() if k[0] == p]), 2)}" for p in g["P"])
                  + ". Per F: "
                  + "; ".join(f"F={f:,} {fmt(geomean([x for k, x in re4.items() if k[1] == f]), 2)}" for f in g["F"])
                  + ". Per V: "
                  + "; ".join(f"V={v:,} {fmt(geomean([x for k, x in re4.items() if k[2] == v]), 2)}" for v in g["V"])
                  + ". The full table is under Ratios.")
    if bars["errors"]:
        md.append(f"- {bars['errors']} run(s) failed: see the tables (`err`) and results.json.")
    md.append("")

    if meta.get("reading"):
        md += ["## Reading (written after the run)", ""] + [f"- {x}" for x in meta["reading"]] + [""]

    # ---- per file system
    for fs in FS_NAMES:
        md += [f"## {fs}", "",
               "Wall seconds (lower is better):", ""]
        md += table(g, secs(fs)) + [""]
        md += [f"{fs}: setxattr calls per second over all processes, in thousands (higher is better):", ""]
        md += table(g, rate(fs)) + [""]
        md += [f"{fs}: CPU seconds of the timed part (benchmark processes + the file system's threads):", ""]
        md += table(g, cpu(fs)) + [""]

    # ---- ratios
    md += ["## Ratios (wall time; < 1: the first is faster)", "",
           "cairn with the cache / cairn with `-o nombcache` (bar (a): ≤ 2; bold: beyond 2× either way):", ""]
    md += table(g, lambda p, f, v: ratio_text(rc.get((p, f, v))) + (" ↻" if (p, f, v) in rechecked else "")) + [""]
    md += ["The same by CPU seconds (cairn / cairn -o nombcache):", ""]
    md += table(g, lambda p, f, v: ratio_text(ratio_cpu.get((p, f, v)))) + [""]
    md += ["cairn / kernel ext4 (both with the cache):", ""]
    md += table(g, lambda p, f, v: ratio_text(re4.get((p, f, v)))) + [""]
    cpu_e4 = {}
    for k in rc:
        x, y = med.get(k + ("cairn",), {}).get("cpu"), med.get(k + ("ext4",), {}).get("cpu")
        if x and y:
            cpu_e4[k] = x / y
    md += ["The same by CPU seconds (cairn, daemon included / ext4, jbd2 included; ext4's loop-device "
           "writeback in kworkers is not counted):", ""]
    md += table(g, lambda p, f, v: ratio_text(cpu_e4.get((p, f, v)))) + [""]
    md += ["cairn -o nombcache / ext4 -o nombcache:", ""]
    md += table(g, lambda p, f, v: ratio_text(rne.get((p, f, v)))) + [""]
    re4n = {}
    for k in rc:
        e = med.get(k + ("ext4",), {}).get("seconds")
        en = med.get(k + ("ext4-nombcache",), {}).get("seconds")
        if e and en:
            re4n[k] = e / en
    md += ["For comparison, the kernel's own: ext4 / ext4 -o nombcache:", ""]
    md += table(g, lambda p, f, v: ratio_text(re4n.get((p, f, v)))) + [""]

    # ---- blocks and counters
    md += ["## xattr blocks in use at the end", "",
           "statfs used blocks after the run (and a syncfs) minus before the first setxattr; "
           "cells read cairn / cairn-nombcache / ext4 / ext4-nombcache. With the cache, identical sets share a "
           "block (at most V blocks, or fewer: one per value actually in use; a block holds up to 1,024 "
           "references); without it, one block per file that got a value (at most P × F).", ""]
    md += table(g, lambda p, f, v: " / ".join(
        fmt(med.get((p, f, v, fs), {}).get("xattr_blocks"), 0) if med.get((p, f, v, fs), {}).get("xattr_blocks") is not None
        else "—" for fs in FS_NAMES)) + [""]

    def ctr(p, f, v, key):
        runs = [r for r in by.get((p, f, v, "cairn"), []) if "mbcache" in r]
        return median([r["mbcache"].get(key) for r in runs])

    md += ["## cairn's mbcache counters (cairn with the cache)", "",
           "Per cell (median over runs), from `cairn stats` right after the mount and after the benchmark "
           "process (file creation, the timed loop and the verify pass; only the loop sets xattrs). Each cell "
           "shows `hits / misses`, then `entries` at the end. A hit finds an identical block and shares it. On a "
           "miss, the file's own block is changed in place if nobody shares it; otherwise a new block is written. "
           "lookups = hits + misses. The same-value shortcut (the value is already set) makes no lookup.", ""]
    md += table(g, lambda p, f, v: f"{fmt(ctr(p, f, v, 'hits'), 0)} / {fmt(ctr(p, f, v, 'misses'), 0)}, "
                f"{fmt(ctr(p, f, v, 'entries'), 0)}") + [""]
    other = {}
    for r in res["runs"]:
        if r["fs"] == "cairn" and "mbcache" in r:
            for k in ("reclaimed", "second_chances", "refcount_limit", "false_matches", "insert_exists"):
                other[k] = other.get(k, 0) + (r["mbcache"].get(k) or 0)
    md += ["false_matches are candidates whose bytes did not match (hash collisions, or entries of blocks "
           "freed or changed meanwhile); refcount_limit counts blocks that reached 1,024 references.", "",
           "Over the whole grid (cairn with the cache): " + ", ".join(f"{k} {v:,}" for k, v in other.items())
           + ". Where those are non-zero, per cell:", ""]
    nz = [k for k, x in other.items() if x]
    if nz:
        md += ["| P | F | V | " + " | ".join(nz) + " |", "|---:|---:|---:|" + "---:|" * len(nz)]
        for p in g["P"]:
            for f in g["F"]:
                for v in g["V"]:
                    vals = [ctr(p, f, v, k) for k in nz]
                    if any(vals):
                        md.append(f"| {p} | {f:,} | {v:,} | " + " | ".join(fmt(x, 0) for x in vals) + " |")
        md.append("")
    def cd(p, f, v, fs, key):
        runs = [r for r in by.get((p, f, v, fs), []) if "counters_delta" in r]
        return median([r["counters_delta"].get(key, 0) for r in runs])

    md += ["### What the cache changes in cairn's work", "",
           "Blocks allocated (`alloc.blocks_allocated`; the same span as the counters above, so the "
           "directories' few blocks are included), cairn / cairn-nombcache. Without the cache, "
           "each file gets one block and edits it in place afterwards. With the cache, a set that matches no cached "
           "block while the file's old block is shared needs a new block, and a hit frees the old block once its "
           "last reference goes.", ""]
    md += table(g, lambda p, f, v: f"{fmt(cd(p, f, v, 'cairn', 'alloc.blocks_allocated'), 0)} / "
                f"{fmt(cd(p, f, v, 'cairn-nombcache', 'alloc.blocks_allocated'), 0)}") + [""]
    md += ["Journal blocks logged (`journal.blocks_logged`) and commits "
           "(`journal.commits`), cairn / cairn-nombcache. A block modified many times within one transaction is "
           "logged once. A few shared blocks keep the transaction small; thousands of private (or newly allocated) "
           "blocks fill it, and it commits early.", ""]
    md += table(g, lambda p, f, v: f"{kfmt(cd(p, f, v, 'cairn', 'journal.blocks_logged'))}, "
                f"{fmt(cd(p, f, v, 'cairn', 'journal.commits'), 0)} / "
                f"{kfmt(cd(p, f, v, 'cairn-nombcache', 'journal.blocks_logged'))}, "
                f"{fmt(cd(p, f, v, 'cairn-nombcache', 'journal.commits'), 0)}") + [""]

    def p99(p, f, v, fs):
        runs = [r for r in by.get((p, f, v, fs), []) if "counters_end" in r]
        return median([r["counters_end"].get("fuse.setxattr.us_p99") for r in runs])

    md += ["Daemon-side setxattr latency, p99 in µs (`fuse.setxattr.us_p99`, power-of-two buckets), "
           "cairn / cairn-nombcache:", ""]
    md += table(g, lambda p, f, v: f"{fmt(p99(p, f, v, 'cairn'), 0)} / {fmt(p99(p, f, v, 'cairn-nombcache'), 0)}") + [""]
    nombc = [r for r in res["runs"] if r["fs"] == "cairn-nombcache" and "mbcache" in r]
    if nombc:
        md += [f"cairn -o nombcache: lookups {sum(r['mbcache'].get('lookups', 0) for r in nombc):,}, inserts "
               f"{sum(r['mbcache'].get('inserts', 0) for r in nombc):,} over the grid (must be 0: the cache is off).", ""]

    # ---- checks
    md += ["## Checks", "",
           "| fs | runs | files checked | lost updates | remount checks (P max) | lost after remount | fsck clean |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for fs in FS_NAMES:
        rs = [r for r in res["runs"] if r["fs"] == fs]
        rem = [r["remount_check"] for r in rs if "remount_check" in r]
        md.append(f"| {fs} | {len(rs)} | {sum(r.get('files_checked', 0) for r in rs):,} | "
                  f"{sum(r.get('lost_updates', 0) for r in rs)} | {sum(x['files_checked'] for x in rem):,} | "
                  f"{sum(x['lost_updates'] for x in rem)} | "
                  f"{sum(1 for r in rs if r.get('fsck_clean'))}/{sum(1 for r in rs if 'fsck_clean' in r)} |")
    md.append("")
    errs = [r for r in res["runs"] if "error" in r or r.get("fsck_clean") is False]
    if errs:
        md += ["Failures:", ""] + [f"- {r['fs']} P={r['p']} F={r['f']} V={r['v']}: {r.get('error') or r.get('fsck')}"
                                   for r in errs] + [""]
    md += ["## Plots", "", "![wall time vs V](wall.svg)", "", "![ratios](ratios.svg)", "",
           "`results.json` holds every raw number (per run: seconds, setxattr/s, statfs blocks, verify and fsck "
           "results, cairn's counter deltas, the load average)."]
    with open(os.path.join(outdir, "report.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    with open(os.path.join(outdir, "wall.svg"), "w") as fh:
        fh.write(wall_svg(g, med))
    with open(os.path.join(outdir, "ratios.svg"), "w") as fh:
        fh.write(ratio_svg(g, [("cairn / cairn -o nombcache, wall time", rc),
                               ("cairn / cairn -o nombcache, CPU time", ratio_cpu),
                               ("cairn / kernel ext4, wall time", re4),
                               ("cairn / kernel ext4, CPU time", cpu_e4)]))
    return os.path.join(outdir, "report.md"), res_summary


# ------------------------------------------------------------ SVG


def nice_max(x):
    if x <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= x:
            return m * e
    return 10 * e


def wall_svg(g, med):
    """Small multiples: rows P, columns F; in each, wall seconds vs V (log x)
    for the four file systems. Each panel has its own y scale (from 0)."""
    pw, ph, ml, mt, gap = 250, 150, 60, 70, 55
    cols, rows = len(g["F"]), len(g["P"])
    width = ml + cols * (pw + gap) + 10
    height = mt + rows * (ph + gap + 20) + 20
    e = html.escape
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
         f'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="10" y="20" font-size="15" font-weight="bold">xattr-bench: wall seconds vs V '
         f'(N = {g["N"]:,} setxattr per process; lower is better)</text>']
    lx = 10
    for fs in FS_NAMES:
        s.append(f'<line x1="{lx}" y1="40" x2="{lx + 24}" y2="40" stroke="{COLORS[fs]}" stroke-width="2.5" '
                 f'stroke-dasharray="{DASH[fs]}"/><text x="{lx + 30}" y="44">{e(fs)}</text>')
        lx += 150
    vs = g["V"]
    lo, hi = math.log10(min(vs)), math.log10(max(vs))
    for ri, p in enumerate(g["P"]):
        for ci, f in enumerate(g["F"]):
            x0 = ml + ci * (pw + gap)
            y0 = mt + ri * (ph + gap + 20)
            vals = [med.get((p, f, v, fs), {}).get("seconds") for fs in FS_NAMES for v in vs]
            ymax = nice_max(max([x for x in vals if x is not None] + [1e-6]))

            def X(v):
                return x0 + (math.log10(v) - lo) / ((hi - lo) or 1) * pw

            def Y(y):
                return y0 + ph - y / ymax * ph

            s.append(f'<text x="{x0 + pw / 2}" y="{y0 - 6}" text-anchor="middle" font-weight="bold">P={p}, F={f:,}</text>')
            s.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#bbb"/>')
            for t in (0, 0.5, 1):
                yy = Y(t * ymax)
                s.append(f'<line x1="{x0}" y1="{yy:.1f}" x2="{x0 + pw}" y2="{yy:.1f}" stroke="#eee"/>')
                s.append(f'<text x="{x0 - 4}" y="{yy + 4:.1f}" text-anchor="end">{fmt(t * ymax, 2)}</text>')
            for v in vs:
                s.append(f'<text x="{X(v):.1f}" y="{y0 + ph + 13}" text-anchor="middle">'
                         f'{v // 1000}k</text>' if v >= 1000 else
                         f'<text x="{X(v):.1f}" y="{y0 + ph + 13}" text-anchor="middle">{v}</text>')
            for fs in FS_NAMES:
                pts = [(X(v), Y(med[(p, f, v, fs)]["seconds"])) for v in vs
                       if med.get((p, f, v, fs), {}).get("seconds") is not None]
                if len(pts) > 1:
                    s.append(f'<polyline fill="none" stroke="{COLORS[fs]}" stroke-width="2" stroke-dasharray="{DASH[fs]}" '
                             f'points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}"/>')
                for a, b in pts:
                    s.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{COLORS[fs]}"/>')
    s.append(f'<text x="{ml + (cols * (pw + gap)) / 2}" y="{height - 6}" text-anchor="middle">V (distinct values, log scale); '
             'y: seconds, each panel its own scale</text>')
    s.append("</svg>")
    return "\n".join(s)


def ratio_svg(g, panels):
    """Heat maps of per-cell ratios, two per row: panels = [(title, {cell:
    ratio})] (log colour scale, 1 = white, red = the first slower, blue =
    faster)."""
    cw, chh, ml, mt, ph_gap = 62, 20, 110, 60, 50
    ncols = len(g["V"])
    nrows = len(g["P"]) * len(g["F"])
    panel_w = ml + ncols * cw + 30
    panel_h = nrows * chh + ph_gap
    width = 2 * panel_w + 10
    height = mt + ((len(panels) + 1) // 2) * panel_h + 10
    e = html.escape

    def color(r):
        if r is None:
            return "#ddd"
        t = max(-1.0, min(1.0, math.log2(r) / 2))  # ±4× saturates
        if t >= 0:
            return f"rgb(255,{int(255 * (1 - t))},{int(255 * (1 - t))})"
        return f"rgb({int(255 * (1 + t))},{int(255 * (1 + t))},255)"

    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
         f'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
         '<text x="10" y="20" font-size="15" font-weight="bold">Ratios per cell '
         '(red: the first is slower, blue: faster; the colour saturates at 4×)</text>']
    for pi, (title, data) in enumerate(panels):
        x0 = (pi % 2) * panel_w + 10
        y0 = mt + (pi // 2) * panel_h
        s.append(f'<text x="{x0 + ml}" y="{y0 - 18}" font-weight="bold">{e(title)}</text>')
        for ci, v in enumerate(g["V"]):
            s.append(f'<text x="{x0 + ml + ci * cw + cw / 2}" y="{y0 - 4}" text-anchor="middle">V={v:,}</text>')
        ri = 0
        for p in g["P"]:
            for f in g["F"]:
                y = y0 + ri * chh
                s.append(f'<text x="{x0 + ml - 6}" y="{y + 14}" text-anchor="end">P={p} F={f:,}</text>')
                for ci, v in enumerate(g["V"]):
                    r = data.get((p, f, v))
                    s.append(f'<rect x="{x0 + ml + ci * cw}" y="{y}" width="{cw - 1}" height="{chh - 1}" '
                             f'fill="{color(r)}"/>')
                    s.append(f'<text x="{x0 + ml + ci * cw + cw / 2}" y="{y + 14}" text-anchor="middle">'
                             f'{"—" if r is None else f"{r:.2f}"}</text>')
                ri += 1
    s.append("</svg>")
    return "\n".join(s)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    with open(sys.argv[1]) as fh:
        data = json.load(fh)
    print(write_report(sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(sys.argv[1])), data)[0])
