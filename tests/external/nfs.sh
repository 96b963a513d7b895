#!/usr/bin/env bash
# cairn exported over NFS: NFS-Ganesha (FSAL_VFS, which serves every NFS file handle with
# name_to_handle_at/open_by_handle_at on the cairn mount) and libnfs as the client, all on
# this machine, with no kernel NFS server or client.
#
#   tests/external/nfs.sh                  the end-to-end test
#   tests/external/nfs.sh --measure [--runs N] [--files N] [--big-mib N]
#                                          copy timings: Ganesha exporting cairn vs ext4
#
# Isolation: the script re-executes itself in a private network namespace (only its own
# loopback, so Ganesha's ports 2049/20048 and the rpcbind Ganesha's NFSv3 needs are seen by
# nothing else) and a private mount namespace (a tmpfs over /run for rpcbind's socket and
# Ganesha's state; the scratch tmpfs and the mounts are invisible outside). It starts and
# stops every service itself: rpcbind, ganesha.nfsd (its own config, pid file, log and
# recovery dir under the scratch tmpfs), the cairn daemon; all go on exit (trap), and the
# namespaces with them. Protocol: NFSv3 (Debian's libnfs 4.0 cannot write more than about
# 3 KB in one NFSv4 WRITE: fixed upstream after 4.0), the client given the ports in its
# URLs (?version=3&nfsport=2049&mountport=20048).
#
# The test (Ganesha with Attr_Expiration_Time = 0 and no dirent cache, so that changes made
# on the server side show at once; fds closed by its LRU within a second):
#   tree       a tree of files (0 B to 16 MiB, three levels) copied in with nfs-cp (directories
#              made through NFS), its sha256s checked on the cairn mount, listed with nfs-ls,
#              copied out with nfs-cp and checked again
#   delete     a file the client holds open (its NFS file handle) is removed on the server
#              side: looking its name up fails with ENOENT at once, reading through the
#              held handle fails with ESTALE (once Ganesha closed its own descriptor), and
#              never returns other data
#   remount    with Ganesha running: the export is withdrawn (SIGHUP with the export taken out
#              of the config), cairn is unmounted and mounted again, the export comes back;
#              the same client process reads its held handles (files opened before) and looks
#              names up from its old root handle: same data
#   restart    Ganesha stopped, cairn remounted, Ganesha started again: the same
#              again (libnfs reconnects by itself), and a new file is written and read back
#   Then cairn is unmounted and `cairn fsck` must be clean.
# cairn is mounted from a loop device the script attaches itself (`cairn mount /dev/loopN`):
# Ganesha names the file system in its handles by its device number (blkid knows no UUID of
# cairn), and cairn's own loop device may come back with another number; see docs/nfs.md.
#
# --measure: one Ganesha exports a cairn mount (a plain `cairn mount IMAGE`) and kernel ext4
# (on a loop device over a tmpfs file); both images live on tmpfs. Times nfs-cp of a 1 GiB
# file in and out, and of a tree of 10,000 files (4 KiB to 12 KiB, 100 directories) in
# (directories made through NFS) and out, with the page cache dropped before each read;
# medians of --runs (3), printed as a table.
#
# Needs root, unshare(1), ip(8), and Debian's nfs-ganesha, nfs-ganesha-vfs and libnfs-utils
# (scripts/install-deps.sh installs them; this script tries apt-get itself if they are
# missing, and prints "nfs: SKIPPED (reason)" and exits 0 where they cannot be installed).
set -euo pipefail
# shellcheck source=tests/external/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEASURE=0
RUNS=3
FILES=10000
BIG_MIB=1024
ARGS=("$@")
while [[ $# -gt 0 ]]; do
    case $1 in
    --measure) MEASURE=1 ;;
    --runs) RUNS=$2; shift ;;
    --files) FILES=$2; shift ;;
    --big-mib) BIG_MIB=$2; shift ;;
    -h | --help) sed -n '2,48p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

require_root

