//! A sharded LRU list with second-chance reclaim: the `list_lru` of the
//! in-core inode cache (`inode`) and the dentry cache (`dcache`).
//!
//! Linux keeps reclaimable inodes and dentries on a `list_lru`: one
//! {lock, list, count} per NUMA node, so adding, removing and walking touch
//! one node's lock only, and a shrinker walks a list calling an *isolate*
//! callback per item that says remove, rotate, skip or stop (here: remove
//! or skip; the walk itself rotates referenced entries). This is the
//! same, with the node replaced by a shard chosen from the key's hash (a
//! user-space cache has no node affinity to follow, and a lookup must find
//! its key without looking anywhere else).
//!
//! ## Structure
//! Each [`Shard`] (cache-line aligned, behind its own mutex) holds a hash map
//! from key to slot and a doubly linked list through a slab of slots, oldest
//! first, with its entry count and byte estimate. Nothing is shared between
//! shards but relaxed counters: there is no global lock, and no global list.
//! Keys are integers (inode numbers, or a directory and the keyed SipHash of
//! a name, see `dcache`), so the maps and the shard choice use foldhash, seeded
//! per process: SipHash here cost 13% of a cold walk through the engine at 5
//! million files (`bench/run fsmark-scale --profile`), and foldhash made the
//! walk 1.26x faster at 1 million.
//!
//! ## Second chance
//! A hit sets the entry's *referenced* bit and does not move it (moving it
//! would write the list on every lookup). When a shard's byte estimate is
//! above its share of the budget ([`ShardedLru::shrink`]), the walk starts at
//! the oldest entry: a referenced one has its bit cleared and goes to the
//! tail (*rotated*); otherwise the owner's isolate callback decides: remove
//! it (*reclaimed*), or skip it — busy or dirty, it must stay. A skipped
//! entry also goes to the tail (the kernel's inode LRU takes busy inodes off
//! the list instead), so a run of pinned entries is not walked again on every
//! insert. Each shrink walks at most twice the shard's entries, so it ends
//! even when everything is pinned: the cache is then over budget, by exactly
//! the pinned entries, until they are released.
//!
//! ## Budget
//! Each shard gets `budget / shards` bytes. The shard count is a power of two
//! chosen so that each shard has room for a few dozen entries (64 at most),
//! so tiny budgets in tests still reclaim evenly. Sizes are estimates given
//! by the owner at insert: what the entry's allocations cost, the map slot
//! and list node included.
//!
//! ## Locking
//! Shard mutexes are leaves: nothing else is locked while one is held except
//! what the isolate callback takes, which must only *try* locks. A failed
//! `try_lock` on a shard counts one *lock wait* for it (the contention
//! counter `cairn stats` shows) before blocking.

use parking_lot::{Mutex, MutexGuard};
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const NIL: u32 = u32::MAX;

/// Most shards a cache has.
pub const MAX_SHARDS: usize = 64;

/// What the owner's isolate callback says about an unreferenced entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolate {
    /// Reclaim it.
    Remove,
    /// Busy or dirty: keep it (it goes to the tail).
    Skip,
}

struct Node<K, V> {
    key: K,
    val: V,
    prev: u32,
    next: u32,
    bytes: u32,
    referenced: bool,
}

/// One shard: its map, its list (oldest first), count and bytes.
pub struct Shard<K, V> {
    map: foldhash::HashMap<K, u32>,
    slots: Vec<Option<Node<K, V>>>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    bytes: usize,
    /// For the owner: bumped by it whenever an entry leaves (see `inode`).
    pub epoch: u64,
    /// The owner's lookups in this shard that hit, missed, and hit a
    /// negative entry (dentry cache): counted under the shard's lock, so
    /// no counter's cache line is shared between threads.
    pub hits: u64,
    pub misses: u64,
    pub negative_hits: u64,
}

