"""The file systems under test: how to make, mount, unmount and measure each.

Every file system lives in RAM, as in the seeds' runs: one private tmpfs (the
scratch) holds a backing file per file system, and each block-based file
system (cairn, ext4, XFS, btrfs, fuse2fs) sits on its own loop device over
its file, so the loop device's written-sectors counter measures what each one
writes, journal and home locations alike. tmpfs is the ceiling.

cairn is mounted the way a user mounts it as root (fuseblk, so `sync` reaches
it); fuse2fs serves the same loop device from user space. An experiment may
instead run cairn on its image file directly (`cairn mount IMG MP`, as a user
would: cairn then attaches a loop device only for the fuseblk mount and does
its own I/O on the file), see `Experiment.cairn_on` (fuse2fs then serves its
image file too, so both user-space file systems do their I/O alike): through a loop device,
cairn's buffered `pwrite`s to /dev/loopN land in that device's page cache and
are copied a second time by the loop driver into the tmpfs file, a layer a
kernel file system's bios do not cross (issue #14).

cairn variants (`CAIRN_VARIANTS`) are cairn mounted with extra `-o` options
and measured as file systems of their own (e.g. `cairn-nofast`: the overwrite
fast path off; `cairn-syncdelete`: deletes freed on the calling thread, not
deferred to the reaper; `cairn-nowbcache`: the kernel's writeback cache off;
`cairn-nodirect`: file data through the host's page cache, not O_DIRECT). Every mount made here is undone by `FileSystem.teardown`,
which the runner calls on success, failure and Ctrl-C alike.
"""

import os
import shutil
import subprocess

from .mounts import is_mounted, wait_until

