//! Page cache coherence after direct writes.
//!
//! ## The problem
//! A direct write (`O_DIRECT`) goes to cairn and not through the kernel's
//! page cache, so the kernel must drop the pages it caches over the written
//! range. For a synchronous direct write it does, before and after the write
//! (`generic_file_direct_write`). An *asynchronous* one (AIO or io_uring,
//! with FUSE_ASYNC_DIO, which cairn asks for so that such I/O stays
//! concurrent) completes in `fuse_aio_complete` without the second
//! invalidation: a buffered reader that cached the range between the first
//! invalidation and the write's arrival keeps the old bytes, and every later
//! buffered read returns them (xfstests generic/451: an AIO O_DIRECT
//! writer, buffered readers, "get stale data from buffer read").
//!
//! ## The fix
//! cairn drops the pages itself: after a direct write's data is in cairn
//! and *before* its reply, it sends FUSE_NOTIFY_INVAL_INODE over the whole
//! file. A page cached before the notification is dropped by it; a page
//! read after it holds the new bytes; a read in flight holds its page
//! locked, and the kernel waits for it before dropping it. So when the
//! writer learns the write is done, no stale page is left. A direct write is
//! one whose file was opened with `O_DIRECT` and that did not come from the
//! page cache (`FUSE_WRITE_CACHE` clear).
//!
//! The notification also drops the inode's cached attributes, and the next
//! write then asks for them again: sent after every 4 KiB write it cost a
//! third of fio's O_DIRECT IOPS. So it is sent only when a buffered READ of
//! the file may have filled a page since the last one: a buffered READ
//! marks its inode *before* it reads (`note_buffered_read`); a direct write
//! clears the mark and, if it was set, notifies. A page that can be stale
//! was read before the write's data went in, so after its mark was set; the
//! first direct write to find the mark drops every page of the file (not
//! only its own range), so a later write that finds no mark has nothing
//! stale left to drop. Pages the kernel fills without a READ come from
//! buffered writes, which race with the direct write as any two writes do.
//! Marks live in a sharded set; FORGET removes an inode's mark once the
//! kernel holds no reference (it has no page of a file it has forgotten).
//! Not covered: a READ through `mmap` of a file opened with `O_DIRECT`,
//! which carries the `O_DIRECT` flag and is taken for a direct read.
//!
//! ## Not deadlocking
//! The notification waits for locked pages, and a page is locked while its
//! READ waits for a serving thread. If every thread that could serve that
//! READ were itself waiting in a notification, none would return. So:
//! - at most one thread notifies *inline* at a time (`inline`), and only
//!   where each request queue has at least two serving threads: the other
//!   one serves the READ;
//! - any other direct write hands its notification to the notifier thread
//!   and waits for it for at most [`HANDOFF_WAIT`] ([`HANDOFF_WAIT_ALONE`]
//!   with one serving thread a queue); past that it replies
//!   anyway (counted in `dio.invalidate_timeouts`), goes back to serving,
//!   and the notification completes once the READ it waits for is answered.
//!
//! A write that times out may leave its range stale for the moment until
//! the notification lands; it happens only when two direct writes and a
//! buffered read of the same pages meet on one queue, and the counter says
//! whether it ever does.

use crate::privs::KernelNotifier;
use parking_lot::{Condvar, Mutex};
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Duration;

/// How long a direct write waits for a notification it handed off, where
/// queues have a second serving thread (a wait that long is rare there).
pub const HANDOFF_WAIT: Duration = Duration::from_millis(20);

/// The same with one serving thread a queue: a READ that the notification
/// waits for can only be served after this reply, so waiting long only
/// stalls the queue.
pub const HANDOFF_WAIT_ALONE: Duration = Duration::from_millis(1);

/// How long a direct write waits for its turn to notify inline.
const INLINE_WAIT: Duration = Duration::from_millis(2);

/// Shards of the set of marked inodes.
const SHARDS: usize = 64;

/// Counters for `cairn stats`.
#[derive(Debug, Default)]
pub struct CoherenceStats {
    pub direct_writes: AtomicU64,
    pub invalidations: AtomicU64,
    pub handoffs: AtomicU64,
    pub timeouts: AtomicU64,
}

impl CoherenceStats {
    /// `(name, value)` pairs for `cairn stats`.
    pub fn counters(&self) -> Vec<(String, u64)> {
        vec![
            ("dio.direct_writes".into(), self.direct_writes.load(Relaxed)),
            ("dio.invalidations".into(), self.invalidations.load(Relaxed)),
            ("dio.invalidate_handoffs".into(), self.handoffs.load(Relaxed)),
            ("dio.invalidate_timeouts".into(), self.timeouts.load(Relaxed)),
        ]
    }
}

/// One handed-off notification and its completion flag.
struct Job {
    ino: u64,
    done: Arc<(Mutex<bool>, Condvar)>,
}

/// See the module essay.
pub struct DirectWriteCoherence {
    notify: KernelNotifier,
    stats: Arc<CoherenceStats>,
    /// Held by the one thread that notifies inline.
    inline: Mutex<()>,
    /// Whether every request queue has a second serving thread.
    inline_allowed: bool,
    /// The notifier thread's queue.
    jobs: Mutex<Sender<Job>>,
    /// Inodes a buffered READ may have cached pages of since the last
    /// notification, sharded by number.
    marked: Box<[Mutex<HashSet<u64>>]>,
}

