#!/bin/bash
# Engine A/B: the new driver against the baseline's `cairn debug fsmark`, alternating.
set -u
NEW=target/release/cairn-bench-driver   # this build
OLD=${BASELINE:?the build before}/cairn   # its `cairn debug fsmark`
OUT=.
for i in 1 2 3; do
  for who in new old; do
    img=/dev/shm/ab.img; rm -f $img
    target/release/cairn mkfs $img --size 24G --quiet
    if [ $who = new ]; then cmd=($NEW fsmark); else cmd=($OLD debug fsmark); fi
    "${cmd[@]}" $img --files 1000000 --threads 2 --dirs 1000 --per-dir 50 --rows 5 > $OUT/$who-$i.json 2> $OUT/$who-$i.err
    echo "$who $i rc=$?"
    rm -f $img
  done
done