# ---- packages (before the namespaces: apt-get needs the network)
GANESHA_FSAL=/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so
have_packages() {
    command -v ganesha.nfsd >/dev/null && command -v nfs-cp >/dev/null && command -v nfs-ls >/dev/null &&
        command -v rpcbind >/dev/null && compgen -G "/usr/lib/*/ganesha/libfsalvfs.so" >/dev/null
}
if [[ -z ${NFS_SH_INSIDE:-} ]] && ! have_packages; then
    echo "nfs.sh: installing nfs-ganesha nfs-ganesha-vfs libnfs-utils rpcbind (services not started)" >&2
    if ! command -v apt-get >/dev/null; then
        echo "nfs: SKIPPED (nfs-ganesha, nfs-ganesha-vfs and libnfs-utils are missing and there is no apt-get)"
        exit 0
    fi
    # As scripts/install-deps.sh: the packages' units must not start on the host.
    own_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    rc=0
    out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        nfs-ganesha nfs-ganesha-vfs libnfs-utils rpcbind iproute2 </dev/null 2>&1) || rc=$?
    [[ $own_policy -eq 0 ]] || rm -f /usr/sbin/policy-rc.d
    if [[ $rc -ne 0 ]] || ! have_packages; then
        printf '%s\n' "$out" | tail -n 5 >&2
        echo "nfs: SKIPPED (apt-get could not install nfs-ganesha, nfs-ganesha-vfs, libnfs-utils: exit $rc)"
        exit 0
    fi
fi
GANESHA_FSAL=$(compgen -G "/usr/lib/*/ganesha/libfsalvfs.so" | head -n 1 || echo "$GANESHA_FSAL")

# ---- into private network and mount namespaces
if [[ -z ${NFS_SH_INSIDE:-} ]]; then
    if ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
        echo "nfs.sh: needs unshare (util-linux) and ip (iproute2)" >&2
        exit 1
    fi
    exec unshare --net --mount --propagation private env NFS_SH_INSIDE=1 bash "$0" "${ARGS[@]}"
fi

require_cmd sha256sum flock losetup ss python3 nfs-cp nfs-ls ganesha.nfsd rpcbind
require_cairn
CLIENT_PY=$CAIRN_ROOT/tests/external/nfs-client.py

ip link set lo up
# Ganesha resolves its Bind_Addr with AI_ADDRCONFIG, which wants an address besides
# 127.0.0.1 (anything in 127/8 will do; nothing leaves the namespace).
ip addr add 127.0.0.2/8 dev lo
mount -t tmpfs -o mode=755,size=16m tmpfs /run
mkdir -p /run/mount /run/lock /run/rpcbind

NFS_PORT=2049
MNT_PORT=20048
Q="?version=3&nfsport=$NFS_PORT&mountport=$MNT_PORT"

if [[ $MEASURE -eq 1 ]]; then
    make_scratch $((BIG_MIB * 6 / 1024 + 4))g
else
    make_scratch 3g
fi
G=$SCRATCH/ganesha
mkdir -p "$G/recovery"

# ganesha_conf FILE [PATH:ID ...]: a private Ganesha config exporting each PATH (export id
# ID, NFSv3 path = PATH, NFSv4 pseudo path /exportID).
ganesha_conf() {
    local f=$1 e path id
    shift
    cat >"$f" <<EOF
NFS_CORE_PARAM {
    Protocols = 3, 4;
    NFS_Port = $NFS_PORT;
    MNT_Port = $MNT_PORT;
    Bind_Addr = 127.0.0.1;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    Plugins_Dir = $(dirname "$GANESHA_FSAL");
}
NFSV4 {
    RecoveryBackend = fs;
    RecoveryRoot = $G/recovery;
    Graceless = true;
    Only_Numeric_Owners = true;
}
MDCACHE {
    # Changes made on the server side (not through NFS) show at once: no cached
    # directory entries, and descriptors closed by the LRU within a second.
    Dir_Chunk = 0;
    FD_LWMark_Percent = 0;
    LRU_Run_Interval = 1;
}
LOG {
    Default_Log_Level = EVENT;
}
EOF
    for e in "$@"; do
        path=${e%:*}
        id=${e##*:}
        cat >>"$f" <<EOF
EXPORT {
    Export_Id = $id;
    Path = $path;
    Pseudo = /export$id;
    Protocols = 3, 4;
    Transports = TCP;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Attr_Expiration_Time = 0;
    FSAL { Name = VFS; }
}
EOF
    done
}

RPCBIND_PID="" # stopped by the on_exit entry start_rpcbind registers
export RPCBIND_PID
GANESHA_PID=""
start_rpcbind() {
    rpcbind -f -w &
    RPCBIND_PID=$!
    on_exit "stop_pid rpcbind \$RPCBIND_PID"
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -S /run/rpcbind.sock ]] && return 0
        sleep 0.1
    done
    die "rpcbind did not start"
}

