//! Readahead of neighbouring metadata blocks: one device read for a run of
//! blocks that are about to be wanted, instead of one read each.
//!
//! ## Why
//! A cold walk (`find` after a mount) loads every inode it meets, and inodes
//! made one after another sit side by side in their group's inode table
//! (the "next inode number" allocator, `alloc::inodes`). Read one table
//! block at a time, that is a `pread` per 16 inodes: measured through FUSE
//! over a loop device, 8,655 reads of 50 µs each for 100,000 files, about
//! half of the walk's time inside cairn. ext4 reads ahead in the inode
//! table for the same reason (`inode_readahead_blks`, 32 blocks by
//! default, `__ext4_get_inode_loc`); so does this, under the same name and
//! default (`-o inode_readahead_blks=N`, 0 turns it off).
//!
//! A READDIRPLUS knows the inodes it is about to load: `Meta::prefetch_inodes`
//! reads the batch's table blocks first, nearby ones together (always, with
//! inode readahead on; bench/results/2026-11-29-floor-listings). Without it, the batch's first inode
//! (in hash order, so anywhere in the directory's part of the table) reads
//! the window after it, and the inodes before it miss again.
//!
//! ## What is read
//! On a miss of block `blk`, [`BufferCache::get_ahead`] reads `blk` and the
//! blocks after it, up to the caller's end (the window, bounded by the end
//! of the group's inode table), in one device read. A block in the window
//! that is cached, or that the AIL holds a committed image of (whose home
//! bytes may be older), is read through and not installed: only blocks
//! whose home bytes are their newest are cached. One more device read
//! costs far more than a few blocks more in the read (with two walkers in
//! one table, cached blocks lie everywhere; stopping at them split 32-block
//! windows into runs of 9 on average). The run ends at its last block to
//! install. Each block after `blk` is verified by the caller's
//! verifier; one that fails is simply not cached (a later `get` reports
//! it). A failed device read of the run falls back to reading `blk`
//! alone: a bad block ahead must not make a good one unreadable.
//!
//! ## How far ahead: the window adapts
//! Readahead pays only while the blocks it brings stay cached until they
//! are asked for. With a cache far smaller than the table being walked
//! (`-o cache_mb=4`, two walkers in hash order), they do not: 30,000 files
//! walked read 496,000 blocks ahead of which 12,000 were used, and the walk
//! took 2.2 times as long as with readahead off. So the cache keeps one
//! window for all readers ([`Window`]), which every run is clipped to: a
//! block read ahead and evicted unused shrinks it by a sixteenth (at least
//! one block), a block read ahead and used grows it by one. It settles
//! where about sixteen blocks are used for each one wasted per block of
//! window, and it never goes below [`MIN_WINDOW`], so the feedback goes on
//! when the walk turns sequential again (a run whose blocks are all used
//! about doubles it). With a cache that holds the walk, nothing is evicted
//! unused and the caller's window (`inode_readahead_blks`, the leaf and
//! inode runs of a scan) is the limit.
//!
//! ## Invariants
//! The same as a plain miss (`get`): a block's shard epoch is taken before
//! the AIL is asked and before the device read, and the block is installed
//! only if the epoch has not moved and nobody cached it meanwhile. So a read
//! that a buffer's later home write overtook is dropped, never installed.
//! For a block ahead, dropping is always allowed: it only costs the read.
//!
//! ## Counters
//! `cache.readahead_reads` (device reads that brought more than one block),
//! `cache.readahead_blocks` (blocks cached ahead of need) and
//! `cache.readahead_used` (of those, the ones later asked for): the last
//! two say how much of the window was wasted; `cache.readahead_wasted`
//! (blocks read ahead and evicted unused); `cache.readahead_window` (the
//! adaptive window now, blocks); `cache.readahead_through` (blocks read
//! through, not installed: cached or held by the AIL).

