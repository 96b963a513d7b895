#!/usr/bin/env bash
# Data survival: what cairn was given must come back, byte for byte, after a remount and
# after the daemon is killed once a syncfs has returned.
#
#   tests/external/survival.sh [--fs cairn|ext4] [--phase all|remount|crash]
#
# The same deterministic workload (random contents from one urandom blob; sizes around
# block boundaries up to 34 MiB, 600 small files, sparse files with holes at the start, in
# the middle and after a truncate up, a punched hole, overwrites and appends, deep and
# wide directories, renames and unlinks, symlinks, hard links, a 255-byte name, a fifo,
# modes, owners, user.* xattrs up to 3000 bytes) runs on a tmpfs reference tree and on
# cairn. Checks:
#   remount  the tree on cairn equals the reference (types, modes, owners, sizes, link
#            counts, symlink targets, sha256 of every file, xattrs); unmount, wait for the
#            daemon to exit, `cairn fsck` must exit 0; remount: the same, plus mtimes,
#            ctimes and directory sizes unchanged; unmount; fsck 0.
#   crash    remount, change the tree more (new files, overwrites, unlinks, renames),
#            `sync -f` (syncfs), SIGKILL the daemon, unmount the dead mount, remount
#            (journal replay): the tree must equal the reference as of the sync;
#            unmount; fsck 0.
# --fs ext4 runs the remount phase on kernel ext4 (checks the checker).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FS=cairn
PHASE=all
while [[ $# -gt 0 ]]; do
    case $1 in
    --fs) FS=$2; shift ;;
    --phase) PHASE=$2; shift ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
    esac
    shift
done
case $FS in cairn | ext4) ;; *) die "--fs must be cairn or ext4" ;; esac
case $PHASE in all | remount | crash) ;; *) die "--phase must be all, remount or crash" ;; esac
[[ $FS == ext4 && $PHASE != remount ]] && PHASE=remount

require_root
require_cmd sha256sum getfattr setfattr fallocate flock
[[ $FS == cairn ]] && require_cairn

make_scratch 3g
IMG=$SCRATCH/fs.img
MP=$SCRATCH/mnt
REF=$SCRATCH/ref
BLOB=$SCRATCH/blob
mkdir -p "$REF"
head -c 64M /dev/urandom >"$BLOB"

# copy_blob OFFSET COUNT > file: COUNT bytes of the blob starting at OFFSET.
copy_blob() {
    dd if="$BLOB" bs=1M iflag=skip_bytes,count_bytes skip="$1" count="$2" status=none
}

# write_at FILE OFFSET BLOB_OFFSET COUNT: overwrite in place (the file keeps its size
# unless the write extends it).
write_at() {
    dd if="$BLOB" of="$1" bs=1M iflag=skip_bytes,count_bytes oflag=seek_bytes conv=notrunc \
        skip="$3" count="$4" seek="$2" status=none
}