# stop_pid NAME PID: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
    local name=$1 pid=${2:-} i
    [[ -n $pid ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    warn "$name ($pid) ignored SIGTERM: killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# start_ganesha CONF: run ganesha.nfsd in the foreground (in the background of this
# script) and wait until its MOUNT service answers.
start_ganesha() {
    local conf=$1 i
    ganesha.nfsd -F -f "$conf" -L "$G/ganesha.log" -p "$G/ganesha.pid" -N NIV_EVENT &
    GANESHA_PID=$!
    for ((i = 0; i < 300; i++)); do
        kill -0 "$GANESHA_PID" 2>/dev/null || { ganesha_log_tail; die "ganesha.nfsd exited at start"; }
        if ss -ltn "sport = :$NFS_PORT" | grep -q LISTEN && ss -ltn "sport = :$MNT_PORT" | grep -q LISTEN; then
            return 0
        fi
        sleep 0.1
    done
    ganesha_log_tail
    die "ganesha.nfsd is not listening on $NFS_PORT and $MNT_PORT after 30 s"
}
stop_ganesha() {
    stop_pid ganesha.nfsd "$GANESHA_PID"
    GANESHA_PID=""
}
on_exit "stop_ganesha"

ganesha_log_tail() {
    warn "ganesha.log (last 25 lines, without its D-Bus and Kerberos complaints):"
    grep -v -E 'DBUS|krb5|keytab|principal nfs|RADOS' "$G/ganesha.log" 2>/dev/null | tail -n 25 >&2 || true
}

# wait_for_nfs URL: until nfs-ls of URL succeeds (30 s).
wait_for_nfs() {
    local url=$1 i
    for ((i = 0; i < 300; i++)); do
        nfs-ls "$url" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    ganesha_log_tail
    return 1
}

# ---- the client that holds handles: a coprocess speaking nfs-client.py's line protocol
CLIENT_PID=""
start_client() {
    coproc NFSC { exec python3 "$CLIENT_PY" "$1"; }
    CLIENT_PID=$NFSC_PID
    on_exit "stop_pid nfs-client \$CLIENT_PID"
    local r
    read -r -t 30 r <&"${NFSC[0]}" || r="(nothing)"
    [[ $r == ready ]] || die "nfs-client.py did not start: $r"
}
# ask CMD...: one command to the client; the reply in REPLY.
ask() {
    echo "$*" >&"${NFSC[1]}"
    if ! read -r -t 120 REPLY <&"${NFSC[0]}"; then
        REPLY="err 110 no answer from nfs-client.py"
    fi
}

drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

# sums DIR: "sha256  ./path" of every file under DIR, sorted.
sums() {
    (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}

# now_ns / elapsed T0: seconds since T0 (from now_ns), 3 decimals.
now_ns() { date +%s%N; }
elapsed() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

# ======================================================================================
# --measure
# ======================================================================================
if [[ $MEASURE -eq 1 ]]; then
    require_cmd mkfs.ext4
    CIMG=$SCRATCH/cairn.img
    CMP=$SCRATCH/cairn
    EMP=$SCRATCH/ext4
    img_size=$((BIG_MIB * 2 + 2048))M
    cairn_mkfs "$CIMG" "$img_size" --quiet
    cairn_mount "$CIMG" "$CMP" || die "cairn mount failed"
    ext4_loop "$SCRATCH/ext4.img" "$img_size" "$EMP"
    ganesha_conf "$G/ganesha.conf" "$CMP:1" "$EMP:2"
    start_rpcbind
    start_ganesha "$G/ganesha.conf"
    wait_for_nfs "nfs://127.0.0.1$CMP$Q" || die "the cairn export does not answer"
    wait_for_nfs "nfs://127.0.0.1$EMP$Q" || die "the ext4 export does not answer"

    log "sources: a $BIG_MIB MiB file and $FILES files in $((FILES / 100)) directories"
    SRC=$SCRATCH/src
    mkdir -p "$SRC/tree"
    dd if=/dev/urandom of="$SRC/big" bs=1M count="$BIG_MIB" status=none
    head -c 16M /dev/urandom >"$SCRATCH/blob"
    ndirs=$(((FILES + 99) / 100))
    for ((d = 0; d < ndirs; d++)); do mkdir -p "$SRC/tree/d$d"; done
    python3 - "$SRC/tree" "$FILES" "$SCRATCH/blob" <<'EOF'
import sys
root, n, blob = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "rb").read()
for i in range(n):
    size = 4096 + (i * 7919) % 8193
    off = (i * 104729) % (len(blob) - size)
    with open(f"{root}/d{i // 100}/f{i}", "wb") as f:
        f.write(blob[off:off + size])
EOF
    rm -f "$SCRATCH/blob"
    sums "$SRC/tree" >"$SCRATCH/tree.sums"
    big_sum=$(sha256sum <"$SRC/big" | cut -d' ' -f1)
    mapfile -t tree_files < <(cd "$SRC/tree" && find . -type f | LC_ALL=C sort | sed 's|^\./||')

    declare -A T
    for ((run = 1; run <= RUNS; run++)); do
        for fs in cairn ext4; do
            if [[ $fs == cairn ]]; then mp=$CMP; else mp=$EMP; fi
            url="nfs://127.0.0.1$mp"
            log "run $run/$RUNS: $fs"
            # 1 GiB file, in and out
            drop_caches
            t0=$(now_ns)
            nfs-cp "$SRC/big" "$url/big$Q" >/dev/null || fail "$fs: nfs-cp of the big file in"
            T[$fs,big_in,$run]=$(elapsed "$t0")
            drop_caches
            t0=$(now_ns)
            nfs-cp "$url/big$Q" "$SCRATCH/big.out" >/dev/null || fail "$fs: nfs-cp of the big file out"
            T[$fs,big_out,$run]=$(elapsed "$t0")
            [[ $(sha256sum <"$SCRATCH/big.out" | cut -d' ' -f1) == "$big_sum" ]] ||
                fail "$fs: the big file came back different"
            rm -f "$SCRATCH/big.out" "$mp/big"
            # the tree, in (directories made through NFS) and out
            drop_caches
            start_client "$url$Q"
            t0=$(now_ns)
            ask mkdir /tree
            for ((d = 0; d < ndirs; d++)); do
                ask mkdir "/tree/d$d"
                [[ $REPLY == ok ]] || { fail "$fs: mkdir /tree/d$d: $REPLY"; break; }
            done
            for f in "${tree_files[@]}"; do
                nfs-cp "$SRC/tree/$f" "$url/tree/$f$Q" >/dev/null || { fail "$fs: nfs-cp $f in"; break; }
            done
            T[$fs,tree_in,$run]=$(elapsed "$t0")
            stop_pid nfs-client "$CLIENT_PID"
            drop_caches
            rm -rf "$SCRATCH/tout"
            for ((d = 0; d < ndirs; d++)); do mkdir -p "$SCRATCH/tout/d$d"; done
            t0=$(now_ns)
            for f in "${tree_files[@]}"; do
                nfs-cp "$url/tree/$f$Q" "$SCRATCH/tout/$f" >/dev/null || { fail "$fs: nfs-cp $f out"; break; }
            done
            T[$fs,tree_out,$run]=$(elapsed "$t0")
            sums "$SCRATCH/tout" | cmp -s - "$SCRATCH/tree.sums" || fail "$fs: the tree came back different"
            rm -rf "$SCRATCH/tout" "$mp/tree"
            sync -f "$mp"
            log "  big in ${T[$fs,big_in,$run]} s, out ${T[$fs,big_out,$run]} s; tree in ${T[$fs,tree_in,$run]} s, out ${T[$fs,tree_out,$run]} s"
        done
    done

    median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    echo
    echo "NFS-Ganesha 4.3 (FSAL_VFS, NFSv3 over TCP on loopback) + libnfs 4.0 nfs-cp; images on tmpfs;"
    echo "median of $RUNS runs, seconds (rate); page cache dropped before each copy"
    printf '%-34s %22s %22s %8s\n' "copy" "cairn" "ext4" "cairn/ext4"
    for what in big_in big_out tree_in tree_out; do
        case $what in
        big_in) label="$BIG_MIB MiB file in (write)" ;;
        big_out) label="$BIG_MIB MiB file out (read)" ;;
        tree_in) label="$FILES-file tree in (write)" ;;
        tree_out) label="$FILES-file tree out (read)" ;;
        esac
        row=()
        for fs in cairn ext4; do
            vals=()
            for ((run = 1; run <= RUNS; run++)); do vals+=("${T[$fs,$what,$run]}"); done
            m=$(median "${vals[@]}")
            if [[ $what == big_* ]]; then
                rate=$(awk -v m="$m" -v s="$BIG_MIB" 'BEGIN { printf "%.0f MiB/s", s / m }')
            else
                rate=$(awk -v m="$m" -v n="$FILES" 'BEGIN { printf "%.0f files/s", n / m }')
            fi
            row+=("$(printf '%.2f (%s)' "$m" "$rate")")
            eval "med_$fs=$m"
        done
        # shellcheck disable=SC2154 # set by the eval above
        ratio=$(awk -v c="$med_cairn" -v e="$med_ext4" 'BEGIN { printf "%.2f", c / e }')
        printf '%-34s %22s %22s %8s\n' "$label" "${row[0]}" "${row[1]}" "$ratio"
    done
    stop_ganesha
    cairn_unmount "$CIMG" "$CMP" || fail "cairn unmount"
    cairn_fsck "$CIMG" "the measurement" || fail "cairn fsck after the measurement"
    if [[ $failures -gt 0 ]]; then
        echo "nfs --measure: $failures check(s) failed"
        exit 1
    fi
    echo "nfs --measure: done"
    exit 0
