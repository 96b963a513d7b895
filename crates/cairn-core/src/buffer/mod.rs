//! The metadata buffer cache.
//!
//! Every metadata block the engine reads or changes (superblock, group
//! descriptors, bitmaps, inode-table blocks, tree nodes, xattr blocks) lives
//! here as a [`Buf`]. File data never does: it goes straight between the FUSE
//! request and the image (the kernel's page cache is the data cache).
//!
//! ## Buffer states
//! A buffer is *clean* (its bytes are what its home block holds), *dirty*
//! (changed in the running checkpoint: it is on the committed-item list, see
//! `buffer::cil`), *committing* (dirty in a checkpoint whose push has begun
//! but has not captured it yet), *in flight* (captured by a commit whose home
//! write has not finished), or dirty and in flight at once (changed again
//! after the capture). Only clean buffers may be evicted: dropping an
//! in-flight buffer would let the next read return the old home block — a
//! lost update without any crash (the bug that the `tiny_cache` tests
//! reproduce).
//!
//! ## Changing bytes
//! Bytes change only through [`BufferCache::modify`] (or
//! [`BufferCache::get_new`]), which takes a transaction handle. It (1) freezes
//! a committing buffer first: keeps its bytes for the push, so the push never
//! sees a later checkpoint's change (jbd2's frozen data); (1b) copies the
//! bytes if an image shares them: a buffer's bytes are an `Arc`, shared
//! copy-on-write with what a capture or a freeze took and the AIL holds, and
//! a miss served by the AIL shares its image too; (2) compares the
//! changed range before and after, chunk by chunk, and adds the chunks that
//! differ to the buffer's dirty-region map (XFS's `xfs_buf_log_item`
//! bitmap), so the log carries only those — or, through
//! [`BufferCache::modify_mapped`], takes the chunks from an edit that
//! reports every byte it wrote (the B+tree's in-place leaf put and remove),
//! with no copy to compare; (3) inserts the buffer into the
//! committed-item list the first time it changes in a checkpoint, charging the
//! handle one credit. A change that changes no byte dirties nothing.
//!
//! ## Invariants
//! * A block is in the cache at most once, so every change to it is seen by
//!   every reader and by the commit that snapshots it.
//! * A buffer is verified (checksum and bounds, by the caller's verifier) once,
//!   when it is read from the device; a failed verification is not cached.
//! * Dirty, committing and in-flight buffers stay in the map; a buffer is on
//!   the committed-item list of the checkpoint that dirtied it until that
//!   checkpoint's push takes the list (under the closed gate, a swap).
//! * Marking a buffer dirty takes a running transaction ([`Change`], which
//!   `tx::Tx` is): the type proves that the gate is held and charges the
//!   handle's log credits.
//! * A miss never installs a stale read: the device read happens without the
//!   shard lock, so a shard's eviction epoch is compared before the insert and
//!   the read is redone if a buffer left the shard meanwhile.
//!
//! ## Eviction
//! Second chance (CLOCK) per shard under the `cache_mb` budget: a hit sets
//! the buffer's referenced bit; the hand clears it once before the buffer
//! can go, and skips buffers that are dirty, in flight, held by a caller, or
//! whose bytes an AIL image shares (evicting one would free none of its
//! bytes; the AIL's shrink sends the image home when the cache is over its
//! size, see `journal::ail`). One pass looks at 256 buffers at most, and the
//! hand goes on from there at the next. Locks are only tried here (`try_*`),
//! so the hand's order of them does not matter.
//!
//! ## Locking
//! The map is split into shards, each behind its own mutex, so lookups from
//! different threads rarely meet. Each buffer's bytes sit behind their own
//! `RwLock`; writers hold it only while changing bytes. Each buffer's log
//! state (dirty map, checkpoint, frozen image, in-flight mark) sits behind a
//! small mutex taken after the bytes' lock. Lock order: shard mutex →
//! buffer data → buffer log state (never the reverse).

pub mod cil;
pub mod probe;
mod readahead;

