#!/usr/bin/env bash
# cairn's whole test suite. CI (.ci/run) runs exactly this.
#
#   scripts/test.sh [--only SUITE[,SUITE..]] [--skip SUITE[,SUITE..]] [--quick] [--no-deps]
#
# Suites, in order (each passes or fails on its own; later suites still run when an
# earlier one fails, except that nothing runs without a build):
#   lint       scripts/lint.sh: shellcheck of scripts/, tests/external/, .ci/run;
#              cargo fmt --check; cargo clippy --all-targets -D warnings
#   build      cargo build --release --workspace
#   unit       cargo test --release --workspace -- --include-ignored (unit, property and FUSE
#              integration tests, and the heavy ones: 1.3 M-extent delete, 100,000-file fsck)
#   pjdfstest  tests/external/pjdfstest.sh --compare (POSIX conformance on a cairn mount;
#              kernel ext4 alongside for reference)
#   stress-ng  tests/external/stress-ng.sh (29 file-system stressors, 5 s each)
#   survival   tests/external/survival.sh (data survives remounts and a daemon SIGKILL
#              after syncfs)
#   survival-enc  the same on an encrypted image (CAIRN_KEY_FILE, issue 54)
#   fulldisk   tests/external/fulldisk.sh (a full disk, issue 50: eight regression cases:
#              fsync'd data kept, ENOSPC from write(2) for every writer, reads never
#              ENOSPC, EFBIG at the call, chattr +i/+a at the call, a fallocate leaves
#              accepted buffered writes their space; then 15 runs of a
#              model-based harness: buffered, O_DIRECT, mmap and append writers fill
#              48-192 MiB images until ENOSPC, every acknowledged chunk checked after
#              umount + mount or SIGKILL + replay, fsck clean)
#   fulldisk-enc  the eight cases and 6 harness runs on encrypted images (issue 54)
#   install    tests/external/install.sh (the README's Install commands as printed: /usr/local
#              and /sbin, `mount -a` of a fuse.cairn fstab line, remount ro/rw, `mount -a` of an
#              encrypted image's line with keyfile= (issue 54), man pages, bash completion,
#              bench --help, --uninstall; the .deb and install.sh refusing each other)
#   fsx        tests/external/fsx.sh (fsx-rs 0.2.0: buffered, mmap, fallocate/punch-hole and two
#              concurrent runs, ~370,000 checked ops; fio --verify=crc32c through O_DIRECT and
#              page cache vs O_DIRECT coherence; again without the writeback cache)
#   sigkill    tests/external/sigkill.sh 50 (50 cycles: a workload of fsync'd files and
#              atomic renames, the daemon SIGKILLed at a random moment, remount, every
#              fsync'd byte checked, fsck clean)
#   sigkill-enc   tests/external/sigkill.sh 15 on an encrypted image (issue 54)
#   pressure   tests/external/pressure.sh (cache_mb=4 on a disk-backed image under /var/tmp:
#              60,000 creates in one directory while a walker stats it and drops the
#              kernel caches and an fsync-er creates files; no error, no fsync'd file
#              lost, fsck clean)
#   nfs        tests/external/nfs.sh (cairn exported by NFS-Ganesha's FSAL_VFS, libnfs nfs-cp/nfs-ls
#              as the client, in private network and mount namespaces: a tree copied in and out
#              with sha256s, a file removed on the server side is ENOENT by name and ESTALE through
#              a held handle, held handles read the same data after cairn is remounted under a
#              running Ganesha and after a Ganesha restart; prints "nfs: SKIPPED (reason)" and
#              passes where its Debian packages cannot be installed)
#   xfstests   tests/external/xfstests.sh --ci (the xfstests tests in tests/external/xfstests-ci.txt,
#              built from ../shared/tools/xfstests-src.tar.gz, on loop devices; cairn fsck after
#              each test)
#   bench      cairn bench --quick = bench/run --quick (every benchmark experiment on cairn and its peers, small
#              sizes, one run per cell; fails if any cell fails; report in the log dir)
#   mballoc    bench/mballoc --quick --no-ext4 (seed 002's experiment on a fragmented 1 TiB image:
#              dd through a mount and the engine with mb_optimize_scan=0 and 1, useless loops)
#   fuzz       tests/external/fuzz.sh --ci (libFuzzer, nightly Rust: every on-disk decoder, a
#              mount of a damaged image and fsck of one, 15 s each from fuzz/corpus)
# Every external suite ends with an unmount, a wait for the daemon to exit and a clean
# `cairn fsck`. Must run as root (mounts, loop devices, pjdfstest's user switching).
#
# --quick: 2 s per stressor instead of 5. --no-deps: do not run scripts/install-deps.sh
# first. Logs: /tmp/cairn-test-logs/SUITE.log (and /tmp/cairn-*-logs/ for the details).
# The last line is `suites: N passed, N failed[, N skipped]`; exit 1 if any failed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

