#!/usr/bin/env bash
# The README's Install section, followed as a user would, on this machine, as root.
#
#   tests/external/install.sh
#
# The commands of the README's Install block run exactly as printed there (from the
# source tree, so `scripts/install.sh` must be executable): install-deps --runtime, then
# scripts/install.sh into /usr/local and /sbin. cairn files already in those places (a
# developer's install, xfstests.sh's helper) are put back at exit. Then:
#   - `mount -a` over an fstab (given with --fstab, so /etc/fstab is left alone) with a
#     fuse.cairn line carrying everyday options (noatime, nodiratime, lazytime, nofail,
#     comment=, x-systemd.*) mounts the image; findmnt shows type fuse.cairn (fuseblk.cairn
#     for root: the image goes through a loop device); a file is
#     written and read back; `umount` as usual; `cairn fsck` clean;
#   - `mount -o remount,ro` and back to rw through the installed helper;
#   - an encrypted image from a line of its own with `keyfile=FILE`: `mount -a`, a file
#     written, unmounted (not in the image in plaintext), `mount -a` again reads it back,
#     fsck clean with the key; without the key file the line does not mount;
#   - `man cairn` and `man cairn-mount` find and render the installed pages;
#   - bash-completion is installed and its loader completes `cairn mo` to `mount`;
#   - the installed `cairn bench --help` prints help; `cairn bench` says it needs a
#     source checkout;
#   - the Debian package (scripts/deb.sh) refuses to install over install.sh's helper;
#   - scripts/install.sh --uninstall leaves nothing behind;
#   - the package installs with dpkg -i, scripts/install.sh then refuses to overwrite its
#     helper, it mounts from the same fstab line through its /sbin helper and
#     /usr/bin/cairn, `man cairn-resize` renders its gzipped page, and dpkg -r removes
#     every file (skipped, with a message, where a cairn package is installed already:
#     it is left alone).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_root
require_cairn
require_cmd findmnt man dpkg-query

make_scratch 512M
img=$SCRATCH/data.img
mp=$SCRATCH/mnt
fstab=$SCRATCH/fstab
mkdir -p "$mp"

# What the README installs; files there already are moved aside and put back at exit.
local_files=(/usr/local/bin/cairn /usr/local/share/bash-completion/completions/cairn
    /usr/local/share/zsh/site-functions/_cairn /usr/local/share/fish/vendor_completions.d/cairn.fish
    /sbin/mount.fuse.cairn /sbin/mount.fuseblk.cairn)
mkdir -p "$SCRATCH/saved"
n=0
for f in "${local_files[@]}" /usr/local/share/man/man1/cairn*.1; do
    [[ -e $f || -L $f ]] || continue
    n=$((n + 1))
    mv "$f" "$SCRATCH/saved/$n"
    on_exit "mv -f '$SCRATCH/saved/$n' '$f'"
done
on_exit "cd '$CAIRN_ROOT' && scripts/install.sh --uninstall >/dev/null 2>&1"