use crate::dev::BlockDevice;
use crate::error::Result;
use crate::journal::ail::Ail;
use crate::journal::image::Image;
use crate::journal::image::ImageBytes;
use crate::stats::Publish;
use cairn_format::journal::{changed_chunks, WHOLE};
use cil::{Cil, Frozen};
use parking_lot::{MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const SHARDS: usize = 64;

/// Inode-table blocks read together on a miss unless the mount says
/// otherwise (ext4's `inode_readahead_blks` default; see `readahead`).
pub const DEFAULT_INODE_READAHEAD: u32 = 32;

/// A running transaction as the layers below the metadata context see it
/// (`tx::Tx` is the one implementation): proof that the caller holds the
/// transaction gate, the account each newly dirtied buffer is charged to,
/// and the buffer cache it changes.
pub trait Change {
    /// The buffer cache this transaction changes.
    fn bufs(&self) -> &BufferCache;
    /// Charges `n` newly dirtied buffers to the transaction.
    fn charge(&self, n: u64);
    /// Notes a change to a buffer that was already dirty.
    fn touch(&self);
    /// The handle's mark for the conflict probe, if the probe is on.
    fn mark(&self) -> Option<&Arc<probe::HandleMark>> {
        None
    }
}

/// Most buffers one eviction pass looks at (see `maybe_evict`).
const EVICT_LOOKS: usize = 256;

/// Memory a cached block costs beyond its bytes: the `Arc<Buf>` allocation
/// (its header, locks and log state), the shard map's slot with its load
/// factor's slack, and the clock's entry. `-o cache_mb` counts a block of
/// the buffer cache as its size plus this (test
/// `buf_overhead_covers_the_bookkeeping`).
pub(crate) const BUF_OVERHEAD: usize = 208;

/// One cached metadata block.
pub struct Buf {
    /// Block number.
    pub blk: u64,
    /// The block's bytes: read through [`Buf::read`], changed only through
    /// [`BufferCache::modify`]. Shared, copy-on-write, with the images a
    /// push captured or a writer froze and the AIL holds: a capture takes a
    /// reference, and the next change copies the bytes only if an image
    /// still shares them.
    data: RwLock<Image>,
    pub(crate) log: Mutex<LogState>,
    referenced: AtomicBool,
    /// Cached by readahead and not asked for since (see `readahead`).
    ahead: AtomicBool,
}

/// A buffer's part in logging (see the module essay and `buffer::cil`).
#[derive(Default)]
pub(crate) struct LogState {
    /// The checkpoint (committed-item list sequence) whose changes `map`
    /// describes; 0 when the buffer has no change that is not captured.
    pub dirty_seq: u64,
    /// Chunks changed in `dirty_seq` (bit `i`: chunk `i`, see
    /// `cairn_format::journal::chunk_size`).
    pub map: u64,
    /// The image of a committing checkpoint, copied by a writer that changed
    /// the buffer before the push captured it.
    pub frozen: Option<Frozen>,
    /// The checkpoint whose captured image is not yet home (0: none).
    pub inflight: u64,
    /// The handles that changed which chunks, for the conflict probe
    /// (`probe`; `None` while it is off).
    pub owners: Option<Box<probe::Owners>>,
}

/// What a buffer's contents are relative to its home block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BufState {
    Clean,
    Dirty,
    /// Captured by checkpoint `seq`, home write pending.
    InFlight(u64),
    /// In flight for `seq` and changed again since.
    DirtyInFlight(u64),
}

impl Buf {
    fn new(blk: u64, data: Image) -> Buf {
        Buf {
            blk,
            data: RwLock::new(data),
            log: Mutex::new(LogState::default()),
            referenced: AtomicBool::new(false),
            ahead: AtomicBool::new(false),
        }
    }

    /// The block's bytes, shared.
    pub fn read(&self) -> MappedRwLockReadGuard<'_, [u8]> {
        RwLockReadGuard::map(self.data.read(), |d| &d[..])
    }

    /// The block's bytes as an image, locked against changes while the
    /// guard lives (a capture clones the reference under it).
    pub(crate) fn read_image(&self) -> RwLockReadGuard<'_, Image> {
        self.data.read()
    }

    /// The buffer's state.
    pub fn state(&self) -> BufState {
        let st = self.log.lock();
        match (st.dirty_seq != 0, st.inflight) {
            (false, 0) => BufState::Clean,
            (true, 0) => BufState::Dirty,
            (false, s) => BufState::InFlight(s),
            (true, s) => BufState::DirtyInFlight(s),
        }
    }

    fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// True if the buffer may leave the cache: clean, not in flight, held by
    /// nobody but the map, and its bytes shared with no image (an AIL image
    /// of the block: evicting the buffer would free none of its bytes, only
    /// move them out of the cache's count; the AIL's shrink sends the image
    /// home first). `try_lock`: a busy buffer is simply skipped.
    fn evictable(self: &Arc<Buf>) -> bool {
        Arc::strong_count(self) == 1
            && self.log.try_lock().is_some_and(|st| st.dirty_seq == 0 && st.inflight == 0 && st.frozen.is_none())
            && self.data.try_read().is_some_and(|d| Arc::strong_count(&d) == 1)
    }
}

