//! Tests of the transaction gate: who takes the turn, the wait for an empty
//! gate, and stress runs in which no swap may overlap an operation.

use super::*;
use std::cell::RefCell;
use std::sync::Mutex as StdMutex;
use std::thread::{self, ThreadId};

thread_local! {
    /// The entries of this thread's operations inside a gate, innermost last.
    static ENTRIES: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// The gate's owner as the transaction manager drives it: the work of a
/// push is `work`, run by whoever takes the turn.
struct Owner<F: Fn() + Sync> {
    gate: Gate,
    work: F,
    ran_on: StdMutex<Option<ThreadId>>,
}

impl<F: Fn() + Sync> Owner<F> {
    fn new(patience: Option<Duration>, work: F) -> Self {
        Self::with_drain(patience, None, work)
    }

    fn with_drain(patience: Option<Duration>, drain: Option<Duration>, work: F) -> Self {
        Owner { gate: Gate::new(patience, drain), work, ran_on: StdMutex::new(None) }
    }

    fn take_turn(&self, turn: Turn) {
        (self.work)();
        *self.ran_on.lock().unwrap() = Some(thread::current().id());
        self.gate.open(turn);
    }

    /// Enters; the entry waits on this thread's stack for [`Owner::leave`].
    fn enter(&self) -> Option<Wait> {
        let (entry, waited) = self.gate.enter();
        ENTRIES.with(|e| e.borrow_mut().push(entry));
        waited
    }

    fn leave(&self) {
        let entry = ENTRIES.with(|e| e.borrow_mut().pop()).expect("left without entering");
        if let Some(turn) = self.gate.leave(entry) {
            self.take_turn(turn);
        }
    }

    /// A commit's push; returns the thread that ran its work.
    fn push(&self) -> ThreadId {
        *self.ran_on.lock().unwrap() = None;
        if let Push::Mine(turn) = self.gate.push(true) {
            self.take_turn(turn);
        }
        self.ran_on.lock().unwrap().expect("the push's work ran")
    }

    /// [`Owner::push`], timed: how long it took.
    fn timed_push(&self) -> Duration {
        let t0 = Instant::now();
        self.push();
        t0.elapsed()
    }

    /// Nobody inside, nothing asked: the gate's state is all clear.
    #[track_caller]
    fn assert_idle(&self) {
        assert_eq!(self.gate.state.load(SeqCst), 0);
    }

    /// A quiesce: the pushing thread runs the work itself.
    fn quiesce(&self) {
        match self.gate.push(false) {
            Push::Mine(turn) => {
                assert_eq!(self.gate.holders(), 0);
                (self.work)();
                self.gate.open(turn);
            }
            Push::Done => panic!("a quiesce's work ran elsewhere"),
        }
    }
}

fn wait_for(gate: &Gate, bit: u64) {
    while gate.state.load(SeqCst) & bit == 0 {
        spin_loop();
    }
}

#[test]
fn the_last_operation_out_runs_the_swap_while_new_ones_wait() {
    let inside = AtomicBool::new(false);
    let owner = &Owner::new(None, || {
        // Long enough for the entrant below to spin and park.
        thread::sleep(Duration::from_millis(8));
        assert!(!inside.load(SeqCst), "an operation entered a closed gate");
    });
    assert!(owner.enter().is_none(), "an open gate made an operation wait");
    thread::scope(|s| {
        let push = s.spawn(|| owner.push());
        wait_for(&owner.gate, CLOSED);
        let entrant = s.spawn(|| {
            let waited = owner.enter();
            inside.store(true, SeqCst);
            owner.leave();
            waited.expect("the gate was closed").wall
        });
        thread::sleep(Duration::from_millis(3));
        assert!(!push.is_finished(), "the push did not wait for the operation inside");
        // This thread is the last one out: it runs the swap.
        owner.leave();
        assert_eq!(push.join().unwrap(), thread::current().id());
        // It waited (the swap itself checked that it was not inside); how
        // long depends on when its thread first ran.
        assert!(entrant.join().unwrap() > Duration::ZERO);
    });
    owner.assert_idle();
    assert_eq!(owner.gate.empties(), (0, 0));
}

#[test]
fn an_empty_gate_swaps_on_the_pushing_thread() {
    for patience in [None, Some(PATIENCE)] {
        let owner = Owner::new(patience, || ());
        assert_eq!(owner.push(), thread::current().id());
        owner.assert_idle();
    }
}

/// Three threads run operations while 2,000 pushes (every tenth a quiesce)
/// run their work: no work sees an operation inside.
fn operations_and_pushes_never_overlap(patience: Option<Duration>, drain: Option<Duration>) {
    let in_ops = AtomicU64::new(0);
    let swaps = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let owner = &Owner::with_drain(patience, drain, || {
        assert_eq!(in_ops.load(SeqCst), 0, "an operation ran during a swap");
        swaps.fetch_add(1, SeqCst);
    });
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(SeqCst) {
                    owner.enter();
                    in_ops.fetch_add(1, SeqCst);
                    std::hint::black_box(0..100).for_each(drop);
                    in_ops.fetch_sub(1, SeqCst);
                    owner.leave();
                }
            });
        }
        for i in 0..2000 {
            if i % 10 == 9 {
                owner.quiesce();
            } else {
                owner.push();
            }
        }
        stop.store(true, SeqCst);
    });
    assert_eq!(swaps.load(SeqCst), 2000);
    owner.assert_idle();
}

