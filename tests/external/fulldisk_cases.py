"""The regression cases of tests/external/fulldisk.py (`fulldisk.py case N`): one per
item of issue 50 (1-7) and the fallocate of generic/299 (8), each on its own mounts, with
the fills they share."""

import errno
import mmap
import os
import random
import shutil
import subprocess
import time
import traceback

from fulldisk_common import MiB, content, describe_mismatch, errname, fmt_bytes, log, parse_size
from fulldisk_harness import KINDS, harness, shrunk, stat_sizes
from fulldisk_mount import Fail, Mount, Scratch, drop_caches, run_cmd

# ---------------------------------------------------------------------------------------
# The cases
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
        for err in m.umount_fsck():
            self.fail(err)

    def finish_and_drop(self, m):
        """finish(m), and m is no longer this case's (a new mount of the same name follows)."""
        self.finish(m)
        self.mounts.remove(m)
        m.forget()

    def close(self):
        for m in self.mounts:
            try:
                m.force_cleanup()
            finally:
                m.forget()
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
        c.finish_and_drop(m)


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
        c.finish_and_drop(m)


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

        def refused(e, noted, call):
            """call ("open", "the write") failed with e: noted as noted; a failure unless
            it was to be refused, with EPERM."""
            c.note(f"{label}: {noted}: {errname(e)}")
            if expect_refused and e.errno != errno.EPERM:
                c.fail(f"{label}: {call} failed with {errname(e)}, not EPERM")
            elif not expect_refused:
                c.fail(f"{label}: {call.removeprefix('the ')} failed: {errname(e)}")
            return True

        try:
            fd = os.open(f, flags)
        except OSError as e:
            return refused(e, "open", "open")
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
            return refused(e, "open ok, write", "the write")
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


def case8(c):
    """256 MiB image: 6 MiB of buffered writes, accepted and not yet written back; then a
    fallocate (on a second image: O_DIRECT writes) of all the space df shows. The pages
    the kernel accepted keep their space: the fallocate or O_DIRECT writes get ENOSPC
    (or a share), the writer's fsync says 0 and every byte reads back after a remount
    (xfstests generic/299: a fallocate of all the free space left them none)."""
    seed = 5008
    for how in ("fallocate", "direct"):
        m = c.mount(f"m-{how}", "256M")
        name, n = "pages", 6 * MiB
        fd = os.open(os.path.join(m.mnt, name), os.O_WRONLY | os.O_CREAT, 0o644)
        for off in range(0, n, MiB):
            os.pwrite(fd, content(seed, name, off, MiB), off)
        st = os.statvfs(m.mnt)
        avail = st.f_bavail * st.f_frsize
        taker = os.path.join(m.mnt, "taker")
        if how == "fallocate":
            tfd = os.open(taker, os.O_WRONLY | os.O_CREAT, 0o644)
            taken, err = try_call(os.posix_fallocate, tfd, 0, avail)
            taken = os.fstat(tfd).st_blocks * 512
            os.close(tfd)
        else:
            taken, stops = direct_fill(taker, avail, time.monotonic() + 60)
            err = stops[-1][1]
        fs_err = try_call(os.fsync, fd)[1]
        cl_err = try_call(os.close, fd)[1]
        c.note(f"{how} of {fmt_bytes(avail)} (df's available) after {fmt_bytes(n)} of buffered writes: "
               f"{err or 'took it'}, {fmt_bytes(taken)} taken; the writer's fsync {fs_err or 0}, close {cl_err or 0}")
        if fs_err or cl_err:
            c.fail(f"{how}: the accepted buffered writes lost their space: fsync {fs_err or 0}, close {cl_err or 0}")
        c.remount(m)
        p = check_file(m.mnt, seed, name, n, f"{how}, after remount")
        if p:
            c.fail(p)
        c.finish_and_drop(m)


CASES = {1: case1, 2: case2, 3: case3, 4: case4, 5: case5, 6: case6, 7: case7, 8: case8}


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
