//! The per-inode I/O locks: one reader-writer lock per inode, striped.
//!
//! Journaled writes, truncates, fallocate and the stepwise frees of one
//! inode take it exclusively across all their handles; fast-path
//! overwrites take it shared (see `overwrite`), as ext4 holds `i_rwsem`.
//!
//! ## Waiting
//! The kernel keeps several write-backs of one file in flight, so the FUSE
//! threads serving them queue here, each for the whole of the other's
//! journaled write (hundreds of microseconds for a MiB). The locks are the
//! standard library's (futex-based: a short busy spin, then sleep), not
//! `parking_lot`'s, whose waiters spin and then call `sched_yield` up to
//! seven times before they sleep: on two CPUs each yield handed the CPU to
//! another task for about a millisecond (issue 53's `strace -c`: 72
//! `sched_yield`s per 256 MiB written). The lock holds no data (`()`), so a
//! panic while it is held poisons nothing: a poisoned lock is taken anyway.
//!
//! ## Invariant
//! The locks are striped (`ino % IO_LOCKS`), so the reaper, which takes the
//! I/O lock of every inode it frees, may need the very stripe a thread
//! holds: a thread holding one must never wait for the reaper
//! ([`crate::engine::Engine::wait_for_reaper`] declines; [`holds_io_lock`]
//! tells). Each lock is taken before its operation's transaction handle.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Stripes of the per-inode I/O lock.
const IO_LOCKS: usize = 256;

thread_local! {
    /// I/O locks the calling thread holds (see [`IoGuard`]).
    static IO_LOCKS_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A held I/O lock (see the module essay).
pub(crate) struct IoGuard<G> {
    _guard: G,
}

impl<G> IoGuard<G> {
    fn new(guard: G) -> IoGuard<G> {
        IO_LOCKS_HELD.with(|n| n.set(n.get() + 1));
        IoGuard { _guard: guard }
    }
}

impl<G> Drop for IoGuard<G> {
    fn drop(&mut self) {
        IO_LOCKS_HELD.with(|n| n.set(n.get() - 1));
    }
}

/// Whether the calling thread holds an I/O lock.
pub(crate) fn holds_io_lock() -> bool {
    IO_LOCKS_HELD.with(|n| n.get() > 0)
}

/// The striped I/O locks of a mount.
pub(crate) struct IoLocks {
    stripes: Vec<RwLock<()>>,
}

impl IoLocks {
    pub(crate) fn new() -> IoLocks {
        IoLocks { stripes: (0..IO_LOCKS).map(|_| RwLock::new(())).collect() }
    }

    /// The I/O lock of inode `ino`, exclusive (serialises journaled writes,
    /// truncates, fallocate and stepwise frees of one inode across their
    /// handles, and keeps fast-path overwrites out meanwhile).
    pub(crate) fn exclusive(&self, ino: u64) -> IoGuard<RwLockWriteGuard<'_, ()>> {
        IoGuard::new(self.stripes[(ino as usize) % IO_LOCKS].write().unwrap_or_else(PoisonError::into_inner))
    }

    /// The I/O lock of inode `ino`, shared (fast-path overwrites).
    pub(crate) fn shared(&self, ino: u64) -> IoGuard<RwLockReadGuard<'_, ()>> {
        IoGuard::new(self.stripes[(ino as usize) % IO_LOCKS].read().unwrap_or_else(PoisonError::into_inner))
    }
}
