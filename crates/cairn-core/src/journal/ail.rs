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
//! images it wrote; a commit starts one when the log is 7/8 full. When the
//! images outgrow their memory budget (a quarter of the buffer cache's
//! bytes) before that, a *shrink* writes home only the images whose last
//! change is oldest, down to 3/4 of the budget, and leaves the tail where it
//! is (XFS's AIL likewise pushes to a target, not to empty): blocks still
//! being changed — the directory leaves of a create storm — stay listed and
//! go home once per write-back, not once per shrink.
//!
//! ## Invariants
//! * Every record between the log's tail and head is either replayable or
//!   has all its blocks home; replay from the tail applies each record's
//!   changes over a home block holding that record's predecessor state or a
//!   later committed one, which converges on the newest committed state.
//! * A block's image leaves the list only after its home write is durable,
//!   or (a shrink) written while every record that changed it is still in
//!   the log: replay then rewrites its chunks over whatever reached home.
//!
//! ## Locking
//! The list's mutex is held for inserts, lookups and the swap at the start
//! of a write-back; the writes themselves run under the journal's state lock
//! only (commits are serialised), while misses still find the images.

use super::cil::Image;
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
    /// Partial write-backs: the oldest images home to bring the list back
    /// under its memory budget, the log's tail left where it is.
    pub shrinks: AtomicU64,
    pub blocks_written: AtomicU64,
    pub miss_hits: AtomicU64,
}

struct Entry {
    seq: u64,
    image: Image,
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

    /// True when the images exceed their memory budget.
    pub fn over_budget(&self) -> bool {
        self.bytes.load(Relaxed) > self.budget.load(Relaxed)
    }

    /// Adds the images of durable checkpoint `seq`.
    pub fn insert(&self, seq: u64, images: impl Iterator<Item = (u64, Image)>) {
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
    pub fn lookup(&self, blk: u64) -> Option<Image> {
        let r = self.map.lock().get(&blk).map(|e| e.image.clone());
        if r.is_some() {
            self.stats.miss_hits.fetch_add(1, Relaxed);
        }
        r
    }

    /// Writes the oldest images (by the checkpoint that last changed them)
    /// home until the rest hold at most three quarters of the budget, and
    /// drops them: frees memory without moving the log's tail. Hot blocks,
    /// relogged in every checkpoint, stay listed and go home once, at the
    /// next full write-back; blocks done changing (a full inode-table block)
    /// leave now. Needs no flush: the log still holds every record, so a
    /// crash replays over whatever reached home.
    pub fn shrink(&self, dev: &dyn BlockDevice, bs: usize) -> Result<()> {
        let target = self.budget.load(Relaxed) / 4 * 3;
        let mut by_age: Vec<(u64, u64, Image)> =
            self.map.lock().iter().map(|(b, e)| (e.seq, *b, e.image.clone())).collect();
        by_age.sort_unstable_by_key(|i| (i.0, i.1));
        let mut bytes = self.bytes.load(Relaxed);
        let mut items = Vec::new();
        for (seq, blk, image) in by_age {
            if bytes <= target {
                break;
            }
            bytes -= image.len() as u64;
            items.push((blk, seq, image));
        }
        items.sort_unstable_by_key(|i| i.0);
        let done = self.write_items(dev, bs, items)?;
        self.stats.shrinks.fetch_add(1, Relaxed);
        self.written(&done);
        Ok(())
    }

    /// Writes every image home (not flushed: the caller flushes before it
    /// moves the tail, then calls [`Ail::written`]). Returns the images
    /// written, to pass to `written`.
    pub fn write_home(&self, dev: &dyn BlockDevice, bs: usize) -> Result<Vec<(u64, u64)>> {
        let mut items: Vec<(u64, u64, Image)> =
            self.map.lock().iter().map(|(b, e)| (*b, e.seq, e.image.clone())).collect();
        items.sort_unstable_by_key(|i| i.0);
        let done = self.write_items(dev, bs, items)?;
        self.stats.write_backs.fetch_add(1, Relaxed);
        Ok(done)
    }

    /// Writes `items` (sorted by block) home, coalescing runs.
    fn write_items(&self, dev: &dyn BlockDevice, bs: usize, items: Vec<(u64, u64, Image)>) -> Result<Vec<(u64, u64)>> {
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
        put("ail.shrinks", s.shrinks.load(Relaxed));
        put("ail.blocks_written_home", s.blocks_written.load(Relaxed));
        put("ail.cache_misses_served", s.miss_hits.load(Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use crate::journal::cil::image_of;

    #[test]
    fn shrink_sends_the_oldest_images_home_and_keeps_the_newest() {
        let bs = 1024;
        let dev = MemDevice::new(64 * bs as u64);
        let ail = Ail::new(4 * bs as u64, true);
        // Block 10 + i last changed in checkpoint i; block 10 is relogged in
        // checkpoint 9, so it is among the newest.
        for seq in 1..=8u64 {
            ail.insert(seq, std::iter::once((10 + seq, image_of(&vec![seq as u8; bs]))));
        }
        ail.insert(9, std::iter::once((11, image_of(&vec![99; bs]))));
        assert!(ail.over_budget());
        ail.shrink(&dev, bs).unwrap();
        // Down to three quarters of the budget: three images stay, the
        // three newest (blocks 11, 18, 17).
        assert_eq!(ail.len(), 3);
        assert!(!ail.over_budget());
        for blk in [11u64, 17, 18] {
            assert!(ail.lookup(blk).is_some(), "block {blk} is one of the newest");
        }
        let mut b = vec![0u8; bs];
        for blk in 12..=16u64 {
            assert!(ail.lookup(blk).is_none());
            dev.read_at(&mut b, blk * bs as u64).unwrap();
            assert_eq!(b, vec![(blk - 10) as u8; bs], "block {blk} went home with its image");
        }
        dev.read_at(&mut b, 11 * bs as u64).unwrap();
        assert_eq!(b, vec![0; bs], "block 11, relogged lately, is not home yet");
        assert_eq!(ail.stats.shrinks.load(Relaxed), 1);
        assert_eq!(ail.stats.write_backs.load(Relaxed), 0);
    }
}
