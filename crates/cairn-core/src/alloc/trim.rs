//! Discarding free blocks (FITRIM, `fstrim`): the image gives space back.
//!
//! A block is discarded only while it is *allocatable*: free in the block
//! bitmap, not waiting for the journal (pending frees: an older checkpoint
//! still names it, and replay could write it), and not held by a
//! preallocation. Each group is trimmed under its lock, so no allocation in
//! that group can hand out a block between the test and the discard; a
//! block allocated after the lock is released is written after its hole was
//! punched (the hole then fills again). Nothing on disk changes: the bitmap
//! already says free, and a crash at any point leaves every block that any
//! recoverable state references untouched.
//!
//! `-o discard` does the same online, batched per checkpoint: blocks are
//! discarded when they leave the pending list (their free is durable, see
//! `alloc`), under their group's lock, before they become allocatable.
//!
//! On an image file a discard punches a hole (`fallocate(PUNCH_HOLE)`), so
//! the host file system frees the space; on a block device it is
//! BLKDISCARD. [`TrimStats`] counts what was asked and done.

use super::bits::{find_one, find_zero};
use super::Allocator;
use crate::buffer::BufferCache;
use crate::dev::BlockDevice;
use crate::error::Result;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// `cairn stats` counters of discards (FITRIM's and `-o discard`'s).
#[derive(Default)]
pub struct TrimStats {
    /// FITRIM requests served.
    pub requests: AtomicU64,
    /// Free extents discarded, and their blocks.
    pub extents: AtomicU64,
    pub blocks: AtomicU64,
    /// Discards the device could not do (it keeps the data; not an error).
    pub unsupported: AtomicU64,
    /// Extents and blocks discarded online (`-o discard`) as they were
    /// released.
    pub online_extents: AtomicU64,
    pub online_blocks: AtomicU64,
}

impl Allocator {
    /// `-o discard`: discards ranges of group `g` just released from the
    /// pending list (called under the group's lock, before they reach the
    /// buddy). A discard that fails is counted and logged, never an error:
    /// the blocks are free either way.
    pub(super) fn discard_released(&self, bufs: &BufferCache, g: u64, ranges: &[(u64, u64)]) {
        let base = self.geo().group_start(g);
        let bs = u64::from(self.geo().block_size);
        for &(off, len) in ranges {
            match bufs.dev().discard((base + off) * bs, len * bs) {
                Ok(true) => {
                    self.trim_stats.online_extents.fetch_add(1, Relaxed);
                    self.trim_stats.online_blocks.fetch_add(len, Relaxed);
                }
                Ok(false) => {
                    self.trim_stats.unsupported.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    self.trim_stats.unsupported.fetch_add(1, Relaxed);
                    tracing::warn!(group = g, error = %e, "discard of freed blocks failed");
                }
            }
        }
    }

    /// Discards every allocatable free extent of at least `min_len` blocks
    /// that lies within blocks `[start, end)`; returns the blocks discarded.
    pub fn trim(&self, bufs: &BufferCache, dev: &dyn BlockDevice, start: u64, end: u64, min_len: u64) -> Result<u64> {
        let geo = self.geo();
        let bs = u64::from(geo.block_size);
        let end = end.min(geo.total_blocks);
        let mut total = 0u64;
        self.trim_stats.requests.fetch_add(1, Relaxed);
        if start >= end {
            return Ok(0);
        }
        for g in geo.group_of_block(start)..=geo.group_of_block(end - 1) {
            let base = geo.group_start(g);
            let len = geo.group_len(g);
            let (from, to) = (start.max(base) - base, end.min(base + len) - base);
            let st = self.lock_group(g);
            let map = self.allocatable_map(bufs, g, &st)?;
            let mut at = from;
            while let Some(s) = find_zero(&map, at, to) {
                let e = find_one(&map, s, to).unwrap_or(to);
                if e - s >= min_len.max(1) {
                    if dev.discard((base + s) * bs, (e - s) * bs)? {
                        total += e - s;
                        self.trim_stats.extents.fetch_add(1, Relaxed);
                        self.trim_stats.blocks.fetch_add(e - s, Relaxed);
                    } else {
                        self.trim_stats.unsupported.fetch_add(1, Relaxed);
                        return Ok(total);
                    }
                }
                at = e;
            }
            drop(st);
        }
        Ok(total)
    }
}