use super::{Buf, BufferCache};
use crate::error::Result;
use crate::journal::image::ImageBytes;
use std::cell::RefCell;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The adaptive window's bounds, in blocks (see "How far ahead" above):
/// the largest is above every caller's window, the smallest keeps one
/// block ahead per read so that use can grow it again.
pub const MAX_WINDOW: u64 = 1024;
pub const MIN_WINDOW: u64 = 2;

/// How many blocks one readahead run may span now (shared by all readers).
pub struct Window(AtomicU64);

impl Default for Window {
    fn default() -> Window {
        Window(AtomicU64::new(MAX_WINDOW))
    }
}

impl Window {
    /// The window now, in blocks.
    pub fn blocks(&self) -> u64 {
        self.0.load(Relaxed)
    }

    /// A block read ahead was asked for.
    fn used(&self) {
        if self.blocks() < MAX_WINDOW {
            let _ = self.0.fetch_update(Relaxed, Relaxed, |w| Some((w + 1).min(MAX_WINDOW)));
        }
    }

    /// A block read ahead was evicted before anyone asked for it.
    pub(super) fn wasted(&self) {
        let _ = self.0.fetch_update(Relaxed, Relaxed, |w| Some(w.saturating_sub((w / 16).max(1)).max(MIN_WINDOW)));
    }
}

/// Whether someone asked for the first block of a readahead run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    /// A read wants it ([`BufferCache::get_ahead`]).
    Now,
    /// Nobody yet ([`BufferCache::prefetch`]).
    NotYet,
}

