//! Block and inode allocation: ext4's multi-block allocator (mballoc) over
//! per-group bitmaps, with its optimized group scan (seed 002).
//!
//! ## On disk
//! Each group has a block bitmap and an inode bitmap (one block each; bit
//! `i` = byte `i/8`, bit `i%8`; bits past the group's end are set), whose
//! crc32c sits in the group descriptor, and the descriptor's free counters.
//! A group whose descriptor says `GD_BLOCK_UNINIT`/`GD_INODE_UNINIT` has never
//! had that bitmap written: it is synthesised from the layout on first use
//! (`cairn_format::bitmap`, the definition fsck checks against too). Every
//! bitmap and descriptor change goes through the buffer cache inside the
//! running transaction: the operation decides in memory, then applies the
//! matching bitmap change (`bitmap_change`). Nothing else is stored:
//! buddies, summaries and lists are rebuilt in memory.
//!
//! ## In memory
//! - `groups`: per group, a lock over its [`buddy::Buddy`] (the allocatable
//!   bitmap and its free chunks per order, loaded on demand, evicted beyond a
//!   cap) and its pending frees; and a compact summary in atomics (free
//!   count, free runs, largest free order) that outlives the buddy.
//! - `lists`: the optimized scan's indexes: groups by largest free order and
//!   by average free-run length (`lists`).
//! - A request ([`AllocRequest`]) has a goal, a wanted length and a search
//!   length (`request`); `scan` serves it: the goal block first, then ext4's
//!   criteria cr0..cr3 over candidate groups.
//!
//! ## Freed blocks wait for the journal
//! Freeing clears the on-disk bit at once (so the checkpoint records it) but
//! the block stays out of the buddy, on its group's pending list, until the
//! journal's durable tail has passed the freeing checkpoint
//! ([`Allocator::release_pending`]): an old journal image can then never be
//! replayed over a block that was reused for file data, and a crash never
//! exposes a block that a durable checkpoint still references. The queue of
//! groups with pending frees is in checkpoint order, so a release visits only
//! the groups it frees blocks in.
//!
//! ## Preallocation
//! A normalized request searches for its size class, takes what it wants
//! from the chunk's start and holds the rest for the file's next blocks (a
//! per-inode preallocation, `prealloc`; memory only, given back at the
//! latest at the next commit). Small files take their blocks from the runs
//! of a locality group, one per serving thread (`group_prealloc`), which
//! outlive commits.
//!
//! ## Locking
//! One mutex per group (buddy, inode bitmap, pending frees); list locks are
//! taken inside a group lock, never the other way round (see `lists`); the
//! free counters are atomics read without locks. Callers hold the
//! transaction gate shared.

mod bitmap_change;
mod bits;
pub mod buddy;
#[cfg(feature = "testing")]
pub(crate) mod faults;
mod group_prealloc;
mod groups;
mod grow;
mod inodes;
mod lists;
mod mb_stats;
mod prealloc;
pub mod request;
mod scan;
mod trim;

pub use group_prealloc::DEFAULT_GROUP_PREALLOC;
pub use mb_stats::AllocStats;
pub use request::{AllocRequest, Purpose};
pub use trim::TrimStats;

use crate::buffer::BufferCache;
use crate::buffer::Change;
use crate::error::{FsError, Result};
use bitmap_change::BitmapChange;
use cairn_format::layout::Geometry;
use cairn_format::FormatError;
use grow::{GroupTable, LiveGeometry};
use lists::GroupLists;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, Ordering};

/// The blocks only metadata may take on a file system of `total_blocks`
/// (see `Allocator::reserve_blocks`): 1/512 of it, from 64 to 16,384.
/// mkfs leaves at least this much free, and more (`mkfs::plan`).
pub fn metadata_reserve(total_blocks: u64) -> u64 {
    (total_blocks / 512).clamp(64, 16384)
}

