//! Fault injection for tests (cargo feature `testing`, which only the
//! engine's own tests and fsck's turn on): the n-th block or inode
//! allocation from now fails with ENOSPC, as a full disk would make it fail
//! at that point. A test runs an operation once to count its allocations,
//! then again from the same image once per allocation, each time failing
//! that one, and checks that the failed operation left nothing half-done
//! (`tests/it/half_done.rs`).

use super::Fs;

impl Fs {
    /// Makes the `nth` allocation from now (1: the next) fail with ENOSPC;
    /// 0 turns it off.
    pub fn fail_allocation(&self, nth: u64) {
        self.engine.meta().alloc().faults.arm(nth);
    }

    /// Makes the `nth` allocation from now panic (an operation that unwinds
    /// half-way).
    pub fn panic_at_allocation(&self, nth: u64) {
        self.engine.meta().alloc().faults.arm_panic(nth);
    }

    /// Block and inode allocations asked for since mount.
    pub fn allocations(&self) -> u64 {
        self.engine.meta().alloc().faults.calls()
    }
}
