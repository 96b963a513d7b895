//! Block groups in memory: each group's lock, its buddy (loaded on demand,
//! evicted under a cap), its blocks waiting for the journal, and the compact
//! summary the group lists are built from; plus descriptor and bitmap I/O.
//!
//! ## Summary
//! Every group keeps, in atomics readable without its lock: the allocatable
//! free count (from the descriptor at mount), the number of maximal free runs,
//! and the largest free chunk order. A group whose bitmap was never written
//! (`GD_BLOCK_UNINIT`) has one free run from the end of its own metadata to
//! its end, so its summary is computed from the layout at mount without any
//! I/O; any other group's summary is *unknown* until its bitmap is first read
//! (then it stays known when the buddy is evicted). The summary costs 16 bytes
//! a group: 64 TiB of 128 MiB groups keep 8 MiB of summaries.
//!
//! ## Buddy cache
//! A loaded buddy costs about three times its bitmap block (12 KiB at 4 KiB
//! blocks). At most `cap` are kept; beyond that, the oldest loaded buddy whose
//! group has not been used since the last pass (a CLOCK referenced bit) and
//! whose lock is free is dropped. A group's pending frees live beside its
//! buddy, not in it, so they survive eviction and are merged on reload.

use super::bits::*;
use super::buddy::{Buddy, Mark, MAX_ORDER};
use super::Allocator;
use crate::buffer::BufferCache;
use crate::buffer::Change;
use crate::error::Result;
use cairn_format::bitmap::{synth_block_bitmap, synth_inode_bitmap};
use cairn_format::checksum::crc;
use cairn_format::group_desc::*;
use cairn_format::layout::Geometry;
use cairn_format::FormatError;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8};
use std::time::Instant;

/// Which of a group's two on-disk bitmaps: the one
/// [`Allocator::read_bitmap`] reads, [`Allocator::change_disk_bitmap`]
/// changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bitmap {
    Block,
    Inode,
}

/// `Group::largest`: the group's bitmap has not been read since mount.
pub const ORDER_UNKNOWN: u8 = 0xff;
/// `Group::largest`: the group has no allocatable block.
pub const ORDER_NONE: u8 = 0xfe;
/// `Group::in_order`/`in_bucket`: not on any list.
pub const NOT_LISTED: u8 = 0xff;

/// What a group's lock protects.
pub struct GroupState {
    pub buddy: Option<Box<Buddy>>,
    /// Inode bitmap (1 = in use), loaded on demand.
    pub inodes: Option<Vec<u64>>,
    /// Blocks freed on disk by checkpoints the journal may still replay:
    /// (checkpoint, offset in the group, length). Not allocatable yet.
    pub pending: Vec<(u64, u32, u32)>,
    /// Inode-table blocks from this index on are all zeros at home and were
    /// never changed in this mount (see `inodes`); the table's length: none.
    pub itable_fresh_from: u32,
}

/// One block group in memory.
pub struct Group {
    pub lock: Mutex<GroupState>,
    /// Allocatable free blocks.
    pub free: AtomicU32,
    pub free_inodes: AtomicU32,
    /// Maximal free runs (meaningful when `largest` is known).
    pub fragments: AtomicU32,
    /// Largest free chunk order, or `ORDER_UNKNOWN` / `ORDER_NONE`.
    pub largest: AtomicU8,
    /// The order list and fragment bucket the group is filed on (changed
    /// under the group's lock).
    pub in_order: AtomicU8,
    pub in_bucket: AtomicU8,
    /// Used since the buddy cache's last pass.
    pub referenced: AtomicBool,
}

impl Group {
    /// Sets a dormant group's state from its descriptor `gd` (at mount, or
    /// when a grow adds it); the caller files it on the lists.
    pub fn wake(&self, gd: &GroupDesc, geo: &Geometry, g: u64, itables_zeroed: bool) {
        // A table mkfs zeroed stays zero while no inode of the group has been
        // taken: the checkpoint that takes the first also clears the flag.
        let fresh = itables_zeroed && gd.flags & GD_INODE_UNINIT != 0;
        self.lock.lock().itable_fresh_from = if fresh { 0 } else { geo.itable_blocks as u32 };
        let (largest, fragments) = if gd.flags & GD_BLOCK_UNINIT != 0 {
            let (a, b) = (geo.initially_used(g), geo.group_len(g));
            (largest_order_of_run(a, b).map_or(ORDER_NONE, |k| k as u8), u32::from(a < b))
        } else {
            (ORDER_UNKNOWN, 0)
        };
        self.free.store(gd.free_blocks, Relaxed);
        self.free_inodes.store(gd.free_inodes, Relaxed);
        self.fragments.store(fragments, Relaxed);
        self.largest.store(largest, Relaxed);
    }

