//! The transaction gate: operations hold it shared while they change
//! metadata; a push closes it for the few microseconds of its swap (see
//! `cil`), so a checkpoint holds only whole operations.
//!
//! ## Why not a reader-writer lock
//! The gate was a `parking_lot::RwLock`. The swap under it is short (6–10
//! µs, whatever the amount dirty), yet operations measured waits of 4–8 ms
//! at a push on this two-core machine. Traced, the gate had been closed and
//! reopened within 20 µs; the waiting thread then sat runnable until the
//! next scheduler tick (4 ms here). Two operation threads and the backend's
//! capture keep both cores busy, so a thread that parks (or yields) gets
//! its CPU back only at a tick. The push parked too: woken when the last
//! operation left, it waited for a CPU while the gate held everyone out.
//!
//! ## The design
//! * **The last one out swaps.** The push hands its swap to the gate
//!   ([`Gate::close_and`]) and closes it. Whoever sees the gate closed with
//!   no operation inside runs the swap at once: the push itself if none
//!   was, else the last operation to leave, on its own CPU, in its
//!   [`Held`]'s drop. It then reopens the gate and wakes the push. So the
//!   gate is closed for the rest of the running operations plus the swap,
//!   and no thread must be scheduled in between.
//! * **Operations spin briefly, then park.** One that finds the gate closed
//!   spins for up to [`SPIN`], long enough for a swap whose last operation
//!   runs on another CPU, then parks. Spinning longer made things worse:
//!   the operation the gate waits for was often queued on the spinner's own
//!   CPU, and ran only when the spinner gave it up (traced: closes of
//!   exactly the spin time, 1 ms, when operations spun for 1 ms). Yielding
//!   instead of parking was worse still: the yielder got its CPU back only
//!   at the next tick.
//! * **The push waits for a good moment.** Before closing, it defers while
//!   an operation has been inside for longer than [`YOUNG`] (most likely its
//!   thread lost its CPU: closing then would hold every operation out until
//!   it runs again), for at most [`MAX_DEFER`]. Operations stamp their entry
//!   time in a per-thread slot for this.
//!
//! ## State
//! One atomic word: the number of operations inside, and the `CLOSED` bit.
//! An operation enters by incrementing the count while the bit is clear.
//! Exactly one thread sees the word become `CLOSED` with a count of zero
//! (the push's `fetch_or` or the last `fetch_sub`), and it runs the swap.
//! One push at a time (the commit mutex).
//!
//! ## Wake-ups
//! Parked threads sleep on one mutex and two condition variables; the swap's
//! runner reopens the gate and wakes both under the mutex, and each side
//! re-checks its condition under the mutex before it sleeps, so no wake-up is
//! lost. A panic in the swap (a failed debug check) is caught and rethrown
//! in the push.

use crate::thread_index::thread_index;
use parking_lot::{Condvar, Mutex};
use std::any::Any;
use std::hint::spin_loop;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

/// How long an operation spins on the closed gate before it parks.
pub const SPIN: Duration = Duration::from_micros(20);

/// An operation inside for less than this is still running on its CPU.
pub const YOUNG: Duration = Duration::from_micros(50);

/// The longest a push defers its close for an operation inside for long.
pub const MAX_DEFER: Duration = Duration::from_millis(5);

const CLOSED: u64 = 1 << 63;

/// Entry-time slots (threads share one only when there are more of them).
const SLOTS: usize = 16;

/// The push's swap, lent to whichever thread runs it.
type Swap = dyn FnMut() + Send;

#[derive(Default)]
struct Handoff {
    /// The swap to run; `None` once taken.
    swap: Option<*mut Swap>,
    done: bool,
    panic: Option<Box<dyn Any + Send>>,
}

// SAFETY: the pointer is to the push's `Send` closure, which outlives every
// use: `close_and` does not return before `done`, and the runner clears the
// pointer (under the mutex) before it sets `done`.
#[allow(unsafe_code)]
unsafe impl Send for Handoff {}

/// See the module essay.
pub struct Gate {
    state: AtomicU64,
    handoff: Mutex<Handoff>,
    opened: Condvar,
    swapped: Condvar,
    /// When each thread's operation entered (µs since `epoch`, plus one;
    /// 0: none), by thread slot.
    entered: [AtomicU64; SLOTS],
    epoch: Instant,
    /// Pushes that deferred their close, and those that gave up deferring.
    defers: AtomicU64,
    defers_given_up: AtomicU64,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            state: AtomicU64::new(0),
            handoff: Mutex::new(Handoff::default()),
            opened: Condvar::new(),
            swapped: Condvar::new(),
            entered: std::array::from_fn(|_| AtomicU64::new(0)),
            epoch: Instant::now(),
            defers: AtomicU64::new(0),
            defers_given_up: AtomicU64::new(0),
        }
    }
}

