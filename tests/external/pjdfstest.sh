#!/usr/bin/env bash
# pjdfstest (the Rust port, 0.2.2) against a real cairn mount.
#
#   tests/external/pjdfstest.sh              cairn only; exit 0 iff nothing unexpected failed
#   tests/external/pjdfstest.sh --compare    also kernel ext4 (loop device over a tmpfs file),
#                                            then print both Summary lines; the exit code
#                                            is still cairn's
#   tests/external/pjdfstest.sh --ext4       kernel ext4 only (reference run)
#   tests/external/pjdfstest.sh -- PATTERN.. pass test-name filters to pjdfstest
#
# cairn: a 1 GiB image on a private tmpfs, mounted with -o allow_other,default_permissions
# (the tests switch users), a 16 MiB tmpfs as the second file system (-s, EXDEV tests).
# Configuration: tests/external/pjdfstest.toml; tests in tests/external/pjdfstest-skip.txt
# become settings.expected_failures. After the run: the daemon must still be alive, the
# unmount must let the daemon exit, and `cairn fsck` must exit 0.
# Full logs: $PJDFSTEST_LOG_DIR (default /tmp/cairn-pjdfstest-logs).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mode=cairn
patterns=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --compare) mode=compare ;;
    --ext4) mode=ext4 ;;
    --cairn) mode=cairn ;;
    --) shift; patterns=("$@"); break ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
    esac
    shift
done

require_root
require_cmd pjdfstest losetup mkfs.ext4 flock
[[ $mode == ext4 ]] || require_cairn
if ! getent passwd tests >/dev/null || ! getent group tests >/dev/null; then
    die "pjdfstest needs a user and group 'tests': run scripts/install-deps.sh"
fi

HERE=$CAIRN_ROOT/tests/external
LOG_DIR=${PJDFSTEST_LOG_DIR:-/tmp/cairn-pjdfstest-logs}
mkdir -p "$LOG_DIR"
rm -f "$LOG_DIR"/summary-* "$LOG_DIR"/failures-*
export NO_COLOR=1

make_scratch 1300m
small_tmpfs "$SCRATCH/second"

# write_config FILE WITH_SKIPS: the repo config plus settings.expected_failures.
write_config() {
    local out=$1 with_skips=$2 list=""
    if [[ $with_skips == 1 ]]; then
        list=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/pjdfstest-skip.txt" | grep -v '^$' |
            sed 's/.*/"&"/' | paste -sd, -) || true
    fi
    awk -v list="$list" '{ print } /^\[settings\]/ { print "expected_failures = [" list "]" }' \
        "$HERE/pjdfstest.toml" >"$out"
}

# run_pjdfstest NAME MOUNTPOINT CONFIG: runs, keeps the log, prints its Summary line.
run_pjdfstest() {
    local name=$1 mp=$2 cfg=$3 rc=0 logf=$LOG_DIR/pjdfstest-$1.log
    log "pjdfstest on $name ($mp), log $logf"
    (cd / && timeout 1200 pjdfstest -c "$cfg" -p "$mp" -s "$SCRATCH/second" "${patterns[@]}") >"$logf" 2>&1 || rc=$?
    [[ $rc -eq 124 ]] && warn "pjdfstest on $name timed out after 20 minutes"
    local summary
    summary=$(grep '^Summary:' "$logf" | tail -1) || true
    [[ -n $summary ]] || summary="Summary: (none: pjdfstest exited $rc before finishing; see $logf)"
    printf '%s\n' "$summary" >"$LOG_DIR/summary-$name"
    grep -E '(FAILED|PASSED UNEXPECTEDLY)$' "$logf" | awk '{ print $1, $2, $3 }' >"$LOG_DIR/failures-$name" || true
    return $rc
}

show_failures() {
    local name=$1 f=$LOG_DIR/failures-$1
    if [[ -s $f ]]; then
        log "$name: $(wc -l <"$f") unexpected results:"
        sed 's/^/    /' "$f" >&2
    fi
}

ext4_rc=0
if [[ $mode == ext4 || $mode == compare ]]; then
    ext4_loop "$SCRATCH/ext4.img" 1G "$SCRATCH/ext4"
    write_config "$SCRATCH/ext4.toml" 0
    run_pjdfstest ext4 "$SCRATCH/ext4" "$SCRATCH/ext4.toml" || ext4_rc=$?
    ext4_loop_release "$SCRATCH/ext4" "$LOOPDEV"
    rm -f "$SCRATCH/ext4.img"
    show_failures ext4
    printf 'pjdfstest ext4:  %s\n' "$(cat "$LOG_DIR/summary-ext4")"
fi

cairn_rc=0
if [[ $mode == cairn || $mode == compare ]]; then
    IMG=$SCRATCH/cairn.img
    MP=$SCRATCH/cairn
    cairn_mkfs "$IMG" 1G || die "cairn mkfs failed"
    cairn_mount "$IMG" "$MP" || die "cairn mount failed"
    chmod 755 "$MP"
    write_config "$SCRATCH/cairn.toml" 1
    run_pjdfstest cairn "$MP" "$SCRATCH/cairn.toml" || cairn_rc=$?
    show_failures cairn
    if ! cairn_alive "$MP"; then
        warn "the cairn daemon died or hangs after pjdfstest"
        cairn_rc=1
    fi
    if ! cairn_unmount "$IMG" "$MP"; then
        cairn_rc=1
    elif ! cairn_fsck "$IMG" "pjdfstest"; then
        cairn_rc=1
    fi
fi

echo
[[ -f $LOG_DIR/summary-ext4 && $mode == compare ]] && printf 'pjdfstest ext4:  %s\n' "$(cat "$LOG_DIR/summary-ext4")"
[[ -f $LOG_DIR/summary-cairn && $mode != ext4 ]] && printf 'pjdfstest cairn: %s\n' "$(cat "$LOG_DIR/summary-cairn")"

if [[ $mode == ext4 ]]; then
    exit "$ext4_rc"
fi
if [[ $cairn_rc -ne 0 ]]; then
    SUITE_FAILED=1
    exit 1
fi
exit 0
