#!/bin/sh
# The quiet runs (after the CI run ended), from this directory, as root.
# B = a release build of 61ddc02 (read_offload's helpers two READs deep);
# B1 = the same with read_offload::DEPTH = 1.
set -e
B=${B:-/work/bins-read53c/offload5}
B1=${B1:-/work/bins-read53c/offload5d1}
nice -n 19 python3 rab.py --reps 3 --mib 1024 --par-mib 512 \
  --cell cairn=cairn:$B --cell nullfs=nullfs:$B \
  --cell cairn-offload=cairn:$B:read_offload=1 --cell nullfs-offload=nullfs:$B:read_offload=1 \
  --cell cairn-offload1=cairn:$B1:read_offload=1 \
  --cell cairn-move=cairn:$B:read_move=1 --cell nullfs-move=nullfs:$B:read_move=1 \
  --out q1.json > q1.txt 2>&1
nice -n 19 python3 rab.py --reps 3 --mib 16 --par-mib 16 --phases meta --files 20000 \
  --cell cairn=cairn:$B --cell nullfs=nullfs:$B \
  --cell cairn-offload=cairn:$B:read_offload=1 --cell cairn-move=cairn:$B:read_move=1 \
  --out q3.json > q3.txt 2>&1
nice -n 19 python3 rab.py --reps 3 --mib 1024 --par-mib 512 \
  --cell cairn=cairn:$B --cell nullfs=nullfs:$B \
  --cell cairn-mp1024=cairn:$B:max_write=4194304,readahead_kb=4096:1024 \
  --cell nullfs-mp1024=nullfs:$B:max_write=4194304,readahead_kb=4096:1024 \
  --out q2.json > q2.txt 2>&1