ALL_FS = ["cairn", "tmpfs", "ext4", "xfs", "btrfs", "fuse2fs"]
# `--baseline PATH` adds this file system: cairn built from another commit,
# measured in the same run (before/after comparisons).
BASELINE = "cairn-baseline"
# cairn mounted with extra `-o` options, measured as a file system of its own
# (`--fs cairn,cairn-nofast,...`; not in ALL_FS: an experiment may add one to
# its default list, see `Experiment.extra_fs`). name -> mount options.
CAIRN_VARIANTS = {
    "cairn-nofast": ["overwrite_fastpath=0"],
    # Deferred deletes off: the last unlink frees on the FUSE thread (issue #13).
    "cairn-syncdelete": ["sync_delete"],
    # The kernel's writeback cache off (on by default: see docs/fuse.md), to
    # measure what it gives and costs (issue #9).
    "cairn-nowbcache": ["writeback_cache=0"],
    # FUSE over io_uring off: every request through /dev/fuse (issue #9).
    "cairn-devfuse": ["io_uring=0"],
    # Journal records logged as they are, not compressed (issue #12).
    "cairn-nocompress": ["journal_compress=0"],
    # Locality groups off: small files search near their inode (issue #10).
    "cairn-nolg": ["mb_group_prealloc=0"],
    # OPEN answered, O_DIRECT opens with FOPEN_PARALLEL_DIRECT_WRITES: O_DIRECT
    # writers to one file overlap in the kernel too (issue #14).
    "cairn-pdio": ["parallel_dio=1"],
    # ... and every overwrite through the journaled path, to measure the fast
    # path where the kernel does not serialise the writers (issue #14).
    "cairn-pdio-nofast": ["parallel_dio=1", "overwrite_fastpath=0"],
    # A push closes the transaction gate at once instead of first waiting for
    # a moment with no operation inside (issue #12).
    "cairn-impatient": ["push_patience_us=0"],
    # The io_uring queue threads not pinned to their queue's CPU: a lone
    # reader's READs may be served beside it instead of on its CPU (issue #53).
    "cairn-unpinned": ["ring_pin=0"],
    # Thread t of io_uring queue q pinned to CPU q+t: a lone reader's second
    # READ in flight is served on another CPU (issue #53).
    "cairn-spread": ["ring_spread=1"],
    # read_move off: a lone reader's large READs served on its own CPU, as
    # before issue #53 (read_move=1 is the default).
    "cairn-nomove": ["read_move=0"],
    # Issue #53's staged writes: a journaled write's data copied with no
    # transaction handle open (off by default).
    "cairn-staged": ["staged_writes=1"],
    # File data through the host's page cache instead of O_DIRECT: each byte
    # read is cached twice (issue #37).
    "cairn-nodirect": ["direct_data=0"],
    # Directory listings with READDIRPLUS only where the kernel's heuristic
    # asks (cairn lists with it always), issue #37.
    "cairn-rdpauto": ["readdirplus=auto"],
    # The three defaults issue #37 changed, as they were before: file data
    # through the host's page cache, READDIRPLUS by the kernel's heuristic,
    # files made with FUSE_CREATE (and a RELEASE at close).
    "cairn-oldopts": ["direct_data=0", "readdirplus=auto", "mknod_create=0"],
    # Metadata read one block at a time: no inode-table readahead (on a miss
    # or of a listing's inodes), no tree leaves read ahead of a scan (issue #37).
    # (cairn-nodefer, cairn-nolistra and cairn-cachelisted measured switches
    # retired in issue #52: deferred orphan inserts, a listing's readahead and
    # listings that leave inodes out of the cache won.)
    "cairn-nora": ["inode_readahead_blks=0", "node_readahead=0"],
    # cairn itself on a loop device over its image even where the experiment
    # serves the image file (`ON_LOOP`): what that layer costs (issue #37).
    "cairn-loop": [],
}
# Variants that always serve a loop device, whatever `cairn_on` says.
ON_LOOP = {"cairn-loop"}
# cairn's engine alone, without FUSE or the kernel: the experiment runs a
# `cairn-bench-driver ...` workload on an image file in the scratch tmpfs (nothing is
# mounted). Only experiments that name it in `Experiment.extra_fs` run it.
ENGINE = "cairn-engine"
# The FUSE floor: `cairn-bench-driver nullfs`, a null server on cairn's own
# transport and options with no engine behind it (its tree in memory, file bytes
# not kept). Only experiments that name it in `Experiment.extra_fs` run it.
NULLFS = "nullfs"
# The null server keeping file bytes in a file in the scratch (`--data`): READs
# copy them out of it, as cairn's out of its image (issue #53).
NULLFS_DATA = "nullfs-data"
NULL_SERVERS = (NULLFS, NULLFS_DATA)
# Encrypted file systems (issue #54, `bench/run crypt`): cairn on an encrypted
# image (`cairn mkfs --encrypt`, unlocked with a key file), and the two
# user-space encrypting file systems Debian packages, each stacked on ext4 on
# a loop device over a file in the scratch tmpfs (ext4 mounted at
# SCRATCH/NAME-lower, the ciphertext in its directory `c`).
CAIRN_CRYPT = "cairn-crypt"
STACKED = ["gocryptfs", "cryfs"]
CRYPT_FS = [CAIRN_CRYPT, *STACKED]
# The passphrase the stacked ones are made and mounted with (a file in the scratch).
STACKED_PASSPHRASE = "cairn-bench"
USER_FS = ["cairn", "fuse2fs", BASELINE, ENGINE, *NULL_SERVERS, *CAIRN_VARIANTS, *CRYPT_FS]
ROOT = os.geteuid() == 0
KERNEL_FS = {"tmpfs", "ext4", "xfs", "btrfs"}


def driver_of(cairn_bin):
    """The benchmark driver (`bench/driver`, the engine in-process) built
    beside the `cairn` binary `cairn_bin`."""
    driver = os.path.join(os.path.dirname(os.path.abspath(cairn_bin)), "cairn-bench-driver")
    if not os.access(driver, os.X_OK):
        raise RuntimeError(f"no {driver}: build it with `cargo build --release -p cairn-bench-driver`")
    return driver


