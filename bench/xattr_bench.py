#!/usr/bin/env python3
"""xattr-bench (seed 000's benchmark, whose source was never published).

    xattr_bench.py DIR P F V OPS [--size=BYTES] [--seed=N] [--verify] [--state=FILE]
                   [--cpu-pids=PID[,PID...]]
    xattr_bench.py --check=FILE DIR

P processes start together; process p owns F files DIR/xb/p/0 .. F-1 and, OPS
times, sets the extended attribute `user.bench` of a randomly chosen one of
its files to a randomly chosen one of V distinct values (BYTES bytes each,
default 200: too big for ext4's in-inode space, so the value goes to an xattr
block, where the mbcache sharing happens). With few distinct values many
files carry identical attribute blocks: the case the dedup cache is for.
Every process makes its files before the clock starts (a barrier), so only
the setxattr calls are timed.

Prints one JSON object: {"ops_per_s", "seconds", "processes", "files",
"values", "ops_per_process", "value_bytes", "block_size", "blocks_used_before",
"blocks_used_after", "xattr_blocks"}. blocks_used_* are statfs's used blocks
(f_blocks - f_bfree) once every file exists and after the run plus a syncfs
(both untimed); their difference is what the setxattr calls left allocated:
the xattr blocks. Exits non-zero if any setxattr fails.

"cpu_seconds": CPU time (user + system) the P processes spent in the timed
loop (the system part holds a kernel file system's own work, and FUSE's
request passing for a user-space one). --cpu-pids: also "server_cpu_seconds",
the CPU time those processes (all their threads; e.g. a FUSE daemon, a jbd2
thread) used from the start barrier until the last process finished.

--verify: every process remembers the value it last set on each of its files;
once all have finished (untimed), getxattr of every file must equal it (and a
file never chosen must have no `user.bench`). The JSON then also has
"files_checked" and "lost_updates" (mismatches; must be 0). Exits 3 if
lost_updates > 0. Every process owns its files, so a mismatch can only come
from the file system (e.g. a shared block changed in place for another inode).

--state=FILE: also writes what every file must hold (JSON); `--check=FILE DIR`
checks DIR against it later (after a remount, say) and prints
{"files_checked", "lost_updates"}, exiting 3 on a mismatch.

Values are rnd.randbytes() from --seed (default 1), each prefixed with its
index, so V values are distinct and the same in every run.
"""

import ctypes
import errno
import json
import multiprocessing as mp
import os
import random
import sys
import time

NAME = "user.bench"


def values(v, size, seed):
    rnd = random.Random(seed)
    out = []
    for i in range(v):
        head = f"value-{i}-".encode()
        out.append(head + rnd.randbytes(max(0, size - len(head))))
    return out


def syncfs(path):
    """syncfs(2) of the file system holding path (os.sync() if unavailable)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def cpu_of(pids):
    """utime + stime of processes (every thread), seconds; None if one is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])
    return total / tick


def used_blocks(path):
    st = os.statvfs(path)
    return st.f_blocks - st.f_bfree, st.f_frsize


def worker(args):
    d, p, f, vals, ops, seed, ready, go = args
    mine = os.path.join(d, str(p))
    os.makedirs(mine, exist_ok=True)
    paths = [os.path.join(mine, str(i)) for i in range(f)]
    for path in paths:
        open(path, "w").close()
    rnd = random.Random(seed * 1000 + p)
    # last[i]: index of the value last set on file i (-1: never set). Kept in
    # every run (a list store per call), so --verify does not change the
    # timed loop. randrange(n) draws as choice() does.
    last = [-1] * f
    nv = len(vals)
    ready.wait()  # every process has made its files
    go.wait()  # the parent has read statfs
    c0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(ops):
        i = rnd.randrange(f)
        k = rnd.randrange(nv)
        os.setxattr(paths[i], NAME, vals[k])
        last[i] = k
    return time.perf_counter() - t0, last, time.process_time() - c0


def check(root, expect, vals):
    """expect: {path relative to root: value index or -1} -> (checked, lost)."""
    lost = 0
    for rel, k in expect.items():
        path = os.path.join(root, rel)
        try:
            got = os.getxattr(path, NAME)
        except OSError as e:
            if e.errno != errno.ENODATA:
                raise
            got = None
        want = vals[k] if k >= 0 else None
        if got != want:
            lost += 1
            if lost <= 5:
                print(f"xattr_bench: {path}: {NAME} is not the value last set "
                      f"(want {'none' if want is None else want[:12]!r}, got {'none' if got is None else got[:12]!r})",
                      file=sys.stderr)
    return len(expect), lost


def check_main(state_file, d):
    with open(state_file) as fh:
        st = json.load(fh)
    vals = values(st["values"], st["value_bytes"], st["seed"])
    n, lost = check(os.path.join(d, "xb"), st["expect"], vals)
    print(json.dumps({"files_checked": n, "lost_updates": lost}))
    sys.exit(3 if lost else 0)


def main():
    argv = sys.argv[1:]
    args = [a for a in argv if not a.startswith("--")]
    flags = {a[2:] for a in argv if a.startswith("--") and "=" not in a}
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if "help" in flags:
        print(__doc__)
        return
    if "check" in opts:
        if len(args) != 1:
            print(__doc__, file=sys.stderr)
            sys.exit(2)
        return check_main(opts["check"], args[0])
    unknown = flags - {"verify"} | set(opts) - {"size", "seed", "state", "cpu-pids"}
    if len(args) != 5 or unknown:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    d, p, f, v, ops = args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4])
    size = int(opts.get("size", 200))
    seed = int(opts.get("seed", 1))
    verify = "verify" in flags
    pids = [int(x) for x in opts.get("cpu-pids", "").split(",") if x]
    root = os.path.join(d, "xb")
    os.makedirs(root, exist_ok=True)
    vals = values(v, size, seed)
    with mp.Manager() as m:
        ready, go = m.Barrier(p + 1), m.Barrier(p + 1)
        with mp.Pool(p) as pool:
            res = pool.map_async(worker, [(root, i, f, vals, ops, seed, ready, go) for i in range(p)])
            ready.wait()
            before, bsize = used_blocks(d)
            s0 = cpu_of(pids)
            go.wait()
            t0 = time.perf_counter()
            per = res.get()
            wall = time.perf_counter() - t0
            s1 = cpu_of(pids)
    wall = max(wall, max(s for s, _, _ in per))
    syncfs(d)
    after, _ = used_blocks(d)
    out = {
        "ops_per_s": p * ops / wall,
        "seconds": wall,
        "processes": p,
        "files": f,
        "values": v,
        "ops_per_process": ops,
        "value_bytes": size,
        "block_size": bsize,
        "blocks_used_before": before,
        "blocks_used_after": after,
        "xattr_blocks": after - before,
        "cpu_seconds": sum(c for _, _, c in per),
    }
    if pids:
        out["server_cpu_seconds"] = s1 - s0 if s0 is not None and s1 is not None else None
    expect = {os.path.join(str(i), str(j)): k for i, (_, last, _) in enumerate(per) for j, k in enumerate(last)}
    if "state" in opts:
        with open(opts["state"], "w") as fh:
            json.dump({"values": v, "value_bytes": size, "seed": seed, "expect": expect}, fh)
    if verify:
        out["files_checked"], out["lost_updates"] = check(root, expect, vals)
    print(json.dumps(out))
    if verify and out["lost_updates"]:
        sys.exit(3)


if __name__ == "__main__":
    main()
