#!/usr/bin/env bash
# Delayed logging, measured: bytes written to the device per file created, for cairn,
# kernel ext4 and kernel XFS, in the same run (seed 001's metric). Not part of CI.
#
#   scripts/journal-bytes.sh [--files N] [--reps N] [--fs "cairn ext4 xfs"] [--out FILE.md]
#
# Each file system sits on its own loop device over a file in a private tmpfs. The
# workload is fs_mark creating N empty files (default 100,000) in 100 directories, one
# thread, no fsync: `fs_mark -S 0 -s 0 -n N -t 1 -D 100 -N N/100 -L 1` (fs_mark 3.3
# overflows a buffer with 10,000 files per directory). The figure is the
# device's written sectors (/sys/block/loopX/stat, field 7) from just after mount to just
# after the unmount has finished (for cairn: the daemon has exited), times 512, divided by
# N: everything the file system wrote for those files, journal and home locations alike.
# For cairn the journal's own counter (`journal.bytes_logged` from `cairn stats`, read
# before unmount) is reported too, with the number of commits and of buffers relogged in
# memory (changed again before their commit: each such change costs no log bytes).
# cairn is mounted with -o nofuseblk so the kernel does not claim the loop device that
# cairn writes to. `cairn-nodelaylog` is cairn mounted with -o delaylog=0 (whole blocks
# logged, home writes at every commit): the mechanism turned off, for comparison.
# `cairn-nocompress` is cairn with -o journal_compress=0 (the changed chunks logged as
# they are, not as one zstd frame per descriptor).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/external/lib.sh"

FILES=100000
REPS=1
FSLIST="cairn ext4 xfs"
OUT=""
while [[ $# -gt 0 ]]; do
    case $1 in
    --files) FILES=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --fs) FSLIST=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done

require_root
require_cmd fs_mark losetup mkfs.ext4 mkfs.xfs python3
require_cairn
make_scratch 6G

sectors_written() {
    local dev=${1#/dev/}
    awk '{ print $7 }' "/sys/block/$dev/stat"
}

declare -A PERFILE LOGPERFILE EXTRA
run_one() {
    local fs=$1 rep=$2 img=$SCRATCH/$1.img mp=$SCRATCH/mp dev s0 s1 statjson
    rm -f "$img"
    truncate -s 4G "$img"
    dev=$(losetup -f --show "$img")
    mkdir -p "$mp"
    case $fs in
    cairn | cairn-nodelaylog | cairn-nocompress) "$CAIRN" mkfs "$dev" --force --quiet ;;
    ext4) mkfs.ext4 -q -F "$dev" ;;
    xfs) mkfs.xfs -q -f "$dev" ;;
    esac
    case $fs in
    cairn) "$CAIRN" mount "$dev" "$mp" -o nofuseblk ;;
    cairn-nodelaylog) "$CAIRN" mount "$dev" "$mp" -o nofuseblk,delaylog=0 ;;
    cairn-nocompress) "$CAIRN" mount "$dev" "$mp" -o nofuseblk,journal_compress=0 ;;
    *) mount "$dev" "$mp" ;;
    esac
    sync
    s0=$(sectors_written "$dev")
    (cd "$SCRATCH" && fs_mark -d "$mp/f" -S 0 -s 0 -n "$FILES" -t 1 -D 100 -N $((FILES / 100)) -L 1) >"$SCRATCH/fsmark-$fs.log" 2>&1 ||
        { cat "$SCRATCH/fsmark-$fs.log" >&2; die "fs_mark failed on $fs"; }
    if [[ $fs == cairn* ]]; then
        statjson=$("$CAIRN" stats "$mp" --json)
        "$CAIRN" umount "$mp"
        read -r logged commits relogged swap wait capture < <(python3 -c '
import json, sys
c = json.load(sys.stdin)["counters"]
print(c["journal.bytes_logged"], c["journal.commits"], c["cil.items_relogged"], c["cil.swap_us_max"],
      c["cil.writer_wait_us_max"], c["cil.capture_us_max"])' <<<"$statjson")
        LOGPERFILE[$fs,$rep]=$(python3 -c "print(f'{$logged / $FILES:.0f}')")
        EXTRA[$fs,$rep]="$commits commits, $relogged buffer changes relogged in memory; push: gate held ≤ $swap µs, writers waited ≤ $wait µs, capture (gate free) ≤ $capture µs"
    else
        umount "$mp"
    fi
    s1=$(sectors_written "$dev")
    losetup -d "$dev"
    PERFILE[$fs,$rep]=$(python3 -c "print(f'{($s1 - $s0) * 512 / $FILES:.0f}')")
    log "$fs rep $rep: $(( (s1 - s0) * 512 )) bytes written for $FILES files = ${PERFILE[$fs,$rep]} B/file${LOGPERFILE[$fs,$rep]:+; journal ${LOGPERFILE[$fs,$rep]} B/file (${EXTRA[$fs,$rep]})}"
    rm -f "$img"
}

for ((r = 1; r <= REPS; r++)); do
    for fs in $FSLIST; do
        run_one "$fs" "$r"
    done
done

median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
{
    echo "Bytes written to the device per file created, $(date +%F), $(nproc) cores, kernel $(uname -r); median of $REPS run(s)."
    echo
    echo "| file system | device bytes per file | journal bytes per file | notes |"
    echo "|---|---|---|---|"
    for fs in $FSLIST; do
        vals=()
        lvals=()
        for ((r = 1; r <= REPS; r++)); do
            vals+=("${PERFILE[$fs,$r]}")
            [[ -n ${LOGPERFILE[$fs,$r]:-} ]] && lvals+=("${LOGPERFILE[$fs,$r]}")
        done
        l="—"
        [[ ${#lvals[@]} -gt 0 ]] && l=$(median "${lvals[@]}")
        echo "| $fs | $(median "${vals[@]}") | $l | ${EXTRA[$fs,1]:-} |"
    done
    echo
    echo "Workload: \`fs_mark -S 0 -s 0 -n $FILES -t 1 -D 100 -N $((FILES / 100)) -L 1\` on a 4 GiB loop device over tmpfs; device bytes = written sectors × 512 from after mount to after unmount (mkfs defaults; cairn -o nofuseblk)."
} | tee "${OUT:-/dev/null}"
