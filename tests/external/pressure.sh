#!/usr/bin/env bash
# Metadata-cache pressure: a small buffer cache (-o cache_mb=4, commit=30) on a
# DISK-BACKED image (not tmpfs: drop_caches must be able to evict the image's pages),
# one directory filled with 60,000 files while a second process walks it (readdir +
# lstat of every entry) and drops the kernel's caches (echo 3 > drop_caches) in a loop,
# and a third creates small files, fsyncs each, and records a name only once its fsync
# returned. Reproduces the data-loss report "60,000 touches: `touch: Structure needs
# cleaning`; after unmount fsck finds a directory whose entry count disagrees with its
# tree and orphans with link count 1: fsync'd creates are gone".
#
#   tests/external/pressure.sh [--files N] [--cache-mb N] [--commit S] [--sync-dir own|many]
#                              [--no-walker] [--no-fsyncer]
#
#   --files N       files created in many/ by `seq N | xargs touch` (default 60000)
#   --cache-mb N    cairn's metadata cache, MiB (default 4)
#   --commit S      journal commit interval, seconds (default 30)
#   --sync-dir D    where the fsync-er creates its files: `own` (a directory of its own,
#                   default) or `many` (the same directory as the 60,000 creates)
#   --no-walker     no walker and no drop_caches (to see what the creates alone do)
#   --no-fsyncer    no fsync-er
#
# Checks (each failure is counted; the suite fails if any):
#   1. phase 1: every touch succeeds, the walker's readdir/lstat never fail, every
#      create/write/fsync of the fsync-er succeeds, the daemon is alive afterwards;
#      the creates must finish within PRESSURE_TIMEOUT seconds (default 300);
#   2. unmount, wait for the daemon to exit, `cairn fsck` exits 0;
#   3. remount: every fsync'd file exists with exactly its bytes, many/ holds exactly
#      the N names 1..N (plus the fsync-er's files with --sync-dir many);
#   4. unmount, wait for the daemon, `cairn fsck` exits 0.
#
# Environment: PRESSURE_DIR (where the image goes; default /var/tmp; must not be
# tmpfs), PRESSURE_TIMEOUT, KEEP_FAILED=1 (keep the image of a failed run), CAIRN,
# CAIRN_MOUNT_OPTS. Logs: /tmp/cairn-pressure-logs/ (touch errors, walker and fsync-er
# logs, fsck output, `cairn stats` after phase 1).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FILES=60000
CACHE_MB=4
COMMIT=30
SYNC_DIR=own
WALK=1
FSYNC=1
while [[ $# -gt 0 ]]; do
    case $1 in
    --files) FILES=$2; shift ;;
    --cache-mb) CACHE_MB=$2; shift ;;
    --commit) COMMIT=$2; shift ;;
    --sync-dir) SYNC_DIR=$2; shift ;;
    --no-walker) WALK=0 ;;
    --no-fsyncer) FSYNC=0 ;;
    -h | --help) sed -n '2,34p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done
[[ $FILES =~ ^[0-9]+$ && $FILES -gt 0 ]] || die "--files must be a positive number"
[[ $CACHE_MB =~ ^[0-9]+$ ]] || die "--cache-mb must be a number"
[[ $COMMIT =~ ^[0-9]+$ ]] || die "--commit must be a number"
case $SYNC_DIR in own | many) ;; *) die "--sync-dir must be own or many" ;; esac
PRESSURE_DIR=${PRESSURE_DIR:-/var/tmp}
PRESSURE_TIMEOUT=${PRESSURE_TIMEOUT:-300}

require_root
require_cairn
require_cmd python3 xargs seq flock findmnt

