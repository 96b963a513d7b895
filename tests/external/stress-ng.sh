#!/usr/bin/env bash
# stress-ng file-system stressors against cairn, one at a time, a few seconds each.
#
#   tests/external/stress-ng.sh [--fs cairn|ext4|tmpfs] [--time SECONDS] [STRESSOR...]
#
# Defaults: cairn, 5 s per stressor, the list below (from shared/testing/README.md: the
# stressors worth running on a file system here; io-uring is left out, it fails on every
# file system on this kernel). --fs ext4 / tmpfs run the same list on a reference file
# system (to tell a cairn bug from a stress-ng or kernel quirk).
#
# A stressor fails when stress-ng exits non-zero (4 = "not implemented" counts as
# skipped), when its output mentions a failure (stress-ng can exit 0 after one), when the
# cairn daemon is gone or the mount stops answering, or (cairn, after each stressor:
# STRESS_FSCK_EACH=1, the default) when unmount + `cairn fsck` is not clean. After a
# failure the image is checked, then replaced by a fresh one so the next stressor starts
# clean. Logs: $STRESS_LOG_DIR (default /tmp/cairn-stress-ng-logs).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FS=cairn
T=${STRESS_TIME:-5}
FSCK_EACH=${STRESS_FSCK_EACH:-1}
LOG_DIR=${STRESS_LOG_DIR:-/tmp/cairn-stress-ng-logs}
STRESSORS=(dentry dir dirdeep dirmany rename link symlink xattr hdd iomix fallocate fpunch seek
    open filename touch utime chmod chown fsize getdent flock lockf lockofd sync-file aio
    readahead revio mmap)
args=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --fs) FS=$2; shift ;;
    --time) T=$2; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) args+=("$1") ;;
    esac
    shift
done
[[ ${#args[@]} -gt 0 ]] && STRESSORS=("${args[@]}")
case $FS in cairn | ext4 | tmpfs) ;; *) die "--fs must be cairn, ext4 or tmpfs" ;; esac

require_root
require_cmd stress-ng flock
[[ $FS == cairn ]] && require_cairn
mkdir -p "$LOG_DIR"

# Extra options per stressor: keep every data set well inside a 2 GiB file system
# (several stressors default to 1 GiB per worker).
extra_opts() {
    case $1 in
    hdd) echo "--hdd-bytes 64m" ;;
    iomix) echo "--iomix-bytes 64m" ;;
    fallocate) echo "--fallocate-bytes 64m" ;;
    revio) echo "--revio-bytes 64m" ;;
    sync-file) echo "--sync-file-bytes 64m" ;;
    readahead) echo "--readahead-bytes 16m" ;;
    seek) echo "--seek-size 16m" ;;
    mmap) echo "--mmap-file --mmap-bytes 16m" ;;
    *) echo "" ;;
    esac
}

make_scratch 2600m
IMG=$SCRATCH/fs.img
MP=$SCRATCH/mnt

fresh_fs() {
    case $FS in
    cairn)
        cairn_mkfs "$IMG" 2G >/dev/null || return 1
        cairn_mount "$IMG" "$MP" || return 1
        ;;
    ext4)
        [[ -n ${LOOPDEV:-} ]] && ext4_loop_release "$MP" "$LOOPDEV"
        ext4_loop "$IMG" 2G "$MP"
        ;;
    tmpfs)
        mkdir -p "$MP"
        is_mounted "$MP" || { mount -t tmpfs -o size=2g tmpfs "$MP" && on_exit "force_unmount '$MP'"; }
        ;;
    esac
    chmod 755 "$MP"
}

alive() {
    if [[ $FS == cairn ]]; then
        cairn_alive "$MP"
    else
        timeout 30 ls -a "$MP" >/dev/null
    fi
}