ALL=(lint build unit pjdfstest stress-ng survival survival-enc fulldisk fulldisk-enc install fsx sigkill sigkill-enc
    pressure nfs xfstests bench mballoc fuzz)
only=""
skip=""
quick=0
deps=1
while [[ $# -gt 0 ]]; do
    case $1 in
    --only) only=$2; shift ;;
    --skip) skip=$2; shift ;;
    --quick) quick=1 ;;
    --no-deps) deps=0 ;;
    -h | --help) sed -n '2,60p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [[ $(id -u) -ne 0 ]]; then
    echo "scripts/test.sh must run as root (it mounts file systems): sudo scripts/test.sh" >&2
    exit 1
fi

selected() {
    local s=$1
    if [[ -n $only && ",$only," != *",$s,"* ]]; then return 1; fi
    if [[ -n $skip && ",$skip," == *",$s,"* ]]; then return 1; fi
    return 0
}

banner() { printf '\n==================== %s ====================\n' "$*"; }
stamp() { date +%H:%M:%S; }

if [[ $deps -eq 1 ]]; then
    banner "dependencies (scripts/install-deps.sh)"
    if ! bash scripts/install-deps.sh; then
        echo "install-deps failed: cannot run the suites" >&2
        echo "suites: 0 passed, ${#ALL[@]} failed"
        exit 1
    fi
fi
# pjdfstest may live in root's cargo bin.
export PATH="$PATH:/usr/local/bin:${CARGO_HOME:-$HOME/.cargo}/bin"

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export CAIRN=${CAIRN:-$TARGET_DIR/release/cairn}
# `cairn bench` finds bench/run above its binary; a target dir elsewhere needs the path.
export CAIRN_BENCH=${CAIRN_BENCH:-$ROOT/bench/run}
[[ $quick -eq 1 ]] && export STRESS_TIME=2

LOGS=${TEST_LOG_DIR:-/tmp/cairn-test-logs}
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log
declare -A RESULT DURATION

# A dead FUSE mount left by an earlier, killed run (its daemon gone) breaks tools that walk
# the mount table (df); the suites start without one.
if [[ $(id -u) -eq 0 ]]; then
    bash -c 'source "$1" && sweep_dead_fuse_mounts' sweep "$ROOT/tests/external/lib.sh"
fi
build_ok=1

# run_suite NAME TIMEOUT_MINUTES COMMAND...
run_suite() {
    local name=$1 minutes=$2 t0 rc=0
    shift 2
    if ! selected "$name"; then
        RESULT[$name]=skipped
        DURATION[$name]=0
        return
    fi
    if [[ $build_ok -eq 0 && $name != lint && $name != build ]]; then
        banner "$name: not run (the build failed)"
        RESULT[$name]=FAILED
        DURATION[$name]=0
        return
    fi
    banner "$name ($(stamp))"
    echo "+ $*"
    t0=$(date +%s)
    timeout -k 30 $((minutes * 60)) "$@" 2>&1 | tee "$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    DURATION[$name]=$(($(date +%s) - t0))
    if [[ $rc -eq 0 ]]; then
        RESULT[$name]=passed
    else
        [[ $rc -eq 124 ]] && echo "$name: timed out after $minutes minutes" >&2
        RESULT[$name]=FAILED
    fi
    echo "--- $name: ${RESULT[$name]} (exit $rc) in ${DURATION[$name]} s"
}

