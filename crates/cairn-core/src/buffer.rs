//! The metadata buffer cache.
//!
//! Every metadata block the engine reads or changes (superblock, group
//! descriptors, bitmaps, inode-table blocks, tree nodes, xattr blocks) lives
//! here as a [`Buf`]. File data never does: it goes straight between the FUSE
//! request and the image (the kernel's page cache is the data cache).
//!
//! ## Buffer states
//! A buffer is *clean* (its bytes are what its home block holds), *dirty*
//! (changed in the running checkpoint), *in flight* (snapshotted by a commit
//! whose home write has not finished), or dirty and in flight at once
//! (changed again after the snapshot). A commit turns dirty into in flight
//! ([`BufferCache::take_dirty`]) and, once the snapshot's home writes are done,
//! in flight into clean ([`BufferCache::unpin`]). Only clean buffers may be
//! evicted: dropping an in-flight buffer would let the next read return the
//! old home block — a lost update without any crash (the bug that the
//! `tiny_cache` tests reproduce).
//!
//! ## Invariants
//! * A block is in the cache at most once, so every change to it is seen by
//!   every reader and by the commit that snapshots it.
//! * A buffer is verified (checksum and bounds, by the caller's verifier) once,
//!   when it is read from the device; a failed verification is not cached.
//! * Dirty and in-flight buffers stay in the map; they leave the dirty list
//!   only when a commit snapshots them (under the exclusive transaction gate).
//! * Marking a buffer dirty takes a transaction handle ([`Tx`]): the type
//!   proves that the gate is held and charges the handle's log credits.
//! * A miss never installs a stale read: the device read happens without the
//!   shard lock, so a shard's eviction epoch is compared before the insert and
//!   the read is redone if a buffer left the shard meanwhile.
//!
//! ## Eviction
//! Second chance (CLOCK) per shard under the `cache_mb` budget: a hit sets
//! the buffer's referenced bit; the hand clears it once before the buffer
//! can go, and skips buffers that are dirty, in flight or held by a caller.
//!
//! ## Locking
//! The map is split into shards, each behind its own mutex, so lookups from
//! different threads rarely meet. Each buffer's bytes sit behind their own
//! `RwLock`; writers hold it only while changing bytes. The dirty list is
//! sharded too. Lock order: shard mutex, then buffer data (never the reverse).

use crate::dev::BlockDevice;
use crate::error::Result;
use crate::journal::Tx;
use crate::stats::Publish;
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const SHARDS: usize = 64;

/// One cached metadata block.
pub struct Buf {
    /// Block number.
    pub blk: u64,
    /// The block's bytes.
    pub data: RwLock<Box<[u8]>>,
    dirty: AtomicBool,
    /// Sequence of the checkpoint whose snapshot of this buffer is not yet
    /// written home (0: none).
    inflight: AtomicU64,
    referenced: AtomicBool,
}

/// What a buffer's contents are relative to its home block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufState {
    Clean,
    Dirty,
    /// Snapshotted by checkpoint `seq`, home write pending.
    InFlight(u64),
    /// In flight for `seq` and changed again since.
    DirtyInFlight(u64),
}

impl Buf {
    fn new(blk: u64, data: Box<[u8]>) -> Buf {
        Buf {
            blk,
            data: RwLock::new(data),
            dirty: AtomicBool::new(false),
            inflight: AtomicU64::new(0),
            referenced: AtomicBool::new(false),
        }
    }

    /// True if changed since the last commit snapshot.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// The buffer's state.
    pub fn state(&self) -> BufState {
        match (self.is_dirty(), self.inflight.load(Ordering::Acquire)) {
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
}

/// Counters of the cache.
#[derive(Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    /// Misses whose device read was redone because a buffer left the shard
    /// while it ran (see the module essay).
    pub reread_races: AtomicU64,
    /// Times the clock hand found nothing evictable (everything dirty, in
    /// flight or held): the cache then runs over its budget until a commit.
    pub over_budget: AtomicU64,
    /// Changes to buffers already dirty in the running checkpoint: each is a
    /// block image that delayed logging writes once instead of again.
    pub relogged: AtomicU64,
}

#[derive(Default)]
struct Shard {
    map: HashMap<u64, Arc<Buf>>,
    clock: VecDeque<u64>,
    /// Bumped whenever a buffer leaves the map.
    epoch: u64,
}

/// Buffers snapshotted by one commit: their images, in block order, and the
/// buffers themselves, pinned until [`BufferCache::unpin`].
pub struct Snapshot {
    pub seq: u64,
    pub images: Vec<(u64, Box<[u8]>)>,
    bufs: Vec<Arc<Buf>>,
}

/// The sharded buffer cache.
pub struct BufferCache {
    dev: Arc<dyn BlockDevice>,
    block_size: usize,
    shards: Vec<Mutex<Shard>>,
    dirty: Vec<Mutex<Vec<Arc<Buf>>>>,
    dirty_count: AtomicU64,
    per_shard_cap: usize,
    pub stats: CacheStats,
}

impl BufferCache {
    /// A cache of about `capacity` blocks over `dev`.
    pub fn new(dev: Arc<dyn BlockDevice>, block_size: usize, capacity: usize) -> BufferCache {
        BufferCache {
            dev,
            block_size,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            dirty: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            dirty_count: AtomicU64::new(0),
            per_shard_cap: (capacity / SHARDS).max(1),
            stats: CacheStats::default(),
        }
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
            let sh = self.shards[s].lock();
            if let Some(b) = sh.map.get(&blk) {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                b.touch();
                return Ok(b.clone());
            }
            sh.epoch
        };
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        loop {
            let mut data = vec![0u8; self.block_size].into_boxed_slice();
            self.dev.read_at(&mut data, blk * self.block_size as u64)?;
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
            let b = Arc::new(Buf::new(blk, data));
            sh.map.insert(blk, b.clone());
            sh.clock.push_back(blk);
            self.maybe_evict(&mut sh);
            return Ok(b);
        }
    }

