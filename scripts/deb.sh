#!/usr/bin/env bash
# Builds a Debian package of cairn: cairn_VERSION_ARCH.deb.
#
#   scripts/deb.sh [--binary FILE] [--out DIR]
#
# --binary  package this cairn binary (default: build target/release/cairn)
# --out     where the .deb goes (default target/debian)
#
# The package holds what scripts/install.sh puts under /usr and /sbin, staged with its
# --destdir: /usr/bin/cairn, /sbin/mount.fuse.cairn (and mount.fuseblk.cairn), the man
# pages (gzipped, as Debian ships them) and the bash, zsh and fish completions. It
# depends on fuse3 (fusermount3, for mounts by other users than root). Install with
# `apt install ./cairn_*.deb` (or `dpkg -i`); remove with `apt remove cairn`.
# Built with dpkg-deb alone, from the same staging the plain install uses, so the two
# cannot drift apart. Its preinst refuses to install over a /sbin/mount.fuse.cairn that
# no package owns (scripts/install.sh's: dpkg would overwrite it silently and delete it
# at `dpkg -r`): remove that install first (`sudo scripts/install.sh --uninstall`).
# Recommends bash-completion (which loads the bash completion).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary=""
out=$ROOT/target/debian
while [[ $# -gt 0 ]]; do
    case $1 in
    --binary) binary=$2; shift ;;
    --out) out=$2; shift ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
command -v dpkg-deb >/dev/null || { echo "deb.sh: dpkg-deb is needed (Debian's dpkg package)" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n 1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/cairn_${version}_$arch

install_args=(--prefix /usr --sbindir /sbin --destdir "$pkg")
if [[ -n $binary ]]; then
    install_args+=(--binary "$binary")
fi
bash "$ROOT/scripts/install.sh" "${install_args[@]}" >/dev/null
# As Debian ships binaries: without debug information (the release profile keeps it
# for profiling), and man pages gzipped.
strip --strip-debug "$pkg/usr/bin/cairn"
gzip -9n "$pkg"/usr/share/man/man1/*.1

install -d "$pkg/DEBIAN" "$pkg/usr/share/doc/cairn"
install -m 644 "$ROOT/README.md" "$pkg/usr/share/doc/cairn/README.md"
size_kib=$(du -sk "$pkg" | awk '{print $1}')
cat >"$pkg/DEBIAN/control" <<EOF
Package: cairn
Version: $version
Architecture: $arch
Maintainer: cairn developers <cairn@localhost>
Installed-Size: $size_kib
Depends: fuse3, libc6
Recommends: bash-completion
Section: admin
Priority: optional
Description: journaling file system in user space (FUSE)
 cairn keeps a whole file system in one image file or block device and mounts it
 through FUSE, with no kernel module: a journaled, crash-safe file system built
 from the scalability designs of ext4, XFS and Tux3. This package holds the cairn
 command (mkfs, mount, fsck, stats, tune, resize, inspect, trim), the mount(8)
 helper for type fuse.cairn (fstab lines, mount -a), man pages and completions.
EOF
# A helper in /sbin that no package owns is scripts/install.sh's (or a copy): refuse
# rather than take it over (Debian policy 10.7.4: a package must not overwrite files of
# the local administrator).
cat >"$pkg/DEBIAN/preinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = install ] || [ "$1" = upgrade ]; then
    for h in /sbin/mount.fuse.cairn /sbin/mount.fuseblk.cairn; do
        if { [ -e "$h" ] || [ -L "$h" ]; } && ! dpkg-query -S "$h" >/dev/null 2>&1; then
            echo "cairn: $h is not from this package (scripts/install.sh installs it)." >&2
            echo "cairn: remove that install first: sudo scripts/install.sh --uninstall" >&2
            exit 1
        fi
    done
fi
exit 0
EOF
chmod 755 "$pkg/DEBIAN/preinst"
mkdir -p "$out"
dpkg-deb --root-owner-group --build "$pkg" "$out" >/dev/null
echo "$out/cairn_${version}_$arch.deb"
