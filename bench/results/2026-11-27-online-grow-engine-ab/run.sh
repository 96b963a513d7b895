#!/bin/bash
set -u
NEW=/work/main/target/release/cairn-bench-driver
OLD=/var/tmp/base-target/release/cairn-bench-driver
for i in 1 2 3; do
  for who in new old; do
    img=/dev/shm/ab.img; rm -f $img
    /var/tmp/base-target/release/cairn mkfs $img --size 24G --quiet
    if [ $who = new ]; then d=$NEW; else d=$OLD; fi
    $d fsmark $img --files 1000000 --threads 2 --dirs 1000 --per-dir 50 --rows 5 > /var/tmp/ab/$who-$i.json 2> /var/tmp/ab/$who-$i.err
    echo "$who $i rc=$?"
    rm -f $img
  done
done
