//! Per-inode preallocations (ext4's inode PAs): the rest of a chunk found
//! for a streaming file's size class, held for that file's next blocks.
//!
//! When a normalized data request (search longer than want) is served, the
//! free blocks right after what it took, up to the search length and within
//! the group, are marked in use in the buddy — not on disk — and recorded as
//! the inode's preallocation: file block `lblk` onwards maps to `pblk`
//! onwards, `len` blocks. The file's next request that starts at `lblk`
//! takes its blocks from there (they become in use on disk then); a request
//! anywhere else, a truncate, the kernel forgetting the inode, a full file
//! system, every commit and unmount give the rest back to the buddy
//! (*discard*). ext4 discards at the file's last close; cairn hears of no
//! close (it answers OPEN with ENOSYS), so a commit bounds how long free
//! space is held: a stream that goes on finds the blocks behind its last
//! one free again, at its goal, and makes a new preallocation there.
//!
//! ## Invariants
//! - A preallocation's blocks are free on disk and in use in its group's
//!   buddy; a buddy loaded again from disk marks them (`load_buddy`).
//! - `reserved` is the sum of the preallocations' lengths, and
//!   free on disk = allocatable + pending + reserved.
//! - Nothing of it is durable: a crash or unmount simply forgets it.
//!
//! ## Locking
//! A preallocation is changed with its group's lock held, and a map shard's
//! lock is taken inside a group lock, never the other way round: a caller
//! peeks at the map, locks the group, then re-checks. The map is sharded by
//! inode number, so the look-ups on every data allocation and every FORGET
//! do not meet on one lock.

use super::groups::GroupState;
use super::request::{AllocRequest, Purpose};
use super::Allocator;
use crate::buffer::BufferCache;
use crate::error::Result;
use crate::journal::Tx;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Preallocations kept at most (beyond this, new ones are not made).
const MAX_PREALLOCS: usize = 4096;
/// Shards of the inode → preallocation map.
const SHARDS: usize = 64;

/// One inode's preallocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prealloc {
    /// Next file block it serves.
    pub lblk: u64,
    /// Its physical block.
    pub pblk: u64,
    pub len: u32,
}

/// Every inode's preallocation.
pub struct Preallocs {
    shards: Vec<Mutex<HashMap<u64, Prealloc>>>,
    /// Blocks held by preallocations.
    pub reserved: AtomicU64,
    /// Blocks reserved, used from a preallocation, and given back.
    pub made: AtomicU64,
    pub used: AtomicU64,
    pub discarded: AtomicU64,
}

impl Default for Preallocs {
    fn default() -> Self {
        Preallocs {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            reserved: AtomicU64::new(0),
            made: AtomicU64::new(0),
            used: AtomicU64::new(0),
            discarded: AtomicU64::new(0),
        }
    }
}

impl Preallocs {
    /// The shard that holds inode `ino`'s preallocation.
    fn map(&self, ino: u64) -> &Mutex<HashMap<u64, Prealloc>> {
        &self.shards[ino as usize % SHARDS]
    }

    fn peek(&self, ino: u64) -> Option<Prealloc> {
        self.map(ino).lock().get(&ino).copied()
    }

    /// Preallocations in group blocks `[start, end)`: (offset from `start`, len).
    pub fn in_range(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        for shard in &self.shards {
            let map = shard.lock();
            v.extend(
                map.values().filter(|p| p.pblk >= start && p.pblk < end).map(|p| (p.pblk - start, u64::from(p.len))),
            );
        }
        v
    }

    pub fn count(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

impl Allocator {
    /// Serves `req` from its inode's preallocation if that continues at
    /// `req.lblk`; discards a preallocation that does not.
    pub(super) fn take_prealloc(&self, tx: &Tx<'_>, req: &AllocRequest) -> Result<Option<(u64, u32)>> {
        if req.purpose != Purpose::Data || req.ino == 0 {
            return Ok(None);
        }
        let Some(pa) = self.pa.peek(req.ino) else { return Ok(None) };
        if pa.lblk != req.lblk {
            self.discard_prealloc(&tx.bufs, req.ino);
            return Ok(None);
        }
        let g = self.geo.group_of_block(pa.pblk);
        let _st = self.lock_group(g);
        let (start, n) = {
            let mut map = self.pa.map(req.ino).lock();
            let Some(p) = map.get_mut(&req.ino) else { return Ok(None) };
            if *p != pa {
                return Ok(None);
            }
            let n = p.len.min(req.want);
            let start = p.pblk;
            p.lblk += u64::from(n);
            p.pblk += u64::from(n);
            p.len -= n;
            if p.len == 0 {
                map.remove(&req.ino);
            }
            (start, u64::from(n))
        };
        self.pa.reserved.fetch_sub(n, Relaxed);
        self.pa.used.fetch_add(n, Relaxed);
        self.mark_in_use_on_disk(tx, g, start - self.geo.group_start(g), n, req)?;
        Ok(Some((start, n as u32)))
    }

    /// After `req` took `[off, off+n)` of group `g` (lock held, buddy
    /// loaded): reserves the free blocks behind it, up to the search length.
    pub(super) fn make_prealloc(&self, g: u64, st: &mut GroupState, off: u64, n: u64, req: &AllocRequest) {
        if req.purpose != Purpose::Data || req.ino == 0 || u64::from(req.search) <= n {
            return;
        }
        let b = st.buddy.as_mut().expect("loaded by the caller");
        // Never into the metadata reserve: data taken from a preallocation
        // is not checked against it again.
        let room = self.alloc_free.load(Relaxed).saturating_sub(self.reserve + n);
        let r = b.run_at(off + n, (u64::from(req.search) - n).min(room));
        if r == 0 {
            return;
        }
        {
            let mut map = self.pa.map(req.ino).lock();
            if map.len() >= MAX_PREALLOCS / SHARDS || map.contains_key(&req.ino) {
                return;
            }
            let pblk = self.geo.group_start(g) + off + n;
            map.insert(req.ino, Prealloc { lblk: req.lblk + n, pblk, len: r as u32 });
        }
        b.mark(off + n, r, true);
        self.groups[g as usize].free.fetch_sub(r as u32, Relaxed);
        self.alloc_free.fetch_sub(r, Relaxed);
        self.pa.reserved.fetch_add(r, Relaxed);
        self.pa.made.fetch_add(r, Relaxed);
        self.summarise(g, st);
    }

    /// Gives inode `ino`'s preallocation, if any, back to the buddy.
    pub fn discard_prealloc(&self, bufs: &BufferCache, ino: u64) {
        let Some(pa) = self.pa.peek(ino) else { return };
        let g = self.geo.group_of_block(pa.pblk);
        let mut st = self.lock_group(g);
        let pa = {
            let mut map = self.pa.map(ino).lock();
            match map.get(&ino) {
                Some(p) if self.geo.group_of_block(p.pblk) == g => map.remove(&ino).expect("present"),
                _ => return,
            }
        };
        let r = u64::from(pa.len);
        self.pa.reserved.fetch_sub(r, Relaxed);
        self.pa.discarded.fetch_add(r, Relaxed);
        self.return_to_buddy(bufs, g, &mut st, &[(pa.pblk - self.geo.group_start(g), r)]);
    }

    /// Discards every inode's preallocation (each commit).
    pub fn discard_inode_preallocs(&self, bufs: &BufferCache) {
        let inos: Vec<u64> = self.pa.shards.iter().flat_map(|s| s.lock().keys().copied().collect::<Vec<_>>()).collect();
        for ino in inos {
            self.discard_prealloc(bufs, ino);
        }
    }
}
