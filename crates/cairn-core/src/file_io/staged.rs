//! The staged journaled write (`-o staged_writes=1`; off by default: the
//! full-disk suite caught write-backs refused with it, see the end): a write
//! that allocates copies its data with no transaction handle open.
//!
//! A journaled write used to allocate a hole's blocks, copy the data into
//! them and map them in one handle, so every commit waited for the copy: a
//! commit begins only once no handle holds the gate. On an image whose
//! pages the host must first give (a sparse image file on a VM that hands
//! free memory back), a MiB copied costs 3 ms, and an `fsync` behind it
//! waits that long (issue #53: 11 of dbench's 14 gate holds over 3 ms). The
//! write now runs in three stages, as ext4 converts unwritten extents after
//! the data is written:
//!
//! 1. *map*: in handles, the range's holes are allocated and mapped
//!    *unwritten* (`file::allocate_unwritten`, as `fallocate -n` maps them);
//!    the size does not change. A range with no hole skips this stage.
//! 2. *copy*: with no handle open, the data goes into the range's blocks:
//!    whole blocks of the unwritten ones (zeros around the data, so no stale
//!    byte is ever exposed), the data's own bytes in written ones; first the
//!    tail of the old last block past the size is zeroed, as before.
//! 3. *convert*: in handles, the range's unwritten extents become written
//!    (`file::convert_written`), and the size and times are set.
//!
//! The caller holds the inode's I/O lock exclusively across all three, so no
//! other write, truncate, fallocate or fast-path overwrite of the file runs
//! between them; readers see the range unwritten — zeros, as the hole read —
//! until the stage 3 handle maps it written.
//!
//! What a crash leaves: after stage 1's commit, unwritten blocks inside or
//! past the size (fsck accepts them, as `fallocate -n` leaves them), the old
//! bytes readable; the write had not been answered. Data ordering is as
//! before: the data is in the image before the handle that maps it written
//! begins, and the commit that carries that handle flushes the device before
//! its commit record.
//!
//! Near a full disk the one-handle write runs instead: while the FUSE space
//! guard holds space for the kernel's dirty pages (`Allocator::
//! held_for_write_back`), and when stage 1 runs out of space (it then maps and
//! writes what fits, converting what stage 1 mapped). The guard counts data
//! blocks; an unwritten extent does not merge with the written one before
//! it until stage 3, so an append may take a map block for a moment that
//! the one-handle write would not (issue #53's first CI run: a write-back
//! refused, a size shrinking after drop_caches). That fallback was not
//! enough: a later CI run refused a write-back again (case 1 of
//! `tests/external/fulldisk.sh`, 256 MiB, default options), so staged
//! writes are off by default until the guard counts what they take. An
//! error in stage 2 (I/O)
//! leaves the range unwritten and goes to the caller.

use super::FileIo;
use crate::error::{FsError, Result};
use crate::file;
use crate::journal::credits;
use std::sync::atomic::Ordering;

impl FileIo {
    /// The journaled write as three stages (see the module essay), under the
    /// inode's I/O lock. Returns the bytes written: short only on a full
    /// file system after some progress.
    pub(super) fn write_staged(&self, ino: u64, off: u64, data: &[u8], update_times: bool) -> Result<u32> {
        if data.is_empty() || self.engine.meta().alloc().held_for_write_back() > 0 {
            // Nothing to copy (the one-handle path sets what an empty write
            // sets), or a nearly full file system (see the module essay).
            return self.write_steps(ino, off, data, update_times);
        }
        {
            let _io = self.inodes.io_locks().exclusive(ino);
            self.inodes.settle_truncate(ino)?;
            let end = off
                .checked_add(data.len() as u64)
                .filter(|e| *e <= file::MAX_FILE_SIZE)
                .ok_or(FsError::Errno(libc::EFBIG))?;
            match self.map_unwritten(ino, off, end) {
                Ok(()) => {
                    self.copy_staged(ino, off, data)?;
                    let written = self.convert_staged(ino, off, end, update_times)?;
                    self.ow.stats.staged_writes.fetch_add(1, Ordering::Relaxed);
                    if written == off {
                        // Stage 1 mapped the range and the I/O lock kept
                        // everything else out: a hole found in stage 3 is
                        // damage, not a full disk.
                        tracing::error!(ino, off, "a staged write found its range unmapped");
                        return Err(FsError::Errno(libc::EIO));
                    }
                    return Ok((written - off) as u32);
                }
                Err(FsError::Errno(libc::ENOSPC | libc::EDQUOT)) => {}
                Err(e) => return Err(e),
            }
        }
        // Full in stage 1: the one-handle write maps and writes what fits,
        // converting what stage 1 mapped, with its waits for blocks the
        // journal still holds.
        self.ow.stats.staged_fallbacks.fetch_add(1, Ordering::Relaxed);
        self.write_steps(ino, off, data, update_times)
    }

