//! The dentry cache: (directory, name) → inode number and type, or "no such
//! name" (a negative entry), so a FUSE LOOKUP that hits needs no walk of the
//! directory's B+tree.
//!
//! Entries live in a sharded LRU (`lru`) under a byte budget
//! (`MountOptions::dentry_cache_bytes`); hits set the referenced bit, and
//! reclaim is second chance. A dentry pins nothing (it names an inode number,
//! it holds no in-core inode), so the isolate callback never skips.
//!
//! ## Keys
//! An entry's key is (directory inode number, a hash of the directory's
//! *generation* and the name); the name itself is kept in the entry and
//! compared on every hit. Two names whose hashes collide in one directory
//! share a slot: the later insert replaces the earlier, and a lookup of the
//! other is a miss, never a wrong answer. With the generation in the key, a
//! freed directory's entries can never answer for a new directory that
//! reuses its number (they age out of the LRU); they could not anyway (an
//! rmdir needs an empty directory, and each unlink in it replaced its
//! positive entry), but the key makes it hold by construction.
//!
//! ## Invariants
//! A cached entry says what the directory's B+tree says, for as long as it
//! is cached:
//! * a LOOKUP inserts what it read from the tree while still holding the
//!   directory's inode lock (shared), so no change can come between the
//!   read and the insert;
//! * every change of a directory's entries (create, mknod, mkdir, symlink,
//!   link, unlink, rmdir, both sides of rename and exchange) runs under the
//!   directory's exclusive inode lock, invalidates the names it touches
//!   *before* changing the tree, and inserts the new state only once the
//!   change succeeded — a failed operation leaves the names answering
//!   nothing, never stale. An invalidated entry keeps its slot, marked, so
//!   that the insert after the change rewrites it in place: a create turns
//!   its LOOKUP's negative entry positive, an unlink turns the positive one
//!   negative, with no free and no allocation. An unlink or rmdir of a name
//!   that had no entry makes none: a negative entry is made by a LOOKUP
//!   that found nothing, not by a removal (`rm -rf` of a tree would fill
//!   the cache with names nobody asks for);
//! * `.` and `..` are never cached (`..` is the inode's `parent` field).
//!
//! Nothing here is durable: the cache starts empty at mount. After the
//! journal aborts, lookups bypass it (`Fs::lookup`).
//!
//! ## Locking
//! Shard locks are leaves, taken under the directory's inode lock.

use crate::inode::InodeState;
use crate::lru::{Isolate, ShardedLru};
use std::hash::BuildHasher;

/// Estimated bytes of a dentry beyond its name: the name's heap block
/// header and rounding, the value, the list node and the map slot (a
/// `cargo test -p cairn-core dcache_entry_size` prints the parts).
pub const DENTRY_BASE_BYTES: usize = 160;

struct Dentry {
    name: Box<[u8]>,
    /// `None`: the name does not exist (negative entry).
    target: Option<(u64, u8)>,
    /// Invalidated: the name is being changed, and the entry answers
    /// nothing until the change's outcome is recorded in it.
    stale: bool,
}

/// What the cache knows about a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// The name is the inode (number, directory-entry type).
    Found(u64, u8),
    /// The name does not exist.
    Negative,
    /// Not cached.
    Miss,
}

/// The dentry cache (`None` inside: `-o lru_caches=0`, no cache).
pub struct DentryCache {
    lru: Option<ShardedLru<(u64, u64), Dentry>>,
    hasher: foldhash::quality::RandomState,
}

fn dentry_bytes(name: &[u8]) -> usize {
    DENTRY_BASE_BYTES + name.len().next_multiple_of(16)
}

impl DentryCache {
    /// A cache of `budget` bytes, or none.
    pub fn new(budget: Option<usize>) -> DentryCache {
        DentryCache {
            lru: budget.map(|b| ShardedLru::new(Some(b), DENTRY_BASE_BYTES + 16)),
            hasher: Default::default(),
        }
    }

    fn key(&self, dir: &InodeState, name: &[u8]) -> (u64, u64) {
        (dir.ino, self.hasher.hash_one((dir.d.generation, name)))
    }

    /// What the cache says about `name` in `dir` (the caller holds the
    /// directory's lock).
    pub fn lookup(&self, dir: &InodeState, name: &[u8]) -> Cached {
        let Some(lru) = &self.lru else { return Cached::Miss };
        let k = self.key(dir, name);
        let mut sh = lru.lock(&k);
        let r = match sh.get(&k) {
            Some(e) if !e.stale && *e.name == *name => match e.target {
                Some((ino, t)) => Cached::Found(ino, t),
                None => Cached::Negative,
            },
            _ => Cached::Miss,
        };
        match r {
            Cached::Found(..) => sh.hits += 1,
            Cached::Negative => {
                sh.hits += 1;
                sh.negative_hits += 1;
            }
            Cached::Miss => sh.misses += 1,
        }
        r
    }

