#!/usr/bin/env bash
# The README's Install section, followed as a user would, on this machine.
#
#   tests/external/install.sh
#
# scripts/install.sh puts the release binary, man pages and completions under a
# temporary prefix and the mount(8) helper into /sbin (where mount(8) looks for
# helpers; a helper already there is put back at exit). Then:
#   - `mount -a` over an fstab (given with --fstab, so /etc/fstab is left alone) with a
#     fuse.cairn line carrying everyday options (noatime, nodiratime, lazytime, nofail,
#     comment=, x-systemd.*) mounts the image; findmnt shows type fuse.cairn (fuseblk.cairn
#     for root: the image goes through a loop device); a file is
#     written and read back; `umount` as usual; `cairn fsck` clean;
#   - `mount -o remount,ro` and back to rw through the installed helper;
#   - `man cairn` and `man cairn-mount` find and render the installed pages;
#   - the bash completion, sourced, completes `cairn mo` to `mount`;
#   - scripts/install.sh --uninstall leaves nothing behind;
#   - the Debian package (scripts/deb.sh) installs with dpkg -i, mounts from the same
#     fstab line through its /sbin helper and /usr/bin/cairn, `man cairn-resize` renders
#     its gzipped page, and dpkg -r removes every file (skipped, with a message, where a
#     cairn package is installed already: it is left alone).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_root
require_cairn
require_cmd findmnt man

make_scratch 512M
prefix=$SCRATCH/prefix
img=$SCRATCH/data.img
mp=$SCRATCH/mnt
fstab=$SCRATCH/fstab
mkdir -p "$mp"

# A helper already installed (a developer's, xfstests.sh's) is put back at exit.
for h in mount.fuse.cairn mount.fuseblk.cairn; do
    if [[ -e /sbin/$h || -L /sbin/$h ]]; then
        cp -P "/sbin/$h" "$SCRATCH/saved-$h"
        on_exit "cp -P '$SCRATCH/saved-$h' '/sbin/$h'"
    else
        on_exit "rm -f '/sbin/$h'"
    fi
done

log "scripts/install.sh --prefix $prefix --binary $CAIRN"
bash "$CAIRN_ROOT/scripts/install.sh" --prefix "$prefix" --binary "$CAIRN"
installed=$prefix/bin/cairn
for f in "$installed" /sbin/mount.fuse.cairn "$prefix/share/man/man1/cairn.1" \
    "$prefix/share/man/man1/cairn-mount.1" "$prefix/share/bash-completion/completions/cairn" \
    "$prefix/share/zsh/site-functions/_cairn" "$prefix/share/fish/vendor_completions.d/cairn.fish"; do
    [[ -s $f ]] || die "install.sh did not install $f"
done
[[ $(readlink /sbin/mount.fuseblk.cairn) == mount.fuse.cairn ]] || die "no /sbin/mount.fuseblk.cairn link"
grep -q "^CAIRN=\${CAIRN:-$installed}" /sbin/mount.fuse.cairn || die "the installed helper does not run $installed"

"$installed" mkfs "$img" --size 256M --quiet
printf '# a line as users write them\n%s %s fuse.cairn %s 0 0\n' "$img" "$mp" \
    "defaults,noatime,nodiratime,lazytime,allow_other,nofail,comment=x,x-systemd.device-timeout=10" >"$fstab"
log "mount -a --fstab $fstab"
# A bare PATH, as at boot: the helper must find the installed binary by itself.
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin mount -a --fstab "$fstab"
on_exit "cairn_cleanup_mount '$img' '$mp'"
# Root's mounts are fuseblk (over a loop device: FUSE_SYNCFS reaches cairn only then).
case $(findmnt -n -o FSTYPE "$mp") in fuse.cairn | fuseblk.cairn) ;; *) die "findmnt: $(findmnt "$mp" || true)" ;; esac
echo "installed and mounted from fstab" >"$mp/hello"
sync -f "$mp"
[[ $(cat "$mp/hello") == "installed and mounted from fstab" ]] || die "read back differs"

