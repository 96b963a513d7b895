#!/usr/bin/env bash
# fsx (File System eXerciser) on a cairn mount: random reads, writes, truncates, mmap
# reads and writes, fsync, fallocate, hole punches, copy_file_range and sendfile on one
# file, every read checked against fsx's in-memory model of the file; then fio's
# checksummed writes through O_DIRECT, which fsx cannot do.
#
#   tests/external/fsx.sh [--seed N] [--scale PERCENT]
#
#   --seed N         base seed; fsx run k uses N+k (default: random, printed; or $FSX_SEED)
#   --scale PERCENT  number of fsx operations, in percent of the defaults below (100)
#
# fsx is fsx-rs 0.2.0 (cargo install fsx --version 0.2.0; scripts/install-deps.sh does
# it). Its knobs are a TOML config (operation weights, flen = the file's maximum size,
# opsize.max = the largest single operation) and -N ops, -S seed, -P artifacts dir. It
# has NO direct-I/O mode (no O_DIRECT setting in 0.2.0, nor in 0.3.x): the O_DIRECT part
# of this suite is fio with --verify=crc32c (every block carries a header and a checksum,
# read back and checked). fsx's hole punch is FALLOC_FL_PUNCH_HOLE|KEEP_SIZE and its
# posix_fallocate is mode 0; FALLOC_FL_ZERO_RANGE and KEEP_SIZE alone are checked by the
# fallocate probe (step 1). Every config sets opsize.min = 1: fsx-rs (0.2.0 to 0.3.2)
# issues a zero-length posix_fallocate when it draws size 0, which fails (EINVAL) on
# every Linux file system (tmpfs too) and stops fsx with "Test file system does not
# support posix_fallocate".
# A fresh 512 MiB image on a private tmpfs, default mount options (writeback cache on):
#   1. fallocate probe: punch hole, zero range (aligned and not), keep-size and plain
#      preallocation past EOF on a file of random bytes; the result must equal the
#      expected bytes, read through the page cache and with O_DIRECT.
#   2. fsx buffered   pread/pwrite/ftruncate/close-open/fsync/fdatasync, no mmap,
#                     1 MiB file, ops up to 128 KiB (150,000 ops)
#   3. fsx mmap       mmap reads and writes (msync after each), msync(MS_INVALIDATE),
#                     pread/pwrite, truncate (40,000 ops)
#   4. fsx space      posix_fallocate, punch hole, truncate, copy_file_range, sendfile,
#                     posix_fadvise, mmap, pread/pwrite, 4 MiB file, ops up to 256 KiB
#                     (60,000 ops)
#   5. fsx x2         two fsx processes at once on two files, every operation above
#                     (40,000 ops each)
#   6. fio O_DIRECT   (a) libaio, iodepth 16, 4 KiB random writes over 64 MiB, twice,
#                     read back every 256 blocks and at the end; (b) pwrite/pread, random
#                     sizes 512 B .. 1 MiB over 32 MiB; (c) page cache vs O_DIRECT on one
#                     file, each step with a different block size so that stale data
#                     cannot pass: buffered writes (cached) -> O_DIRECT writes -> buffered
#                     read-back; mmap writes -> O_DIRECT read-back; buffered writes left
#                     dirty -> O_DIRECT read-back.
#   7. unmount, wait for the daemon to exit, `cairn fsck` must exit 0.
#   8. remount with no_writeback_cache,cache_mb=4: the last file of 6c read back
#      (buffered), fsx x1 every operation (40,000 ops), fio O_DIRECT (b) again; unmount,
#      wait for the daemon, fsck 0.
# Any fsx or fio failure fails the suite and prints that tool's log (fsx's lists its
# last 1,024 operations and the seed). Logs, configs and fsx's artifacts (NAME.fsxgood,
# the expected file, and NAME.fsxbad, a copy of the file on cairn) are kept in
# $FSX_LOG_DIR (default /tmp/cairn-fsx-logs). Reproduce one fsx run with the
# `reproduce:` line it prints. Environment: CAIRN, CAIRN_MOUNT_OPTS, KEEP_FAILED=1.
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SEED=${FSX_SEED:-}
SCALE=100
while [[ $# -gt 0 ]]; do
    case $1 in
    --seed) SEED=$2; shift ;;
    --scale) SCALE=$2; shift ;;
    -h | --help) sed -n '2,51p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
    esac
    shift
