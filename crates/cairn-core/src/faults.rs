//! Fault injection for tests (cargo feature `testing`, which only the
//! engine's own tests and fsck's turn on): the n-th block or inode
//! allocation from now fails with ENOSPC, as a full disk would make it fail
//! at that point. A test runs an operation once to count its allocations,
//! then again from the same image once per allocation, each time failing
//! that one, and checks that the failed operation left nothing half-done
//! (`tests/it/half_done.rs`).

use crate::error::{FsError, Result};
use crate::fs::Fs;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// The allocator's injection point.
#[derive(Default)]
pub struct Faults {
    /// 0: off; n: the n-th allocation from now fails.
    countdown: AtomicU64,
    /// Allocations asked for so far.
    calls: AtomicU64,
}

impl Faults {
    /// Called at the start of every block and inode allocation.
    pub(crate) fn check(&self) -> Result<()> {
        self.calls.fetch_add(1, Relaxed);
        let before = self.countdown.fetch_update(Relaxed, Relaxed, |c| c.checked_sub(1)).unwrap_or(0);
        if before == 1 {
            return Err(FsError::Errno(libc::ENOSPC));
        }
        Ok(())
    }
}

impl Fs {
    /// Makes the `nth` allocation from now (1: the next) fail with ENOSPC;
    /// 0 turns it off.
    pub fn fail_allocation(&self, nth: u64) {
        self.meta.alloc.faults.countdown.store(nth, Relaxed);
    }

    /// Block and inode allocations asked for since mount.
    pub fn allocations(&self) -> u64 {
        self.meta.alloc.faults.calls.load(Relaxed)
    }
}
