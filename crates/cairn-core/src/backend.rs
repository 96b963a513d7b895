//! The backend thread: commits the running checkpoint every
//! `commit_interval`, and sooner when kicked (dirty metadata passed half of
//! what one record may hold). A commit that fails latches the error (see
//! `journal::latch`) and ends the thread.

use crate::fs::Fs;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The backend's wake-up state.
#[derive(Default)]
pub struct Backend {
    kick: Mutex<bool>,
    cv: Condvar,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Backend {
    /// Starts the thread for `fs`.
    pub fn start(fs: &Arc<Fs>, interval: Duration) -> std::io::Result<()> {
        let f2 = fs.clone();
        let h =
            std::thread::Builder::new().name("cairn-backend".into()).spawn(move || f2.backend().run(&f2, interval))?;
        *fs.backend().thread.lock() = Some(h);
        Ok(())
    }

    fn run(&self, fs: &Fs, interval: Duration) {
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
            if let Err(e) = fs.commit() {
                tracing::error!(error = %e, "background commit failed; the backend stops");
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