    /// Whether the summary is known (the group can be filed on the lists).
    pub fn known(&self) -> bool {
        self.largest.load(Relaxed) != ORDER_UNKNOWN
    }

    /// Average free run length, if known and any block is free.
    pub fn avg_fragment(&self) -> Option<u32> {
        let (free, frags) = (self.free.load(Relaxed), self.fragments.load(Relaxed));
        (self.known() && free > 0 && frags > 0).then(|| free / frags)
    }
}

/// The largest aligned power-of-two chunk inside the free run `[a, b)`
/// (offsets in a group; chunks aligned to the group start).
pub fn largest_order_of_run(a: u64, b: u64) -> Option<u32> {
    let mut best = None;
    let mut q = a;
    while q < b {
        let mut k = q.trailing_zeros().min(MAX_ORDER);
        while q + (1 << k) > b {
            k -= 1;
        }
        best = best.max(Some(k));
        q += 1 << k;
    }
    best
}

/// The fragment bucket of a group with `avg` blocks per free run:
/// `floor(log2(avg))`, capped (ext4's `mb_avg_fragment_size_order`).
pub fn bucket_of(avg: u32) -> u32 {
    avg.max(1).ilog2().min(MAX_ORDER)
}

impl Allocator {
    pub(super) fn gd_loc(&self, g: u64) -> (u64, usize) {
        gd_loc(self.gdt_start, self.geo().block_size, g)
    }

    pub(super) fn read_gd(geo: Geometry, seed: u32, gdt_start: u64, bufs: &BufferCache, g: u64) -> Result<GroupDesc> {
        let (blk, off) = gd_loc(gdt_start, geo.block_size, g);
        let buf = bufs.get(blk, |_, _| Ok(()))?;
        let d = buf.read();
        let gd = GroupDesc::decode(seed, g, &d[off..off + GD_SIZE])?;
        if gd.block_bitmap != geo.block_bitmap(g)
            || gd.inode_bitmap != geo.inode_bitmap(g)
            || gd.inode_table != geo.inode_table(g)
        {
            return Err(
                FormatError::corrupt("group descriptor", g, "metadata locations do not match the layout").into()
            );
        }
        Ok(gd)
    }

    /// Reads, changes and rewrites group `g`'s descriptor in the transaction.
    pub(super) fn update_gd(&self, tx: &dyn Change, g: u64, f: impl FnOnce(&mut GroupDesc)) -> Result<()> {
        let (blk, off) = self.gd_loc(g);
        let buf = tx.bufs().get(blk, |_, _| Ok(()))?;
        tx.bufs().modify(tx, &buf, off..off + GD_SIZE, |d| {
            let mut gd = GroupDesc::decode(self.seed, g, d)?;
            f(&mut gd);
            gd.encode(self.seed, g, d);
            Ok(())
        })
    }

    /// Reads group `g`'s block or inode bitmap, verified against the
    /// descriptor's checksum (or synthesised if it was never written).
    pub(super) fn read_bitmap(&self, bufs: &BufferCache, g: u64, which: Bitmap) -> Result<Vec<u64>> {
        let gd = Self::read_gd(self.geo(), self.seed, self.gdt_start, bufs, g)?;
        let inode_map = which == Bitmap::Inode;
        let (uninit, blk, want, what) = if inode_map {
            (GD_INODE_UNINIT, gd.inode_bitmap, gd.inode_bitmap_csum, "inode bitmap")
        } else {
            (GD_BLOCK_UNINIT, gd.block_bitmap, gd.block_bitmap_csum, "block bitmap")
        };
        if gd.flags & uninit != 0 {
            let bytes = if inode_map { synth_inode_bitmap(&self.geo()) } else { synth_block_bitmap(&self.geo(), g) };
            return Ok(words_from_bytes(&bytes));
        }
        let seed = self.seed;
        let buf = bufs.get(blk, |at, d| {
            let computed = crc(seed, d);
            if computed != want {
                return Err(FormatError::Checksum { what, at, stored: want, computed }.into());
            }
            Ok(())
        })?;
        let words = words_from_bytes(&buf.read());
        Ok(words)
    }