/// Block and inode allocator.
pub struct Allocator {
    /// Tests only: injected allocation failures (`faults`).
    #[cfg(feature = "testing")]
    pub(crate) faults: faults::Faults,
    /// The geometry (its block count grows with `cairn resize`, see `grow`).
    geo: LiveGeometry,
    seed: u32,
    gdt_start: u64,
    /// Groups the descriptor table, reserve included, can describe.
    gdt_capacity: u64,
    groups: GroupTable,
    lists: GroupLists,
    /// Whether cr0/cr1 use the lists (`-o mb_optimize_scan`).
    optimize_scan: bool,
    /// Groups with a loaded buddy, oldest first, and how many may be.
    loaded: Mutex<VecDeque<u32>>,
    buddy_cap: usize,
    /// (checkpoint, group) for every pending free, in checkpoint order.
    pending_queue: Mutex<VecDeque<(u64, u32)>>,
    pending_total: AtomicU64,
    /// Per-inode preallocations (see `prealloc`).
    pa: prealloc::Preallocs,
    /// Locality groups' runs for small files (see `group_prealloc`).
    lg: group_prealloc::LocalityGroups,
    /// Free blocks as the on-disk bitmaps say (superblock counter).
    pub disk_free_blocks: AtomicU64,
    /// Free blocks that can be allocated now (excludes pending frees).
    alloc_free: AtomicU64,
    /// Blocks only metadata may take, so that a tree split or an xattr block
    /// never fails halfway on a file system that file data has filled.
    reserve: u64,
    /// Blocks that dirty pages the kernel accepted may still need when they
    /// are written back (set by the FUSE space guard while the disk is
    /// nearly full): other writes leave them free (see [`Allocator::room_for_writes`]).
    held_for_write_back: AtomicU64,
    /// Free inodes (superblock counter).
    pub free_inodes: AtomicU64,
    /// Where the next inode search starts.
    pub next_ino: AtomicU64,
    pub stats: AllocStats,
    pub trim_stats: TrimStats,
    /// `-o discard`: see [`Allocator::release_pending`].
    discard: bool,
}

/// Allocator settings from the mount options.
#[derive(Clone, Copy, Debug)]
pub struct AllocOptions {
    pub optimize_scan: bool,
    /// Buddies kept loaded at most.
    pub buddy_cap: usize,
    /// Blocks a locality group's new run searches for (ext4's
    /// `mb_group_prealloc`; 0 turns locality groups off).
    pub group_prealloc: u32,
    /// Discard blocks when they become allocatable again (`-o discard`).
    pub discard: bool,
}

impl Allocator {
    /// Loads every group descriptor and builds the groups' summaries (from
    /// the layout for groups never written; others stay unknown until used).
    /// `gdt`: the descriptor table's first block and length in blocks.
    pub fn load(
        geo: Geometry,
        seed: u32,
        gdt: (u64, u64),
        bufs: &BufferCache,
        next_ino: u64,
        itables_zeroed: bool,
        opts: AllocOptions,
    ) -> Result<Allocator> {
        let (gdt_start, gdt_blocks) = gdt;
        let gdt_capacity =
            (gdt_blocks * u64::from(geo.block_size) / cairn_format::group_desc::GD_SIZE as u64).max(geo.group_count);
        let groups = GroupTable::new(gdt_capacity);
        groups.ensure(geo.group_count);
        let (mut fb, mut fi) = (0u64, 0u64);
        for g in 0..geo.group_count {
            let gd = Self::read_gd(geo, seed, gdt_start, bufs, g)?;
            if u64::from(gd.free_blocks) > geo.group_len(g) || u64::from(gd.free_inodes) > geo.inodes_per_group {
                return Err(FormatError::corrupt("group descriptor", g, "free counts exceed group size").into());
            }
            fb += u64::from(gd.free_blocks);
            fi += u64::from(gd.free_inodes);
            groups.get(g).wake(&gd, &geo, g, itables_zeroed);
        }
        let lists = GroupLists::new();
        for g in 0..geo.group_count {
            lists.refile(g as u32, groups.get(g));
        }
        Ok(Allocator {
            #[cfg(feature = "testing")]
            faults: faults::Faults::default(),
            geo: LiveGeometry::new(geo),
            seed,
            gdt_start,
            gdt_capacity,
            groups,
            lists,
            optimize_scan: opts.optimize_scan,
            loaded: Mutex::new(VecDeque::new()),
            buddy_cap: opts.buddy_cap.max(4),
            pending_queue: Mutex::new(VecDeque::new()),
            pending_total: AtomicU64::new(0),
            pa: prealloc::Preallocs::default(),
            lg: group_prealloc::LocalityGroups::new(opts.group_prealloc.min(1 << buddy::MAX_ORDER)),
            disk_free_blocks: AtomicU64::new(fb),
            alloc_free: AtomicU64::new(fb),
            reserve: metadata_reserve(geo.total_blocks),
            held_for_write_back: AtomicU64::new(0),
            free_inodes: AtomicU64::new(fi),
            next_ino: AtomicU64::new(next_ino.clamp(cairn_format::FIRST_INO, geo.total_inodes())),
            stats: AllocStats::default(),
            trim_stats: TrimStats::default(),
            discard: opts.discard,
        })
    }

