//! The backend thread: commits the running checkpoint every
//! `commit_interval`, and sooner when kicked (dirty metadata passed half of
//! what one record may hold). A commit that fails latches the error (see
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
use std::time::Duration;

/// The backend thread's nice value (see "Priority").
pub const NICE: i32 = 10;

/// The backend's wake-up state.
#[derive(Default)]
pub struct Backend {
    kick: Mutex<bool>,
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

    /// The thread's loop: `commit` every `interval`, or when kicked, until
    /// stopped or `commit` returns false.
    pub fn run(&self, interval: Duration, nice: i32, commit: &mut dyn FnMut() -> bool) {
        if nice > 0 {
            lower_own_priority(nice);
            crate::tx::gate::mark_background_thread();
        }
        loop {
            {
                let mut k = self.kick.lock();
                if !*k && !self.stop.load(Ordering::Acquire) {
                    self.cv.wait_for(&mut k, interval);
                }
                *k = false;
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            if !commit() {
                return;
            }
        }
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