fi

# ======================================================================================
# The test
# ======================================================================================
IMG=$SCRATCH/fs.img
MP=$SCRATCH/mnt
cairn_mkfs "$IMG" 1G --quiet
LOOP=$(losetup -f --show "$IMG")
on_exit "losetup -d '$LOOP' 2>/dev/null"
# (The exit-path unmount is registered after the loop device's detach, so it runs first.)
cairn_mount "$LOOP" "$MP" || die "cairn mount $LOOP failed"
dev_before=$(mountpoint -d "$MP")
ganesha_conf "$G/with-export.conf" "$MP:1"
ganesha_conf "$G/no-export.conf"
cp "$G/with-export.conf" "$G/ganesha.conf"
start_rpcbind
start_ganesha "$G/ganesha.conf"
URL="nfs://127.0.0.1$MP"
wait_for_nfs "$URL/$Q" || die "the export does not answer"
log "ganesha.nfsd $GANESHA_PID exports $MP (cairn on $LOOP, device $dev_before) on 127.0.0.1:$NFS_PORT"

# ---- tree: in with nfs-cp, checked on cairn, out with nfs-cp, checked again
SRC=$SCRATCH/src
mkdir -p "$SRC/a/b/c" "$SRC/e"
head -c 20M /dev/urandom >"$SCRATCH/blob"
i=0
for n in 0 1 511 4095 4096 4097 65536 131073 1048576 1048583 5242880 16777219; do
    for d in . a a/b/c; do
        head -c $((n + i)) "$SCRATCH/blob" >"$SRC/$d/size$n"
        i=$((i + 1))
    done
