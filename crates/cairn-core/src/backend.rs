//! The backend thread: commits the running checkpoint every
//! `commit_interval`, and sooner when kicked (dirty metadata passed half of
//! what one record may hold). Asked for a write-back instead
//! ([`Backend::kick_write_back`], the log is 3/4 full: "Early write-back" in
//! `journal::ail`), it runs that round without a commit: a commit run at its
//! lowered priority holds the commit mutex, and an `fsync` waited behind it
//! (1–5 ms waits in a loop of `fsync`s, 2026-12-03). A commit that fails latches the error (see
//! `journal::latch`) and ends the thread. Under `-o discard` a commit that
//! leaves freed blocks waiting for the journal is followed by a checkpoint,
//! which releases and discards them (see `alloc::trim`).
//!
//! ## Priority
//! The thread runs at nice [`NICE`] (10; `-o backend_nice=N` chose it while
//! it was measured). Its commits capture, compress and write checkpoints
//! while the request threads go on; on a machine with as many busy threads
//! as CPUs, an operation woken at a push's reopened gate otherwise sat
//! runnable behind the capture until the scheduler's next tick (4 ms here).
//! At a lower priority the woken operation takes the backend's CPU at once.
//! Engine, 1M creates and unlinks (`cairn-bench-driver fsmark`), 6 runs each,
//! alternating: the longest wait at a push was under 1 ms in 10 of 12
//! phases at nice 10 against 7 of 12 at nice 0; at 2M, 3 runs each, 3 of 6
//! against 1 of 6. Commits a `fsync` makes run on the caller's thread.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The backend thread's nice value (see "Priority").
pub const NICE: i32 = 10;

/// The backend's wake-up state.
#[derive(Default)]
pub struct Backend {
    kick: Mutex<bool>,
    /// A write-back is wanted (see [`Backend::kick_write_back`]).
    write_back: AtomicBool,
    cv: Condvar,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Backend {
    /// Starts the thread: `body` runs on it (it calls [`Backend::run`]).
    pub fn spawn(&self, body: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let h = std::thread::Builder::new().name("cairn-backend".into()).spawn(body)?;
        *self.thread.lock() = Some(h);
        Ok(())
    }

    /// The thread's loop: a round every `interval`, or when kicked, until
    /// stopped or `round` returns false. `round(true)` commits (and writes
    /// back if the log wants it); `round(false)`, a round asked for by
    /// [`Backend::kick_write_back`] alone, only writes back.
    pub fn run(&self, interval: Duration, nice: i32, round: &mut dyn FnMut(bool) -> bool) {
        if nice > 0 {
            lower_own_priority(nice);
            crate::tx::gate::mark_background_thread();
        }
        let mut last_commit = Instant::now();
        loop {
            let kicked = {
                let mut k = self.kick.lock();
                if !*k && !self.write_back.load(Ordering::Acquire) && !self.stop.load(Ordering::Acquire) {
                    self.cv.wait_for(&mut k, interval.saturating_sub(last_commit.elapsed()));
                }
                self.write_back.store(false, Ordering::Release);
                std::mem::take(&mut *k)
            };
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let commit = kicked || last_commit.elapsed() >= interval;
            if commit {
                last_commit = Instant::now();
            }
            if !round(commit) {
                return;
            }
        }
    }

    /// Asks for a write-back soon, without a commit.
    pub fn kick_write_back(&self) {
        let _k = self.kick.lock();
        self.write_back.store(true, Ordering::Release);
        self.cv.notify_one();
    }

    /// Asks for a commit soon.
    pub fn kick(&self) {
        *self.kick.lock() = true;
        self.cv.notify_one();
    }

    /// Stops the thread and waits for it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

/// Lowers the calling thread's priority to nice `nice` (only this thread's:
/// Linux keeps a nice value per thread). Raising nice needs no privilege; a
/// refusal is logged and ignored.
fn lower_own_priority(nice: i32) {
    // SAFETY: gettid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority reads only its integer arguments; PRIO_PROCESS with
    // a thread id changes that thread's nice value alone.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc != 0 {
        tracing::warn!(nice, error = %std::io::Error::last_os_error(), "could not lower the backend's priority");
    }
}
