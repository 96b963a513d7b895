//! The progress callback a caller may hand to a check.
//!
//! ## Purpose
//! `cairn fsck` draws a progress bar; a library caller may want nothing, or
//! its own display. A [`ProgressHook`] in [`Options`](crate::Options) is
//! told, as the long passes (inodes, bitmaps) go through the groups, what
//! runs and how far it has got; `Ctx::progress` passes it on, and a check
//! that has ended says so once with a total of zero.
//!
//! ## Layout
//! A leaf module: the hook is shared (an `Arc`) so that options stay
//! `Clone`, and it imports nothing of the crate.

/// A callback `(what, done, total)` called as the inode and bitmap passes
/// go through the groups; `total == 0` once the whole check has ended.
#[derive(Clone)]
pub struct ProgressHook(pub std::sync::Arc<ProgressFn>);

/// What a [`ProgressHook`] calls.
pub type ProgressFn = dyn Fn(&str, u64, u64) + Send + Sync;

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
}

impl ProgressHook {
    pub(crate) fn tell(&self, what: &str, done: u64, total: u64) {
        (self.0)(what, done, total)
    }
}
