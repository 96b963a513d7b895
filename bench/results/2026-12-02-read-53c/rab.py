#!/usr/bin/env python3
"""Issue #53's cold-read phases, A/B over builds *and* mount options, in one run.

    sudo python3 rab.py --cell NAME=KIND:BINDIR[:OPTS[:PAGES]] ... [--reps 3] [--mib 512]
                        [--par-mib 512] [--phases read,par4,meta] [--files 20000] [--out results.json]

KIND is `cairn` or `nullfs` (`cairn-bench-driver nullfs` beside BINDIR/cairn);
OPTS are `-o` options (comma-separated, both take cairn's); PAGES, if given,
is `fs.fuse.max_pages_limit` while the cell mounts (the connection keeps what
it negotiated at INIT; the sysctl is put back right after the mount).

Each cell is made once (an image in /dev/shm/r53c for cairn, the null
server's tree in memory), four files of --par-mib MiB written, the first
one --mib MiB. Then, per repetition, in a rotated order: a cold `dd bs=1M`
of big0, and four cold `dd bs=1M` of big0..big3 at once. Cold, without a
global cache drop (this machine is shared): cairn remounts before each
phase (its image is in a tmpfs either way); the null server's files get
posix_fadvise(DONTNEED). Phase `meta` (not by default): fs_mark's create
of --files empty files by two threads, a cold `find`, `rm -rf`. Each phase records its rate (MB/s, decimal) and the
server's CPU (every live thread's time on a CPU, /proc/PID/task/*/schedstat) per MiB in us
(`_help_us`: of which on read_offload's helper threads).
"""

import argparse
import json
import os
import statistics
import subprocess
import time

ROOT = "/dev/shm/r53c"
SYSCTL = "/proc/sys/fs/fuse/max_pages_limit"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def mounted(mp):
    return any(line.split()[4] == mp for line in open("/proc/self/mountinfo"))


