//! Deferred deletes and truncates: Tux3's backend doing the heavy part of
//! a delete (seed 003).
//!
//! ## Purpose
//! Freeing a file whose extents fill a tree — a 10 GiB file has thousands —
//! takes many transactions. The system call that dropped the last link (an
//! unlink, a rename over the file, rmdir, or the kernel's FORGET of an
//! unlinked open file) only puts the inode on the on-disk orphan list and
//! queues it here, in its own transaction; the reaper thread frees it in
//! steps ([`crate::inode_store::InodeStore::finish_delete`]), each a bounded transaction, so neither
//! the caller nor other requests wait for it. A FORGET of a file already on
//! the orphan list (its unlink put it there while the kernel held it: the
//! usual case through FUSE) queues it with no transaction at all, whatever
//! its size. A small file nobody holds is freed in the unlinking
//! transaction itself: that work is bounded.
//!
//! A truncate that frees more than one handle covers sets the new size,
//! puts the inode on the orphan list and queues the rest as a
//! `Job::Truncate`; the file's next write, fallocate or size change
//! finishes it first (`InodeStore::settle_truncate`, `reaper.truncates_settled`).
//!
//! ## What the user sees
//! * `statfs` counts the blocks of queued inodes as free (`backlog_blocks`,
//!   lowered as each step frees its share).
//! * An allocation that finds the file system full while the backlog is not
//!   empty waits for the reaper to drain it and tries again (see
//!   `FileIo::write`, `FileIo::fallocate` and `Engine::change`), so deleting a large file
//!   and at once writing one as large does not fail.
//! * Through FUSE an unlink returns before the kernel lets go of the file:
//!   its FORGET follows the inode's eviction, a moment later. Such files are
//!   counted (`held_unlinked`), and the allocation above first waits up to
//!   [`FORGET_WAIT`] for one of their FORGETs (xfstests generic/371: a
//!   fallocate right after `rm` of an 80 MiB file on a 256 MiB file system
//!   failed about one run in six before).
//! * A crash loses nothing: a queued inode is on the orphan list, and mount
//!   finishes it (`InodeStore::process_orphans`); unmount drains the queue.
//!
//! ## Batching
//! The reaper does not wake for every queued inode: most are small files
//! whose FORGET arrives right after their unlink, and on a machine with
//! few cores a thread wake-up per delete costs the front end more than the
//! delete itself (two context switches against one short transaction). As
//! Tux3's backend frees in bulk at a delta's commit, the reaper wakes once
//! [`BATCH_DELAY`] has passed since the first inode of a batch was queued,
//! or at once when the batch is large ([`BATCH_INODES`] inodes or
//! [`BATCH_BLOCKS`] blocks: a big file's space should come back soon), when
//! an allocation waits for it (`wait_idle`), and at unmount. A kick that
//! queued nothing wakes nobody.
//!
//! `-o sync_delete` frees (and truncates) on the caller's thread instead,
//! after its handle closes (the behaviour before the reaper), to measure
//! the difference.
//! Counters: `reaper.queued`, `reaper.done`, `reaper.backlog_inodes`,
//! `reaper.backlog_blocks`, `reaper.steps`, `reaper.enospc_waits`,
//! `reaper.truncates_queued`, `reaper.truncates_settled`, `reaper.wakeups`
//! (batches the thread woke for).

use crate::stats::Publish;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the first inode of a batch may wait before the reaper wakes.
pub const BATCH_DELAY: Duration = Duration::from_millis(50);
/// A batch of this many inodes wakes the reaper at once.
pub const BATCH_INODES: usize = 256;
/// A batch holding this many blocks (64 MiB of 4 KiB blocks) wakes the
/// reaper at once.
pub const BATCH_BLOCKS: u64 = 16_384;

/// How long an allocation that found the file system full waits for the
/// FORGET of a file unlinked while the kernel held it. A file still open
/// somewhere is never let go, so this bounds the wait; a FORGET in flight
/// takes microseconds to milliseconds.
pub const FORGET_WAIT: Duration = Duration::from_millis(500);

