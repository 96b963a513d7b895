//! The POSIX-shaped API of the engine. (Being implemented; signatures are final.)

use crate::dev::BlockDevice;
use crate::error::{err, Result};
use crate::types::*;
use std::sync::Arc;
use std::time::Duration;

/// Options for [`Fs::mount`].
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Refuse every change; the journal is not replayed into the image.
    pub read_only: bool,
    /// Commit interval of the backend thread (`-o commit=SECONDS`).
    pub commit_interval: Duration,
    /// Metadata buffer cache size, in blocks.
    pub cache_blocks: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { read_only: false, commit_interval: Duration::from_secs(5), cache_blocks: 65536 }
    }
}

/// A mounted file system.
pub struct Fs {
    _dev: Arc<dyn BlockDevice>,
}

#[allow(unused_variables)]
impl Fs {
    /// Mounts the image on `dev`: verifies the superblock, replays the journal,
    /// processes the orphan list and starts the backend (commit) thread.
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Arc<Fs>> {
        err(libc::ENOSYS)
    }

    /// Commits everything, checkpoints the journal, marks the image clean and
    /// stops the backend thread. Later calls fail with `Shutdown`.
    pub fn unmount(&self) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Looks `name` up in directory `parent`; on success the inode's lookup
    /// count (FUSE nlookup) is incremented.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Drops `n` lookup references; an unlinked inode is freed at zero.
    pub fn forget(&self, ino: u64, n: u64) {}

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Changes attributes (chmod, chown, truncate, utimens).
    pub fn setattr(&self, ctx: &Ctx, ino: u64, set: &SetAttr) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Creates a regular file, device node, FIFO or socket; `mode` includes
    /// the `S_IF*` type (umask already applied). Increments the lookup count.
    pub fn mknod(&self, ctx: &Ctx, parent: u64, name: &[u8], mode: u32, rdev: u64) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Creates a directory. Increments the lookup count.
    pub fn mkdir(&self, ctx: &Ctx, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Creates a symbolic link. Increments the lookup count.
    pub fn symlink(&self, ctx: &Ctx, parent: u64, name: &[u8], target: &[u8]) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Creates an unnamed regular file (O_TMPFILE): an orphan until linked.
    pub fn tmpfile(&self, ctx: &Ctx, parent: u64, mode: u32) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Adds a hard link. Increments the lookup count.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr> {
        err(libc::ENOSYS)
    }

    /// Removes a non-directory entry.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Renames, with `RENAME_NOREPLACE` / `RENAME_EXCHANGE` flags.
    pub fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8], flags: u32) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Target of a symbolic link.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        err(libc::ENOSYS)
    }

    /// Reads up to `size` bytes at `off` (short only at end of file).
    pub fn read(&self, ino: u64, off: u64, size: u32) -> Result<Vec<u8>> {
        err(libc::ENOSYS)
    }

    /// Writes `data` at `off`; returns the bytes written.
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<u32> {
        err(libc::ENOSYS)
    }

    /// fallocate(2): `mode` is 0 or a combination of `FALLOC_FL_*`.
    pub fn fallocate(&self, ino: u64, off: u64, len: u64, mode: i32) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// lseek(2) for `SEEK_DATA` / `SEEK_HOLE` (other whences are the kernel's).
    pub fn lseek(&self, ino: u64, off: u64, whence: i32) -> Result<u64> {
        err(libc::ENOSYS)
    }

    /// Lists directory `ino` from `offset` (0 = start; `.` and `..` come
    /// first), calling `f` per entry until it returns false. Offsets are
    /// stable across concurrent creates and unlinks.
    pub fn readdir(&self, ino: u64, offset: u64, f: &mut dyn FnMut(&DirEntry) -> bool) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Makes the file's data and metadata durable (fsync / fdatasync).
    pub fn fsync(&self, ino: u64, datasync: bool) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Commits everything (syncfs / sync).
    pub fn sync_fs(&self) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// statfs(2).
    pub fn statfs(&self) -> Result<StatFs> {
        err(libc::ENOSYS)
    }

    /// Sets an extended attribute (`flags`: `XATTR_CREATE` / `XATTR_REPLACE`).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Value of an extended attribute (ENODATA if absent).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        err(libc::ENOSYS)
    }

    /// Names of all extended attributes, each followed by a NUL byte.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        err(libc::ENOSYS)
    }

    /// Removes an extended attribute (ENODATA if absent).
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        err(libc::ENOSYS)
    }

    /// Live counters, as (dotted name, value) pairs: `journal.commits`,
    /// `alloc.blocks_allocated`, `cache.hits`, ... Later subsystems add theirs.
    pub fn stats(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}