impl<K: Copy + Eq + Hash, V> Shard<K, V> {
    fn new() -> Self {
        Shard {
            map: Default::default(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            epoch: 0,
            hits: 0,
            misses: 0,
            negative_hits: 0,
        }
    }

    fn node(&self, i: u32) -> &Node<K, V> {
        self.slots[i as usize].as_ref().expect("linked slot is in use")
    }

    fn node_mut(&mut self, i: u32) -> &mut Node<K, V> {
        self.slots[i as usize].as_mut().expect("linked slot is in use")
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let n = self.node(i);
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
    }

    fn push_tail(&mut self, i: u32) {
        let tail = self.tail;
        {
            let n = self.node_mut(i);
            n.prev = tail;
            n.next = NIL;
        }
        if tail == NIL {
            self.head = i;
        } else {
            self.node_mut(tail).next = i;
        }
        self.tail = i;
    }

    /// Entries in the shard.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The shard's byte estimate.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The value of `k`, marking it referenced.
    pub fn get(&mut self, k: &K) -> Option<&V> {
        let i = *self.map.get(k)?;
        let n = self.node_mut(i);
        n.referenced = true;
        Some(&n.val)
    }

    /// The value of `k`, leaving its referenced bit alone.
    pub fn peek(&self, k: &K) -> Option<&V> {
        self.map.get(k).map(|&i| &self.node(i).val)
    }

    /// The value of `k` to change in place, leaving its referenced bit and
    /// its place in the list alone.
    pub fn peek_mut(&mut self, k: &K) -> Option<&mut V> {
        let i = *self.map.get(k)?;
        Some(&mut self.node_mut(i).val)
    }

    /// Inserts (or replaces) `k` at the tail, costing `bytes`; returns the
    /// value it replaced.
    pub fn insert(&mut self, k: K, v: V, bytes: usize) -> Option<V> {
        let old = self.remove(&k);
        let node = Node {
            key: k,
            val: v,
            prev: NIL,
            next: NIL,
            bytes: bytes.min(u32::MAX as usize) as u32,
            referenced: false,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(node);
                i
            }
            None => {
                self.slots.push(Some(node));
                (self.slots.len() - 1) as u32
            }
        };
        self.push_tail(i);
        self.map.insert(k, i);
        self.bytes += bytes;
        old
    }

    /// Removes `k`; returns its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let i = self.map.remove(k)?;
        self.unlink(i);
        let n = self.slots[i as usize].take().expect("mapped slot is in use");
        self.bytes -= n.bytes as usize;
        self.free.push(i);
        if self.map.is_empty() {
            // Give the slab back once the shard empties.
            self.slots = Vec::new();
            self.free = Vec::new();
        }
        Some(n.val)
    }

    /// Walks at most `nr` entries from the oldest (see the module essay)
    /// until the shard holds at most `limit` bytes, moving removed values to
    /// `out`.
    fn walk(
        &mut self,
        nr: usize,
        limit: usize,
        isolate: &mut dyn FnMut(&K, &V) -> Isolate,
        out: &mut Vec<V>,
        st: &LruStats,
    ) {
        let mut cur = self.head;
        for _ in 0..nr {
            if cur == NIL || self.bytes <= limit {
                break;
            }
            let next = self.node(cur).next;
            if self.node(cur).referenced {
                self.node_mut(cur).referenced = false;
                self.unlink(cur);
                self.push_tail(cur);
                st.rotated.fetch_add(1, Relaxed);
            } else {
                let verdict = {
                    let n = self.node(cur);
                    isolate(&n.key, &n.val)
                };
                match verdict {
                    Isolate::Remove => {
                        let k = self.node(cur).key;
                        out.extend(self.remove(&k));
                        st.reclaimed.fetch_add(1, Relaxed);
                    }
                    Isolate::Skip => {
                        self.unlink(cur);
                        self.push_tail(cur);
                        st.skipped.fetch_add(1, Relaxed);
                    }
                }
            }
            // A rotated or skipped tail has no next: the walk went round.
            cur = if next == NIL { self.head } else { next };
        }
    }
}

/// Counters of one cache (see `cairn stats`; hits and misses are kept in
/// the shards).
#[derive(Default)]
pub struct LruStats {
    pub reclaimed: AtomicU64,
    pub rotated: AtomicU64,
    pub skipped: AtomicU64,
}

#[repr(align(64))]
struct Padded<K, V> {
    shard: Mutex<Shard<K, V>>,
    lock_waits: AtomicU64,
}

