#!/usr/bin/env bash
# libFuzzer runs of cairn's fuzz targets (fuzz/: every on-disk decoder, a mount of a damaged
# image, fsck of one).
#
#   tests/external/fuzz.sh                    every target for 60 s
#   tests/external/fuzz.sh --ci               every target for 15 s (scripts/test.sh's fuzz suite)
#   tests/external/fuzz.sh --seconds 1800 T   target T for 30 minutes (the issue's long runs)
#   tests/external/fuzz.sh --list             the targets
#
# Needs nightly Rust for cargo-fuzz (installed with rustup here if missing, `--profile
# minimal`) and cargo-fuzz (cargo install, if missing); the product itself stays on stable.
# The corpus in fuzz/corpus/<target> is the starting point (written by fuzz/examples/seeds.rs
# from real structures when a directory is empty); each run works on a copy in
# $FUZZ_WORK (default /var/tmp/cairn-fuzz), so what a run finds does not change the repo
# unless you copy it back (`cargo fuzz cmin` first). A crash, leak, timeout (10 s) or an
# allocation over 2 GiB is a finding: its input lands in $FUZZ_WORK/artifacts/<target>/ and
# the script exits 1. The last lines give each target's executions and coverage.
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

seconds=60
targets=()
list=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --ci) seconds=15 ;;
    --seconds) seconds=$2; shift ;;
    --list) list=1 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) targets+=("$1") ;;
    esac
    shift
done

FUZZ_DIR=$CAIRN_ROOT/fuzz
WORK=${FUZZ_WORK:-/var/tmp/cairn-fuzz}
all=(superblock group_desc inode tree_node xattr_block journal_record mount_image fsck_image crypt_header)
if [[ $list -eq 1 ]]; then
    printf '%s\n' "${all[@]}"
    exit 0
fi
[[ ${#targets[@]} -eq 0 ]] && targets=("${all[@]}")

# The largest input each target reads (the rest would be ignored).
max_len() {
    case $1 in
    journal_record) echo 25000 ;;
    mount_image | fsck_image) echo 320 ;;
    *) echo 4100 ;;
    esac
}

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    log "installing nightly Rust (for cargo-fuzz only)"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo +nightly install cargo-fuzz --locked
fi

cd "$FUZZ_DIR"
for t in "${targets[@]}"; do
    if [[ -z $(ls -A "corpus/$t" 2>/dev/null) ]]; then
        log "writing the seed corpus (fuzz/examples/seeds.rs)"
        cargo +nightly run --release --quiet --example seeds -- corpus
        break
    fi
done
log "building the fuzz targets (nightly, address sanitizer)"
cargo +nightly fuzz build --release --debug-assertions

mkdir -p "$WORK"
failed=()
summary=()
for t in "${targets[@]}"; do
    work=$WORK/corpus/$t
    art=$WORK/artifacts/$t
    mkdir -p "$work" "$art"
    cp -n "corpus/$t"/* "$work"/ 2>/dev/null || true
    log "fuzz $t for $seconds s"
    out=$WORK/$t.log
    rc=0
    cargo +nightly fuzz run --release --debug-assertions "$t" "$work" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
        -max_len="$(max_len "$t")" -artifact_prefix="$art/" -print_final_stats=1 >"$out" 2>&1 || rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$out" | tail -1)
    line="fuzz $t: ${execs:-?} executions in $seconds s, ${cov:-no coverage line}"
    if [[ $rc -ne 0 ]]; then
        line="$line: FINDING (exit $rc), see $out and $art/"
        failed+=("$t")
        grep -E 'panicked|ERROR: AddressSanitizer|ERROR: libFuzzer|SUMMARY' "$out" | head -5 >&2 || true
    else
        line="$line: ok"
    fi
    summary+=("$line")
    echo "$line"
done
printf '%s\n' "${summary[@]}" >"$WORK/summary.txt"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz: ${#targets[@]} targets, ${#failed[@]} with findings: ${failed[*]}"
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, no findings ($seconds s each)"