def is_cairn(name):
    """cairn itself, cairn from another commit, or cairn with extra options."""
    return name in ("cairn", BASELINE, CAIRN_CRYPT) or name in CAIRN_VARIANTS


def cairn_options(name):
    """The extra `-o` options of a cairn variant ([] for cairn itself)."""
    return CAIRN_VARIANTS.get(name, [])


def unsupported_options(binary, name):
    """The options of cairn variant `name` that `binary` does not know
    (checked in `cairn mount --help` and, as cairn's option parser names
    every option it accepts, in the binary itself): a build from before the
    option existed would refuse the mount in every cell."""
    missing = []
    try:
        helptext = out([binary, "mount", "--help"])
    except (OSError, subprocess.CalledProcessError):
        helptext = ""
    for opt in cairn_options(name):
        key = opt.split("=", 1)[0]
        if key in helptext:
            continue
        try:
            with open(binary, "rb") as f:
                if key.encode() in f.read():
                    continue
        except OSError:
            pass
        missing.append(opt)
    return missing


# What each file system needs on this machine: (command, Debian package).
NEEDS = {
    "cairn": [],
    BASELINE: [],
    **{v: [] for v in CAIRN_VARIANTS},
    ENGINE: [],
    **{n: [] for n in NULL_SERVERS},
    "tmpfs": [],
    "ext4": [("mkfs.ext4", "e2fsprogs")],
    "xfs": [("mkfs.xfs", "xfsprogs")],
    "btrfs": [("mkfs.btrfs", "btrfs-progs")],
    "fuse2fs": [("fuse2fs", "fuse2fs"), ("mkfs.ext4", "e2fsprogs")],
    CAIRN_CRYPT: [],
    "gocryptfs": [("gocryptfs", "gocryptfs"), ("mkfs.ext4", "e2fsprogs")],
    "cryfs": [("cryfs", "cryfs"), ("mkfs.ext4", "e2fsprogs")],
}


def run(cmd, check=True, **kw):
    """Runs a command (a list), returning the CompletedProcess."""
    return subprocess.run(cmd, check=check, stdin=subprocess.DEVNULL, **kw)


def out(cmd):
    return run(cmd, capture_output=True, text=True).stdout.strip()


def missing_tools(fs_names):
    """[(fs, command, package)] of what is not installed."""
    miss = []
    for fs in fs_names:
        for cmd, pkg in NEEDS[fs]:
            if shutil.which(cmd) is None and not os.path.exists(f"/usr/sbin/{cmd}"):
                miss.append((fs, cmd, pkg))
    return miss


class Scratch:
    """A private tmpfs for backing files and mount points."""

    def __init__(self, size):
        self.path = run(["mktemp", "-d", "/tmp/cairn-bench.XXXXXX"], capture_output=True, text=True).stdout.strip()
        if ROOT:
            run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", self.path])
        self.short_names = {}

    def mount_point(self, name):
        """A short mount point for file system `name` (m0, m1, ...): fs_mark
        3.3 overflows a fixed buffer (and aborts) when its directory paths
        are much longer than `/tmp/cairn-bench.XXXXXX/cairn/0`."""
        short = self.short_names.setdefault(name, f"m{len(self.short_names)}")
        return os.path.join(self.path, short)

    def teardown(self):
        if not ROOT:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for line in reversed(open("/proc/self/mountinfo").read().splitlines()):
            mp = line.split()[4]
            if mp.startswith(self.path + "/"):
                run(["umount", "-l", mp], check=False, capture_output=True)
        run(["umount", "-l", self.path], check=False, capture_output=True)
        try:
            os.rmdir(self.path)
        except OSError:
            pass


