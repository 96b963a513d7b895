#!/bin/sh
# The quiet runs (after the CI run ended), from this directory, as root.
# B = a release build of this branch with read_offload's helpers two READs
# deep and read_move; B3 = the build of 89e37b8 (helpers one READ deep).
set -e
B=${B:-/work/bins-read53c/move}
B3=${B3:-/work/bins-read53c/offload3}
nice -n 19 python3 rab.py --reps 3 --mib 1024 --par-mib 1024 \
  --cell cairn=cairn:$B --cell nullfs=nullfs:$B \
  --cell cairn-offload=cairn:$B:read_offload=1 --cell nullfs-offload=nullfs:$B:read_offload=1 \
  --cell cairn-offload1=cairn:$B3:read_offload=1 \
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
