//! Allocation intents: the on-disk bitmap changes an operation records and
//! its handle's end applies (step S1 of `docs/gate-plan.md`).
//!
//! ## Purpose
//! Bitmaps and group descriptors are shared by every allocation in a group:
//! the conflict probe found half of all creates changing a descriptor or
//! bitmap chunk another running handle had changed (gate plan §7.1). For
//! handles to keep their changes private until their end, those shared
//! blocks must change only at the end. So, with private handles
//! (`-o debug.private_handles`), the operation decides in memory (the
//! buddy, the inode map, the counters, as before) and records a
//! [`BitmapIntent`]; its join group's join (`Tx::join`, at the end of
//! `Engine::change`) applies them with the group lock held, inside the
//! gate. A handle that holds the gate from begin to end (the default) and
//! every other direct writer applies its intents at once.
//!
//! ## Order
//! Intents on different bits commute. Two cases put intents of different
//! handles on the same bits (gate plan §7.2), and each has a rule:
//! * an inode number's free clears the in-memory map only when it is
//!   applied, so the number is not handed out again before that;
//! * a free that overlaps another handle's unapplied use (blocks or an
//!   inode allocated, then freed by a second handle before the first
//!   ended) applies that use first. Each group keeps its unapplied intents
//!   ([`GroupState`]`.unjoined`, by ticket); the owner's apply skips a use
//!   that was applied for it.
//! * an inode whose free is recorded is not in use any more for every
//!   question asked of the allocator (`inode_in_use`, a second free), though
//!   its number is not handed out yet.
//!
//! ## Invariants
//! * A group with unapplied intents keeps its buddy loaded (eviction skips
//!   it): a buddy rebuilt from a bitmap that lacks their uses would hand the
//!   blocks out twice.
//! * Everything a handle records is applied in its group's join, inside
//!   the gate, so a checkpoint never sees half of one; the superblock's
//!   free counts are the joined ones (`joined_free_blocks`,
//!   `joined_free_inodes`, changed only where an intent is applied).
//!
//! ## Locking
//! The group's lock, as for every change of its state; recording happens
//! with it held by the caller, applying takes it per intent.

use super::groups::{Bitmap, GroupState};
use super::Allocator;
use crate::alloc::buddy::Mark;
use crate::buffer::join::{JoinGroup, Merge};
use crate::buffer::{BitmapIntent, Change};
use crate::error::Result;
use cairn_format::FormatError;
use std::sync::atomic::Ordering::Relaxed;

impl BitmapIntent {
    fn group(self) -> u64 {
        match self {
            BitmapIntent::UseBlocks { g, .. }
            | BitmapIntent::FreeBlocks { g, .. }
            | BitmapIntent::UseInode { g, .. }
            | BitmapIntent::FreeInode { g, .. } => g,
        }
    }

    /// Whether `self`, a use, covers bits that `free` clears.
    fn used_by(self, free: BitmapIntent) -> bool {
        match (self, free) {
            (BitmapIntent::UseBlocks { off, n, .. }, BitmapIntent::FreeBlocks { off: fo, n: fn_, .. }) => {
                off < fo + fn_ && fo < off + n
            }
            (BitmapIntent::UseInode { idx, .. }, BitmapIntent::FreeInode { idx: fi, .. }) => idx == fi,
            _ => false,
        }
    }
}