done
[[ -z $SEED ]] && SEED=$(((RANDOM << 15 | RANDOM) * 1000))
[[ $SEED =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer"
[[ $SCALE =~ ^[0-9]+$ && $SCALE -gt 0 ]] || die "--scale must be a positive integer"

require_root
require_cmd fsx fio fallocate flock cmp dd
require_cairn

LOG_DIR=${FSX_LOG_DIR:-/tmp/cairn-fsx-logs}
mkdir -p "$LOG_DIR"
rm -rf "${LOG_DIR:?}"/*

make_scratch 1g
IMG=$SCRATCH/fs.img
MP=$SCRATCH/mnt
t_start=$(now_s)

ops() { echo $(($1 * SCALE / 100)); }

log "$(fsx --version), $(fio --version); base seed $SEED (--seed $SEED reproduces every run)"

# ---- fsx configurations (fsx.toml: weights are relative frequencies)
cat >"$LOG_DIR/buffered.toml" <<'EOF'
flen = 1048576
[opsize]
min = 1
max = 131072
[weights]
read = 10
write = 10
truncate = 2
mapread = 0
mapwrite = 0
close_open = 1
fsync = 1
fdatasync = 1
EOF
cat >"$LOG_DIR/mmap.toml" <<'EOF'
flen = 1048576
[opsize]
min = 1
max = 131072
[weights]
read = 5
write = 5
mapread = 10
mapwrite = 10
invalidate = 2
truncate = 2
close_open = 1
fsync = 1
EOF
cat >"$LOG_DIR/space.toml" <<'EOF'
flen = 4194304
[opsize]
min = 1
max = 262144
[weights]
read = 10
write = 10
mapread = 3
mapwrite = 3
truncate = 3
posix_fallocate = 4
punch_hole = 4
copy_file_range = 3
sendfile = 2
posix_fadvise = 1
close_open = 1
fdatasync = 1
EOF
cat >"$LOG_DIR/all.toml" <<'EOF'
flen = 2097152
[opsize]
min = 1
max = 196608
[weights]
read = 10
write = 10
mapread = 5
mapwrite = 5
invalidate = 1
truncate = 3
posix_fallocate = 2
punch_hole = 2
copy_file_range = 2
sendfile = 1
posix_fadvise = 1
close_open = 1
fsync = 1
fdatasync = 1
EOF

# fsx_start NAME CONFIG NUMOPS SEED: start fsx in the background on $MP/NAME; sets
# FSX_PID. Its output goes to $LOG_DIR/NAME.log, its artifacts to $LOG_DIR/NAME/.
fsx_start() {
    local name=$1 cfg=$2 n=$3 seed=$4
    mkdir -p "$LOG_DIR/$name"
    printf 'reproduce: fsx -N %s -S %s -f %s -P %s %s\n' "$n" "$seed" "$LOG_DIR/$cfg.toml" \
        "$LOG_DIR/$name" "MOUNTPOINT/$name" >"$LOG_DIR/$name.cmd"
    log "fsx $name: config $cfg, $n ops, seed $seed"
    fsx -N "$n" -S "$seed" -f "$LOG_DIR/$cfg.toml" -P "$LOG_DIR/$name" "$MP/$name" \
        >"$LOG_DIR/$name.log" 2>&1 &
    FSX_PID=$!
}

# fsx_finish NAME PID T0: wait for that fsx; on failure print its log and keep a copy of
# the file it left on cairn.
fsx_finish() {
    local name=$1 pid=$2 t0=$3 rc=0
    wait "$pid" || rc=$?
    if [[ $rc -eq 0 ]] && grep -q 'All operations completed A-OK' "$LOG_DIR/$name.log"; then
        log "OK: fsx $name ($(($(now_s) - t0)) s)"
        return 0
    fi
    fail "fsx $name exited $rc; $(cat "$LOG_DIR/$name.cmd")"
    echo "----- fsx $name log ($LOG_DIR/$name.log) -----"
    head -n 2000 "$LOG_DIR/$name.log"
    echo "----- end of fsx $name log -----"
    cp "$MP/$name" "$LOG_DIR/$name/$name.fsxbad" 2>/dev/null || true
    return 1
}

# fsx_run NAME CONFIG NUMOPS SEED
fsx_run() {
    local t0
    t0=$(now_s)
    fsx_start "$@"
    fsx_finish "$1" "$FSX_PID" "$t0" || true
}

# fio_run NAME ARGS...: one fio job on $MP; its output to $LOG_DIR/fio-NAME.log,
# printed on failure.
fio_run() {
    local name=$1 rc=0 t0
    shift
    t0=$(now_s)
    # from the log dir: fio leaves its verify state files (local-NAME-0-verify.state) in
    # the current directory
    (cd "$LOG_DIR" && fio --name="$name" --verify_fatal=1 --exitall_on_error=1 --group_reporting "$@") \
        >"$LOG_DIR/fio-$name.log" 2>&1 || rc=$?
    if [[ $rc -eq 0 ]] && grep -q 'err= 0' "$LOG_DIR/fio-$name.log"; then
        log "OK: fio $name ($(($(now_s) - t0)) s)"
        return 0
    fi
    fail "fio $name exited $rc"
    echo "----- fio $name log ($LOG_DIR/fio-$name.log) -----"
    head -n 200 "$LOG_DIR/fio-$name.log"
    echo "----- end of fio $name log -----"
    return 1
}

# Page cache vs O_DIRECT (6c): the same 32 MiB file; each step's block size differs from
# the step before, so a block left over from it has a wrong header (offset, length).
COH=(--filename="$MP/coherence" --size=32M --rw=randwrite --verify=crc32c --ioengine=psync)

# coherence: 6c. Each step reads back what the step before wrote; the chain stops at the
# first failure (what follows would fail for the same reason).
coherence() {
    fio_run coh-buffered "${COH[@]}" --bs=16k --direct=0 || return 0
    fio_run coh-direct "${COH[@]}" --bs=4k --direct=1 --do_verify=0 || return 0
    fio_run coh-direct-read-buffered "${COH[@]}" --bs=4k --direct=0 --verify_only || return 0
    fio_run coh-mmap "${COH[@]}" --bs=8k --ioengine=mmap --do_verify=0 || return 0
    fio_run coh-mmap-read-direct "${COH[@]}" --bs=8k --direct=1 --verify_only || return 0
    fio_run coh-dirty "${COH[@]}" --bs=32k --direct=0 --do_verify=0 || return 0
    fio_run coh-dirty-read-direct "${COH[@]}" --bs=32k --direct=1 --verify_only || return 0
}

# ---- 1. fallocate probe
# zeros FILE OFFSET LENGTH: write zeros into the reference copy (extends it if needed).
zeros() {
    dd if=/dev/zero of="$1" bs=64k oflag=seek_bytes iflag=count_bytes conv=notrunc \
        seek="$2" count="$3" status=none
}
fallocate_probe() {
    local f=$MP/probe ref=$SCRATCH/probe.ref step mode o l size
    head -c 1M /dev/urandom >"$ref"
    cp "$ref" "$f"
    # MODE OFFSET LENGTH (fallocate(1) flags; "-" = mode 0, plain preallocation)
    local -a steps=(
        "-p 4096 8192"          # punch, block-aligned
        "-p 5000 30000"         # punch, partial blocks at both ends
        "-z 262144 131072"      # zero range, aligned
        "-z 100001 70000"       # zero range, unaligned
        "-n 1048576 1048576"    # keep size, past EOF: the size stays 1 MiB
        "- 1048576 524288"      # mode 0 past EOF: size 1.5 MiB, zeros
        "-z 1572864 4000"       # zero range past EOF without keep size: extends
        "-p 1573000 9000"       # punch across EOF: zeros up to EOF, the size stays
    )
    for step in "${steps[@]}"; do
        read -r mode o l <<<"$step"
        local -a args=(-o "$o" -l "$l")
        [[ $mode != - ]] && args=("$mode" "${args[@]}")
        if ! fallocate "${args[@]}" "$f"; then
            fail "fallocate ${args[*]} on cairn"
            rm -f "$f"
            return
        fi
        size=$(stat -c %s "$ref")
        case $mode in
        -n) ;;
        -p) [[ $o -lt $size ]] && zeros "$ref" "$o" $((o + l > size ? size - o : l)) ;;
        *) zeros "$ref" "$o" "$l" ;;
        esac
    done
    if [[ $(stat -c %s "$f") != "$(stat -c %s "$ref")" ]]; then
        fail "fallocate probe: size $(stat -c %s "$f"), expected $(stat -c %s "$ref")"
    elif ! cmp "$ref" "$f"; then
        fail "fallocate probe: contents differ (buffered read)"
    elif ! cmp "$ref" <(dd if="$f" bs=64k iflag=direct status=none); then
        fail "fallocate probe: contents differ (O_DIRECT read)"
    else
        log "OK: fallocate probe (punch hole, zero range, keep size, mode 0; buffered and O_DIRECT reads)"
    fi
    # collapse and insert range are not supported: they must say so
    if fallocate -c -o 0 -l 4096 "$f" 2>/dev/null || fallocate -i -o 0 -l 4096 "$f" 2>/dev/null; then
        warn "fallocate collapse/insert range succeeded (expected EOPNOTSUPP)"
    fi
    rm -f "$f"
}

# ---- set up
cairn_mkfs "$IMG" 512M >/dev/null || die "cairn mkfs failed"
cairn_mount "$IMG" "$MP" || die "cairn mount failed"

fallocate_probe

# ---- 2-5. fsx
fsx_run buffered buffered "$(ops 150000)" $((SEED + 1))
fsx_run mmap mmap "$(ops 40000)" $((SEED + 2))
fsx_run space space "$(ops 60000)" $((SEED + 3))
t0=$(now_s)
fsx_start x2-a all "$(ops 40000)" $((SEED + 4))
pid_a=$FSX_PID
fsx_start x2-b all "$(ops 40000)" $((SEED + 5))
pid_b=$FSX_PID
fsx_finish x2-a "$pid_a" "$t0" || true
fsx_finish x2-b "$pid_b" "$t0" || true

# ---- 6. fio through O_DIRECT
fio_run dio-libaio --filename="$MP/dio-libaio" --size=64M --rw=randwrite --bs=4k --loops=2 \
    --direct=1 --ioengine=libaio --iodepth=16 --verify=crc32c --verify_backlog=256 \
    --randseed=$((SEED + 6)) || true
fio_run dio-sizes --filename="$MP/dio-sizes" --size=32M --rw=randwrite \
    --bssplit=512/10:4k/30:12k/20:64k/25:1m/15 --direct=1 --ioengine=psync --verify=crc32c \
    --verify_backlog=64 --randseed=$((SEED + 7)) || true
coherence

# ---- 7. unmount, fsck
cairn_alive "$MP" || fail "the daemon is not alive after the runs"
cairn_unmount "$IMG" "$MP" || fail "unmount"
cairn_fsck "$IMG" "fsx and fio" || fail "fsck after fsx and fio"

# ---- 8. remount without the writeback cache and with a small buffer cache
if cairn_mount "$IMG" "$MP" allow_other,default_permissions,no_writeback_cache,cache_mb=4; then
    fio_run coh-after-remount "${COH[@]}" --bs=32k --direct=0 --verify_only || true
    fsx_run nowbc all "$(ops 40000)" $((SEED + 8))
    fio_run dio-sizes-nowbc --filename="$MP/dio-sizes" --size=32M --rw=randwrite \
        --bssplit=512/10:4k/30:12k/20:64k/25:1m/15 --direct=1 --ioengine=psync --verify=crc32c \
        --verify_backlog=64 --randseed=$((SEED + 9)) || true
    cairn_alive "$MP" || fail "the daemon is not alive after the no_writeback_cache runs"
    cairn_unmount "$IMG" "$MP" || fail "unmount (no_writeback_cache)"
    cairn_fsck "$IMG" "the no_writeback_cache runs" || fail "fsck after the no_writeback_cache runs"
else
    fail "remount with no_writeback_cache,cache_mb=4"
fi

elapsed=$(fmt_dur $(($(now_s) - t_start)))
if [[ $failures -gt 0 ]]; then
    echo "fsx: $failures check(s) failed in $elapsed (base seed $SEED; logs in $LOG_DIR)"
    exit 1
fi
echo "fsx: all checks passed in $elapsed (base seed $SEED)"