/// Counters of the cache.
#[derive(Default)]
pub struct CacheStats {
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    /// Misses whose device read was redone because a buffer left the shard
    /// while it ran (see the module essay).
    pub reread_races: AtomicU64,
    /// Times the clock hand found nothing evictable (everything dirty, in
    /// flight or held): the cache then runs over its budget until a commit.
    pub over_budget: AtomicU64,
    /// Device reads that brought blocks ahead of need (`readahead`).
    pub readahead_reads: AtomicU64,
    /// Blocks cached ahead of need.
    pub readahead_blocks: AtomicU64,
    /// Of those, the ones asked for later.
    pub readahead_used: AtomicU64,
    /// Of those, the ones evicted before anyone asked for them.
    pub readahead_wasted: AtomicU64,
    /// Blocks a readahead read brought but did not install (cached, or
    /// held by the AIL, when the run began).
    pub readahead_through: AtomicU64,
}

#[derive(Default)]
struct Shard {
    map: foldhash::HashMap<u64, Arc<Buf>>,
    clock: VecDeque<u64>,
    /// Bumped whenever a buffer leaves the map.
    epoch: u64,
    /// Lookups that found their buffer here, counted under the shard's
    /// lock (a shared counter's cache line would bounce between threads
    /// on every hit).
    hits: u64,
}

