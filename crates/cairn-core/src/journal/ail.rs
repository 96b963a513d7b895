//! Deferred home writes: the active item list (XFS's AIL).
//!
//! ## Purpose
//! A committed checkpoint's blocks need not go home at once: the log holds
//! them. Writing them home only when the log needs the room (or memory, a
//! sync or unmount asks) lets a block changed in many checkpoints — a
//! directory leaf, an inode-table block filling up, a bitmap — reach its home
//! once instead of once per checkpoint. This is what keeps XFS's metadata
//! write-back small in the seed's create benchmark.
//!
//! ## How
//! After a checkpoint's commit block is durable, its captured images enter
//! the list, keyed by block: a newer image of a block replaces the older one
//! (it contains every earlier change). A cache miss looks here before it
//! reads the home block (`BufferCache::get`), so a buffer whose newest
//! committed bytes are not home yet may still be evicted. A *write-back*
//! writes every listed image home (sorted, coalesced), flushes, and only
//! then moves the log's tail past every record written so far and drops the
//! images it wrote.
//!
//! ## Invariants
//! * Every record between the log's tail and head is either replayable or
//!   has all its blocks home; replay from the tail applies each record's
//!   changes over a home block holding that record's predecessor state or a
//!   later committed one, which converges on the newest committed state.
//! * A block's image leaves the list only after its home write is durable.
//!
//! ## Locking
//! The list's mutex is held for inserts, lookups and the swap at the start
//! of a write-back; the writes themselves run under the journal's state lock
//! only (commits are serialised), while misses still find the images.

use crate::dev::BlockDevice;
use crate::error::Result;
use crate::stats::Publish;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// Counters.
#[derive(Default)]
pub struct AilStats {
    pub inserted: AtomicU64,
    /// Images replaced by a newer one before they went home (home writes
    /// saved).
    pub replaced: AtomicU64,
    pub write_backs: AtomicU64,
    pub blocks_written: AtomicU64,
    pub miss_hits: AtomicU64,
}

struct Entry {
    seq: u64,
    image: Arc<[u8]>,
}

/// See the module essay.
pub struct Ail {
    map: Mutex<HashMap<u64, Entry>>,
    bytes: AtomicU64,
    /// Write back once the images hold this many bytes.
    budget: AtomicU64,
    /// Home writes deferred at all (`-o delaylog=0` turns them off: every
    /// commit writes its blocks home, as before delayed logging).
    pub defer: AtomicBool,
    /// Held across a write-back (home writes, flush, tail move) and by the
    /// error latch's in-place superblock write (see `latch`).
    pub home_lock: Arc<parking_lot::Mutex<()>>,
    pub stats: AilStats,
}

impl Ail {
    pub fn new(budget: u64, defer: bool) -> Ail {
        Ail {
            map: Mutex::new(HashMap::new()),
            bytes: AtomicU64::new(0),
            budget: AtomicU64::new(budget),
            defer: AtomicBool::new(defer),
            home_lock: Arc::new(parking_lot::Mutex::new(())),
            stats: AilStats::default(),
        }
    }

    pub fn set_budget(&self, bytes: u64) {
        self.budget.store(bytes, Relaxed);
    }

    /// Images waiting for their home write.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the images exceed the budget (or deferring is off).
    pub fn over_budget(&self) -> bool {
        !self.defer.load(Relaxed) || self.bytes.load(Relaxed) > self.budget.load(Relaxed)
    }

    /// Adds the images of durable checkpoint `seq`.
    pub fn insert(&self, seq: u64, images: impl Iterator<Item = (u64, Arc<[u8]>)>) {
        let mut map = self.map.lock();
        for (blk, image) in images {
            let len = image.len() as u64;
            self.stats.inserted.fetch_add(1, Relaxed);
            match map.insert(blk, Entry { seq, image }) {
                Some(_) => {
                    self.stats.replaced.fetch_add(1, Relaxed);
                }
                None => {
                    self.bytes.fetch_add(len, Relaxed);
                }
            }
        }
    }

    /// The newest committed image of `blk` not yet home, if any.
    pub fn lookup(&self, blk: u64) -> Option<Arc<[u8]>> {
        let r = self.map.lock().get(&blk).map(|e| e.image.clone());
        if r.is_some() {
            self.stats.miss_hits.fetch_add(1, Relaxed);
        }
        r
    }

    /// Writes every image home (not flushed: the caller flushes before it
    /// moves the tail, then calls [`Ail::written`]). Returns the images
    /// written, to pass to `written`.
    pub fn write_home(&self, dev: &dyn BlockDevice, bs: usize) -> Result<Vec<(u64, u64)>> {
        let mut items: Vec<(u64, u64, Arc<[u8]>)> =
            self.map.lock().iter().map(|(b, e)| (*b, e.seq, e.image.clone())).collect();
        items.sort_unstable_by_key(|i| i.0);
        let mut i = 0;
        while i < items.len() {
            let mut j = i + 1;
            while j < items.len() && items[j].0 == items[j - 1].0 + 1 && j - i < 256 {
                j += 1;
            }
            if j - i == 1 {
                dev.write_at(&items[i].2, items[i].0 * bs as u64)?;
            } else {
                let mut run = Vec::with_capacity((j - i) * bs);
                for (_, _, img) in &items[i..j] {
                    run.extend_from_slice(img);
                }
                dev.write_at(&run, items[i].0 * bs as u64)?;
            }
            i = j;
        }
        self.stats.write_backs.fetch_add(1, Relaxed);
        self.stats.blocks_written.fetch_add(items.len() as u64, Relaxed);
        Ok(items.into_iter().map(|(b, s, _)| (b, s)).collect())
    }

    /// The images `done` are durable at home: drops each unless a newer one
    /// replaced it meanwhile.
    pub fn written(&self, done: &[(u64, u64)]) {
        let mut map = self.map.lock();
        for (blk, seq) in done {
            if map.get(blk).is_some_and(|e| e.seq == *seq) {
                if let Some(e) = map.remove(blk) {
                    self.bytes.fetch_sub(e.image.len() as u64, Relaxed);
                }
            }
        }
    }
}

impl Publish for Ail {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("ail.images", self.len() as u64);
        put("ail.bytes", self.bytes.load(Relaxed));
        put("ail.budget_bytes", self.budget.load(Relaxed));
        put("ail.inserted", s.inserted.load(Relaxed));
        put("ail.replaced_before_home", s.replaced.load(Relaxed));
        put("ail.write_backs", s.write_backs.load(Relaxed));
        put("ail.blocks_written_home", s.blocks_written.load(Relaxed));
        put("ail.cache_misses_served", s.miss_hits.load(Relaxed));
    }
}