    /// Records what the directory's tree says about `name` (the caller holds
    /// the directory's lock: shared after reading the tree, exclusive after
    /// changing it).
    pub fn insert(&self, dir: &InodeState, name: &[u8], target: Option<(u64, u8)>) {
        let Some(lru) = &self.lru else { return };
        let k = self.key(dir, name);
        let gone = {
            let mut sh = lru.lock(&k);
            // The name's own entry (a change's invalidated one, most often)
            // takes the news in place: no free, no allocation, no reclaim.
            if let Some(e) = sh.peek_mut(&k).filter(|e| *e.name == *name) {
                e.target = target;
                e.stale = false;
                return;
            }
            let e = Dentry { name: name.into(), target, stale: false };
            let mut gone: Vec<Dentry> = sh.insert(k, e, dentry_bytes(name)).into_iter().collect();
            gone.extend(lru.shrink(&mut sh, &mut |_, _| Isolate::Remove));
            gone
        };
        drop(gone);
    }

    /// Records that `name` is gone from `dir` (the caller holds the
    /// directory's lock exclusively, after removing it) in the name's own
    /// entry if it has one, invalidated or not; otherwise nothing is cached.
    pub fn record_gone(&self, dir: &InodeState, name: &[u8]) {
        let Some(lru) = &self.lru else { return };
        let k = self.key(dir, name);
        if let Some(e) = lru.lock(&k).peek_mut(&k).filter(|e| *e.name == *name) {
            e.target = None;
            e.stale = false;
        }
    }

    /// Forgets `name` in `dir` (the caller holds the directory's lock
    /// exclusively and is about to change the name). The entry stays in
    /// its slot, marked stale, answering nothing: the [`DentryCache::insert`]
    /// that records the change's outcome rewrites it in place, and one the
    /// change never comes back to ages out as any other.
    pub fn invalidate(&self, dir: &InodeState, name: &[u8]) {
        let Some(lru) = &self.lru else { return };
        let k = self.key(dir, name);
        if let Some(e) = lru.lock(&k).peek_mut(&k) {
            e.stale = true;
        }
    }

    /// Counters for `cairn stats`.
    pub fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        match &self.lru {
            Some(lru) => {
                lru.publish("dcache", put);
                put("dcache.negative_hits", lru.lookups().2);
            }
            None => put("dcache.entries", 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalidated_name_answers_nothing_until_its_change_is_recorded_in_place() {
        let cache = DentryCache::new(Some(1 << 20));
        let dir = InodeState::new(2, Default::default());
        cache.insert(&dir, b"a", None);
        assert_eq!(cache.lookup(&dir, b"a"), Cached::Negative);
        // A create: invalidated, then the outcome recorded.
        cache.invalidate(&dir, b"a");
        assert_eq!(cache.lookup(&dir, b"a"), Cached::Miss);
        cache.insert(&dir, b"a", Some((12, 1)));
        assert_eq!(cache.lookup(&dir, b"a"), Cached::Found(12, 1));
        let lru = cache.lru.as_ref().expect("a cache");
        assert_eq!(lru.totals().0, 1, "rewritten in its slot, not added");
        // A change that failed: nothing recorded, so nothing answered.
        cache.invalidate(&dir, b"a");
        assert_eq!(cache.lookup(&dir, b"a"), Cached::Miss);
        // A removal writes into the name's slot, and allocates none.
        cache.record_gone(&dir, b"a");
        assert_eq!(cache.lookup(&dir, b"a"), Cached::Negative);
        cache.record_gone(&dir, b"c");
        assert_eq!((cache.lookup(&dir, b"c"), lru.totals().0), (Cached::Miss, 1));
        cache.invalidate(&dir, b"a");
        // Another name is its own entry.
        cache.insert(&dir, b"b", Some((13, 1)));
        assert_eq!(cache.lookup(&dir, b"b"), Cached::Found(13, 1));
        assert_eq!(cache.lookup(&dir, b"a"), Cached::Miss);
    }

    /// Prints the parts of [`DENTRY_BASE_BYTES`] (run with `--nocapture`).
    #[test]
    fn dcache_entry_size() {
        let node = std::mem::size_of::<Option<((u64, u64), Dentry, u32, u32, u32, bool)>>();
        let slot = std::mem::size_of::<((u64, u64), u32)>() + 1;
        println!("list node {node}, map slot {slot}, name block header 16");
        // The map grows by doubling (up to 2x slack); the name's block has
        // a header.
        assert!(node + 2 * slot + 16 <= DENTRY_BASE_BYTES);
    }
}
