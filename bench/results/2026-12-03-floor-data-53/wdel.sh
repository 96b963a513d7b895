#!/bin/bash
# wdel.sh CAIRN REPS: 512M written+fsync, unlinked, then 1G written+fsync: at once vs after 5 s
C=$1; R=$2; T=/tmp/s/t; MP=/tmp/s/mp; mkdir -p $T $MP
mountpoint -q $T || mount -t tmpfs -o size=12G tmpfs $T
for r in $(seq $R); do for w in 0 5; do
  rm -f $T/img; $C mkfs $T/img --size 7G --force --quiet; $C mount $T/img $MP
  dd if=/dev/zero of=$MP/a bs=1M count=512 conv=fsync status=none
  rm $MP/a; sleep $w
  t0=$(date +%s.%N); dd if=/dev/zero of=$MP/b bs=1M count=1024 conv=fsync status=none; t1=$(date +%s.%N)
  rm $MP/b; sleep 1
  t2=$(date +%s.%N); dd if=/dev/zero of=$MP/c bs=1M count=1024 conv=fsync status=none; t3=$(date +%s.%N)
  umount $MP
  python3 -c "print('wait $w', 'first 1G %.0f MB/s' % (1073.741824/($t1-$t0)), ' second 1G (after rm b) %.0f MB/s' % (1073.741824/($t3-$t2)))"
done; done
