//! On-disk bitmap changes: how an allocation or a free reaches the
//! allocation bitmaps and group descriptors.
//!
//! ## Purpose
//! An operation decides in memory (the buddy, the inode map, the
//! counters), then applies the matching [`BitmapChange`] at once, in its
//! own handle, with the group's lock held: the bitmap and the descriptor
//! change through the buffer cache, a free's blocks are held as pending
//! frees of the running checkpoint, and a freed inode number is handed out
//! again only once its bits are clear. The handle holds the transaction
//! gate from begin to end, so a checkpoint never holds half of an
//! operation and the superblock's free counts, which a swap writes from
//! the allocator's counters, agree with its bitmaps.
//!
//! (Step S1 of `docs/gate-plan.md` recorded these changes for the handle's
//! end, for handles that kept their changes private until then; step S7
//! removed that deferral with the private handles.)
//!
//! ## Locking
//! The group's lock, held by the caller as `st`.

use super::groups::{Bitmap, GroupState};
use super::Allocator;
use crate::alloc::buddy::Mark;
use crate::buffer::Change;
use crate::error::Result;
use cairn_format::FormatError;
use std::sync::atomic::Ordering::Relaxed;

/// A change of an on-disk allocation bitmap (and its group descriptor).
/// Offsets are within group `g`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BitmapChange {
    UseBlocks { g: u64, off: u64, n: u64 },
    FreeBlocks { g: u64, off: u64, n: u64 },
    UseInode { g: u64, idx: u64, dir: bool },
    FreeInode { g: u64, idx: u64, dir: bool },
}

impl Allocator {
    /// Applies `change` (to group `g`, whose lock the caller holds as
    /// `st`) in the running checkpoint; `seq` is that checkpoint (a free's
    /// pending mark).
    pub(super) fn change_bitmap(
        &self,
        tx: &dyn Change,
        st: &mut GroupState,
        change: BitmapChange,
        seq: u64,
    ) -> Result<()> {
        match change {
            BitmapChange::UseBlocks { g, off, n } => {
                self.change_disk_bitmap(tx, g, Bitmap::Block, off..off + n, Mark::Used, 0)?;
            }
            BitmapChange::FreeBlocks { g, off, n } => self.apply_block_free(tx, st, g, off, n, seq)?,
            BitmapChange::UseInode { g, idx, dir } => {
                self.change_disk_bitmap(tx, g, Bitmap::Inode, idx..idx + 1, Mark::Used, i64::from(dir))?;
            }
            BitmapChange::FreeInode { g, idx, dir } => self.apply_inode_free(tx, st, g, idx, dir)?,
        }
        Ok(())
    }

    /// Clears `[off, off+n)` of group `g` on disk and holds the blocks as
    /// pending frees of checkpoint `seq`.
    fn apply_block_free(&self, tx: &dyn Change, st: &mut GroupState, g: u64, off: u64, n: u64, seq: u64) -> Result<()> {
        if self.change_disk_bitmap(tx, g, Bitmap::Block, off..off + n, Mark::Free, 0)? > 0 {
            // The bitmap and counters just changed are wrong: the error
            // (corruption) aborts the journal before they are committed.
            let b = self.geo().group_start(g) + off;
            let why = format!("freeing {n} block(s) of which some are already free");
            return Err(FormatError::corrupt("block bitmap", b, why).into());
        }
        st.pending.push((seq, off as u32, n as u32));
        self.pending_queue.lock().push_back((seq, g as u32));
        self.pending_total.fetch_add(n, Relaxed);
        self.disk_free_blocks.fetch_add(n, Relaxed);
        self.stats.blocks_freed.fetch_add(n, Relaxed);
        Ok(())
    }

    /// Frees inode `idx` of group `g` in memory and on disk.
    fn apply_inode_free(&self, tx: &dyn Change, st: &mut GroupState, g: u64, idx: u64, dir: bool) -> Result<()> {
        let map = self.inode_map(tx.bufs(), g, st)?;
        if !super::bits::test_bit(map, idx) {
            let ino = g * self.geo().inodes_per_group + idx + 1;
            return Err(FormatError::corrupt("inode", ino, "freeing an inode that is not in use").into());
        }
        super::bits::clear_bit(map, idx);
        self.change_disk_bitmap(tx, g, Bitmap::Inode, idx..idx + 1, Mark::Free, -i64::from(dir))?;
        self.groups.get(g).free_inodes.fetch_add(1, Relaxed);
        self.free_inodes.fetch_add(1, Relaxed);
        self.stats.inodes_freed.fetch_add(1, Relaxed);
        Ok(())
    }
}
