#!/bin/bash
# Engine A/B for the gate's steps S3 (before private change sets), S4
# (private change sets, old gate) and S5 (the gate held only for joins):
# alternating, 1M files, 2 threads, then one oversubscribed round with 4.
# DRIVER_DIR holds driver-s3, driver-s4, driver-s5 (release builds).
C=${CAIRN:-cairn}
OUT=${OUT:-.}
run() { # name threads round
  rm -f /dev/shm/ab.img; $C mkfs /dev/shm/ab.img --size 24G >/dev/null
  /usr/bin/time -f "%U %S" -o $OUT/$1-t$2-$3.time $DRIVER_DIR/driver-$1 fsmark /dev/shm/ab.img --files 1000000 --threads $2 --dirs 1000 --per-dir 50 --rows 5 > $OUT/$1-t$2-$3.json 2>$OUT/$1-t$2-$3.err
  echo "$1 t$2 $3: $(head -1 $OUT/$1-t$2-$3.err | cut -c1-90) | $(sed -n 3p $OUT/$1-t$2-$3.err | cut -c1-70) | cpu $(cat $OUT/$1-t$2-$3.time)"
}
for round in 1 2 3; do
  for v in ${VARIANTS:-s3 s4 s5}; do run $v 2 $round; done
done
for v in ${VARIANTS:-s3 s4 s5}; do run $v 4 1; done
rm -f /dev/shm/ab.img
echo ABDONE