# The Install block of README.md, each line run as printed (sudo is a no-op for root;
# where it is missing, the line runs without it).
block=$(sed -n '/^## Install/,/^## /p' "$CAIRN_ROOT/README.md" | awk '/^```sh/ { f = 1; next } /^```/ { if (f) exit } f')
[[ $block == *scripts/install.sh* ]] || die "README.md: no Install block with scripts/install.sh"
while IFS= read -r line; do
    [[ -n ${line// /} ]] || continue
    command -v sudo >/dev/null || line=${line#sudo }
    log "README: $line"
    (cd "$CAIRN_ROOT" && bash -ec "$line" </dev/null) || die "the README's '$line' failed"
done <<<"$block"

installed=/usr/local/bin/cairn
for f in "${local_files[@]}" /usr/local/share/man/man1/cairn.1 /usr/local/share/man/man1/cairn-mount.1; do
    [[ -e $f ]] || die "the README's install did not install $f"
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

# An encrypted image from its own fstab line (issue 54): the key file as a mount option,
# as a boot-time `mount -a` has no terminal to ask for a passphrase.
enc_img=$SCRATCH/secret.img
enc_key=$SCRATCH/secret.key
enc_fstab=$SCRATCH/fstab-encrypted
head -c 64 /dev/urandom >"$enc_key"
chmod 600 "$enc_key"
"$installed" mkfs "$enc_img" --size 256M --encrypt --key-file "$enc_key" --quiet
printf '%s %s fuse.cairn %s 0 0\n' "$enc_img" "$mp" "keyfile=$enc_key,noatime" >"$enc_fstab"
log "mount -a --fstab $enc_fstab (keyfile=)"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin mount -a --fstab "$enc_fstab"
on_exit "cairn_cleanup_mount '$enc_img' '$mp'"
case $(findmnt -n -o FSTYPE "$mp") in fuse.cairn | fuseblk.cairn) ;; *) die "encrypted: findmnt: $(findmnt "$mp" || true)" ;; esac
[[ $("$installed" stats "$mp" --all | awk '$1 == "dev.encrypted" { print $2 }') == 1 ]] ||
    die "the fstab mount of $enc_img is not the encrypted device"
secret="a secret line mounted from fstab with keyfile="
echo "$secret" >"$mp/secret"
umount "$mp"
wait_daemon_exit "$enc_img" "$mp"
if grep -qF "$secret" "$enc_img"; then die "the secret line is in $enc_img in plaintext"; fi
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin mount -a --fstab "$enc_fstab"
[[ $(cat "$mp/secret") == "$secret" ]] || die "the secret line did not read back after a second mount -a"
umount "$mp"
wait_daemon_exit "$enc_img" "$mp"
CAIRN_KEY_FILE=$enc_key cairn_fsck "$enc_img" "the encrypted fstab mount" || die "fsck after the encrypted fstab mount"
# Without its key file the line does not mount (and says why).
rm -f "$enc_key"
if out=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin mount -a --fstab "$enc_fstab" 2>&1) && is_mounted "$mp"; then
    die "the encrypted fstab line mounted without its key file"
fi
[[ $out == *"$enc_key"* ]] || die "mount -a without the key file did not name it: $out"

log "man pages, bash completion, cairn bench"
# (Debian's /usr/local/man is a link to /usr/local/share/man.)
[[ $(readlink -f "$(man -w cairn-mount)") == /usr/local/share/man/man1/cairn-mount.1 ]] ||
    die "man -w cairn-mount: $(man -w cairn-mount 2>&1)"
MANPAGER="cat" man cairn 2>/dev/null | grep -q "mkfs" || die "man cairn renders no command list"
MANPAGER="cat" man cairn-mount 2>/dev/null | grep -q "OPTIONS" || die "man cairn-mount"
dpkg-query -W -f='${Status}' bash-completion 2>/dev/null | grep -q "install ok installed" ||
    die "install-deps.sh --runtime did not install bash-completion"
# As an interactive shell loads it: bash-completion's loader finds the installed script.
completed=$(bash -c "source /usr/share/bash-completion/bash_completion
_completion_loader cairn
COMP_WORDS=(cairn mo); COMP_CWORD=1; COMP_LINE='cairn mo'; COMP_POINT=8
_cairn cairn mo cairn; echo \"\${COMPREPLY[*]}\"")
[[ $completed == *mount* ]] || die "bash completion of 'cairn mo' gave '$completed'"
# Away from a checkout, as a user's installed binary is (scripts/test.sh exports CAIRN_BENCH).
out=$(cd / && env -u CAIRN_BENCH "$installed" bench --help 2>&1) || die "installed cairn bench --help failed: $out"
[[ $out == *"Usage: cairn bench"* ]] || die "cairn bench --help: $out"
if out=$(cd / && env -u CAIRN_BENCH "$installed" bench --quick 2>&1); then die "installed cairn bench ran: $out"; fi
[[ $out == *"needs a source checkout"* ]] || die "cairn bench away from the source tree: $out"

deb=""
if dpkg -s cairn >/dev/null 2>&1; then
    log "a cairn package is installed on this machine: the .deb is not tried (it would replace it)"
else
    deb=$(bash "$CAIRN_ROOT/scripts/deb.sh" --binary "$CAIRN" --out "$SCRATCH/deb")
    [[ $(dpkg-deb -f "$deb" Package) == cairn ]] || die "$deb: not a cairn package"
    [[ $(dpkg-deb -f "$deb" Recommends) == *bash-completion* ]] || die "$deb: no Recommends: bash-completion"
    [[ -z $(dpkg-deb -f "$deb" Homepage) ]] || die "$deb: Homepage $(dpkg-deb -f "$deb" Homepage)"
    log "dpkg -i over install.sh's helper: refused"
    on_exit "dpkg -P cairn >/dev/null 2>&1 || true"
    if out=$(dpkg -i "$deb" 2>&1); then die "dpkg -i took over install.sh's /sbin/mount.fuse.cairn"; fi
    [[ $out == *"scripts/install.sh --uninstall"* ]] || die "dpkg -i refused without saying why: $out"
    grep -q "^CAIRN=\${CAIRN:-$installed}" /sbin/mount.fuse.cairn || die "the refused dpkg -i changed the helper"
    dpkg -P cairn >/dev/null 2>&1 || true
fi

log "scripts/install.sh --uninstall"
(cd "$CAIRN_ROOT" && scripts/install.sh --uninstall)
left=$(find /usr/local \( -type f -o -type l \) -name '*cairn*' | head -5)
[[ -z $left ]] || die "left after --uninstall: $left"
[[ ! -e /sbin/mount.fuse.cairn ]] || die "/sbin/mount.fuse.cairn left after --uninstall"
if [[ -n $deb ]]; then
    log "dpkg -i $(basename "$deb")"
    dpkg -i "$deb" >/dev/null
    if out=$(cd "$CAIRN_ROOT" && scripts/install.sh --no-build 2>&1); then
        die "scripts/install.sh overwrote the package's helper"
    fi
    [[ $out == *"belongs to the package cairn"* ]] || die "install.sh refused without saying why: $out"
    [[ ! -e /usr/local/bin/cairn ]] || die "the refused install.sh installed /usr/local/bin/cairn"
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
