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
//! [`DeferredOrphans`] is a small set in memory: inode number → the log
//! credits set aside for its insert. An unlink (or a truncate that leaves
//! work for the reaper) marks the inode `INODE_FLAG_ORPHAN` as before, and
//! adds its number here instead of inserting it into the tree
//! (`lifecycle::orphan_add`); the credits of the insert are reserved aside
//! from the log's room, as a handle's would be, so the invariant of the
//! transaction manager (dirty buffers + reservations ≤ the record's limit)
//! holds when the swap makes the inserts. Freeing the inode while it is
//! still here (`orphan_remove`) only takes it out and gives the credits
//! back: no tree work at all. The swap inserts whatever is left into the
//! tree, in the checkpoint it closes, and releases the credits
//! ([`crate::tx::TxManager`]'s swap hook, `lifecycle::flush_deferred_orphans`).
//!
//! ## Invariants
//! * Every checkpoint that becomes durable names, in its orphan tree, every
//!   inode that is unlinked-but-allocated (or mid-truncate) in it: the swap
//!   flushes the set before the checkpoint is closed, and no handle runs
//!   then (the gate is closed), so no add or free can come between.
//! * An inode is here or in the tree, never both: an add finds the flag
//!   already set and does nothing; a flush moves every entry to the tree.
//! * At most [`MAX_DEFERRED`] entries, whose credits come to at most an
//!   eighth of a checkpoint's limit (so the set never crowds out the
//!   handles' own reservations), and only while the log has room for them:
//!   otherwise the insert is made at once, as before. The
//!   swap's inserts allocate from the orphan list's critical reserve
//!   (`alloc`), like the direct ones.
//! * Mount starts with the set empty; unmount frees what it holds with the
//!   orphan list (`Fs::process_orphans` reads both).
//!
//! ## Locking
//! The set's mutex is a leaf, held for a map operation only (the flush
//! takes the whole set out first, then inserts).
//!
//! A SETATTR of times alone on an unlinked file (the kernel's write-back
//! cache sends its new ctime after every unlink) is likewise set in core
//! with no transaction (`Fs::setattr`): nothing of such an inode outlives
//! a crash.
//!
//! `-o defer_orphans=0` turns the deferral off (every insert at once): the
//! measurement's other side. Counters: `orphans.deferred`,
//! `orphans.cancelled` (freed before any commit), `orphans.flushed`
//! (inserted by a swap), `orphans.direct` (inserted at once), `orphans.times_in_core`.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Most inodes awaiting their insert at one time.
pub const MAX_DEFERRED: usize = 256;

/// The inodes awaiting their insert, with the credits set aside for each,
/// and those credits in all.
#[derive(Default)]
struct Waiting {
    inos: foldhash::HashMap<u64, u64>,
    aside: u64,
}

/// The set of deferred orphan-list inserts (see the module essay).
pub struct DeferredOrphans {
    enabled: bool,
    set: Mutex<Waiting>,
    pub deferred: AtomicU64,
    pub cancelled: AtomicU64,
    pub flushed: AtomicU64,
    pub direct: AtomicU64,
    /// SETATTRs of times alone on unlinked files, set in core with no
    /// transaction (`Fs::setattr`).
    pub times_in_core: AtomicU64,
}

impl DeferredOrphans {
    /// A set; `enabled` false (`-o defer_orphans=0`): nothing is deferred.
    pub fn new(enabled: bool) -> DeferredOrphans {
        DeferredOrphans {
            enabled,
            set: Mutex::new(Default::default()),
            deferred: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            direct: AtomicU64::new(0),
            times_in_core: AtomicU64::new(0),
        }
    }

    /// Adds `ino` with `credits` set aside by `reserve` (called under the
    /// set's lock; false: no room in the log). False when the set is off,
    /// full (`MAX_DEFERRED` entries, or `cap` credits set aside in all), or
    /// `reserve` refused: the caller inserts at once.
    pub fn add(&self, ino: u64, credits: u64, cap: u64, reserve: impl FnOnce(u64) -> bool) -> bool {
        if !self.enabled {
            return false;
        }
        let mut w = self.set.lock();
        if w.inos.len() >= MAX_DEFERRED || w.aside + credits > cap || w.inos.contains_key(&ino) || !reserve(credits) {
            return false;
        }
        w.inos.insert(ino, credits);
        w.aside += credits;
        self.deferred.fetch_add(1, Relaxed);
        true
    }

    /// Takes `ino` out if it is here: the credits set aside for it, which
    /// the caller gives back.
    pub fn cancel(&self, ino: u64) -> Option<u64> {
        let mut w = self.set.lock();
        let c = w.inos.remove(&ino);
        if let Some(n) = c {
            w.aside -= n;
            self.cancelled.fetch_add(1, Relaxed);
        }
        c
    }

    /// Empties the set: its inodes (ascending) and their credits in all.
    pub fn take(&self) -> (Vec<u64>, u64) {
        let w = std::mem::take(&mut *self.set.lock());
        let mut inos: Vec<u64> = w.inos.into_keys().collect();
        inos.sort_unstable();
        (inos, w.aside)
    }

    /// Puts back entries a flush could not insert (it failed; the next
    /// swap tries again).
    pub fn restore(&self, entries: impl IntoIterator<Item = (u64, u64)>) {
        let mut w = self.set.lock();
        for (ino, credits) in entries {
            w.inos.insert(ino, credits);
            w.aside += credits;
        }
    }

    /// The inodes awaiting their insert now.
    pub fn inos(&self) -> Vec<u64> {
        self.set.lock().inos.keys().copied().collect()
    }

    /// Counters for `cairn stats`.
    pub fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        put("orphans.deferred", self.deferred.load(Relaxed));
        put("orphans.cancelled", self.cancelled.load(Relaxed));
        put("orphans.flushed", self.flushed.load(Relaxed));
        put("orphans.direct", self.direct.load(Relaxed));
        let w = self.set.lock();
        put("orphans.waiting", w.inos.len() as u64);
        put("orphans.credits_aside", w.aside);
        drop(w);
        put("orphans.times_in_core", self.times_in_core.load(Relaxed));
    }
}