    /// Group `g`'s allocatable map (bit set = not allocatable): the loaded
    /// buddy's, or else its block bitmap with its pending frees and its
    /// preallocations marked (what [`Allocator::load_buddy`] builds a buddy
    /// from). Called with the group's lock held.
    pub(super) fn allocatable_map(&self, bufs: &BufferCache, g: u64, st: &GroupState) -> Result<Vec<u64>> {
        if let Some(b) = &st.buddy {
            return Ok(b.map().to_vec());
        }
        let mut map = self.read_bitmap(bufs, g, Bitmap::Block)?;
        for &(_, off, len) in &st.pending {
            fill_range(&mut map, u64::from(off), u64::from(off) + u64::from(len), true);
        }
        for (off, len) in self.preallocated_in(g) {
            fill_range(&mut map, off, off + len, true);
        }
        Ok(map)
    }

    /// Makes sure group `g`'s buddy is loaded: its bitmap plus its pending
    /// frees. Files the group on the lists if its summary was unknown.
    pub(super) fn load_buddy(&self, bufs: &BufferCache, g: u64, st: &mut GroupState) -> Result<()> {
        let grp = self.groups.get(g);
        grp.referenced.store(true, Relaxed);
        if st.buddy.is_some() {
            return Ok(());
        }
        let t = Instant::now();
        let map = self.allocatable_map(bufs, g, st)?;
        let buddy = Buddy::new(map, self.geo().group_len(g));
        if buddy.free() != grp.free.load(Relaxed) {
            return Err(FormatError::corrupt(
                "block bitmap",
                self.geo().block_bitmap(g),
                format!(
                    "group {g}: {} free blocks in the bitmap, the descriptor says {}",
                    buddy.free(),
                    grp.free.load(Relaxed)
                ),
            )
            .into());
        }
        st.buddy = Some(Box::new(buddy));
        self.summarise(g, st);
        let s = &self.stats;
        s.buddies_generated.fetch_add(1, Relaxed);
        s.buddies_time_ns.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
        self.cache_loaded(g);
        Ok(())
    }

    /// Copies the loaded buddy's summary into the group's atomics and
    /// re-files the group on the lists. Called with the group's lock held.
    pub(super) fn summarise(&self, g: u64, st: &GroupState) {
        let grp = self.groups.get(g);
        let Some(b) = st.buddy.as_ref() else { return };
        grp.fragments.store(b.fragments(), Relaxed);
        grp.largest.store(b.largest_order().map_or(ORDER_NONE, |k| k as u8), Relaxed);
        self.lists.refile(g as u32, grp);
    }

    /// Makes blocks `ranges` (offset, length) of group `g` allocatable again
    /// (the caller holds the group's lock and has taken them off whatever
    /// held them: a pending list, a preallocation).
    pub(super) fn return_to_buddy(&self, bufs: &BufferCache, g: u64, st: &mut GroupState, ranges: &[(u64, u64)]) {
        let grp = self.groups.get(g);
        let n: u64 = ranges.iter().map(|r| r.1).sum();
        grp.free.fetch_add(n as u32, Relaxed);
        self.alloc_free.fetch_add(n, Relaxed);
        if let Some(b) = st.buddy.as_mut() {
            for &(off, len) in ranges {
                b.mark(off, len, Mark::Free);
            }
            self.summarise(g, st);
        } else if self.load_buddy(bufs, g, st).is_err() {
            // Unreadable now: the group stays off the lists until a linear
            // pass reads it again (and reports the error then).
            grp.largest.store(ORDER_UNKNOWN, Relaxed);
            self.lists.refile(g as u32, grp);
        }
    }

