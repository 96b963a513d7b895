//! Finding blocks: the goal first, then the criteria of ext4's regular
//! allocator, each a pass over candidate groups.
//!
//! | criterion | a group is good when | inside the group |
//! |---|---|---|
//! | cr0, power-of-two aligned | its largest free chunk order ≥ the request's | the buddy's first chunk of that order or more |
//! | cr1, goal length fast | its average free run ≥ the search length | the best of up to 200 free extents |
//! | cr2, goal length slow | its free count ≥ the search length | the same |
//! | cr3, any free | it has a free block | the first free extent |
//!
//! A request starts at cr0 if its search length is `2^k` with `k ≥ 2`, else
//! at cr1. With `mb_optimize_scan` (the default) cr0 and cr1 take their
//! groups from the order lists and fragment buckets (see `lists`): every
//! group offered passes, so their cost does not grow with the number of
//! groups. Without it, and always at cr2 and cr3, the pass walks every
//! group from the goal's onwards, and a pass that finds nothing is one of
//! mb_stats' *useless loops*. A linear pass at cr0/cr1 must read the bitmap
//! of a group whose summary is unknown; cr2 and cr3 judge from the free
//! count alone.
//!
//! "Best" among free extents (ext4's `mb_measure_extent`): an extent of
//! exactly the search length ends the walk; otherwise the smallest extent at
//! least that long, or failing that the longest; the walk ends after
//! `MAX_TO_SCAN` extents, or after `MIN_TO_SCAN` once one is long enough.

use super::bitmap_change::BitmapChange;
use super::buddy::{Buddy, Mark, NUM_ORDERS};
use super::groups::{bucket_of, GroupState, ORDER_NONE, ORDER_UNKNOWN};
use super::lists::Index;
use super::request::AllocRequest;
use super::Allocator;
use crate::buffer::Change;
use crate::error::{FsError, Result};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// Extents examined in a group at most (ext4's `mb_max_to_scan`).
const MAX_TO_SCAN: u64 = 200;
/// Extents examined before settling for one long enough (`mb_min_to_scan`).
const MIN_TO_SCAN: u64 = 10;

/// Whether a group may serve a request at a criterion, from its summary.
enum Verdict {
    No,
    Yes,
    /// The summary is unknown: read the bitmap to decide.
    Load,
}

impl Allocator {
    /// Allocates between 1 and `req.want` contiguous blocks: (first, count).
    pub fn allocate(&self, tx: &dyn Change, req: AllocRequest) -> Result<(u64, u32)> {
        self.stats.reqs.fetch_add(1, Relaxed);
        let t = Instant::now();
        let r = self.allocate_timed(tx, req);
        self.stats.time_ns.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
        r
    }

    fn allocate_timed(&self, tx: &dyn Change, req: AllocRequest) -> Result<(u64, u32)> {
        let goal = if req.goal >= self.geo().total_blocks { 0 } else { req.goal };
        let g0 = self.geo().group_of_block(goal);
        if let Some(r) = self.try_goal(tx, g0, goal, req)? {
            return Ok(r);
        }
        let first = if req.power_of_two_order().is_some() { 0 } else { 1 };
        for cr in first..4 {
            if let Some(r) = self.pass(tx, cr, g0, goal, req)? {
                self.stats.cr[cr].hits.fetch_add(1, Relaxed);
                return Ok(r);
            }
        }
        self.stats.enospc.fetch_add(1, Relaxed);
        Err(FsError::Errno(libc::ENOSPC))
    }

    /// The free run at the goal block itself, if the goal is free.
    fn try_goal(&self, tx: &dyn Change, g: u64, goal: u64, req: AllocRequest) -> Result<Option<(u64, u32)>> {
        if self.groups.get(g).free.load(Relaxed) == 0 {
            return Ok(None);
        }
        let mut st = self.lock_group(g);
        self.load_buddy(tx.bufs(), g, &mut st)?;
        let off = goal - self.geo().group_start(g);
        let b = st.buddy.as_ref().expect("loaded above");
        // A small file's goal is a hint of locality only: it is taken when a
        // whole new run fits there (ext4 takes a goal only at its full
        // normalized length), not to squeeze into a gap.
        let n = if req.small {
            match b.run_at(off, u64::from(req.search)) {
                n if n == u64::from(req.search) => u64::from(req.want),
                _ => 0,
            }
        } else {
            b.run_at(off, u64::from(req.want))
        };
        if n == 0 {
            return Ok(None);
        }
        self.stats.goal_hits.fetch_add(1, Relaxed);
        self.take(tx, g, &mut st, off, n, req).map(Some)
    }