impl Allocator {
    /// Records `intent` (group `intent.group()`, whose lock the caller
    /// holds as `st`) for the handle's end, or applies it now for a writer
    /// that does not defer; `seq` is the running checkpoint (a free's
    /// pending mark).
    pub(super) fn record(&self, tx: &dyn Change, st: &mut GroupState, intent: BitmapIntent, seq: u64) -> Result<()> {
        let is_free = matches!(intent, BitmapIntent::FreeBlocks { .. } | BitmapIntent::FreeInode { .. });
        if is_free {
            let mut i = 0;
            while i < st.unjoined.len() {
                let (_, used, owner) = &st.unjoined[i];
                if !used.used_by(intent) {
                    i += 1;
                    continue;
                }
                // A running group's use: join with it, so that the use and
                // this free are applied together, in their order.
                if let (Some(mine), Some(theirs)) = (tx.group(), owner) {
                    if JoinGroup::merge(mine, theirs) == Merge::Joined {
                        i += 1;
                        continue;
                    }
                }
                // Its group's join runs (and waits for this group's lock),
                // or this writer is direct: apply the use now, directly.
                let (_, used, _) = st.unjoined.swap_remove(i);
                self.stats.intents_applied_early.fetch_add(1, Relaxed);
                tx.as_direct(&mut |d| self.apply_locked(d, st, used, seq))?;
            }
        }
        let ticket = self.tickets.fetch_add(1, Relaxed);
        if !tx.defer_bitmap(ticket, intent) {
            return self.apply_locked(tx, st, intent, seq);
        }
        st.unjoined.push((ticket, intent, tx.group().cloned()));
        Ok(())
    }

    /// Applies a handle's recorded intents, in their order (the end of
    /// `Engine::change`); `seq` is the running checkpoint.
    pub fn apply_intents(&self, tx: &dyn Change, intents: &[(u64, BitmapIntent)], seq: u64) -> Result<()> {
        for &(ticket, intent) in intents {
            let mut st = self.lock_group(intent.group());
            match st.unjoined.iter().position(|(t, _, _)| *t == ticket) {
                Some(i) => drop(st.unjoined.swap_remove(i)),
                // A use that a free of the same bits applied already.
                None => continue,
            }
            self.apply_locked(tx, &mut st, intent, seq)?;
        }
        Ok(())
    }

    fn apply_locked(&self, tx: &dyn Change, st: &mut GroupState, intent: BitmapIntent, seq: u64) -> Result<()> {
        match intent {
            BitmapIntent::UseBlocks { g, off, n } => {
                self.change_disk_bitmap(tx, g, Bitmap::Block, off..off + n, Mark::Used, 0)?;
                self.joined_free_blocks.fetch_sub(n, Relaxed);
            }
            BitmapIntent::FreeBlocks { g, off, n } => {
                self.apply_block_free(tx, st, g, off, n, seq)?;
                self.joined_free_blocks.fetch_add(n, Relaxed);
            }
            BitmapIntent::UseInode { g, idx, dir } => {
                self.change_disk_bitmap(tx, g, Bitmap::Inode, idx..idx + 1, Mark::Used, i64::from(dir))?;
                self.joined_free_inodes.fetch_sub(1, Relaxed);
            }
            BitmapIntent::FreeInode { g, idx, dir } => {
                self.apply_inode_free(tx, st, g, idx, dir)?;
                self.joined_free_inodes.fetch_add(1, Relaxed);
            }
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

    /// Whether a handle that has not ended recorded the free of inode `idx`
    /// (the caller holds the group's lock as `st`): it is not in use any
    /// more, though its number is not free yet.
    pub(super) fn inode_freeing(st: &GroupState, idx: u64) -> bool {
        st.unjoined.iter().any(|&(_, i, _)| matches!(i, BitmapIntent::FreeInode { idx: x, .. } if x == idx))
    }

    /// Frees inode `idx` of group `g` in memory and on disk: only now may
    /// its number be handed out again (see the module essay).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::request::AllocRequest;
    use crate::alloc::AllocOptions;
    use crate::buffer::BufferCache;
    use crate::dev::{BlockDevice, MemDevice};
    use crate::journal::ail::Ail;
    use cairn_format::layout::Geometry;
    use std::cell::RefCell;
    use std::sync::Arc;

    /// A handle that records its bitmap changes, as `tx::Tx` does.
    struct Deferring<'a> {
        bufs: &'a BufferCache,
        intents: RefCell<Vec<(u64, BitmapIntent)>>,
    }

    impl Change for Deferring<'_> {
        fn bufs(&self) -> &BufferCache {
            self.bufs
        }
        fn charge(&self, _: u64) {}
        fn touch(&self) {}
        fn defer_bitmap(&self, ticket: u64, intent: BitmapIntent) -> bool {
            self.intents.borrow_mut().push((ticket, intent));
            true
        }
        fn as_direct(&self, f: &mut dyn FnMut(&dyn Change) -> Result<()>) -> Result<()> {
            f(&Direct(self.bufs))
        }
    }

