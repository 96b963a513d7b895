#!/usr/bin/env bash
# xfstests (fstests, the Linux file-system regression suite) against cairn.
#
#   tests/external/xfstests.sh                  the quick group (-g quick)
#   tests/external/xfstests.sh --ci             the tests in tests/external/xfstests-ci.txt
#   tests/external/xfstests.sh -g GROUP ...     named groups (generic/quick, auto, ...)
#   tests/external/xfstests.sh generic/001 ...  named tests
#   tests/external/xfstests.sh --ext4 ...       the same against kernel ext4 (reference run)
#   options: -e TEST (exclude one more), --no-exclude (ignore xfstests-exclude.txt)
#
# Builds xfstests from ../shared/tools/xfstests-src.tar.gz (or $XFSTESTS_TARBALL) into
# $XFSTESTS_DIR (default /var/tmp/cairn-xfstests; rebuilt when the tarball changes), applies
# tests/external/xfstests-cairn.patch (cairn mkfs for _scratch_mkfs, cairn fsck for the
# post-test checks of FSTYP=fuse FUSE_SUBTYP=.cairn), creates the users fsgqa, fsgqa2 and
# 123456-fsgqa. TEST and SCRATCH are loop devices over sparse images on a private tmpfs,
# mounted through /sbin/mount.fuse.cairn (a wrapper around scripts/mount.fuse.cairn that
# runs $CAIRN; the previous helper is restored at exit). Tests in
# tests/external/xfstests-exclude.txt are left out (they hang, take far too long or cannot
# work on FUSE). Exit 0 iff no test failed and the final unmount + `cairn fsck` are clean.
# Results: $XFSTESTS_LOG_DIR (default /tmp/cairn-xfstests-logs, with --ext4
# /tmp/cairn-xfstests-ext4-logs): run.log (check's output), check.log, results/ (per-test
# .out.bad/.full files), local.config; the last line printed is the summary.
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE=$CAIRN_ROOT/tests/external
FS=cairn
groups=()
tests=()
extra_ex=()
use_exclude=1
ci=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --ci) ci=1 ;;
    --ext4) FS=ext4 ;;
    --cairn) FS=cairn ;;
    -g) groups+=("$2"); shift ;;
    -e) extra_ex+=("$2"); shift ;;
    --no-exclude) use_exclude=0 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) tests+=("$1") ;;
    esac
    shift
done
if [[ $ci -eq 1 ]]; then
    mapfile -t ci_tests < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "${XFSTESTS_CI_LIST:-$HERE/xfstests-ci.txt}" | grep -v '^$')
    tests+=("${ci_tests[@]}")
