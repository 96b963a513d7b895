#!/usr/bin/env python3
"""Issue #53's 1 GiB write + fsync, A/B over any number of cells, in one run.

Each cell is `LABEL=KIND:BINARY_DIR[:OPTS[:PAGES]]`: KIND is `cairn`,
`nullfs` or `ext4` (BINARY_DIR holds `cairn` and `cairn-bench-driver`;
ignored for ext4), OPTS cairn's extra `-o` options (comma-separated, or
empty), PAGES a value for /proc/sys/fs/fuse/max_pages_limit set before the
mount (the kernel reads it at INIT; restored at the end). Repetitions are
interleaved in a rotated order. Per cell and repetition: a fresh file system
(as the floor makes it: cairn serves its image file in the scratch tmpfs,
ext4 a loop device over its image there), then

    dd if=/dev/zero of=MNT/big bs=1M count=MIB conv=fsync

timed, with the server's CPU (user + system, every thread, /proc/PID/stat)
per MiB. ext4 has no server; its row has the rate only.

    sudo python3 wab.py --reps 3 --mib 1024 new=cairn:DIR old=cairn:DIR0 \
        null=nullfs:DIR ext4=ext4:-
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

from cairnbench import fs as fsmod  # noqa: E402

PAGES = "/proc/sys/fs/fuse/max_pages_limit"


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse(spec):
    label, rest = spec.split("=", 1)
    parts = rest.split(":")
    kind, bdir = parts[0], parts[1] if len(parts) > 1 else "-"
    opts = [o for o in (parts[2] if len(parts) > 2 else "").split(",") if o]
    pages = parts[3] if len(parts) > 3 and parts[3] else None
    return label, kind, bdir, opts, pages


class NullWithOptions(fsmod.FileSystem):
    """The null server, mounted with extra `-o` options (`max_write`, ...)."""

    def __init__(self, opts, *a, **kw):
        super().__init__(*a, **kw)
        self.opts = opts

    def mount(self):
        import subprocess
        opts = ["-o", ",".join(["allow_other", *self.opts])]
        proc = subprocess.Popen([fsmod.driver_of(self.cairn), "nullfs", self.mp, *opts], stdin=subprocess.DEVNULL)
        self.pid, self.proc = proc.pid, proc
        fsmod.wait_until(lambda: fsmod.is_mounted(self.mp) or proc.poll() is not None, 30, "the null server")
        if proc.poll() is not None:
            raise RuntimeError(f"cairn-bench-driver nullfs exited {proc.returncode}")
        os.chmod(self.mp, 0o777)


def one(label, kind, bdir, opts, pages, scratch, mib):
    name = {"nullfs": fsmod.NULLFS, "ext4": "ext4"}.get(kind)
    if kind == "cairn":
        name = f"cairn-{label}"
        fsmod.CAIRN_VARIANTS[name] = opts
    if pages:
        with open(PAGES, "w") as f:
            f.write(pages)
    cls = (lambda *a, **kw: NullWithOptions(opts, *a, **kw)) if kind == "nullfs" else fsmod.FileSystem
    fs = cls(name, scratch, os.path.join(bdir, "cairn"), (mib << 20) + (1 << 30), cairn_on="file")
    fs.make()
    try:
        pid = fs.daemon_pid()
        p = os.path.join(fs.mp, "big")
        cmd = ["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={mib}", "conv=fsync", "status=none"]
        c0, t0 = (cpu_s(pid) if pid else 0), time.time()
        fsmod.run(cmd)
        t1, c1 = time.time(), (cpu_s(pid) if pid else 0)
        res = {"mbs": mib * 1.048576 / (t1 - t0)}
        if pid:
            res["cpu_us_per_mib"] = (c1 - c0) * 1e6 / mib
        return res
    finally:
        fs.teardown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    cells = [parse(c) for c in a.cells]
    with open(PAGES) as f:
        pages0 = f.read().strip()
    scratch = fsmod.Scratch(f"{2 * a.mib + 1536}M")
    results = {c[0]: [] for c in cells}
    try:
        for r in range(a.reps):
            for c in cells[r % len(cells):] + cells[: r % len(cells)]:
                res = one(*c, scratch, a.mib)
                with open(PAGES, "w") as f:
                    f.write(pages0)
                results[c[0]].append(res)
                print(r, c[0], {k: round(x, 1) for k, x in res.items()}, flush=True)
    finally:
        with open(PAGES, "w") as f:
            f.write(pages0)
        scratch.teardown()
    print()
    print("| cell | MB/s | server CPU µs per MiB |")
    print("|---|---|---|")
    for c in cells:
        row = []
        for k in ("mbs", "cpu_us_per_mib"):
            xs = [x[k] for x in results[c[0]] if k in x]
            row.append(f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})" if xs else "—")
        print(f"| {c[0]} | " + " | ".join(row) + " |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
