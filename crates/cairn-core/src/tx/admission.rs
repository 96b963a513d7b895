//! The admission gate: every handle is inside it from begin to end, and
//! only a quiesce closes it (an online grow, a consistency check), waiting
//! for every handle however long. Joins have a gate of their own (`gate`),
//! which a commit closes for its swap.
//!
//! ## Shape
//! One atomic word, the count of handles inside and a closed bit, so that
//! entering and leaving an open gate cost one atomic operation each; a
//! mutex and two condition variables for the rare close. Nothing here reads
//! a clock or stamps an entry.
//!
//! ## Invariants
//! A closer sets the bit and then waits, under the mutex, for the count to
//! reach zero; the last handle out of a closed gate notifies under the
//! mutex, so the wake-up is never lost. An entrant that finds the gate
//! closed waits under the mutex for the opening. One closer at a time
//! (the commit mutex serialises quiesces).

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

const CLOSED: u64 = 1 << 63;

/// See the module essay.
#[derive(Default)]
pub struct Admission {
    state: AtomicU64,
    lock: Mutex<()>,
    opened: Condvar,
    drained: Condvar,
}

impl Admission {
    fn try_enter(&self) -> bool {
        let s = self.state.load(SeqCst);
        s & CLOSED == 0 && self.state.compare_exchange(s, s + 1, SeqCst, SeqCst).is_ok()
    }

    /// A handle begins: enters, waiting while a quiesce holds the gate.
    pub fn enter(&self) {
        if self.try_enter() {
            return;
        }
        let mut g = self.lock.lock();
        while !self.try_enter() {
            if self.state.load(SeqCst) & CLOSED != 0 {
                self.opened.wait(&mut g);
            }
        }
    }

    /// A handle ends.
    pub fn leave(&self) {
        if self.state.fetch_sub(1, SeqCst) == CLOSED | 1 {
            let _g = self.lock.lock();
            self.drained.notify_one();
        }
    }

    /// Closes the gate and waits until every handle inside has left.
    pub fn close(&self) {
        self.state.fetch_or(CLOSED, SeqCst);
        let mut g = self.lock.lock();
        while self.state.load(SeqCst) != CLOSED {
            self.drained.wait(&mut g);
        }
    }

    /// Opens the gate again, letting waiting handles in.
    pub fn open(&self) {
        self.state.fetch_and(!CLOSED, SeqCst);
        let _g = self.lock.lock();
        self.opened.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_close_waits_for_the_handles_inside_and_keeps_new_ones_out() {
        let gate = Arc::new(Admission::default());
        gate.enter();
        let closer = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.close();
                let inside = gate.state.load(SeqCst) & !CLOSED;
                gate.open();
                inside
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!closer.is_finished(), "the close waits for the handle inside");
        let entrant = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.enter();
                gate.leave();
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!entrant.is_finished(), "a new handle waits behind the close");
        gate.leave();
        assert_eq!(closer.join().unwrap(), 0, "nobody was inside while closed");
        entrant.join().unwrap();
        assert_eq!(gate.state.load(SeqCst), 0);
    }
}
