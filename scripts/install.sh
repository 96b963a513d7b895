#!/usr/bin/env bash
# Installs cairn: the binary, the mount(8) helper, man pages and shell completions.
#
#   scripts/install.sh [--prefix DIR] [--sbindir DIR] [--destdir DIR] [--binary FILE]
#                      [--no-build] [--uninstall]
#
# --prefix   where the binary, man pages and completions go (default /usr/local):
#              PREFIX/bin/cairn
#              PREFIX/share/man/man1/cairn.1, cairn-mount.1, ... (generated: cairn manpages)
#              PREFIX/share/bash-completion/completions/cairn
#              PREFIX/share/zsh/site-functions/_cairn
#              PREFIX/share/fish/vendor_completions.d/cairn.fish
# --sbindir  where mount(8) looks for helpers (default /sbin): mount.fuse.cairn, which
#            runs PREFIX/bin/cairn, and the link mount.fuseblk.cairn (remounts of
#            root's fuseblk mounts); refused where the cairn Debian package owns them
# --destdir  stage everything under DIR (packaging); paths inside files stay PREFIX's
# --binary   install this cairn binary instead of building target/release/cairn
# --no-build use target/release/cairn as it is
# --uninstall removes what an install with the same --prefix/--sbindir/--destdir put there
#
# Needs root for the default locations. Then `mount -t fuse.cairn IMAGE DIR` and
# /etc/fstab lines with type fuse.cairn work, and `man cairn`, `man cairn-mount`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=/usr/local
sbindir=/sbin
destdir=""
binary=""
build=1
uninstall=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --prefix) prefix=$2; shift ;;
    --sbindir) sbindir=$2; shift ;;
    --destdir) destdir=$2; shift ;;
    --binary) binary=$2; build=0; shift ;;
    --no-build) build=0 ;;
    --uninstall) uninstall=1 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[[ $prefix == /* && $sbindir == /* ]] || { echo "install.sh: --prefix and --sbindir must be absolute" >&2; exit 2; }

bin=$destdir$prefix/bin
man1=$destdir$prefix/share/man/man1
bash_c=$destdir$prefix/share/bash-completion/completions
zsh_c=$destdir$prefix/share/zsh/site-functions
fish_c=$destdir$prefix/share/fish/vendor_completions.d
sbin=$destdir$sbindir

if ((uninstall)); then
    rm -f "$bin/cairn" "$sbin/mount.fuse.cairn" "$sbin/mount.fuseblk.cairn" \
        "$bash_c/cairn" "$zsh_c/_cairn" "$fish_c/cairn.fish"
    rm -f "$man1"/cairn.1 "$man1"/cairn-*.1 "$destdir$prefix"/share/man/cat1/cairn.1* "$destdir$prefix"/share/man/cat1/cairn-*.1*
    if [[ -z $destdir ]] && command -v mandb >/dev/null; then
        mandb -q "$prefix/share/man" 2>/dev/null || true
    fi
    echo "cairn: removed from $destdir$prefix and $sbin"
    exit 0
fi

if [[ -z $binary ]]; then
    binary=$ROOT/target/release/cairn
    if ((build)); then
        (cd "$ROOT" && cargo build --release -p cairn-cli)
    fi
fi
[[ -x $binary ]] || { echo "install.sh: no cairn binary at $binary (build it: cargo build --release -p cairn-cli)" >&2; exit 1; }

# The Debian package (scripts/deb.sh) owns its /sbin helper: do not overwrite it (its
# `dpkg -r` would then delete ours); one of the two installs at a time.
if [[ -z $destdir ]] && command -v dpkg-query >/dev/null &&
    owner=$(dpkg-query -S "$sbindir/mount.fuse.cairn" 2>/dev/null); then
    echo "install.sh: $sbindir/mount.fuse.cairn belongs to the package ${owner%%:*}: remove it first (sudo apt remove cairn)" >&2
    exit 1
fi

install -d "$bin" "$man1" "$bash_c" "$zsh_c" "$fish_c" "$sbin"
install -m 755 "$binary" "$bin/cairn"
# The helper runs the installed binary: mount(8) may call it with a bare PATH.
sed "s|^CAIRN=.*|CAIRN=\${CAIRN:-$prefix/bin/cairn}|" "$ROOT/scripts/mount.fuse.cairn" >"$sbin/mount.fuse.cairn"
chmod 755 "$sbin/mount.fuse.cairn"
ln -sf mount.fuse.cairn "$sbin/mount.fuseblk.cairn"
"$bin/cairn" manpages "$man1" >/dev/null
"$bin/cairn" completions bash >"$bash_c/cairn"
"$bin/cairn" completions zsh >"$zsh_c/_cairn"
"$bin/cairn" completions fish >"$fish_c/cairn.fish"
if [[ -z $destdir ]] && command -v mandb >/dev/null; then
    mandb -q "$prefix/share/man" 2>/dev/null || true
fi
echo "cairn $("$bin/cairn" --version | awk '{print $2}') installed: $prefix/bin/cairn, $sbindir/mount.fuse.cairn, man pages, completions"
