//! Growing the allocator while mounted (`cairn resize MOUNTPOINT`, see
//! `Fs::grow`): the geometry every reader sees, the table of groups that
//! can gain groups without a lock, and the grow itself.
//!
//! ## The live geometry
//! Everything about the layout is fixed at mkfs except the block count
//! (and with it the group count and the last group's length). The
//! allocator keeps the fixed part and the block count in an atomic;
//! [`LiveGeometry::get`] puts them together (a copy, a load). A grow stores
//! the new count once the new groups are in the table, so no reader finds a
//! group number the table does not hold.
//!
//! ## The group table
//! Groups live in segments of [`SEGMENT`] groups, each allocated once, when
//! the first of its groups is needed; a reader indexes with two loads and
//! takes no lock. A group not yet in the file system is *dormant*: no free
//! block, no free inode, on no list.
//!
//! ## A grow
//! Run under the quiesced gate (no other handle, no commit) with a handle of
//! its own, in the running checkpoint: the new groups' descriptors (never
//! used: `GD_BLOCK_UNINIT | GD_INODE_UNINIT`, as mkfs leaves them), the old
//! last group's blocks past its old end given free in its bitmap and
//! descriptor; then, in memory, the new groups woken, the block count
//! stored, the free counters raised and the groups filed. The caller logs
//! the superblock in the same checkpoint: the grow commits whole or not at
//! all. Inode tables and backup superblocks, past the old end, are the
//! caller's to write first.

use super::buddy::Mark;
use super::groups::{Bitmap, Group, GroupState, NOT_LISTED, ORDER_NONE, ORDER_UNKNOWN};
use super::Allocator;
use crate::buffer::Change;
use crate::error::Result;
use cairn_format::group_desc::{GD_BLOCK_UNINIT, GD_SIZE};
use cairn_format::layout::Geometry;
use parking_lot::Mutex;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8};
use std::sync::OnceLock;

/// Groups per segment of the table.
pub const SEGMENT: u64 = 1024;

/// The geometry of the mounted file system (see the module essay).
pub struct LiveGeometry {
    fixed: Geometry,
    total_blocks: AtomicU64,
}

impl LiveGeometry {
    pub fn new(geo: Geometry) -> LiveGeometry {
        LiveGeometry { fixed: geo, total_blocks: AtomicU64::new(geo.total_blocks) }
    }

    /// The geometry as of now.
    pub fn get(&self) -> Geometry {
        let mut g = self.fixed;
        g.total_blocks = self.total_blocks.load(Acquire);
        g.group_count = g.total_blocks.div_ceil(g.blocks_per_group);
        g
    }

    fn set_total_blocks(&self, total: u64) {
        self.total_blocks.store(total, Release);
    }
}

/// The groups (see the module essay).
pub struct GroupTable {
    segments: Box<[OnceLock<Box<[Group]>>]>,
}

impl GroupTable {
    /// A table that can hold up to `capacity` groups.
    pub fn new(capacity: u64) -> GroupTable {
        GroupTable { segments: (0..capacity.div_ceil(SEGMENT)).map(|_| OnceLock::new()).collect() }
    }

    /// Makes groups `0..n` present (new ones dormant).
    pub fn ensure(&self, n: u64) {
        for s in 0..n.div_ceil(SEGMENT) as usize {
            self.segments[s].get_or_init(|| (0..SEGMENT).map(|_| Group::dormant()).collect());
        }
    }

    /// Group `g` (present: below the geometry's group count).
    pub fn get(&self, g: u64) -> &Group {
        let seg = self.segments[(g / SEGMENT) as usize].get().expect("a group of the file system is in the table");
        &seg[(g % SEGMENT) as usize]
    }
}

impl Group {
    /// A group not (yet) in the file system.
    pub fn dormant() -> Group {
        Group {
            lock: Mutex::new(GroupState { buddy: None, inodes: None, pending: Vec::new(), itable_fresh_from: 0 }),
            free: AtomicU32::new(0),
            free_inodes: AtomicU32::new(0),
            fragments: AtomicU32::new(0),
            largest: AtomicU8::new(ORDER_NONE),
            in_order: AtomicU8::new(NOT_LISTED),
            in_bucket: AtomicU8::new(NOT_LISTED),
            referenced: AtomicBool::new(false),
        }
    }
}

/// What a grow added.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    pub blocks: u64,
    pub inodes: u64,
}

impl Allocator {
    /// The geometry as of now.
    pub fn geo(&self) -> Geometry {
        self.geo.get()
    }

    /// Groups the descriptor table (with its reserve) can describe.
    pub fn max_groups(&self) -> u64 {
        self.gdt_capacity
    }

    /// Grows the file system to `new_geo` (same fixed layout, more blocks)
    /// in `tx`, which must be the only handle (see the module essay).
    /// `itables_zeroed`: the new groups' inode tables are zeros.
    pub fn grow(&self, tx: &dyn Change, new_geo: &Geometry, itables_zeroed: bool) -> Result<Added> {
        let old = self.geo();
        debug_assert!(new_geo.total_blocks > old.total_blocks && new_geo.group_count <= self.max_groups());
        let last = old.group_count - 1;
        let to_last = new_geo.group_len(last) - old.group_len(last);
        let mut added = Added::default();
        // On disk first (what can fail), in the handle: the new descriptors...
        let mut descs = Vec::new();
        for g in old.group_count..new_geo.group_count {
            let gd = new_geo.unused_group_desc(g);
            let (blk, off) = self.gd_loc(g);
            let buf = tx.bufs().get(blk, |_, _| Ok(()))?;
            tx.bufs().modify(tx, &buf, off..off + GD_SIZE, |d| gd.encode(self.seed, g, d));
            added.blocks += u64::from(gd.free_blocks);
            added.inodes += u64::from(gd.free_inodes);
            descs.push(gd);
        }
        // ... and the old last group's new blocks, free.
        let mut st = self.lock_group(last);
        if to_last > 0 {
            let gd = Self::read_gd(old, self.seed, self.gdt_start, tx.bufs(), last)?;
            if gd.flags & GD_BLOCK_UNINIT != 0 {
                // Its bitmap is the layout's, which the new count lengthens.
                self.update_gd(tx, last, |gd| gd.free_blocks += to_last as u32)?;
            } else {
                let from = old.group_len(last);
                self.change_disk_bitmap(tx, last, Bitmap::Block, from..from + to_last, Mark::Free, 0)?;
            }
            added.blocks += to_last;
        }
        // In memory: wake the new groups, then publish the block count.
        self.groups.ensure(new_geo.group_count);
        for (g, gd) in (old.group_count..).zip(&descs) {
            self.groups.get(g).wake(gd, new_geo, g, itables_zeroed);
        }
        self.geo.set_total_blocks(new_geo.total_blocks);
        self.disk_free_blocks.fetch_add(added.blocks, Relaxed);
        self.alloc_free.fetch_add(added.blocks, Relaxed);
        self.free_inodes.fetch_add(added.inodes, Relaxed);
        // The old last group: its buddy was built for its old length.
        let grp = self.groups.get(last);
        grp.free.fetch_add(to_last as u32, Relaxed);
        if to_last > 0 {
            st.buddy = None;
            grp.largest.store(ORDER_UNKNOWN, Relaxed);
            self.lists.refile(last as u32, grp);
            self.load_buddy(tx.bufs(), last, &mut st)?;
        }
        drop(st);
        for g in old.group_count..new_geo.group_count {
            let _st = self.lock_group(g);
            self.lists.refile(g as u32, self.groups.get(g));
        }
        Ok(added)
    }
}
