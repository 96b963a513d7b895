//! Locality-group preallocations (ext4's `s_locality_groups`): the small
//! files written by one thread packed side by side in runs set aside for
//! them.
//!
//! A data request for a *small* file (one whose end stays within the stream
//! threshold, 64 KiB: see `request`) does not search near its inode for
//! exactly what it wants. It is served from a run of its *locality group*:
//! free blocks marked in use in the buddy only, from whose start each small
//! file takes what it wants. ext4 has one locality group per CPU; cairn has
//! one per serving thread (as many as CPUs, threads assigned round-robin),
//! which under FUSE over io_uring comes to the same, since a CPU's queue
//! threads are pinned to it. When no run of the group holds enough, the
//! request searches for `mb_group_prealloc` blocks (ext4's default, 512:
//! 2 MiB of 4 KiB blocks), takes its own blocks from the start of what it
//! finds and files the rest as a new run. So:
//! - the small files written one after another lie next to each other on
//!   the device, in the order they were written;
//! - serving a small file is a pointer bump under one short lock, not a
//!   group scan;
//! - threads writing small files at once fill different runs, so they do
//!   not compete for the same group's free extents.
//!
//! A file that is appended to in small steps asks for the block after its
//! last one, and the run closest to that goal is chosen: the file stays
//! contiguous while nothing else took from its run in between.
//!
//! `-o mb_group_prealloc=0` turns locality groups off: small files then
//! search near their inode for exactly what they want (best fit).
//!
//! ## Invariants
//! - As for per-inode preallocations (`prealloc`): a run's blocks are free on
//!   disk and in use in their group's buddy; a buddy loaded again marks
//!   them; `reserved` is the sum of the runs' lengths; a crash forgets them.
//! - A run never crosses a block group.
//! - A locality group keeps about `MAX_RUNS` runs: before a new one is
//!   searched for, the shortest beyond that go back.
//! - Unlike per-inode preallocations they outlive commits (every small file
//!   may use them, so holding them keeps nothing from anyone); a full file
//!   system and unmount give them back.
//!
//! ## Locking
//! One mutex per locality group, taken inside a block group's lock, never the
//! other way round: a caller picks a run under the locality group's lock,
//! drops it, locks the run's block group, then re-checks the run. A run
//! leaves its list only under its block group's lock, so a buddy loaded in
//! between still finds it there and marks it.

use super::groups::GroupState;
use super::prealloc::{run_count, runs_in_range, Held, Runs};
use super::request::AllocRequest;
use super::Allocator;
use crate::buffer::BufferCache;
use crate::buffer::Change;
use crate::error::Result;
use crate::thread_index::thread_index;
use parking_lot::Mutex;

/// Runs a locality group keeps at most (ext4 trims its lists beyond 8).
const MAX_RUNS: usize = 8;

/// ext4's `mb_group_prealloc` default, in blocks.
pub const DEFAULT_GROUP_PREALLOC: u32 = 512;

/// A run of blocks held for small files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    pblk: u64,
    len: u32,
}

/// Every locality group's runs.
pub struct LocalityGroups {
    groups: Vec<Mutex<Vec<Run>>>,
    /// Blocks a new run is searched for (`-o mb_group_prealloc`; 0: off).
    pub chunk: u32,
    pub held: Held,
}

impl LocalityGroups {
    pub fn new(chunk: u32) -> LocalityGroups {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        LocalityGroups { groups: (0..n).map(|_| Mutex::new(Vec::new())).collect(), chunk, held: Held::default() }
    }

    /// The calling thread's locality group.
    fn mine(&self) -> &Mutex<Vec<Run>> {
        &self.groups[thread_index() % self.groups.len()]
    }

    /// Runs in blocks `[start, end)`: (offset from `start`, len).
    pub fn in_range(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        runs_in_range(&self.groups, start, end)
    }

    pub fn count(&self) -> usize {
        run_count(&self.groups)
    }
}

impl Runs for Vec<Run> {
    fn runs(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.iter().map(|r| (r.pblk, r.len))
    }
}

impl Allocator {
    /// Serves small-file request `req` from the calling thread's locality
    /// group: the run closest to the goal that holds all it wants.
    pub(super) fn take_group_prealloc(&self, tx: &dyn Change, req: &AllocRequest) -> Result<Option<(u64, u32)>> {
        let lg = self.lg.mine();
        let want = req.want;
        let pick = lg.lock().iter().filter(|r| r.len >= want).min_by_key(|r| r.pblk.abs_diff(req.goal)).copied();
        let Some(run) = pick else { return Ok(None) };
        let g = self.geo().group_of_block(run.pblk);
        let mut st = self.lock_group(g);
        {
            let mut runs = lg.lock();
            // Another thread of the same locality group may have moved it.
            let Some(i) = runs.iter().position(|r| *r == run) else { return Ok(None) };
            let r = &mut runs[i];
            r.pblk += u64::from(want);
            r.len -= want;
            if r.len == 0 {
                runs.swap_remove(i);
            }
        }
        self.use_held(tx, &mut st, run.pblk, u64::from(want), req, &self.lg.held)?;
        Ok(Some((run.pblk, want)))
    }

    /// After small-file request `req` took `[off, off+n)` of group `g` (lock
    /// held, buddy loaded): files the free blocks behind it, up to the
    /// search length, as a run of the calling thread's locality group.
    pub(super) fn make_group_prealloc(&self, g: u64, st: &mut GroupState, off: u64, n: u64, req: &AllocRequest) {
        let r = self.room_behind(st, off, n, req.search);
        if r == 0 {
            return;
        }
        self.hold(g, st, off + n, r, &self.lg.held);
        let run = Run { pblk: self.geo().group_start(g) + off + n, len: r as u32 };
        self.lg.mine().lock().push(run);
    }

    /// Makes room for a new run in the calling thread's locality group:
    /// beyond `MAX_RUNS`, its shortest runs go back to the buddy. Called
    /// with no group lock held.
    pub(super) fn trim_group_preallocs(&self, bufs: &BufferCache) {
        let lg = self.lg.mine();
        loop {
            let shortest = {
                let runs = lg.lock();
                if runs.len() < MAX_RUNS {
                    return;
                }
                runs.iter().min_by_key(|r| r.len).copied().expect("not empty")
            };
            self.discard_run(bufs, lg, shortest);
        }
    }

    /// Gives `run` of locality group `lg` back to the buddy, if it is still
    /// there: it leaves the list only under its block group's lock, so a
    /// buddy loaded meanwhile still marks it.
    fn discard_run(&self, bufs: &BufferCache, lg: &Mutex<Vec<Run>>, run: Run) {
        let g = self.geo().group_of_block(run.pblk);
        let mut st = self.lock_group(g);
        {
            let mut runs = lg.lock();
            let Some(i) = runs.iter().position(|r| *r == run) else { return };
            runs.swap_remove(i);
        }
        self.release_held(bufs, g, &mut st, run.pblk, u64::from(run.len), &self.lg.held);
    }

    /// Gives every locality group's runs back to the buddy (a full file
    /// system, unmount).
    pub fn discard_group_preallocs(&self, bufs: &BufferCache) {
        for lg in &self.lg.groups {
            let runs = lg.lock().clone();
            for run in runs {
                self.discard_run(bufs, lg, run);
            }
        }
    }
}
