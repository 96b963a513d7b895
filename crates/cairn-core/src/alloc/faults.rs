//! The allocator's fault injection point (cargo feature `testing`): the
//! n-th block or inode allocation from now fails with ENOSPC, as a full disk
//! would make it fail at that point, or panics (an operation unwinding
//! half-way). `Fs::fail_allocation` and `Fs::panic_at_allocation` (`faults`) arm
//! it.

use crate::error::{FsError, Result};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// The allocator's injection point.
#[derive(Default)]
pub struct Faults {
    /// 0: off; n: the n-th allocation from now fails.
    countdown: AtomicU64,
    /// Allocations asked for so far.
    calls: AtomicU64,
    /// The armed allocation panics instead of failing (an operation that
    /// unwinds half-way).
    panic: std::sync::atomic::AtomicBool,
}

impl Faults {
    /// Makes the `nth` allocation from now (1: the next) fail; 0: none.
    pub fn arm(&self, nth: u64) {
        self.panic.store(false, Relaxed);
        self.countdown.store(nth, Relaxed);
    }

    /// Makes the `nth` allocation from now panic.
    pub fn arm_panic(&self, nth: u64) {
        self.panic.store(true, Relaxed);
        self.countdown.store(nth, Relaxed);
    }

    /// Allocations asked for so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Relaxed)
    }

    /// Called at the start of every block and inode allocation.
    pub(crate) fn check(&self) -> Result<()> {
        self.calls.fetch_add(1, Relaxed);
        let before = self.countdown.fetch_update(Relaxed, Relaxed, |c| c.checked_sub(1)).unwrap_or(0);
        if before == 1 {
            assert!(!self.panic.load(Relaxed), "injected panic at an allocation");
            return Err(FsError::Errno(libc::ENOSPC));
        }
        Ok(())
    }
}
