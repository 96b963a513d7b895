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
//! images it wrote; a commit starts one when the log is 7/8 full.
//!
//! ## Memory
//! A listed image is usually the cached buffer's own bytes (copy-on-write,
//! see `image`): the block has not changed since the push that captured it.
//! Such an image costs nothing beyond the buffer, and the buffer is then not
//! evicted (evicting it would free nothing), as XFS keeps a buffer in the
//! AIL in memory until it is written. What the AIL adds is the images no
//! buffer shares: a block changed again since its capture (until the next
//! push replaces the image), or one listed before the buffer left the cache.
//! Those are bounded by a budget, a quarter of the buffer cache's bytes; the
//! shared ones by the cache's own size. When either is exceeded at a commit
//! (an idle commit of the backend included), a *shrink* writes home the
//! images whose last change is oldest — unshared ones to free their blocks,
//! shared ones to let the cache evict their buffers — down to 3/4 of the
//! budget and 7/8 of the cache, and leaves the tail where it is (XFS's AIL
//! likewise pushes to a target, not to empty): blocks still being changed —
//! the directory leaves of a create storm — stay listed and go home once per
//! write-back, not once per shrink. Counting every listed image as a block,
//! as this list did before, sent 2.42 million blocks home during 5 million
//! creates instead of 1.66 million (see the README).
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
//! The list's mutex is held for inserts, lookups, and to take images out:
//! a write-back swaps the whole list out, a shrink removes the images it
//! chose. Taken images are *in flight* (a second, shared set) until written:
//! `lookup` looks there after the list, so a miss still finds them, and they
//! are freed only after the lock is released. Nothing done under the list's
//! lock touches an image (its reference count is a cache miss each): a miss
//! inside a transaction may be waiting for that lock while a commit waits
//! for the transaction (`ail.lock_hold_us_max`, 10–20 ms at 2 million files
//! before this, 3–6 ms after). The writes run under the journal's state lock
//! only (commits are serialised).

use super::image::{Image, ImageMeter};
use crate::dev::BlockDevice;
use crate::error::Result;
use crate::stats::Publish;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

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
    /// Longest time the list's mutex was held by a batch operation (insert,
    /// write-back or shrink collection, dropping written images), in µs: a
    /// buffer-cache miss inside a transaction waits this long at most.
    pub lock_hold_us_max: AtomicU64,
}

struct Entry {
    seq: u64,
    image: Image,
}