/// What the reaper does for a queued inode.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Job {
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
    /// Blocks the queued jobs hold (the batch's weight; see [`BATCH_BLOCKS`]).
    queued_blocks: u64,
    /// Someone asked for the queue to be worked now (a full batch, an
    /// allocation waiting, unmount).
    urgent: bool,
}

impl Queue {
    fn push(&mut self, job: Job, blocks: u64) {
        self.jobs.push_back(job);
        self.queued_blocks = self.queued_blocks.saturating_add(blocks);
        if self.jobs.len() >= BATCH_INODES || self.queued_blocks >= BATCH_BLOCKS {
            self.urgent = true;
        }
    }
}

/// Counters (see the module essay).
#[derive(Default)]
pub struct ReaperStats {
    pub queued: AtomicU64,
    pub done: AtomicU64,
    pub steps: AtomicU64,
    pub enospc_waits: AtomicU64,
    /// ENOSPC waits for the FORGET of a file unlinked while the kernel held it.
    pub forget_waits: AtomicU64,
    pub truncates_queued: AtomicU64,
    /// Deferred truncates finished early by the file's own next write,
    /// fallocate or size change (`InodeStore::settle_truncate`).
    pub truncates_settled: AtomicU64,
    /// Times the thread woke to work a batch.
    pub wakeups: AtomicU64,
}

