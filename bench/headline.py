#!/usr/bin/env python3
"""Prints the headline table of a benchmark report (for the README): one row
per file system, one column per experiment's main figure (medians), and
cairn's ratio to each peer underneath.

    bench/headline.py bench/results/DATE/results.json
"""

import json
import statistics
import sys

# (experiment, variant or None for the first, metric, column title, higher is better)
COLUMNS = [
    ("dbench", "1 client", "mbps", "dbench + sync (MB/s)", True),
    ("fsmark", None, "create", "create (files/s)", True),
    ("fsmark", None, "walk", "cold walk (entries/s)", True),
    ("fsmark", None, "unlink", "unlink (files/s)", True),
    ("fsmark", None, "bytes_per_file", "device bytes/file", False),
    ("xattr", "P=2 F=100 V=10", "ops", "setxattr/s (P=2 F=100 V=10)", True),
    ("frag", None, "mbps", "2 MiB writes, fragmented (MB/s)", True),
    ("fio", "1 job", "iops", "4k O_DIRECT overwrite, 1 job (IOPS)", True),
    ("fio", "2 jobs", "iops", "same, 2 jobs (IOPS)", True),
    ("fio-randread", "1 job", "iops", "4k O_DIRECT random read, 1 job (IOPS)", True),
    ("fio-seqwrite", None, "mbps", "fio 1 MiB seq write + fsync (MB/s)", True),
    ("seq", None, "write", "seq write (MB/s)", True),
    ("seq", None, "read", "cold seq read (MB/s)", True),
    ("metalat", None, "create_us", "create p50 (µs)", False),
]


def fmt(x):
    if x is None:
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def main():
    data = json.load(open(sys.argv[1]))
    fs_order = data["meta"]["file_systems"]
    med = {}
    variants = {}
    for c in data["cells"]:
        variants.setdefault(c["experiment"], []).append(c["variant"])
        for r in c["runs"]:
            if "error" in r:
                continue
        for key in {k for r in c["runs"] for k in r if k != "error"}:
            vals = [r[key] for r in c["runs"]
                    if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
            if vals:
                med[(c["experiment"], c["variant"], c["fs"], key)] = statistics.median(vals)
    cols = []
    for exp, var, key, title, hb in COLUMNS:
        if exp not in variants:
            continue
        v = var if var in variants[exp] else sorted(variants[exp])[0]
        cols.append((exp, v, key, title, hb))
    print("| file system | " + " | ".join(c[3] for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for fs in fs_order:
        print(f"| {fs} | " + " | ".join(fmt(med.get((e, v, fs, k))) for e, v, k, _, _ in cols) + " |")
    for peer in [f for f in fs_order if f != "cairn"]:
        cells = []
        for e, v, k, _, hb in cols:
            a, b = med.get((e, v, "cairn", k)), med.get((e, v, peer, k))
            if a is None or b is None or a == 0 or b == 0:
                cells.append("—")
            else:
                r = a / b if hb else b / a
                cells.append(f"{r:.2f}×")
        print(f"| cairn vs {peer} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
