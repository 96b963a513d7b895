//! Inode numbers: one bitmap per group, and Tux3's "next inode number" — an
//! atomic hint where the search starts, so creates in a row take
//! consecutive numbers without searching from the start.

use super::bits::*;
use super::Allocator;
use crate::buffer::BufferCache;
use crate::error::{FsError, Result};
use crate::journal::Tx;
use std::sync::atomic::Ordering::Relaxed;

impl Allocator {
    /// Allocates an inode number (near the next-inode hint).
    pub fn alloc_inode(&self, tx: &Tx<'_>, is_dir: bool) -> Result<u64> {
        let n = self.geo.group_count;
        let hint = self.next_ino.load(Relaxed).max(cairn_format::FIRST_INO);
        let hint = if hint > self.geo.total_inodes() { cairn_format::FIRST_INO } else { hint };
        let g0 = self.geo.group_of_ino(hint);
        for i in 0..=n {
            let g = (g0 + i) % n;
            let grp = &self.groups[g as usize];
            if grp.free_inodes.load(Relaxed) == 0 {
                continue;
            }
            let mut st = self.lock_group(g);
            if st.inodes.is_none() {
                st.inodes = Some(self.read_bitmap(&tx.bufs, g, true)?);
            }
            let map = st.inodes.as_mut().expect("loaded above");
            let from = if i == 0 { self.geo.index_in_group(hint) } else { 0 };
            let ipg = self.geo.inodes_per_group;
            let Some(idx) = find_zero(map, from, ipg).or_else(|| find_zero(map, 0, ipg)) else { continue };
            set_bit(map, idx);
            grp.free_inodes.fetch_sub(1, Relaxed);
            self.change_disk_bitmap(tx, g, true, |d| disk_set(d, idx, true), -1, i64::from(is_dir))?;
            drop(st);
            let ino = g * ipg + idx + 1;
            self.next_ino.store(ino + 1, Relaxed);
            self.free_inodes.fetch_sub(1, Relaxed);
            self.stats.inodes_allocated.fetch_add(1, Relaxed);
            return Ok(ino);
        }
        Err(FsError::Errno(libc::ENOSPC))
    }

    /// Whether inode `ino` is marked in use in its group's bitmap.
    pub fn inode_in_use(&self, bufs: &BufferCache, ino: u64) -> Result<bool> {
        let g = self.geo.group_of_ino(ino);
        let idx = self.geo.index_in_group(ino);
        let mut st = self.lock_group(g);
        if st.inodes.is_none() {
            st.inodes = Some(self.read_bitmap(bufs, g, true)?);
        }
        Ok(st.inodes.as_ref().is_none_or(|map| test_bit(map, idx)))
    }

    /// Frees inode number `ino`.
    pub fn free_inode(&self, tx: &Tx<'_>, ino: u64, was_dir: bool) -> Result<()> {
        let g = self.geo.group_of_ino(ino);
        let idx = self.geo.index_in_group(ino);
        let grp = &self.groups[g as usize];
        let mut st = self.lock_group(g);
        if st.inodes.is_none() {
            st.inodes = Some(self.read_bitmap(&tx.bufs, g, true)?);
        }
        let map = st.inodes.as_mut().expect("loaded above");
        // Freeing a free inode (a damaged orphan list, a stale entry) must
        // not inflate the free counters: refuse it as corruption.
        if !test_bit(map, idx) {
            return Err(cairn_format::FormatError::corrupt("inode", ino, "freeing an inode that is not in use").into());
        }
        clear_bit(map, idx);
        self.change_disk_bitmap(tx, g, true, |d| disk_set(d, idx, false), 1, -i64::from(was_dir))?;
        grp.free_inodes.fetch_add(1, Relaxed);
        self.free_inodes.fetch_add(1, Relaxed);
        self.stats.inodes_freed.fetch_add(1, Relaxed);
        Ok(())
    }
}
