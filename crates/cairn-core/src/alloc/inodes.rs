//! Inode numbers: one bitmap per group, and Tux3's "next inode number".
//!
//! ## The counter
//! `next_ino` is an atomic counter: each create takes the next number with
//! one `fetch_add`, so concurrent creates never contend for the same bit,
//! and creates in a row take consecutive numbers — their inodes share
//! inode-table blocks, which one checkpoint then logs once. The number is
//! checked free in its group's bitmap under the group's lock; if it is
//! taken (freed numbers are not handed out again until the counter wraps),
//! a search from it finds the next free one, wrapping around the groups.
//! The counter is saved in the superblock at unmount as a hint; an
//! out-of-range value is clamped. Counters: `alloc.inodes_by_counter`,
//! `alloc.inodes_by_search`, `alloc.inode_counter_wraps`.
//!
//! ## Inode tables not read
//! mkfs punches every inode table but group 0's (`COMPAT_ITABLES_ZEROED`).
//! A group whose inode bitmap is still uninitialised at mount has taken no
//! inode since: the checkpoint that takes the first also clears the flag,
//! and a block goes home only after its checkpoint is durable. So its table
//! is all zeros at home, and the block a create takes its first inode from
//! starts as a zero buffer instead of a read (`alloc.itable_blocks_unread`),
//! as ext4 zeroes a table block whose inodes are all free. The group keeps
//! the index from which its table is still untouched in this mount; a block
//! below it is read as usual. Zeros must be what home holds, not merely
//! free inodes: a change logs only the chunks it alters, and replay applies
//! them over the home block.
//!
//! ## Tux3's volatile bitmap, here
//! Tux3 marks numbers taken-but-not-yet-in-the-itable in an in-memory
//! bitmap that is never written. cairn's in-memory group bitmap plays that
//! part: a number is set there at once, while the on-disk bitmap's change
//! rides in the create's own transaction and reaches the device only with
//! the checkpoint that commits the create (the CIL, `buffer::cil`). A crash
//! before that checkpoint loses the number and the inode together, so no
//! number is ever leaked or handed out twice.

use super::bitmap_change::BitmapChange;
use super::bits::*;
use super::groups::{Bitmap, GroupState};
use super::Allocator;
use crate::buffer::BufferCache;
use crate::buffer::Change;
use crate::error::{FsError, Result};
use std::sync::atomic::Ordering::Relaxed;

impl Allocator {
    /// Allocates an inode number: the counter's next number if it is free,
    /// else the first free one found from there (see the module essay).
    pub fn alloc_inode(&self, tx: &dyn Change, is_dir: bool) -> Result<u64> {
        #[cfg(feature = "testing")]
        self.faults.check()?;
        let total = self.geo().total_inodes();
        let mut cand = self.next_ino.fetch_add(1, Relaxed);
        if !(cairn_format::FIRST_INO..=total).contains(&cand) {
            // The counter ran past the last inode: start again at the first.
            self.next_ino.store(cairn_format::FIRST_INO + 1, Relaxed);
            self.stats.inode_counter_wraps.fetch_add(1, Relaxed);
            cand = cairn_format::FIRST_INO;
        }
        let g = self.geo().group_of_ino(cand);
        let idx = self.geo().index_in_group(cand);
        if self.take_inode(tx, g, is_dir, |map| (!test_bit(map, idx)).then_some(idx))?.is_some() {
            self.stats.inodes_by_counter.fetch_add(1, Relaxed);
            return Ok(cand);
        }
        // Taken (numbers freed and reused, or an image written by an older
        // cairn): search from the candidate on, wrapping around.
        let n = self.geo().group_count;
        let ipg = self.geo().inodes_per_group;
        for i in 0..=n {
            let gi = (g + i) % n;
            let from = if i == 0 { idx } else { 0 };
            let found =
                self.take_inode(tx, gi, is_dir, |map| find_zero(map, from, ipg).or_else(|| find_zero(map, 0, ipg)))?;
            if let Some(k) = found {
                let ino = gi * ipg + k + 1;
                self.next_ino.store(ino + 1, Relaxed);
                self.stats.inodes_by_search.fetch_add(1, Relaxed);
                return Ok(ino);
            }
        }
        Err(FsError::Errno(libc::ENOSPC))
    }

    /// Takes the inode `pick` chooses in group `g`'s bitmap (None: the
    /// group has none to give), in memory and in the transaction.
    fn take_inode(
        &self,
        tx: &dyn Change,
        g: u64,
        is_dir: bool,
        pick: impl FnOnce(&[u64]) -> Option<u64>,
    ) -> Result<Option<u64>> {
        let grp = self.groups.get(g);
        if grp.free_inodes.load(Relaxed) == 0 {
            return Ok(None);
        }
        let mut st = self.lock_group(g);
        let map = self.inode_map(tx.bufs(), g, &mut st)?;
        let Some(idx) = pick(map) else { return Ok(None) };
        set_bit(map, idx);
        let table_block = idx / self.geo().inodes_per_block();
        if table_block >= u64::from(st.itable_fresh_from) {
            // Zeros at home and untouched in this mount: start the buffer
            // as zeros, not as a read (changes log their chunks against the
            // zeros home holds, so replay is exact).
            st.itable_fresh_from = table_block as u32 + 1;
            let (blk, _) = self.geo().inode_location(g * self.geo().inodes_per_group + idx + 1);
            if tx.bufs().insert_zeroed(blk) {
                self.stats.itable_blocks_unread.fetch_add(1, Relaxed);
            }
        }
        grp.free_inodes.fetch_sub(1, Relaxed);
        self.change_bitmap(tx, &mut st, BitmapChange::UseInode { g, idx, dir: is_dir }, 0)?;
        drop(st);
        self.free_inodes.fetch_sub(1, Relaxed);
        self.stats.inodes_allocated.fetch_add(1, Relaxed);
        Ok(Some(idx))
    }

    /// Whether inode `ino` is marked in use in its group's bitmap.
    pub fn inode_in_use(&self, bufs: &BufferCache, ino: u64) -> Result<bool> {
        let g = self.geo().group_of_ino(ino);
        let idx = self.geo().index_in_group(ino);
        let mut st = self.lock_group(g);
        Ok(test_bit(self.inode_map(bufs, g, &mut st)?, idx))
    }

    /// Frees inode number `ino`. Freeing a free inode (a damaged orphan
    /// list, a stale entry) must not inflate the free counters: it is
    /// refused as corruption (`bitmap_change`).
    pub fn free_inode(&self, tx: &dyn Change, ino: u64, was_dir: bool) -> Result<()> {
        let g = self.geo().group_of_ino(ino);
        let idx = self.geo().index_in_group(ino);
        let mut st = self.lock_group(g);
        self.change_bitmap(tx, &mut st, BitmapChange::FreeInode { g, idx, dir: was_dir }, 0)
    }

    /// Group `g`'s inode map (1 = in use), read on first use (the caller
    /// holds the group's lock as `st`).
    pub(super) fn inode_map<'s>(&self, bufs: &BufferCache, g: u64, st: &'s mut GroupState) -> Result<&'s mut Vec<u64>> {
        if st.inodes.is_none() {
            st.inodes = Some(self.read_bitmap(bufs, g, Bitmap::Inode)?);
        }
        Ok(st.inodes.as_mut().expect("loaded above"))
    }
}