/// A running operation's hold on the gate; leaves it when dropped (and
/// runs a waiting push's swap if it is the last one out).
pub struct Held<'a> {
    gate: &'a Gate,
    /// The entry-time slot this hold stamped, if it got one.
    slot: Option<usize>,
    entered: Instant,
}

impl Held<'_> {
    /// When the operation got in.
    pub fn entered(&self) -> Instant {
        self.entered
    }
}

impl Gate {
    fn try_enter(&self) -> bool {
        let s = self.state.load(SeqCst);
        s & CLOSED == 0 && self.state.compare_exchange_weak(s, s + 1, SeqCst, SeqCst).is_ok()
    }

    /// `at` as an entry-time stamp (never 0, which means "none").
    fn stamp(&self, at: Instant) -> u64 {
        (at - self.epoch).as_micros() as u64 + 1
    }

    /// Enters the gate, waiting while a push holds it closed. Returns how
    /// long it waited: `None` if the gate was open.
    pub fn enter(&self) -> (Held<'_>, Option<Duration>) {
        let waited = if self.try_enter() { None } else { Some(self.wait_to_enter()) };
        // One clock read stamps the slot and starts the hold.
        let entered = Instant::now();
        let slot = thread_index() % SLOTS;
        let stamped = self.entered[slot].compare_exchange(0, self.stamp(entered), Relaxed, Relaxed).is_ok();
        (Held { gate: self, slot: stamped.then_some(slot), entered }, waited)
    }

    /// Spins, then parks until the gate lets this thread in.
    fn wait_to_enter(&self) -> Duration {
        let start = Instant::now();
        let mut n = 0u32;
        loop {
            if self.try_enter() {
                return start.elapsed();
            }
            n = n.wrapping_add(1);
            // Read the clock only every so often: it costs more than a spin.
            if n.is_multiple_of(64) && start.elapsed() > SPIN {
                break;
            }
            spin_loop();
        }
        let mut h = self.handoff.lock();
        while !self.try_enter() {
            if self.state.load(SeqCst) & CLOSED != 0 {
                self.opened.wait(&mut h);
            }
        }
        start.elapsed()
    }

    fn leave(&self, slot: Option<usize>) {
        if let Some(i) = slot {
            self.entered[i].store(0, Relaxed);
        }
        if self.state.fetch_sub(1, SeqCst) == CLOSED | 1 {
            // The last one out of a closing gate.
            self.run_swap();
        }
    }

    /// Runs the lent swap (the gate is closed and empty), reopens the gate
    /// and wakes everyone.
    fn run_swap(&self) {
        let mut h = self.handoff.lock();
        let swap = h.swap.take().expect("a closed, empty gate without a swap");
        // SAFETY: see `Handoff`: the push waits for `done`, so the closure
        // is alive, and nothing else uses it (the pointer was just taken).
        #[allow(unsafe_code)]
        let r = catch_unwind(AssertUnwindSafe(|| unsafe { (*swap)() }));
        h.panic = r.err();
        h.done = true;
        self.state.fetch_and(!CLOSED, SeqCst);
        self.opened.notify_all();
        self.swapped.notify_one();
    }

