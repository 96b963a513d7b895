#!/bin/bash
# engine A/B: pre-S1 vs S1, alternating, 1M files, 2 threads
C=${CAIRN:-cairn}
for round in 1 2 3; do
  for v in pre-s1 s1; do
    rm -f /dev/shm/ab.img; $C mkfs /dev/shm/ab.img --size 24G >/dev/null
    /usr/bin/time -f "%U %S" -o ${OUT:-.}/$v-$round.time ${DRIVER_DIR:-.}/driver-$v fsmark /dev/shm/ab.img --files 1000000 --threads 2 --dirs 1000 --per-dir 50 --rows 5 > ${OUT:-.}/$v-$round.json 2>${OUT:-.}/$v-$round.err
    echo "$v $round: $(head -1 ${OUT:-.}/$v-$round.err | cut -c1-80) | $(sed -n 3p ${OUT:-.}/$v-$round.err | cut -c1-60) | cpu $(cat ${OUT:-.}/$v-$round.time)"
  done
done
rm -f /dev/shm/ab.img
echo ABDONE
