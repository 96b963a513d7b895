"""Kernel ext4 beside cairn for seed 002 (`bench/mballoc`): the same
fragmented-disk experiment on the file system the seed was written for.

ext4 runs on a loop device over a sparse file in the same private tmpfs as
cairn's images, at a size where that is practical (a few TiB: the mkfs, the
fragmentation and every fresh copy take seconds there). Nothing is ever
written to the inode tables or the journal area up front: mkfs gets
`lazy_itable_init=1,lazy_journal_init=1,nodiscard` and every mount
`noinit_itable`, or the lazy-init thread would fill the tmpfs with zeros.

Fragmenting it honestly (every used block owned by a file, so e2fsck stays
happy): `mkfs.ext4 -m 0`, files fallocated over all free space but a little
(as many as it takes: an ext4 file ends at 16 TiB), a few more files over that
little, then `FALLOC_FL_PUNCH_HOLE` on every other MiB of the big files, by
file offset (half a million `fallocate` calls per TiB, through ctypes: about
8 µs each). The big files' extents are long and group-aligned, so the free
space becomes 1 MiB holes; `e2freefrag` before the runs shows how much is left
in larger runs (group-boundary leftovers).

Each measurement mounts a fresh `cp --sparse=always` copy with
`-o mb_optimize_scan=0|1`, turns on `/sys/fs/ext4/DEV/mb_stats` and reads
`/proc/fs/ext4/DEV/mb_stats` before and after. The kernel has five criteria
since 6.5; the seed's c0..c3 are p2_aligned, goal_fast, goal_slow and
any_free, and best_avail (the new "cr1.5") is reported as c1.5.
"""

import ctypes
import os
import re
import time

from . import fs as fsmod

MiB = 1 << 20
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
# Largest ext4 file with 4 KiB blocks (2^32 blocks), rounded down to 2 MiB.
FILE_MAX = (16 << 40) - 2 * MiB

# (seed's name, section in mb_stats since 6.5, section in 5.13..6.4)
CRITERIA = [
    ("c0", "cr_p2_aligned_stats", "cr0_stats"),
    ("c1", "cr_goal_fast_stats", "cr1_stats"),
    ("c1.5", "cr_best_avail_stats", None),
    ("c2", "cr_goal_slow_stats", "cr2_stats"),
    ("c3", "cr_any_free_stats", "cr3_stats"),
]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]


def fallocate(fd, mode, off, length):
    if _libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"fallocate(mode={mode}, off={off}, len={length}): {os.strerror(e)}")


def available():
    """None if ext4 can run here, else why not."""
    if not fsmod.ROOT:
        return "needs root (loop devices, mount)"
    for tool in ("mkfs.ext4", "losetup", "e2freefrag"):
        if fsmod.shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"`{tool}` is missing (Debian package e2fsprogs / mount)"
    return None


def read_mb_stats(dev):
    """/proc/fs/ext4/DEV/mb_stats as a flat dict: `reqs`, `goal_hits`, and
    `c0.useless_loops` etc. per criterion (seed names, see CRITERIA)."""
    section_name = {}
    for seed, new, old in CRITERIA:
        section_name[new] = seed
        if old:
            section_name[old] = seed
    flat, section = {}, None
    with open(f"/proc/fs/ext4/{os.path.basename(dev)}/mb_stats") as f:
        for line in f:
            s = line.strip()
            if not s or s == "mballoc:":
                continue
            key, _, val = s.partition(":")
            val = val.strip()
            if not val:
                section = section_name.get(key, key)
                continue
            if not line.startswith("\t\t"):
                section = None
            m = re.match(r"-?\d+", val)
            if not m:
                continue
            name = f"{section}.{key}" if section and line.startswith("\t\t") else key
            flat[name] = int(m.group(0))
    return flat


def stat_deltas(before, after):
    return {k: after[k] - before.get(k, 0) for k in after}


def freefrag(dev):
    """e2freefrag's summary: max free extent (KiB) and the histogram rows."""
    text = fsmod.out(["e2freefrag", dev])
    res = {"histogram": []}
    m = re.search(r"Max\. free extent: (\d+) KB", text)
    if m:
        res["max_free_extent_kib"] = int(m.group(1))
    m = re.search(r"Free blocks: (\d+)", text)
    if m:
        res["free_blocks"] = int(m.group(1))
    for line in text.split("HISTOGRAM", 1)[-1].splitlines():
        m = re.match(r"\s*(\S+\.\.\.\s*\S+)\s*:\s*(\d+)\s+(\d+)\s+([\d.]+)%", line)
        if m:
            res["histogram"].append(
                {"range": re.sub(r"\s+", "", m.group(1)), "extents": int(m.group(2)), "blocks": int(m.group(3)),
                 "percent": float(m.group(4))}
            )
    return res


