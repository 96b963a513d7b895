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

use super::buddy::Mark;
use super::groups::GroupState;
use super::request::{AllocRequest, Purpose};
use super::Allocator;
use crate::buffer::BufferCache;
use crate::buffer::Change;
use crate::error::Result;
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

/// The blocks one kind of preallocation (per inode, or per locality group)
/// holds, and what became of the blocks it set aside.
#[derive(Default)]
pub struct Held {
    /// Blocks held now.
    pub reserved: AtomicU64,
    /// Blocks set aside, taken into use from a preallocation, and given back.
    pub made: AtomicU64,
    pub used: AtomicU64,
    pub discarded: AtomicU64,
}

/// Every inode's preallocation.
pub struct Preallocs {
    shards: Vec<Mutex<HashMap<u64, Prealloc>>>,
    pub held: Held,
}

impl Default for Preallocs {
    fn default() -> Self {
        Preallocs { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(), held: Held::default() }
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
        runs_in_range(&self.shards, start, end)
    }

    pub fn count(&self) -> usize {
        run_count(&self.shards)
    }
}

/// What a lock of either kind of preallocation guards: runs of held blocks
/// (`(pblk, len)`), one per inode here, a locality group's list in
/// `group_prealloc`.
pub(super) trait Runs {
    fn runs(&self) -> impl Iterator<Item = (u64, u32)> + '_;
}

impl Runs for HashMap<u64, Prealloc> {
    fn runs(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.values().map(|p| (p.pblk, p.len))
    }
}

/// The runs under `locks` that start in blocks `[start, end)`: (offset from
/// `start`, len), for a buddy loaded from disk to mark.
pub(super) fn runs_in_range<R: Runs>(locks: &[Mutex<R>], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for lock in locks {
        let runs = lock.lock();
        v.extend(
            runs.runs()
                .filter(|&(pblk, _)| pblk >= start && pblk < end)
                .map(|(pblk, len)| (pblk - start, u64::from(len))),
        );
    }
    v
}

/// How many runs are held under `locks` (`cairn stats`).
pub(super) fn run_count<R: Runs>(locks: &[Mutex<R>]) -> usize {
    locks.iter().map(|l| l.lock().runs().count()).sum()
}

impl Allocator {
    /// Serves `req` from its inode's preallocation if that continues at
    /// `req.lblk`; discards a preallocation that does not.
    pub(super) fn take_prealloc(&self, tx: &dyn Change, req: &AllocRequest) -> Result<Option<(u64, u32)>> {
        if req.purpose != Purpose::Data || req.ino == 0 {
            return Ok(None);
        }
        let Some(pa) = self.pa.peek(req.ino) else { return Ok(None) };
        if pa.lblk != req.lblk {
            self.discard_prealloc(tx.bufs(), req.ino);
            return Ok(None);
        }
        let g = self.geo().group_of_block(pa.pblk);
        let mut st = self.lock_group(g);
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
        self.use_held(tx, &mut st, start, n, req, &self.pa.held)?;
        Ok(Some((start, n as u32)))
    }

    /// After `req` took `[off, off+n)` of group `g` (lock held, buddy
    /// loaded): reserves the free blocks behind it, up to the search length.
    pub(super) fn make_prealloc(&self, g: u64, st: &mut GroupState, off: u64, n: u64, req: &AllocRequest) {
        if req.purpose != Purpose::Data || req.ino == 0 || u64::from(req.search) <= n {
            return;
        }
        let r = self.room_behind(st, off, n, req.search);
        if r == 0 {
            return;
        }
        {
            let mut map = self.pa.map(req.ino).lock();
            if map.len() >= MAX_PREALLOCS / SHARDS || map.contains_key(&req.ino) {
                return;
            }
            let pblk = self.geo().group_start(g) + off + n;
            map.insert(req.ino, Prealloc { lblk: req.lblk + n, pblk, len: r as u32 });
        }
        self.hold(g, st, off + n, r, &self.pa.held);
    }

    /// Gives inode `ino`'s preallocation, if any, back to the buddy.
    pub fn discard_prealloc(&self, bufs: &BufferCache, ino: u64) {
        let Some(pa) = self.pa.peek(ino) else { return };
        let g = self.geo().group_of_block(pa.pblk);
        let mut st = self.lock_group(g);
        let pa = {
            let mut map = self.pa.map(ino).lock();
            match map.get(&ino) {
                Some(p) if self.geo().group_of_block(p.pblk) == g => map.remove(&ino).expect("present"),
                _ => return,
            }
        };
        self.release_held(bufs, g, &mut st, pa.pblk, u64::from(pa.len), &self.pa.held);
    }

    /// Discards every inode's preallocation (each commit).
    pub fn discard_inode_preallocs(&self, bufs: &BufferCache) {
        let inos: Vec<u64> = self.pa.shards.iter().flat_map(|s| s.lock().keys().copied().collect::<Vec<_>>()).collect();
        for ino in inos {
            self.discard_prealloc(bufs, ino);
        }
    }

    /// How many of the free blocks right behind `[off, off+n)` of a group
    /// (lock held, buddy loaded) a preallocation searching for `search`
    /// blocks in all may hold: never into the metadata reserve, since data
    /// taken from a preallocation is not checked against it again.
    pub(super) fn room_behind(&self, st: &GroupState, off: u64, n: u64, search: u32) -> u64 {
        let room = self.alloc_free.load(Relaxed).saturating_sub(self.reserve + n);
        st.buddy.as_ref().expect("loaded by the caller").run_at(off + n, u64::from(search).saturating_sub(n).min(room))
    }

    /// Takes blocks `[at, at+r)` of group `g` (lock held, buddy loaded) out
    /// of the buddy, held by a preallocation counted in `held`.
    pub(super) fn hold(&self, g: u64, st: &mut GroupState, at: u64, r: u64, held: &Held) {
        st.buddy.as_mut().expect("loaded by the caller").mark(at, r, Mark::Used);
        self.groups.get(g).free.fetch_sub(r as u32, Relaxed);
        self.alloc_free.fetch_sub(r, Relaxed);
        held.reserved.fetch_add(r, Relaxed);
        held.made.fetch_add(r, Relaxed);
        self.summarise(g, st);
    }

    /// Takes `n` held blocks from `pblk` into use on disk (the caller holds
    /// their group's lock as `st` and has taken them off their
    /// preallocation).
    pub(super) fn use_held(
        &self,
        tx: &dyn Change,
        st: &mut GroupState,
        pblk: u64,
        n: u64,
        req: &AllocRequest,
        held: &Held,
    ) -> Result<()> {
        held.reserved.fetch_sub(n, Relaxed);
        held.used.fetch_add(n, Relaxed);
        let g = self.geo().group_of_block(pblk);
        self.mark_in_use_on_disk(tx, g, st, pblk - self.geo().group_start(g), n, req)
    }

    /// Gives `r` held blocks from `pblk` of group `g` back to the buddy (the
    /// caller holds the group's lock and has taken them off their
    /// preallocation).
    pub(super) fn release_held(&self, bufs: &BufferCache, g: u64, st: &mut GroupState, pblk: u64, r: u64, held: &Held) {
        held.reserved.fetch_sub(r, Relaxed);
        held.discarded.fetch_add(r, Relaxed);
        self.return_to_buddy(bufs, g, st, &[(pblk - self.geo().group_start(g), r)]);
    }
}
