//! The overwrite fast path's state (seed 004; the path itself is
//! `overwrite`): its switch (`-o overwrite_fastpath`), the list of inodes
//! whose times a fast-path write changed and that the next commit logs,
//! and its counters.

use crate::inode::InodeRef;
use crate::stats::Publish;
use parking_lot::{Mutex, ReentrantMutex};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Counters of the fast path (see the module essay).
#[derive(Default)]
pub struct OverwriteStats {
    pub fast_writes: AtomicU64,
    pub fast_bytes: AtomicU64,
    pub journaled_writes: AtomicU64,
    pub journaled_bytes: AtomicU64,
    pub fallbacks: AtomicU64,
    /// Of the fallbacks, writes past the size, sent to the journaled path
    /// before the I/O lock was taken (see `FileIo::try_overwrite`).
    pub past_size: AtomicU64,
    /// Journaled writes done in stages, the copy outside any handle (see
    /// `file_io::staged`).
    pub staged_writes: AtomicU64,
    /// Writes begun in stages that found the file system full in their
    /// first stage and went on as one-handle writes.
    pub staged_fallbacks: AtomicU64,
    pub lazy_time_updates: AtomicU64,
    pub lazy_times_logged: AtomicU64,
    pub datasync_flush_only: AtomicU64,
}

/// The fast path's switch, its dirty-times list and counters.
pub struct Overwrite {
    pub enabled: bool,
    /// Inodes with dirty times, each once (`times_queued`); the list holds a
    /// reference, so the inode cache keeps them until they are logged.
    pub(crate) dirty: Mutex<Vec<InodeRef>>,
    /// Held by `FileIo::log_dirty_times` from taking the list until the times
    /// are in handles, so that a concurrent commit (an `fsync`) that finds
    /// the list empty waits for them instead of committing without them.
    /// Reentrant: logging may begin a handle that commits to make room.
    pub(crate) logging: ReentrantMutex<()>,
    pub stats: OverwriteStats,
}

impl Overwrite {
    pub fn new(enabled: bool) -> Overwrite {
        Overwrite {
            enabled,
            dirty: Mutex::new(Vec::new()),
            logging: ReentrantMutex::new(()),
            stats: OverwriteStats::default(),
        }
    }

    /// Notes a write that went down the journaled path.
    pub fn note_journaled(&self, bytes: usize) {
        self.stats.journaled_writes.fetch_add(1, Relaxed);
        self.stats.journaled_bytes.fetch_add(bytes as u64, Relaxed);
    }
}

impl Publish for Overwrite {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("overwrite.enabled", u64::from(self.enabled));
        put("overwrite.fast_writes", s.fast_writes.load(Relaxed));
        put("overwrite.fast_bytes", s.fast_bytes.load(Relaxed));
        put("overwrite.journaled_writes", s.journaled_writes.load(Relaxed));
        put("overwrite.journaled_bytes", s.journaled_bytes.load(Relaxed));
        put("overwrite.fallbacks", s.fallbacks.load(Relaxed));
        put("overwrite.past_size", s.past_size.load(Relaxed));
        put("overwrite.staged_writes", s.staged_writes.load(Relaxed));
        put("overwrite.staged_fallbacks", s.staged_fallbacks.load(Relaxed));
        put("overwrite.lazy_time_updates", s.lazy_time_updates.load(Relaxed));
        put("overwrite.lazy_times_logged", s.lazy_times_logged.load(Relaxed));
        put("overwrite.dirty_times_queued", self.dirty.lock().len() as u64);
        put("overwrite.datasync_flush_only", s.datasync_flush_only.load(Relaxed));
    }
}
