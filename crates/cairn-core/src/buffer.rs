//! The metadata buffer cache.
//!
//! Every metadata block the engine reads or changes (superblock, group
//! descriptors, bitmaps, inode-table blocks, tree nodes, xattr blocks) lives
//! here as a [`Buf`]. File data never does: it goes straight between the FUSE
//! request and the image (the kernel's page cache is the data cache).
//!
//! ## Invariants
//! * A block is in the cache at most once, so every change to it is seen by
//!   every reader and by the commit that snapshots it.
//! * A buffer is verified (checksum and bounds, by the caller's verifier) once,
//!   when it is read from the device; a failed verification is not cached.
//! * Dirty buffers are never evicted; they leave the dirty list only when a
//!   commit snapshots them (under the exclusive transaction gate).
//!
//! ## Locking
//! The map is split into shards, each behind its own mutex, so lookups from
//! different threads rarely meet. Each buffer's bytes sit behind their own
//! `RwLock`; writers hold it only while changing bytes. The dirty list is
//! sharded too. Lock order: shard mutex, then buffer data (never the reverse).

use crate::dev::BlockDevice;
use crate::error::Result;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
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
}

impl Buf {
    /// True if changed since the last commit snapshot.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }
}

/// Counters of the cache.
#[derive(Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    /// Changes to buffers already dirty in the running checkpoint: each is a
    /// block image that delayed logging writes once instead of again.
    pub relogged: AtomicU64,
}

/// The sharded buffer cache.
pub struct BufferCache {
    dev: Arc<dyn BlockDevice>,
    block_size: usize,
    shards: Vec<Mutex<HashMap<u64, Arc<Buf>>>>,
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
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            dirty: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            dirty_count: AtomicU64::new(0),
            per_shard_cap: (capacity / SHARDS).max(16),
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
    pub fn get(&self, blk: u64, verify: impl FnOnce(u64, &[u8]) -> Result<()>) -> Result<Arc<Buf>> {
        let s = self.shard(blk);
        if let Some(b) = self.shards[s].lock().get(&blk) {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(b.clone());
        }
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        let mut data = vec![0u8; self.block_size].into_boxed_slice();
        self.dev.read_at(&mut data, blk * self.block_size as u64)?;
        verify(blk, &data)?;
        let buf = Arc::new(Buf { blk, data: RwLock::new(data), dirty: AtomicBool::new(false) });
        let mut map = self.shards[s].lock();
        let b = map.entry(blk).or_insert(buf).clone();
        self.maybe_evict(&mut map);
        Ok(b)
    }

    /// Returns a zero-filled buffer for a block that is being (re)initialised,
    /// without reading it. An existing cached copy is zeroed in place.
    pub fn get_new(&self, blk: u64) -> Arc<Buf> {
        let s = self.shard(blk);
        let mut map = self.shards[s].lock();
        if let Some(b) = map.get(&blk) {
            b.data.write().fill(0);
            return b.clone();
        }
        let buf = Arc::new(Buf {
            blk,
            data: RwLock::new(vec![0u8; self.block_size].into_boxed_slice()),
            dirty: AtomicBool::new(false),
        });
        map.insert(blk, buf.clone());
        self.maybe_evict(&mut map);
        buf
    }

    fn maybe_evict(&self, map: &mut HashMap<u64, Arc<Buf>>) {
        if map.len() <= self.per_shard_cap {
            return;
        }
        let target = self.per_shard_cap * 7 / 8;
        let victims: Vec<u64> = map
            .iter()
            .filter(|(_, b)| !b.is_dirty() && Arc::strong_count(b) == 1)
            .map(|(k, _)| *k)
            .take(map.len().saturating_sub(target))
            .collect();
        for k in victims {
            map.remove(&k);
            self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records that `buf` was changed in the running transaction. Must be
    /// called with the transaction gate held shared, after the change.
    pub fn mark_dirty(&self, buf: &Arc<Buf>) {
        if !buf.dirty.swap(true, Ordering::AcqRel) {
            self.dirty_count.fetch_add(1, Ordering::Relaxed);
            self.dirty[self.shard(buf.blk)].lock().push(buf.clone());
        } else {
            self.stats.relogged.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Number of dirty buffers.
    pub fn dirty_count(&self) -> u64 {
        self.dirty_count.load(Ordering::Relaxed)
    }

    /// Snapshots every dirty buffer as (block, bytes) sorted by block number
    /// and marks them clean. Caller holds the transaction gate exclusively.
    pub fn take_dirty(&self) -> Vec<(u64, Box<[u8]>)> {
        let mut out = Vec::with_capacity(self.dirty_count() as usize);
        for shard in &self.dirty {
            for b in shard.lock().drain(..) {
                b.dirty.store(false, Ordering::Release);
                out.push((b.blk, b.data.read().clone()));
            }
        }
        self.dirty_count.store(0, Ordering::Relaxed);
        out.sort_unstable_by_key(|(b, _)| *b);
        out
    }

    /// Number of cached buffers.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}