# After a failure on cairn: unmount whatever is left, fsck for the record, start afresh.
recover() {
    [[ $FS == cairn ]] || return 0
    cairn_cleanup_mount "$IMG" "$MP"
    cairn_fsck "$IMG" "failed stressor (for the record)" || true
    fresh_fs
}

fresh_fs || die "could not make and mount the file system"
passed=0
failed=0
skipped=0
results=()
for s in "${STRESSORS[@]}"; do
    d=$MP/sng-$s
    logf=$LOG_DIR/$FS-$s.log
    mkdir -p "$d"
    chmod 777 "$d"
    rc=0
    # shellcheck disable=SC2046 # extra_opts is meant to split into words
    (cd "$d" && timeout -k 10 $((T + 120)) stress-ng --"$s" 1 --temp-path "$d" -t "${T}s" --verify \
        --metrics-brief $(extra_opts "$s")) >"$logf" 2>&1 || rc=$?
    verdict=pass
    why=""
    if [[ $rc -eq 4 ]] || grep -qiE 'not implemented|skipped: [1-9]|stressor will be skipped' "$logf"; then
        verdict=skip
        why="not supported here"
    elif [[ $rc -ne 0 ]]; then
        verdict=FAIL
        why="stress-ng exit $rc"
        [[ $rc -eq 124 || $rc -eq 137 ]] && why="timed out"
    elif grep -iE 'fail' "$logf" | grep -viqE 'failed: 0|fail(ed|ures)?: *0\b'; then
        verdict=FAIL
        why="output mentions a failure"
    fi
    if ! alive; then
        verdict=FAIL
        why="${why:+$why; }daemon dead or mount not answering"
    fi
    if [[ $verdict != FAIL ]]; then
        timeout 300 rm -rf "$d" || { verdict=FAIL; why="rm -rf of its directory failed"; }
    fi
    if [[ $FS == cairn && $verdict != FAIL && $FSCK_EACH == 1 ]]; then
        if ! cairn_unmount "$IMG" "$MP"; then
            verdict=FAIL
            why="unmount did not let the daemon exit"
        elif ! cairn_fsck "$IMG" "stress-ng --$s"; then
            verdict=FAIL
            why="fsck not clean afterwards"
            fresh_fs || die "could not make and mount a fresh file system"
        elif ! cairn_mount "$IMG" "$MP"; then
            verdict=FAIL
            why="remount failed"
            recover || die "could not make and mount a fresh file system"
        fi
    elif [[ $verdict == FAIL ]]; then
        recover || die "could not make and mount a fresh file system"
    fi
    ops=$(awk -v s="$s" '$2 == "metrc:" && $4 == s && $5 ~ /^[0-9]+$/ { print $(NF-1) }' "$logf" | tail -1)
    results+=("$(printf '%-10s %-5s %12s  %s' "$s" "$verdict" "${ops:--}" "$why")")
    case $verdict in
    pass) passed=$((passed + 1)) ;;
    skip) skipped=$((skipped + 1)) ;;
    *)
        failed=$((failed + 1))
        warn "stress-ng --$s on $FS: $why (log $logf); last lines:"
        grep -iE 'fail|error|fault' "$logf" | head -n 10 >&2 || tail -n 10 "$logf" >&2
        ;;
    esac
    log "stress-ng --$s: $verdict${why:+ ($why)}"
done

if [[ $FS == cairn ]] && is_mounted "$MP"; then
    if ! cairn_unmount "$IMG" "$MP" || ! cairn_fsck "$IMG" "all stressors"; then
        failed=$((failed + 1))
        results+=("$(printf '%-10s %-5s %12s  %s' final FAIL - "final unmount/fsck")")
    fi
fi

echo
printf '%-10s %-5s %12s  %s\n' stressor result "bogo-ops/s" note
printf '%s\n' "${results[@]}"
echo "stress-ng on $FS: $passed stressors passed, $failed failed, $skipped skipped"
if [[ $failed -gt 0 ]]; then
    SUITE_FAILED=1
    exit 1
fi
