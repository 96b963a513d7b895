#!/bin/bash
# S0 of docs/gate-plan.md: conflict counts with -o debug.conflict_probe.
set -u
C=${CAIRN:-cairn}
D=${DRIVER:-target/release/cairn-bench-driver}
OUT=${OUT:-/tmp/gate-s0}
mkdir -p $OUT
# 1. engine, 2 and 4 threads
for t in 2 4; do
  rm -f /dev/shm/s0.img; $C mkfs /dev/shm/s0.img --size 24G >/dev/null
  $D fsmark /dev/shm/s0.img --files 1000000 --threads $t --dirs 1000 --per-dir 50 --rows 5 -o debug.conflict_probe > $OUT/engine-t$t.json 2>$OUT/engine-t$t.err
  echo "engine t=$t rc=$?"
done
rm -f /dev/shm/s0.img
# 2. FUSE fs_mark 1M, 2 threads, then parallel rm -rf
mkdir -p /mnt/s0; rm -f /dev/shm/s0f.img; $C mkfs /dev/shm/s0f.img --size 24G >/dev/null
$C mount /dev/shm/s0f.img /mnt/s0 -o debug.conflict_probe
fs_mark -S 0 -s 0 -L 10 -D 200 -N 250 -n 50000 -d /mnt/s0/0 -d /mnt/s0/1 > $OUT/fuse-create.txt 2>&1
sync; $C stats /mnt/s0 --json > $OUT/fuse-create.json 2>&1
(rm -rf /mnt/s0/0 & rm -rf /mnt/s0/1 & wait)
$C stats /mnt/s0 --json > $OUT/fuse-unlink.json 2>&1
# 3. dbench 2 clients 60 s with a sync loop
(for i in $(seq 15); do sleep 4; sync; done) &
dbench -t 60 -c /usr/share/dbench/client.txt -D /mnt/s0 2 > $OUT/dbench.txt 2>&1
wait
$C stats /mnt/s0 --json > $OUT/dbench.json 2>&1
umount /mnt/s0
# the daemon finishes its unmount after umount(8) returns
while pgrep -f "cairn mount /dev/shm/s0f.img" >/dev/null; do sleep 0.2; done
$C fsck /dev/shm/s0f.img > $OUT/fsck.txt 2>&1; echo "fsck rc=$?"
rm -f /dev/shm/s0f.img
echo S0DONE