    /// Notes that group `g` holds a loaded buddy; evicts others above the cap.
    fn cache_loaded(&self, g: u64) {
        let mut q = self.loaded.lock();
        q.push_back(g as u32);
        let mut budget = q.len() * 2;
        while q.len() > self.buddy_cap && budget > 0 {
            budget -= 1;
            let Some(v) = q.pop_front() else { break };
            let grp = self.groups.get(u64::from(v));
            if grp.referenced.swap(false, Relaxed) {
                q.push_back(v);
                continue;
            }
            match grp.lock.try_lock() {
                Some(mut st) => {
                    st.buddy = None;
                    self.stats.buddies_evicted.fetch_add(1, Relaxed);
                }
                None => q.push_back(v),
            }
        }
    }

    /// Sets ([`Mark::Used`]) or clears ([`Mark::Free`]) bits `bits` of group
    /// `g`'s on-disk block or inode bitmap (`which`) (writing it for the first time if needed), then stores
    /// its checksum, the free count (less or more by the bits' number) and
    /// `dirs_delta` in the descriptor. Returns how many of the bits already
    /// had that value (a double free, to the caller). Only the bytes of
    /// `bits` are changed through the journal,
    /// so an allocation costs a compare of those bytes, not of the block;
    /// the checksum is then taken over the whole block, read in place (the
    /// caller's group lock keeps every other change of the bitmap out).
    pub(super) fn change_disk_bitmap(
        &self,
        tx: &dyn Change,
        g: u64,
        which: Bitmap,
        bits: std::ops::Range<u64>,
        mark: Mark,
        dirs_delta: i64,
    ) -> Result<u64> {
        let inode_map = which == Bitmap::Inode;
        let set = mark == Mark::Used;
        let n = (bits.end - bits.start) as i64;
        let free_delta = if set { -n } else { n };
        let gd = Self::read_gd(self.geo(), self.seed, self.gdt_start, tx.bufs(), g)?;
        let (blk, uninit_flag) =
            if inode_map { (gd.inode_bitmap, GD_INODE_UNINIT) } else { (gd.block_bitmap, GD_BLOCK_UNINIT) };
        let buf = if gd.flags & uninit_flag != 0 {
            let b = tx.bufs().get_new(tx, blk);
            let init = if inode_map { synth_inode_bitmap(&self.geo()) } else { synth_block_bitmap(&self.geo(), g) };
            debug_assert_eq!(init.len(), tx.bufs().block_size());
            tx.bufs().modify(tx, &b, 0..init.len(), |d| d.copy_from_slice(&init));
            b
        } else {
            tx.bufs().get(blk, |_, _| Ok(()))?
        };
        let first_byte = bits.start / 8;
        let bytes = first_byte as usize..bits.end.div_ceil(8) as usize;
        let same = tx.bufs().modify(tx, &buf, bytes, |d| {
            let mut same = 0;
            for x in bits.start - first_byte * 8..bits.end - first_byte * 8 {
                same += u64::from(disk_bit(d, x) == set);
                disk_set(d, x, set);
            }
            same
        });
        let csum = crc(self.seed, &buf.read());
        self.update_gd(tx, g, |gd| {
            gd.flags &= !uninit_flag;
            if inode_map {
                gd.inode_bitmap_csum = csum;
                gd.free_inodes = (i64::from(gd.free_inodes) + free_delta) as u32;
                gd.used_dirs = (i64::from(gd.used_dirs) + dirs_delta) as u32;
            } else {
                gd.block_bitmap_csum = csum;
                gd.free_blocks = (i64::from(gd.free_blocks) + free_delta) as u32;
            }
        })?;
        Ok(same)
    }

    /// Locks group `g`.
    pub(super) fn lock_group(&self, g: u64) -> MutexGuard<'_, GroupState> {
        self.groups.get(g).lock.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_orders_and_buckets() {
        assert_eq!(largest_order_of_run(0, 32768), Some(13));
        assert_eq!(largest_order_of_run(5, 5), None);
        assert_eq!(largest_order_of_run(3, 8), Some(2));
        assert_eq!(largest_order_of_run(1027, 32768), Some(13));
        assert_eq!(largest_order_of_run(1, 2), Some(0));
        assert_eq!((bucket_of(1), bucket_of(256), bucket_of(511), bucket_of(1 << 20)), (0, 8, 8, 13));
    }
}