    /// A writer that applies at once.
    struct Direct<'a>(&'a BufferCache);

    impl Change for Direct<'_> {
        fn bufs(&self) -> &BufferCache {
            self.0
        }
        fn charge(&self, _: u64) {}
        fn touch(&self) {}
        fn as_direct(&self, f: &mut dyn FnMut(&dyn Change) -> Result<()>) -> Result<()> {
            f(self)
        }
    }

    impl Deferring<'_> {
        fn end(&self, alloc: &Allocator) -> Result<()> {
            let intents = std::mem::take(&mut *self.intents.borrow_mut());
            alloc.apply_intents(self, &intents, 1)
        }
    }

    fn allocator() -> (BufferCache, Allocator) {
        let dev = Arc::new(MemDevice::new(64 << 20));
        crate::mkfs::format(dev.as_ref(), &Default::default(), &mut |_, _| {}).unwrap();
        let sb = crate::dev::read_superblock(dev.as_ref() as &dyn BlockDevice).unwrap();
        let geo = Geometry::new(&sb).unwrap();
        let bufs = BufferCache::new(dev, geo.block_size as usize, 4096, Arc::new(Ail::new(u64::MAX, true)), true);
        let opts = AllocOptions { optimize_scan: true, buddy_cap: 16, group_prealloc: 0, discard: false };
        let alloc = Allocator::load(geo, sb.csum_seed(), (sb.gdt_start, sb.gdt_blocks), &bufs, sb.next_ino, true, opts);
        (bufs, alloc.unwrap())
    }

    #[test]
    fn an_inode_number_is_not_handed_out_again_before_its_free_is_applied() {
        let (bufs, alloc) = allocator();
        let h = || Deferring { bufs: &bufs, intents: RefCell::default() };
        let (creator, unlinker, other) = (h(), h(), h());
        let ino = alloc.alloc_inode(&creator, false).unwrap();
        creator.end(&alloc).unwrap();
        alloc.free_inode(&unlinker, ino, false).unwrap();
        assert!(!alloc.inode_in_use(&bufs, ino).unwrap(), "no longer in use once its free is recorded");
        assert!(alloc.free_inode(&other, ino, false).is_err(), "a second free is corruption");
        let next = alloc.alloc_inode(&other, false).unwrap();
        assert_ne!(next, ino, "the number is not free before its free is applied");
        // Ends in the other order than the operations ran.
        other.end(&alloc).unwrap();
        unlinker.end(&alloc).unwrap();
        assert!(!alloc.inode_in_use(&bufs, ino).unwrap());
        assert!(alloc.inode_in_use(&bufs, next).unwrap());
    }

    #[test]
    fn a_free_over_another_handles_unapplied_allocation_applies_it_first() {
        let (bufs, alloc) = allocator();
        let (writer, truncater) = (
            Deferring { bufs: &bufs, intents: RefCell::default() },
            Deferring { bufs: &bufs, intents: RefCell::default() },
        );
        let (start, n) = alloc.alloc_data(&writer, AllocRequest::data(0, 0, 8, 0, 0, 4096)).unwrap();
        alloc.free_blocks(&truncater, 1, start, u64::from(n)).unwrap();
        assert_eq!(alloc.stats.intents_applied_early.load(Relaxed), 1);
        // The truncate ends first: no double free, and the blocks wait as
        // pending frees; the writer's own apply then skips its use.
        truncater.end(&alloc).unwrap();
        writer.end(&alloc).unwrap();
        assert_eq!(alloc.pending_blocks(), u64::from(n));
        alloc.debug_check_consistency();
    }
}
