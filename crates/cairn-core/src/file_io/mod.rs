//! [`FileIo`]: the owner of file data's state — the overwrite fast path and
//! its dirty-times list — and the file operations: reads (`read`, `lseek`,
//! the extent list), journaled writes and their admission on a full disk,
//! fallocate, setattr (`ops`), the overwrite fast path and the logging of
//! its dirty times (`overwrite`), chattr flags (`chattr`), and `fsync` /
//! `syncfs`. It works through the engine (transactions) and the inode store
//! (inodes, I/O locks, truncates), both held by `Arc`; `Fs` routes to it.
//!
//! ## What is durable when
//! [`FileIo::commit`] is the commit that durability asks for (`fsync`,
//! `syncfs`, the backend's periodic commit, unmount): it stores the dirty
//! times first, then commits the journal. The engine's own commits (room
//! for a handle, a full disk) leave the dirty times for the next one.

mod chattr;
mod ops;
mod overwrite;
mod staged;

use crate::engine::Engine;
use crate::error::{FsError, Result};
use crate::file;
use crate::inode_store::InodeStore;
use crate::overwrite_state::Overwrite;
use cairn_format::inode::{S_IFDIR, S_IFREG};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// File data and its operations (see the module essay).
pub struct FileIo {
    engine: Arc<Engine>,
    inodes: Arc<InodeStore>,
    /// The overwrite fast path and its dirty-times list.
    ow: Overwrite,
}

impl FileIo {
    pub(crate) fn new(engine: Arc<Engine>, inodes: Arc<InodeStore>, ow: Overwrite) -> FileIo {
        FileIo { engine, inodes, ow }
    }

    /// The overwrite fast path's state (its counters for `cairn stats`).
    pub(crate) fn overwrite(&self) -> &Overwrite {
        &self.ow
    }

    /// Commits, then checkpoints: every block freed so far may be reused.
    pub(crate) fn commit_and_checkpoint(&self) -> Result<()> {
        self.commit()?;
        self.engine.checkpoint()
    }

    /// Makes everything changed before this call durable; concurrent callers
    /// share one commit (see `tx::manager`).
    /// The overwrite path's dirty times are stored first (see `overwrite`).
    pub(crate) fn commit(&self) -> Result<()> {
        self.log_dirty_times()?;
        self.engine.commit()
    }

    /// The extents of file `ino`, in file order (what FIEMAP and filefrag
    /// report; adjacent ones are not merged).
    pub fn extents(&self, ino: u64) -> Result<Vec<cairn_format::extent::Extent>> {
        self.engine.read_op(|| {
            let r = self.inodes.iget(ino)?;
            let g = r.read();
            if g.d.file_type() != S_IFREG {
                return Err(FsError::Errno(libc::EINVAL));
            }
            crate::extent_map::overlapping(self.engine.meta(), &g, 0, u64::MAX)
        })
    }

    /// Reads up to `size` bytes at `off` (short only at end of file).
    pub fn read(&self, ino: u64, off: u64, size: u32) -> Result<Vec<u8>> {
        self.with_regular(ino, |st| file::read(self.engine.meta(), st, off, size))
    }

    /// Reads into `buf` at `off` (clipped at end of file): the bytes read,
    /// every one of them written (see `file::read_into`). For a caller that
    /// has a buffer already, such as a FUSE reply's.
    pub fn read_into(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.with_regular(ino, |st| file::read_into(self.engine.meta(), st, off, buf))
    }

    /// Runs `f` on regular file `ino`, locked shared (EISDIR for a
    /// directory, EINVAL for anything else).
    fn with_regular<T>(&self, ino: u64, f: impl FnOnce(&crate::inode::InodeState) -> Result<T>) -> Result<T> {
        self.engine.read_op(|| {
            let r = self.inodes.iget(ino)?;
            let g = r.read();
            match g.d.file_type() {
                S_IFREG => f(&g),
                S_IFDIR => Err(FsError::Errno(libc::EISDIR)),
                _ => Err(FsError::Errno(libc::EINVAL)),
            }
        })
    }

    /// lseek(2) for `SEEK_DATA` / `SEEK_HOLE` (other whences are the kernel's).
    pub fn lseek(&self, ino: u64, off: u64, whence: i32) -> Result<u64> {
        self.engine.read_op(|| {
            let r = self.inodes.iget(ino)?;
            let g = r.read();
            match whence {
                libc::SEEK_DATA | libc::SEEK_HOLE => file::seek(self.engine.meta(), &g, off, whence),
                libc::SEEK_SET => Ok(off),
                libc::SEEK_END => Ok(g.d.size.saturating_add(off)),
                _ => Err(FsError::Errno(libc::EINVAL)),
            }
        })
    }

    /// Makes the file's data and metadata durable (fsync / fdatasync).
    /// `fdatasync` of a file whose last metadata change is committed already
    /// (say, after fast-path overwrites) only flushes the device: its dirty
    /// times wait for the next commit, as fdatasync(2) allows.
    pub fn fsync(&self, ino: u64, datasync: bool) -> Result<()> {
        if datasync && !self.engine.mounted_read_only() {
            self.engine.alive()?;
            self.engine.txm().latch.check_commit()?;
            let stored =
                self.engine.read_op(|| Ok(self.inodes.iget(ino)?.read().stored_seq.load(Ordering::Acquire)))?;
            if stored <= self.engine.txm().log.committed_seq() {
                self.ow.stats.datasync_flush_only.fetch_add(1, Ordering::Relaxed);
                return self.engine.read_op(|| Ok(self.engine.meta().dev().flush()?));
            }
        }
        self.sync_fs()
    }

    /// Commits everything (syncfs / sync).
    pub fn sync_fs(&self) -> Result<()> {
        if self.engine.sync_wanted()? {
            self.commit()?;
        }
        Ok(())
    }
}
