#!/usr/bin/env bash
# A full disk (issue 50): the eight regression cases and the model-based harness of
# tests/external/fulldisk.py, on real cairn mounts of small images in a private tmpfs.
#
#   tests/external/fulldisk.sh                  # CI: cases 1-8, then 15 harness runs
#   tests/external/fulldisk.sh --runs 50        # the long run: 50 harness runs, no cases
#   tests/external/fulldisk.sh --cases 2,5      # some cases only (with --runs N: both)
#   tests/external/fulldisk.sh --seed 1000      # seed of the first harness run (default 1)
#   tests/external/fulldisk.sh --writer-timeout 120   # writers' deadline per run (default 60 s)
#
# Cases (each a separate mount; fsck clean at the end of each):
#   1  four writers (buffered, O_DIRECT, mmap+msync, small appends) fill a 256 MiB image;
#      every acknowledged (fsync'd, logged) chunk survives umount + mount and SIGKILL + replay
#   2  -o dirty_limit_mb=0: 6,000 bytes fsync'd, disk filled through O_DIRECT, pwrite of 5,000
#      at 6,000 + fsync: if both succeed the 11,000 bytes are there after a remount
#   3  after an O_DIRECT fill a buffered dd bs=1M gets ENOSPC from write() and keeps every
#      accepted byte; with dirty_limit_mb=0, write() or fsync says ENOSPC and nothing fsync'd
#      is lost (bounded: 60 s, 10x the image size)
#   4  128 MiB image: the first dd stops with ENOSPC at write(); a second (100 x 1 MiB) and a
#      third (40 x 1 MiB + fsync) must get ENOSPC from write(); sizes never shrink (drop_caches)
#   5  echo hello > old; sync; fill; sync; cat old prints hello (6 runs)
#   6  one byte at 2^52 and 2^63-2: refused with EFBIG or stored for good; past the largest
#      size refused
#   7  chattr +i / +a refuse appends, non-appending writes and truncates in the mount that
#      set them; content after drop_caches and a remount is what the successful calls wrote
#   8  6 MiB of buffered writes not yet written back, then a fallocate (and, on a second
#      image, O_DIRECT writes) of all of df's available space: the writer's fsync says 0
#      and the bytes are there after a remount (xfstests generic/299)
# Harness run i (seed SEED+i): image 48M/96M/192M (i mod 3), cairn umount or SIGKILL
# ((i div 3) mod 2), -o none/cache_mb=4/writeback_cache=0/direct_data=0/dirty_limit_mb=0
# (i mod 5); 2-4 writers chosen by the seed. See fulldisk.py for the checks. Then one
# run with --damage checks the checker (acknowledged data damaged on purpose must be
# found after the remount).
#
# The last line: "fulldisk: N passed, N failed"; exit 1 if any failed. KEEP_FAILED=1 keeps
# the scratch tmpfs of a failed suite mounted. Images live under /tmp/fulldisk.XXXXXX.
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PY=$CAIRN_ROOT/tests/external/fulldisk.py
RUNS=15
CASES=1,2,3,4,5,6,7,8
SEED=1
WRITER_TIMEOUT=60
cases_given=0
runs_given=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --runs) RUNS=$2; runs_given=1; shift ;;
    --cases) CASES=$2; cases_given=1; shift ;;
    --seed) SEED=$2; shift ;;
    --writer-timeout) WRITER_TIMEOUT=$2; shift ;;
    -h | --help) sed -n '2,33p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done
[[ $RUNS =~ ^[0-9]+$ ]] || die "--runs needs a number"
[[ $SEED =~ ^[0-9]+$ ]] || die "--seed needs a number"
# --runs alone is the long run of the harness: no cases unless --cases says so.
[[ $runs_given -eq 1 && $cases_given -eq 0 ]] && CASES=""

require_root
require_cairn
require_cmd python3 chattr lsattr findmnt pgrep
sweep_dead_fuse_mounts