class Ext4:
    """One ext4 image: `prepare` makes the pristine fragmented one, then
    `mounted(mode)` gives a fresh copy mounted with mb_optimize_scan=mode."""

    def __init__(self, scratch, size, say):
        self.scratch = scratch
        self.size = size
        self.say = say
        self.pristine = os.path.join(scratch, "ext4-pristine.img")
        self.work = os.path.join(scratch, "ext4-work.img")
        self.mp = os.path.join(scratch, "ext4-mnt")
        self.dev = None

    def _attach(self, path):
        self.dev = fsmod.out(["losetup", "--find", "--show", path])

    def _detach(self):
        if fsmod.is_mounted(self.mp):
            fsmod.run(["umount", self.mp], check=False, capture_output=True)
        if self.dev:
            fsmod.run(["losetup", "-d", self.dev], check=False, capture_output=True)
            self.dev = None

    def cleanup(self, keep_pristine):
        self._detach()
        for p in [self.work] + ([] if keep_pristine else [self.pristine]):
            if os.path.exists(p):
                os.unlink(p)

    def prepare(self):
        info = {"size_bytes": self.size}
        with open(self.pristine, "wb") as f:
            f.truncate(self.size)
        self._attach(self.pristine)
        t = time.monotonic()
        fsmod.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                   self.dev], capture_output=True)
        info["mkfs_seconds"] = time.monotonic() - t
        os.makedirs(self.mp, exist_ok=True)
        fsmod.run(["mount", "-o", "noinit_itable", self.dev, self.mp])
        t = time.monotonic()
        st = os.statvfs(self.mp)
        total = (st.f_bfree * st.f_frsize - 64 * MiB) // (2 * MiB) * (2 * MiB)
        # ext4 files end at 2^32 blocks (16 TiB with 4 KiB blocks): as many as it takes.
        sizes = [min(FILE_MAX, total - off) for off in range(0, total, FILE_MAX)]
        fds = [os.open(os.path.join(self.mp, f"fill{i}"), os.O_CREAT | os.O_WRONLY, 0o644) for i in range(len(sizes))]
        try:
            for fd, size in zip(fds, sizes):
                fallocate(fd, 0, 0, size)
            info["fill_bytes"] = total
            info["fill_files"] = len(sizes)
            # The little that is left: more files, not punched (halving on ENOSPC).
            chunk = None
            for i in range(64):
                st = os.statvfs(self.mp)
                free = st.f_bfree * st.f_frsize
                if free < 2 * MiB:
                    break
                length = free - MiB if chunk is None else min(chunk, free - MiB)
                rfd = os.open(os.path.join(self.mp, f"rest{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
                try:
                    fallocate(rfd, 0, 0, length)
                except OSError:
                    chunk = max(MiB, length // 2)
                finally:
                    os.close(rfd)
            info["fill_seconds"] = time.monotonic() - t
            t = time.monotonic()
            holes = 0
            for fd, size in zip(fds, sizes):
                for off in range(MiB, size, 2 * MiB):
                    fallocate(fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, off, MiB)
                    holes += 1
            info["punch_seconds"] = time.monotonic() - t
            info["holes"] = holes
        finally:
            for fd in fds:
                os.close(fd)
        fsmod.run(["umount", self.mp])
        info["freefrag"] = freefrag(self.dev)
        info["bytes_on_disk"] = os.stat(self.pristine).st_blocks * 512
        self._detach()
        info["groups"] = -(-self.size // (128 * MiB))
        return info

    def mount(self, mode):
        """Mounts a fresh copy with mb_optimize_scan=mode, stats on; returns
        the mount's seconds."""
        fsmod.run(["cp", "--sparse=always", self.pristine, self.work])
        self._attach(self.work)
        t = time.monotonic()
        fsmod.run(["mount", "-o", f"mb_optimize_scan={mode},noinit_itable", self.dev, self.mp])
        secs = time.monotonic() - t
        with open(f"/sys/fs/ext4/{os.path.basename(self.dev)}/mb_stats", "w") as f:
            f.write("1\n")
        return secs

    def unmount(self):
        t = time.monotonic()
        fsmod.run(["umount", self.mp])
        secs = time.monotonic() - t
        self._detach()
        os.unlink(self.work)
        return secs

    def seed_runs(self, mode, dd_timed):
        """Part a on ext4: the seed's dd three times in a row."""
        res = {"mount_seconds": self.mount(mode), "runs": []}
        for _ in range(3):
            s0 = read_mb_stats(self.dev)
            r = dd_timed(os.path.join(self.mp, "file"))
            r["delta"] = stat_deltas(s0, read_mb_stats(self.dev))
            res["runs"].append(r)
        res["umount_seconds"] = self.unmount()
        return res

    def loops(self, mode, dd_zero):
        """Part b on ext4: dd bs=2M count=2 conv=fsync and mb_stats."""
        self.mount(mode)
        s0 = read_mb_stats(self.dev)
        res = dd_zero(os.path.join(self.mp, "file"))
        res["delta"] = stat_deltas(s0, read_mb_stats(self.dev))
        self.unmount()
        return res