/// The sharded LRU: shards chosen by key hash, each its own lock.
pub struct ShardedLru<K, V> {
    shards: Box<[Padded<K, V>]>,
    hasher: foldhash::fast::RandomState,
    /// Byte budget of each shard (`usize::MAX`: unbounded).
    shard_limit: usize,
    budget: usize,
    pub stats: LruStats,
}

impl<K: Copy + Eq + Hash, V> ShardedLru<K, V> {
    /// A cache of `budget` bytes (`None`: unbounded) whose entries cost
    /// about `typical` bytes.
    pub fn new(budget: Option<usize>, typical: usize) -> Self {
        let n = match budget {
            // Room for at least 32 typical entries per shard.
            Some(b) => (b / (typical.max(1) * 32)).clamp(1, MAX_SHARDS).next_power_of_two().min(MAX_SHARDS),
            None => MAX_SHARDS,
        };
        // `next_power_of_two` may round up past the room: halve back.
        let n = match budget {
            Some(b) if n > 1 && b / n < typical * 32 => n / 2,
            _ => n,
        };
        ShardedLru {
            shards: (0..n).map(|_| Padded { shard: Mutex::new(Shard::new()), lock_waits: AtomicU64::new(0) }).collect(),
            hasher: Default::default(),
            shard_limit: budget.map_or(usize::MAX, |b| b / n),
            budget: budget.unwrap_or(usize::MAX),
            stats: LruStats::default(),
        }
    }

    fn index(&self, k: &K) -> usize {
        (self.hasher.hash_one(k) as usize) & (self.shards.len() - 1)
    }