# Scratch: a private tmpfs on /tmp/fulldisk.XXXXXX. On exit every mount below it is
# unmounted, daemons serving them (their command line names this directory, so only
# ours) that do not exit are killed, and the tmpfs goes.
fd_drop_scratch() {
    local dir=$1 mp pid i
    if [[ ${KEEP_FAILED:-0} == 1 && ${SUITE_FAILED:-0} == 1 ]]; then
        warn "KEEP_FAILED=1: leaving $dir mounted for inspection (umount $dir when done)"
        return
    fi
    while read -r mp; do
        force_unmount "$mp"
    done < <(findmnt -rn -o TARGET | grep -F "$dir/" | sort -r)
    for ((i = 0; i < 200; i++)); do
        [[ -z $(pgrep -f -- "cairn mount $dir/" || true) ]] && break
        sleep 0.1
    done
    for pid in $(pgrep -f -- "cairn mount $dir/" || true); do
        warn "killing cairn daemon $pid (serving a mount under $dir)"
        kill -9 "$pid" 2>/dev/null || true
    done
    umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null || true
    rmdir "$dir" 2>/dev/null || true
}

FD_SCRATCH=$(mktemp -d /tmp/fulldisk.XXXXXX)
chmod 755 "$FD_SCRATCH"
on_exit "fd_drop_scratch '$FD_SCRATCH'"
mount -t tmpfs -o size=6g,mode=755 tmpfs "$FD_SCRATCH"
RESULTS=$FD_SCRATCH/results.txt
: >"$RESULTS"

# fulldisk.py runs in the background so that a signal to this script is handled at
# once: the cleanup stops it (SIGTERM: it unmounts what it mounted) before the scratch
# goes.
PY_PID=
fd_stop_python() {
    local i
    [[ -n $PY_PID ]] && kill -0 "$PY_PID" 2>/dev/null || return 0
    kill -TERM "$PY_PID" 2>/dev/null || true
    for ((i = 0; i < 600; i++)); do
        kill -0 "$PY_PID" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$PY_PID" 2>/dev/null || true
}
on_exit fd_stop_python

pass=0
fail=0
n=0
# run_py LIMIT_SECONDS SUBCOMMAND ARGS...: one fulldisk.py run (its stdout, the result
# line, is shown and kept for the summary); counts a pass or a failure.
run_py() {
    local limit=$1 rc=0 out
    shift
    n=$((n + 1))
    out=$FD_SCRATCH/out.$n
    timeout -k 20 "$limit" python3 "$PY" "$@" --cairn "$CAIRN" --workdir "$FD_SCRATCH" >"$out" &
    PY_PID=$!
    wait "$PY_PID" || rc=$?
    PY_PID=
    cat "$out"
    if [[ $rc -eq 0 ]]; then
        pass=$((pass + 1))
        cat "$out" >>"$RESULTS"
    else
        fail=$((fail + 1))
        SUITE_FAILED=1
        [[ $rc -eq 124 ]] && echo "fulldisk.py $* timed out after $limit s" >>"$out"
        [[ -s $out ]] || echo "fulldisk.py $*: exit $rc, no result line" >>"$out"
        cat "$out" >>"$RESULTS"
    fi
    return 0
}

t0=$(now_s)
log "cairn: $CAIRN ($(stat -c '%y' "$CAIRN" | cut -d. -f1))"
IFS=, read -r -a case_list <<<"$CASES"
for c in "${case_list[@]}"; do
    [[ -n $c ]] || continue
    log "case $c"
    run_py $((2 * WRITER_TIMEOUT + 240)) case "$c" --timeout "$WRITER_TIMEOUT"
done

SIZES=(48M 96M 192M)
OPTS=("" cache_mb=4 writeback_cache=0 direct_data=0 dirty_limit_mb=0)
for ((i = 0; i < RUNS; i++)); do
    args=(run --seed $((SEED + i)) --size "${SIZES[i % 3]}" --timeout "$WRITER_TIMEOUT")
    [[ -n ${OPTS[i % 5]} ]] && args+=(--opts "${OPTS[i % 5]}")
    [[ $(((i / 3) % 2)) -eq 1 ]] && args+=(--kill)
    log "harness run $((i + 1))/$RUNS: ${args[*]:1}"
    run_py $((WRITER_TIMEOUT + 240)) "${args[@]}"
done

log "checking the checker: a harness run that damages acknowledged data must find it"
run_py 300 run --seed 999 --size 48M --writers buffered,appends,mmap --timeout "$WRITER_TIMEOUT" --damage

echo
echo "==================== fulldisk summary ($(fmt_dur $(($(now_s) - t0)))) ===================="
cat "$RESULTS"
echo "fulldisk: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