def wait(pred, what, secs=60):
    t = time.time() + secs
    while not pred():
        if time.time() > t:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def cpu_s(pid, prefix=""):
    """CPU seconds of process `pid`'s live threads (those whose name starts
    with `prefix`) so far (schedstat: ns on a CPU; finer than
    /proc/PID/stat's ticks; the queue threads live as long as the mount)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                if not f.read().startswith(prefix):
                    continue
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return total / 1e9


class Cell:
    def __init__(self, spec, par_mib):
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        self.name, self.kind, self.bindir = name, parts[0], parts[1]
        self.opts = [o for o in (parts[2] if len(parts) > 2 else "").split(",") if o]
        self.pages = int(parts[3]) if len(parts) > 3 and parts[3] else None
        self.mp = os.path.join(ROOT, f"m-{name}")
        # cairn cells of one build share an image (mounted one at a time).
        self.img = os.path.join(ROOT, f"img-{abs(hash(os.path.abspath(self.bindir))) % 10**8}.img")
        self.par_mib = par_mib
        self.pid = self.proc = None

    def mount(self):
        old = None
        if self.pages:
            old = open(SYSCTL).read().strip()
            open(SYSCTL, "w").write(f"{self.pages}\n")
        try:
            opts = ["-o", ",".join(["allow_other", *self.opts])]
            if self.kind == "nullfs":
                self.proc = subprocess.Popen([f"{self.bindir}/cairn-bench-driver", "nullfs", self.mp, *opts],
                                             stdin=subprocess.DEVNULL)
                self.pid = self.proc.pid
                wait(lambda: mounted(self.mp), "nullfs to mount")
            else:
                run([f"{self.bindir}/cairn", "mount", self.img, self.mp, *opts])
                self.pid = int(subprocess.check_output(
                    ["pgrep", "-n", "-f", f"cairn mount {self.img} {self.mp}"]).split()[0])
        finally:
            if old:
                open(SYSCTL, "w").write(f"{old}\n")

    def unmount(self):
        if not mounted(self.mp):
            return
        run(["umount", self.mp])
        if self.proc:
            self.proc.wait(timeout=120)
            self.proc = None
        else:
            pid = self.pid
            wait(lambda: not os.path.exists(f"/proc/{pid}"), "the cairn daemon to exit", 120)
        self.pid = None

    def make(self, mib, made):
        os.makedirs(self.mp, exist_ok=True)
        if self.kind == "cairn":
            if self.img in made:
                return
            made.add(self.img)
            if os.path.exists(self.img):
                os.unlink(self.img)
            run(["truncate", "-s", f"{4 * self.par_mib + max(mib, self.par_mib) + 1024}M", self.img])
            run([f"{self.bindir}/cairn", "mkfs", self.img], stdout=subprocess.DEVNULL)
        self.mount()
        for i in range(4):
            n = max(mib, self.par_mib) if i == 0 else self.par_mib
            run(["dd", "if=/dev/zero", f"of={self.path(i)}", "bs=1M", f"count={n}", "conv=fsync",
                 "status=none"])
        if self.kind == "cairn":
            self.unmount()

    def path(self, i):
        return os.path.join(self.mp, f"big{i}")

    def cold(self):
        if self.kind == "cairn":
            self.unmount()
            self.mount()
        else:
            os.sync()
            for i in range(4):
                fd = os.open(self.path(i), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)

    def done(self):
        """After a repetition: a cairn cell unmounts (its image is another's next)."""
        if self.kind == "cairn":
            self.unmount()

    def teardown(self):
        try:
            self.unmount()
        finally:
            if self.kind == "cairn" and os.path.exists(self.img):
                os.unlink(self.img)


def dd(path, mib):
    return ["dd", f"if={path}", "of=/dev/null", "bs=1M", f"count={mib}", "status=none"]


def timed(cell, res, key, mib, cmds):
    cell.cold()
    h0, c0, t0 = cpu_s(cell.pid, "cairn-read-"), cpu_s(cell.pid), time.time()
    procs = [subprocess.Popen(c) for c in cmds]
    if any(p.wait() for p in procs):
        raise RuntimeError(f"{key}: dd failed")
    t1, c1, h1 = time.time(), cpu_s(cell.pid), cpu_s(cell.pid, "cairn-read-")
    res[key] = mib * 1.048576 / (t1 - t0)
    res[f"{key}_us"] = (c1 - c0) * 1e6 / mib
    # Of which on read_offload's helper threads (`cairn-read-N`).
    res[f"{key}_help_us"] = (h1 - h0) * 1e6 / mib


def meta(cell, res, files):
    """fs_mark's create of `files` empty files by two threads (as the floor's
    create phase), a cold `find` of them, then `rm -rf`: files per second,
    and the server's CPU per file (us, in the `_us` keys)."""
    dirs = [os.path.join(cell.mp, f"d{i}") for i in range(2)]
    per = files // 2
    cmd = ["fs_mark", "-S", "0", "-s", "0", "-L", "1", "-D", "100", "-N", str(max(1, per // 100)), "-n", str(per)]
    for d in dirs:
        cmd += ["-d", d]
    for key, go in [("create", lambda: run(cmd, stdout=subprocess.DEVNULL, cwd=ROOT)),
                    ("walk", lambda: [p.wait() for p in [subprocess.Popen(["find", d, "-printf", "%y %s\\n"],
                                                                          stdout=subprocess.DEVNULL) for d in dirs]]),
                    ("unlink", lambda: [p.wait() for p in [subprocess.Popen(["rm", "-rf", d]) for d in dirs]])]:
        if key == "walk":
            cell.cold()
        c0, t0 = cpu_s(cell.pid), time.time()
        go()
        t1, c1 = time.time(), cpu_s(cell.pid)
        res[key] = files / (t1 - t0)
        res[f"{key}_us"] = (c1 - c0) * 1e6 / files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cell", action="append", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--par-mib", type=int, default=512)
    ap.add_argument("--phases", default="read,par4")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.makedirs(ROOT, exist_ok=True)
    cells = [Cell(s, a.par_mib) for s in a.cell]
    phases = a.phases.split(",")
    results = {c.name: [] for c in cells}
    try:
        made = set()
        for c in cells:
            c.make(a.mib, made)
        for r in range(a.reps):
            k = r % len(cells)
            for c in cells[k:] + cells[:k]:
                res = {}
                if "read" in phases:
                    timed(c, res, "read", a.mib, [dd(c.path(0), a.mib)])
                if "par4" in phases:
                    timed(c, res, "par4", 4 * a.par_mib, [dd(c.path(i), a.par_mib) for i in range(4)])
                if "meta" in phases:
                    if c.pid is None:
                        c.mount()
                    meta(c, res, a.files)
                c.done()
                results[c.name].append(res)
                print(r, c.name, {k: round(x) for k, x in res.items()}, flush=True)
    finally:
        for c in cells:
            c.teardown()
    keys = [k for k in ["read", "read_us", "read_help_us", "par4", "par4_us", "par4_help_us", "create", "create_us", "walk", "walk_us", "unlink",
                        "unlink_us"] if any(k in x for v in results.values() for x in v)]
    print()
    print("| cell | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for c in cells:
        row = []
        for k in keys:
            xs = [x[k] for x in results[c.name]]
            nd = 1 if k in ("create_us", "walk_us", "unlink_us") else 0
            row.append(f"{statistics.median(xs):,.{nd}f} ({min(xs):,.{nd}f}–{max(xs):,.{nd}f})")
        print(f"| {c.name} | " + " | ".join(row) + " |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"cells": a.cell, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