/// The queue of inodes to free and the thread that frees them.
pub struct Reaper {
    /// Free in the background (false: `-o sync_delete`).
    pub deferred: bool,
    queue: Mutex<Queue>,
    work: Condvar,
    idle: Condvar,
    backlog_blocks: AtomicU64,
    /// Unlinked files the kernel still held at their unlink: their FORGET,
    /// due any moment, frees them (see "What the user sees").
    held_unlinked: AtomicU64,
    /// Signalled (under `queue`) when the FORGET of such a file arrives.
    forgotten: Condvar,
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
            held_unlinked: AtomicU64::new(0),
            forgotten: Condvar::new(),
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
        self.queue.lock().push(Job::Delete(ino), blocks);
        self.stats.queued.fetch_add(1, Relaxed);
    }

    /// Queues the rest of a truncate of `ino` (on the orphan list already,
    /// its new size set), about `blocks` blocks past the new end.
    pub fn push_truncate(&self, ino: u64, blocks: u64) {
        self.backlog_blocks.fetch_add(blocks, Relaxed);
        self.queue.lock().push(Job::Truncate { ino, blocks }, blocks);
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

    /// A file was unlinked while the kernel held it (its FORGET will free
    /// it; see [`Reaper::let_go`]).
    pub(crate) fn hold_unlinked(&self) {
        self.held_unlinked.fetch_add(1, Relaxed);
    }

    /// The FORGET of a file counted by [`Reaper::hold_unlinked`] arrived
    /// (after it was queued or freed).
    pub(crate) fn let_go(&self) {
        let _ = self.held_unlinked.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        let _q = self.queue.lock();
        self.forgotten.notify_all();
    }

    /// Unlinked files the kernel still holds.
    pub fn held_unlinked(&self) -> u64 {
        self.held_unlinked.load(Relaxed)
    }

    /// Waits until the FORGET of one of the unlinked files the kernel holds
    /// arrives, or `limit` passed; returns whether one did. Its unlink
    /// returned before the kernel let go of it (FUSE sends FORGET after the
    /// inode's eviction), so an allocation racing a delete of a large file
    /// would otherwise find the space still taken.
    pub fn wait_for_forget(&self, limit: Duration) -> bool {
        let held = self.held_unlinked();
        if held == 0 {
            return false;
        }
        self.stats.forget_waits.fetch_add(1, Relaxed);
        let deadline = std::time::Instant::now() + limit;
        let mut q = self.queue.lock();
        while self.held_unlinked() >= held {
            if self.stop.load(Relaxed) || self.forgotten.wait_until(&mut q, deadline).timed_out() {
                return self.held_unlinked() < held;
            }
        }
        true
    }

    /// `n` blocks of a queued inode were freed (or it turned out to hold fewer).
    pub fn freed(&self, n: u64) {
        let _ = self.backlog_blocks.fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_sub(n)));
    }

    pub(crate) fn take(&self) -> Option<Job> {
        let mut q = self.queue.lock();
        let job = q.jobs.pop_front()?;
        q.running += 1;
        if q.jobs.is_empty() {
            q.queued_blocks = 0;
            q.urgent = false;
        }
        Some(job)
    }

    pub(crate) fn finished(&self) {
        let mut q = self.queue.lock();
        q.running -= 1;
        self.stats.done.fetch_add(1, Relaxed);
        if q.jobs.is_empty() && q.running == 0 {
            self.idle.notify_all();
        }
    }

    /// After the caller's handle closed: wakes the thread if its batch is
    /// full (otherwise the thread wakes by itself once the batch has waited
    /// [`BATCH_DELAY`], or sleeps on if nothing is queued).
    pub fn kick(&self) {
        if self.queue.lock().urgent {
            self.work.notify_one();
        }
    }

    /// Wakes the thread to work what is queued now, batch full or not.
    fn hurry(&self) {
        let mut q = self.queue.lock();
        if !q.jobs.is_empty() {
            q.urgent = true;
            self.work.notify_one();
        }
    }

    /// Waits until the queue is empty, or `limit` passed, or the thread is
    /// gone; returns whether it is empty.
    pub fn wait_idle(&self, limit: Duration) -> bool {
        self.stats.enospc_waits.fetch_add(1, Relaxed);
        self.drain(limit)
    }

    /// [`Reaper::wait_idle`] without counting a wait for space (FITRIM waits
    /// so that what was deleted before it is discarded by it).
    pub fn drain(&self, limit: Duration) -> bool {
        self.hurry();
        let deadline = std::time::Instant::now() + limit;
        let mut q = self.queue.lock();
        while !(q.jobs.is_empty() && q.running == 0) {
            if self.stop.load(Relaxed) || self.idle.wait_until(&mut q, deadline).timed_out() {
                return q.jobs.is_empty() && q.running == 0;
            }
        }
        true
    }

    /// Starts the thread: `body` runs on it (it calls [`Reaper::run`]).
    pub fn spawn(&self, body: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let h = std::thread::Builder::new().name("cairn-reaper".into()).spawn(body)?;
        *self.thread.lock() = Some(h);
        Ok(())
    }

    /// The thread's loop: waits for a batch of work, then `reap`s it
    /// (`Fs::reap_queued`), until stopped.
    pub fn run(&self, reap: &dyn Fn()) {
        // Its operations do not take a push's swap on (see `tx::gate`).
        crate::tx::gate::mark_background_thread();
        loop {
            {
                let mut q = self.queue.lock();
                while (q.jobs.is_empty() || self.held.load(Relaxed)) && !self.stop.load(Relaxed) {
                    self.work.wait_for(&mut q, Duration::from_secs(1));
                }
                // A batch has begun: let it fill for BATCH_DELAY unless it
                // is full or wanted now.
                let deadline = std::time::Instant::now() + BATCH_DELAY;
                while !q.urgent && !self.stop.load(Relaxed) {
                    if self.work.wait_until(&mut q, deadline).timed_out() {
                        break;
                    }
                }
            }
            if self.stop.load(Relaxed) {
                return;
            }
            self.stats.wakeups.fetch_add(1, Relaxed);
            reap();
        }
    }

    /// Tests only: keeps the thread from taking work while `hold` is set,
    /// so a test can act while deletes and truncates are still queued.
    #[cfg(feature = "testing")]
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

thread_local! {
    static REAPING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is inside `Fs::reap_queued` (waiting for the
/// reaper there would wait for itself).
pub(crate) fn reaping_here() -> bool {
    REAPING.with(|r| r.get())
}

/// Runs `f` as reaping (see [`reaping_here`]).
pub(crate) fn reaping<R>(f: impl FnOnce() -> R) -> R {
    let outer = REAPING.with(|r| r.replace(true));
    let r = f();
    REAPING.with(|r| r.set(outer));
    r
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
        put("reaper.forget_waits", s.forget_waits.load(Relaxed));
        put("reaper.held_unlinked", self.held_unlinked());
        put("reaper.truncates_queued", s.truncates_queued.load(Relaxed));
        put("reaper.truncates_settled", s.truncates_settled.load(Relaxed));
        put("reaper.wakeups", s.wakeups.load(Relaxed));
    }
}
