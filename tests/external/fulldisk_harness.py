"""The model-based harness of tests/external/fulldisk.py (`fulldisk.py run`): the writer
and reader processes (`fulldisk.py writer|reader`, started by the run), their logs, the
checks of acknowledged data and sizes (the cases use them too), and one run."""

import errno
import mmap
import os
import random
import signal
import subprocess
import sys
import time
import traceback

from fulldisk_common import MiB, KiB, content, describe_mismatch, errname, fmt_bytes, parse_size, pread_full
from fulldisk_mount import Fail, Mount, Scratch, drop_caches, reap_procs, track_proc

KINDS = ("buffered", "direct", "mmap", "appends")
RETRIES_AFTER_ERROR = 3
APPEND_FILES = 16  # appends: files written in turn
APPEND_RETIRE = 256 * KiB  # appends: a file this large is replaced by a new one
# the script the writer and reader processes run (`fulldisk.py writer|reader ...`)
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fulldisk.py")


# ---------------------------------------------------------------------------------------
# Writers (each its own process: `fulldisk.py writer ...`)
# ---------------------------------------------------------------------------------------


def write_all(fd, data, off=None):
    """Writes all of data: pwrite at off, or write where the descriptor stands (off None),
    again after a short count; a call that writes nothing raises EIO."""
    call = "write" if off is None else "pwrite"
    done = 0
    while done < len(data):
        if off is None:
            w = os.write(fd, data[done:])
        else:
            w = os.pwrite(fd, data[done:], off + done)
        if w <= 0:
            raise OSError(errno.EIO, f"{call} returned {w}")
        done += w


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

    def next_chunk(self, new_size):
        """(n, off): the chunk that failed last, again, or a new one of new_size() bytes at
        the writer's offset."""
        if self.pending is None:
            self.pending = new_size()
        return self.pending, self.off

    def acked(self, off, n):
        """The chunk at off is acknowledged: the next one follows it."""
        self.off += n
        self.pending = None
        return [("ack", self.name, off, n)]

    def pwrite_fsync(self, off, n, data):
        """pwrite the chunk's n bytes of data at off, then fsync; returns its records."""
        call = "write"
        try:
            write_all(self.fd, data, off)
            call = "fsync"
            os.fsync(self.fd)
        except OSError as e:
            return [("err", call, errname(e), self.name, off, n)]
        return self.acked(off, n)

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
        n, off = self.next_chunk(lambda: self.rnd.randint(1, MiB))
        return self.pwrite_fsync(off, n, content(self.seed, self.name, off, n))


class Direct(WriterBase):
    def open(self):
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        self.buf = mmap.mmap(-1, MiB)  # page-aligned

    def step(self):
        n, off = self.next_chunk(lambda: 4096 * self.rnd.randint(1, 256))
        self.buf[0:n] = content(self.seed, self.name, off, n)
        with memoryview(self.buf) as view:
            return self.pwrite_fsync(off, n, view[:n])


class Mmap(WriterBase):
    def open(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def step(self):
        n, off = self.next_chunk(lambda: self.rnd.randint(1, MiB))
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
        return self.acked(off, n)


class Appends(WriterBase):
    def open(self):
        self.active = list(range(APPEND_FILES))
        self.next_index = APPEND_FILES
        self.turn = 0

    def step(self):
        slot = self.turn % len(self.active)
        n, _ = self.next_chunk(lambda: self.rnd.randint(1, 20000))
        fname = f"{self.name}-{self.active[slot]:04d}"
        path = os.path.join(self.a.mnt, fname)
        call, off, fd = "open", 0, None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            off = os.lseek(fd, 0, os.SEEK_END)
            data = content(self.seed, fname, off, n)
            call = "write"
            write_all(fd, data)
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
        logs = [sc.path(f"w{i}.log") for i in range(len(kinds))]
        rlog = sc.path("reader.log")
        stopf = sc.path("stop")
        errf = open(sc.path("children.stderr"), "w")
        reader = subprocess.Popen([sys.executable, ENTRY, "reader", "--mnt", mnt, "--seed", str(seed),
                                   "--old-len", str(old_len), "--log", rlog, "--stop", stopf,
                                   "--deadline", str(deadline + 30), "--logs", *logs],
                                  stderr=errf)
        track_proc(reader)
        writers = []
        for i, k in enumerate(kinds):
            p = subprocess.Popen([sys.executable, ENTRY, "writer", "--kind", k, "--mnt", mnt,
                                  "--name", f"w{i}-{k}", "--seed", str(seed), "--log", logs[i],
                                  "--deadline", str(deadline), "--max-bytes", str(3 * size_b)],
                                 stderr=errf)
            track_proc(p)
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
        reasons += m.umount_fsck()
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
        reap_procs()
        try:
            m.force_cleanup()
        except Exception as e:  # noqa: BLE001
            reasons.append(f"cleanup: {e!r}")
            ok = False
        m.forget()
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