done
for ((i = 0; i < 100; i++)); do
    dd if="$SCRATCH/blob" of="$SRC/e/small$i" bs=1 skip=$((i * 7919)) count=$(((i * 104729) % 9000)) status=none
done
echo "the file that goes" >"$SRC/del"
sums "$SRC" >"$SCRATCH/src.sums"
nfiles=$(wc -l <"$SCRATCH/src.sums")

start_client "$URL/$Q"
for d in tree tree/a tree/a/b tree/a/b/c tree/e; do
    ask mkdir "/$d"
    [[ $REPLY == ok ]] || fail "mkdir /$d through NFS: $REPLY"
done
log "copying $nfiles files in with nfs-cp"
t0=$(now_ns)
while read -r _ f; do
    f=${f#./}
    nfs-cp "$SRC/$f" "$URL/tree/$f$Q" >/dev/null || fail "nfs-cp $f in"
done <"$SCRATCH/src.sums"
log "in: $(elapsed "$t0") s"
sums "$MP/tree" >"$SCRATCH/in.sums"
if cmp -s "$SCRATCH/src.sums" "$SCRATCH/in.sums"; then
    log "OK: the tree on the cairn mount = the source ($nfiles sha256s)"
else
    fail "the tree copied in differs on cairn:"
    diff "$SCRATCH/src.sums" "$SCRATCH/in.sums" | head -n 20 >&2 || true
fi
listed=$(nfs-ls "$URL/tree/e$Q" | awk '{ print $NF }' | grep -c '^small' || true)
[[ $listed -eq 100 ]] || fail "nfs-ls of tree/e lists $listed small files, not 100"
ask ls /tree/a/b/c
want="$(cd "$SRC/a/b/c" && find . -mindepth 1 -maxdepth 1 | sed 's|^\./||' | LC_ALL=C sort | paste -sd,)"
[[ $REPLY == "$(find "$SRC/a/b/c" -mindepth 1 -maxdepth 1 | wc -l) $want" ]] || fail "ls /tree/a/b/c through NFS: $REPLY"

drop_caches
log "copying the tree out with nfs-cp"
OUT=$SCRATCH/out
t0=$(now_ns)
while read -r _ f; do
    f=${f#./}
    mkdir -p "$OUT/$(dirname "$f")"
    nfs-cp "$URL/tree/$f$Q" "$OUT/$f" >/dev/null || fail "nfs-cp $f out"
done <"$SCRATCH/src.sums"
log "out: $(elapsed "$t0") s"
if sums "$OUT" | cmp -s - "$SCRATCH/src.sums"; then
    log "OK: the tree copied out = the source"
else
    fail "the tree copied out differs"
fi
rm -rf "$OUT"

# ---- delete on the server side: ENOENT by name, ESTALE through a held handle
del_sum=$(sha256sum <"$SRC/del" | cut -d' ' -f1)
ask hold del /tree/del
[[ $REPLY == ok ]] || fail "hold /tree/del: $REPLY"
ask sum del
[[ $REPLY == "$del_sum" ]] || fail "read /tree/del through its handle: $REPLY"
rm "$MP/tree/del"
ask cat /tree/del
if [[ $REPLY == "err 2 "* ]]; then
    log "OK: the name of a file removed on the server: ENOENT through NFS"
else
    fail "cat of /tree/del after the server removed it: '$REPLY', not ENOENT"
fi
stale=0
for ((i = 0; i < 60; i++)); do
    drop_caches
    ask sum del
    case $REPLY in
    "err 116 "*) stale=1; break ;;
    "$del_sum") ;; # Ganesha still has the file open (as a local process could): the old data
    *) fail "the held handle of the removed file read '$REPLY'"; break ;;
    esac
    sleep 0.5
