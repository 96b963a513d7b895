#!/usr/bin/env bash
# First speed comparison: cairn vs fuse2fs vs kernel ext4 (and tmpfs as the ceiling), same
# run, same machine, interleaved repetitions, medians. Not part of CI's pass/fail.
#
#   scripts/speed-check.sh [--reps N] [--files N] [--dbench-time S] [--fs "cairn fuse2fs ext4 tmpfs"]
#                          [--out FILE.md]
#
# Benchmarks (each on a freshly made file system, all images in RAM on a tmpfs so that
# the host disk is out of the picture):
#   create   fs_mark -S 0 -s 0 -n 20000 -t 1 -D 10 -N 2000 -L 1: 20,000 empty files, one
#            thread, no sync, round-robin over 10 directories; files/s as fs_mark reports.
#   dbench   dbench -t 20 -c /usr/share/dbench/client.txt 1: one client; throughput MB/s
#            and max latency.
# File systems:
#   cairn    `cairn mkfs --size 2G` + `cairn mount` (default options)
#   fuse2fs  ext4 image file (mkfs.ext4 defaults) served by fuse2fs (FUSE, user space)
#   ext4     kernel ext4 on a loop device over a tmpfs file (mkfs.ext4 defaults)
#   tmpfs    reference ceiling
# Every benchmark is followed by an unmount (cairn: and a wait for the daemon to exit), so
# the time to write back is not hidden from the next run.
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/external/lib.sh"

REPS=3
FILES=20000
DBENCH_T=20
FSLIST="cairn fuse2fs ext4 tmpfs"
OUT=""
while [[ $# -gt 0 ]]; do
    case $1 in
    --reps) REPS=$2; shift ;;
    --files) FILES=$2; shift ;;
    --dbench-time) DBENCH_T=$2; shift ;;
    --fs) FSLIST=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
    esac
    shift
done

require_root
require_cmd fs_mark dbench fuse2fs mkfs.ext4 losetup flock
[[ " $FSLIST " == *" cairn "* ]] && require_cairn
LOADFILE=/usr/share/dbench/client.txt
[[ -r $LOADFILE ]] || die "missing $LOADFILE (package dbench)"
LOG_DIR=${SPEED_LOG_DIR:-/tmp/cairn-speed-logs}
mkdir -p "$LOG_DIR"

make_scratch 5g
MP=$SCRATCH/mnt
mkdir -p "$MP"

# fs_up FS: make and mount a fresh FS at $MP.
fs_up() {
    case $1 in
    cairn)
        "$CAIRN" mkfs "$SCRATCH/cairn.img" --size 2G --force >/dev/null
        "$CAIRN" mount "$SCRATCH/cairn.img" "$MP"
        ;;
    fuse2fs)
        truncate -s 2G "$SCRATCH/fuse2fs.img"
        mkfs.ext4 -q -F "$SCRATCH/fuse2fs.img"
        fuse2fs "$SCRATCH/fuse2fs.img" "$MP" >/dev/null
        ;;
    ext4)
        truncate -s 2G "$SCRATCH/ext4.img"
        mkfs.ext4 -q -F "$SCRATCH/ext4.img"
        LOOPDEV=$(losetup -f --show "$SCRATCH/ext4.img")
        mount "$LOOPDEV" "$MP"
        ;;
    tmpfs) mount -t tmpfs -o size=2g tmpfs "$MP" ;;
    esac
    local i
    for ((i = 0; i < 300; i++)); do
        is_mounted "$MP" && return 0
        sleep 0.1
    done
    die "$1 did not mount"
}

# fs_down FS: unmount, wait for a FUSE daemon to finish, drop the image.
fs_down() {
    case $1 in
    cairn)
        "$CAIRN" umount "$MP" || die "cairn umount $MP failed"
        rm -f "$SCRATCH/cairn.img"
        ;;
    fuse2fs)
        fuse2fs_unmount "$SCRATCH/fuse2fs.img" "$MP"
        rm -f "$SCRATCH/fuse2fs.img"
        ;;
    ext4)
        umount "$MP"
        losetup -d "$LOOPDEV"
        LOOPDEV=""
        rm -f "$SCRATCH/ext4.img"
        ;;
    tmpfs) umount "$MP" ;;
    esac
}
# If we die half-way, the scratch teardown unmounts $MP; the loop device needs its own.
# shellcheck disable=SC2016 # expanded when the cleanup runs
on_exit '[[ -n ${LOOPDEV:-} ]] && { force_unmount "$MP"; losetup -d "$LOOPDEV"; }'

