#!/bin/bash
R=$1; C=/work/main/target/release/cairn; T=/tmp/s/t; MP=/tmp/s/mp
for r in $(seq $R); do for O in "" staged_writes=0; do
  rm -f $T/img; $C mkfs $T/img --size 4G --force --quiet
  if [ -z "$O" ]; then $C mount $T/img $MP; else $C mount $T/img $MP -o $O; fi
  P=$(pgrep -f "mount $T/img" | head -1); c0=$(awk '{print $14+$15}' /proc/$P/stat)
  t0=$(date +%s.%N); dd if=/dev/zero of=$MP/b bs=1M count=1024 conv=fsync status=none; t1=$(date +%s.%N)
  c1=$(awk '{print $14+$15}' /proc/$P/stat)
  umount $MP
  python3 -c "print('${O:-staged}', '%.0f MB/s' % (1073.741824/($t1-$t0)), 'daemon cpu %d ms' % (($c1-$c0)*10))"
done; done
