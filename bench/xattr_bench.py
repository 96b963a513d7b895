#!/usr/bin/env python3
"""xattr-bench (seed 000's benchmark, whose source was never published).

    xattr_bench.py DIR P F V OPS [--size BYTES] [--seed N]

P processes start together; process p owns F files DIR/xb/p/0 .. F-1 and, OPS
times, sets the extended attribute `user.bench` of a randomly chosen one of
its files to a randomly chosen one of V distinct values (BYTES bytes each,
default 200: too big for ext4's in-inode space, so the value goes to an xattr
block, where the mbcache sharing happens). With few distinct values many
files carry identical attribute blocks: the case the dedup cache is for.

Prints one JSON object: {"ops_per_s", "seconds", "processes", "files",
"values", "ops_per_process", "value_bytes"}. Exits non-zero if any
setxattr fails.
"""

import json
import multiprocessing as mp
import os
import random
import sys
import time


def values(v, size, seed):
    rnd = random.Random(seed)
    out = []
    for i in range(v):
        head = f"value-{i}-".encode()
        out.append(head + bytes(rnd.getrandbits(8) for _ in range(size - len(head))))
    return out


def worker(args):
    d, p, f, vals, ops, seed, start = args
    mine = os.path.join(d, str(p))
    os.makedirs(mine, exist_ok=True)
    paths = [os.path.join(mine, str(i)) for i in range(f)]
    for path in paths:
        open(path, "w").close()
    rnd = random.Random(seed * 1000 + p)
    start.wait()  # every process has made its files
    t0 = time.perf_counter()
    for _ in range(ops):
        os.setxattr(rnd.choice(paths), "user.bench", rnd.choice(vals))
    return time.perf_counter() - t0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    if len(args) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    d, p, f, v, ops = args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4])
    size = int(opts.get("size", 200))
    seed = int(opts.get("seed", 1))
    root = os.path.join(d, "xb")
    os.makedirs(root, exist_ok=True)
    vals = values(v, size, seed)
    with mp.Manager() as m:
        start = m.Barrier(p + 1)
        with mp.Pool(p) as pool:
            res = pool.map_async(worker, [(root, i, f, vals, ops, seed, start) for i in range(p)])
            start.wait()
            t0 = time.perf_counter()
            per = res.get()
            wall = time.perf_counter() - t0
    wall = max(wall, max(per))
    print(
        json.dumps(
            {
                "ops_per_s": p * ops / wall,
                "seconds": wall,
                "processes": p,
                "files": f,
                "values": v,
                "ops_per_process": ops,
                "value_bytes": size,
            }
        )
    )


if __name__ == "__main__":
    main()