# run_create FS REP: prints files/s.
run_create() {
    local logf=$LOG_DIR/create-$1-$2.log
    fs_up "$1"
    fs_mark -d "$MP/fsmark" -S 0 -s 0 -n "$FILES" -t 1 -D 10 -N $((FILES / 10)) -L 1 >"$logf" 2>&1 ||
        { fs_down "$1"; warn "fs_mark failed on $1 (see $logf)"; echo "fail"; return; }
    fs_down "$1"
    awk '/^ *FSUse%/ { getline; print $4 }' "$logf"
}

# run_dbench FS REP: prints "MB/s max_latency_ms".
run_dbench() {
    local logf=$LOG_DIR/dbench-$1-$2.log
    fs_up "$1"
    mkdir -p "$MP/dbench"
    dbench -t "$DBENCH_T" -c "$LOADFILE" -D "$MP/dbench" 1 >"$logf" 2>&1 ||
        { fs_down "$1"; warn "dbench failed on $1 (see $logf)"; echo "fail fail"; return; }
    fs_down "$1"
    sed -n 's/^Throughput \([0-9.]*\) MB\/sec.*max_latency=\([0-9.]*\) ms.*/\1 \2/p' "$logf" | tail -1
}

# median FORMAT VALUE...: the median ("fail" entries are dropped), printf-formatted.
median() {
    local f=$1
    shift
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | awk -v f="$f" '{ v[NR] = $1 } END {
        if (NR == 0) { print "n/a"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf f "\n", m }'
}

# all FORMAT VALUE...: every run, formatted, separated by slashes.
all() {
    local f=$1 v out=""
    shift
    for v in "$@"; do
        # shellcheck disable=SC2059 # the format is one of ours (%.0f, %.1f)
        if [[ $v =~ ^[0-9.]+$ ]]; then v=$(printf "$f" "$v"); fi
        out="${out:+$out/}$v"
    done
    printf '%s\n' "$out"
}

declare -A CREATE DB_TP DB_LAT
for ((rep = 1; rep <= REPS; rep++)); do
    for fs in $FSLIST; do
        log "rep $rep/$REPS: $fs: fs_mark create of $FILES files"
        v=$(run_create "$fs" "$rep")
        CREATE[$fs]="${CREATE[$fs]:-} $v"
        log "    $v files/s"
        log "rep $rep/$REPS: $fs: dbench -t $DBENCH_T 1"
        read -r tp lat < <(run_dbench "$fs" "$rep")
        DB_TP[$fs]="${DB_TP[$fs]:-} $tp"
        DB_LAT[$fs]="${DB_LAT[$fs]:-} $lat"
        log "    $tp MB/s, max latency $lat ms"
    done
done

table() {
    echo "Speed check, $(date -u +%Y-%m-%d), $(nproc) cores, kernel $(uname -r); cairn $(git -C "$CAIRN_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); median of $REPS runs (all runs in brackets). Images on tmpfs."
    echo
    echo "| file system | fs_mark create, $FILES empty files (files/s) | dbench -t $DBENCH_T 1 (MB/s) | dbench max latency (ms) |"
    echo "|---|---|---|---|"
    local fs
    for fs in $FSLIST; do
        # shellcheck disable=SC2086 # the lists are space-separated on purpose
        printf '| %s | %s (%s) | %s (%s) | %s (%s) |\n' "$fs" \
            "$(median %.0f ${CREATE[$fs]})" "$(all %.0f ${CREATE[$fs]})" \
            "$(median %.1f ${DB_TP[$fs]})" "$(all %.1f ${DB_TP[$fs]})" \
            "$(median %.1f ${DB_LAT[$fs]})" "$(all %.1f ${DB_LAT[$fs]})"
    done
    echo
    echo "create: \`fs_mark -S 0 -s 0 -n $FILES -t 1 -D 10 -N $((FILES / 10)) -L 1\`; dbench: \`dbench -t $DBENCH_T -c $LOADFILE 1\`; every run on a fresh file system, unmounted after. fuse2fs and ext4: \`mkfs.ext4\` defaults on a 2 GiB image; ext4 through a loop device."
}

echo
table | tee "${OUT:-/dev/null}"