# ---- scratch: the image on disk, the mount point under /tmp/cairn-test.* (where
# scripts/test.sh looks for leftover mounts)
fstype=$(findmnt -n -o FSTYPE --target "$PRESSURE_DIR" || true)
case $fstype in
tmpfs | ramfs | "") die "PRESSURE_DIR=$PRESSURE_DIR is on '${fstype:-?}': the image must be disk-backed" ;;
esac
_drop_work() {
    if [[ ${KEEP_FAILED:-0} == 1 && ${SUITE_FAILED:-0} == 1 ]]; then
        warn "KEEP_FAILED=1: keeping the image $1/fs.img"
        return
    fi
    rm -f "$1/fs.img" "$1"/*.stop
    rmdir "$1" 2>/dev/null || true
}
WORK=$(mktemp -d "$PRESSURE_DIR/cairn-pressure.XXXXXX")
on_exit "_drop_work '$WORK'"
MPDIR=$(mktemp -d /tmp/cairn-test.XXXXXX)
chmod 755 "$MPDIR"
on_exit "rmdir '$MPDIR/mnt' '$MPDIR' 2>/dev/null"
IMG=$WORK/fs.img
MP=$MPDIR/mnt
LOGS=${PRESSURE_LOG_DIR:-/tmp/cairn-pressure-logs}
mkdir -p "$LOGS"
rm -f "$LOGS"/*
OPTS="default_permissions,cache_mb=$CACHE_MB,commit=$COMMIT"

# _stop_helpers: exit path: tell the walker and the fsync-er to stop, then make sure.
_stop_helpers() {
    local p i
    [[ -n ${STOP:-} ]] && : >"$STOP"
    for p in ${walker:-} ${fsyncer:-}; do
        for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
}

# reap PID NAME: wait (at most 60 s, then SIGKILL) for a helper told to stop; its status.
reap() {
    local pid=$1 name=$2 i
    for ((i = 0; i < 600; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        warn "the $name did not stop within 60 s of being told to (hung in the mount?): killing it"
        kill -9 "$pid" 2>/dev/null || true
    fi
    wait "$pid"
}

# pressure_fsck LABEL: `cairn fsck` must exit 0; its output is kept in the log dir.
pressure_fsck() {
    local label=$1 out rc=0 t0
    out=$LOGS/fsck-$label.log
    t0=$(now_s)
    log "cairn fsck $IMG ($label)"
    timeout 600 "$CAIRN" fsck "$IMG" >"$out" 2>&1 || rc=$?
    log "fsck ($label): exit $rc in $(fmt_dur $(($(now_s) - t0)))"
    if [[ $rc -ne 0 ]]; then
        warn "cairn fsck exited $rc after $label; its findings (per section: count, first 4; all in $out):"
        awk '/^\[/ { if (sec != "") printf "  ... %d finding(s) in %s\n", n, sec; sec = $0; n = 0; print; next }
             sec == "" { print; next }
             { n++; if (n <= 4) print }
             END { if (sec != "") printf "  ... %d finding(s) in %s\n", n, sec }' "$out" >&2
        return 1
    fi
    return 0
}

# The walker: readdir + lstat of every entry of DIR, again and again, dropping the
# kernel's caches (dentries, inodes, page cache: the image's pages too) after every
# pass and every 5000 entries (at most twice a second), until STOP exists (or the
# script is gone).
WALKER=$(cat <<'PY'
import os, sys, time
d, stop, log = sys.argv[1], sys.argv[2], sys.argv[3]
out = open(log, "w", buffering=1)
ppid = os.getppid()
def running():
    return not os.path.exists(stop) and os.getppid() == ppid
passes = stats = errors = drops = 0
last_drop = 0.0
def drop():
    global last_drop, drops
    if time.monotonic() - last_drop < 0.5:
        return
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    last_drop = time.monotonic()
    drops += 1
def error(what, e):
    global errors
    errors += 1
    if errors <= 50:
        out.write(f"ERROR {what}: {e}\n")
while running():
    try:
        with os.scandir(d) as it:
            for n, ent in enumerate(it):
                try:
                    os.lstat(ent.path)
                    stats += 1
                except OSError as e:
                    error(f"lstat {ent.name}", e)
                if n % 5000 == 4999:
                    drop()
                if n % 1000 == 999 and not running():
                    break
    except OSError as e:
        error(f"readdir {d}", e)
        time.sleep(0.1)
    passes += 1
    drop()
out.write(f"walker: {passes} passes, {stats} lstats, {drops} cache drops, {errors} errors\n")
sys.exit(1 if errors else 0)
PY
)

# The fsync-er: creates DIR/fsync-I with known bytes, fsyncs it, closes it, and only
# then appends the name to LOG; until STOP exists (or the script is gone).
FSYNCER=$(cat <<'PY'
import os, sys, time
d, stop, log, summary = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
out = open(log, "w", buffering=1)
summ = open(summary, "w", buffering=1)
ppid = os.getppid()
i = errors = 0
worst = 0.0
def content(i):
    return (f"fsync-{i} " * (1 + i % 40)).encode()
while not os.path.exists(stop) and os.getppid() == ppid:
    name = f"fsync-{i}"
    try:
        fd = os.open(os.path.join(d, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, content(i))
            t = time.monotonic()
            os.fsync(fd)
            worst = max(worst, time.monotonic() - t)
        finally:
            os.close(fd)
        out.write(name + "\n")
    except OSError as e:
        errors += 1
        if errors <= 50:
            summ.write(f"ERROR {name}: {e}\n")
    i += 1
summ.write(f"fsync-er: {i - errors} files fsync'd, {errors} errors, slowest fsync {worst:.3f} s\n")
sys.exit(1 if errors else 0)
PY
)

# The checker (after the remount): every fsync'd file holds exactly its bytes; many/
# holds exactly the names 1..N (and the fsync-er's files when they went there).
CHECK=$(cat <<'PY'
import os, sys
mp, sdir, log, nfiles, same = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "many"
def content(i):
    return (f"fsync-{i} " * (1 + i % 40)).encode()
synced = [l.strip() for l in open(log) if l.strip()]
bad = 0
for name in synced:
    i = int(name.split("-")[1])
    try:
        got = open(os.path.join(sdir, name), "rb").read()
    except OSError as e:
        got = None
        why = str(e)
    if got != content(i):
        bad += 1
        if bad <= 20:
            print(f"LOST: {name} (fsync returned 0): " + (why if got is None else f"{len(got)} bytes, not the {len(content(i))} written"))
print(f"fsync'd files: {len(synced) - bad} of {len(synced)} intact")
try:
    names = set(os.listdir(os.path.join(mp, "many")))
except OSError as e:
    print(f"many/ cannot be listed after the remount: {e}")
    sys.exit(1)
want = {str(i) for i in range(1, nfiles + 1)}
missing = sorted(want - names, key=int)
extra = names - want
if same:
    extra -= set(synced)
    # a file being created when the fsync-er stopped is not in its log
    extra = {n for n in extra if not n.startswith("fsync-")}
print(f"many/: {len(names)} entries, {len(want) - len(missing)} of {nfiles} touched names present, {len(extra)} unexpected")
if missing:
    print(f"MISSING from many/: {len(missing)} names, e.g. {missing[:10]}")
if extra:
    print(f"UNEXPECTED in many/: {sorted(extra)[:10]}")
sys.exit(1 if bad or missing or extra else 0)
PY
)

T_START=$(now_s)
log "pressure: $FILES creates, cache_mb=$CACHE_MB, commit=$COMMIT, fsync-er in $SYNC_DIR dir; image $IMG ($fstype)"
cairn_mkfs "$IMG" 4G >/dev/null || die "cairn mkfs failed"
cairn_mount "$IMG" "$MP" "$OPTS" || die "cairn mount failed"
mkdir "$MP/many"
if [[ $SYNC_DIR == many ]]; then SDIR=$MP/many; else SDIR=$MP/synced && mkdir "$SDIR"; fi
sync -f "$MP"

# ---- phase 1: the creates, with the walker and the fsync-er running
STOP=$WORK/phase1.stop
log "phase 1: seq $FILES | xargs touch in many/, a walker with drop_caches, an fsync-er"
walker=""
fsyncer=""
walked=0
fsynced=0
on_exit _stop_helpers
: >"$LOGS/fsynced.log"
if [[ $WALK -eq 1 ]]; then
    python3 -c "$WALKER" "$MP/many" "$STOP" "$LOGS/walker.log" &
    walker=$!
fi
if [[ $FSYNC -eq 1 ]]; then
    python3 -c "$FSYNCER" "$SDIR" "$STOP" "$LOGS/fsynced.log" "$LOGS/fsyncer.log" &
    fsyncer=$!
fi
t0=$(now_s)
rc=0
(cd "$MP/many" && seq "$FILES" | timeout -k 10 "$PRESSURE_TIMEOUT" xargs touch) 2>"$LOGS/touch-errors.log" || rc=$?
T_CREATE=$(($(now_s) - t0))
: >"$STOP"
walker_rc=0
fsyncer_rc=0
# (reaped: forget the pids so that the exit path never signals a reused one)
if [[ -n $walker ]]; then reap "$walker" walker || walker_rc=$?; walked=1; walker=""; fi
if [[ -n $fsyncer ]]; then reap "$fsyncer" fsync-er || fsyncer_rc=$?; fsynced=1; fsyncer=""; fi
log "phase 1: creates took $(fmt_dur "$T_CREATE") ($((FILES / (T_CREATE > 0 ? T_CREATE : 1))) files/s), exit $rc"
nerr=$(grep -c . "$LOGS/touch-errors.log" || true)
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    fail "the $FILES creates did not finish within ${PRESSURE_TIMEOUT} s"
elif [[ $rc -ne 0 || $nerr -gt 0 ]]; then
    fail "xargs touch exited $rc with $nerr error line(s); the distinct errors:"
    sed -E 's/^touch: (cannot touch|setting times of) .([0-9]+).: /touch: \1 N: /' "$LOGS/touch-errors.log" |
        sort | uniq -c | sort -rn | head -n 10 >&2
    head -n 5 "$LOGS/touch-errors.log" >&2
fi
if [[ $walked -eq 1 ]]; then
    tail -n 50 "$LOGS/walker.log" >&2
    [[ $walker_rc -eq 0 ]] || fail "the walker's readdir/lstat failed (exit $walker_rc; $LOGS/walker.log)"
fi
if [[ $fsynced -eq 1 ]]; then
    cat "$LOGS/fsyncer.log" >&2
    [[ $fsyncer_rc -eq 0 ]] || fail "the fsync-er failed (exit $fsyncer_rc; $LOGS/fsyncer.log)"
fi
"$CAIRN" stats "$MP" >"$LOGS/stats-phase1.txt" 2>&1 || warn "cairn stats failed (see $LOGS/stats-phase1.txt)"
cairn_alive "$MP" || fail "the daemon is dead or does not answer after phase 1"

# ---- phase 2: unmount, fsck, remount, check, unmount, fsck
t0=$(now_s)
cairn_unmount "$IMG" "$MP" || die "unmount after phase 1 failed (the daemon did not exit)"
log "unmount (daemon exited) took $(fmt_dur $(($(now_s) - t0)))"
pressure_fsck "phase1" || fail "fsck after phase 1 is not clean"
cairn_mount "$IMG" "$MP" "$OPTS" || die "remount failed"
if [[ $SYNC_DIR == many ]]; then SDIR=$MP/many; else SDIR=$MP/synced; fi
if out=$(python3 -c "$CHECK" "$MP" "$SDIR" "$LOGS/fsynced.log" "$FILES" "$SYNC_DIR" 2>&1); then
    printf '%s\n' "$out" >&2
    log "OK: every fsync'd file intact and all $FILES names present after the remount"
else
    printf '%s\n' "$out" >&2
    fail "files lost after a clean unmount and remount"
fi
cairn_unmount "$IMG" "$MP" || die "unmount after the check failed (the daemon did not exit)"
pressure_fsck "remount" || fail "fsck after the remount check is not clean"

log "total $(fmt_dur $(($(now_s) - T_START))) (creates $(fmt_dur "$T_CREATE")); logs in $LOGS"
if [[ $failures -gt 0 ]]; then
    echo "pressure: $failures check(s) failed ($FILES creates, cache_mb=$CACHE_MB)"
    exit 1
fi
echo "pressure: all checks passed ($FILES creates, cache_mb=$CACHE_MB, $(wc -l <"$LOGS/fsynced.log") fsync'd files)"
