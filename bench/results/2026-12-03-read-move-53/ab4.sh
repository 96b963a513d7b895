#!/bin/bash
# ab4.sh REPS label:binary:opts ... ; one image, written once; per rep each variant: par4 cold, lone cold
R=$1; shift
T=/tmp/s/t; MP=/tmp/s/mp; mkdir -p $T $MP
mountpoint -q $T || mount -t tmpfs -o size=10G tmpfs $T
C0=$(echo $1 | cut -d: -f2)
$C0 mkfs $T/img --size 6G --force --quiet; $C0 mount $T/img $MP
for i in 0 1 2 3; do dd if=/dev/zero of=$MP/big$i bs=1M count=1024 conv=fsync status=none; done
umount $MP
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for r in $(seq $R); do for v in "$@"; do
  L=$(echo $v | cut -d: -f1); C=$(echo $v | cut -d: -f2); O=$(echo $v | cut -d: -f3)
  mnt() { if [ -z "$O" ]; then $C mount $T/img $MP; else $C mount $T/img $MP -o $O; fi; }
  sync; echo 3 > /proc/sys/vm/drop_caches; mnt; P=$(pgrep -f "mount $T/img" | head -1); c0=$(cpu $P)
  t0=$(date +%s.%N); D=""; for i in 0 1 2 3; do dd if=$MP/big$i of=/dev/null bs=1M status=none & D="$D $!"; done; wait $D; t1=$(date +%s.%N)
  c1=$(cpu $P); umount $MP
  sync; echo 3 > /proc/sys/vm/drop_caches; mnt; P=$(pgrep -f "mount $T/img" | head -1); c2=$(cpu $P)
  t2=$(date +%s.%N); dd if=$MP/big0 of=/dev/null bs=1M status=none; t3=$(date +%s.%N); c3=$(cpu $P); umount $MP
  python3 -c "print('$L', 'par4 %5.0f MB/s cpu %4d ms' % (4*1073.741824/($t1-$t0), ($c1-$c0)*10), ' lone %5.0f MB/s cpu %4d ms' % (1073.741824/($t3-$t2), ($c3-$c2)*10))"
done; done
