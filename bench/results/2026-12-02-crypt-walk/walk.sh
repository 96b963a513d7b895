#!/bin/bash
# One cold walk, as run for README.md: walk.sh CAIRN plain|crypt prints its seconds and the
# daemon's CPU. Expects, under /tmp/c54d: s/plain.img and s/crypt.img (`cairn mkfs IMG --size
# 4G`, the second with `--encrypt --key-file key`), each mounted once at mp/ and mc/ and
# filled by `fs_mark -S 0 -s 0 -L 1 -D 100 -N 500 -n 50000 -d MP/0 -d MP/1`. Root only
# (drop_caches).
set -eu
B=$1
which=$2
cd /tmp/c54d
if [ "$which" = plain ]; then img=s/plain.img mp=mp opt=""; else img=s/crypt.img mp=mc opt="keyfile=/tmp/c54d/key"; fi
umount "$mp" 2>/dev/null || true
sync
echo 3 >/proc/sys/vm/drop_caches
"$B" mount "$img" "$mp" ${opt:+-o "$opt"}
pid=$(pgrep -f "cairn.*$img" | head -1)
c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
t0=$(date +%s.%N)
find "$mp/0" -printf '%y %s\n' >/dev/null &
find "$mp/1" -printf '%y %s\n' >/dev/null &
wait
t1=$(date +%s.%N)
c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
echo "$which $(echo "$t1 - $t0" | bc) s, daemon cpu $(((c1 - c0) * 10)) ms"