    /// One criterion's pass over its candidate groups.
    fn pass(&self, tx: &dyn Change, cr: usize, g0: u64, goal: u64, req: AllocRequest) -> Result<Option<(u64, u32)>> {
        let mut found: Option<Result<(u64, u32)>> = None;
        let mut visit = |g: u32| -> bool {
            match self.try_group(tx, u64::from(g), cr, g0, goal, req) {
                Ok(None) => false,
                Ok(Some(r)) => {
                    found = Some(Ok(r));
                    true
                }
                Err(e) => {
                    found = Some(Err(e));
                    true
                }
            }
        };
        if self.optimize_scan && cr <= 1 {
            let (index, from) = match cr {
                0 => (Index::Order, req.power_of_two_order().unwrap_or(0) as usize),
                _ => (Index::Bucket, bucket_of(req.search) as usize),
            };
            for level in from..NUM_ORDERS {
                if self.lists.walk(index, level, g0 as u32, &mut visit) {
                    break;
                }
            }
        } else {
            let n = self.geo().group_count;
            let hit = (0..n).any(|i| visit(((g0 + i) % n) as u32));
            if !hit {
                self.stats.cr[cr].useless_loops.fetch_add(1, Relaxed);
            }
        }
        found.transpose()
    }

    /// Whether group `g` may serve `req` at `cr`, judged from its summary.
    fn good_group(&self, g: u64, cr: usize, req: AllocRequest) -> Verdict {
        let grp = self.groups.get(g);
        let free = grp.free.load(Relaxed);
        if free == 0 || (cr == 2 && free < req.search) {
            return Verdict::No;
        }
        if cr >= 2 {
            return Verdict::Yes;
        }
        let largest = grp.largest.load(Relaxed);
        if largest == ORDER_UNKNOWN {
            return Verdict::Load;
        }
        let ok = match cr {
            0 => largest != ORDER_NONE && u32::from(largest) >= req.power_of_two_order().unwrap_or(0),
            _ => grp.avg_fragment().is_some_and(|a| a >= req.search),
        };
        if ok {
            Verdict::Yes
        } else {
            Verdict::No
        }
    }

    /// Tries group `g` at criterion `cr`.
    fn try_group(
        &self,
        tx: &dyn Change,
        g: u64,
        cr: usize,
        g0: u64,
        goal: u64,
        req: AllocRequest,
    ) -> Result<Option<(u64, u32)>> {
        let s = &self.stats.cr[cr];
        s.groups_considered.fetch_add(1, Relaxed);
        if matches!(self.good_group(g, cr, req), Verdict::No) {
            return Ok(None);
        }
        let mut st = self.lock_group(g);
        self.load_buddy(tx.bufs(), g, &mut st)?;
        // Re-checked under the lock: the summary may have changed.
        if !matches!(self.good_group(g, cr, req), Verdict::Yes) {
            return Ok(None);
        }
        let hint = if g == g0 { goal - self.geo().group_start(g) } else { 0 };
        let b = st.buddy.as_ref().expect("loaded above");
        let want = u64::from(req.want);
        let pick = match cr {
            0 => {
                let order = req.power_of_two_order().unwrap_or(0);
                b.find_chunk(order, hint).map(|(c, _)| (c, want.min(1 << order)))
            }
            1 | 2 => {
                let mut scanned = 0;
                let best = best_extent(b, hint, u64::from(req.search), &mut scanned);
                s.extents_scanned.fetch_add(scanned, Relaxed);
                best.filter(|&(_, len)| cr == 2 || len >= want).map(|(a, len)| (a, len.min(want)))
            }
            _ => {
                s.extents_scanned.fetch_add(1, Relaxed);
                b.next_extent(hint).or_else(|| b.next_extent(0)).map(|(a, e)| (a, (e - a).min(want)))
            }
        };
        match pick {
            Some((off, n)) => self.take(tx, g, &mut st, off, n, req).map(Some),
            None => Ok(None),
        }
    }

