#!/usr/bin/env bash
# A stand-in `cairn` command backed by fuse2fs, to test the test harness itself:
#
#   CAIRN=tests/external/fuse2fs-as-cairn.sh tests/external/survival.sh
#
# mkfs = mkfs.ext4, mount = fuse2fs in the foreground under a process named
# "cairn mount IMAGE MOUNTPOINT" (so the harness's daemon checks find it), fsck =
# e2fsck -fn, stats = df. fuse2fs has known bugs (see docs/testing.md): the suites
# must catch them.
set -euo pipefail
cmd=${1:?usage: fuse2fs-as-cairn.sh mkfs|mount|fsck|stats ...}
shift
case $cmd in
mkfs)
    img=$1 size=""
    shift
    while [[ $# -gt 0 ]]; do
        case $1 in --size) size=$2; shift ;; esac
        shift
    done
    rm -f "$img"
    truncate -s "${size:?--size missing}" "$img"
    mkfs.ext4 -q -F "$img"
    ;;
mount)
    img=$1 mp=$2 opts=""
    shift 2
    [[ ${1:-} == -o ]] && opts=$2
    setsid bash -c "exec -a 'cairn mount $img $mp' fuse2fs '$img' '$mp' -f ${opts:+-o $opts}" \
        </dev/null >/dev/null 2>&1 &
    for _ in $(seq 100); do
        mountpoint -q "$mp" && exit 0
        sleep 0.1
    done
    exit 1
    ;;
fsck) e2fsck -fn "$1" ;;
stats) df -h "$1" ;;
*) echo "unknown command $cmd" >&2; exit 8 ;;
esac