fi
[[ ${#groups[@]} -eq 0 && ${#tests[@]} -eq 0 ]] && groups=(quick)

require_root
sweep_dead_fuse_mounts
require_cmd losetup flock make gcc patch findmnt mkfs.ext4 xfs_io
[[ $FS == cairn ]] && require_cairn
CAIRN=$(readlink -f "$CAIRN" || echo "$CAIRN")

XFS_DIR=${XFSTESTS_DIR:-/var/tmp/cairn-xfstests}
LOG_DIR=${XFSTESTS_LOG_DIR:-/tmp/cairn-xfstests-logs}
[[ $FS == ext4 && -z ${XFSTESTS_LOG_DIR:-} ]] && LOG_DIR=/tmp/cairn-xfstests-ext4-logs
PATCH=$HERE/xfstests-cairn.patch
TEST_SIZE=${XFSTESTS_TEST_SIZE:-4G}
SCRATCH_SIZE=${XFSTESTS_SCRATCH_SIZE:-6G}

# The tarball: $XFSTESTS_TARBALL, else shared/tools/ beside the checkout (CI: ../shared), or
# beside the main checkout when this is a git worktree.
find_tarball() {
    local c common
    if [[ -n ${XFSTESTS_TARBALL:-} ]]; then
        echo "$XFSTESTS_TARBALL"
        return
    fi
    common=$(git -C "$CAIRN_ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
    for c in "$CAIRN_ROOT/../shared/tools" "$CAIRN_ROOT/shared/tools" \
        ${common:+"$common/../../shared/tools"} /work/shared/tools; do
        if [[ -f $c/xfstests-src.tar.gz ]]; then
            readlink -f "$c/xfstests-src.tar.gz"
            return
        fi
    done
    die "xfstests-src.tar.gz not found (looked in ../shared/tools beside the checkout); set XFSTESTS_TARBALL"
}

# ---------------------------------------------------------------------------------------
# Build (cached) and patch
# ---------------------------------------------------------------------------------------
build_xfstests() {
    local tarball sum psum f
    tarball=$(find_tarball)
    sum=$(sha256sum "$tarball" | cut -d' ' -f1)
    mkdir -p "$XFS_DIR"
    exec 9>"$XFS_DIR/.lock"
    flock 9
    if [[ ! -x $XFS_DIR/xfstests/check || $(cat "$XFS_DIR/.built" 2>/dev/null) != "$sum" ]]; then
        log "building xfstests from $tarball into $XFS_DIR (a few minutes; log $XFS_DIR/build.log)"
        rm -rf "$XFS_DIR/xfstests" "$XFS_DIR/.built" "$XFS_DIR/.patched"
        tar -xzf "$tarball" -C "$XFS_DIR"
        if ! make -C "$XFS_DIR/xfstests" -j"$(nproc)" >"$XFS_DIR/build.log" 2>&1; then
            tail -n 30 "$XFS_DIR/build.log" >&2
            die "building xfstests failed (see $XFS_DIR/build.log; scripts/install-deps.sh installs what it needs)"
        fi
        echo "$sum" >"$XFS_DIR/.built"
    fi
    # The patch touches shell files only: on a change, restore them from the tarball and
    # apply the new patch (no rebuild).
    psum=none
    [[ -f $PATCH ]] && psum=$(sha256sum "$PATCH" | cut -d' ' -f1)
    if [[ $(cat "$XFS_DIR/.patched" 2>/dev/null) != "$psum" ]]; then
        if [[ -f $XFS_DIR/.patched-files ]]; then
            mapfile -t files <"$XFS_DIR/.patched-files"
            [[ ${#files[@]} -gt 0 ]] && tar -xzf "$tarball" -C "$XFS_DIR" "${files[@]/#/xfstests/}"
        fi
        rm -f "$XFS_DIR/.patched-files"
        if [[ -f $PATCH ]]; then
            log "applying $(basename "$PATCH")"
            sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$PATCH" >"$XFS_DIR/.patched-files"
            patch -p1 -s -d "$XFS_DIR/xfstests" <"$PATCH" || die "$PATCH does not apply"
        fi
        echo "$psum" >"$XFS_DIR/.patched"
    fi
    flock -u 9
    for f in fsgqa fsgqa2 123456-fsgqa; do
        getent passwd "$f" >/dev/null && continue
        log "creating user $f (xfstests switches to it)"
        useradd -m "$f" 2>/dev/null || useradd --badname -m "$f" ||
            die "could not create the user $f"
    done
}

# ---------------------------------------------------------------------------------------
# The mount helper: mount(8) runs /sbin/mount.fuse.cairn (and mount.fuseblk.cairn for
# remounts); ours runs scripts/mount.fuse.cairn with CAIRN set. Restored at exit.
# ---------------------------------------------------------------------------------------
HELPER_MARK="written by tests/external/xfstests.sh"
install_helper() {
    local h saved
    mkdir -p "$XFS_DIR/saved-helpers"
    for h in mount.fuse.cairn mount.fuseblk.cairn; do
        saved=$XFS_DIR/saved-helpers/$h
        # Keep the first original (a helper of an interrupted run is not an original).
        if [[ -e /sbin/$h || -L /sbin/$h ]] && ! grep -qs "$HELPER_MARK" "/sbin/$h"; then
            rm -f "$saved" "$saved.none"
            cp -P "/sbin/$h" "$saved"
        elif [[ ! -e /sbin/$h && ! -L /sbin/$h ]]; then
            rm -f "$saved"
            touch "$saved.none"
        fi
    done
    on_exit restore_helper
    # mount(8) drops suid and dev (its defaults) before it calls the helper, and a FUSE
    # mount defaults to nosuid,nodev: ask for suid,dev unless nosuid/nodev were given, so
    # the mount behaves like a kernel file system's (generic/184, 434, 633 need it).
    cat >/sbin/mount.fuse.cairn.tmp <<EOF
#!/bin/sh
# $HELPER_MARK (restored at its exit)
CAIRN='$CAIRN'
export CAIRN
src=\$1
mp=\$2
shift 2
opts=""
while [ \$# -gt 0 ]; do
    case \$1 in
    -o) opts=\$2; shift ;;
    -o*) opts=\${1#-o} ;;
    esac
    shift
done
case ",\$opts," in *,nosuid,*) ;; *) opts="\${opts:+\$opts,}suid" ;; esac
case ",\$opts," in *,nodev,*) ;; *) opts="\${opts:+\$opts,}dev" ;; esac
exec /bin/sh '$CAIRN_ROOT/scripts/mount.fuse.cairn' "\$src" "\$mp" -o "\$opts"
EOF
    chmod 755 /sbin/mount.fuse.cairn.tmp
    mv -f /sbin/mount.fuse.cairn.tmp /sbin/mount.fuse.cairn
    ln -sfn mount.fuse.cairn /sbin/mount.fuseblk.cairn
}

restore_helper() {
    local h saved
    for h in mount.fuse.cairn mount.fuseblk.cairn; do
        saved=$XFS_DIR/saved-helpers/$h
        if [[ -e $saved || -L $saved ]]; then
            rm -f "/sbin/$h"
            cp -P "$saved" "/sbin/$h"
        elif [[ -e $saved.none ]]; then
            rm -f "/sbin/$h"
        fi
    done
}

# UMOUNT_PROG for xfstests: umount(8), then, for a cairn mount, wait until the daemon has
# released the device (a FUSE unmount returns before the daemon exits, and the next mkfs,
# fsck or mount of the device would find it busy). A umount that fails with "target is
# busy" is retried for up to 2 s: right after `cairn mount` returns, the mount is busy for
# a moment (see xfstests-results.md).
write_umount_wrapper() {
    cat >"$XFS_DIR/umount-cairn" <<'EOF'
#!/bin/bash
# UMOUNT_PROG of tests/external/xfstests.sh: umount, then wait for the cairn daemon.
dev=""
for a in "$@"; do
    [[ $a == -* ]] && continue
    dev=$(findmnt -rn -o SOURCE,FSTYPE --target "$a" 2>/dev/null | awk '$2 == "fuseblk.cairn" { print $1; exit }')
    [[ -z $dev ]] && dev=$(findmnt -rn -o SOURCE,FSTYPE -S "$a" 2>/dev/null | awk '$2 == "fuseblk.cairn" { print $1; exit }')
done
err=$(mktemp)
for i in 1 2 3 4 5 6 7 8 9 10; do
    umount "$@" 2>"$err"
    rc=$?
    [[ $rc -ne 0 ]] && grep -q 'target is busy' "$err" && [[ $i -lt 10 ]] || break
    sleep 0.2
done
cat "$err" >&2
rm -f "$err"
if [[ $rc -eq 0 && -b $dev ]]; then
    flock -w 120 "$dev" true
fi
exit $rc
EOF
    chmod 755 "$XFS_DIR/umount-cairn"
}

# ---------------------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------------------
# unmount_dev DEV: unmount wherever DEV is mounted; for cairn wait until the daemon has
# released the device (cairn umount returns then).
unmount_dev() {
    local dev=$1 mp
    while read -r mp; do
        [[ -n $mp ]] || continue
        if [[ $FS == cairn ]]; then
            timeout 180 "$CAIRN" umount --timeout 120 "$mp" || force_unmount "$mp"
        else
            force_unmount "$mp"
        fi
    done < <(findmnt -rn -S "$dev" -o TARGET | sort -r)
    if [[ $FS == cairn ]] && ! flock -w 60 "$dev" true; then
        local pid
        for pid in $(pgrep -f -- "cairn mount $dev " || true); do
            warn "killing cairn daemon $pid (serving $dev)"
            kill -9 "$pid" 2>/dev/null || true
        done
    fi
}

release_devices() {
    local dev
    for dev in "${LOOPS[@]}"; do
        unmount_dev "$dev"
        losetup -d "$dev" 2>/dev/null || true
    done
}

mkfs_dev() {
    local dev=$1
    if [[ $FS == cairn ]]; then
        "$CAIRN" mkfs --force -q "$dev"
    else
        mkfs.ext4 -q -F "$dev"
    fi
}

build_xfstests
mkdir -p "$LOG_DIR"
rm -rf "$LOG_DIR/results" "$LOG_DIR/check.log" "$LOG_DIR/run.log" "$LOG_DIR/local.config"

make_scratch "${XFSTESTS_TMPFS_SIZE:-12g}"
truncate -s "$TEST_SIZE" "$SCRATCH/test.img"
truncate -s "$SCRATCH_SIZE" "$SCRATCH/scratch.img"
LOOPS=()
TEST_LOOP=$(losetup -f --show "$SCRATCH/test.img")
LOOPS+=("$TEST_LOOP")
on_exit release_devices
SCRATCH_LOOP=$(losetup -f --show "$SCRATCH/scratch.img")
LOOPS+=("$SCRATCH_LOOP")
mkdir -p "$SCRATCH/test" "$SCRATCH/scratch"
mkfs_dev "$TEST_LOOP"
mkfs_dev "$SCRATCH_LOOP"
if [[ $FS == cairn ]]; then
    install_helper
    write_umount_wrapper
fi

# The config lives in the log dir (HOST_OPTIONS), so runs with different log dirs (cairn
# and --ext4) can share one build.
CONFIG=$LOG_DIR/local.config
export HOST_OPTIONS=$CONFIG
{
    echo "# $HELPER_MARK"
    if [[ $FS == cairn ]]; then
        echo "export FSTYP=fuse"
        echo "export FUSE_SUBTYP=.cairn"
        echo "export CAIRN_PROG='$CAIRN'"
        echo "export MOUNT_OPTIONS='-o allow_other,default_permissions${CAIRN_MOUNT_OPTS:+,$CAIRN_MOUNT_OPTS}'"
        echo "export TEST_FS_MOUNT_OPTS=\"\$MOUNT_OPTIONS\""
        echo "export UMOUNT_PROG=$XFS_DIR/umount-cairn"
    else
        echo "export FSTYP=ext4"
    fi
    echo "export TEST_DEV=$TEST_LOOP"
    echo "export TEST_DIR=$SCRATCH/test"
    echo "export SCRATCH_DEV=$SCRATCH_LOOP"
    echo "export SCRATCH_MNT=$SCRATCH/scratch"
    echo "export RESULT_BASE=$LOG_DIR/results"
} >"$CONFIG"

# Exclusions: the repo's list (comments stripped) plus -e.
EXCLUDE=$LOG_DIR/exclude.txt
{
    if [[ $use_exclude -eq 1 && -f $HERE/xfstests-exclude.txt ]]; then
        sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/xfstests-exclude.txt"
    fi
    [[ ${#extra_ex[@]} -gt 0 ]] && printf '%s\n' "${extra_ex[@]}"
} | grep -v '^$' >"$EXCLUDE" || true

args=(-E "$EXCLUDE")
for g in "${groups[@]}"; do args+=(-g "$g"); done
args+=("${tests[@]}")
log "xfstests on $FS: ./check ${args[*]} (TEST $TEST_LOOP, SCRATCH $SCRATCH_LOOP; log $LOG_DIR/run.log)"
t0=$(now_s)
rc=0
(cd "$XFS_DIR/xfstests" && ./check "${args[@]}") 2>&1 | tee "$LOG_DIR/run.log" || rc=$?
cp -f "$LOG_DIR/results/check.log" "$LOG_DIR/check.log" 2>/dev/null || true
elapsed=$(($(now_s) - t0))

# Counts, from check's own summary lines.
count() { { grep "^$1" "$LOG_DIR/run.log" || true; } | tail -1 | sed "s/^$1//" | wc -w; }
ran=$(count 'Ran:')
notrun=$(count 'Not run:')
failed=$(count 'Failures:')
# "Ran:" lists every test that started, "Not run:" the ones among them that skipped.
passed=$((ran - notrun - failed))
((passed < 0)) && passed=0

# What each failure printed, so that a CI log names the test and shows why.
first_failures=$({ grep '^Failures:' "$LOG_DIR/run.log" || true; } | tail -1 | sed 's/^Failures://')
for t in $first_failures; do
    for f in "$LOG_DIR/results/$t.out.bad" "$LOG_DIR/results/$t.full" "$LOG_DIR/results/$t.dmesg"; do
        [[ -s $f ]] || continue
        echo "----- $t: the last 40 lines of $(basename "$f")"
        tail -40 "$f"
    done
done

# In CI, a failed test runs once more, alone. One that then passes is
# reported by name as flaky (it still counts as a pass: a timing-dependent
# test on a loaded two-core machine); one that fails again fails the suite.
flaky=""
if [[ $ci -eq 1 && $failed -gt 0 && $failed -le 5 ]]; then
    log "xfstests: running the $failed failed test(s) once more:$first_failures"
    rerun_rc=0
    # shellcheck disable=SC2086 # a list of test names
    (cd "$XFS_DIR/xfstests" && ./check $first_failures) 2>&1 | tee "$LOG_DIR/rerun.log" || rerun_rc=$?
    still=$({ grep '^Failures:' "$LOG_DIR/rerun.log" || true; } | tail -1 | sed 's/^Failures://')
    for t in $first_failures; do
        if ! grep -qw "$t" <<<"$still" && grep -q "^Ran:.*$t" "$LOG_DIR/rerun.log" &&
            ! grep -q "^Not run:.*$t" "$LOG_DIR/rerun.log"; then
            flaky="$flaky $t"
        fi
    done
    nflaky=$(wc -w <<<"$flaky")
    failed=$((failed - nflaky))
    passed=$((passed + nflaky))
    [[ $failed -eq 0 ]] && rc=$rerun_rc
fi
final_ok=1
if [[ $FS == cairn ]]; then
    for dev in "$TEST_LOOP" "$SCRATCH_LOOP"; do
        unmount_dev "$dev"
        # A scratch test may leave no file system (it made its own or none at all).
        if [[ $dev == "$SCRATCH_LOOP" ]] && ! "$CAIRN" fsck "$dev" >/dev/null 2>&1 &&
            ! "$CAIRN" stats "$dev" >/dev/null 2>&1; then
            warn "SCRATCH $dev holds no cairn file system at the end (left by the last test): not checked"
            continue
        fi
        cairn_fsck "$dev" "xfstests ($([[ $dev == "$TEST_LOOP" ]] && echo TEST || echo SCRATCH))" || final_ok=0
    done
fi
[[ $rc -ne 0 && $failed -eq 0 ]] && warn "./check exited $rc"
line="xfstests on $FS: $((ran - notrun)) ran, $passed passed, $failed failed, $notrun not run in $(fmt_dur "$elapsed")"
[[ $final_ok -eq 1 ]] || line="$line; final fsck NOT clean"
[[ -n $flaky ]] && line="$line; failed once, passed on a rerun:$flaky"
[[ -n $first_failures ]] && line="$line; first run's failures:$first_failures"
echo "$line"
if [[ $failed -gt 0 || $final_ok -eq 0 || ($rc -ne 0 && $ran -eq 0) ]]; then
    SUITE_FAILED=1
    exit 1
fi