    /// Closes the gate, runs `swap` with no operation inside (on this thread
    /// or on the last operation's to leave), reopens it and returns what
    /// `swap` returned. The caller must be the only one closing (the commit
    /// mutex) and must not hold the gate.
    pub fn close_and<R: Send>(&self, swap: impl FnOnce() -> R + Send) -> R {
        let mut swap = Some(swap);
        let mut out: Option<R> = None;
        let mut run = || out = swap.take().map(|f| f());
        let lent: &mut (dyn FnMut() + Send + '_) = &mut run;
        // SAFETY: only the lifetime is erased; see `Handoff` for why the
        // closure outlives every use of the pointer.
        #[allow(unsafe_code)]
        let lent: *mut Swap = unsafe { std::mem::transmute::<&mut (dyn FnMut() + Send + '_), &'static mut Swap>(lent) };
        self.defer_for_old_holds();
        {
            let mut h = self.handoff.lock();
            debug_assert!(h.swap.is_none(), "two pushes closed the gate");
            *h = Handoff { swap: Some(lent), done: false, panic: None };
        }
        if self.state.fetch_or(CLOSED, SeqCst) == 0 {
            // Nobody inside: swap here.
            self.run_swap();
        }
        let mut h = self.handoff.lock();
        while !h.done {
            self.swapped.wait(&mut h);
        }
        if let Some(p) = h.panic.take() {
            drop(h);
            resume_unwind(p);
        }
        drop(h);
        out.expect("the swap ran")
    }

    /// Waits (without closing: operations go on) while an operation has
    /// been inside for longer than [`YOUNG`], for at most [`MAX_DEFER`].
    fn defer_for_old_holds(&self) {
        let start = Instant::now();
        let young = YOUNG.as_micros() as u64;
        let mut deferred = false;
        loop {
            let now = self.stamp(Instant::now());
            let old = self.entered.iter().any(|e| {
                let t = e.load(Relaxed);
                t != 0 && now.saturating_sub(t) > young
            });
            if !old {
                return;
            }
            if start.elapsed() > MAX_DEFER {
                self.defers_given_up.fetch_add(1, Relaxed);
                return;
            }
            if !deferred {
                deferred = true;
                self.defers.fetch_add(1, Relaxed);
            }
            std::thread::yield_now();
        }
    }

    /// Pushes that deferred their close for an operation inside for long,
    /// and those of them that closed after [`MAX_DEFER`] regardless.
    pub fn defers(&self) -> (u64, u64) {
        (self.defers.load(Relaxed), self.defers_given_up.load(Relaxed))
    }

    /// Operations inside the gate now.
    #[cfg(test)]
    fn holders(&self) -> u64 {
        self.state.load(SeqCst) & !CLOSED
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gate.leave(self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::thread;

    fn wait_closed(gate: &Gate) {
        while gate.state.load(SeqCst) & CLOSED == 0 {
            spin_loop();
        }
    }

    #[test]
    fn the_last_operation_out_runs_the_swap_while_new_ones_wait() {
        let gate = Gate::default();
        let inside = AtomicBool::new(false);
        let (held, waited) = gate.enter();
        assert!(waited.is_none(), "an open gate made an operation wait");
        thread::scope(|s| {
            let push = s.spawn(|| {
                gate.close_and(|| {
                    assert_eq!(gate.holders(), 0);
                    // Long enough for the entrant below to spin and park.
                    thread::sleep(Duration::from_millis(8));
                    assert!(!inside.load(SeqCst), "an operation entered a closed gate");
                    thread::current().id()
                })
            });
            wait_closed(&gate);
            let entrant = s.spawn(|| {
                let (h, waited) = gate.enter();
                inside.store(true, SeqCst);
                drop(h);
                waited.expect("the gate was closed")
            });
            thread::sleep(Duration::from_millis(3));
            assert!(!push.is_finished(), "the push did not wait for the operation inside");
            // This thread is the last one out: it runs the swap.
            drop(held);
            assert_eq!(push.join().unwrap(), thread::current().id());
            assert!(entrant.join().unwrap() >= Duration::from_millis(5));
        });
        assert_eq!(gate.state.load(SeqCst), 0);
    }

    #[test]
    fn a_push_defers_for_an_old_operation_then_closes_regardless() {
        let gate = Gate::default();
        let (held, _) = gate.enter();
        thread::sleep(YOUNG * 4);
        thread::scope(|s| {
            let push = s.spawn(|| {
                let t0 = Instant::now();
                gate.close_and(|| ());
                t0.elapsed()
            });
            // The push defers, then closes and waits for this operation.
            wait_closed(&gate);
            drop(held);
            assert!(push.join().unwrap() >= MAX_DEFER);
        });
        assert_eq!(gate.defers(), (1, 1));
        // The slot was cleared: an empty gate does not defer.
        gate.close_and(|| ());
        assert_eq!(gate.defers(), (1, 1));
    }

    #[test]
    fn an_empty_gate_swaps_on_the_pushing_thread() {
        let gate = Gate::default();
        let me = thread::current().id();
        assert_eq!(gate.close_and(|| thread::current().id()), me);
        assert_eq!(gate.state.load(SeqCst), 0);
    }

    #[test]
    fn a_panic_in_the_swap_reaches_the_push_and_the_gate_reopens() {
        let gate = Gate::default();
        let (held, _) = gate.enter();
        thread::scope(|s| {
            let push = s.spawn(|| gate.close_and(|| panic!("swap failed")));
            wait_closed(&gate);
            drop(held);
            assert!(push.join().is_err());
        });
        assert_eq!(gate.state.load(SeqCst), 0);
        drop(gate.enter());
    }

    #[test]
    fn many_operations_and_pushes_never_overlap() {
        let gate = Gate::default();
        let in_ops = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let swaps = AtomicU64::new(0);
        thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(SeqCst) {
                        let (h, _) = gate.enter();
                        in_ops.fetch_add(1, SeqCst);
                        std::hint::black_box(0..100).for_each(drop);
                        in_ops.fetch_sub(1, SeqCst);
                        drop(h);
                    }
                });
            }
            for _ in 0..2000 {
                gate.close_and(|| {
                    assert_eq!(in_ops.load(SeqCst), 0, "an operation ran during a swap");
                    swaps.fetch_add(1, SeqCst);
                });
            }
            stop.store(true, SeqCst);
        });
        assert_eq!(swaps.load(SeqCst), 2000);
        assert_eq!(gate.state.load(SeqCst), 0);
    }
}
