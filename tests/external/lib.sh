# shellcheck shell=bash
# Shared helpers for cairn's shell-level test suites and scripts.
#
# Source it from a bash script that runs with `set -euo pipefail`. It provides:
#   - logging (log, warn, die), failed checks counted (fail) and a stage timer;
#   - a cleanup stack run on EXIT (on_exit CMD...), so every mount, loop device and
#     temp file a script makes is undone on success, failure or Ctrl-C;
#   - cairn helpers: mkfs, mount, unmount that WAITS FOR THE DAEMON TO EXIT (through
#     `cairn umount`; a plain umount of a FUSE mount returns before the daemon has
#     released the image), fsck,
#     liveness checks;
#   - scratch space on a private tmpfs, ext4 on a loop device over a tmpfs file,
#     fuse2fs mounts (for the comparison runs).
#
# Environment knobs (all optional):
#   CAIRN            path to the cairn binary (default: target/release/cairn)
#   CAIRN_MOUNT_OPTS extra -o options for cairn mount (comma-separated)
#   CAIRN_KEY_FILE   encrypted images (issue 54): cairn_mkfs adds --encrypt --key-file FILE,
#                    cairn_mount and cairn_fsck --key-file FILE (scripts/test.sh's *-enc suites)
#   KEEP_FAILED=1    keep the scratch tmpfs of a failed run (for post-mortem), unmount the rest

# Repository root: this file lives in tests/external/.
CAIRN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export CAIRN_ROOT
CAIRN=${CAIRN:-$CAIRN_ROOT/target/release/cairn}

# How long to wait for a mount to appear and for a daemon to exit after unmount.
MOUNT_TIMEOUT=${MOUNT_TIMEOUT:-30}
DAEMON_EXIT_TIMEOUT=${DAEMON_EXIT_TIMEOUT:-120}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2
    exit 1
}

# fail MSG: a check failed; the suite goes on and counts it in `failures`
# (the script's exit status says whether any did), and a failed suite's
# scratch is kept under KEEP_FAILED=1.
failures=0
fail() {
    warn "FAILED: $*"
    failures=$((failures + 1))
    SUITE_FAILED=1
}

require_root() {
    [[ $(id -u) -eq 0 ]] || die "$(basename "$0") must run as root (it mounts file systems and sets up loop devices)"
}

require_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "missing command '$c': run scripts/install-deps.sh"
    done
}

require_cairn() {
    [[ -x $CAIRN ]] || die "no cairn binary at $CAIRN: run 'cargo build --release -p cairn-cli' first"
}

# ---------------------------------------------------------------------------------------
# Cleanup stack. Each entry is a string evaluated in reverse order of registration.
# ---------------------------------------------------------------------------------------
_CLEANUP=()
_CLEANUP_DONE=0

on_exit() {
    _CLEANUP+=("$*")
}

