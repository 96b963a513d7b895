"""The real cairn mounts of tests/external/fulldisk.py: mkfs, mount, umount, SIGKILL of
the daemon, fsck; finding the daemon and whether the image is free; the scratch tmpfs
of a run or case; and the exit cleanup of every mount, daemon, tmpfs and child process
this process made."""

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from fulldisk_common import log

# Whether a path is mounted and an image free: the checks the bench suite
# makes too (bench/cairnbench/mounts.py, standard library only).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from cairnbench.mounts import image_free, is_mounted  # noqa: E402

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


def track_proc(p):
    """A child process (writer, reader) for the exit cleanup to kill if still running."""
    _PROCS.append(p)


def reap_procs():
    """Kills the tracked child processes still running and forgets all of them."""
    for p in list(_PROCS):
        if p.poll() is None:
            p.kill()
            p.wait()
        _PROCS.remove(p)


# ---------------------------------------------------------------------------------------
# Mount helpers
# ---------------------------------------------------------------------------------------


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


# Encrypted images (issue 54, scripts/test.sh's fulldisk-enc): $CAIRN_KEY_FILE, given to
# mkfs (with --encrypt), mount and fsck.
KEY_ARGS = ["--key-file", os.environ["CAIRN_KEY_FILE"]] if os.environ.get("CAIRN_KEY_FILE") else []


class Mount:
    def __init__(self, cairn, img, mnt):
        self.cairn, self.img, self.mnt = cairn, os.path.abspath(img), os.path.abspath(mnt)
        self.pid = None
        os.makedirs(self.mnt, exist_ok=True)

    def mkfs(self, size):
        enc = ["--encrypt"] + KEY_ARGS if KEY_ARGS else []
        rc, out = run_cmd([self.cairn, "mkfs", self.img, "--size", size, "--force", "--quiet"] + enc, 120)
        if rc != 0:
            raise Fail(f"cairn mkfs failed ({rc}): {out[-300:]}")

    def mount(self, opts=""):
        argv = [self.cairn, "mount", self.img, self.mnt] + (["-o", opts] if opts else []) + KEY_ARGS
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
        rc, out = run_cmd([self.cairn, "fsck", self.img] + KEY_ARGS, 600)
        if rc == 0:
            return None
        tail = " | ".join(out.splitlines()[-6:])
        return f"cairn fsck exited {rc}: {tail}"

    def umount_fsck(self):
        """`cairn umount`, then `cairn fsck` (whatever the unmount said): their messages."""
        return [err for err in (self.umount(), self.fsck()) if err]

    def df(self):
        st = os.statvfs(self.mnt)
        return st.f_bavail * st.f_frsize

    def forget(self):
        """No longer for the exit cleanup (this mount was cleaned up already)."""
        if self in _MOUNTS:
            _MOUNTS.remove(self)


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
