//! The allocator's counters, as ext4's `mb_stats` prints them, and its
//! `cairn stats` keys (`alloc.*`, `alloc.mb.*`).

use super::Allocator;
use crate::stats::Publish;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Counters of one criterion (cr0 = power-of-two aligned, cr1 = goal length
/// fast, cr2 = goal length slow, cr3 = any free).
#[derive(Default)]
pub struct CrStats {
    /// Requests served at this criterion.
    pub hits: AtomicU64,
    /// Groups checked (`good_group`) at this criterion.
    pub groups_considered: AtomicU64,
    /// Free extents examined inside groups.
    pub extents_scanned: AtomicU64,
    /// Full passes over every group that found nothing.
    pub useless_loops: AtomicU64,
}

/// Allocator counters.
#[derive(Default)]
pub struct AllocStats {
    pub reqs: AtomicU64,
    /// Time spent serving requests (scans, buddy loads, bitmap updates).
    pub time_ns: AtomicU64,
    pub blocks_allocated: AtomicU64,
    pub blocks_freed: AtomicU64,
    /// Requests served at their exact goal block.
    pub goal_hits: AtomicU64,
    /// Requests that got every block they wanted.
    pub len_goal_hits: AtomicU64,
    pub cr: [CrStats; 4],
    pub buddies_generated: AtomicU64,
    pub buddies_time_ns: AtomicU64,
    pub buddies_evicted: AtomicU64,
    pub inodes_allocated: AtomicU64,
    /// Inode numbers the counter's next number gave, without a search.
    pub inodes_by_counter: AtomicU64,
    /// Inode numbers found by a search (the counter's number was taken).
    pub inodes_by_search: AtomicU64,
    pub inode_counter_wraps: AtomicU64,
    /// Inode-table blocks started as zeros, not read (see `inodes`).
    pub itable_blocks_unread: AtomicU64,
    pub inodes_freed: AtomicU64,
    pub enospc: AtomicU64,
}

impl AllocStats {
    /// Groups considered at every criterion.
    pub fn groups_scanned(&self) -> u64 {
        self.cr.iter().map(|c| c.groups_considered.load(Relaxed)).sum()
    }
}

impl Publish for Allocator {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("alloc.calls", s.reqs.load(Relaxed));
        put("alloc.blocks_allocated", s.blocks_allocated.load(Relaxed));
        put("alloc.blocks_freed", s.blocks_freed.load(Relaxed));
        put("alloc.groups_scanned", s.groups_scanned());
        put("alloc.goal_hits", s.goal_hits.load(Relaxed));
        put("alloc.enospc", s.enospc.load(Relaxed));
        let t = &self.trim_stats;
        put("alloc.trim.requests", t.requests.load(Relaxed));
        put("alloc.trim.extents", t.extents.load(Relaxed));
        put("alloc.trim.blocks", t.blocks.load(Relaxed));
        put("alloc.trim.unsupported", t.unsupported.load(Relaxed));
        put("alloc.trim.online_extents", t.online_extents.load(Relaxed));
        put("alloc.trim.online_blocks", t.online_blocks.load(Relaxed));
        put("alloc.pending_free_blocks", self.pending_blocks());
        put("alloc.free_blocks", self.disk_free_blocks.load(Relaxed));
        put("alloc.free_inodes", self.free_inodes.load(Relaxed));
        put("alloc.inodes_allocated", s.inodes_allocated.load(Relaxed));
        put("alloc.inodes_by_counter", s.inodes_by_counter.load(Relaxed));
        put("alloc.inodes_by_search", s.inodes_by_search.load(Relaxed));
        put("alloc.itable_blocks_unread", s.itable_blocks_unread.load(Relaxed));
        put("alloc.inode_counter_wraps", s.inode_counter_wraps.load(Relaxed));
        put("alloc.inodes_freed", s.inodes_freed.load(Relaxed));
        put("alloc.next_ino", self.next_ino.load(Relaxed));
        put("alloc.mb.optimize_scan", u64::from(self.optimize_scan));
        put("alloc.mb.groups", self.geo().group_count);
        put("alloc.mb.reqs", s.reqs.load(Relaxed));
        put("alloc.mb.time_ns", s.time_ns.load(Relaxed));
        put("alloc.mb.goal_hits", s.goal_hits.load(Relaxed));
        put("alloc.mb.len_goal_hits", s.len_goal_hits.load(Relaxed));
        for (i, c) in s.cr.iter().enumerate() {
            put(&format!("alloc.mb.cr{i}.hits"), c.hits.load(Relaxed));
            put(&format!("alloc.mb.cr{i}.groups_considered"), c.groups_considered.load(Relaxed));
            put(&format!("alloc.mb.cr{i}.extents_scanned"), c.extents_scanned.load(Relaxed));
            put(&format!("alloc.mb.cr{i}.useless_loops"), c.useless_loops.load(Relaxed));
        }
        put("alloc.mb.preallocated", self.pa.held.made.load(Relaxed));
        put("alloc.mb.prealloc_used", self.pa.held.used.load(Relaxed));
        put("alloc.mb.prealloc_discarded", self.pa.held.discarded.load(Relaxed));
        put("alloc.mb.prealloc_held", self.pa.held.reserved.load(Relaxed));
        put("alloc.mb.preallocs", self.pa.count() as u64);
        put("alloc.mb.group_prealloc", u64::from(self.lg.chunk));
        put("alloc.mb.group_preallocated", self.lg.held.made.load(Relaxed));
        put("alloc.mb.group_prealloc_used", self.lg.held.used.load(Relaxed));
        put("alloc.mb.group_prealloc_discarded", self.lg.held.discarded.load(Relaxed));
        put("alloc.mb.group_prealloc_held", self.lg.held.reserved.load(Relaxed));
        put("alloc.mb.group_prealloc_runs", self.lg.count() as u64);
        put("alloc.mb.buddies_generated", s.buddies_generated.load(Relaxed));
        put("alloc.mb.buddies_time_ns", s.buddies_time_ns.load(Relaxed));
        put("alloc.mb.buddies_evicted", s.buddies_evicted.load(Relaxed));
        put("alloc.mb.buddies_loaded", self.loaded.lock().len() as u64);
        let (orders, buckets) = self.lists.sizes();
        for (k, n) in orders.iter().enumerate() {
            put(&format!("alloc.mb.order_list.{k}"), *n as u64);
        }
        for (k, n) in buckets.iter().enumerate() {
            put(&format!("alloc.mb.frag_bucket.{k}"), *n as u64);
        }
    }
}
