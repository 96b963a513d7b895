//! The xattr-block dedup cache: Jan Kara's 2016 mbcache rewrite (seed 000).
//!
//! ## Purpose
//! Inodes with identical xattr sets share one xattr block (refcounted on
//! disk, see `xattr`). To find a block with a given content, the cache maps
//! a 32-bit content hash (`XattrBlock::content_hash`) to the blocks that
//! had that content when they were inserted. It is a hint only, never
//! persisted: a candidate is shared only after its bytes are read and
//! compared in full under the block's lock, and a block whose on-disk
//! refcount reached `XATTR_REFCOUNT_MAX` (1024) is not offered.
//!
//! ## Structure
//! * 2^10 hash chains (ext4's `HASH_BUCKET_BITS`), each its own mutex over
//!   the entries with that bucket; an entry is (key, block) plus two flags:
//!   REFERENCED (set on a hit) and REUSABLE (clear while the block is at the
//!   refcount limit). (key, block) pairs are unique; keys are not.
//! * One insertion-order list (the clock) and the count, under one mutex.
//! * An entry is *in use* while a finder holds a clone of its `Arc`
//!   (`strong_count > 2`: the chain and the list hold one each).
//!
//! ## Reclaim
//! `max_entries` = 16 per chain (16,384). An insert at or above the limit
//! asks the reclaim thread to shrink `max / 16` entries; at twice the limit
//! the inserting thread also shrinks 64 entries itself. Shrinking takes
//! entries from the head of the clock: a REFERENCED or in-use entry loses
//! the bit and goes to the tail (second chance); any other is unhashed.
//!
//! ## Removal
//! When a block is freed or changed in place its entry is removed under the
//! block's lock (`xattr`) and marked *dead* (unhashed at once; the clock
//! drops it when it comes by, or when dead entries outnumber live ones); a finder that took the entry
//! earlier sees the mark under the same lock and skips the block, so a
//! freed block is never taken for a shared one.
//!
//! `-o nombcache` (ext4's name) disables it: no lookups, no inserts, no
//! sharing — every inode gets its own block.

use crate::stats::Publish;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Hash chains: 2^10, as ext4's xattr cache.
pub const BUCKET_BITS: u32 = 10;
/// Entries shrunk by the inserting thread at twice the limit.
pub const SYNC_SHRINK_BATCH: usize = 64;
/// The reclaim thread shrinks `max / SHRINK_DIVISOR` per wake-up.
pub const SHRINK_DIVISOR: usize = 16;

/// One cached (content hash, block) pair.
pub struct Entry {
    pub key: u32,
    pub block: u64,
    referenced: AtomicBool,
    reusable: AtomicBool,
    dead: AtomicBool,
}

impl Entry {
    /// Whether the entry was removed (its block freed or changed) since a
    /// finder took it. Read under the block's lock.
    pub fn is_dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks a hit: the entry gets a second chance at the next shrink.
    pub fn touch(&self) {
        self.referenced.store(true, Relaxed);
    }

    /// Offers the block for sharing or stops offering it (refcount limit).
    pub fn set_reusable(&self, on: bool) {
        self.reusable.store(on, Relaxed);
    }
}

/// Counters (see the module essay).
#[derive(Default)]
pub struct MbCacheStats {
    pub lookups: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub inserts: AtomicU64,
    /// Inserts of a (key, block) already present (ext4's EBUSY).
    pub insert_exists: AtomicU64,
    pub reclaimed: AtomicU64,
    pub second_chances: AtomicU64,
    /// Blocks that reached the refcount limit (or were found at it) and
    /// stopped being offered.
    pub refcount_limit: AtomicU64,
    /// Candidates whose bytes did not match (hash collisions, dead entries).
    pub false_matches: AtomicU64,
    /// References taken on, and dropped from, blocks other inodes hold too
    /// (since mount): their difference is the blocks sharing saved.
    pub refs_shared: AtomicU64,
    pub refs_unshared: AtomicU64,
    /// Blocks that went from one holder to two, and back (since mount).
    pub became_shared: AtomicU64,
    pub became_private: AtomicU64,
}

#[derive(Default)]
struct Reclaim {
    wanted: bool,
    stop: bool,
}

/// The cache.
pub struct MbCache {
    chains: Vec<Mutex<Vec<Arc<Entry>>>>,
    clock: Mutex<VecDeque<Arc<Entry>>>,
    count: AtomicUsize,
    /// Removed entries still on the clock.
    dead_in_clock: AtomicUsize,
    max_entries: usize,
    enabled: bool,
    reclaim: Mutex<Reclaim>,
    reclaim_cv: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub stats: MbCacheStats,
}