# populate R: the first workload.
populate() {
    local R=$1 n i
    mkdir -p "$R"/{sizes,small,sparse,tree,links,xattr,modes}
    for n in 0 1 511 512 4095 4096 4097 8191 8192 65535 65536 131073 1048576 1048583 8388608 35651593; do
        copy_blob $((n % 4099)) "$n" >"$R/sizes/f$n"
    done
    for ((i = 1; i <= 600; i++)); do
        copy_blob $((i * 4099)) $(((i * 7919) % 9000)) >"$R/small/s$i"
    done
    # sparse files
    copy_blob 0 1048576 >"$R/sparse/hole_middle"
    write_at "$R/sparse/hole_middle" 104857600 2000000 1048576
    : >"$R/sparse/hole_start"
    write_at "$R/sparse/hole_start" 10485883 3000000 4096
    copy_blob 5000 3000 >"$R/sparse/truncated_up"
    truncate -s 50M "$R/sparse/truncated_up"
    copy_blob 7000 5242880 >"$R/sparse/truncated_down"
    truncate -s 3145733 "$R/sparse/truncated_down"
    copy_blob 9000 4194304 >"$R/sparse/punched"
    fallocate -p -o 1048576 -l 1048576 "$R/sparse/punched"
    copy_blob 11000 2097152 >"$R/sparse/overwritten"
    write_at "$R/sparse/overwritten" 12345 4000000 10000
    write_at "$R/sparse/overwritten" 2000000 4100000 200000
    : >"$R/sparse/appended"
    for ((i = 1; i <= 20; i++)); do copy_blob $((i * 100003)) $((i * 3001)) >>"$R/sparse/appended"; done
    # a deep tree with a file at every level, and a wide directory with renames/unlinks
    local d=$R/tree/deep
    for ((i = 0; i < 24; i++)); do
        d=$d/level$i
        mkdir -p "$d"
        copy_blob $((i * 777)) $((i * 100 + 1)) >"$d/file$i"
    done
    mkdir -p "$R/tree/wide"
    for ((i = 0; i < 400; i++)); do : >"$R/tree/wide/entry-with-a-longer-name-$i"; done
    for ((i = 0; i < 400; i += 3)); do rm "$R/tree/wide/entry-with-a-longer-name-$i"; done
    for ((i = 1; i < 400; i += 3)); do
        mv "$R/tree/wide/entry-with-a-longer-name-$i" "$R/tree/wide/renamed-$i"
    done
    mkdir -p "$R/tree/moved-from/sub"
    copy_blob 123 4567 >"$R/tree/moved-from/sub/payload"
    mv "$R/tree/moved-from" "$R/tree/moved-to"
    # links and names
    copy_blob 31337 10000 >"$R/links/target"
    ln -s target "$R/links/rel-symlink"
    ln -s /nonexistent/dangling/target "$R/links/dangling"
    ln -s "$(printf 'x%.0s' {1..200})" "$R/links/long-target"
    ln "$R/links/target" "$R/links/hard1"
    ln "$R/links/target" "$R/links/hard2"
    copy_blob 999 99 >"$R/links/$(printf 'n%.0s' {1..255})"
    mkfifo "$R/links/fifo"
    # modes and owners
    copy_blob 1 100 >"$R/modes/m640" && chmod 640 "$R/modes/m640"
    copy_blob 2 100 >"$R/modes/m4755" && chmod 4755 "$R/modes/m4755"
    copy_blob 3 100 >"$R/modes/owned" && chown 1001:1001 "$R/modes/owned" && chmod 600 "$R/modes/owned"
    mkdir "$R/modes/sticky" && chmod 1777 "$R/modes/sticky"
    mkdir "$R/modes/d700" && chmod 700 "$R/modes/d700"
    # xattrs: small ones fit in the inode, big ones spill into an xattr block
    copy_blob 4 10 >"$R/xattr/f"
    setfattr -n user.small -v abc "$R/xattr/f"
    setfattr -n user.big -v "0x$(copy_blob 5 3000 | od -An -v -tx1 | tr -d ' \n')" "$R/xattr/f"
    setfattr -n user.gone -v soon "$R/xattr/f"
    setfattr -x user.gone "$R/xattr/f"
    setfattr -n user.dir -v "on a directory" "$R/xattr"
    for ((i = 0; i < 20; i++)); do
        : >"$R/xattr/shared$i"
        setfattr -n user.same -v "0x$(copy_blob 6 1500 | od -An -v -tx1 | tr -d ' \n')" "$R/xattr/shared$i"
    done
}

# populate_more R: the second workload (before the crash).
populate_more() {
    local R=$1 i
    mkdir -p "$R/crash"
    for ((i = 1; i <= 200; i++)); do copy_blob $((i * 6007)) $(((i * 104729) % 70000)) >"$R/crash/c$i"; done
    copy_blob 123456 20971520 >"$R/crash/big"
    write_at "$R/sizes/f8388608" 4096 7000000 65536
    write_at "$R/sizes/f4097" 4096 7100000 3
    copy_blob 8000000 5000 >>"$R/sparse/appended"
    truncate -s 1000 "$R/sizes/f1048583"
    for ((i = 2; i <= 600; i += 7)); do rm "$R/small/s$i"; done
    mv "$R/tree/wide" "$R/crash/wide-moved"
    rm "$R/links/hard1"
    setfattr -n user.small -v changed "$R/xattr/f"
    chmod 604 "$R/modes/m640"
}

# content_manifest R: what must match the reference (no times, no directory sizes or
# link counts, which differ between file systems).
content_manifest() {
    local R=$1
    (
        cd "$R"
        find . -mindepth 1 -type d -printf '%p d %m %U %G\n'
        find . -mindepth 1 ! -type d -printf '%p %y %m %U %G %n %s %l\n'
        find . -type f -print0 | xargs -0 -r sha256sum | awk '{ print $2, "sha256", $1 }'
        find . -mindepth 1 -print0 | xargs -0 -r getfattr -h -d -m '^user\.' 2>/dev/null |
            awk '/^# file: / { f = substr($0, 9); next } NF { print f, "xattr", $0 }'
    ) | LC_ALL=C sort
}

