#!/bin/bash
# usage: run.sh LABEL BIN FILES [opts...]   -> ./LABEL-N.json
label=$1; bin=$2; files=$3; shift 3
d=${OUT:-.}
n=$(ls $d/$label-*.json 2>/dev/null | wc -l)
img=/dev/shm/ab.img
rm -f $img
size=$(( files / 1000000 * 24 ))G
$bin mkfs -q --size $size $img || exit 1
opt=()
[[ $# -gt 0 ]] && opt=(-o "$*")
$bin debug fsmark $img --files $files --threads 2 --dirs 1000 --per-dir 50 --rows 5 "${opt[@]}" > $d/$label-$n.json 2>$d/$label-$n.err
rc=$?
rm -f $img
echo "$label-$n rc=$rc"