    /// Stage 1: maps the holes of `[off, end)` unwritten (ENOSPC if they do
    /// not all fit; what was mapped stays, unwritten).
    fn map_unwritten(&self, ino: u64, off: u64, end: u64) -> Result<()> {
        if self.blocks_to_allocate(ino, off, end - off)? == 0 {
            return Ok(());
        }
        let b = u64::from(self.engine.meta().geo().block_size);
        let (first, last) = (off / b, end.div_ceil(b));
        loop {
            let step = self.engine.change(credits::DEFAULT, |tx| {
                let r = self.inodes.iget(ino)?;
                let mut g = r.write();
                super::ops::regular_file(&g)?;
                let holes_left = file::allocate_unwritten(tx, &mut g, first, last);
                let holes_left = self.stored_if_failed(tx, &g, holes_left)?;
                if tx.changed() {
                    self.inodes.store(tx, &g)?;
                }
                Ok(holes_left)
            });
            if !step? {
                return Ok(());
            }
            self.engine.txm().stats.steps.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Stage 2: `data` into the blocks at `off`, with no handle open (see
    /// the module essay); the tail of the old last block first.
    fn copy_staged(&self, ino: u64, off: u64, data: &[u8]) -> Result<()> {
        let meta = self.engine.meta();
        let b = u64::from(meta.geo().block_size);
        let end = off + data.len() as u64;
        let r = self.inodes.iget(ino)?;
        let runs = {
            let g = r.read();
            if off > g.d.size {
                file::zero_tail(meta, &g, off)?;
            }
            file::mapped_runs(meta, &g, off / b, end.div_ceil(b))?
        };
        for run in runs {
            let len = u64::from(run.len);
            if run.unwritten {
                file::fill_blocks(meta, run.pblk, run.lblk, len, off, data)?;
                continue;
            }
            let s = off.max(run.lblk * b);
            let e = end.min((run.lblk + len) * b);
            let bytes = &data[(s - off) as usize..(e - off) as usize];
            meta.dev().write_data(bytes, run.pblk * b + (s - run.lblk * b))?;
        }
        Ok(())
    }

    /// Stage 3: converts `[off, upto)` written and sets the size (and the
    /// times, if `update_times`); returns how far it is written.
    fn convert_staged(&self, ino: u64, off: u64, upto: u64, update_times: bool) -> Result<u64> {
        let mut from = off;
        loop {
            let step = self.engine.change(credits::DEFAULT, |tx| {
                let r = self.inodes.iget(ino)?;
                let mut g = r.write();
                let converted = file::convert_written(tx, &mut g, from, upto);
                let (to, more) = self.stored_if_failed(tx, &g, converted)?;
                if to > g.d.size {
                    g.d.size = to;
                }
                if update_times {
                    let t = crate::types::now();
                    g.d.mtime = t;
                    g.d.ctime = t;
                }
                self.inodes.store(tx, &g)?;
                Ok((to, more))
            });
            let (to, more) = match step {
                Ok(x) => x,
                // Mapped written short of the end: the bytes before count.
                Err(FsError::Errno(libc::ENOSPC | libc::EDQUOT)) if from > off => return Ok(from),
                Err(e) => return Err(e),
            };
            if !more || to >= upto {
                return Ok(to);
            }
            from = to;
            self.engine.txm().stats.steps.fetch_add(1, Ordering::Relaxed);
        }
    }
}
