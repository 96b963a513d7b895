#!/usr/bin/env bash
# Install what building, running and testing cairn needs on Debian 12 (bookworm).
# Idempotent: installs only what is missing; a second run takes about a second.
#
#   scripts/install-deps.sh            everything (build, run, all test suites, speed check)
#   scripts/install-deps.sh --runtime  only what building and mounting cairn needs
#
# Needs root (or sudo). Does not install Rust itself: see README.md (rustup).
#
# What each package is for:
#   fuse3          fusermount3 and /etc/fuse.conf: unmounting as a user, mount -t fuse.cairn
#   bash-completion  loads the bash completion scripts/install.sh installs
#   build-essential, pkg-config   the C linker cargo needs
#   e2fsprogs      mkfs.ext4/e2fsck: the kernel-ext4 comparison runs
#   fuse2fs        ext4 in user space through FUSE: the speed comparison's FUSE peer
#   util-linux, procps, coreutils, attr, acl   losetup, findmnt, flock, pgrep, getfattr/setfattr
#   stress-ng      file-system stressors (tests/external/stress-ng.sh)
#   fio, dbench, fsmark   benchmarks (scripts/speed-check.sh; fsmark is Debian's fs_mark)
#   gocryptfs, cryfs   encrypting FUSE file systems: `bench/run crypt` measures encrypted cairn beside them
#   libacl1-dev    needed to build pjdfstest (cargo install pjdfstest --version 0.2.2)
#   fsx            not a Debian package: cargo install fsx --version 0.2.0 (fsx-rs, the File
#                  System eXerciser) into /usr/local/bin, for tests/external/fsx.sh
#   xfsprogs, btrfs-progs   other kernel file systems for later comparisons
#   libfuse3-dev   headers, for C tools that talk FUSE (not needed by cairn itself: the
#                  fuser crate mounts without libfuse)
#   the linter for shell scripts (package shellcheck): scripts/test.sh --lint
#   autoconf, automake, libtool, make, gcc, patch, xfslibs-dev, uuid-dev, libattr1-dev,
#   libaio-dev, liburing-dev, libgdbm-dev, libgdbm-compat-dev   building xfstests
#                  (tests/external/xfstests.sh builds it from ../shared/tools/xfstests-src.tar.gz)
#   bc, dump, psmisc, gawk, file, quota, libcap2-bin   tools xfstests' tests call
#   nfs-ganesha, nfs-ganesha-vfs, libnfs-utils, rpcbind, iproute2   tests/external/nfs.sh (cairn
#                  exported by NFS-Ganesha's FSAL_VFS, libnfs's nfs-cp/nfs-ls as the client); installed
#                  apart: if they cannot be, install-deps goes on and that suite prints SKIPPED
set -euo pipefail

RUNTIME_ONLY=0
case ${1:-} in
--runtime) RUNTIME_ONLY=1 ;;
"") ;;
-h | --help) sed -n '2,30p' "$0"; exit 0 ;;
*) echo "unknown argument $1" >&2; exit 2 ;;
esac

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-deps.sh: run as root (or install sudo)" >&2; exit 1; }
    SUDO=sudo
fi

log() { printf '[install-deps] %s\n' "$*" >&2; }

RUNTIME_PKGS=(fuse3 bash-completion build-essential pkg-config util-linux procps coreutils)
TEST_PKGS=(e2fsprogs fuse2fs attr acl stress-ng fio dbench fsmark gocryptfs cryfs libacl1-dev xfsprogs btrfs-progs
    libfuse3-dev shellcheck kmod
    autoconf automake libtool make gcc patch xfslibs-dev uuid-dev libattr1-dev libaio-dev liburing-dev
    libgdbm-dev libgdbm-compat-dev bc dump psmisc gawk file quota libcap2-bin man-db)
PKGS=("${RUNTIME_PKGS[@]}")
[[ $RUNTIME_ONLY -eq 1 ]] || PKGS+=("${TEST_PKGS[@]}")

# missing_pkgs PKG...: those of the Debian packages PKG... not installed, one a line.
missing_pkgs() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

# --- Debian packages
mapfile -t missing < <(missing_pkgs "${PKGS[@]}")
if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
else
    log "Debian packages: all present"
fi

# --- /dev/fuse
if [[ ! -e /dev/fuse ]]; then
    log "no /dev/fuse: loading the fuse module"
    $SUDO modprobe fuse || { log "could not load the fuse module: cairn cannot mount here"; exit 1; }
fi

[[ $RUNTIME_ONLY -eq 1 ]] && exit 0