    /// Allocates file data per `req` (its purpose must be data), leaving the
    /// metadata reserve alone: (first block, count between 1 and `req.want`).
    pub fn alloc_data(&self, tx: &dyn Change, mut req: AllocRequest) -> Result<(u64, u32)> {
        debug_assert_eq!(req.purpose, Purpose::Data);
        #[cfg(feature = "testing")]
        self.faults.check()?;
        if let Some(r) = self.take_prealloc(tx, &req)? {
            self.stats.reqs.fetch_add(1, Relaxed);
            return Ok(r);
        }
        req.small &= self.lg.chunk > 0;
        if req.small {
            if let Some(r) = self.take_group_prealloc(tx, &req)? {
                self.stats.reqs.fetch_add(1, Relaxed);
                return Ok(r);
            }
        }
        let mut free = self.alloc_free.load(Ordering::Relaxed);
        if free <= self.reserve && self.preallocated_blocks() > 0 {
            self.discard_all_preallocs(tx.bufs());
            free = self.alloc_free.load(Ordering::Relaxed);
        }
        if free <= self.reserve {
            self.stats.enospc.fetch_add(1, Ordering::Relaxed);
            return Err(FsError::Errno(libc::ENOSPC));
        }
        req.want = u64::from(req.want).min(free - self.reserve) as u32;
        if req.small {
            self.trim_group_preallocs(tx.bufs());
            req.search = req.search.max(self.lg.chunk);
        }
        self.allocate(tx, req)
    }

    /// Holds `blocks` for the kernel's write-backs (0: none): from now on
    /// [`Allocator::room_for_writes`] leaves them out.
    pub fn hold_for_write_back(&self, blocks: u64) {
        self.held_for_write_back.store(blocks, Ordering::Relaxed);
    }

    /// Blocks held for the kernel's write-backs now.
    pub fn held_for_write_back(&self) -> u64 {
        self.held_for_write_back.load(Ordering::Relaxed)
    }

    /// Of `want` new data blocks, how many a write that is not a write-back
    /// (O_DIRECT, write-through, fallocate) may take now: all of them unless
    /// the space guard holds blocks for dirty pages the kernel accepted,
    /// which such a write must not take (issue 50: an O_DIRECT writer used
    /// up the space of a buffered writer's accepted appends, whose
    /// write-back then failed and whose size shrank).
    pub fn room_for_writes(&self, want: u64) -> u64 {
        let held = self.held_for_write_back.load(Ordering::Relaxed);
        if held == 0 {
            return want;
        }
        let free = self.disk_free_blocks.load(Ordering::Relaxed).saturating_sub(self.reserve);
        want.min(free.saturating_sub(held))
    }

    /// Blocks only metadata may take (not available to file data; statfs
    /// leaves them out of the available blocks, as ext4 does its reserve).
    pub fn reserve_blocks(&self) -> u64 {
        self.reserve
    }

    /// Blocks held by preallocations of either kind.
    fn preallocated_blocks(&self) -> u64 {
        self.pa.held.reserved.load(Relaxed) + self.lg.held.reserved.load(Relaxed)
    }

    /// Blocks of group `g` held by preallocations of either kind: (offset
    /// in the group, length).
    fn preallocated_in(&self, g: u64) -> Vec<(u64, u64)> {
        let start = self.geo().group_start(g);
        let end = start + self.geo().group_len(g);
        let mut v = self.pa.in_range(start, end);
        v.extend(self.lg.in_range(start, end));
        v
    }

    /// Gives every preallocation back to the buddy: the inodes' and the
    /// locality groups' (a full file system, unmount).
    pub fn discard_all_preallocs(&self, bufs: &BufferCache) {
        self.discard_inode_preallocs(bufs);
        self.discard_group_preallocs(bufs);
    }

    /// Allocates one metadata block near `goal`. Metadata may use the
    /// reserve that data leaves, down to its last quarter, which only
    /// `critical` allocations take: the orphan list's nodes, so that a file
    /// can always be deleted on a full file system.
    pub fn alloc_meta_block(&self, tx: &dyn Change, goal: u64, critical: bool) -> Result<u64> {
        #[cfg(feature = "testing")]
        self.faults.check()?;
        if !critical && self.alloc_free.load(Ordering::Relaxed) <= self.reserve / 4 {
            self.stats.enospc.fetch_add(1, Ordering::Relaxed);
            return Err(FsError::Errno(libc::ENOSPC));
        }
        self.allocate(tx, AllocRequest::meta(goal)).map(|(b, _)| b)
    }