impl DirectWriteCoherence {
    /// Starts the notifier thread. `serving_threads` is the number of
    /// threads that serve one request queue.
    pub fn start(notify: KernelNotifier, stats: Arc<CoherenceStats>, serving_threads: usize) -> DirectWriteCoherence {
        let (tx, rx) = channel::<Job>();
        let thread_notify = notify.clone();
        let spawned = std::thread::Builder::new().name("cairn-dio-inval".into()).spawn(move || {
            for job in rx {
                thread_notify.pages_changed(job.ino);
                let (flag, cv) = &*job.done;
                *flag.lock() = true;
                cv.notify_all();
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the direct-write notifier thread");
        }
        DirectWriteCoherence {
            notify,
            stats,
            inline: Mutex::new(()),
            inline_allowed: serving_threads >= 2,
            jobs: Mutex::new(tx),
            marked: (0..SHARDS).map(|_| Mutex::new(HashSet::new())).collect(),
        }
    }

    fn shard(&self, ino: u64) -> &Mutex<HashSet<u64>> {
        &self.marked[(ino as usize) % SHARDS]
    }

    /// A READ with these open flags is about to read `ino`: a buffered one
    /// (no `O_DIRECT`) marks it. Call before reading the data.
    pub fn note_read(&self, ino: u64, open_flags: i32) {
        if open_flags & libc::O_DIRECT == 0 {
            self.shard(ino).lock().insert(ino);
        }
    }

    /// The kernel forgot `ino` when `kernel_lookups` says 0 (asked under the
    /// shard's lock, so a READ after a new LOOKUP keeps its mark).
    pub fn forgotten(&self, ino: u64, kernel_lookups: impl FnOnce() -> u64) {
        let mut set = self.shard(ino).lock();
        if set.contains(&ino) && kernel_lookups() == 0 {
            set.remove(&ino);
        }
    }

    /// Whether a WRITE with these flags is a direct write (see the essay).
    pub fn is_direct(open_flags: i32, from_page_cache: bool) -> bool {
        open_flags & libc::O_DIRECT != 0 && !from_page_cache
    }

    /// After a direct write to `ino`'s data is in cairn and before its
    /// reply: drops the kernel's cached pages of the file if a buffered
    /// READ may have filled one (see the essay).
    pub fn after_direct_write(&self, ino: u64) {
        self.stats.direct_writes.fetch_add(1, Relaxed);
        if !self.shard(ino).lock().remove(&ino) {
            return;
        }
        self.stats.invalidations.fetch_add(1, Relaxed);
        if self.inline_allowed {
            if let Some(_turn) = self.inline.try_lock_for(INLINE_WAIT) {
                self.notify.pages_changed(ino);
                return;
            }
        }
        self.stats.handoffs.fetch_add(1, Relaxed);
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let job = Job { ino, done: done.clone() };
        if self.jobs.lock().send(job).is_err() {
            self.stats.timeouts.fetch_add(1, Relaxed);
            return;
        }
        let (flag, cv) = &*done;
        let mut finished = flag.lock();
        let wait = if self.inline_allowed { HANDOFF_WAIT } else { HANDOFF_WAIT_ALONE };
        if !*finished {
            cv.wait_for(&mut finished, wait);
        }
        if !*finished {
            self.stats.timeouts.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_direct_writes_that_did_not_come_from_the_page_cache_count() {
        assert!(DirectWriteCoherence::is_direct(libc::O_DIRECT | libc::O_RDWR, false));
        assert!(!DirectWriteCoherence::is_direct(libc::O_DIRECT | libc::O_RDWR, true));
        assert!(!DirectWriteCoherence::is_direct(libc::O_RDWR, false));
    }

    #[test]
    fn only_a_buffered_read_since_the_last_notification_makes_a_direct_write_notify() {
        let stats = Arc::new(CoherenceStats::default());
        for threads in [1, 2] {
            // Without a session the notification is a no-op: nothing waits.
            let c = DirectWriteCoherence::start(KernelNotifier::default(), stats.clone(), threads);
            c.after_direct_write(7); // nothing read: no notification
            c.note_read(7, libc::O_RDONLY | libc::O_DIRECT); // a direct read caches nothing
            c.after_direct_write(7);
            c.note_read(7, libc::O_RDONLY);
            c.note_read(8, libc::O_RDONLY);
            c.after_direct_write(7); // notifies, clears 7's mark
            c.after_direct_write(7); // nothing read since
            c.forgotten(8, || 1); // still held: kept
            c.forgotten(8, || 0);
            c.after_direct_write(8); // forgotten: no page left
        }
        assert_eq!(stats.direct_writes.load(Relaxed), 10);
        assert_eq!(stats.invalidations.load(Relaxed), 2);
        assert_eq!(stats.handoffs.load(Relaxed), 1, "one serving thread: handed off");
        // The lone thread waits 1 ms for the notifier (HANDOFF_WAIT_ALONE):
        // on a loaded machine that may pass first, which the bounded wait
        // allows; only a handed-off notification can time out.
        assert!(stats.timeouts.load(Relaxed) <= stats.handoffs.load(Relaxed));
    }
}