_run_cleanup() {
    local rc=$?
    [[ $_CLEANUP_DONE -eq 1 ]] && return
    _CLEANUP_DONE=1
    set +e
    local i
    for ((i = ${#_CLEANUP[@]} - 1; i >= 0; i--)); do
        eval "${_CLEANUP[i]}" || true
    done
    return $rc
}

trap _run_cleanup EXIT
trap 'warn "interrupted"; exit 130' INT TERM HUP

# ---------------------------------------------------------------------------------------
# Scratch space
# ---------------------------------------------------------------------------------------

# make_scratch SIZE: sets SCRATCH to a fresh directory on its own tmpfs (so images live in
# memory and the host disk's speed and free space do not matter). Undone on exit.
# (Helpers that register cleanups set variables instead of printing: a $(...) subshell
# would lose the registration.)
make_scratch() {
    local size=$1
    SCRATCH=$(mktemp -d /tmp/cairn-test.XXXXXX)
    chmod 755 "$SCRATCH"
    on_exit "rmdir '$SCRATCH' 2>/dev/null"
    mount -t tmpfs -o "size=$size,mode=755" tmpfs "$SCRATCH"
    on_exit "_drop_scratch '$SCRATCH'"
}

_drop_scratch() {
    local dir=$1
    if [[ ${KEEP_FAILED:-0} == 1 && ${SUITE_FAILED:-0} == 1 ]]; then
        warn "KEEP_FAILED=1: leaving $dir mounted for inspection (umount $dir when done)"
        return
    fi
    # Anything still mounted below the scratch dir goes first.
    local mp
    while read -r mp; do
        [[ $mp == "$dir" ]] && continue
        force_unmount "$mp"
    done < <(findmnt -rn -o TARGET | grep -F "$dir/" | sort -r)
    umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null
    rmdir "$dir" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------
# Mount helpers (any file system)
# ---------------------------------------------------------------------------------------

# is_mounted MP: MP is in the mount table. Reads /proc/self/mountinfo rather than calling
# stat(2), which fails (ENOTCONN) on a FUSE mount whose daemon died: such a mount still
# needs unmounting.
is_mounted() {
    awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo
}

# fuse_abort MP: abort the FUSE connection of a mount whose daemon hangs.
fuse_abort() {
    local mp=$1 devno minor
    devno=$(awk -v m="$mp" '$5 == m { d = $3 } END { print d }' /proc/self/mountinfo)
    [[ -n $devno ]] || return 0
    minor=${devno#*:}
    if [[ ! -d /sys/fs/fuse/connections/$minor ]]; then
        mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null || true
    fi
    if [[ -w /sys/fs/fuse/connections/$minor/abort ]]; then
        warn "aborting FUSE connection $minor of $mp"
        echo 1 >"/sys/fs/fuse/connections/$minor/abort" || true
    fi
}

# sweep_dead_fuse_mounts: lazily unmounts every FUSE mount whose daemon is gone (stat says
# ENOTCONN), left by an earlier run that was killed. Such a mount breaks tools that walk the
# mount table: df prints an error for it, which xfstests' generic/260 takes as test output.
# Live mounts are left alone.
sweep_dead_fuse_mounts() {
    local mp err
    while read -r mp; do
        mp=$(printf '%b' "$mp")
        if ! err=$(stat "$mp" 2>&1 >/dev/null) && [[ $err == *"not connected"* ]]; then
            warn "unmounting a dead FUSE mount left by an earlier run: $mp"
            umount -l "$mp" 2>/dev/null || true
        fi
    done < <(awk '$0 ~ / - fuse/ { print $5 }' /proc/self/mountinfo | sort -r)
}

# force_unmount MP: best-effort unmount for cleanup paths (never waits long).
force_unmount() {
    local mp=$1
    is_mounted "$mp" || return 0
    if ! timeout 20 umount "$mp" 2>/dev/null; then
        fuse_abort "$mp"
        timeout 20 umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
    fi
}

# ---------------------------------------------------------------------------------------
# cairn
# ---------------------------------------------------------------------------------------

# cairn_pids MP: the pids of cairn daemons serving MP (the daemon's command line is
# `cairn mount IMAGE MP ...`). pgrep never lists itself.
cairn_pids() {
    local mp=$1
    pgrep -f -- "cairn mount .*${mp}( |\$)" || true
}

# cairn_key_args: the key options of an encrypted run (CAIRN_KEY_FILE), one a line.
cairn_key_args() {
    [[ -n ${CAIRN_KEY_FILE:-} ]] && printf '%s\n' --key-file "$CAIRN_KEY_FILE"
    return 0
}

cairn_mkfs() {
    local img=$1 size=$2
    shift 2
    local keys=()
    [[ -n ${CAIRN_KEY_FILE:-} ]] && keys=(--encrypt --key-file "$CAIRN_KEY_FILE")
    log "cairn mkfs $img --size $size ${keys[*]} $*"
    "$CAIRN" mkfs "$img" --size "$size" --force "${keys[@]}" "$@"
}

# cairn_mount IMG MP [OPTS]: mount and wait until the mount answers. Registers a forced
# unmount for exit. OPTS defaults to allow_other,default_permissions (+ CAIRN_MOUNT_OPTS).
cairn_mount() {
    local img=$1 mp=$2 opts=${3:-allow_other,default_permissions}
    [[ -n ${CAIRN_MOUNT_OPTS:-} ]] && opts="$opts,$CAIRN_MOUNT_OPTS"
    mkdir -p "$mp"
    local keys
    mapfile -t keys < <(cairn_key_args)
    log "cairn mount $img $mp -o $opts ${keys[*]}"
    if ! "$CAIRN" mount "$img" "$mp" -o "$opts" "${keys[@]}"; then
        warn "cairn mount failed"
        return 1
    fi
    local i
    for ((i = 0; i < MOUNT_TIMEOUT * 10; i++)); do
        is_mounted "$mp" && break
        sleep 0.1
    done
    if ! is_mounted "$mp"; then
        warn "$mp is not a mount point ${MOUNT_TIMEOUT}s after cairn mount returned"
        return 1
    fi
    on_exit "cairn_cleanup_mount '$img' '$mp'"
    [[ -n $(cairn_pids "$mp") ]] || warn "mounted, but no process matches 'cairn mount .*$mp'"
    return 0
}

# wait_daemon_exit IMG MP: wait until no cairn daemon serves MP and the image's flock is
# free. Fails after DAEMON_EXIT_TIMEOUT seconds.
wait_daemon_exit() {
    local img=$1 mp=$2 i
    for ((i = 0; i < DAEMON_EXIT_TIMEOUT * 10; i++)); do
        if [[ -z $(cairn_pids "$mp") ]] && flock -n "$img" true 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    warn "cairn daemon for $mp still running ${DAEMON_EXIT_TIMEOUT}s after unmount: $(cairn_pids "$mp" | tr '\n' ' ')"
    return 1
}

# cairn_unmount IMG MP: unmount cleanly and wait for the daemon to exit.
cairn_unmount() {
    local img=$1 mp=$2
    log "unmount $mp"
    if is_mounted "$mp"; then
        # cairn umount returns once the daemon has released the image.
        if ! timeout $((DAEMON_EXIT_TIMEOUT + 30)) "$CAIRN" umount --timeout "$DAEMON_EXIT_TIMEOUT" "$mp"; then
            warn "cairn umount $mp failed; trying umount, then fusermount3 -u"
            timeout 60 umount "$mp" || timeout 60 fusermount3 -u "$mp" || return 1
        fi
    fi
    # Normally already true; also covers a daemon whose mount was gone already.
    wait_daemon_exit "$img" "$mp"
}

# cairn_cleanup_mount IMG MP: exit-path unmount: polite, then forceful; kills a daemon
# that will not exit.
cairn_cleanup_mount() {
    local img=$1 mp=$2 pid
    is_mounted "$mp" || [[ -n $(cairn_pids "$mp") ]] || return 0
    force_unmount "$mp"
    DAEMON_EXIT_TIMEOUT=20 wait_daemon_exit "$img" "$mp" 2>/dev/null && return 0
    for pid in $(cairn_pids "$mp"); do
        warn "killing cairn daemon $pid (serving $mp)"
        kill -9 "$pid" 2>/dev/null || true
    done
}

# cairn_alive MP: the daemon is running and the mount answers a stat and a readdir.
cairn_alive() {
    local mp=$1
    if [[ -z $(cairn_pids "$mp") ]]; then
        warn "no cairn daemon for $mp (crashed?)"
        return 1
    fi
    if ! timeout 30 stat -f "$mp" >/dev/null || ! timeout 30 ls -a "$mp" >/dev/null; then
        warn "$mp does not answer (stat -f / ls timed out or failed)"
        return 1
    fi
    return 0
}

# cairn_fsck IMG [LABEL]: run `cairn fsck IMG`; exit code must be 0 (clean).
# fsck(8) codes: 0 clean, 1 corrected, 4 uncorrected, 8 operational error.
cairn_fsck() {
    local img=$1 label=${2:-} rc=0 out
    out=$(mktemp /tmp/cairn-fsck.XXXXXX)
    log "cairn fsck $img${label:+ ($label)}"
    local keys
    mapfile -t keys < <(cairn_key_args)
    timeout 600 "$CAIRN" fsck "$img" "${keys[@]}" >"$out" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]]; then
        warn "cairn fsck exited $rc${label:+ after $label}; its output (last 60 lines):"
        tail -n 60 "$out" >&2
        rm -f "$out"
        return 1
    fi
    rm -f "$out"
    return 0
}

# ---------------------------------------------------------------------------------------
# Reference file systems
# ---------------------------------------------------------------------------------------

# ext4_loop IMG SIZE MP: ext4 on a loop device over IMG (put IMG on tmpfs); sets LOOPDEV.
# Undone on exit.
ext4_loop() {
    local img=$1 size=$2 mp=$3
    truncate -s "$size" "$img"
    mkfs.ext4 -q -F "$img"
    LOOPDEV=$(losetup -f --show "$img")
    on_exit "losetup -d '$LOOPDEV' 2>/dev/null"
    mkdir -p "$mp"
    mount "$LOOPDEV" "$mp"
    on_exit "force_unmount '$mp'"
    chmod 755 "$mp"
}

# ext4_loop_release MP DEV: unmount and detach now (rather than at exit).
ext4_loop_release() {
    local mp=$1 dev=$2
    force_unmount "$mp"
    losetup -d "$dev" 2>/dev/null || true
}

# fuse2fs_mount IMG SIZE MP: an ext4 image file served by fuse2fs. Undone on exit.
fuse2fs_mount() {
    local img=$1 size=$2 mp=$3 i
    truncate -s "$size" "$img"
    mkfs.ext4 -q -F "$img"
    mkdir -p "$mp"
    fuse2fs "$img" "$mp" -o allow_other,default_permissions >/dev/null
    for ((i = 0; i < MOUNT_TIMEOUT * 10; i++)); do
        is_mounted "$mp" && break
        sleep 0.1
    done
    is_mounted "$mp" || die "fuse2fs did not mount $mp"
    on_exit "fuse2fs_unmount '$img' '$mp'"
    chmod 755 "$mp"
}

fuse2fs_unmount() {
    local img=$1 mp=$2 i
    force_unmount "$mp"
    for ((i = 0; i < 300; i++)); do
        pgrep -f -- "fuse2fs ${img} " >/dev/null || return 0
        sleep 0.1
    done
    warn "fuse2fs for $img did not exit"
}

# small_tmpfs MP: the second file system pjdfstest needs for its EXDEV tests.
small_tmpfs() {
    local mp=$1
    mkdir -p "$mp"
    mount -t tmpfs -o size=16m,mode=755 tmpfs "$mp"
    on_exit "force_unmount '$mp'"
}

# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------
now_s() { date +%s; }
fmt_dur() {
    local s=$1
    printf '%dm%02ds' $((s / 60)) $((s % 60))
}
