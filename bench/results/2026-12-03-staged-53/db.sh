#!/bin/bash
# db.sh REPS T: dbench 1 client, sync every 4 s, cairn default vs staged_writes=0, interleaved; prints MB/s and max latency
R=$1; TT=${2:-30}; C=/work/main/target/release/cairn; T=/tmp/s/t; MP=/tmp/s/mp; mkdir -p $T $MP
LOAD=$(ls /usr/share/dbench/client.txt 2>/dev/null || echo /usr/share/doc/dbench/client.txt)
mountpoint -q $T || mount -t tmpfs -o size=12G tmpfs $T
for r in $(seq $R); do for O in "" staged_writes=0; do
  rm -f $T/img; $C mkfs $T/img --size 4G --force --quiet
  if [ -z "$O" ]; then $C mount $T/img $MP; else $C mount $T/img $MP -o $O; fi
  ( while true; do sleep 4; sync; done ) & S=$!
  out=$(dbench -t $TT -c $LOAD -D $MP 1 2>&1)
  kill $S; wait $S 2>/dev/null
  hold=$($C stats $MP --json | python3 -c "import json,sys; d=json.load(sys.stdin)['counters']; print('gate_hold_us_max', d.get('tx.gate_hold_us_max'), 'staged', d.get('overwrite.staged_writes'))")
  umount $MP
  echo "${O:-staged} $(echo "$out" | grep -E "^Throughput") | $hold | flush max $(echo "$out" | awk '$1=="Flush"{print $4}')"
done; done
