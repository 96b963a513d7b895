//! The overwrite fast path (seed 004) and the lazily logged times it leaves.
//!
//! ## Purpose
//! A write whose whole range lies inside the file's size, over blocks that
//! are allocated and written, changes no metadata but mtime and ctime. ext4
//! (Linux 5.10, "Optimize ext4 file overwrites") stopped starting a jbd2
//! transaction for such direct-I/O writes and took the inode lock shared:
//! random overwrites from 16 threads went from 30k to 550k IOPS on pmem.
//! cairn does the same for every write FUSE hands it ([`FileIo::try_overwrite`]):
//! no transaction handle (so no gate, no credits, no commit waits), the
//! file's I/O lock and inode lock taken *shared*, a read-only extent lookup,
//! and `pwrite` straight to the image. Writes to different files, and to
//! different blocks of one file, run in parallel.
//!
//! Everything else takes the journaled path (`file_io::ops`): a write that
//! extends the file, fills a hole, or lands in an unwritten (fallocated)
//! extent. The check is all-or-nothing and made before any byte is written,
//! so a write never goes half one way and half the other.
//!
//! ## Exclusion
//! The per-inode I/O lock (`io_locks`, striped) is a reader-writer lock:
//! fast-path writes hold it shared; journaled writes, truncate, fallocate
//! (punch hole, zero range, allocation, unwritten conversion) and stepwise
//! frees hold it exclusively across all their steps, as ext4 holds
//! `i_rwsem`. The inode's own lock is held shared while the fast path looks
//! up and writes the blocks, so no step of those operations can unmap or
//! free a block while a write to it is in flight.
//!
//! A write that ends past the file's size (an append, the kernel's
//! write-back of a growing file) is sent to the journaled path *before* the
//! I/O lock is taken: the size is read under the inode's lock alone. While a
//! journaled write of the same file holds the I/O lock (the kernel keeps
//! several write-backs of one file in flight), the next append would
//! otherwise wait for the lock shared (parking_lot spins, then yields the
//! CPU: the `sched_yield`s of issue 53's profile), only to fall back and
//! wait again for it exclusive. The check is a hint: a size that grows
//! meanwhile only costs a journaled write that could have been a fast one,
//! and a write found inside the size is checked again under the lock.
//!
//! ## Times
//! The fast path records its time in the inode's dirty times
//! ([`crate::inode::InodeState::lazy_time`], see `inode`) and queues the
//! inode once on `overwrite_state::Overwrite`'s list. [`FileIo::log_dirty_times`] stores every
//! queued inode in ordinary handles at the start of each commit, so times are
//! durable after `fsync`/`syncfs` and at the backend's periodic commit (a
//! commit that starts while another is storing the times it took waits for
//! them: `Overwrite::logging`), one
//! inode-table update per file per commit instead of one transaction per
//! write (ext4's `lazytime`).
//!
//! ## What is durable when
//! Data written on the fast path is durable after the next device flush:
//! every commit flushes the device, even with no metadata to log, and
//! `fdatasync` of a file whose metadata is already committed only flushes
//! the device ([`FileIo::fsync`]). A crash may show part of an overwrite that
//! was in flight (as data=ordered ext4 does); it never exposes stale data,
//! since only blocks already written are overwritten.
//!
//! ## Counters
//! `overwrite.fast_writes`, `fast_bytes`, `journaled_writes`,
//! `journaled_bytes`, `fallbacks` (writes that tried the fast path and
//! needed the journal), `past_size` (of those, the ones past the size, sent
//! on without the I/O lock), `lazy_time_updates`, `lazy_times_logged`,
//! `dirty_times_queued`, `datasync_flush_only`, `enabled`.
//! `-o overwrite_fastpath=0` sends every write down the journaled path.

use super::FileIo;
use crate::error::Result;
use crate::extent_map::{self, Mapping};
use crate::inode::InodeRef;
use crate::journal::credits;
use crate::types::now;
use cairn_format::inode::S_IFREG;
use std::sync::atomic::Ordering;
use std::sync::atomic::Ordering::Relaxed;

/// Inodes stored per handle when dirty times are logged.
const TIMES_PER_HANDLE: usize = 32;

/// One piece of a fast-path write: `data[from..to]` goes to image offset `at`.
struct Piece {
    at: u64,
    from: usize,
    to: usize,
}

impl FileIo {
    /// Whether a write of `len` bytes at `off` ends past the size of
    /// inode `ino` (read under the inode's lock only: a hint, see the module
    /// essay).
    fn ends_past_size(&self, ino: u64, off: u64, len: usize) -> Result<bool> {
        let size = self.inodes.iget(ino)?.read().d.size;
        Ok(off.checked_add(len as u64).is_none_or(|end| end > size))
    }

