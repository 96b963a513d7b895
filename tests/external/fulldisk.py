#!/usr/bin/env python3
"""A full disk through a real cairn mount (issue 50): a model-based harness and seven
regression cases. Python 3.11, standard library only; run as root (it mounts).
tests/external/fulldisk.sh runs them as a suite.

  fulldisk.py run --seed S --size 96M [--opts a=b,c] [--kill] [--timeout SEC]
                  [--writers buffered,direct,mmap,appends] [--strict-write-enospc]
                  [--strict-reader-close] [--damage]
  fulldisk.py case N          (N = 1..7, or "all")
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

The cases (`case N`) reproduce the seven items of issue 50 (see each caseN's docstring
and fulldisk.sh); each prints "fulldisk case N: PASS (t): what happened" or
"fulldisk case N: FAIL (t): reasons" and exits 1 on failure.
"""

import argparse
import atexit
import errno
import fcntl
import functools
import mmap
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

MiB = 1 << 20
KiB = 1 << 10
BLOCK = 1 << 16  # content is generated in 64 KiB blocks
KINDS = ("buffered", "direct", "mmap", "appends")
RETRIES_AFTER_ERROR = 3
APPEND_FILES = 16  # appends: files written in turn
APPEND_RETIRE = 256 * KiB  # appends: a file this large is replaced by a new one


def errname(e):
    if isinstance(e, OSError):
        e = e.errno
    if e is None:
        return "E?"
    return errno.errorcode.get(e, str(e))


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": KiB, "M": MiB, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def fmt_bytes(n):
    if n >= MiB:
        return f"{n / MiB:.1f}MiB"
    if n >= KiB:
        return f"{n / KiB:.1f}KiB"
    return f"{n}B"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Deterministic content
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=48)
def _block(seed, name, k):
    return random.Random(f"{seed}:{name}:{k}").randbytes(BLOCK)


def content(seed, name, off, n):
    """Bytes [off, off+n) of file `name` for `seed`."""
    out = bytearray()
    pos, end = off, off + n
    while pos < end:
        k = pos // BLOCK
        s = pos - k * BLOCK
        e = min(BLOCK, end - k * BLOCK)
        out += _block(seed, name, k)[s:e]
        pos = k * BLOCK + e
    return bytes(out)


def pread_full(fd, n, off):
    parts = []
    got = 0
    while got < n:
        b = os.pread(fd, min(n - got, 4 * MiB), off + got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def describe_mismatch(off, want, got):
    """Why `got` (read at off) is not `want`."""
    if len(got) < len(want) and got == want[: len(got)]:
        return f"short: the file ends at {off + len(got)}"
    i = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), len(got))
    at = off + i
    tail = got[i:]
    where = f"byte {at}" + (" (a 4 KiB boundary)" if at % 4096 == 0 else "")
    if tail and tail.count(0) == len(tail):
        return f"zeros from {where}" + ("" if len(got) == len(want) else f", the file ends at {off + len(got)}")
    return f"differs from {where}"


# ---------------------------------------------------------------------------------------
# Cleanup: every mount, daemon, tmpfs and child process this process made
# ---------------------------------------------------------------------------------------

_MOUNTS = []  # Mount objects that may be mounted
_PROCS = []  # Popen objects (writers, reader)
_TMPFS = []  # directories we mounted a tmpfs on
_CLEANED = False
_KEPT = []  # scratch directories kept for inspection (KEEP_FAILED=1)