#[test]
fn many_operations_and_pushes_never_overlap() {
    operations_and_pushes_never_overlap(Some(PATIENCE), Some(DRAIN));
    operations_and_pushes_never_overlap(None, Some(DRAIN));
    operations_and_pushes_never_overlap(None, None);
    // A zero patience closes at once after asking for an empty gate: the
    // close races the last ones out that would close it themselves.
    operations_and_pushes_never_overlap(Some(Duration::ZERO), None);
}

#[test]
fn closes_given_up_at_once_never_let_a_swap_overlap_an_operation() {
    // A zero drain gives up every close that does not drain at once:
    // reopens race the last operations' leaving all the time.
    operations_and_pushes_never_overlap(None, Some(Duration::ZERO));
    operations_and_pushes_never_overlap(Some(Duration::ZERO), Some(Duration::ZERO));
}

#[test]
fn a_close_that_does_not_drain_is_given_up_and_tried_again() {
    let owner = &Owner::with_drain(None, Some(Duration::from_millis(1)), || ());
    owner.enter();
    thread::scope(|s| {
        let push = s.spawn(|| owner.push());
        wait_for(&owner.gate, CLOSED);
        // Entrants wait no longer than the drain (and its noticing), then go
        // on while the old operation is still inside.
        for _ in 0..3 {
            let t0 = Instant::now();
            owner.enter();
            assert!(t0.elapsed() < Duration::from_secs(2));
            owner.leave();
        }
        assert!(owner.gate.reopens().0 >= 1, "no close was given up");
        assert!(!push.is_finished(), "the push swapped with an operation inside");
        // The old operation leaves: a later close drains, or its last one
        // out (this thread) swaps.
        owner.leave();
        push.join().unwrap();
    });
    owner.assert_idle();
}

#[test]
fn the_last_attempt_waits_for_the_drain() {
    let owner = &Owner::with_drain(None, Some(Duration::from_micros(100)), || ());
    owner.enter();
    thread::scope(|s| {
        let push = s.spawn(|| owner.push());
        while owner.gate.reopens().1 == 0 {
            thread::sleep(Duration::from_micros(200));
        }
        // The last close holds however long.
        thread::sleep(Duration::from_millis(5));
        assert_ne!(owner.gate.state.load(SeqCst) & CLOSED, 0, "the last close was given up");
        assert_eq!(owner.gate.reopens().0, u64::from(ATTEMPTS - 1));
        owner.leave();
        assert_eq!(push.join().unwrap(), thread::current().id());
    });
    owner.assert_idle();
}