    /// Writes `data` at `off` on the fast path if every byte lands inside
    /// the file over written blocks; `Ok(None)` (nothing written) sends the
    /// caller down the journaled path. Dirties the inode's times only if
    /// `update_times` (see [`FileIo::write_data`]).
    pub(crate) fn try_overwrite(&self, ino: u64, off: u64, data: &[u8], update_times: bool) -> Result<Option<u32>> {
        if !self.ow.enabled || data.is_empty() {
            return Ok(None);
        }
        self.engine.writable()?;
        if self.ends_past_size(ino, off, data.len())? {
            self.ow.stats.fallbacks.fetch_add(1, Relaxed);
            self.ow.stats.past_size.fetch_add(1, Relaxed);
            return Ok(None);
        }
        let _io = self.inodes.io_locks().shared(ino);
        let r = self.inodes.iget(ino)?;
        let g = r.read();
        if g.d.file_type() != S_IFREG {
            return Ok(None);
        }
        let end = match off.checked_add(data.len() as u64) {
            Some(e) if e <= g.d.size => e,
            _ => {
                self.ow.stats.fallbacks.fetch_add(1, Relaxed);
                return Ok(None);
            }
        };
        let b = u64::from(self.engine.meta().geo().block_size);
        let mut pieces: Vec<Piece> = Vec::with_capacity(1);
        let mut pos = off;
        while pos < end {
            let lblk = pos / b;
            let mapping = self.engine.read_op(|| extent_map::lookup(self.engine.meta(), &g, lblk))?;
            match mapping {
                Mapping::Mapped { pblk, len, unwritten: false } => {
                    let stop = end.min((lblk + len).saturating_mul(b));
                    pieces.push(Piece {
                        at: pblk * b + pos % b,
                        from: (pos - off) as usize,
                        to: (stop - off) as usize,
                    });
                    pos = stop;
                }
                _ => {
                    self.ow.stats.fallbacks.fetch_add(1, Relaxed);
                    return Ok(None);
                }
            }
        }
        self.engine.read_op(|| {
            for p in &pieces {
                self.engine.meta().dev().write_data(&data[p.from..p.to], p.at)?;
            }
            Ok(())
        })?;
        let s = &self.ow.stats;
        if update_times {
            let t = now();
            {
                let mut lazy = g.lazy_time.lock();
                if lazy.is_none_or(|x| x < t) {
                    *lazy = Some(t);
                }
            }
            if !g.times_queued.swap(true, Ordering::AcqRel) {
                self.ow.dirty.lock().push(r.clone());
            }
            s.lazy_time_updates.fetch_add(1, Relaxed);
        }
        s.fast_writes.fetch_add(1, Relaxed);
        s.fast_bytes.fetch_add(data.len() as u64, Relaxed);
        Ok(Some(data.len() as u32))
    }

    /// Stores the dirty times of every queued inode (see the module essay);
    /// runs at the start of each commit. What it could not store (an error)
    /// stays queued. A commit that starts while another is still storing the
    /// times it took waits until they are in handles, so its commit covers
    /// them (`fsync` must not return before the times it found are durable).
    pub(crate) fn log_dirty_times(&self) -> Result<()> {
        let _logging = self.ow.logging.lock();
        let list = std::mem::take(&mut *self.ow.dirty.lock());
        if list.is_empty() {
            return Ok(());
        }
        let mut done = 0;
        let mut result = Ok(());
        for chunk in list.chunks(TIMES_PER_HANDLE) {
            let r = self.engine.change(credits::INODE * chunk.len() as u64, |tx| {
                for r in chunk {
                    let mut g = r.write();
                    if !g.freed && g.lazy_time.get_mut().is_some() {
                        g.fold_lazy_time();
                        self.inodes.store(tx, &g)?;
                        self.ow.stats.lazy_times_logged.fetch_add(1, Relaxed);
                    }
                    g.times_queued.store(false, Ordering::Release);
                }
                Ok(())
            });
            if let Err(e) = r {
                result = Err(e);
                break;
            }
            done += chunk.len();
        }
        let mut rest = list;
        let logged: Vec<InodeRef> = rest.drain(..done).collect();
        if !rest.is_empty() {
            // Not logged: back on the list (their flag may have been cleared
            // by a try that failed, so set it again).
            for r in &rest {
                r.read().times_queued.store(true, Ordering::Release);
            }
            self.ow.dirty.lock().extend(rest);
        }
        for r in logged {
            let (ino, unused) = {
                let g = r.read();
                (g.ino, self.inodes.cache().lookups(g.ino) == 0)
            };
            drop(r);
            if unused {
                self.inodes.cache().evict_if_unused(ino);
            }
        }
        result
    }
}