run_suite lint 15 bash scripts/lint.sh
run_suite build 45 cargo build --release --workspace
if [[ ${RESULT[build]} == FAILED ]]; then
    build_ok=0
elif [[ ${RESULT[build]} == skipped && ! -x $CAIRN ]]; then
    echo "build skipped and no binary at $CAIRN" >&2
    build_ok=0
fi
run_suite unit 30 cargo test --release --workspace -- --show-output --include-ignored
run_suite pjdfstest 20 bash tests/external/pjdfstest.sh --compare
run_suite stress-ng 20 bash tests/external/stress-ng.sh
# The *-enc suites: the same harnesses on encrypted images (issue 54), one key file.
ENC_KEY=$LOGS/encrypted-suites.key
head -c 64 /dev/urandom >"$ENC_KEY"
run_suite survival 15 bash tests/external/survival.sh
run_suite survival-enc 15 env CAIRN_KEY_FILE="$ENC_KEY" bash tests/external/survival.sh
run_suite fulldisk 10 bash tests/external/fulldisk.sh
run_suite fulldisk-enc 12 env CAIRN_KEY_FILE="$ENC_KEY" bash tests/external/fulldisk.sh --runs 6 --cases 1,2,3,4,5,6,7,8
run_suite install 5 bash tests/external/install.sh
run_suite fsx 10 bash tests/external/fsx.sh
run_suite sigkill 20 bash tests/external/sigkill.sh 50
run_suite sigkill-enc 10 env CAIRN_KEY_FILE="$ENC_KEY" bash tests/external/sigkill.sh 15
run_suite pressure 10 bash tests/external/pressure.sh
run_suite nfs 5 bash tests/external/nfs.sh
run_suite xfstests 30 bash tests/external/xfstests.sh --ci
run_suite bench 30 "$CAIRN" bench --quick --out "$LOGS/bench-report"
run_suite mballoc 5 python3 "$ROOT/bench/mballoc" --quick --no-ext4 --cairn "$CAIRN" --out "$LOGS/mballoc-report"
run_suite fuzz 20 bash tests/external/fuzz.sh --ci

# Anything left mounted by a suite that was killed by its timeout?
leftover=$(findmnt -rn -o TARGET | grep -E '^/tmp/(cairn-test|fulldisk)\.' || true)
if [[ -n $leftover ]]; then
    echo "WARNING: left mounted after the suites (unmounting): $leftover" >&2
    while read -r mp; do umount -l "$mp" 2>/dev/null || true; done < <(printf '%s\n' "$leftover" | sort -r)
fi

banner "summary"
passed=0
failed=0
skipped=0
for s in "${ALL[@]}"; do
    printf '%-13s %-8s %6s s\n' "$s" "${RESULT[$s]}" "${DURATION[$s]}"
    case ${RESULT[$s]} in
    passed) passed=$((passed + 1)) ;;
    skipped) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)) ;;
    esac
done
# The suites' own one-line results, for the record.
grep -hE '^(pjdfstest (ext4|cairn): |stress-ng on |survival on |fulldisk: |sigkill: |pressure: |nfs: |xfstests on |fuzz: |crash harness: .* from )' "$LOGS"/*.log 2>/dev/null || true
line="suites: $passed passed, $failed failed"
[[ $skipped -gt 0 ]] && line="$line, $skipped skipped"
echo "$line" >"$LOGS/summary.txt"
echo "$line"
[[ $failed -eq 0 ]]
