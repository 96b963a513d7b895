//! The optimized group scan's indexes (ext4 `mb_optimize_scan`): groups
//! filed by their largest free chunk order, and by the order of their
//! average free-run length.
//!
//! A power-of-two request of order `k` looks only at the order lists `k` and
//! above, whose every group has a free aligned chunk that large: O(1) in the
//! number of groups. A goal-length request looks at the fragment buckets
//! from its length's order up, whose groups have average runs about that
//! long or longer. Each list is an ordered set of group numbers, so a scan
//! visits the groups from the goal's group onwards and then wraps around
//! (the order the kernel's xarrays give since 6.17): locality survives.
//!
//! ## Locking
//! One reader-writer lock per list. A group moves between lists only under
//! its own lock (`refile`, which takes list locks inside it). A scan never
//! holds a list lock while it locks a group: it copies a small batch of
//! group numbers, drops the list lock, then checks each group under the
//! group's lock: the lists are hints, and every group found is re-checked.
//! Groups whose summary is unknown (bitmap not yet read) are on no list;
//! the linear criteria still reach them.

use super::buddy::NUM_ORDERS;
use super::groups::{bucket_of, Group, NOT_LISTED, ORDER_NONE, ORDER_UNKNOWN};
use parking_lot::RwLock;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;

/// Group numbers copied from a list per lock hold.
const BATCH: usize = 16;

/// The order lists and the fragment buckets.
pub struct GroupLists {
    orders: Vec<RwLock<BTreeSet<u32>>>,
    buckets: Vec<RwLock<BTreeSet<u32>>>,
}

/// Which index a walk follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Index {
    /// By largest free chunk order.
    Order,
    /// By average free-run length order.
    Bucket,
}

impl GroupLists {
    pub fn new() -> GroupLists {
        GroupLists {
            orders: (0..NUM_ORDERS).map(|_| RwLock::new(BTreeSet::new())).collect(),
            buckets: (0..NUM_ORDERS).map(|_| RwLock::new(BTreeSet::new())).collect(),
        }
    }

    /// Files group `g` on the list and bucket its summary says (the caller
    /// holds the group's lock).
    pub fn refile(&self, g: u32, grp: &Group) {
        let largest = grp.largest.load(Relaxed);
        let order = if largest == ORDER_UNKNOWN || largest == ORDER_NONE { NOT_LISTED } else { largest };
        let bucket = grp.avg_fragment().map_or(NOT_LISTED, |a| bucket_of(a) as u8);
        Self::move_to(&self.orders, &grp.in_order, g, order);
        Self::move_to(&self.buckets, &grp.in_bucket, g, bucket);
    }

    fn move_to(lists: &[RwLock<BTreeSet<u32>>], slot: &std::sync::atomic::AtomicU8, g: u32, to: u8) {
        let from = slot.load(Relaxed);
        if from == to {
            return;
        }
        if from != NOT_LISTED {
            lists[from as usize].write().remove(&g);
        }
        if to != NOT_LISTED {
            lists[to as usize].write().insert(g);
        }
        slot.store(to, Relaxed);
    }

    /// Groups on list `index[level]`, from `start` onwards then wrapping:
    /// calls `visit` on each until it returns true (found). Returns whether
    /// `visit` found something.
    pub fn walk(&self, index: Index, level: usize, start: u32, visit: &mut dyn FnMut(u32) -> bool) -> bool {
        let list = match index {
            Index::Order => &self.orders[level],
            Index::Bucket => &self.buckets[level],
        };
        for (lo, hi) in [(start, u32::MAX), (0, start)] {
            let mut next = lo;
            loop {
                let batch: Vec<u32> = list.read().range(next..hi).take(BATCH).copied().collect();
                let Some(&last) = batch.last() else { break };
                for g in batch {
                    if visit(g) {
                        return true;
                    }
                }
                if last == u32::MAX {
                    break;
                }
                next = last + 1;
            }
        }
        false
    }

    /// Sizes of the order lists and of the buckets (ext4's
    /// `mb_structs_summary`).
    pub fn sizes(&self) -> (Vec<usize>, Vec<usize>) {
        (self.orders.iter().map(|l| l.read().len()).collect(), self.buckets.iter().map(|l| l.read().len()).collect())
    }

    /// Whether group `g` is filed on exactly the list and bucket its
    /// summary says (for the debug invariant check).
    pub fn check_filed(&self, g: u32, grp: &Group) {
        let largest = grp.largest.load(Relaxed);
        for (k, l) in self.orders.iter().enumerate() {
            let want = largest as usize == k;
            assert_eq!(l.read().contains(&g), want, "group {g}: order list {k} membership (largest {largest})");
        }
        let bucket = grp.avg_fragment().map(bucket_of);
        for (k, l) in self.buckets.iter().enumerate() {
            let want = bucket == Some(k as u32);
            assert_eq!(l.read().contains(&g), want, "group {g}: fragment bucket {k} membership ({bucket:?})");
        }
    }
}