#[test]
fn a_push_waits_for_an_empty_gate_while_operations_go_on() {
    let owner = &Owner::new(Some(Duration::from_secs(60)), || ());
    owner.enter();
    thread::scope(|s| {
        let push = s.spawn(|| owner.push());
        wait_for(&owner.gate, WANT);
        // Operations come and go (never all gone) without waiting.
        for _ in 0..100 {
            assert!(owner.enter().is_none(), "an operation waited while the push asked for an empty gate");
            owner.leave();
        }
        assert_eq!(owner.gate.state.load(SeqCst) & CLOSED, 0, "the push closed the gate");
        assert!(!push.is_finished(), "the push swapped with an operation inside");
        // The last one out closes the empty gate and swaps on its own thread.
        owner.leave();
        assert_eq!(push.join().unwrap(), thread::current().id());
    });
    assert_eq!(owner.gate.empties(), (1, 0));
    owner.assert_idle();
}

#[test]
fn a_push_out_of_patience_closes_on_the_operations_inside() {
    let patience = Duration::from_millis(3);
    let owner = &Owner::new(Some(patience), || ());
    owner.enter();
    thread::scope(|s| {
        let push = s.spawn(|| owner.timed_push());
        wait_for(&owner.gate, CLOSED);
        let (tx, rx) = std::sync::mpsc::channel();
        s.spawn(move || {
            owner.enter();
            owner.leave();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(20)).is_err(), "an operation entered a close");
        owner.leave();
        assert!(push.join().unwrap() >= patience);
        assert!(rx.recv_timeout(Duration::from_secs(20)).is_ok(), "the gate did not reopen after the swap");
    });
    assert_eq!(owner.gate.empties(), (0, 1));
    owner.assert_idle();
}

#[test]
fn a_quiesce_runs_on_the_pushing_thread_once_the_gate_drains() {
    let owner = &Owner::new(Some(PATIENCE), || ());
    owner.enter();
    thread::scope(|s| {
        let quiesce = s.spawn(|| owner.quiesce());
        wait_for(&owner.gate, CLOSED);
        thread::sleep(Duration::from_millis(2));
        assert!(!quiesce.is_finished(), "a quiesce ran with an operation inside");
        // The last one out only wakes it.
        owner.leave();
        quiesce.join().unwrap();
    });
    owner.assert_idle();
}

#[test]
fn a_background_thread_leaves_the_swap_to_a_request_thread() {
    let owner = &Owner::new(Some(Duration::from_secs(60)), || ());
    thread::scope(|s| {
        let push = s.spawn(|| {
            mark_background_thread();
            owner.push()
        });
        wait_for(&owner.gate, WANT);
        assert!(!push.is_finished(), "the backend swapped on an empty gate itself");
        // A background thread's operation comes and goes: it leaves the swap.
        s.spawn(|| {
            mark_background_thread();
            owner.enter();
            owner.leave();
        })
        .join()
        .unwrap();
        assert!(!push.is_finished(), "a background thread's operation took the swap on");
        owner.enter();
        owner.leave();
        assert_eq!(push.join().unwrap(), thread::current().id());
    });
    assert_eq!(owner.gate.empties(), (1, 0));
    // Other threads' pushes on an empty gate swap at once.
    assert_eq!(owner.push(), thread::current().id());
}

#[test]
fn a_push_defers_for_an_old_operation_then_closes_regardless() {
    let owner = &Owner::new(None, || ());
    owner.enter();
    thread::sleep(YOUNG * 4);
    thread::scope(|s| {
        let push = s.spawn(|| owner.timed_push());
        // The push defers, then closes and waits for this operation.
        wait_for(&owner.gate, CLOSED);
        owner.leave();
        assert!(push.join().unwrap() >= MAX_DEFER);
    });
    assert_eq!(owner.gate.defers(), (1, 1));
    owner.assert_idle();
}
