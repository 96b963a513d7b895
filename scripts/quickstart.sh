#!/usr/bin/env bash
# From a fresh Debian 12 machine to a mounted cairn file system, in one command:
#
#   scripts/quickstart.sh [--image FILE] [--mountpoint DIR] [--size SIZE] [--fresh]
#
# 1. checks for Rust (rustup/cargo) and installs the Debian packages cairn needs
#    (scripts/install-deps.sh --runtime: fuse3, a C linker);
# 2. builds the release binary (target/release/cairn);
# 3. makes a 1 GiB file system in ./cairn.img (kept if it exists; --fresh remakes it);
# 4. mounts it at ./mnt and shows it working: writes and reads a file, ls -la, df -h,
#    `cairn stats`;
# 5. prints how to unmount, check and remount.
#
# Run it as root for the simplest path (sudo scripts/quickstart.sh); as a user it needs
# sudo for the packages, and mounts through fusermount3.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMG=$ROOT/cairn.img
MP=$ROOT/mnt
SIZE=1G
FRESH=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --image) IMG=$(realpath -m "$2"); shift ;;
    --mountpoint) MP=$(realpath -m "$2"); shift ;;
    --size) SIZE=$2; shift ;;
    --fresh) FRESH=1 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() {
    printf '$ %s\n' "$*"
    "$@"
}
die() {
    printf 'quickstart: %s\n' "$*" >&2
    exit 1
}

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "run as root, or install sudo"
    SUDO=sudo
fi

step "Rust toolchain"
if ! command -v cargo >/dev/null && [[ -x $HOME/.cargo/bin/cargo ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    cat >&2 <<'EOF'
cargo was not found. cairn needs Rust 1.89 or newer; Debian 12's own rustc is too old.
Install rustup (https://rustup.rs):
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y
    . "$HOME/.cargo/env"
then run scripts/quickstart.sh again.
EOF
    exit 1
fi
(cd "$ROOT" && cargo --version && rustc --version)

step "Debian packages (scripts/install-deps.sh --runtime)"
$SUDO bash "$ROOT/scripts/install-deps.sh" --runtime

step "Build (cargo build --release -p cairn-cli)"
(cd "$ROOT" && run cargo build --release -p cairn-cli)
CAIRN=${CARGO_TARGET_DIR:-$ROOT/target}/release/cairn
[[ -x $CAIRN ]] || die "no binary at $CAIRN after the build"

if mountpoint -q "$MP"; then
    step "$MP is already mounted: leaving it as it is"
else
    if [[ -e $IMG && $FRESH -eq 0 ]]; then
        step "Using the existing image $IMG (--fresh makes a new one)"
    else
        step "Make a $SIZE file system in $IMG"
        mkdir -p "$(dirname "$IMG")"
        run "$CAIRN" mkfs "$IMG" --size "$SIZE" --force
    fi
    step "Mount it at $MP"
    mkdir -p "$MP"
    run "$CAIRN" mount "$IMG" "$MP"
    for _ in $(seq 50); do mountpoint -q "$MP" && break; sleep 0.1; done
    mountpoint -q "$MP" || die "$MP did not become a mount point"
fi

step "Use it"
run sh -c "echo 'hello from cairn' > '$MP/hello.txt'"
run cat "$MP/hello.txt"
run mkdir -p "$MP/docs"
run cp -r "$ROOT/README.md" "$ROOT/docs" "$MP/docs/" 2>/dev/null || true
run dd if=/dev/urandom of="$MP/random.bin" bs=1M count=16 status=none
run sha256sum "$MP/random.bin"
run ls -la "$MP"
run df -h "$MP"
run "$CAIRN" stats "$MP" || echo "(cairn stats failed)"

cat <<EOF

cairn is mounted at $MP (image: $IMG). The daemon runs in the background.

  Unmount:         $CAIRN umount $MP
                   (returns once the daemon has written everything and released the image)
  Check the image: $CAIRN fsck $IMG        (after unmounting; 0 = clean)
  Mount again:     $CAIRN mount $IMG $MP
  Statistics:      $CAIRN stats $MP --json
  Run the tests:   sudo scripts/test.sh
EOF