    /// Locks the shard of `k`, counting a lock wait if it is contended.
    pub fn lock(&self, k: &K) -> MutexGuard<'_, Shard<K, V>> {
        let p = &self.shards[self.index(k)];
        if let Some(g) = p.shard.try_lock() {
            return g;
        }
        p.lock_waits.fetch_add(1, Relaxed);
        p.shard.lock()
    }

    /// Whether the cache has a byte budget.
    pub fn bounded(&self) -> bool {
        self.shard_limit != usize::MAX
    }

    /// Number of shards.
    #[cfg(test)]
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Reclaims from `sh` while it is over its share of the budget; returns
    /// the removed values, to be dropped after the shard's lock.
    pub fn shrink(&self, sh: &mut Shard<K, V>, isolate: &mut dyn FnMut(&K, &V) -> Isolate) -> Vec<V> {
        let mut out = Vec::new();
        if sh.bytes <= self.shard_limit {
            return out;
        }
        sh.walk(2 * sh.len(), self.shard_limit, isolate, &mut out, &self.stats);
        out
    }

    /// Calls `f` on every shard in turn (statistics, invalidation).
    pub fn for_each_shard(&self, mut f: impl FnMut(&mut Shard<K, V>)) {
        for p in self.shards.iter() {
            f(&mut p.shard.lock());
        }
    }

    /// Entries and bytes of all shards.
    pub fn totals(&self) -> (usize, usize) {
        let (mut n, mut b) = (0, 0);
        self.for_each_shard(|s| {
            n += s.len();
            b += s.bytes();
        });
        (n, b)
    }

    /// Lookups over all shards: hits, misses, negative hits.
    pub fn lookups(&self) -> (u64, u64, u64) {
        let (mut h, mut m, mut n) = (0, 0, 0);
        self.for_each_shard(|s| {
            h += s.hits;
            m += s.misses;
            n += s.negative_hits;
        });
        (h, m, n)
    }

    /// Lock waits: the total, and the largest of one shard.
    pub fn lock_waits(&self) -> (u64, u64) {
        let w = self.shards.iter().map(|p| p.lock_waits.load(Relaxed));
        w.fold((0, 0), |(t, m), x| (t + x, m.max(x)))
    }

    /// Publishes the counters under `prefix` (`icache`, `dcache`).
    pub fn publish(&self, prefix: &str, put: &mut dyn FnMut(&str, u64)) {
        let (n, b) = self.totals();
        let (waits, max) = self.lock_waits();
        let s = &self.stats;
        put(&format!("{prefix}.entries"), n as u64);
        put(&format!("{prefix}.bytes"), b as u64);
        put(&format!("{prefix}.budget_bytes"), if self.bounded() { self.budget as u64 } else { 0 });
        put(&format!("{prefix}.shards"), self.shards.len() as u64);
        let (hits, misses, _) = self.lookups();
        put(&format!("{prefix}.hits"), hits);
        put(&format!("{prefix}.misses"), misses);
        put(&format!("{prefix}.reclaimed"), s.reclaimed.load(Relaxed));
        put(&format!("{prefix}.rotated"), s.rotated.load(Relaxed));
        put(&format!("{prefix}.skipped"), s.skipped.load(Relaxed));
        put(&format!("{prefix}.lock_waits"), waits);
        put(&format!("{prefix}.lock_waits_max_shard"), max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(sh: &Shard<u64, u64>) -> Vec<u64> {
        let mut v = Vec::new();
        let mut i = sh.head;
        while i != NIL {
            v.push(sh.node(i).key);
            i = sh.node(i).next;
        }
        v
    }

    #[test]
    fn insert_get_remove_keep_list_and_map_in_step() {
        let lru: ShardedLru<u64, u64> = ShardedLru::new(None, 10);
        let mut sh = lru.lock(&0);
        for k in 0..10 {
            sh.insert(k, k * 10, 10);
        }
        assert_eq!(sh.len(), 10);
        assert_eq!(sh.bytes(), 100);
        assert_eq!(sh.get(&3), Some(&30));
        assert_eq!(sh.remove(&0), Some(0));
        assert_eq!(sh.remove(&9), Some(90));
        assert_eq!(sh.remove(&5), Some(50));
        assert_eq!(keys(&sh), vec![1, 2, 3, 4, 6, 7, 8]);
        assert_eq!(sh.insert(4, 44, 10), Some(40));
        assert_eq!(keys(&sh), vec![1, 2, 3, 6, 7, 8, 4]);
        assert_eq!(sh.bytes(), 70);
        for k in [1, 2, 3, 6, 7, 8, 4] {
            sh.remove(&k);
        }
        assert_eq!(sh.len(), 0);
        assert_eq!((sh.head, sh.tail, sh.bytes()), (NIL, NIL, 0));
    }

    #[test]
    fn shrink_rotates_referenced_skips_busy_and_reclaims_the_rest() {
        // One shard of 50 bytes: five entries of 10.
        let lru: ShardedLru<u64, u64> = ShardedLru::new(Some(50), 100);
        assert_eq!(lru.shard_count(), 1);
        let mut sh = lru.lock(&0);
        for k in 0..8 {
            sh.insert(k, k, 10);
        }
        sh.get(&0);
        sh.get(&1);
        // 2 is busy.
        let out = lru.shrink(&mut sh, &mut |k, _| if *k == 2 { Isolate::Skip } else { Isolate::Remove });
        assert_eq!(out, vec![3, 4, 5]);
        assert_eq!(sh.bytes(), 50);
        assert_eq!(keys(&sh), vec![6, 7, 0, 1, 2]);
        assert_eq!(lru.stats.rotated.load(Relaxed), 2);
        assert_eq!(lru.stats.reclaimed.load(Relaxed), 3);
        assert_eq!(lru.stats.skipped.load(Relaxed), 1);
    }

    #[test]
    fn shrink_ends_when_everything_is_pinned() {
        let lru: ShardedLru<u64, u64> = ShardedLru::new(Some(10), 100);
        let mut sh = lru.lock(&0);
        for k in 0..100 {
            sh.insert(k, k, 10);
            sh.get(&k);
        }
        assert!(lru.shrink(&mut sh, &mut |_, _| Isolate::Skip).is_empty());
        assert_eq!(sh.len(), 100);
    }

    #[test]
    fn shards_leave_room_for_entries() {
        assert_eq!(ShardedLru::<u64, u64>::new(Some(100 * 400), 400).shard_count(), 2);
        assert_eq!(ShardedLru::<u64, u64>::new(Some(1 << 30), 400).shard_count(), MAX_SHARDS);
        assert_eq!(ShardedLru::<u64, u64>::new(Some(1), 400).shard_count(), 1);
        assert_eq!(ShardedLru::<u64, u64>::new(None, 400).shard_count(), MAX_SHARDS);
    }
}
