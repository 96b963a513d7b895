"""Encrypted file systems (issue #54): cairn on an encrypted image beside
plain cairn, gocryptfs and CryFS, in one run.

All four are FUSE file systems over the same kind of backing store: cairn
(plain and encrypted) serves an image file in the scratch tmpfs; gocryptfs
and CryFS keep their ciphertext on ext4 on a loop device over a file in the
same tmpfs (fs.py, `STACKED`). Phases: a 1 GiB file written + fsync'd and
read cold; fs_mark create, cold walk and unlink of empty files; untar and
`rm -rf` of realwork's Linux tree (its cache, realwork.py); fio 4 KiB random
overwrites. Each phase's rate, encrypted / plain cairn per phase, and CPU
per byte or per file: user + system seconds of the FUSE daemon (every
thread) and of the client (dd, fs_mark, tar, fio), which is where the
kernel's FUSE work on the caller's side is charged. Kernel threads (ext4's
writeback and journal under the stacked ones, the loop device's workers)
are in neither, so the stacked file systems' CPU is understated.
"""

import os
import re
import statistics
import time

from . import fs as fsmod
from . import realwork
from .experiments import Experiment, Metric, cpu_seconds, fio, fsmark_empty_files, run_parallel
from .fs import run

# (key, unit, higher is better, label); {big} is the big file's size.
PHASES = [
    ("bigwrite", "MB/s", True, "{big} written + fsync (dd bs=1M conv=fsync)"),
    ("bigread", "MB/s", True, "{big} read cold (dd bs=1M)"),
    ("create", "files/s", True, "fs_mark create, 2 threads"),
    ("walk", "entries/s", True, "cold walk (find, 2 trees)"),
    ("unlink", "files/s", True, "unlink (rm -rf, 2 trees)"),
    ("untar", "s", False, "untar of realwork's tree + sync -f"),
    ("rmtree", "s", False, "rm -rf of it + sync -f"),
    ("overwrite", "IOPS", True, "fio 4 KiB random overwrite, O_DIRECT"),
]
# Phases whose CPU is counted per MiB moved (the rest: per file, or per IO).
PER_MIB = {"bigwrite", "bigread", "untar"}


