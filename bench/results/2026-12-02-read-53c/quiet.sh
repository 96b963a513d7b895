#!/bin/sh
# The quiet runs (after the CI run ended), from this directory, as root.
# B = a release build of this branch (cairn and cairn-bench-driver).
set -e
B=${B:-/work/bins-read53c/offload2}
nice -n 19 python3 rab.py --reps 3 --mib 1024 --par-mib 1024 \
  --cell cairn=cairn:$B --cell nullfs=nullfs:$B \
  --cell cairn-offload=cairn:$B:read_offload=1 --cell nullfs-offload=nullfs:$B:read_offload=1 \
  --cell cairn-spread=cairn:$B:ring_spread=1 --cell nullfs-spread=nullfs:$B:ring_spread=1 \
  --out q1.json > q1.txt 2>&1
nice -n 19 python3 rab.py --reps 3 --mib 1024 --par-mib 512 \
  --cell cairn=cairn:$B --cell nullfs=nullfs:$B \
  --cell cairn-mp1024=cairn:$B:max_write=4194304,readahead_kb=4096:1024 \
  --cell nullfs-mp1024=nullfs:$B:max_write=4194304,readahead_kb=4096:1024 \
  --cell cairn-offload-mp1024=cairn:$B:read_offload=1,max_write=4194304,readahead_kb=8192:1024 \
  --out q2.json > q2.txt 2>&1
nice -n 19 python3 rab.py --reps 3 --mib 16 --par-mib 16 --phases meta --files 20000 \
  --cell cairn=cairn:$B --cell nullfs=nullfs:$B \
  --cell cairn-offload=cairn:$B:read_offload=1 --cell cairn-spread=cairn:$B:ring_spread=1 \
  --out q3.json > q3.txt 2>&1