done
if [[ $stale -eq 1 ]]; then
    log "OK: the held handle of the removed file: ESTALE after $i tries"
else
    fail "the held handle of the removed file never went stale: $REPLY"
fi
ask drop del

# ---- remount cairn under a running Ganesha (export withdrawn and put back with SIGHUP)
check_held() {
    local what=$1 f want
    for f in size1048583 a/b/c/size16777219 e/small7; do
        want=$(awk -v f="./$f" '$2 == f { print $1 }' "$SCRATCH/src.sums")
        ask sum "$f"
        [[ $REPLY == "$want" ]] || fail "$what: read of $f through the handle held since before: $REPLY"
        ask cat "/tree/$f"
        [[ $REPLY == "$want" ]] || fail "$what: $f looked up from the old root handle: $REPLY"
    done
    ask ls /tree/a/b/c
    [[ $REPLY == "$(find "$SRC/a/b/c" -mindepth 1 -maxdepth 1 | wc -l) $want_c" ]] ||
        fail "$what: ls /tree/a/b/c: $REPLY"
}
want_c=$want
for f in size1048583 a/b/c/size16777219 e/small7; do
    ask hold "$f" "/tree/$f"
    [[ $REPLY == ok ]] || fail "hold /tree/$f: $REPLY"
done
check_held "before the remount"