log "mount -o remount,ro / remount,rw"
mount -o remount,ro "$mp"
findmnt -n -o OPTIONS "$mp" | grep -q '^ro' || die "remount,ro: $(findmnt -n -o OPTIONS "$mp")"
if touch "$mp/refused" 2>/dev/null; then die "a write succeeded on the read-only remount"; fi
mount -o remount,rw "$mp"
touch "$mp/after-rw" || die "remount,rw did not make it writable"

log "umount $mp"
umount "$mp"
wait_daemon_exit "$img" "$mp"
cairn_fsck "$img" "the fstab mount" || die "fsck after the fstab mount"

log "man pages and completion"
MANPATH=$prefix/share/man man -w cairn-mount | grep -q "man1/cairn-mount.1" || die "man -w cairn-mount"
MANPATH=$prefix/share/man MANPAGER=cat man cairn 2>/dev/null | grep -q "mkfs" || die "man cairn renders no command list"
MANPATH=$prefix/share/man MANPAGER=cat man cairn-mount 2>/dev/null | grep -qi "mountpoint" || die "man cairn-mount"
completed=$(bash -c "source '$prefix/share/bash-completion/completions/cairn'
COMP_WORDS=(cairn mo); COMP_CWORD=1; COMP_LINE='cairn mo'; COMP_POINT=8
_cairn cairn mo cairn; echo \"\${COMPREPLY[*]}\"")
[[ $completed == *mount* ]] || die "bash completion of 'cairn mo' gave '$completed'"

log "scripts/install.sh --uninstall"
bash "$CAIRN_ROOT/scripts/install.sh" --prefix "$prefix" --uninstall
left=$(find "$prefix" \( -type f -o -type l \) -name '*cairn*' | head -5)
[[ -z $left ]] || die "left after --uninstall: $left"
[[ ! -e /sbin/mount.fuse.cairn ]] || die "/sbin/mount.fuse.cairn left after --uninstall"
log "scripts/deb.sh"
if dpkg -s cairn >/dev/null 2>&1; then
    log "a cairn package is installed on this machine: the .deb install is not tried (it would replace it)"
else
    deb=$(bash "$CAIRN_ROOT/scripts/deb.sh" --binary "$CAIRN" --out "$SCRATCH/deb")
    [[ $(dpkg-deb -f "$deb" Package) == cairn ]] || die "$deb: not a cairn package"
    log "dpkg -i $(basename "$deb")"
    on_exit "dpkg -r cairn >/dev/null 2>&1 || true"
    dpkg -i "$deb" >/dev/null
    for f in /usr/bin/cairn /sbin/mount.fuse.cairn /usr/share/man/man1/cairn-mount.1.gz \
        /usr/share/bash-completion/completions/cairn; do
        dpkg -L cairn | grep -qx "$f" || die "the package does not own $f"
        [[ -e $f ]] || die "dpkg -i did not install $f"
    done
    grep -qF "CAIRN=\${CAIRN:-/usr/bin/cairn}" /sbin/mount.fuse.cairn || die "the packaged helper does not run /usr/bin/cairn"
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin mount -a --fstab "$fstab"
    [[ $(cat "$mp/hello") == "installed and mounted from fstab" ]] || die "read back through the packaged cairn"
    [[ $(/usr/bin/cairn stats "$mp" --json | grep -c '"image"') -ge 1 ]] || die "cairn stats of the package's mount"
    umount "$mp"
    wait_daemon_exit "$img" "$mp"
    MANPAGER="cat" man cairn-resize 2>/dev/null | grep -qi "mounted" || die "man cairn-resize from the package"
    log "dpkg -r cairn"
    dpkg -r cairn >/dev/null
    for f in /usr/bin/cairn /sbin/mount.fuse.cairn /usr/share/man/man1/cairn.1.gz; do
        [[ ! -e $f ]] || die "$f left after dpkg -r"
    done
fi
log "install: ok"