thread_local! {
    /// The bytes of one readahead run, reused across reads.
    static RUN: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl BufferCache {
    /// Returns block `blk` as [`BufferCache::get`] does; on a miss, also
    /// caches the blocks from `blk + 1` up to `end` (exclusive) that one
    /// read can bring (see the module essay). `end <= blk + 1` reads only
    /// `blk`.
    pub fn get_ahead(&self, blk: u64, end: u64, verify: impl Fn(u64, &[u8]) -> Result<()>) -> Result<Arc<Buf>> {
        if end > blk + 1 {
            if let Some(buf) = self.read_run(blk, end, &verify, Asked::Now)? {
                return Ok(buf);
            }
        }
        self.get(blk, verify)
    }

    /// Caches the blocks from `blk` up to `end` that one read can bring, as
    /// [`BufferCache::get_ahead`] does, before anyone asks for them (a
    /// scan's next tree leaves): `blk` counts as read ahead too, and
    /// nothing is reported or read again (a block that fails is read, and
    /// its error reported, when it is asked for).
    pub fn prefetch(&self, blk: u64, end: u64, verify: impl Fn(u64, &[u8]) -> Result<()>) {
        if end > blk + 1 && !self.is_cached(blk) {
            let _ = self.read_run(blk, end, &verify, Asked::NotYet);
        }
    }

    /// Whether `blk` is cached (no hit is counted).
    pub fn is_cached(&self, blk: u64) -> bool {
        self.shards[self.shard(blk)].lock().map.contains_key(&blk)
    }

    /// The read of [`BufferCache::get_ahead`]; [`Asked::NotYet`]: nobody
    /// asked for `blk` yet (it is marked and counted as read ahead, and no hit or
    /// miss is counted). `None`: `blk` was not served here (no run to read,
    /// the read failed, or a buffer left its shard meanwhile); a plain
    /// `get` reads it, counting its miss.
    fn read_run(
        &self,
        blk: u64,
        end: u64,
        verify: &dyn Fn(u64, &[u8]) -> Result<()>,
        asked: Asked,
    ) -> Result<Option<Arc<Buf>>> {
        let prefetch = asked == Asked::NotYet;
        // The run: for each block from `blk`, its shard's epoch as of before
        // the read, or `None` for one that is cached or that the AIL holds
        // (read through, not installed). It ends at its last block to
        // install.
        let end = end.min(blk.saturating_add(self.window.blocks()));
        let mut run: Vec<Option<u64>> = Vec::with_capacity((end - blk).min(MAX_WINDOW) as usize);
        for b in blk..end {
            let mut sh = self.shards[self.shard(b)].lock();
            if let Some(hit) = sh.map.get(&b) {
                if b == blk && !prefetch {
                    let hit = hit.clone();
                    sh.hits += 1;
                    drop(sh);
                    hit.note_hit(self);
                    return Ok(Some(hit));
                }
                run.push(None);
                continue;
            }
            let epoch = sh.epoch;
            drop(sh);
            run.push((!self.ail.holds(b)).then_some(epoch));
        }
        while run.last() == Some(&None) {
            run.pop();
        }
        let first_wanted = run.first().is_some_and(Option::is_some);
        if run.iter().flatten().count() < 2 || (!prefetch && !first_wanted) {
            // Nothing to read ahead (or `blk` itself is in the AIL).
            return Ok(None);
        }
        let through = run.iter().filter(|e| e.is_none()).count() as u64;
        let bs = self.block_size;
        RUN.with(|cell| -> Result<Option<Arc<Buf>>> {
            let mut bytes = cell.borrow_mut();
            bytes.resize(run.len() * bs, 0);
            if self.dev.read_at(&mut bytes, blk * bs as u64).is_err() {
                // A block ahead may be unreadable while `blk` is not: `blk`
                // is read alone (by `get`, which reports its own error).
                return Ok(None);
            }
            self.stats.readahead_through.fetch_add(through, Relaxed);
            let mut first = None;
            let mut ahead = 0;
            for (i, (chunk, slot)) in bytes.chunks_exact(bs).zip(&run).enumerate() {
                let Some(epoch) = *slot else { continue };
                let b = blk + i as u64;
                let verified = verify(b, chunk);
                if i > 0 && verified.is_err() {
                    continue;
                }
                let data = ImageBytes::new(chunk.into(), &self.ail.meter);
                let mut sh = self.shards[self.shard(b)].lock();
                if i == 0 {
                    if let Some(hit) = sh.map.get(&b) {
                        // Someone else read (and may have changed) it.
                        let hit = hit.clone();
                        if !prefetch {
                            sh.hits += 1;
                            drop(sh);
                            hit.note_hit(self);
                        }
                        first = Some(hit);
                        continue;
                    }
                    if sh.epoch != epoch {
                        // A buffer left the shard meanwhile: `blk` is read
                        // again by `get`, which checks once more.
                        self.stats.reread_races.fetch_add(1, Relaxed);
                        continue;
                    }
                    verified?;
                    let buf = self.install(&mut sh, b, data);
                    if prefetch {
                        buf.ahead.store(true, Relaxed);
                        ahead += 1;
                    } else {
                        self.stats.misses.fetch_add(1, Relaxed);
                    }
                    first = Some(buf);
                } else if sh.epoch == epoch && !sh.map.contains_key(&b) {
                    let buf = self.install(&mut sh, b, data);
                    buf.ahead.store(true, Relaxed);
                    ahead += 1;
                }
            }
            if ahead > 0 {
                self.stats.readahead_reads.fetch_add(1, Relaxed);
                self.stats.readahead_blocks.fetch_add(ahead, Relaxed);
            }
            Ok(first)
        })
    }
}

impl Buf {
    /// A cache hit on this buffer: sets its referenced bit, and counts the
    /// first hit of a buffer that readahead brought.
    pub(super) fn note_hit(&self, cache: &BufferCache) {
        self.touch();
        if self.ahead.load(Relaxed) && self.ahead.swap(false, Relaxed) {
            cache.stats.readahead_used.fetch_add(1, Relaxed);
            cache.window.used();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::SHARDS;
    use super::*;
    use crate::dev::{BlockDevice, MemDevice};
    use crate::journal::ail::Ail;
    use crate::testdev::FaultDevice;
    use std::sync::atomic::AtomicU64;

    const BS: usize = 1024;

    /// Counts the device reads under a cache.
    struct Counting {
        inner: Arc<dyn BlockDevice>,
        reads: AtomicU64,
    }

    impl BlockDevice for Counting {
        fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
            self.reads.fetch_add(1, Relaxed);
            self.inner.read_at(buf, off)
        }
        fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
            self.inner.write_at(buf, off)
        }
        fn flush(&self) -> std::io::Result<()> {
            self.inner.flush()
        }
        fn size(&self) -> u64 {
            self.inner.size()
        }
    }

    /// A device of 256 blocks, block `b` filled with the byte `b`, under a
    /// cache of `cap` blocks; and the read counter.
    fn setup(inner: Arc<dyn BlockDevice>, cap: usize) -> (BufferCache, Arc<Counting>, Arc<Ail>) {
        for b in 0..256u64 {
            inner.write_at(&[b as u8; BS], b * BS as u64).unwrap();
        }
        let dev = Arc::new(Counting { inner, reads: AtomicU64::new(0) });
        let ail = Arc::new(Ail::new(u64::MAX, true));
        (BufferCache::new(dev.clone(), BS, cap, ail.clone(), true), dev, ail)
    }

    fn ok(_: u64, _: &[u8]) -> Result<()> {
        Ok(())
    }

    fn cached(cache: &BufferCache, b: u64) -> bool {
        cache.shards[cache.shard(b)].lock().map.contains_key(&b)
    }

    fn stat(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }

    #[test]
    fn a_miss_reads_the_window_in_one_read_and_later_hits_count_as_used() {
        let (cache, dev, _) = setup(Arc::new(MemDevice::new(256 * BS as u64)), 4096);
        let b = cache.get_ahead(10, 18, ok).unwrap();
        assert_eq!(b.read()[0], 10);
        assert_eq!(stat(&dev.reads), 1, "one device read for the window");
        assert!((10..18).all(|b| cached(&cache, b)) && !cached(&cache, 18), "the window and nothing past it");
        assert_eq!(stat(&cache.stats.readahead_blocks), 7);
        for b in 11..14 {
            assert_eq!(cache.get_ahead(b, b + 8, ok).unwrap().read()[5], b as u8, "block {b} holds its own bytes");
        }
        assert_eq!(stat(&dev.reads), 1, "blocks ahead are hits");
        assert_eq!(stat(&cache.stats.readahead_used), 3);
        cache.get(12, ok).unwrap();
        assert_eq!(stat(&cache.stats.readahead_used), 3, "only a block's first hit counts");
    }

    #[test]
    fn blocks_read_ahead_and_evicted_unused_shrink_the_window_and_used_ones_grow_it() {
        // One block per shard: nearly every block read ahead is evicted
        // before it is asked for.
        let (cache, _, _) = setup(Arc::new(MemDevice::new(256 * BS as u64)), SHARDS);
        assert_eq!(cache.window.blocks(), MAX_WINDOW);
        // Misses only (a hit on a block read ahead would count as used).
        for i in 0..200u64 {
            let b = (0..224).map(|k| (i * 97 + k) % 224).find(|&b| !cached(&cache, b)).unwrap();
            cache.get_ahead(b, b + 32, ok).unwrap();
        }
        assert!(stat(&cache.stats.readahead_wasted) > 100, "blocks ahead were evicted unused");
        assert_eq!(cache.window.blocks(), MIN_WINDOW, "the window shrank to its floor");
        // Runs are clipped to the window.
        let blocks = stat(&cache.stats.readahead_blocks);
        let b = (0..250).find(|&b| !cached(&cache, b) && !cached(&cache, b + 1)).unwrap();
        cache.get_ahead(b, b + 32, ok).unwrap();
        assert_eq!(stat(&cache.stats.readahead_blocks), blocks + MIN_WINDOW - 1);
        // A block read ahead and used grows it by one.
        assert_eq!(cache.get(b + 1, ok).unwrap().read()[0], (b + 1) as u8);
        assert_eq!(cache.window.blocks(), MIN_WINDOW + 1);
    }

    #[test]
    fn the_run_reads_through_a_cached_block_and_one_the_ail_holds_caching_neither() {
        let (cache, dev, ail) = setup(Arc::new(MemDevice::new(256 * BS as u64)), 4096);
        let held = cache.get(24, ok).unwrap();
        let reads = stat(&dev.reads);
        cache.get_ahead(20, 32, ok).unwrap();
        assert_eq!(stat(&dev.reads), reads + 1, "one read for the window, through the cached block");
        assert!((20..32).all(|b| cached(&cache, b)));
        assert!(Arc::ptr_eq(&held, &cache.get(24, ok).unwrap()), "the cached buffer is not replaced");
        assert_eq!(stat(&cache.stats.readahead_blocks), 10, "blocks 21-31 but 24");
        // A committed image not yet home is newer than the home block:
        // readahead must not cache the home bytes over it.
        let newer = ImageBytes::new(vec![0xAB; BS].into_boxed_slice(), &ail.meter);
        ail.insert(1, std::iter::once((43, newer)));
        let reads = stat(&dev.reads);
        cache.get_ahead(40, 48, ok).unwrap();
        assert_eq!(stat(&dev.reads), reads + 1);
        assert!(cached(&cache, 42) && !cached(&cache, 43) && (44..48).all(|b| cached(&cache, b)));
        assert_eq!(cache.get_ahead(43, 48, ok).unwrap().read()[0], 0xAB, "the AIL's image, not the home bytes");
        // Cached blocks at the end of the window are not read at all.
        cache.get(52, ok).unwrap();
        cache.get(53, ok).unwrap();
        let (reads, blocks) = (stat(&dev.reads), stat(&cache.stats.readahead_blocks));
        cache.get_ahead(50, 54, ok).unwrap();
        assert_eq!(stat(&dev.reads), reads + 1);
        assert_eq!(stat(&cache.stats.readahead_blocks), blocks + 1, "only block 51 was read ahead");
    }

    #[test]
    fn a_block_ahead_that_fails_verification_is_not_cached() {
        let (cache, _, _) = setup(Arc::new(MemDevice::new(256 * BS as u64)), 4096);
        let odd_fails = |b: u64, _: &[u8]| -> Result<()> {
            if b % 2 == 1 {
                Err(crate::error::FsError::Errno(libc::EUCLEAN))
            } else {
                Ok(())
            }
        };
        cache.get_ahead(60, 66, odd_fails).unwrap();
        assert!(cached(&cache, 62) && cached(&cache, 64) && !cached(&cache, 61) && !cached(&cache, 63));
        assert!(cache.get_ahead(61, 66, odd_fails).is_err(), "the block asked for is still verified");
        assert!(!cached(&cache, 61));
    }

    #[test]
    fn an_unreadable_block_ahead_leaves_the_block_asked_for_readable() {
        let fault = Arc::new(FaultDevice::new(Arc::new(MemDevice::new(256 * BS as u64))));
        let (cache, _, _) = setup(fault.clone(), 4096);
        fault.fail_reads(85 * BS as u64..86 * BS as u64);
        assert_eq!(cache.get_ahead(80, 96, ok).unwrap().read()[0], 80);
        assert!(!cached(&cache, 81), "nothing was read ahead");
        assert!(cache.get_ahead(85, 96, ok).is_err(), "the bad block reports its error");
    }

    #[test]
    fn a_prefetch_caches_the_run_counts_no_miss_and_its_first_block_as_ahead() {
        let (cache, dev, _) = setup(Arc::new(MemDevice::new(256 * BS as u64)), 4096);
        cache.prefetch(100, 104, ok);
        assert_eq!(stat(&dev.reads), 1);
        assert!((100..104).all(|b| cached(&cache, b)));
        assert_eq!(stat(&cache.stats.misses), 0, "nobody asked for a block yet");
        assert_eq!(stat(&cache.stats.readahead_blocks), 4);
        cache.prefetch(100, 108, ok);
        assert_eq!(stat(&dev.reads), 1, "a cached first block: nothing is read");
        assert_eq!(cache.get(100, ok).unwrap().read()[0], 100);
        assert_eq!(stat(&cache.stats.readahead_used), 1);
    }
}
