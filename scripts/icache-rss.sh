#!/bin/bash
# The daemon's memory while a workload touches far more inodes than its caches
# hold (issue #12, seed 001's list_lru): makes a fresh image, mounts it with
# `-o cache_mb=MB,lru_caches=0|1`, creates FILES empty files in 100
# directories, stats each, and prints the daemon's VmHWM and VmRSS, the cache
# counters, then unmounts and runs fsck.
#
#   sudo scripts/icache-rss.sh [--files N] [--cache-mb MB] [--lru 0|1]
#                              [--size SIZE] [--journal-size SIZE] [--every N]
#
# --every N prints VmHWM/VmRSS every N files. Needs target/release/cairn,
# python3 and /dev/fuse. Measured 2026-11-23 (cache_mb=16, default journal):
# 300,000 files, VmHWM 89-103 MB (lru 1) against 171-182 MB (lru 0);
# 5,000,000 files, 161 MB, flat from 2 million on.
set -euo pipefail

files=300000 mb=16 lru=1 size=8G journal="" every=0
while [ $# -gt 0 ]; do
	case "$1" in
	--files) files=$2; shift 2 ;;
	--cache-mb) mb=$2; shift 2 ;;
	--lru) lru=$2; shift 2 ;;
	--size) size=$2; shift 2 ;;
	--journal-size) journal=$2; shift 2 ;;
	--every) every=$2; shift 2 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/cairn
work=$(mktemp -d /var/tmp/cairn-icache-rss.XXXXXX)
img=$work/img
mp=$work/mnt
mkdir "$mp"
cleanup() {
	if mountpoint -q "$mp"; then "$bin" umount "$mp" >/dev/null 2>&1 || umount -l "$mp"; fi
	rm -rf "$work"
}
trap cleanup EXIT

mkfs_args=(mkfs "$img" --size "$size" --inode-ratio 8192 --force --quiet)
if [ -n "$journal" ]; then mkfs_args+=(--journal-size "$journal"); fi
"$bin" "${mkfs_args[@]}"
"$bin" mount "$img" "$mp" -o "cache_mb=$mb,lru_caches=$lru,nofuseblk"
pid=$("$bin" stats "$mp" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
echo "cache_mb=$mb lru_caches=$lru files=$files daemon pid $pid"

python3 - "$mp" "$files" "$pid" "$every" <<'PY'
import os, sys, time
mp, n, pid, every = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def mem():
    st = open(f"/proc/{pid}/status").read()
    return ", ".join(l.replace("\t", " ") for l in st.splitlines() if l.startswith(("VmHWM", "VmRSS")))
t = time.time()
for d in range(100):
    os.mkdir(f"{mp}/d{d}")
for i in range(n):
    os.close(os.open(f"{mp}/d{i % 100}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    if every and i % every == 0:
        print(f"{i:>10} files: {mem()}", flush=True)
t1 = time.time()
for i in range(n):
    os.stat(f"{mp}/d{i % 100}/f{i}")
t2 = time.time()
print(f"created {n} files in {t1 - t:.1f} s, stat of each in {t2 - t1:.1f} s")
print(mem())
PY
"$bin" stats "$mp" | grep -E '^ *(icache|dcache|cache)\.' || true
"$bin" umount "$mp"
"$bin" fsck "$img"
