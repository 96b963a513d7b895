//! Deferred deletes and truncates: Tux3's backend doing the heavy part of
//! a delete (seed 003).
//!
//! ## Purpose
//! Freeing a file whose extents fill a tree — a 10 GiB file has thousands —
//! takes many transactions. The system call that dropped the last link (an
//! unlink, a rename over the file, rmdir, or the kernel's FORGET of an
//! unlinked open file) only puts the inode on the on-disk orphan list and
//! queues it here, in its own transaction; the reaper thread frees it in
//! steps ([`Fs::finish_delete`]), each a bounded transaction, so neither
//! the caller nor other requests wait for it. A FORGET of a file already on
//! the orphan list (its unlink put it there while the kernel held it: the
//! usual case through FUSE) queues it with no transaction at all, whatever
//! its size. A small file nobody holds is freed in the unlinking
//! transaction itself: that work is bounded.
//!
//! A truncate that frees more than one handle covers sets the new size,
//! puts the inode on the orphan list and queues the rest as a
//! `Job::Truncate`; the file's next write, fallocate or size change
//! finishes it first (`Fs::settle_truncate`, `reaper.truncates_settled`).
//!
//! ## What the user sees
//! * `statfs` counts the blocks of queued inodes as free (`backlog_blocks`,
//!   lowered as each step frees its share).
//! * An allocation that finds the file system full while the backlog is not
//!   empty waits for the reaper to drain it and tries again (see
//!   `Fs::write`, `Fs::fallocate` and `Fs::change`), so deleting a large file
//!   and at once writing one as large does not fail.
//! * A crash loses nothing: a queued inode is on the orphan list, and mount
//!   finishes it (`Fs::process_orphans`); unmount drains the queue.
//!
//! `-o sync_delete` frees (and truncates) on the caller's thread instead,
//! after its handle closes (the behaviour before the reaper), to measure
//! the difference.
//! Counters: `reaper.queued`, `reaper.done`, `reaper.backlog_inodes`,
//! `reaper.backlog_blocks`, `reaper.steps`, `reaper.enospc_waits`,
//! `reaper.truncates_queued`, `reaper.truncates_settled`.

use crate::fs::Fs;
use crate::stats::Publish;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the reaper does for a queued inode.
#[derive(Clone, Copy, Debug)]
enum Job {
    /// Free an unlinked inode: blocks, xattrs, orphan entry, number.
    Delete(u64),
    /// Free the blocks past a linked inode's size (a deferred truncate),
    /// thought to be `blocks` (the share of the backlog it holds).
    Truncate { ino: u64, blocks: u64 },
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Inodes taken off the queue and still being freed.
    running: u64,
}

/// Counters (see the module essay).
#[derive(Default)]
pub struct ReaperStats {
    pub queued: AtomicU64,
    pub done: AtomicU64,
    pub steps: AtomicU64,
    pub enospc_waits: AtomicU64,
    pub truncates_queued: AtomicU64,
    /// Deferred truncates finished early by the file's own next write,
    /// fallocate or size change (`Fs::settle_truncate`).
    pub truncates_settled: AtomicU64,
}

/// The queue of inodes to free and the thread that frees them.
pub struct Reaper {
    /// Free in the background (false: `-o sync_delete`).
    pub deferred: bool,
    queue: Mutex<Queue>,
    work: Condvar,
    idle: Condvar,
    backlog_blocks: AtomicU64,
    stop: AtomicBool,
    /// Tests only: the thread leaves the queue alone while set.
    held: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub stats: ReaperStats,
}

impl Reaper {
    pub fn new(deferred: bool) -> Reaper {
        Reaper {
            deferred,
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            idle: Condvar::new(),
            backlog_blocks: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            held: AtomicBool::new(false),
            thread: Mutex::new(None),
            stats: ReaperStats::default(),
        }
    }

    /// Queues `ino`, which holds `blocks` blocks (called in the handle that
    /// put it on the orphan list).
    pub fn push(&self, ino: u64, blocks: u64) {
        self.backlog_blocks.fetch_add(blocks, Relaxed);
        self.queue.lock().jobs.push_back(Job::Delete(ino));
        self.stats.queued.fetch_add(1, Relaxed);
    }

    /// Queues the rest of a truncate of `ino` (on the orphan list already,
    /// its new size set), about `blocks` blocks past the new end.
    pub fn push_truncate(&self, ino: u64, blocks: u64) {
        self.backlog_blocks.fetch_add(blocks, Relaxed);
        self.queue.lock().jobs.push_back(Job::Truncate { ino, blocks });
        self.stats.truncates_queued.fetch_add(1, Relaxed);
    }

    /// Blocks that queued inodes still hold.
    pub fn backlog_blocks(&self) -> u64 {
        self.backlog_blocks.load(Relaxed)
    }