/// See the module essay.
pub struct Ail {
    map: Mutex<HashMap<u64, Entry>>,
    /// Images a write-back or shrink has taken out of `map` and is writing
    /// home: still found by `lookup` until their home write is done.
    flight: Mutex<Option<Arc<HashMap<u64, Entry>>>>,
    /// Bytes of the images listed (shared with a cached buffer or not).
    bytes: AtomicU64,
    /// Shrink once the images that no cached buffer shares hold this many
    /// bytes (see [`Ail::over_budget`]).
    budget: AtomicU64,
    /// The buffer cache's size: a buffer whose bytes an image here shares is
    /// not evicted, so past this the oldest shared images go home too.
    cache_capacity: AtomicU64,
    /// Every live image's bytes, and the cached buffers' (see `image`).
    pub meter: Arc<ImageMeter>,
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
            flight: Mutex::new(None),
            bytes: AtomicU64::new(0),
            budget: AtomicU64::new(budget),
            cache_capacity: AtomicU64::new(u64::MAX),
            meter: Arc::new(ImageMeter::default()),
            defer: AtomicBool::new(defer),
            home_lock: Arc::new(parking_lot::Mutex::new(())),
            stats: AilStats::default(),
        }
    }

    /// Sets the budget of unshared images, and the buffer cache's size
    /// (both in bytes).
    pub fn set_budget(&self, unshared: u64, cache: u64) {
        self.budget.store(unshared, Relaxed);
        self.cache_capacity.store(cache, Relaxed);
    }

    /// Images waiting for their home write.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// No image waits for its home write, in the list or in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.flight.lock().is_none()
    }

    /// Runs `f` on the locked list, timing how long the lock is held.
    fn with_map<R>(&self, f: impl FnOnce(&mut HashMap<u64, Entry>) -> R) -> R {
        let mut map = self.map.lock();
        let t0 = Instant::now();
        let r = f(&mut map);
        drop(map);
        self.stats.lock_hold_us_max.fetch_max(t0.elapsed().as_micros() as u64, Relaxed);
        r
    }

    /// True when the images no cached buffer shares exceed the memory
    /// budget, or the buffer cache its size. An image the AIL lists for a
    /// buffer that has not changed since is the buffer's own bytes and costs
    /// nothing more, but keeps the buffer cached; one whose buffer changed is
    /// a block of its own (see `image`). Captures and frozen copies count
    /// too, while they live.
    pub fn over_budget(&self) -> bool {
        let (unshared, cache) = self.excess();
        unshared > 0 || cache > 0
    }

    /// Bytes over the unshared budget, and bytes of cached buffers over the
    /// cache's size.
    fn excess(&self) -> (u64, u64) {
        let m = &self.meter;
        (
            m.unshared().saturating_sub(self.budget.load(Relaxed)),
            m.cached().saturating_sub(self.cache_capacity.load(Relaxed)),
        )
    }

    /// Adds the images of durable checkpoint `seq`.
    pub fn insert(&self, seq: u64, images: impl Iterator<Item = (u64, Image)>) {
        // Reference counts are taken, and replaced images freed, outside
        // the lock: each touches a cold allocation, and a cache miss inside
        // a transaction may be waiting for the lock.
        let images: Vec<(u64, u64, Image)> = images.map(|(blk, image)| (blk, image.len() as u64, image)).collect();
        self.stats.inserted.fetch_add(images.len() as u64, Relaxed);
        let replaced: Vec<Entry> = self.with_map(|map| {
            map.reserve(images.len());
            let mut replaced = Vec::new();
            for (blk, len, image) in images {
                match map.insert(blk, Entry { seq, image }) {
                    Some(old) => replaced.push(old),
                    None => {
                        self.bytes.fetch_add(len, Relaxed);
                    }
                }
            }
            replaced
        });
        self.stats.replaced.fetch_add(replaced.len() as u64, Relaxed);
        drop(replaced);
    }

    /// Whether a committed image of `blk` is not yet home (as `lookup`,
    /// without taking it or counting a served miss).
    pub fn holds(&self, blk: u64) -> bool {
        self.map.lock().contains_key(&blk) || self.flight.lock().as_ref().is_some_and(|f| f.contains_key(&blk))
    }

    /// The newest committed image of `blk` not yet home, if any.
    pub fn lookup(&self, blk: u64) -> Option<Image> {
        let mut r = self.map.lock().get(&blk).map(|e| e.image.clone());
        if r.is_none() {
            let flight = self.flight.lock().clone();
            r = flight.and_then(|f| f.get(&blk).map(|e| e.image.clone()));
        }
        if r.is_some() {
            self.stats.miss_hits.fetch_add(1, Relaxed);
        }
        r
    }

    /// Writes the oldest images (by the checkpoint that last changed them)
    /// home until what no buffer shares is at most three quarters of the
    /// budget and the cache's buffers at most seven eighths of its size, and
    /// drops them: frees memory without moving the log's tail. An image no
    /// buffer shares frees its block; one a buffer shares lets the cache
    /// evict that buffer. Hot blocks, relogged in every checkpoint, stay
    /// listed and go home once, at the next full write-back; blocks done
    /// changing (a full inode-table block) leave now. Needs no flush: the log
    /// still holds every record, so a crash replays over whatever reached
    /// home.
    pub fn shrink(&self, dev: &dyn BlockDevice, bs: usize) -> Result<()> {
        self.restore_flight();
        let bs64 = bs as u64;
        let budget = self.budget.load(Relaxed);
        let capacity = self.cache_capacity.load(Relaxed);
        let mut unshared = self.meter.unshared().saturating_sub(budget / 4 * 3);
        let mut cached = self.meter.cached().saturating_sub(capacity / 8 * 7);
        // Ages and sharing only, under the lock: that walks the table and
        // reads each image's reference count, never its bytes (every image
        // is a block long: a cache miss each).
        let mut by_age: Vec<(u64, u64, bool)> =
            self.with_map(|map| map.iter().map(|(b, e)| (e.seq, *b, Arc::strong_count(&e.image) > 1)).collect());
        by_age.sort_unstable();
        let mut chosen = Vec::new();
        for (_, blk, shared) in by_age {
            if unshared == 0 && cached == 0 {
                break;
            }
            let excess = if shared { &mut cached } else { &mut unshared };
            if *excess > 0 {
                *excess = excess.saturating_sub(bs64);
                chosen.push(blk);
            }
        }
        let mut taken: HashMap<u64, Entry> = HashMap::with_capacity(chosen.len());
        let taken = self.with_map(|map| {
            taken.extend(chosen.iter().filter_map(|b| map.remove_entry(b)));
            self.publish_flight(taken)
        });
        self.bytes.fetch_sub(taken.len() as u64 * bs64, Relaxed);
        self.write_flight(dev, bs, &taken)?;
        self.stats.shrinks.fetch_add(1, Relaxed);
        // Written (not flushed): the log still holds every record of these
        // blocks, and a miss now reads their bytes from home.
        self.home_written();
        Ok(())
    }

    /// Takes every image out of the list and writes it home, not flushed:
    /// the caller flushes, moves the tail, then calls
    /// [`Ail::home_written`]. Until then `lookup` still finds the images.
    /// The list's lock is held only to swap the list out.
    pub fn write_home(&self, dev: &dyn BlockDevice, bs: usize) -> Result<()> {
        self.restore_flight();
        let taken = self.with_map(|map| {
            self.bytes.store(0, Relaxed);
            self.publish_flight(std::mem::take(map))
        });
        self.write_flight(dev, bs, &taken)?;
        self.stats.write_backs.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Makes `taken` the set in flight. Called with the list locked, in the
    /// same critical section that took the images out of it: a lookup
    /// between the two would miss both and read a stale home block.
    fn publish_flight(&self, taken: HashMap<u64, Entry>) -> Arc<HashMap<u64, Entry>> {
        let taken = Arc::new(taken);
        *self.flight.lock() = Some(taken.clone());
        taken
    }

    /// Writes the images in flight home (sorted by block, runs coalesced).
    /// On an error they stay in flight, and the next write-back or shrink
    /// takes them back first.
    fn write_flight(&self, dev: &dyn BlockDevice, bs: usize, taken: &HashMap<u64, Entry>) -> Result<()> {
        let mut items: Vec<(u64, &Image)> = taken.iter().map(|(b, e)| (*b, &e.image)).collect();
        items.sort_unstable_by_key(|i| i.0);
        let mut i = 0;
        while i < items.len() {
            let mut j = i + 1;
            while j < items.len() && items[j].0 == items[j - 1].0 + 1 && j - i < 256 {
                j += 1;
            }
            if j - i == 1 {
                dev.write_at(items[i].1, items[i].0 * bs as u64)?;
            } else {
                let mut run = Vec::with_capacity((j - i) * bs);
                for (_, img) in &items[i..j] {
                    run.extend_from_slice(img);
                }
                dev.write_at(&run, items[i].0 * bs as u64)?;
            }
            i = j;
        }
        self.stats.blocks_written.fetch_add(items.len() as u64, Relaxed);
        Ok(())
    }

    /// The images in flight are home (durable, for a write-back): forgets
    /// them. They are freed here, outside every lock.
    pub fn home_written(&self) {
        let flight = self.flight.lock().take();
        drop(flight);
    }

    /// Puts images left in flight by a failed write back in the list,
    /// unless a newer image of the same block is there.
    fn restore_flight(&self) {
        if self.flight.lock().is_none() {
            return;
        }
        // Under the list's lock, so that a lookup finds the images in one
        // place or the other (this runs only after a failed home write).
        self.with_map(|map| {
            let Some(flight) = self.flight.lock().take() else { return };
            let flight = Arc::try_unwrap(flight).unwrap_or_else(|shared| {
                shared.iter().map(|(b, e)| (*b, Entry { seq: e.seq, image: e.image.clone() })).collect()
            });
            for (blk, e) in flight {
                if let std::collections::hash_map::Entry::Vacant(v) = map.entry(blk) {
                    self.bytes.fetch_add(e.image.len() as u64, Relaxed);
                    v.insert(e);
                }
            }
        });
    }
}