    /// Returns a zero-filled buffer for a block that is being (re)initialised,
    /// without reading it. An existing cached copy is zeroed in place.
    pub fn get_new(&self, blk: u64) -> Arc<Buf> {
        let s = self.shard(blk);
        let mut sh = self.shards[s].lock();
        if let Some(b) = sh.map.get(&blk) {
            b.data.write().fill(0);
            b.touch();
            return b.clone();
        }
        let buf = Arc::new(Buf::new(blk, vec![0u8; self.block_size].into_boxed_slice()));
        sh.map.insert(blk, buf.clone());
        sh.clock.push_back(blk);
        self.maybe_evict(&mut sh);
        buf
    }

    /// Second-chance eviction down to 7/8 of the shard's budget.
    fn maybe_evict(&self, sh: &mut Shard) {
        if sh.map.len() <= self.per_shard_cap {
            return;
        }
        let target = self.per_shard_cap * 7 / 8;
        // Every buffer gets at most two looks (one to clear its bit).
        let mut budget = sh.clock.len() * 2;
        while sh.map.len() > target && budget > 0 {
            budget -= 1;
            let Some(blk) = sh.clock.pop_front() else { break };
            let Some(b) = sh.map.get(&blk) else { continue };
            if b.referenced.swap(false, Ordering::Relaxed) {
                sh.clock.push_back(blk);
                continue;
            }
            let evictable = !b.is_dirty() && b.inflight.load(Ordering::Acquire) == 0 && Arc::strong_count(b) == 1;
            if !evictable {
                sh.clock.push_back(blk);
                continue;
            }
            sh.map.remove(&blk);
            sh.epoch += 1;
            self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
        if sh.map.len() > self.per_shard_cap {
            self.stats.over_budget.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records that `buf` was changed in the running checkpoint by the
    /// operation holding `tx` (which proves the gate is held, and is charged
    /// one log credit when the buffer was not dirty yet).
    pub fn mark_dirty(&self, tx: &Tx<'_>, buf: &Arc<Buf>) {
        if !buf.dirty.swap(true, Ordering::AcqRel) {
            self.dirty_count.fetch_add(1, Ordering::Relaxed);
            self.dirty[self.shard(buf.blk)].lock().push(buf.clone());
            tx.charge(1);
        } else {
            tx.touch();
            self.stats.relogged.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Number of dirty buffers (the running checkpoint's size in blocks).
    pub fn dirty_count(&self) -> u64 {
        self.dirty_count.load(Ordering::Relaxed)
    }

    /// Snapshots every dirty buffer for checkpoint `seq`: the images sorted by
    /// block number; the buffers become in flight (pinned in the cache) until
    /// [`BufferCache::unpin`]. Caller holds the transaction gate exclusively.
    pub fn take_dirty(&self, seq: u64) -> Snapshot {
        let n = self.dirty_count() as usize;
        let mut images = Vec::with_capacity(n);
        let mut bufs = Vec::with_capacity(n);
        for shard in &self.dirty {
            for b in shard.lock().drain(..) {
                b.inflight.store(seq, Ordering::Release);
                b.dirty.store(false, Ordering::Release);
                images.push((b.blk, b.data.read().clone()));
                bufs.push(b);
            }
        }
        self.dirty_count.store(0, Ordering::Relaxed);
        images.sort_unstable_by_key(|(b, _)| *b);
        Snapshot { seq, images, bufs }
    }

    /// The snapshot's images are at home: its buffers may be evicted again
    /// (unless a later snapshot took them meanwhile, or they are dirty).
    pub fn unpin(&self, snap: Snapshot) {
        for b in snap.bufs {
            let _ = b.inflight.compare_exchange(snap.seq, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Number of cached buffers.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Checks the cache's invariants (tests and debug builds): every dirty
    /// or in-flight buffer is in the map, the dirty lists hold exactly the
    /// dirty buffers, each once. Panics with what is wrong.
    pub fn debug_check_consistency(&self) {
        let mut dirty_listed = std::collections::HashSet::new();
        for shard in &self.dirty {
            for b in shard.lock().iter() {
                assert!(b.is_dirty(), "block {} is on a dirty list but clean", b.blk);
                assert!(dirty_listed.insert(b.blk), "block {} is on the dirty lists twice", b.blk);
            }
        }
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
        let s = &self.stats;
        put("cache.buffers", self.len() as u64);
        put("cache.dirty_buffers", self.dirty_count());
        put("cache.hits", s.hits.load(Relaxed));
        put("cache.misses", s.misses.load(Relaxed));
        put("cache.evictions", s.evictions.load(Relaxed));
        put("cache.reread_races", s.reread_races.load(Relaxed));
        put("cache.over_budget", s.over_budget.load(Relaxed));
        put("journal.relogged_in_memory", s.relogged.load(Relaxed));
    }
}
