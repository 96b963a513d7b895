#!/usr/bin/env bash
# Lint: shellcheck of every shell script, `cargo fmt --check` and
# `cargo clippy --workspace --all-targets -- -D warnings`; any finding fails the suite.
# (clippy shares the release profile's target dir, so it reuses the build's dependencies.)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
rc=0
files=(.ci/run scripts/*.sh scripts/mount.fuse.cairn tests/external/*.sh)
echo "shellcheck -x ${files[*]}"
if shellcheck -x "${files[@]}"; then echo "shellcheck: clean"; else rc=1; fi
diff_out=$(mktemp)
if cargo fmt --all --check >"$diff_out" 2>&1; then
    echo "cargo fmt --check: clean"
else
    echo "cargo fmt --check: $(grep -c '^Diff in' "$diff_out") places differ, in:"
    grep '^Diff in' "$diff_out" | sed -e 's/^Diff in //' -e 's/:[0-9]*:$//' | sort | uniq -c
    echo "run 'cargo fmt' to fix"
    rc=1
fi
rm -f "$diff_out"
if cargo clippy --release --workspace --all-targets -- -D warnings; then
    echo "cargo clippy: clean"
else
    rc=1
fi
exit $rc