# full_manifest R: the content plus times and directory metadata (cairn before/after).
full_manifest() {
    local R=$1
    content_manifest "$R"
    (cd "$R" && find . -printf '%p times %T@ %C@ dir-size/nlink %s %n\n' | LC_ALL=C sort)
}

compare() {
    local what=$1 a=$2 b=$3
    if cmp -s "$a" "$b"; then
        log "OK: $what"
        return 0
    fi
    warn "MISMATCH: $what (first differences, < expected, > got):"
    diff "$a" "$b" | head -n 40 >&2 || true
    return 1
}

mount_fs() {
    if [[ $FS == cairn ]]; then
        cairn_mount "$IMG" "$MP"
    else
        mount "$LOOPDEV" "$MP"
    fi
}

unmount_fs() {
    if [[ $FS == cairn ]]; then
        cairn_unmount "$IMG" "$MP"
    else
        umount "$MP"
    fi
}

check_fs() {
    if [[ $FS == cairn ]]; then
        cairn_fsck "$IMG" "$1"
    else
        e2fsck -fn "$LOOPDEV" >/dev/null 2>&1
    fi
}

# ---- set up
if [[ $FS == cairn ]]; then
    cairn_mkfs "$IMG" 1G >/dev/null || die "cairn mkfs failed"
    cairn_mount "$IMG" "$MP" || die "cairn mount failed"
else
    ext4_loop "$IMG" 1G "$MP"
fi

log "writing the reference tree (tmpfs) and the same tree on $FS"
populate "$REF/t"
content_manifest "$REF/t" >"$SCRATCH/ref.content"
populate "$MP/t" || fail "the workload failed on $FS"
content_manifest "$MP/t" >"$SCRATCH/live.content"
compare "tree on $FS (live) = reference" "$SCRATCH/ref.content" "$SCRATCH/live.content" || fail "live tree differs"
full_manifest "$MP/t" >"$SCRATCH/live.full"
log "$(wc -l <"$SCRATCH/ref.content") manifest lines, $(du -sh --apparent-size "$REF/t" | cut -f1) apparent size"

# ---- phase 1: remount
if [[ $PHASE == all || $PHASE == remount ]]; then
    unmount_fs || fail "unmount"
    check_fs "the first workload" || fail "fsck after the first workload"
    mount_fs || die "remount failed"
    content_manifest "$MP/t" >"$SCRATCH/remount.content"
    compare "tree after remount = reference" "$SCRATCH/ref.content" "$SCRATCH/remount.content" ||
        fail "data lost or changed across a remount"
    full_manifest "$MP/t" >"$SCRATCH/remount.full"
    compare "times and directory metadata unchanged by the remount" "$SCRATCH/live.full" "$SCRATCH/remount.full" ||
        fail "metadata changed across a remount"
    unmount_fs || fail "unmount after the remount check"
    check_fs "the remount check" || fail "fsck after the remount check"
    [[ $PHASE == all ]] && { mount_fs || die "remount failed"; }
fi

# ---- phase 2: syncfs, then SIGKILL the daemon
if [[ $FS == cairn && ($PHASE == all || $PHASE == crash) ]]; then
    populate_more "$REF/t"
    content_manifest "$REF/t" >"$SCRATCH/ref2.content"
    populate_more "$MP/t" || fail "the second workload failed on cairn"
    log "sync -f (syncfs), then SIGKILL the daemon"
    sync -f "$MP/t" || fail "syncfs failed"
    pids=$(cairn_pids "$MP")
    [[ -n $pids ]] || fail "no daemon to kill"
    for p in $pids; do kill -9 "$p"; done
    force_unmount "$MP"
    wait_daemon_exit "$IMG" "$MP" || fail "killed daemon did not go away"
    mount_fs || die "mount after the kill failed (journal replay?)"
    content_manifest "$MP/t" >"$SCRATCH/crash.content"
    compare "tree after SIGKILL + remount = reference as of the syncfs" "$SCRATCH/ref2.content" \
        "$SCRATCH/crash.content" || fail "synced data lost or changed by a daemon kill"
    unmount_fs || fail "unmount after the crash check"
    check_fs "the crash check" || fail "fsck after the crash check"
fi

if [[ $failures -gt 0 ]]; then
    echo "survival on $FS: $failures check(s) failed"
    exit 1
fi
echo "survival on $FS: all checks passed"
