#!/usr/bin/env bash
# Process-crash test: a workload runs through a real cairn mount and the daemon is
# killed with SIGKILL at a random moment, again and again; after each kill the image is
# remounted (journal replay) and every file whose fsync had returned must hold exactly
# the bytes it was fsync'd with, and a file replaced by rename must hold one whole
# version, never a mix. fsck must be clean after every cycle.
#
#   tests/external/sigkill.sh [CYCLES]      (default 50)
#
# A SIGKILL tests a process crash: the host page cache survives it, so this checks the
# daemon's own ordering (what it has written when fsync returns, replay of half-written
# checkpoints). Power loss is covered by the crash-point harness in cairn-core's tests.
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CYCLES=${1:-50}
require_root
require_cairn
require_cmd python3 fusermount3

make_scratch 1200M
IMG=$SCRATCH/sigkill.img
MP=$SCRATCH/mnt
LOGDIR=$SCRATCH/logs
mkdir -p "$MP" "$LOGDIR"
cairn_mkfs "$IMG" 1G >/dev/null

# The workload: writes new files (random sizes, some sparse), fsyncs each and only then
# records name and sha256 in the journal file outside the mount; every few files it
# replaces config.txt atomically (write tmp, fsync, rename) and records the version.
WORKLOAD=$(cat <<'PY'
import hashlib, os, random, sys
mp, log, cycle = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(cycle)
out = open(log, "a", buffering=1)
# Keep the image from filling up over many cycles: files of cycles older than the
# last two are removed first (and no longer checked).
for n in os.listdir(mp):
    if n.startswith("c") and "-f" in n and int(n[1:].split("-")[0]) <= cycle - 3:
        os.unlink(os.path.join(mp, n))
        out.write(f"unlink {n}\n")
i = 0
while True:
    name = f"c{cycle}-f{i}"
    size = rnd.choice([0, 1, 511, 4096, 4097, 65536, 300000, 1 << 20])
    data = rnd.randbytes(size)
    p = os.path.join(mp, name)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    if size and rnd.random() < 0.2:
        os.pwrite(fd, data, 1 << 20)      # sparse: a hole, then the data
        data = b"\0" * (1 << 20) + data
    else:
        os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    out.write(f"file {name} {hashlib.sha256(data).hexdigest()}\n")
    if i % 3 == 0:
        v = f"version {cycle}-{i} " + "x" * rnd.randrange(10000)
        t = os.path.join(mp, "config.tmp")
        with open(t, "w") as f:
            f.write(v)
            f.flush()
            os.fsync(f.fileno())
        out.write(f"config {hashlib.sha256(v.encode()).hexdigest()}\n")
        os.rename(t, os.path.join(mp, "config.txt"))
        dfd = os.open(mp, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        out.write(f"config-durable {hashlib.sha256(v.encode()).hexdigest()}\n")
    i += 1
PY
)

# The checker: every recorded file must match; config.txt must be one whole recorded
# version, and not older than the last one whose rename was made durable.
CHECK=$(cat <<'PY'
import hashlib, os, sys
mp, log = sys.argv[1], sys.argv[2]
files, versions, durable = {}, set(), None
for line in open(log):
    kind, *rest = line.split()
    if kind == "file":
        files[rest[0]] = rest[1]
    elif kind == "unlink":
        files.pop(rest[0], None)
    elif kind == "config":
        versions.add(rest[0])
    elif kind == "config-durable":
        durable = rest[0]
bad = 0
for name, want in files.items():
    try:
        got = hashlib.sha256(open(os.path.join(mp, name), "rb").read()).hexdigest()
    except OSError as e:
        got = f"error {e}"
    if got != want:
        print(f"LOST: {name}: fsync'd {want[:12]}, found {got[:12]}")
        bad += 1
cp = os.path.join(mp, "config.txt")
if os.path.exists(cp):
    got = hashlib.sha256(open(cp, "rb").read()).hexdigest()
    if got not in versions:
        print(f"MIXED: config.txt holds no version ever written ({got[:12]})")
        bad += 1
elif durable:
    print("LOST: config.txt is missing after a durable rename")
    bad += 1
print(f"checked {len(files)} fsync'd files")
sys.exit(1 if bad else 0)
PY
)

pass=0
fail=0
for ((c = 1; c <= CYCLES; c++)); do
    cairn_mount "$IMG" "$MP" default_permissions || die "cycle $c: mount failed"
    pid=$(cairn_pids "$MP" | head -1)
    [[ -n $pid ]] || die "cycle $c: no daemon process found"
    python3 -c "$WORKLOAD" "$MP" "$LOGDIR/fsynced.log" "$c" &
    wl=$!
    sleep "$(python3 -c "import random; print(round(random.uniform(0.05, 1.5), 3))")"
    kill -KILL "$pid"
    wait "$wl" 2>/dev/null || true
    force_unmount "$MP"
    wait_daemon_exit "$IMG" "$MP" || true
    cairn_mount "$IMG" "$MP" default_permissions || die "cycle $c: remount after SIGKILL failed"
    if out=$(python3 -c "$CHECK" "$MP" "$LOGDIR/fsynced.log"); then
        log "cycle $c: $out"
        ok=1
    else
        warn "cycle $c: $out"
        ok=0
    fi
    cairn_unmount "$IMG" "$MP" || die "cycle $c: unmount failed"
    cairn_fsck "$IMG" "cycle $c" || ok=0
    if [[ $ok -eq 1 ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "sigkill: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