class FileSystem:
    """One file system under test, made fresh by `make()` for every cell.

    As root each block file system gets a loop device, except cairn and
    fuse2fs where the experiment says `cairn_on = "file"`; without root (only
    cairn and fuse2fs can run then) they serve the image file directly,
    through fusermount3, and there is no written-sectors counter."""

    def __init__(self, name, scratch, cairn_bin, size_bytes, cairn_on="loop", mount_options=None, dense=False):
        self.name = name
        self.scratch = scratch
        self.cairn = cairn_bin
        # cairn itself, cairn built from another commit (--baseline), or cairn
        # with extra mount options (CAIRN_VARIANTS).
        self.is_cairn = is_cairn(name)
        # "loop": cairn serves a loop device over its image, as the kernel file
        # systems do; "file": cairn serves the image file itself.
        self.cairn_on = cairn_on
        self.size = size_bytes
        # Extra kernel mount options per file system ({"ext4": [...]}), as an
        # experiment asks (`Experiment.mount_options`).
        self.mount_options = (mount_options or {}).get(name, [])
        # Write the image file in full before formatting (`Experiment.dense_image`).
        self.dense = dense
        self.image = os.path.join(scratch.path, f"{name}.img")
        self.mp = scratch.mount_point(name)
        self.dev = None
        self.src = None
        self.pid = None
        self.is_null = name in NULL_SERVERS
        self.proc = None  # the null server, a child of this process
        self.is_stacked = name in STACKED
        # An encrypted cairn's key file; a stacked one's lower ext4 and passphrase file.
        self.key_file = os.path.join(scratch.path, f"{name}.key")
        self.lower = os.path.join(scratch.path, f"{name}-lower")

    # ------------------------------------------------------------ lifecycle

    def make(self):
        """Formats a fresh file system and mounts it."""
        self.teardown()
        os.makedirs(self.mp, exist_ok=True)
        if self.name == "tmpfs":
            run(["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=755", "tmpfs", self.mp])
            return
        if self.is_null:
            self.mount()
            return
        with open(self.image, "wb") as f:
            if self.dense:
                write_zeros(f, self.size)
            f.truncate(self.size)
        if self.name == ENGINE:  # an image file, formatted, never mounted
            run([self.cairn, "mkfs", self.image, "--force", "--quiet"], capture_output=True)
            return
        # Where an experiment says "file", both user-space file systems (cairn
        # and fuse2fs) serve their image file, as a user runs them; the kernel
        # ones always need a loop device.
        on_file = (self.is_cairn or self.name == "fuse2fs") and self.cairn_on == "file" and self.name not in ON_LOOP
        self.dev = out(["losetup", "--find", "--show", self.image]) if ROOT and not on_file else None
        self.src = self.dev or self.image
        q = dict(capture_output=True)
        if self.name == CAIRN_CRYPT:
            with open(self.key_file, "wb") as f:
                f.write(os.urandom(64))
            run([self.cairn, "mkfs", self.src, "--force", "--quiet", "--encrypt", "--key-file", self.key_file], **q)
        elif self.is_cairn:
            run([self.cairn, "mkfs", self.src, "--force", "--quiet"], **q)
        elif self.is_stacked:
            run(["mkfs.ext4", "-q", "-F", self.src], **q)
            self.init_stacked()
            return
        elif self.name in ("ext4", "fuse2fs"):
            # Without root, the root directory must belong to the caller.
            owner = [] if ROOT else ["-E", "root_owner"]
            run(["mkfs.ext4", "-q", "-F", *owner, self.src], **q)
        elif self.name == "xfs":
            run(["mkfs.xfs", "-q", "-f", self.dev], **q)
        elif self.name == "btrfs":
            run(["mkfs.btrfs", "-q", "-f", self.dev], **q)
        self.mount()

    def init_stacked(self):
        """Makes gocryptfs or CryFS in the lower ext4's directory `c` (with
        their default options) and mounts it."""
        self.mount_lower()
        os.makedirs(os.path.join(self.lower, "c"))
        with open(self.key_file, "w") as f:
            f.write(STACKED_PASSPHRASE + "\n")
        if self.name == "gocryptfs":
            run(["gocryptfs", "-init", "-q", "-passfile", self.key_file, os.path.join(self.lower, "c")],
                capture_output=True)
        self.mount()  # CryFS makes the file system at its first mount

    def mount_lower(self):
        os.makedirs(self.lower, exist_ok=True)
        if not is_mounted(self.lower):
            run(["mount", self.dev, self.lower])

    def cryfs_env(self):
        return {**os.environ, "CRYFS_FRONTEND": "noninteractive", "CRYFS_NO_UPDATE_CHECK": "true",
                "CRYFS_LOCAL_STATE_DIR": os.path.join(self.scratch.path, "cryfs-state")}

    def mount_stacked(self):
        self.mount_lower()
        cipher = os.path.join(self.lower, "c")
        if self.name == "gocryptfs":
            run(["gocryptfs", "-q", "-passfile", self.key_file, "-allow_other", cipher, self.mp], capture_output=True)
        else:
            # Each cell makes a fresh CryFS at the same base directory, which
            # CryFS's local state would refuse (exit 20) as a replaced one.
            subprocess.run(["cryfs", "--allow-replaced-filesystem", cipher, self.mp, "-o", "allow_other"],
                           input=STACKED_PASSPHRASE + "\n",
                           text=True, env=self.cryfs_env(), check=True, capture_output=True)
        wait_until(lambda: is_mounted(self.mp), 60, f"{self.name} to mount")
        self.pid = int(out(["pgrep", "-n", "-f", f"{self.name} .*{cipher} {self.mp}"]))

    def mount(self):
        """Mounts the already formatted file system (also after `unmount`;
        the null server starts empty)."""
        if self.is_stacked:
            self.mount_stacked()
        elif self.is_null:
            opts = ["-o", "allow_other"] if ROOT else []
            if self.name == NULLFS_DATA:
                opts += ["--data", self.image]
            proc = subprocess.Popen([driver_of(self.cairn), "nullfs", self.mp, *opts], stdin=subprocess.DEVNULL)
            self.pid, self.proc = proc.pid, proc
            wait_until(lambda: is_mounted(self.mp) or proc.poll() is not None, 30, "the null server to mount")
            if proc.poll() is not None:
                raise RuntimeError(f"cairn-bench-driver nullfs exited {proc.returncode}")
        elif self.is_cairn:
            opts = (["allow_other"] if ROOT else []) + cairn_options(self.name)
            opts = ["-o", ",".join(opts)] if opts else []
            if self.name == CAIRN_CRYPT:
                opts += ["--key-file", self.key_file]
            r = run([self.cairn, "mount", self.src, self.mp, *opts], check=False, capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"cairn mount {' '.join(opts)} failed: {r.stderr.strip() or r.returncode}")
            self.pid = int(out(["pgrep", "-n", "-f", f"cairn mount {self.src} {self.mp}"]))
        elif self.name == "fuse2fs":
            opts = ["-o", "allow_other"] if ROOT else []
            run(["fuse2fs", self.src, self.mp, *opts], capture_output=True)
            wait_until(lambda: is_mounted(self.mp), 30, "fuse2fs to mount")
        elif self.name == "tmpfs":
            raise RuntimeError("tmpfs cannot be remounted with its contents")
        else:
            opts = ["-o", ",".join(self.mount_options)] if self.mount_options else []
            run(["mount", *opts, self.dev, self.mp])
        if ROOT:
            os.chmod(self.mp, 0o777)

    def unmount(self):
        """Unmounts and waits until everything has reached the device (for
        cairn and fuse2fs: until the daemon has exited)."""
        if not is_mounted(self.mp):
            return
        if self.name == "fuse2fs":
            daemon = out(["pgrep", "-n", "-f", f"fuse2fs {self.src} "])
        run(["umount", self.mp] if ROOT else ["fusermount3", "-u", self.mp])
        if self.is_null and self.proc:
            # Our child: reaped here, or it would linger as a zombie.
            self.proc.wait(timeout=120)
            self.proc = None
            self.pid = None
        if self.is_cairn and self.pid:
            wait_until(lambda: not os.path.exists(f"/proc/{self.pid}"), 120, "the cairn daemon to exit")
            self.pid = None
        if self.name == "fuse2fs" and daemon:
            wait_until(lambda: not os.path.exists(f"/proc/{daemon}"), 120, "fuse2fs to exit")
        if self.is_stacked:
            if self.pid:
                pid = self.pid
                wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 120, f"{self.name} to exit")
                self.pid = None
            run(["umount", self.lower])

    def remount_cold(self):
        """Empties every cache the file system keeps: unmount (the daemons
        exit), drop the kernel's caches, mount again. tmpfs has no cold state,
        and the null server's tree lives only in it: only the kernel's caches
        are dropped."""
        if self.name == "tmpfs" or self.is_null:
            drop_caches()
            return
        if self.name != "tmpfs":
            self.unmount()
        drop_caches()
        if self.name != "tmpfs":
            self.mount()

    def teardown(self):
        try:
            if is_mounted(self.mp):
                if self.is_cairn or self.is_null or self.is_stacked or self.name == "fuse2fs":
                    self.unmount()
                else:
                    run(["umount", self.mp], check=False, capture_output=True)
        except Exception:
            run(["umount", "-l", self.mp] if ROOT else ["fusermount3", "-uz", self.mp], check=False, capture_output=True)
        if self.is_stacked and is_mounted(self.lower):
            run(["umount", "-l", self.lower], check=False, capture_output=True)
        if self.dev:
            run(["losetup", "-d", self.dev], check=False, capture_output=True)
            self.dev = None
        if os.path.exists(self.image):
            os.unlink(self.image)

    # ------------------------------------------------------------ measuring

    def sectors_written(self):
        """512-byte sectors written to the backing loop device so far (None
        for tmpfs, and for cairn on its image file: the loop device its
        fuseblk mount holds sees none of its I/O)."""
        st = self.device_stat()
        return None if st is None else st["write_sectors"]

    def device_stat(self):
        """The loop device's I/O counters so far (/sys/block/loopN/stat):
        {reads, read_sectors, writes, write_sectors}, or None (no device)."""
        if not self.dev:
            return None
        with open(f"/sys/block/{os.path.basename(self.dev)}/stat") as f:
            v = [int(x) for x in f.read().split()]
        return {"reads": v[0], "read_sectors": v[2], "writes": v[4], "write_sectors": v[6]}

    def daemon_pid(self):
        """The PID of the user-space daemon serving the mount (cairn's or
        fuse2fs's), or None (a kernel file system, or not mounted)."""
        if self.is_cairn or self.is_null or self.is_stacked:
            return self.pid
        if self.name == "fuse2fs" and is_mounted(self.mp):
            pid = run(["pgrep", "-n", "-f", f"fuse2fs {self.src} "], check=False, capture_output=True, text=True)
            return int(pid.stdout) if pid.stdout.strip() else None
        return None

    def cairn_counters(self):
        """cairn's live counters (`cairn stats --json`), the null server's
        request counters (its root's `user.nullfs.counters`), or {}."""
        import json

        if self.is_null:
            return json.loads(os.getxattr(self.mp, "user.nullfs.counters"))
        if not self.is_cairn:
            return {}

        return json.loads(out([self.cairn, "stats", self.mp, "--json"]))["counters"]


def write_zeros(f, size):
    """Writes `size` zero bytes to `f` (an image made dense). On this machine's
    VM, the first touch of memory the guest has not used lately costs a trap to
    the host (free page reporting): a file system that puts data in space never
    written before pays it on a sparse image and one that reuses space does not.
    An experiment about placement writes its images in full first, so that
    every file system's data lands on memory already in use."""
    chunk = bytes(1 << 20)
    left = size
    while left > 0:
        n = min(left, len(chunk))
        f.write(chunk[:n])
        left -= n
    f.flush()


def drop_caches():
    """Drops the kernel's page, dentry and inode caches (root only; without
    root the remount alone empties the FUSE daemon's and mount's caches)."""
    run(["sync"])
    if ROOT:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