remount_cairn() {
    local i
    for ((i = 0; i < 300; i++)); do
        "$CAIRN" umount "$MP" 2>/dev/null && break
        sleep 0.1
    done
    is_mounted "$MP" && { fail "cairn umount: still busy after 30 s"; return 1; }
    wait_daemon_exit "$LOOP" "$MP" || return 1
    drop_caches
    "$CAIRN" mount "$LOOP" "$MP" -o allow_other,default_permissions || { fail "cairn mount again"; return 1; }
    [[ $(mountpoint -d "$MP") == "$dev_before" ]] || warn "the device number changed: held handles will be stale"
}

log "remount: withdrawing the export (SIGHUP), cairn umount + mount, export back (SIGHUP)"
cp "$G/no-export.conf" "$G/ganesha.conf"
kill -HUP "$GANESHA_PID"
remount_cairn || die "the remount failed"
cp "$G/with-export.conf" "$G/ganesha.conf"
kill -HUP "$GANESHA_PID"
wait_for_nfs "$URL/$Q" || fail "the export did not come back after SIGHUP"
check_held "after a remount under a running Ganesha"
[[ $failures -eq 0 ]] && log "OK: held handles and the old root handle read the same data after the remount"

# ---- restart Ganesha, with cairn remounted while it is down
log "restart: stop ganesha.nfsd, cairn umount + mount, start ganesha.nfsd"
stop_ganesha
remount_cairn || die "the remount failed"
start_ganesha "$G/ganesha.conf"
wait_for_nfs "$URL/$Q" || fail "the export did not come back after the restart"
check_held "after a Ganesha restart"
head -c 3000000 "$SCRATCH/blob" >"$SCRATCH/new"
nfs-cp "$SCRATCH/new" "$URL/tree/new$Q" >/dev/null || fail "nfs-cp of a new file after the restart"
ask cat /tree/new
[[ $REPLY == "$(sha256sum <"$SCRATCH/new" | cut -d' ' -f1)" ]] || fail "the new file read back: $REPLY"
cmp -s "$SCRATCH/new" "$MP/tree/new" || fail "the new file on cairn differs"
[[ $failures -eq 0 ]] && log "OK: the same after a Ganesha restart, and a new file written"

# ---- wind down: client, Ganesha, cairn; fsck
stop_pid nfs-client "$CLIENT_PID"
stop_ganesha
cairn_unmount "$LOOP" "$MP" || fail "cairn unmount"
cairn_fsck "$IMG" "the NFS test" || fail "cairn fsck after the NFS test"

if [[ $failures -gt 0 ]]; then
    ganesha_log_tail
    echo "nfs: $failures check(s) failed"
    exit 1
fi
echo "nfs: all checks passed (Ganesha + libnfs: $nfiles files in and out, delete, remount, restart)"