thread_local! {
    /// The bytes of a range before a change, to find the chunks it changed.
    static BEFORE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The sharded buffer cache.
pub struct BufferCache {
    dev: Arc<dyn BlockDevice>,
    block_size: usize,
    shards: Vec<Mutex<Shard>>,
    /// The committed-item list: which buffers each checkpoint changed.
    pub cil: Cil,
    /// Committed images not yet home: a miss reads them before the home.
    ail: Arc<Ail>,
    /// Log only changed chunks (`-o delaylog=0` logs whole blocks).
    regions: bool,
    per_shard_cap: usize,
    /// How far readahead may reach now (see `readahead`).
    window: readahead::Window,
    pub stats: CacheStats,
    /// The conflict probe, once a mount turns it on.
    probe: std::sync::OnceLock<probe::Probe>,
}

impl BufferCache {
    /// The device the cache reads and writes.
    pub(crate) fn dev(&self) -> &dyn BlockDevice {
        self.dev.as_ref()
    }

    /// A cache of about `capacity` blocks over `dev`.
    pub fn new(
        dev: Arc<dyn BlockDevice>,
        block_size: usize,
        capacity: usize,
        ail: Arc<Ail>,
        regions: bool,
    ) -> BufferCache {
        BufferCache {
            dev,
            block_size,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            cil: Cil::new(),
            ail,
            regions,
            per_shard_cap: (capacity / SHARDS).max(1),
            window: readahead::Window::default(),
            stats: CacheStats::default(),
            probe: std::sync::OnceLock::new(),
        }
    }

    /// Turns the conflict probe on (`-o debug.conflict_probe`), for
    /// handles that begin from now on.
    pub fn enable_probe(&self, geo: cairn_format::layout::Geometry) {
        let _ = self.probe.set(probe::Probe::new(geo));
    }

    /// The conflict probe, if it is on.
    pub fn probe(&self) -> Option<&probe::Probe> {
        self.probe.get()
    }

    fn shard(&self, blk: u64) -> usize {
        (blk.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Returns block `blk`, reading and verifying it if it is not cached.
    pub fn get(&self, blk: u64, verify: impl Fn(u64, &[u8]) -> Result<()>) -> Result<Arc<Buf>> {
        let s = self.shard(blk);
        let mut epoch = {
            let mut sh = self.shards[s].lock();
            if let Some(b) = sh.map.get(&blk) {
                let b = b.clone();
                sh.hits += 1;
                drop(sh);
                b.note_hit(self);
                return Ok(b);
            }
            sh.epoch
        };
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        loop {
            // An image the AIL holds is shared, not copied: the first change
            // copies it (see `Buf::data`).
            let data: Image = match self.ail.lookup(blk) {
                Some(img) => img,
                None => {
                    let mut data = vec![0u8; self.block_size].into_boxed_slice();
                    self.dev.read_at(&mut data, blk * self.block_size as u64)?;
                    ImageBytes::new(data, &self.ail.meter)
                }
            };
            let verified = verify(blk, &data);
            let mut sh = self.shards[s].lock();
            if let Some(b) = sh.map.get(&blk) {
                // Someone else read (and may have changed) it meanwhile.
                b.touch();
                return Ok(b.clone());
            }
            if sh.epoch != epoch {
                // A buffer left this shard while we read: if it was this
                // block, its newer bytes may have reached home after our read.
                epoch = sh.epoch;
                self.stats.reread_races.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            verified?;
            return Ok(self.install(&mut sh, blk, data));
        }
    }

    /// Puts a new buffer for `blk` (not cached) in its locked shard, on the
    /// clock, and evicts if the shard is over its budget.
    fn install(&self, sh: &mut Shard, blk: u64, data: Image) -> Arc<Buf> {
        let b = Arc::new(Buf::new(blk, data));
        sh.map.insert(blk, b.clone());
        self.ail.meter.cache_in(self.block_size);
        sh.clock.push_back(blk);
        self.maybe_evict(sh);
        b
    }

    /// A block of zeros.
    fn zeros(&self) -> Image {
        ImageBytes::new(vec![0u8; self.block_size].into_boxed_slice(), &self.ail.meter)
    }

    /// Caches a zero-filled buffer for `blk` without reading it, unless one
    /// is cached: for a block whose home bytes the caller knows are zeros (an
    /// inode table mkfs zeroed, untouched since). It is not dirtied: changes
    /// log their chunks against those zeros as usual. Returns whether it was
    /// inserted.
    pub fn insert_zeroed(&self, blk: u64) -> bool {
        let mut sh = self.shards[self.shard(blk)].lock();
        if sh.map.contains_key(&blk) {
            return false;
        }
        self.install(&mut sh, blk, self.zeros());
        true
    }

    /// Returns a zero-filled buffer for a block that is being (re)initialised
    /// in the running checkpoint, without reading it, logged whole (its home
    /// bytes are not what replay may build on). A cached copy is zeroed.
    pub fn get_new(&self, tx: &dyn Change, blk: u64) -> Arc<Buf> {
        let s = self.shard(blk);
        let buf = {
            let mut sh = self.shards[s].lock();
            match sh.map.get(&blk) {
                Some(b) => {
                    b.touch();
                    b.clone()
                }
                None => self.install(&mut sh, blk, self.zeros()),
            }
        };
        self.change(tx, &buf, 0..self.block_size, WHOLE, |d| d.fill(0));
        buf
    }

    /// Second-chance eviction down to 7/8 of the shard's budget.
    fn maybe_evict(&self, sh: &mut Shard) {
        if sh.map.len() <= self.per_shard_cap {
            return;
        }
        let target = self.per_shard_cap * 7 / 8;
        // Every buffer gets at most two looks (one to clear its bit), and
        // one call at most `EVICT_LOOKS`: when buffers the AIL shares fill
        // the shard, nothing may be evictable until the next commit's
        // shrink, and a whole-shard walk at every miss cost the 5M-file
        // unlink a third of its rate. The hand goes on from there next time.
        let mut budget = (sh.clock.len() * 2).min(EVICT_LOOKS);
        while sh.map.len() > target && budget > 0 {
            budget -= 1;
            let Some(blk) = sh.clock.pop_front() else { break };
            let Some(b) = sh.map.get(&blk) else { continue };
            if b.referenced.swap(false, Ordering::Relaxed) {
                sh.clock.push_back(blk);
                continue;
            }
            if !b.evictable() {
                sh.clock.push_back(blk);
                continue;
            }
            if b.ahead.load(Ordering::Relaxed) {
                self.stats.readahead_wasted.fetch_add(1, Ordering::Relaxed);
                self.window.wasted();
            }
            sh.map.remove(&blk);
            self.ail.meter.cache_out(self.block_size);
            sh.epoch += 1;
            self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
        if sh.map.len() > self.per_shard_cap {
            self.stats.over_budget.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Changes bytes `range` of `buf` in the running checkpoint of the
    /// operation holding `tx` (see "Changing bytes" in the module essay);
    /// `f` gets the range and may return a value.
    pub fn modify<R>(&self, tx: &dyn Change, buf: &Arc<Buf>, range: Range<usize>, f: impl FnOnce(&mut [u8]) -> R) -> R {
        self.change(tx, buf, range, 0, f)
    }

    /// As [`BufferCache::modify`] over the whole block, logging it whole
    /// whatever changed (for a block also written outside the journal).
    pub fn modify_whole<R>(&self, tx: &dyn Change, buf: &Arc<Buf>, f: impl FnOnce(&mut [u8]) -> R) -> R {
        self.change(tx, buf, 0..self.block_size, WHOLE, f)
    }

    /// As [`BufferCache::modify`] over the whole block, for an edit that
    /// knows what it wrote: `f` returns, besides its value, the journal
    /// chunks of every byte it changed (more is allowed; fewer would lose
    /// a change on replay), and those are logged with no copy of the block
    /// to compare against (4 KiB copied and compared per B+tree leaf edit).
    pub fn modify_mapped<R>(&self, tx: &dyn Change, buf: &Arc<Buf>, f: impl FnOnce(&mut [u8]) -> (R, u64)) -> R {
        self.change_by(tx, buf, 0..self.block_size, 0, f)
    }

    fn change<R>(
        &self,
        tx: &dyn Change,
        buf: &Arc<Buf>,
        range: Range<usize>,
        force: u64,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        let (bs, at) = (self.block_size, range.start);
        self.change_by(tx, buf, range, force, |data| {
            BEFORE.with(|before| {
                let mut before = before.borrow_mut();
                before.clear();
                before.extend_from_slice(data);
                let r = f(data);
                (r, changed_chunks(bs, at, &before, data))
            })
        })
    }

    /// Changes `range` of `buf` by `edit`, which returns the chunks it
    /// changed.
    fn change_by<R>(
        &self,
        tx: &dyn Change,
        buf: &Arc<Buf>,
        range: Range<usize>,
        force: u64,
        edit: impl FnOnce(&mut [u8]) -> (R, u64),
    ) -> R {
        let mut guard = buf.data.write();
        // Stable while `tx` holds the gate (a push changes it under the
        // closed gate).
        let running = self.cil.running();
        let mut st = buf.log.lock();
        if st.dirty_seq != 0 && st.dirty_seq < running {
            // Committing and not captured yet: the push gets today's bytes
            // (a reference; the copy is made just below).
            self.cil.freeze(&mut st, Image::clone(&guard));
        }
        // Copy-on-write: a captured, frozen or AIL image may share the bytes.
        let data: &mut [u8] = Arc::<ImageBytes>::make_mut(&mut guard);
        let (r, changed) = edit(&mut data[range]);
        let map = if changed != 0 && !self.regions { WHOLE } else { changed | force };
        if map == 0 {
            return r;
        }
        if let (Some(p), Some(mark)) = (self.probe.get(), tx.mark()) {
            p.note(&mut st.owners, mark, buf.blk, &guard, map);
        }
        let first = st.dirty_seq == 0;
        if first {
            st.dirty_seq = running;
        }
        st.map |= map;
        drop(st);
        drop(guard);
        if first {
            self.cil.insert(buf.clone());
            tx.charge(1);
        } else {
            tx.touch();
            self.cil.note_relog();
        }
        r
    }

    /// Number of dirty buffers (the running checkpoint's size in blocks).
    pub fn dirty_count(&self) -> u64 {
        self.cil.count()
    }

    /// Number of cached buffers.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Checks the cache's invariants (tests and debug builds): every dirty
    /// or in-flight buffer is in the map, the committed-item list holds
    /// exactly the dirty buffers, each once (with no handle and no push
    /// running). Panics with what is wrong.
    pub fn debug_check_consistency(&self) {
        let mut dirty_listed = std::collections::HashSet::new();
        let running = self.cil.running();
        self.cil.for_each_listed(|b| {
            assert_eq!(b.log.lock().dirty_seq, running, "block {} is listed but not dirty in this checkpoint", b.blk);
            assert!(dirty_listed.insert(b.blk), "block {} is on the committed-item list twice", b.blk);
        });
        assert_eq!(dirty_listed.len() as u64, self.dirty_count(), "dirty count disagrees with the dirty lists");
        let mut cached = std::collections::HashSet::new();
        for shard in &self.shards {
            let sh = shard.lock();
            for (blk, b) in &sh.map {
                assert_eq!(*blk, b.blk, "buffer filed under the wrong block");
                let dirty = matches!(b.state(), BufState::Dirty | BufState::DirtyInFlight(_));
                assert!(!dirty || dirty_listed.contains(blk), "dirty block {blk} is on no dirty list");
                cached.insert(*blk);
            }
        }
        for blk in &dirty_listed {
            assert!(cached.contains(blk), "dirty block {blk} was evicted");
        }
    }
}

impl Publish for BufferCache {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        self.cil.publish(put);
        let s = &self.stats;
        put("cache.buffers", self.len() as u64);
        put("cache.dirty_buffers", self.dirty_count());
        put("cache.hits", self.shards.iter().map(|sh| sh.lock().hits).sum());
        put("cache.misses", s.misses.load(Relaxed));
        put("cache.evictions", s.evictions.load(Relaxed));
        put("cache.reread_races", s.reread_races.load(Relaxed));
        put("cache.over_budget", s.over_budget.load(Relaxed));
        put("cache.readahead_reads", s.readahead_reads.load(Relaxed));
        put("cache.readahead_blocks", s.readahead_blocks.load(Relaxed));
        put("cache.readahead_used", s.readahead_used.load(Relaxed));
        put("cache.readahead_wasted", s.readahead_wasted.load(Relaxed));
        put("cache.readahead_window", self.window.blocks());
        put("cache.readahead_through", s.readahead_through.load(Relaxed));
        if let Some(p) = self.probe.get() {
            p.publish(put);
        }
    }
}

#[cfg(test)]
mod overhead_tests {
    use super::*;

    #[test]
    fn buf_overhead_covers_the_bookkeeping() {
        let arc = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Buf>();
        // The bytes' own `Arc` (an `Image`): counts, the box's pointer and
        // the meter's.
        let image = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<ImageBytes>();
        // hashbrown keeps at least an eighth of its slots free; a slot is
        // the entry plus a control byte.
        let slot = (std::mem::size_of::<(u64, Arc<Buf>)>() + 1) * 8 / 7 + 1;
        // The clock's ring may be up to twice its length.
        let clock = 2 * std::mem::size_of::<u64>();
        let total = arc.next_multiple_of(16) + image.next_multiple_of(16) + slot + clock;
        assert!(total <= BUF_OVERHEAD, "a cached block's bookkeeping is {total} bytes");
    }
}

#[cfg(test)]
mod eviction_tests {
    use super::*;
    use crate::dev::MemDevice;

    #[test]
    fn a_buffer_whose_bytes_the_ail_shares_stays_cached_until_its_image_goes_home() {
        let bs = 1024;
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096 * bs as u64));
        let ail = Arc::new(Ail::new(u64::MAX, true));
        // 64 blocks: one per shard.
        let cache = BufferCache::new(dev.clone(), bs, 64, ail.clone(), true);
        let ok = |_: u64, _: &[u8]| Ok(());
        let listed = 7u64;
        let same_shard: Vec<u64> = (8..4096).filter(|b| cache.shard(*b) == cache.shard(listed)).take(8).collect();
        let image = Image::clone(&cache.get(listed, ok).unwrap().read_image());
        ail.insert(1, std::iter::once((listed, image)));
        assert_eq!(ail.meter.unshared(), 0, "the AIL's image is the buffer's bytes");
        for &b in &same_shard {
            cache.get(b, ok).unwrap();
        }
        let cached = |b: u64| cache.shards[cache.shard(b)].lock().map.contains_key(&b);
        assert!(cached(listed), "evicting it would have freed none of its bytes");
        assert!(same_shard[..7].iter().any(|&b| !cached(b)), "the shard evicted the others");
        // Home: the AIL lets go of the image, and the buffer may leave.
        ail.write_home(dev.as_ref(), bs).unwrap();
        ail.home_written();
        for &b in &same_shard {
            cache.get(b, ok).unwrap();
        }
        assert!(!cached(listed));
        assert_eq!(ail.meter.cached(), cache.len() as u64 * bs as u64, "the meter counts what the cache holds");
    }
}
