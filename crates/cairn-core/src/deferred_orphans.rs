//! Deferred orphan-list inserts: an unlinked file the kernel still holds
//! goes on the orphan list at the commit, not in its unlink.
//!
//! ## Why
//! Through FUSE the kernel nearly always holds a file when its last link
//! goes, so every unlink put the inode on the orphan list (a B+tree insert)
//! and the FORGET that follows a few microseconds later took it off again
//! (a B+tree remove): about a third of the engine's time in an `rm -rf`.
//! The list exists for crashes only: the next mount frees what it names.
//! A crash can only ever expose a *durable checkpoint*, and a checkpoint is
//! closed only by the commit's swap, under the closed gate (`tx`). So the
//! entry need not exist before the swap of the checkpoint that holds the
//! unlink — and if the file is freed before that swap, never.
//!
//! ## How
//! [`DeferredOrphans`] is a small set of inode numbers in memory, with the
//! log credits set aside for their inserts. An unlink (or a truncate that leaves
//! work for the reaper) marks the inode `INODE_FLAG_ORPHAN` as before, and
//! adds its number here instead of inserting it into the tree
//! (`inode_store::orphan_add`); credits for the insert ([`CREDITS_EACH`], and
//! a base for the set) are reserved aside from the log's room, as a
//! handle's would be, so the invariant of the
//! transaction manager (dirty buffers + reservations ≤ the record's limit)
//! holds when the swap makes the inserts. Freeing the inode while it is
//! still here (`orphan_remove`) only takes it out and gives the credits
//! back: no tree work at all. The swap inserts whatever is left into the
//! tree, in the checkpoint it closes, and releases the credits
//! ([`crate::tx::TxManager`]'s swap hook, `inode_store::flush_deferred_orphans`).
//!
//! ## Invariants
//! * Every checkpoint that becomes durable names, in its orphan tree, every
//!   inode that is unlinked-but-allocated (or mid-truncate) in it: the swap
//!   flushes the set before the checkpoint is closed, and no handle runs
//!   then (the gate is closed), so no add or free can come between.
//! * An inode is here or in the tree, never both: an add finds the flag
//!   already set and does nothing; a flush moves every entry to the tree.
//! * At most [`MAX_DEFERRED`] entries, whose credits come to at most a
//!   quarter of a checkpoint's limit (so the set never crowds out the
//!   handles' own reservations), and only while the log has room for them:
//!   otherwise the insert is made at once, as before. The
//!   swap's inserts allocate from the orphan list's critical reserve
//!   (`alloc`), like the direct ones.
//! * Mount starts with the set empty; unmount frees what it holds with the
//!   orphan list (`InodeStore::process_orphans` reads both).
//!
//! ## Locking
//! The set's mutex is a leaf, held for a map operation only (the flush
//! takes the whole set out first, then inserts).
//!
//! A SETATTR of times alone on an unlinked file (the kernel's write-back
//! cache sends its new ctime after every unlink) is likewise set in core
//! with no transaction (`FileIo::setattr`): nothing of such an inode outlives
//! a crash.
//!
//! The deferral is always on: `-o defer_orphans=0`, every insert at once,
//! measured slower (bench/results/2026-11-28-floor-orphans) and was
//! retired. Counters: `orphans.deferred`,
//! `orphans.cancelled` (freed before any commit), `orphans.flushed`
//! (inserted by a swap), `orphans.direct` (inserted at once), `orphans.times_in_core`.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Most inodes awaiting their insert at one time.
pub const MAX_DEFERRED: usize = 256;

/// Credits set aside for each waiting insert: the leaf it lands in, a new
/// leaf if that one splits, the split's allocation (bitmap and group
/// descriptor) and the parent's new entry. A split above the leaves needs
/// its node full, which sorted inserts into one tree reach a few times at
/// most: the set's *base*, two whole inserts' worth, set aside once while
/// the set is not empty, covers them (see `Fs::orphan_add`).
pub const CREDITS_EACH: u64 = 5;

/// The inodes awaiting their insert and the credits set aside for them
/// (base included).
#[derive(Default)]
struct Waiting {
    inos: foldhash::HashSet<u64>,
    aside: u64,
}

/// The set of deferred orphan-list inserts (see the module essay).
#[derive(Default)]
pub struct DeferredOrphans {
    set: Mutex<Waiting>,
    pub deferred: AtomicU64,
    pub cancelled: AtomicU64,
    pub flushed: AtomicU64,
    pub direct: AtomicU64,
    /// Flushes that dirtied more buffers than their credits (a bug if > 0).
    pub overruns: AtomicU64,
    /// SETATTRs of times alone on unlinked files, set in core with no
    /// transaction (`FileIo::setattr`).
    pub times_in_core: AtomicU64,
}

impl DeferredOrphans {
    /// An empty set.
    pub fn new() -> DeferredOrphans {
        DeferredOrphans::default()
    }

    /// Adds `ino`, setting its credits aside by `reserve` (called under the
    /// set's lock; false: no room in the log): [`CREDITS_EACH`], and `base`
    /// too when the set was empty. False when the set is full
    /// (`MAX_DEFERRED` entries, or `cap` credits set aside in all), or
    /// `reserve` refused: the caller inserts at once.
    pub fn add(&self, ino: u64, base: u64, cap: u64, reserve: impl FnOnce(u64) -> bool) -> bool {
        let mut w = self.set.lock();
        let credits = if w.inos.is_empty() { base + CREDITS_EACH } else { CREDITS_EACH };
        if w.inos.len() >= MAX_DEFERRED || w.aside + credits > cap || w.inos.contains(&ino) || !reserve(credits) {
            return false;
        }
        w.inos.insert(ino);
        w.aside += credits;
        self.deferred.fetch_add(1, Relaxed);
        true
    }

    /// Takes `ino` out if it is here: the credits the caller gives back
    /// (its own, and the base with the last one).
    pub fn cancel(&self, ino: u64) -> Option<u64> {
        let mut w = self.set.lock();
        if !w.inos.remove(&ino) {
            return None;
        }
        self.cancelled.fetch_add(1, Relaxed);
        let credits = if w.inos.is_empty() { w.aside } else { CREDITS_EACH };
        w.aside -= credits;
        Some(credits)
    }

    /// Empties the set: its inodes (ascending) and their credits in all.
    pub fn take(&self) -> (Vec<u64>, u64) {
        let w = std::mem::take(&mut *self.set.lock());
        let mut inos: Vec<u64> = w.inos.into_iter().collect();
        inos.sort_unstable();
        (inos, w.aside)
    }

    /// Puts back, with `credits` still set aside for them, inserts a flush
    /// could not make (it failed; the next swap tries again).
    pub fn restore(&self, inos: &[u64], credits: u64) {
        let mut w = self.set.lock();
        w.inos.extend(inos.iter().copied());
        w.aside += credits;
    }

    /// The inodes awaiting their insert now.
    pub fn inos(&self) -> Vec<u64> {
        self.set.lock().inos.iter().copied().collect()
    }

    /// Counters for `cairn stats`.
    pub fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        put("orphans.deferred", self.deferred.load(Relaxed));
        put("orphans.cancelled", self.cancelled.load(Relaxed));
        put("orphans.flushed", self.flushed.load(Relaxed));
        put("orphans.direct", self.direct.load(Relaxed));
        put("orphans.flush_overruns", self.overruns.load(Relaxed));
        let w = self.set.lock();
        put("orphans.waiting", w.inos.len() as u64);
        put("orphans.credits_aside", w.aside);
        drop(w);
        put("orphans.times_in_core", self.times_in_core.load(Relaxed));
    }
}