def _cleanup():
    global _CLEANED
    if _CLEANED:
        return
    _CLEANED = True
    for p in _PROCS:
        if p.poll() is None:
            try:
                p.kill()
                p.wait(timeout=20)
            except Exception:
                pass
    for m in reversed(_MOUNTS):
        try:
            m.force_cleanup()
        except Exception as e:
            log(f"cleanup of {m.mnt}: {e!r}")
    for d in reversed(_TMPFS):
        if _KEPT:
            log(f"KEEP_FAILED=1: leaving {d} mounted for inspection (umount {d} when done)")
            continue
        if is_mounted(d):
            if subprocess.run(["umount", d], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", d], capture_output=True)
        try:
            os.rmdir(d)
        except OSError:
            pass


def _on_signal(sig, _frame):
    raise SystemExit(128 + sig)


def install_cleanup():
    atexit.register(_cleanup)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(s) != signal.SIG_IGN:
            signal.signal(s, _on_signal)


# ---------------------------------------------------------------------------------------
# Mount helpers
# ---------------------------------------------------------------------------------------


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split(" ")[4].encode().decode("unicode_escape")
            if mp == path:
                return True
    return False


def daemon_pids(mnt):
    """Pids of `cairn mount IMAGE MNT ...` processes serving exactly MNT."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv]
        if len(argv) >= 4 and os.path.basename(argv[0]) == "cairn" and argv[1] == "mount" and mnt in argv[2:]:
            pids.append(int(d))
    return pids


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def image_free(img):
    try:
        fd = os.open(img, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run_cmd(argv, timeout=120):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return r.returncode, (r.stdout + r.stderr).strip()
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout}s"


class Fail(Exception):
    """A setup step failed: the run or case fails with this message."""


class Mount:
    def __init__(self, cairn, img, mnt):
        self.cairn, self.img, self.mnt = cairn, os.path.abspath(img), os.path.abspath(mnt)
        self.pid = None
        os.makedirs(self.mnt, exist_ok=True)

    def mkfs(self, size):
        rc, out = run_cmd([self.cairn, "mkfs", self.img, "--size", size, "--force", "--quiet"], 120)
        if rc != 0:
            raise Fail(f"cairn mkfs failed ({rc}): {out[-300:]}")

    def mount(self, opts=""):
        argv = [self.cairn, "mount", self.img, self.mnt] + (["-o", opts] if opts else [])
        if self not in _MOUNTS:
            _MOUNTS.append(self)
        rc, out = run_cmd(argv, 90)
        if rc != 0:
            raise Fail(f"cairn mount -o '{opts}' failed ({rc}): {out[-400:]}")
        t0 = time.monotonic()
        while not is_mounted(self.mnt):
            if time.monotonic() - t0 > 30:
                raise Fail(f"{self.mnt} is not mounted 30 s after cairn mount returned")
            time.sleep(0.05)
        pids = daemon_pids(self.mnt)
        if not pids:
            raise Fail(f"mounted, but no `cairn mount ... {self.mnt}` process found")
        self.pid = pids[0]

    def _wait_released(self, limit):
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if not (self.pid and pid_alive(self.pid)) and not is_mounted(self.mnt) and image_free(self.img):
                return True
            time.sleep(0.05)
        return False

    def umount(self):
        """`cairn umount`; returns None or an error message. Always leaves it unmounted."""
        rc, out = run_cmd([self.cairn, "umount", "--timeout", "120", self.mnt], 150)
        if rc == 0 and self._wait_released(60):
            self.pid = None
            return None
        msg = f"cairn umount failed ({rc}): {out[-300:]}" if rc else "daemon still running after cairn umount"
        self.force_cleanup()
        return msg

    def kill(self):
        """SIGKILL the daemon, unmount the dead mount, wait until the image is free."""
        if self.pid and pid_alive(self.pid):
            os.kill(self.pid, signal.SIGKILL)
        t0 = time.monotonic()
        while self.pid and pid_alive(self.pid) and time.monotonic() - t0 < 30:
            time.sleep(0.02)
        self._lazy_unmount()
        if not self._wait_released(60):
            raise Fail("after SIGKILL: the mount or the image's lock did not go away in 60 s")
        self.pid = None

    def _lazy_unmount(self):
        if is_mounted(self.mnt):
            rc, _ = run_cmd(["umount", "-l", self.mnt], 30)
            if rc != 0 and shutil.which("fusermount3"):
                run_cmd(["fusermount3", "-u", "-z", self.mnt], 30)

    def force_cleanup(self):
        """Exit path: polite, then forceful; kills only this mount's own daemon."""
        if is_mounted(self.mnt):
            rc, _ = run_cmd([self.cairn, "umount", "--timeout", "30", self.mnt], 40)
            if rc != 0:
                self._lazy_unmount()
        if self.pid and not self._wait_released(20) and pid_alive(self.pid):
            log(f"killing cairn daemon {self.pid} (serving {self.mnt})")
            os.kill(self.pid, signal.SIGKILL)
            self._wait_released(20)
        self.pid = None

    def fsck(self):
        """None if `cairn fsck` exits 0, else a message."""
        rc, out = run_cmd([self.cairn, "fsck", self.img], 600)
        if rc == 0:
            return None
        tail = " | ".join(out.splitlines()[-6:])
        return f"cairn fsck exited {rc}: {tail}"

    def df(self):
        st = os.statvfs(self.mnt)
        return st.f_bavail * st.f_frsize


# ---------------------------------------------------------------------------------------
# Scratch space
# ---------------------------------------------------------------------------------------


class Scratch:
    """A private directory on a tmpfs for one run or case."""

    def __init__(self, workdir, label):
        if workdir:
            self.base = None
            self.dir = tempfile.mkdtemp(prefix=f"{label}.", dir=workdir)
        else:
            self.base = tempfile.mkdtemp(prefix="fulldisk.", dir="/tmp")
            os.chmod(self.base, 0o755)
            _TMPFS.append(self.base)
            rc, out = run_cmd(["mount", "-t", "tmpfs", "-o", "size=4g,mode=755", "tmpfs", self.base], 30)
            if rc != 0:
                raise Fail(f"mount tmpfs on {self.base}: {out}")
            self.dir = os.path.join(self.base, label)
            os.makedirs(self.dir)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def done(self, ok):
        """Frees the images (kept when KEEP_FAILED=1 and the run failed)."""
        if not ok and os.environ.get("KEEP_FAILED") == "1":
            log(f"KEEP_FAILED=1: keeping {self.dir}")
            _KEPT.append(self.dir)
            return
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Writers (each its own process: `fulldisk.py writer ...`)
# ---------------------------------------------------------------------------------------


class WriterBase:
    def __init__(self, a):
        self.a = a
        self.seed = a.seed
        self.rnd = random.Random(f"{a.seed}:{a.name}:writer")
        self.name = a.name
        self.path = os.path.join(a.mnt, a.name)
        self.fd = None
        self.off = 0
        self.pending = None

    def open(self):
        pass

    def finish(self):
        """Close; returns a list of records."""
        if self.fd is None:
            return []
        try:
            os.close(self.fd)
        except OSError as e:
            return [("err", "close", errname(e), self.name, self.off, 0)]
        finally:
            self.fd = None
        return []


class Buffered(WriterBase):
    def open(self):
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)

    def step(self):
        if self.pending is None:
            self.pending = self.rnd.randint(1, MiB)
        n, off = self.pending, self.off
        data = content(self.seed, self.name, off, n)
        call = "write"
        try:
            done = 0
            while done < n:
                w = os.pwrite(self.fd, data[done:], off + done)
                if w <= 0:
                    raise OSError(errno.EIO, f"pwrite returned {w}")
                done += w
            call = "fsync"
            os.fsync(self.fd)
        except OSError as e:
            return [("err", call, errname(e), self.name, off, n)]
        self.off += n
        self.pending = None
        return [("ack", self.name, off, n)]


class Direct(WriterBase):
    def open(self):
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        self.buf = mmap.mmap(-1, MiB)  # page-aligned

    def step(self):
        if self.pending is None:
            self.pending = 4096 * self.rnd.randint(1, 256)
        n, off = self.pending, self.off
        self.buf[0:n] = content(self.seed, self.name, off, n)
        view = memoryview(self.buf)
        call = "write"
        try:
            done = 0
            while done < n:
                w = os.pwrite(self.fd, view[done:n], off + done)
                if w <= 0:
                    raise OSError(errno.EIO, f"pwrite returned {w}")
                done += w
            call = "fsync"
            os.fsync(self.fd)
        except OSError as e:
            return [("err", call, errname(e), self.name, off, n)]
        finally:
            view.release()
        self.off += n
        self.pending = None
        return [("ack", self.name, off, n)]