    /// Frees `[start, start+len)` in checkpoint `seq` (see the module essay).
    pub fn free_blocks(&self, tx: &dyn Change, seq: u64, start: u64, len: u64) -> Result<()> {
        if !self.geo().valid_data_range(start, len) {
            return Err(FormatError::corrupt("extent", start, format!("freeing invalid range {start}+{len}")).into());
        }
        let mut b = start;
        let end = start + len;
        while b < end {
            let g = self.geo().group_of_block(b);
            let base = self.geo().group_start(g);
            let gend = (base + self.geo().group_len(g)).min(end);
            let (s, n) = (b - base, gend - b);
            let mut st = self.lock_group(g);
            self.change_bitmap(tx, &mut st, BitmapChange::FreeBlocks { g, off: s, n }, seq)?;
            b = gend;
        }
        Ok(())
    }

    /// Makes blocks freed by checkpoints below `durable_tail_seq` allocatable
    /// (discarding them first under `-o discard`).
    pub fn release_pending(&self, bufs: &BufferCache, durable_tail_seq: u64) {
        loop {
            let g = {
                let mut q = self.pending_queue.lock();
                match q.front() {
                    Some(&(seq, g)) if seq < durable_tail_seq => {
                        q.pop_front();
                        u64::from(g)
                    }
                    _ => break,
                }
            };
            let mut st = self.lock_group(g);
            let mut ready = Vec::new();
            st.pending.retain(|&(seq, off, len)| {
                let go = seq < durable_tail_seq;
                if go {
                    ready.push((off, len));
                }
                !go
            });
            let released: u64 = ready.iter().map(|&(_, len)| u64::from(len)).sum();
            if released == 0 {
                continue;
            }
            self.pending_total.fetch_sub(released, Relaxed);
            let ranges: Vec<(u64, u64)> = ready.iter().map(|&(off, len)| (u64::from(off), u64::from(len))).collect();
            if self.discard {
                // Online discard: the free is durable, and the group's lock
                // keeps the blocks out of any allocation until they are gone.
                self.discard_released(bufs, g, &ranges);
            }
            self.return_to_buddy(bufs, g, &mut st, &ranges);
        }
    }

    /// Blocks waiting for the journal before they can be reused.
    pub fn pending_blocks(&self) -> u64 {
        self.pending_total.load(Relaxed)
    }

    /// Checks the allocator's in-memory invariants; panics with what is
    /// wrong: free blocks as the disk counts them = allocatable + pending;
    /// the groups' counts add up; a loaded buddy equals its bitmap and its
    /// count and summary; every group is filed where its summary says.
    pub fn debug_check_consistency(&self) {
        let pending = self.pending_blocks();
        let alloc_free = self.alloc_free.load(Ordering::Relaxed);
        let disk_free = self.disk_free_blocks.load(Ordering::Relaxed);
        let held = self.preallocated_blocks();
        assert_eq!(
            alloc_free + pending + held,
            disk_free,
            "allocatable {alloc_free} + pending {pending} + preallocated {held} != free {disk_free}"
        );
        let (mut sum, mut pending_sum) = (0u64, 0u64);
        for g in 0..self.geo().group_count {
            let grp = self.groups.get(g);
            let st = grp.lock.lock();
            let free = grp.free.load(Ordering::Relaxed);
            sum += u64::from(free);
            pending_sum += st.pending.iter().map(|p| u64::from(p.2)).sum::<u64>();
            if let Some(b) = &st.buddy {
                b.check();
                assert_eq!(b.free(), free, "group {g}: the buddy has {} free blocks, the count says {free}", b.free());
                assert_eq!(b.fragments(), grp.fragments.load(Relaxed), "group {g}: fragment summary");
                let largest = b.largest_order().map_or(groups::ORDER_NONE, |k| k as u8);
                assert_eq!(largest, grp.largest.load(Relaxed), "group {g}: largest order summary");
                for &(_, off, len) in &st.pending {
                    let (off, len) = (u64::from(off), u64::from(len));
                    assert!((off..off + len).all(|i| !b.is_free(i)), "group {g}: a pending free is allocatable");
                }
                for (off, len) in self.preallocated_in(g) {
                    assert!((off..off + len).all(|i| !b.is_free(i)), "group {g}: a preallocation is allocatable");
                }
            }
            self.lists.check_filed(g as u32, grp);
        }
        assert_eq!(sum, alloc_free, "groups' allocatable counts add up to {sum}, total says {alloc_free}");
        assert_eq!(pending_sum, pending, "groups' pending frees add up to {pending_sum}, total says {pending}");
    }
}