# --- the NFS suite's server and client (tests/external/nfs.sh): not fatal when missing.
# Their services must not start on the host (nfs.sh runs its own ganesha.nfsd and rpcbind in
# a private network namespace; the packages' units would serve NFS on every interface):
# a policy-rc.d that refuses every start is in place during the install, unless one is already.
NFS_PKGS=(nfs-ganesha nfs-ganesha-vfs libnfs-utils rpcbind iproute2)
mapfile -t nfs_missing < <(missing_pkgs "${NFS_PKGS[@]}")
if [[ ${#nfs_missing[@]} -gt 0 ]]; then
    log "installing (for tests/external/nfs.sh, services not started): ${nfs_missing[*]}"
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\n# scripts/install-deps.sh: no service starts while it installs\nexit 101\n' |
            $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
        own_policy=1
    fi
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        "${nfs_missing[@]}" </dev/null; then
        log "could not install ${nfs_missing[*]}: tests/external/nfs.sh will print SKIPPED"
    fi
    [[ $own_policy -eq 1 ]] && $SUDO rm -f "$policy"
else
    log "NFS suite packages: all present"
fi

# have_tool NAME VERSION: NAME at VERSION (`NAME --version` says "NAME VERSION") is
# installed, and on everyone's PATH in /usr/local/bin (the suites run it by name).
have_tool() {
    local name=$1 version=$2 bin
    for bin in "$(command -v "$name" 2>/dev/null)" "/usr/local/bin/$name" "${CARGO_HOME:-$HOME/.cargo}/bin/$name"; do
        [[ -n $bin && -x $bin ]] || continue
        [[ $("$bin" --version 2>/dev/null) == "$name $version" ]] || continue
        [[ $bin == "/usr/local/bin/$name" ]] || $SUDO ln -sf "$bin" "/usr/local/bin/$name"
        return 0
    done
    return 1
}

# cargo_tool NAME VERSION HOW_LONG: NAME at VERSION, from crates.io unless present.
# Installed into /usr/local so that it is on everyone's PATH, built outside the workspace
# (a target dir of its own) so it never touches cairn's build. --locked uses the crate's
# own Cargo.lock; if that no longer resolves, the newest compatible versions.
cargo_tool() {
    local name=$1 version=$2 how_long=$3 tmp
    if have_tool "$name" "$version"; then
        log "$name $version: present"
        return 0
    fi
    command -v cargo >/dev/null || { log "cargo not found: install Rust (rustup) first, see README.md"; exit 1; }
    log "cargo install $name --version $version --locked ($how_long)"
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && $SUDO env "PATH=$PATH" CARGO_TARGET_DIR="$tmp/target" \
        cargo install "$name" --version "$version" --locked --root /usr/local --quiet); then
        log "cargo install $name --locked failed: trying without --locked"
        (cd "$tmp" && $SUDO env "PATH=$PATH" CARGO_TARGET_DIR="$tmp/target" \
            cargo install "$name" --version "$version" --root /usr/local --quiet --force)
    fi
    rm -rf "$tmp"
    have_tool "$name" "$version" || { log "$name did not install"; exit 1; }
}

# pjdfstest 0.2.2 (the Rust port; needs libacl1-dev, installed above).
cargo_tool pjdfstest 0.2.2 "about 1.5 minutes"
# fsx 0.2.0 (fsx-rs, the File System eXerciser: tests/external/fsx.sh).
cargo_tool fsx 0.2.0 "about 1 minute"

# --- nightly Rust and cargo-fuzz, for the fuzz suite only (tests/external/fuzz.sh): libFuzzer
# needs nightly's sanitizer flags; the product builds on stable.
if command -v rustup >/dev/null; then
    if rustup run nightly rustc --version >/dev/null 2>&1; then
        log "nightly Rust: present ($(rustup run nightly rustc --version))"
    else
        log "rustup toolchain install nightly --profile minimal (for cargo-fuzz)"
        rustup toolchain install nightly --profile minimal
    fi
else
    log "no rustup: the fuzz suite cannot get nightly Rust and will fail"
fi
if cargo fuzz --version >/dev/null 2>&1; then
    log "cargo-fuzz: present ($(cargo fuzz --version))"
else
    log "cargo install cargo-fuzz --locked (about 2 minutes)"
    tmp=$(mktemp -d)
    (cd "$tmp" && CARGO_TARGET_DIR="$tmp/target" cargo install cargo-fuzz --locked --quiet)
    rm -rf "$tmp"
    cargo fuzz --version >/dev/null 2>&1 || { log "cargo-fuzz did not install"; exit 1; }
fi

# --- the user and group pjdfstest switches to (its config names nobody/nogroup and tests/tests)
if ! getent group tests >/dev/null && ! getent passwd tests >/dev/null; then
    log "creating user and group 'tests' (for pjdfstest)"
    echo 'tests:x:::pjdfstest dummy:/:/usr/sbin/nologin' | $SUDO newusers
elif ! getent passwd tests >/dev/null; then
    $SUDO useradd --system -g tests -d / -s /usr/sbin/nologin -c 'pjdfstest dummy' tests
elif ! getent group tests >/dev/null; then
    $SUDO groupadd tests
fi
getent group nogroup >/dev/null || $SUDO groupadd nogroup

log "done"
