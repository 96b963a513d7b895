#!/bin/bash
# usage: run.sh FILES THREADS ROUNDS variant... (variant = build:mode, mode plain|priv)
F=$1; T=$2; R=$3; shift 3
cd "${OUT:-.}"
for round in $(seq 1 $R); do
  for v in "$@"; do
    b=${v%%:*}; m=${v#*:}; o=""; [ $m = priv ] && o="-o debug.private_handles"
    rm -f /dev/shm/ab.img; ${CAIRN:-cairn} mkfs /dev/shm/ab.img --size 24G >/dev/null
    /usr/bin/time -f "%U %S" -o $b-$m-t$T-$round.time ${DRIVER_DIR:-.}/driver-$b fsmark /dev/shm/ab.img --files $F --threads $T --dirs 1000 --per-dir 50 --rows 5 $o > $b-$m-t$T-$round.json 2>$b-$m-t$T-$round.err
    echo "$b $m t$T r$round: $(head -1 $b-$m-t$T-$round.err | grep -o '([0-9]* files/s)') $(sed -n 3p $b-$m-t$T-$round.err | grep -o '([0-9]* files/s)') cpu $(cat $b-$m-t$T-$round.time)"
  done
done
rm -f /dev/shm/ab.img