class Crypt(Experiment):
    name = "crypt"
    seed = "— (issue #54)"
    title = "Encrypted cairn beside plain cairn, gocryptfs and CryFS"
    tools = [("fs_mark", "fsmark"), ("fio", "fio"), ("tar", "tar"), ("dpkg-deb", "dpkg"), ("xz", "xz-utils"),
             ("git", "git")]
    in_default = False
    cairn_on = "file"
    extra_fs = []
    default_fs = ["cairn", fsmod.CAIRN_CRYPT, "gocryptfs", "cryfs"]
    max_reps = None
    metrics = [Metric(k, unit, better, label.format(big="1 GiB")) for k, unit, better, label in PHASES] + [
        Metric(f"{k}_cpu_{who}", "ms", False, f"CPU of the {who} per {'MiB' if k in PER_MIB else 'operation'} in {k}",
               table=False)
        for k, *_ in PHASES for who in ("daemon", "client")
    ]

    def __init__(self):
        self.meta = {}

    def variants(self, quick):
        return [{"label": "quick" if quick else "full", "quick": quick, "big_mib": 1024,
                 "files": 10_000 if quick else 100_000, "fio_size": "256M" if quick else "1G",
                 "ramp": 1 if quick else 3, "runtime": 5 if quick else 15}]

    def fs_size(self, quick):
        return (3 if quick else 6) << 30

    def prepare(self, quick, log):
        meta = realwork.load_cache(quick)
        if meta is None:
            meta = realwork.make_cache(quick, log)
        self.meta[quick] = meta

    def describe(self, quick):
        v = self.variants(quick)[0]
        per = v["files"] // 2
        m = self.meta.get(quick) or realwork.load_cache(quick) or {}
        return (
            "Encrypted cairn (`cairn-crypt`: `cairn mkfs --encrypt --key-file`, AES-256-XTS on every block) beside "
            "plain cairn, both serving an image file in the scratch tmpfs, and gocryptfs and CryFS (their defaults) "
            "over ext4 on a loop device over a file in the same tmpfs. Per cell, on fresh file systems: a "
            f"{v['big_mib']} MiB file written with `dd if=/dev/zero bs=1M conv=fsync` and read back cold with "
            "`dd bs=1M` (after unmounting every layer, `drop_caches` and mounting again); "
            f"{v['files']:,} empty files by `fs_mark -S 0 -s 0 -L 1 -D 100 -N {per // 100} -n {per}` in two "
            "trees, a cold parallel `find` of both and a parallel `rm -rf`; realwork's repository tar "
            f"({m.get('files_in_tar', 0):,} files, {m.get('tar_bytes', 0) / 1e6:.0f} MB, read beforehand so it "
            "comes from the page cache) untarred with `tar -xf` + `sync -f` of the mount (and of the lower ext4), "
            "then removed by `rm -rf` + `sync -f`; one file of "
            f"{v['fio_size']} written in full, then `fio --rw=randwrite --bs=4k --ioengine=psync --direct=1 "
            f"--numjobs=1 --ramp_time={v['ramp']} --runtime={v['runtime']}` over it. CPU: user + system seconds "
            "of the FUSE daemon (all threads) and of the client processes, in ms per MiB (the 1 GiB phases, "
            "untar: per MB of tar) or per file or IO; kernel threads (ext4 and loop under gocryptfs and CryFS, "
            "writeback) are in neither. The machine was shared with other work: only ratios within the run count."
        )

    def run(self, fs, v):
        res = {}
        self.run_big(fs, v, res)
        self.run_fsmark(fs, v, res)
        self.run_tree(fs, v, res)
        self.run_fio(fs, v, res)
        return res

    def timed(self, fs, res, key, per, fn):
        """Runs `fn()`, which returns the phase's rate (or seconds); records it
        and the daemon's and the clients' CPU ms per `per` units."""
        pid = fs.daemon_pid()
        d0, c0 = cpu_seconds(pid) if pid else None, os.times()
        res[key] = fn()
        d1, c1 = cpu_seconds(pid) if pid else None, os.times()
        client = c1.children_user + c1.children_system - c0.children_user - c0.children_system
        res[f"{key}_cpu_client"] = client * 1000 / per
        res[f"{key}_cpu_daemon"] = (d1 - d0) * 1000 / per if d0 is not None and d1 is not None else None

    def sync(self, fs):
        run(["sync", "-f", fs.mp])
        if fs.is_stacked:
            run(["sync", "-f", fs.lower])

    def run_big(self, fs, v, res):
        mib = v["big_mib"]
        p = os.path.join(fs.mp, "big")

        def write():
            t0 = time.time()
            run(["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={mib}", "conv=fsync"], capture_output=True)
            return mib * 1.048576 / (time.time() - t0)

        def read():
            t0 = time.time()
            run(["dd", f"if={p}", "of=/dev/null", "bs=1M"], capture_output=True)
            return mib * 1.048576 / (time.time() - t0)

        self.timed(fs, res, "bigwrite", mib, write)
        fs.remount_cold()
        self.timed(fs, res, "bigread", mib, read)
        os.unlink(p)
        self.sync(fs)

    def run_fsmark(self, fs, v, res):
        n = v["files"]
        dirs = [os.path.join(fs.mp, str(i)) for i in range(2)]

        def create():
            r = run(fsmark_empty_files(dirs, n // 2), capture_output=True, text=True, cwd=fs.scratch.path)
            rows = [ln.split() for ln in r.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d+\s+[\d.]+", ln)]
            if not rows:
                raise RuntimeError("fs_mark printed no result row:\n" + r.stdout[-2000:] + r.stderr[-2000:])
            return float(rows[-1][3])

        walked = n + 2 * 101
        self.timed(fs, res, "create", n, create)
        fs.remount_cold()
        self.timed(fs, res, "walk", walked,
                   lambda: walked / run_parallel([["find", d, "-printf", "%y %s\n"] for d in dirs]))
        self.timed(fs, res, "unlink", n, lambda: n / run_parallel([["rm", "-rf", d] for d in dirs]))
        self.sync(fs)

    def run_tree(self, fs, v, res):
        tar, _ = realwork.cache_paths(v["quick"])
        realwork.read_through(tar)
        mb = os.path.getsize(tar) / 1e6
        tree = os.path.join(fs.mp, realwork.TOP)

        def untar():
            t0 = time.time()
            run(["tar", "-xf", tar, "-C", fs.mp, "--no-same-owner"])
            self.sync(fs)
            return time.time() - t0

        def remove():
            t0 = time.time()
            run(["rm", "-rf", tree])
            self.sync(fs)
            return time.time() - t0

        self.timed(fs, res, "untar", mb, untar)
        self.timed(fs, res, "rmtree", (self.meta.get(v["quick"]) or {}).get("files_in_tar") or 1, remove)

    def run_fio(self, fs, v, res):
        common = [f"--directory={fs.mp}", "--filename=overwrite", f"--size={v['fio_size']}"]
        fio(["--name=prefill", "--rw=write", "--bs=1M", "--end_fsync=1", *common])
        holder = {}

        def overwrite():
            j = fio(["--name=overwrite", "--rw=randwrite", "--bs=4k", "--ioengine=psync", "--direct=1",
                     "--norandommap=1", "--invalidate=0", "--time_based=1", f"--ramp_time={v['ramp']}",
                     f"--runtime={v['runtime']}", "--numjobs=1", *common])
            holder["ios"] = j["jobs"][0]["write"]["total_ios"]
            return j["jobs"][0]["write"]["iops"]

        # CPU per IO: the IOs fio counted are known only after it ends.
        self.timed(fs, res, "overwrite", 1, overwrite)
        ios = max(1, holder.get("ios", 1))
        for who in ("daemon", "client"):
            k = f"overwrite_cpu_{who}"
            if res.get(k) is not None:
                res[k] /= ios

    def summary(self, cells, fs_order, quick):
        lab = self.variants(quick)[0]["label"]

        def med(fsname, key):
            vals = [r.get(key) for r in cells.get((self.name, lab, fsname), []) if "error" not in r]
            vals = [x for x in vals if isinstance(x, (int, float))]
            return statistics.median(vals) if vals else None

        def f(x):
            return "—" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:.3g}"

        shown = [x for x in fs_order if cells.get((self.name, lab, x))]
        if "cairn" not in shown:
            return []
        others = [x for x in shown if x != "cairn"]
        md = [f"**{lab}**: rates (s for untar and rm -rf, lower is better); each file system / plain cairn "
              "(above 1× is better than plain cairn, for seconds too: plain cairn's time over its own)", "",
              "| phase | " + " | ".join(shown) + " | " + " | ".join(f"{x} / cairn" for x in others) + " |",
              "|---|" + "---|" * (len(shown) + len(others))]
        for key, unit, better, label in PHASES:
            c = med("cairn", key)
            row = [f(med(x, key)) for x in shown]
            ratios = []
            for x in others:
                m = med(x, key)
                ratios.append("—" if not (m and c) else f"{(m / c if better else c / m):.2f}×")
            md.append(f"| {label.format(big='1 GiB')} ({unit}) | " + " | ".join(row) + " | " + " | ".join(ratios) + " |")
        md += ["", "CPU, daemon + client (ms per MiB for the 1 GiB phases and untar (per MB of tar), per file for "
               "fs_mark's phases and rm -rf, per IO for fio; daemon part in brackets):", "",
               "| phase | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
        for key, unit, better, label in PHASES:
            cols = []
            for x in shown:
                d, c = med(x, f"{key}_cpu_daemon"), med(x, f"{key}_cpu_client")
                cols.append("—" if c is None else f"{(d or 0) + c:.3g} ({'—' if d is None else f'{d:.3g}'})")
            md.append(f"| {label.format(big='1 GiB')} | " + " | ".join(cols) + " |")
        md.append("")
        return md