impl Publish for Ail {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("ail.images", self.len() as u64);
        put("ail.bytes", self.bytes.load(Relaxed));
        put("ail.unshared_bytes", self.meter.unshared());
        put("images.live_bytes", self.meter.live());
        put("ail.budget_bytes", self.budget.load(Relaxed));
        put("ail.inserted", s.inserted.load(Relaxed));
        put("ail.replaced_before_home", s.replaced.load(Relaxed));
        put("ail.write_backs", s.write_backs.load(Relaxed));
        put("ail.shrinks", s.shrinks.load(Relaxed));
        put("ail.blocks_written_home", s.blocks_written.load(Relaxed));
        put("ail.cache_misses_served", s.miss_hits.load(Relaxed));
        put("ail.lock_hold_us_max", s.lock_hold_us_max.load(Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use crate::journal::image::image_of;
    use crate::journal::image::ImageBytes;

    #[test]
    fn shrink_sends_the_oldest_unshared_images_home_and_keeps_the_newest_and_the_shared() {
        let bs = 1024;
        let dev = MemDevice::new(64 * bs as u64);
        let ail = Ail::new(4 * bs as u64, true);
        let img = |fill: u8| ImageBytes::new(vec![fill; bs].into(), &ail.meter);
        // Block 10 + i last changed in checkpoint i; block 11 is relogged in
        // checkpoint 9, so it is among the newest.
        for seq in 1..=8u64 {
            ail.insert(seq, std::iter::once((10 + seq, img(seq as u8))));
        }
        ail.insert(9, std::iter::once((11, img(99))));
        // Block 12's image is still a cached buffer's bytes: it costs nothing
        // more, and a shrink does not send it home however old it is.
        let cached = ail.lookup(12).unwrap();
        ail.meter.cache_in(bs);
        assert_eq!(ail.meter.unshared(), 7 * bs as u64);
        assert!(ail.over_budget());
        ail.shrink(&dev, bs).unwrap();
        // Down to three quarters of the budget: three unshared images stay,
        // the three newest (blocks 11, 18, 17), and the shared one.
        assert_eq!(ail.len(), 4);
        assert!(!ail.over_budget());
        for blk in [11u64, 12, 17, 18] {
            assert!(ail.lookup(blk).is_some(), "block {blk} is one of the newest or shared");
        }
        let mut b = vec![0u8; bs];
        for blk in 13..=16u64 {
            assert!(ail.lookup(blk).is_none());
            dev.read_at(&mut b, blk * bs as u64).unwrap();
            assert_eq!(b, vec![(blk - 10) as u8; bs], "block {blk} went home with its image");
        }
        for blk in [11u64, 12] {
            dev.read_at(&mut b, blk * bs as u64).unwrap();
            assert_eq!(b, vec![0; bs], "block {blk} is not home yet");
        }
        assert_eq!(ail.stats.shrinks.load(Relaxed), 1);
        assert_eq!(ail.stats.write_backs.load(Relaxed), 0);
        // The buffer leaves the cache: its image is now the AIL's alone.
        ail.meter.cache_out(bs);
        drop(cached);
        assert_eq!(ail.meter.unshared(), 4 * bs as u64);
    }

    #[test]
    fn a_failed_write_back_keeps_every_image_findable_and_retries_it() {
        let bs = 1024;
        let mem: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * bs as u64));
        let dev = crate::testdev::FaultDevice::new(mem);
        let ail = Ail::new(64 * bs as u64, true);
        for blk in 10..20u64 {
            ail.insert(1, std::iter::once((blk, image_of(&vec![blk as u8; bs]))));
        }
        dev.fail_writes(15 * bs as u64..16 * bs as u64);
        assert!(ail.write_home(&dev, bs).is_err());
        // In flight, not home: a miss must still find every image.
        for blk in 10..20u64 {
            assert_eq!(ail.lookup(blk).expect("still listed")[0], blk as u8);
        }
        assert!(!ail.is_empty());
        // A newer image inserted meanwhile wins over the one in flight.
        ail.insert(2, std::iter::once((12, image_of(&vec![99; bs]))));
        dev.heal();
        ail.write_home(&dev, bs).unwrap();
        ail.home_written();
        assert!(ail.is_empty());
        assert_eq!(ail.bytes.load(Relaxed), 0);
        let mut b = vec![0u8; bs];
        for blk in 10..20u64 {
            dev.read_at(&mut b, blk * bs as u64).unwrap();
            let want = if blk == 12 { 99 } else { blk as u8 };
            assert_eq!(b, vec![want; bs], "block {blk} is home with its newest image");
        }
    }
}