    /// Inodes queued or being freed.
    pub fn backlog_inodes(&self) -> u64 {
        let q = self.queue.lock();
        q.jobs.len() as u64 + q.running
    }

    /// `n` blocks of a queued inode were freed (or it turned out to hold fewer).
    pub fn freed(&self, n: u64) {
        let _ = self.backlog_blocks.fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_sub(n)));
    }

    fn take(&self) -> Option<Job> {
        let mut q = self.queue.lock();
        let job = q.jobs.pop_front()?;
        q.running += 1;
        Some(job)
    }

    fn finished(&self) {
        let mut q = self.queue.lock();
        q.running -= 1;
        self.stats.done.fetch_add(1, Relaxed);
        if q.jobs.is_empty() && q.running == 0 {
            self.idle.notify_all();
        }
    }

    /// Wakes the thread (after the caller's handle closed).
    pub fn kick(&self) {
        self.work.notify_one();
    }

    /// Waits until the queue is empty, or `limit` passed, or the thread is
    /// gone; returns whether it is empty.
    pub fn wait_idle(&self, limit: Duration) -> bool {
        self.stats.enospc_waits.fetch_add(1, Relaxed);
        let deadline = std::time::Instant::now() + limit;
        let mut q = self.queue.lock();
        while !(q.jobs.is_empty() && q.running == 0) {
            if self.stop.load(Relaxed) || self.idle.wait_until(&mut q, deadline).timed_out() {
                return q.jobs.is_empty() && q.running == 0;
            }
        }
        true
    }

    /// Starts the thread for `fs`.
    pub fn start(fs: &Arc<Fs>) -> std::io::Result<()> {
        let f2 = fs.clone();
        let h = std::thread::Builder::new().name("cairn-reaper".into()).spawn(move || f2.reaper.run(&f2))?;
        *fs.reaper.thread.lock() = Some(h);
        Ok(())
    }

    fn run(&self, fs: &Fs) {
        loop {
            {
                let mut q = self.queue.lock();
                while (q.jobs.is_empty() || self.held.load(Relaxed)) && !self.stop.load(Relaxed) {
                    self.work.wait_for(&mut q, Duration::from_secs(1));
                }
            }
            if self.stop.load(Relaxed) {
                return;
            }
            fs.reap_queued();
        }
    }

    /// Tests only: keeps the thread from taking work while `hold` is set,
    /// so a test can act while deletes and truncates are still queued.
    pub fn debug_hold(&self, hold: bool) {
        self.held.store(hold, Relaxed);
        self.work.notify_all();
    }

    /// Stops the thread (what is queued stays queued; unmount drains it).
    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
        self.work.notify_all();
        self.idle.notify_all();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

impl Fs {
    /// Frees every queued inode, in steps (the reaper thread, unmount, and
    /// callers under `-o sync_delete`). Call with no handle held. A failure
    /// leaves the inode on the orphan list (the next mount finishes it).
    pub(crate) fn reap_queued(&self) {
        while let Some(job) = self.reaper.take() {
            match job {
                Job::Delete(ino) => {
                    if let Err(e) = self.finish_delete(ino) {
                        tracing::warn!(ino, error = %e, "freeing a deleted file failed; it stays on the orphan list");
                    }
                }
                Job::Truncate { ino, blocks } => {
                    let mut freed = 0;
                    let res = {
                        let _io = self.io_lock(ino);
                        self.finish_truncate_if_pending(ino, &mut |n| {
                            freed += n;
                            self.reaper.freed(n);
                        })
                    };
                    // The estimate's rest: blocks a write settled first,
                    // holes, or a delete that took the file over.
                    self.reaper.freed(blocks.saturating_sub(freed));
                    if let Err(e) = res {
                        tracing::warn!(ino, error = %e, "a deferred truncate failed; the file stays on the orphan list");
                    }
                }
            }
            self.reaper.finished();
        }
    }

    /// After an operation that may have queued inodes: free them now
    /// (`sync_delete`) or wake the reaper.
    pub(crate) fn after_unlink(&self) {
        if self.reaper.deferred {
            self.reaper.kick();
        } else {
            self.reap_queued();
        }
    }
}

impl Publish for Reaper {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("reaper.deferred", u64::from(self.deferred));
        put("reaper.queued", s.queued.load(Relaxed));
        put("reaper.done", s.done.load(Relaxed));
        put("reaper.backlog_inodes", self.backlog_inodes());
        put("reaper.backlog_blocks", self.backlog_blocks());
        put("reaper.steps", s.steps.load(Relaxed));
        put("reaper.enospc_waits", s.enospc_waits.load(Relaxed));
        put("reaper.truncates_queued", s.truncates_queued.load(Relaxed));
        put("reaper.truncates_settled", s.truncates_settled.load(Relaxed));
    }
}