class Mmap(WriterBase):
    def open(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def step(self):
        if self.pending is None:
            self.pending = self.rnd.randint(1, MiB)
        n, off = self.pending, self.off
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: one chunk; dies of SIGBUS if a store faults
            os.close(r)
            try:
                os.write(w, b"ftruncate\n")
                if os.fstat(self.fd).st_size < off + n:
                    os.ftruncate(self.fd, off + n)
                aoff = off - off % mmap.ALLOCATIONGRANULARITY
                os.write(w, b"mmap\n")
                mm = mmap.mmap(self.fd, off + n - aoff, flags=mmap.MAP_SHARED,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=aoff)
                data = content(self.seed, self.name, off, n)
                os.write(w, b"store\n")
                mm[off - aoff: off - aoff + n] = data
                os.write(w, b"msync\n")
                mm.flush()  # msync(MS_SYNC)
                os.write(w, b"munmap\n")
                mm.close()
                os.write(w, b"fsync\n")
                os.fsync(self.fd)
                os.write(w, b"ok\n")
                os._exit(0)
            except OSError as e:
                os.write(w, f"errno {errname(e)}\n".encode())
                os._exit(1)
            except BaseException as e:  # noqa: BLE001
                os.write(w, f"exception {type(e).__name__}\n".encode())
                os._exit(2)
        os.close(w)
        out = b""
        while True:
            b = os.read(r, 4096)
            if not b:
                break
            out += b
        os.close(r)
        _, status = os.waitpid(pid, 0)
        lines = out.decode().splitlines()
        steps = [x for x in lines if not x.startswith(("errno ", "exception "))]
        last = steps[-1] if steps else "fork"
        if os.WIFSIGNALED(status):
            return [("err", last, signal.Signals(os.WTERMSIG(status)).name, self.name, off, n)]
        if os.WEXITSTATUS(status) != 0:
            e = lines[-1].split()[-1] if lines and lines[-1].startswith(("errno ", "exception ")) else "E?"
            return [("err", last, e, self.name, off, n)]
        self.off += n
        self.pending = None
        return [("ack", self.name, off, n)]


class Appends(WriterBase):
    def open(self):
        self.active = list(range(APPEND_FILES))
        self.next_index = APPEND_FILES
        self.turn = 0

    def step(self):
        slot = self.turn % len(self.active)
        if self.pending is None:
            self.pending = self.rnd.randint(1, 20000)
        n = self.pending
        fname = f"{self.name}-{self.active[slot]:04d}"
        path = os.path.join(self.a.mnt, fname)
        call, off, fd = "open", 0, None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            off = os.lseek(fd, 0, os.SEEK_END)
            data = content(self.seed, fname, off, n)
            call = "write"
            done = 0
            while done < n:
                w = os.write(fd, data[done:])
                if w <= 0:
                    raise OSError(errno.EIO, f"write returned {w}")
                done += w
            call = "fsync"
            os.fsync(fd)
        except OSError as e:
            recs = [("err", call, errname(e), fname, off, n)]
            if fd is not None:
                try:
                    os.close(fd)
                except OSError as e2:
                    recs.append(("err", "close", errname(e2), fname, off, n))
            return recs
        recs = [("ack", fname, off, n)]
        self.pending = None
        self.turn += 1
        if off + n >= APPEND_RETIRE:
            self.active[slot] = self.next_index
            self.next_index += 1
        try:
            os.close(fd)
        except OSError as e:
            recs.append(("err", "close", errname(e), fname, off, n))
        return recs


WRITERS = {"buffered": Buffered, "direct": Direct, "mmap": Mmap, "appends": Appends}


def writer_main(a):
    logfd = os.open(a.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def rec(*fields):
        os.write(logfd, (" ".join(str(f) for f in fields) + "\n").encode())
        os.fsync(logfd)

    w = WRITERS[a.kind](a)
    try:
        w.open()
    except OSError as e:
        rec("err", "open", errname(e), a.name, 0, 0)
        rec("stop", "error")
        return 0
    total = 0
    left = None  # attempts left after the first error
    reason = "error"
    while True:
        if time.time() > a.deadline:
            reason = "deadline"
            break
        if total > a.max_bytes:
            reason = "bound"
            break
        recs = w.step()
        failed = False
        for r in recs:
            rec(*r)
            if r[0] == "ack":
                total += r[3]
            else:
                failed = True
        if left is not None:
            left -= 1
        elif failed:
            left = RETRIES_AFTER_ERROR
        if left is not None:
            if left <= 0:
                break
            time.sleep(0.1)
    for r in w.finish():
        rec(*r)
    rec("stop", reason)
    return 0


# ---------------------------------------------------------------------------------------
# Reader (its own process: `fulldisk.py reader ...`)
# ---------------------------------------------------------------------------------------


def parse_log(path):
    acks, errs, stop = [], [], None
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except OSError:
        return acks, errs, stop
    for line in lines[:-1]:  # a last line without its newline may still be being written
        p = line.split()
        if not p:
            continue
        if p[0] == "ack" and len(p) == 4:
            acks.append((p[1], int(p[2]), int(p[3])))
        elif p[0] == "err" and len(p) >= 6:
            errs.append((p[1], p[2], p[3], int(p[4]), int(p[5])))
        elif p[0] == "stop":
            stop = p[1] if len(p) > 1 else "?"
    return acks, errs, stop


def read_range(path, off, n, keep=True):
    """open, pread [off, off+n) (n None: to the end), close; returns (bytes read if keep,
    [(call, errno)]) with each failing call named."""
    errs = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return b"", [("open", e)]
    parts, pos = [], off
    try:
        while n is None or pos < off + n:
            b = os.pread(fd, MiB if n is None else min(MiB, off + n - pos), pos)
            if not b:
                break
            if keep:
                parts.append(b)
            pos += len(b)
    except OSError as e:
        errs.append(("read", e))
    try:
        os.close(fd)
    except OSError as e:
        errs.append(("close", e))
    return b"".join(parts), errs


def reader_main(a):
    out = open(a.log, "a", buffering=1)
    seen = set()
    reads = 0
    rnd = random.Random(a.seed)
    old_want = content(a.seed, "old", 0, a.old_len)

    def error(kind, name, call, e):
        key = (kind, name, call, errname(e))
        if key not in seen:
            seen.add(key)
            out.write(f"{kind} {name} {call} {errname(e)}\n")

    while time.time() < a.deadline and not os.path.exists(a.stop):
        try:
            names = sorted(n for n in os.listdir(a.mnt) if n != "lost+found")
        except OSError as e:
            error("readerr", ".", "readdir", e)
            names = []
        for name in names:
            if os.path.exists(a.stop):
                break
            data, errs = read_range(os.path.join(a.mnt, name), 0, None, keep=name == "old")
            reads += 1
            for call, e in errs:
                error("readerr", name, call, e)
            if name == "old" and not errs and data != old_want:
                error("oldmismatch", name, "read", 0)
        # a sample of the acknowledged chunks must read back now
        acks = []
        for lg in a.logs:
            acks += parse_log(lg)[0]
        for name, off, n in rnd.sample(acks, min(4, len(acks))):
            got, errs = read_range(os.path.join(a.mnt, name), off, n)
            for call, e in errs:
                error("readerr", name, call, e)
            if errs:
                continue
            want = content(a.seed, name, off, n)
            if got != want:
                key = ("live", name, off)
                if key not in seen:
                    seen.add(key)
                    out.write(f"livemismatch {name} {off} {n} {describe_mismatch(off, want, got).replace(' ', '_')}\n")
        time.sleep(0.05)
    out.write(f"reads {reads}\n")
    return 0


# ---------------------------------------------------------------------------------------
# Checks shared by the harness and the cases
# ---------------------------------------------------------------------------------------


def verify_acks(mnt, seed, acks, label, limit=6):
    """Checks acknowledged chunks [(name, off, n)]; returns (problems, lost_chunks,
    lost_bytes, short_files)."""
    byfile = {}
    for name, off, n in acks:
        byfile.setdefault(name, []).append((off, n))
    problems, lost, lost_bytes, short = [], 0, 0, 0
    for name in sorted(byfile):
        chunks = sorted(byfile[name])
        end = max(o + n for o, n in chunks)
        try:
            fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
        except OSError as e:
            lost += len(chunks)
            lost_bytes += sum(n for _, n in chunks)
            problems.append(f"{label}: {name}: open failed: {errname(e)} ({len(chunks)} acknowledged chunks)")
            continue
        try:
            size = os.fstat(fd).st_size
            if size < end:
                short += 1
                if len(problems) < limit:
                    problems.append(f"{label}: {name} is {size} bytes, shorter than its acknowledged end {end}")
            for off, n in chunks:
                try:
                    got = pread_full(fd, n, off)
                except OSError as e:
                    lost += 1
                    lost_bytes += n
                    if len(problems) < limit:
                        problems.append(f"{label}: {name} [{off}, +{n}): read failed: {errname(e)}")
                    continue
                want = content(seed, name, off, n)
                if got != want:
                    lost += 1
                    lost_bytes += n
                    if len(problems) < limit:
                        problems.append(f"{label}: {name} acknowledged [{off}, +{n}): {describe_mismatch(off, want, got)}")
        finally:
            os.close(fd)
    if lost:
        problems.append(f"{label}: {lost} acknowledged chunks ({fmt_bytes(lost_bytes)}) lost or changed")
    if short:
        problems.append(f"{label}: {short} files shorter than their acknowledged end")
    return problems, lost, lost_bytes, short


def stat_sizes(mnt):
    sizes = {}
    for n in os.listdir(mnt):
        if n == "lost+found":
            continue
        try:
            sizes[n] = os.stat(os.path.join(mnt, n)).st_size
        except OSError as e:
            sizes[n] = f"stat failed: {errname(e)}"
    return sizes


def shrunk(before, after, label, limit=4):
    out = []
    for n, s in sorted(before.items()):
        a = after.get(n, "missing")
        if isinstance(s, int) and (not isinstance(a, int) or a < s):
            out.append(f"{n} {s} -> {a}")
    if not out:
        return []
    more = f" (+{len(out) - limit} more)" if len(out) > limit else ""
    return [f"sizes shrank {label}: {len(out)} files: " + ", ".join(out[:limit]) + more]


# ---------------------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------------------


def damage_acked(mnt, acks):
    """--damage (checks the checker): zeroes 4 KiB of one acknowledged chunk and cuts
    another file back below its acknowledged end, through the mount, fsync'd."""
    done = []
    ends = {}
    for name, off, n in acks:
        ends[name] = max(ends.get(name, 0), off + n)
    chunks = [a for a in acks if a[0] != "old"]
    if not chunks:
        return done
    big = max(chunks, key=lambda a: a[2])
    fd = os.open(os.path.join(mnt, big[0]), os.O_WRONLY)
    os.pwrite(fd, b"\0" * min(4096, big[2]), big[1])
    os.fsync(fd)
    os.close(fd)
    done.append(f"zeroed [{big[1]}, +{min(4096, big[2])}) of {big[0]}")
    others = sorted((n for n in ends if n not in ("old", big[0])), key=lambda n: ("appends" not in n, n))
    if others:
        name = others[0]
        cut = max(0, ends[name] - 1) // 4096 * 4096
        fd = os.open(os.path.join(mnt, name), os.O_WRONLY)
        os.ftruncate(fd, cut)
        os.fsync(fd)
        os.close(fd)
        done.append(f"cut {name} from {ends[name]} to {cut} bytes")
    return done


def harness(args, seed, size, opts, kill, kinds=None, strict=False, timeout=120, damage=False,
            strict_close=False):
    """One model-based run; returns (ok, summary line). With damage (checks the checker)
    acknowledged data is damaged on purpose before the unmount, and the run passes only
    if the checks after the remount find it."""
    rnd = random.Random(f"harness:{seed}")
    if not kinds:
        kinds = rnd.sample(KINDS, rnd.randint(2, 4))
    size_b = parse_size(size)
    t0 = time.monotonic()
    sc = Scratch(args.workdir, f"run-s{seed}")
    m = Mount(args.cairn, sc.path("fs.img"), sc.path("mnt"))
    reasons, notes = [], []
    acks, stops = [], []
    enospc_calls = set()
    other_errs = set()
    reader_errs = set()
    ok = False
    fill_s = 0.0
    try:
        m.mkfs(size)
        m.mount(opts)
        mnt = m.mnt
        # "old": written and fsync'd before the fill
        old_len = 100_000 + rnd.randint(0, 5000)
        fd = os.open(os.path.join(mnt, "old"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, content(seed, "old", 0, old_len))
        os.fsync(fd)
        os.close(fd)
        acks.append(("old", 0, old_len))

        deadline = time.time() + timeout
        me = os.path.abspath(__file__)
        logs = [sc.path(f"w{i}.log") for i in range(len(kinds))]
        rlog = sc.path("reader.log")
        stopf = sc.path("stop")
        errf = open(sc.path("children.stderr"), "w")
        reader = subprocess.Popen([sys.executable, me, "reader", "--mnt", mnt, "--seed", str(seed),
                                   "--old-len", str(old_len), "--log", rlog, "--stop", stopf,
                                   "--deadline", str(deadline + 30), "--logs", *logs],
                                  stderr=errf)
        _PROCS.append(reader)
        writers = []
        for i, k in enumerate(kinds):
            p = subprocess.Popen([sys.executable, me, "writer", "--kind", k, "--mnt", mnt,
                                  "--name", f"w{i}-{k}", "--seed", str(seed), "--log", logs[i],
                                  "--deadline", str(deadline), "--max-bytes", str(3 * size_b)],
                                 stderr=errf)
            _PROCS.append(p)
            writers.append(p)
        for i, p in enumerate(writers):
            try:
                p.wait(timeout=max(1, deadline + 30 - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                reasons.append(f"writer w{i}-{kinds[i]} hung (killed {timeout + 30} s after the start)")
            if p.returncode not in (0, -signal.SIGKILL):
                reasons.append(f"writer w{i}-{kinds[i]} crashed (exit {p.returncode})")
        fill_s = time.monotonic() - t0
        open(stopf, "w").close()
        try:
            reader.wait(timeout=60)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
            reasons.append("the reader hung")
        if reader.returncode not in (0, -signal.SIGKILL):
            reasons.append(f"the reader crashed (exit {reader.returncode})")
        errf.close()
        with open(sc.path("children.stderr")) as f:
            tail = [ln.strip() for ln in f.read().splitlines() if ln.strip()][-3:]
        if tail:
            reasons.append("writer/reader stderr: " + " | ".join(tail))

        # what the writers did
        for i, k in enumerate(kinds):
            a, e, stop = parse_log(logs[i])
            acks += a
            first = e[0] if e else None
            wrong = set()
            for call, en, *_ in e:
                if en == "ENOSPC":
                    enospc_calls.add(call)
                else:
                    other_errs.add(f"{call}:{en}")
                    if not (k == "mmap" and call == "store" and en == "SIGBUS"):
                        # a full disk says ENOSPC (an mmap store may die of SIGBUS, as on ext4)
                        wrong.add(f"{call} failed with {en}")
            if wrong:
                reasons.append(f"w{i}-{k}: {', '.join(sorted(wrong))}, not ENOSPC")
            if stop is None:
                reasons.append(f"w{i}-{k} left no stop record")
            if first:
                stops.append(f"w{i}-{k}:{first[0]}:{first[1]}")
            else:
                stops.append(f"w{i}-{k}:{stop}")
                if stop == "deadline":
                    reasons.append(f"w{i}-{k} got no error in {timeout} s ({fmt_bytes(sum(x[2] for x in a))} "
                                   "acknowledged): the disk never filled")
                elif stop == "bound":
                    reasons.append(f"w{i}-{k} acknowledged {fmt_bytes(sum(x[2] for x in a))}, 3x the image size, "
                                   "without an error")
            if k in ("buffered", "appends") and first and first[0] != "write":
                msg = f"w{i}-{k} was stopped by {first[0]} ({first[1]}), not by write()"
                (reasons if strict else notes).append(msg)
        # the reader
        try:
            with open(rlog) as f:
                for line in f:
                    p = line.split()
                    if p[0] == "readerr":
                        reader_errs.add(f"{p[2]}:{p[3]}")
                        what = {"open": "open(O_RDONLY)", "close": "close() (of a read-only descriptor)",
                                "readdir": "readdir"}.get(p[2], "read()")
                        msg = f"during the run the reader's {what} of {p[1]} failed: {p[3]}"
                        if p[2] == "close" and "-mmap" in p[1]:
                            # The kernel's FUSE flush (fuse_flush: write_inode_now, then
                            # filemap_check_errors) hands a failed write-back of the file to
                            # whichever close comes first, and an mmap store cannot be refused
                            # before its write-back: reported, not failed, unless strict.
                            (reasons if strict_close else notes).append(msg)
                        else:
                            reasons.append(msg)
                    elif p[0] == "oldmismatch":
                        reasons.append("the file written before the fill read back different during the run")
                    elif p[0] == "livemismatch":
                        reasons.append(f"during the run: {p[1]} acknowledged [{p[2]}, +{p[3]}): {p[4].replace('_', ' ')}")
        except OSError:
            reasons.append("no reader log")

        # live, and across drop_caches
        pr, *_ = verify_acks(mnt, seed, acks, "before unmount")
        reasons += pr
        s1 = stat_sizes(mnt)
        drop_caches()
        s2 = stat_sizes(mnt)
        reasons += shrunk(s1, s2, "after drop_caches")
        damaged = damage_acked(mnt, acks) if damage else []

        if kill:
            m.kill()
            how = "after SIGKILL + replay"
        else:
            err = m.umount()
            if err:
                reasons.append(err)
            how = "after umount + mount"
        m.mount(opts)
        pr, lost, lost_bytes, short = verify_acks(mnt, seed, acks, how)
        reasons += pr
        if not kill:
            reasons += shrunk(s2, stat_sizes(mnt), "across umount + mount")
        err = m.umount()
        if err:
            reasons.append(err)
        err = m.fsck()
        if err:
            reasons.append(err)
        ok = not reasons
        if damage:
            notes.append("damaged on purpose: " + ", ".join(damaged))
            found = lost >= 1 and (short >= 1 or len(damaged) < 2)
            notes += [f"(also: {r})" for r in reasons if not r.startswith(how)]
            reasons = [] if found else [f"the checks after the remount missed the damage (lost {lost}, short {short})"]
            ok = found
            if found:
                notes.append(f"found: {lost} chunks lost or changed, {short} files short")
    except Fail as e:
        reasons.append(str(e))
    except Exception as e:  # noqa: BLE001
        reasons.append(f"harness error: {e!r}")
        traceback.print_exc()
    finally:
        for p in list(_PROCS):
            if p.poll() is None:
                p.kill()
                p.wait()
            _PROCS.remove(p)
        try:
            m.force_cleanup()
        except Exception as e:  # noqa: BLE001
            reasons.append(f"cleanup: {e!r}")
            ok = False
        if m in _MOUNTS:
            _MOUNTS.remove(m)
    n_acks = len(acks) - 1 if acks else 0
    nbytes = sum(n for name, _, n in acks if name != "old")
    line = (f"fulldisk run: seed={seed} size={size} opts={opts or '-'} kill={int(kill)} "
            f"writers={','.join(kinds)} acked={n_acks} chunks/{fmt_bytes(nbytes)} "
            f"enospc={','.join(sorted(enospc_calls)) or '-'}"
            + (f" other-errors={','.join(sorted(other_errs))}" if other_errs else "")
            + (f" reader-errors={','.join(sorted(reader_errs))}" if reader_errs else "")
            + f" stops=[{' '.join(stops)}] fill={fill_s:.0f}s time={time.monotonic() - t0:.0f}s")
    if notes:
        line += " notes=[" + "; ".join(notes) + "]"
    line += " PASS" if ok else " FAIL: " + "; ".join(reasons)
    sc.done(ok)
    return ok, line


# ---------------------------------------------------------------------------------------
# The seven cases
# ---------------------------------------------------------------------------------------


class Case:
    """A case's mount, scratch and findings."""

    def __init__(self, args, n):
        self.args, self.n = args, n
        self.sc = Scratch(args.workdir, f"case{n}")
        self.reasons = []
        self.info = []
        self.mounts = []

    def mount(self, name, size, opts=""):
        m = Mount(self.args.cairn, self.sc.path(f"{name}.img"), self.sc.path(name))
        m.mkfs(size)
        m.mount(opts)
        self.mounts.append(m)
        return m

    def fail(self, msg):
        self.reasons.append(msg)
        log(f"case {self.n}: FAIL: {msg}")

    def note(self, msg):
        self.info.append(msg)
        log(f"case {self.n}: {msg}")

    def remount(self, m, opts=""):
        err = m.umount()
        if err:
            self.fail(err)
        m.mount(opts)

    def finish(self, m):
        """Unmount and fsck."""
        err = m.umount()
        if err:
            self.fail(err)
        err = m.fsck()
        if err:
            self.fail(err)

    def close(self):
        for m in self.mounts:
            try:
                m.force_cleanup()
            finally:
                if m in _MOUNTS:
                    _MOUNTS.remove(m)
        self.sc.done(not self.reasons)


def try_call(fn, *a):
    """(result, None) or (None, errno name)."""
    try:
        return fn(*a), None
    except OSError as e:
        return None, errname(e)


def direct_fill(path, limit_bytes, deadline):
    """Fills the disk like `dd oflag=direct bs=1M`, then bs=4k: O_DIRECT writes until each
    size fails. Returns (bytes written, [(chunk size, errno name or 'bound')])."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    buf = mmap.mmap(-1, MiB)
    buf[:] = random.Random(path).randbytes(MiB)
    off, stops = 0, []
    try:
        for chunk in (MiB, 4096):
            view = memoryview(buf)[:chunk]
            err = "bound"
            try:
                while off < limit_bytes and time.monotonic() < deadline:
                    w = os.pwrite(fd, view, off)
                    off += w
                    if w < chunk:
                        off -= off % 4096
            except OSError as e:
                err = errname(e)
            finally:
                view.release()
            stops.append((chunk, err))
            if err == "bound":
                break
        try_call(os.fsync, fd)
    finally:
        os.close(fd)
    return off, stops


def fill_summary(filled, stops):
    return f"{fmt_bytes(filled)}, " + ", ".join(f"{'1 MiB' if ch == MiB else '4 KiB'} writes stopped by {e}" for ch, e in stops)


def fill_problem(stops):
    bad = [f"{e} ({'1 MiB' if ch == MiB else '4 KiB'} writes)" for ch, e in stops if e != "ENOSPC"]
    return f"the O_DIRECT fill got {', '.join(bad)}, not ENOSPC" if bad else None


def buffered_fill(path, seed, name, limit_bytes, seconds, fsync_each=False):
    """`dd bs=1M` into a new file (pwrite of 1 MiB pieces of the pattern), bounded by
    limit_bytes and seconds. Returns dict: accepted (bytes write() took), acked (bytes
    covered by a successful fsync), err (call, errno) or None, fd (still open)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.monotonic()
    accepted = acked = 0
    err = None
    while accepted < limit_bytes and time.monotonic() - t0 < seconds:
        data = content(seed, name, accepted, MiB)
        try:
            w = os.pwrite(fd, data, accepted)
        except OSError as e:
            err = ("write", errname(e))
            break
        accepted += w
        if fsync_each:
            try:
                os.fsync(fd)
            except OSError as e:
                err = ("fsync", errname(e))
                break
            acked = accepted
    return {"accepted": accepted, "acked": acked, "err": err, "fd": fd, "secs": time.monotonic() - t0}


def check_file(mnt, seed, name, n, label):
    """The first n bytes of `name` are the pattern; returns a problem or None."""
    try:
        with open(os.path.join(mnt, name), "rb") as f:
            got = f.read(n)
    except OSError as e:
        return f"{label}: reading {name}: {errname(e)}"
    want = content(seed, name, 0, n)
    if got != want:
        return f"{label}: {name}: {describe_mismatch(0, want, got)} (of {n} bytes)"
    return None


def case1(c):
    """Four writers (one of each kind) fill a 256 MiB image; every acknowledged chunk
    survives umount + mount, and SIGKILL + replay."""
    for kill in (False, True):
        ok, line = harness(c.args, 5001 + kill, "256M", "", kill, kinds=list(KINDS), timeout=c.args.timeout)
        print(line, flush=True)
        if not ok:
            c.fail(f"{'SIGKILL + replay' if kill else 'umount + mount'}: {line.split(' FAIL: ', 1)[-1]}")


def case2(c):
    """-o dirty_limit_mb=0: 6,000 bytes fsync'd; disk filled through O_DIRECT; pwrite of
    5,000 bytes at 6,000 + fsync: if both succeed, 11,000 bytes after a remount."""
    seed = 5002
    m = c.mount("m", "64M", "dirty_limit_mb=0")
    f = os.path.join(m.mnt, "f")
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, content(seed, "f", 0, 6000))
    os.fsync(fd)
    os.close(fd)
    filled, stops = direct_fill(os.path.join(m.mnt, "fill"), 1 << 30, time.monotonic() + 60)
    c.note(f"O_DIRECT fill: {fill_summary(filled, stops)}; df free {fmt_bytes(m.df())}")
    if fill_problem(stops):
        c.fail(fill_problem(stops))
    fd = os.open(f, os.O_WRONLY)
    w, werr = try_call(os.pwrite, fd, content(seed, "f", 6000, 5000), 6000)
    _, serr = try_call(os.fsync, fd) if not werr else (None, None)
    st = os.fstat(fd).st_size
    _, cerr = try_call(os.close, fd)
    c.note(f"pwrite(5000 @ 6000) = {w if not werr else werr}, fsync = {serr or (0 if not werr else 'not called')}, "
           f"fstat size {st}, close = {cerr or 0}")
    synced = not werr and not serr and w == 5000
    c.remount(m, "dirty_limit_mb=0")
    size = os.stat(f).st_size
    c.note(f"after remount: size {size}" + (f" (fstat said {st} before; the error came from "
                                           f"{'pwrite' if werr else 'fsync'})" if size < st and not synced else ""))
    if synced:
        if size < 11000:
            c.fail(f"pwrite and fsync succeeded (fstat {st}), but after a remount the file is {size} bytes, not 11000")
        p = check_file(m.mnt, seed, "f", 11000, "after remount")
        if p:
            c.fail(f"pwrite and fsync succeeded, but {p}")
    else:
        p = check_file(m.mnt, seed, "f", 6000, "after remount")
        if p:
            c.fail(f"the write failed ({'pwrite' if werr else 'fsync'}: {werr or serr}) and the fsync'd 6000 bytes are damaged: {p}")
        elif w is not None and w != 5000 and not serr:
            c.fail(f"pwrite returned {w} of 5000 without an error")
    c.finish(m)


def case3(c):
    """After an O_DIRECT fill, a buffered dd bs=1M into a new file gets ENOSPC from
    write(), and the file keeps every byte write() accepted; with dirty_limit_mb=0, if
    write() does not say ENOSPC, fsync must, and nothing acknowledged is lost."""
    seed = 5003
    size = "64M"
    for opts in ("", "dirty_limit_mb=0"):
        label = f"-o {opts}" if opts else "defaults"
        m = c.mount("m", size, opts)
        filled, stops = direct_fill(os.path.join(m.mnt, "fill"), 1 << 30, time.monotonic() + 60)
        c.note(f"{label}: O_DIRECT fill {fill_summary(filled, stops)}; df free {fmt_bytes(m.df())}")
        if fill_problem(stops):
            c.fail(f"{label}: {fill_problem(stops)}")
        bound = 10 * parse_size(size)
        r = buffered_fill(os.path.join(m.mnt, "dd"), seed, "dd", bound, 60, fsync_each=bool(opts))
        live = os.fstat(r["fd"]).st_size
        fs_err = None
        if not opts:
            _, fs_err = try_call(os.fsync, r["fd"])
        _, cl_err = try_call(os.close, r["fd"])
        stop = f"{r['err'][0]} {r['err'][1]}" if r["err"] else f"no error (bound: {fmt_bytes(r['accepted'])} in {r['secs']:.0f} s)"
        c.note(f"{label}: buffered dd: write() accepted {fmt_bytes(r['accepted'])} ({r['accepted']} bytes), "
               f"stopped by {stop}; fstat {live}; fsync {fs_err or 0}; close {cl_err or 0}")
        c.remount(m, opts)
        after = os.stat(os.path.join(m.mnt, "dd")).st_size
        c.note(f"{label}: after remount the file is {after} bytes")
        if not opts:
            if r["err"] != ("write", "ENOSPC"):
                c.fail(f"{label}: write() did not say ENOSPC: {stop}")
            if after != r["accepted"]:
                c.fail(f"{label}: write() accepted {r['accepted']} bytes, the file holds {after} after a remount")
            else:
                p = check_file(m.mnt, seed, "dd", r["accepted"], f"{label} after remount")
                if p:
                    c.fail(p)
        else:
            if r["err"] is None:
                c.fail(f"{label}: neither write() nor fsync said ENOSPC: {stop}")
            elif r["err"][1] != "ENOSPC":
                c.fail(f"{label}: {r['err'][0]} failed with {r['err'][1]}, not ENOSPC")
            if after < r["acked"]:
                c.fail(f"{label}: {r['acked']} bytes were fsync'd, the file holds {after} after a remount")
            else:
                p = check_file(m.mnt, seed, "dd", r["acked"], f"{label} after remount")
                if p:
                    c.fail(f"{label}: fsync'd data lost: {p}")
        c.finish(m)
        c.mounts.remove(m)
        if m in _MOUNTS:
            _MOUNTS.remove(m)


def case4(c):
    """128 MiB image: the first dd stops with ENOSPC at write(); a second (100 x 1 MiB,
    new file) and a third (40 x 1 MiB then fsync) must each get ENOSPC from write(), and
    sizes must not shrink across drop_caches (nor a remount)."""
    seed = 5004
    m = c.mount("m", "128M")
    results = {}
    for name, count, do_fsync in (("first", 300, False), ("second", 100, False), ("third", 40, True)):
        r = buffered_fill(os.path.join(m.mnt, name), seed, name, count * MiB, 60)
        fs_err = try_call(os.fsync, r["fd"])[1] if do_fsync else None
        cl_err = try_call(os.close, r["fd"])[1]
        results[name] = r
        stop = f"{r['err'][0]} {r['err'][1]}" if r["err"] else f"all {count} write() calls succeeded"
        c.note(f"{name} writer ({count} x 1 MiB): write() accepted {fmt_bytes(r['accepted'])}, {stop}"
               + (f"; fsync {fs_err or 0}" if do_fsync else "") + f"; close {cl_err or 0}")
        if r["err"] != ("write", "ENOSPC"):
            why = stop
            if do_fsync and fs_err:
                why += f"; only fsync said {fs_err}"
            c.fail(f"{name} writer: no ENOSPC from write(): {why}")
    s1 = stat_sizes(m.mnt)
    drop_caches()
    time.sleep(0.2)
    s2 = stat_sizes(m.mnt)
    c.note("sizes: " + ", ".join(f"{n} {s1[n]} -> {s2.get(n)}" for n in ("first", "second", "third")))
    for p in shrunk(s1, s2, "after drop_caches"):
        c.fail(p)
    for name, r in results.items():
        if isinstance(s2.get(name), int) and s2[name] < r["accepted"]:
            c.fail(f"{name}: write() accepted {r['accepted']} bytes, ls -l shows {s2[name]} after drop_caches")
    c.remount(m)
    s3 = stat_sizes(m.mnt)
    for p in shrunk(s2, s3, "across umount + mount"):
        c.fail(p)
    for name, r in results.items():
        n = min(r["accepted"], s3.get(name, 0) if isinstance(s3.get(name), int) else 0)
        p = check_file(m.mnt, seed, name, n, "after remount")
        if p:
            c.fail(p)
    c.finish(m)


def case5(c):
    """echo hello > old; sync; fill with dd bs=1M; sync; cat old: prints hello (6 runs)."""
    for run in range(1, 7):
        m = c.mount("m", "64M")
        old = os.path.join(m.mnt, "old")
        with open(old, "wb") as f:
            f.write(b"hello\n")
        subprocess.run(["sync"], check=False)
        # only the means here: a disk that takes 3x its size without ENOSPC is full too
        r = buffered_fill(os.path.join(m.mnt, "fill"), 5005, "fill", 3 * 64 * MiB, 20)
        cl = try_call(os.close, r["fd"])[1]
        subprocess.run(["sync"], check=False)
        for when in ("after the fill", "after drop_caches"):
            if when == "after drop_caches":
                drop_caches()
            call = "open"
            try:
                fd = os.open(old, os.O_RDONLY)
                call = "read"
                try:
                    got = os.read(fd, 100)
                finally:
                    call = "close"
                    os.close(fd)
                if got != b"hello\n":
                    c.fail(f"run {run}: cat old {when} printed {got!r}, not 'hello'")
            except OSError as e:
                c.fail(f"run {run}: cat old {when}: {call} failed with {errname(e)} ({e.strerror})")
        stop = f"{r['err'][0]} {r['err'][1]}" if r["err"] else "no error"
        c.note(f"run {run}: fill {fmt_bytes(r['accepted'])} ({stop}, close {cl or 0})")
        c.finish(m)
        c.mounts.remove(m)
        if m in _MOUNTS:
            _MOUNTS.remove(m)


def case6(c):
    """pwrite of one byte at 2^52 and 2^63-2: EFBIG, or stored for good; at 2^63-1: EFBIG."""
    m = c.mount("m", "64M")
    outcome = {}
    for name, off in (("f52", 1 << 52), ("f63", (1 << 63) - 2)):
        label = "2^52" if name == "f52" else "2^63-2"
        fd = os.open(os.path.join(m.mnt, name), os.O_RDWR | os.O_CREAT, 0o644)
        w, werr = try_call(os.pwrite, fd, b"x", off)
        serr = try_call(os.fsync, fd)[1]
        st = os.fstat(fd).st_size
        cerr = try_call(os.close, fd)[1]
        c.note(f"pwrite(1 @ {label}) = {werr or w}, fsync {serr or 0}, fstat size {st}, close {cerr or 0}")
        if werr:
            outcome[name] = (off, False)
            if werr != "EFBIG":
                c.fail(f"pwrite at {label} failed with {werr}, not EFBIG")
            if st != 0:
                c.fail(f"pwrite at {label} failed, but fstat says {st}")
        else:
            outcome[name] = (off, True)
            if serr:
                c.fail(f"pwrite at {label} returned {w}, then fsync failed with {serr} (EFBIG must come from the pwrite)")
            if st != off + 1:
                c.fail(f"pwrite at {label} returned {w}, fstat size {st} (want {off + 1})")
            if cerr:
                c.fail(f"pwrite at {label} returned {w}, then close failed with {cerr}")
    # Past the largest size. A byte at 2^63-1 would end past the largest loff_t: the VFS
    # (rw_verify_area) refuses that with EINVAL before any file system sees it (ext4 and
    # tmpfs answer EINVAL here too), so EINVAL counts as a refusal; anything stored fails.
    fd = os.open(os.path.join(m.mnt, "fmax"), os.O_RDWR | os.O_CREAT, 0o644)
    for off, n, label in (((1 << 63) - 1, 1, "1 byte @ 2^63-1"), ((1 << 63) - 2, 2, "2 bytes @ 2^63-2")):
        w, werr = try_call(os.pwrite, fd, b"y" * n, off)
        c.note(f"pwrite({label}) = {werr or w}")
        if werr not in ("EFBIG", "EINVAL"):
            c.fail(f"pwrite of {label} returned {werr or w}, not EFBIG")
    serr = try_call(os.fsync, fd)[1]
    st = os.fstat(fd).st_size
    cerr = try_call(os.close, fd)[1]
    if serr or cerr or st != 0:
        c.fail(f"after the refused writes past the largest size: fsync {serr or 0}, fstat size {st}, close {cerr or 0}")
    c.remount(m)
    for name, (off, stored) in outcome.items():
        label = "2^52" if name == "f52" else "2^63-2"
        path = os.path.join(m.mnt, name)
        size = os.stat(path).st_size
        if stored:
            try:
                fd = os.open(path, os.O_RDONLY)
                got = os.pread(fd, 1, off)
                os.close(fd)
            except OSError as e:
                got = errname(e)
            c.note(f"after remount {name}: size {size}, byte at {label}: {got!r}")
            if size != off + 1 or got != b"x":
                c.fail(f"the byte written at {label} (pwrite succeeded) is gone after a remount: size {size}, read {got!r}")
        else:
            c.note(f"after remount {name}: size {size}")
            if size != 0:
                c.fail(f"pwrite at {label} failed, but the file is {size} bytes after a remount")
    size = os.stat(os.path.join(m.mnt, "fmax")).st_size
    if size != 0:
        c.fail(f"fmax is {size} bytes after a remount")
    c.finish(m)


def case7(c):
    """chattr +i / +a in the mount that set them: refused at open or write."""
    for tool in ("chattr", "lsattr"):
        if not shutil.which(tool):
            raise Fail(f"{tool} (e2fsprogs) not installed")
    m = c.mount("m", "64M")
    f = os.path.join(m.mnt, "f")
    model = b"a\n"
    with open(f, "wb") as fh:
        fh.write(model)
        fh.flush()
        os.fsync(fh.fileno())

    def chattr(flag):
        rc, out = run_cmd(["chattr", flag, f], 30)
        if rc != 0:
            raise Fail(f"chattr {flag} failed: {out}")

    def lsattr():
        return run_cmd(["lsattr", "-d", f], 30)[1].split()[0]

    def content_is(label):
        try:
            with open(f, "rb") as fh:
                got = fh.read()
        except OSError as e:
            c.fail(f"{label}: read failed: {errname(e)}")
            return
        if got != model:
            c.fail(f"{label}: content {got!r}, but the successful calls wrote {model!r}")

    def attempt(label, flags, do, expect_refused=True):
        """open(flags) then do(fd); returns whether it was refused with EPERM."""
        nonlocal model
        try:
            fd = os.open(f, flags)
        except OSError as e:
            c.note(f"{label}: open: {errname(e)}")
            if expect_refused and e.errno != errno.EPERM:
                c.fail(f"{label}: open failed with {errname(e)}, not EPERM")
            elif not expect_refused:
                c.fail(f"{label}: open failed: {errname(e)}")
            return True
        try:
            new = do(fd)
            model = new
            _, cerr = try_call(os.close, fd)
            fd = None
            c.note(f"{label}: open and write succeeded, close {cerr or 0}")
            if expect_refused:
                c.fail(f"{label}: succeeded (open and write returned success" + (f", close {cerr}" if cerr else "") + ")")
            elif cerr:
                c.fail(f"{label}: close failed: {cerr}")
            return False
        except OSError as e:
            c.note(f"{label}: open ok, write: {errname(e)}")
            if expect_refused and e.errno != errno.EPERM:
                c.fail(f"{label}: the write failed with {errname(e)}, not EPERM")
            elif not expect_refused:
                c.fail(f"{label}: write failed: {errname(e)}")
            return True
        finally:
            if fd is not None:
                try_call(os.close, fd)

    chattr("+i")
    c.note(f"lsattr: {lsattr()}")
    attempt("+i: echo b >> f", os.O_WRONLY | os.O_APPEND, lambda fd: (os.write(fd, b"b\n"), model + b"b\n")[1])
    content_is("+i: after the append")
    drop_caches()
    content_is("+i: after drop_caches")
    chattr("-i")
    chattr("+a")
    c.note(f"lsattr: {lsattr()}")
    attempt("+a: append c", os.O_WRONLY | os.O_APPEND, lambda fd: (os.write(fd, b"c\n"), model + b"c\n")[1],
            expect_refused=False)
    attempt("+a: pwrite at 0 (no O_APPEND)", os.O_WRONLY,
            lambda fd: (os.pwrite(fd, b"Z", 0), b"Z" + model[1:])[1])
    try:
        os.truncate(f, 0)
        model = b""
        c.fail("+a: truncate(f, 0) succeeded")
    except OSError as e:
        c.note(f"+a: truncate: {errname(e)}")
        if e.errno != errno.EPERM:
            c.fail(f"+a: truncate failed with {errname(e)}, not EPERM")
    content_is("+a: live")
    drop_caches()
    content_is("+a: after drop_caches")
    c.remount(m)
    content_is("+a: after remount")
    chattr("-a")
    c.finish(m)


CASES = {1: case1, 2: case2, 3: case3, 4: case4, 5: case5, 6: case6, 7: case7}


def run_case(args, n):
    t0 = time.monotonic()
    c = Case(args, n)
    try:
        CASES[n](c)
    except Fail as e:
        c.fail(str(e))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        c.fail(f"case error: {e!r}")
    finally:
        try:
            c.close()
        except Exception as e:  # noqa: BLE001
            c.fail(f"cleanup: {e!r}")
    dt = time.monotonic() - t0
    if c.reasons:
        print(f"fulldisk case {n}: FAIL ({dt:.0f} s): " + "; ".join(c.reasons), flush=True)
        return False
    print(f"fulldisk case {n}: PASS ({dt:.0f} s)" + (": " + "; ".join(c.info) if n != 1 else ""), flush=True)
    return True


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_cairn = os.environ.get("CAIRN") or os.path.join(here, "..", "..", "target", "release", "cairn")
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
    c = sub.add_parser("case", help="one regression case (1..7 or all)")
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
        print("case must be 1..7 or all", file=sys.stderr)
        return 2
    results = [run_case(a, n) for n in ns]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