    /// Marks `[off, off+n)` of group `g` in use, in the buddy and on disk.
    fn take(
        &self,
        tx: &dyn Change,
        g: u64,
        st: &mut GroupState,
        off: u64,
        n: u64,
        req: AllocRequest,
    ) -> Result<(u64, u32)> {
        let grp = self.groups.get(g);
        let b = st.buddy.as_mut().expect("loaded by the caller");
        debug_assert_eq!(b.run_at(off, n), n, "group {g}: taking blocks that are not free");
        b.mark(off, n, Mark::Used);
        grp.free.fetch_sub(n as u32, Relaxed);
        self.alloc_free.fetch_sub(n, Relaxed);
        self.summarise(g, st);
        if req.small {
            self.make_group_prealloc(g, st, off, n, &req);
        } else {
            self.make_prealloc(g, st, off, n, &req);
        }
        self.mark_in_use_on_disk(tx, g, st, off, n, &req)?;
        Ok((self.geo().group_start(g) + off, n as u32))
    }

    /// Marks `[off, off+n)` of group `g`, already out of its buddy, in use
    /// on disk and counts the allocation (the caller holds the group lock).
    pub(super) fn mark_in_use_on_disk(
        &self,
        tx: &dyn Change,
        g: u64,
        st: &mut GroupState,
        off: u64,
        n: u64,
        req: &AllocRequest,
    ) -> Result<()> {
        // A use's pending mark is never read: 0.
        self.change_bitmap(tx, st, BitmapChange::UseBlocks { g, off, n }, 0)?;
        self.disk_free_blocks.fetch_sub(n, Relaxed);
        self.stats.blocks_allocated.fetch_add(n, Relaxed);
        if n == u64::from(req.want) {
            self.stats.len_goal_hits.fetch_add(1, Relaxed);
        }
        Ok(())
    }
}

/// The best free extent of `b` for a search of `search` blocks, walking
/// from `hint` and wrapping (see the module essay): (start, length).
fn best_extent(b: &Buddy, hint: u64, search: u64, scanned: &mut u64) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    let mut pos = hint;
    let mut wrapped = false;
    loop {
        let (a, e) = match b.next_extent(pos) {
            Some(x) if !(wrapped && x.0 >= hint) => x,
            _ if !wrapped && hint > 0 => {
                wrapped = true;
                pos = 0;
                continue;
            }
            _ => break,
        };
        *scanned += 1;
        let len = e - a;
        if len == search {
            return Some((a, len));
        }
        best = match best {
            None => Some((a, len)),
            Some((_, bl)) if (bl < search && len > bl) || (bl > search && len >= search && len < bl) => Some((a, len)),
            keep => keep,
        };
        let long_enough = best.is_some_and(|(_, bl)| bl >= search);
        if *scanned >= MAX_TO_SCAN || (*scanned >= MIN_TO_SCAN && long_enough) {
            break;
        }
        pos = e;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::bits::set_bit;

    #[test]
    fn best_extent_prefers_a_tight_fit_near_the_hint() {
        // Free runs: [0,4) [8,9) [16,48) [64,72) ... in a 128-block group.
        let mut map = vec![u64::MAX; 2];
        for (a, e) in [(0u64, 4u64), (8, 9), (16, 48), (64, 72)] {
            for i in a..e {
                crate::alloc::bits::clear_bit(&mut map, i);
            }
        }
        set_bit(&mut map, 127);
        let b = Buddy::new(map, 128);
        let best = |hint, search| best_extent(&b, hint, search, &mut 0);
        assert_eq!(best(0, 1), Some((8, 1)), "exact fit");
        assert_eq!(best(0, 6), Some((64, 8)), "smallest long enough");
        assert_eq!(best(0, 100), Some((16, 32)), "longest when none is");
        assert_eq!(best(65, 2), Some((0, 4)), "from the hint, wrapping, tightest fit");
        assert_eq!(best(65, 7), Some((65, 7)), "the hint's own run fits exactly");
    }
}