impl MbCache {
    pub fn new(enabled: bool) -> MbCache {
        let n = 1usize << BUCKET_BITS;
        MbCache {
            chains: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            clock: Mutex::new(VecDeque::new()),
            count: AtomicUsize::new(0),
            dead_in_clock: AtomicUsize::new(0),
            max_entries: n * 16,
            enabled,
            reclaim: Mutex::new(Reclaim::default()),
            reclaim_cv: Condvar::new(),
            thread: Mutex::new(None),
            stats: MbCacheStats::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn chain(&self, key: u32) -> &Mutex<Vec<Arc<Entry>>> {
        &self.chains[(key.wrapping_mul(0x9e37_79b9) >> (32 - BUCKET_BITS)) as usize]
    }

    /// Entries now cached.
    pub fn len(&self) -> usize {
        self.count.load(Relaxed)
    }

    /// Caches `block` under `key`; false if the pair is cached already.
    pub fn insert(&self, key: u32, block: u64, reusable: bool) -> bool {
        if !self.enabled {
            return false;
        }
        let n = self.count.load(Relaxed);
        if n >= self.max_entries {
            self.want_reclaim();
            if n >= 2 * self.max_entries {
                self.shrink(SYNC_SHRINK_BATCH);
            }
        }
        let e = Arc::new(Entry {
            key,
            block,
            referenced: AtomicBool::new(false),
            reusable: AtomicBool::new(reusable),
            dead: AtomicBool::new(false),
        });
        {
            let mut c = self.chain(key).lock();
            if c.iter().any(|x| x.key == key && x.block == block) {
                self.stats.insert_exists.fetch_add(1, Relaxed);
                return false;
            }
            c.push(e.clone());
        }
        self.clock.lock().push_back(e);
        self.count.fetch_add(1, Relaxed);
        self.stats.inserts.fetch_add(1, Relaxed);
        true
    }

    /// The reusable entries cached under `key` (each clone holds the entry
    /// in use until dropped).
    pub fn find(&self, key: u32) -> Vec<Arc<Entry>> {
        if !self.enabled {
            return Vec::new();
        }
        self.stats.lookups.fetch_add(1, Relaxed);
        let c = self.chain(key).lock();
        c.iter().filter(|e| e.key == key && e.reusable.load(Relaxed)).cloned().collect()
    }

    /// The entry of `(key, block)`, reusable or not.
    pub fn get(&self, key: u32, block: u64) -> Option<Arc<Entry>> {
        if !self.enabled {
            return None;
        }
        self.chain(key).lock().iter().find(|e| e.key == key && e.block == block).cloned()
    }

    /// Removes `(key, block)` and marks it dead (the caller holds the
    /// block's lock and is about to free or change it).
    pub fn remove(&self, key: u32, block: u64) {
        if !self.enabled {
            return;
        }
        let e = {
            let mut c = self.chain(key).lock();
            let Some(i) = c.iter().position(|e| e.key == key && e.block == block) else { return };
            c.swap_remove(i)
        };
        e.dead.store(true, std::sync::atomic::Ordering::Release);
        self.count.fetch_sub(1, Relaxed);
        // The clock drops dead entries when it meets them; it is compacted
        // once they outnumber the live ones, so removal stays O(1) amortised.
        let dead = self.dead_in_clock.fetch_add(1, Relaxed) + 1;
        if dead > 64 && dead > self.count.load(Relaxed) {
            let mut clock = self.clock.lock();
            clock.retain(|x| !x.is_dead());
            self.dead_in_clock.store(0, Relaxed);
        }
    }

    /// Shrinks up to `n` entries from the clock's head (see the essay);
    /// returns how many were unhashed.
    pub fn shrink(&self, n: usize) -> usize {
        let mut freed = 0;
        for _ in 0..n {
            let e = {
                let mut clock = self.clock.lock();
                let Some(e) = clock.pop_front() else { break };
                if e.is_dead() {
                    // A heuristic count (a removal may race with a compaction).
                    let _ = self.dead_in_clock.fetch_update(Relaxed, Relaxed, |d| d.checked_sub(1));
                    continue;
                }
                // In use: the chain, this clone and a finder's clone.
                if e.referenced.swap(false, Relaxed) || Arc::strong_count(&e) > 2 {
                    clock.push_back(e);
                    self.stats.second_chances.fetch_add(1, Relaxed);
                    continue;
                }
                self.count.fetch_sub(1, Relaxed);
                e
            };
            let mut c = self.chain(e.key).lock();
            if let Some(i) = c.iter().position(|x| Arc::ptr_eq(x, &e)) {
                c.swap_remove(i);
            }
            freed += 1;
        }
        self.stats.reclaimed.fetch_add(freed as u64, Relaxed);
        freed
    }

    fn want_reclaim(&self) {
        let mut r = self.reclaim.lock();
        if !r.wanted {
            r.wanted = true;
            self.reclaim_cv.notify_one();
        }
    }

    /// Starts the reclaim thread (a no-op when disabled).
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let me = self.clone();
        let h = std::thread::Builder::new().name("cairn-mbcache".into()).spawn(move || loop {
            {
                let mut r = me.reclaim.lock();
                while !r.wanted && !r.stop {
                    me.reclaim_cv.wait(&mut r);
                }
                if r.stop {
                    return;
                }
                r.wanted = false;
            }
            let excess = me.count.load(Relaxed).saturating_sub(me.max_entries);
            me.shrink((me.max_entries / SHRINK_DIVISOR).max(excess));
        })?;
        *self.thread.lock() = Some(h);
        Ok(())
    }

    /// Stops the reclaim thread.
    pub fn stop(&self) {
        self.reclaim.lock().stop = true;
        self.reclaim_cv.notify_one();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

impl Publish for MbCache {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("mbcache.enabled", u64::from(self.enabled));
        put("mbcache.entries", self.len() as u64);
        put("mbcache.max_entries", self.max_entries as u64);
        put("mbcache.lookups", s.lookups.load(Relaxed));
        put("mbcache.hits", s.hits.load(Relaxed));
        put("mbcache.misses", s.misses.load(Relaxed));
        put("mbcache.inserts", s.inserts.load(Relaxed));
        put("mbcache.insert_exists", s.insert_exists.load(Relaxed));
        put("mbcache.reclaimed", s.reclaimed.load(Relaxed));
        put("mbcache.second_chances", s.second_chances.load(Relaxed));
        put("mbcache.refcount_limit", s.refcount_limit.load(Relaxed));
        put("mbcache.false_matches", s.false_matches.load(Relaxed));
        let diff = |a: &AtomicU64, b: &AtomicU64| a.load(Relaxed).saturating_sub(b.load(Relaxed));
        put("mbcache.blocks_saved_since_mount", diff(&s.refs_shared, &s.refs_unshared));
        put("mbcache.shared_blocks_since_mount", diff(&s.became_shared, &s.became_private));
    }
}

/// The sharing side of xattr blocks (`xattr`): the dedup cache and the
/// block locks.
pub struct XattrShare {
    pub cache: Arc<MbCache>,
    locks: Vec<Mutex<()>>,
    /// The image may hold external values (`INCOMPAT_XATTR_EXTERNAL`).
    pub(crate) external: bool,
}

/// Stripes of the xattr-block lock.
const BLOCK_LOCKS: usize = 256;

impl XattrShare {
    pub fn new(mbcache: bool, external: bool) -> XattrShare {
        XattrShare {
            cache: Arc::new(MbCache::new(mbcache)),
            locks: (0..BLOCK_LOCKS).map(|_| Mutex::new(())).collect(),
            external,
        }
    }

    /// The lock of xattr block `blk`: its refcount, its bytes and its cache
    /// entry change only under it.
    pub(crate) fn lock(&self, blk: u64) -> MutexGuard<'_, ()> {
        self.locks[(blk as usize) % BLOCK_LOCKS].lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_unique_keys_are_not() {
        let c = MbCache::new(true);
        assert!(c.insert(7, 100, true));
        assert!(!c.insert(7, 100, true));
        assert!(c.insert(7, 200, true));
        let mut got: Vec<u64> = c.find(7).iter().map(|e| e.block).collect();
        got.sort();
        assert_eq!(got, vec![100, 200]);
        assert!(c.find(8).is_empty());
        assert_eq!(c.stats.insert_exists.load(Relaxed), 1);
    }

    #[test]
    fn unreusable_entries_are_not_offered_and_removed_ones_are_dead() {
        let c = MbCache::new(true);
        c.insert(1, 10, false);
        assert!(c.find(1).is_empty());
        c.get(1, 10).unwrap().set_reusable(true);
        let held = c.find(1);
        assert_eq!(held.len(), 1);
        c.remove(1, 10);
        assert!(held[0].is_dead());
        assert!(c.find(1).is_empty());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn shrink_gives_referenced_and_busy_entries_a_second_chance() {
        let c = MbCache::new(true);
        for b in 0..4 {
            c.insert(b as u32, b, true);
        }
        c.get(0, 0).unwrap().touch();
        let busy = c.find(1);
        assert_eq!(c.shrink(4), 2, "entries 2 and 3 go; 0 (referenced) and 1 (in use) rotate");
        assert_eq!(c.stats.second_chances.load(Relaxed), 2);
        assert_eq!(c.len(), 2);
        drop(busy);
        assert_eq!(c.shrink(4), 2, "the bit is spent and nobody holds 1");
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn the_count_stays_near_the_limit_under_inserts() {
        let c = Arc::new(MbCache::new(true));
        c.start().unwrap();
        let max = c.max_entries;
        for b in 0..(3 * max as u64) {
            c.insert((b * 2_654_435_761) as u32, b, true);
        }
        assert!(c.len() <= 2 * max + SYNC_SHRINK_BATCH, "{} entries for a limit of {max}", c.len());
        assert!(c.stats.reclaimed.load(Relaxed) > 0);
        c.stop();
    }

    #[test]
    fn a_disabled_cache_holds_nothing() {
        let c = MbCache::new(false);
        assert!(!c.insert(1, 1, true));
        assert!(c.find(1).is_empty());
        assert_eq!(c.len(), 0);
    }
}
