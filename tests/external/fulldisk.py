#!/usr/bin/env python3
"""A full disk through a real cairn mount (issue 50): a model-based harness and eight
regression cases. Python 3.11, standard library only; run as root (it mounts).
tests/external/fulldisk.sh runs them as a suite.

  fulldisk.py run --seed S --size 96M [--opts a=b,c] [--kill] [--timeout SEC]
                  [--writers buffered,direct,mmap,appends] [--strict-write-enospc]
                  [--strict-reader-close] [--damage]
  fulldisk.py case N          (N = 1..8, or "all")
  common options: --cairn PATH (default $CAIRN or target/release/cairn)
                  --workdir DIR (a scratch directory, e.g. a private tmpfs; without it a
                  tmpfs is mounted on a fresh /tmp/fulldisk.XXXXXX and removed at exit;
                  KEEP_FAILED=1 keeps a failed run's image, logs and tmpfs)

The harness (`run`): a fresh image of --size in the scratch tmpfs, mounted with -o --opts;
a file "old" written and fsync'd before the fill; 2-4 writer processes (kinds and count
chosen by the seed, or --writers) write until each stops on an error:
  buffered  pwrite of 1 B..1 MiB chunks to one file, fsync after each;
  direct    O_DIRECT pwrite (buffer from mmap, 4 KiB-aligned sizes and offsets), fsync;
  mmap      ftruncate to extend, store the chunk through a MAP_SHARED mapping,
            msync(MS_SYNC), fsync (each chunk in a forked child, so a SIGBUS is seen);
  appends   O_APPEND writes of 1..20,000 bytes to 16 small files in turn (a file that
            reaches 256 KiB is replaced by a new one), fsync after each.
Content is a function of (seed, file, offset). A chunk is acknowledged once its write,
msync and fsync all returned success: the writer then appends "ack FILE OFF LEN" to its
log outside the mount and fsyncs the log. On an error the writer logs the call and errno
("err CALL ERRNO FILE OFF LEN"; a store that dies of a signal logs SIGBUS), makes at most
3 more attempts and exits; a writer that never fails stops at --timeout or after 3x the
image size ("stop deadline|bound"; either fails the run). A reader meanwhile reads every file (and "old") in a
loop and checks a sample of acknowledged chunks.

The run FAILS when: an acknowledged chunk does not read back byte-identical (live, after
the writers stopped; and after `cairn umount` + mount, or with --kill after SIGKILL of
the daemon + lazy unmount + mount, i.e. journal replay); a file is shorter than its
largest acknowledged end; a size stat showed shrinks across drop_caches or (without
--kill) across the unmount; the reader's open, read or readdir failed, or "old" or a
sampled chunk read back different, during the run; a writer's call failed with anything
but ENOSPC (SIGBUS from an mmap store allowed); a writer hung or crashed; unmount, mount
or `cairn fsck` (must exit 0) failed. Reported without failing the run (each has a
--strict option): a buffered writer (buffered, appends) stopped by fsync/close rather
than write(); a failed close() of the reader's read-only descriptor of the mmap writer's
file (the kernel's FUSE flush hands a failed write-back to whichever close comes first,
and an mmap store cannot be refused before its write-back; such a close of any other
writer's file fails the run). --damage checks the checker: it zeroes 4 KiB of one
acknowledged chunk and cuts another file below its acknowledged end before the unmount,
and passes only if the checks after the remount find both.

One line per run on stdout: "fulldisk run: seed= size= opts= kill= writers= acked=
enospc=(calls that said ENOSPC) [other-errors=] [reader-errors=] stops=[writer:call:errno]
time= [notes=] PASS|FAIL: reasons"; exit 1 on failure.

The cases (`case N`) reproduce the seven items of issue 50 and generic/299 (see each caseN's docstring
and fulldisk.sh); each prints "fulldisk case N: PASS (t): what happened" or
"fulldisk case N: FAIL (t): reasons" and exits 1 on failure.
"""
# The parts: fulldisk_common.py (content, sizes, errno names), fulldisk_mount.py (mounts,
# scratch, cleanup), fulldisk_harness.py (writers, reader, checks, one run),
# fulldisk_cases.py (the cases). Run as a script, this file's directory is on
# sys.path; python3 -P or PYTHONSAFEPATH leave it out, so it is put there here.

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from fulldisk_cases import CASES, run_case  # noqa: E402
from fulldisk_harness import KINDS, harness, reader_main, writer_main  # noqa: E402
from fulldisk_mount import Fail, install_cleanup  # noqa: E402

# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def main():
    default_cairn = os.environ.get("CAIRN") or os.path.join(HERE, "..", "..", "target", "release", "cairn")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--cairn", default=default_cairn)
        p.add_argument("--workdir", help="scratch directory (a tmpfs); default: mount one on /tmp/fulldisk.XXXXXX")

    r = sub.add_parser("run", help="one harness run")
    common(r)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--size", default="96M")
    r.add_argument("--opts", default="", help="extra -o mount options")
    r.add_argument("--kill", action="store_true", help="SIGKILL the daemon instead of cairn umount")
    r.add_argument("--writers", default="", help="comma-separated kinds (default: chosen by the seed)")
    r.add_argument("--timeout", type=int, default=120, help="writers' deadline, seconds")
    r.add_argument("--strict-write-enospc", action="store_true",
                   help="a buffered writer stopped by fsync/close rather than write() fails the run")
    r.add_argument("--strict-reader-close", action="store_true",
                   help="a failed close() of the reader's read-only descriptor of the mmap writer's file fails the run")
    r.add_argument("--damage", action="store_true",
                   help="checks the checker: damage acknowledged data before the unmount; passes iff found")
    c = sub.add_parser("case", help="one regression case (1..8 or all)")
    common(c)
    c.add_argument("n")
    c.add_argument("--timeout", type=int, default=120, help="case 1: the writers' deadline, seconds")
    w = sub.add_parser("writer")
    for opt in ("--kind", "--mnt", "--name", "--log"):
        w.add_argument(opt, required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--deadline", type=float, required=True)
    w.add_argument("--max-bytes", type=int, required=True)
    rd = sub.add_parser("reader")
    for opt in ("--mnt", "--log", "--stop"):
        rd.add_argument(opt, required=True)
    rd.add_argument("--seed", type=int, required=True)
    rd.add_argument("--old-len", type=int, required=True)
    rd.add_argument("--deadline", type=float, required=True)
    rd.add_argument("--logs", nargs="*", default=[])
    a = ap.parse_args()

    if a.cmd == "writer":
        return writer_main(a)
    if a.cmd == "reader":
        return reader_main(a)
    if os.geteuid() != 0:
        print("fulldisk.py must run as root (it mounts file systems)", file=sys.stderr)
        return 2
    a.cairn = os.path.abspath(a.cairn)
    if not os.access(a.cairn, os.X_OK):
        print(f"no cairn binary at {a.cairn}", file=sys.stderr)
        return 2
    install_cleanup()
    if a.cmd == "run":
        kinds = [k for k in a.writers.split(",") if k]
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            print(f"unknown writer kinds {bad}; known: {','.join(KINDS)}", file=sys.stderr)
            return 2
        try:
            ok, line = harness(a, a.seed, a.size, a.opts, a.kill, kinds=kinds,
                               strict=a.strict_write_enospc, timeout=a.timeout, damage=a.damage,
                               strict_close=a.strict_reader_close)
        except Fail as e:
            ok, line = False, f"fulldisk run: seed={a.seed} size={a.size} FAIL: {e}"
        print(line, flush=True)
        return 0 if ok else 1
    ns = list(CASES) if a.n == "all" else [int(a.n)]
    if any(n not in CASES for n in ns):
        print("case must be 1..8 or all", file=sys.stderr)
        return 2
    results = [run_case(a, n) for n in ns]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
