#!/bin/bash
# A/B of main and s7gate in the engine: 300k files, 2 threads, alternating, 3 rounds.
cd /work/s7ab
for round in 1 2 3; do
  for b in main s7; do
    rm -f /dev/shm/s7ab.img; nice -n 19 ./cairn-$b mkfs /dev/shm/s7ab.img --size 8G >/dev/null
    nice -n 19 /usr/bin/time -f "%U %S" -o $b-$round.time ./driver-$b fsmark /dev/shm/s7ab.img --files 300000 --threads 2 --dirs 300 --per-dir 50 --rows 3 > $b-$round.json 2>$b-$round.err
    echo "$b r$round: create $(head -1 $b-$round.err | grep -o '([0-9]* files/s)') unlink $(sed -n 3p $b-$round.err | grep -o '([0-9]* files/s)') cpu $(cat $b-$round.time)"
  done
done
rm -f /dev/shm/s7ab.img
