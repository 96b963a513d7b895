//! Tests of the transaction gate: closes, reopens, the wait for an empty
//! gate, and stress runs in which no swap may overlap an operation.

use super::*;
use std::thread;

fn wait_closed(gate: &Gate) {
    while gate.state.load(SeqCst) & CLOSED == 0 {
        spin_loop();
    }
}

#[test]
fn the_last_operation_out_runs_the_swap_while_new_ones_wait() {
    // A close that is never given up (see the next tests for those that are).
    let gate = Gate::new(None, None);
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
            waited.expect("the gate was closed").kept_out
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
    let gate = Gate::new(None, None);
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
    let gate = Gate::new(Some(DRAIN), None);
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

/// Runs an operation (enter, leave) on a new thread of `s`; the receiver
/// hears when it has left.
fn enter_and_leave<'s>(s: &'s thread::Scope<'s, '_>, gate: &'s Gate) -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    s.spawn(move || {
        drop(gate.enter());
        tx.send(()).unwrap();
    });
    rx
}

#[test]
fn a_close_that_does_not_drain_is_given_up_and_tried_again() {
    let gate = &Gate::new(Some(Duration::from_millis(1)), None);
    let (held, _) = gate.enter();
    thread::scope(|s| {
        let push = s.spawn(|| gate.close_and(|| assert_eq!(gate.holders(), 0)));
        wait_closed(gate);
        // The operation inside does not leave; a new one still gets in.
        let got_in = enter_and_leave(s, gate).recv_timeout(Duration::from_secs(20));
        assert!(got_in.is_ok(), "an operation stayed out while an old one held a close");
        assert!(!push.is_finished(), "the push swapped with an operation inside");
        drop(held);
        push.join().unwrap();
    });
    assert!(gate.reopens() >= 1);
    assert_eq!(gate.state.load(SeqCst), 0);
}

#[test]
fn the_last_attempt_waits_for_the_drain() {
    let gate = &Gate::new(Some(Duration::from_micros(100)), None);
    let (held, _) = gate.enter();
    thread::scope(|s| {
        let push = s.spawn(|| gate.close_and(|| assert_eq!(gate.holders(), 0)));
        while !(gate.reopens() == u64::from(ATTEMPTS - 1) && gate.state.load(SeqCst) & CLOSED != 0) {
            thread::sleep(Duration::from_micros(50));
        }
        let rx = enter_and_leave(s, gate);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "an operation entered the last close");
        drop(held);
        push.join().unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(20)).is_ok(), "the gate did not reopen after the swap");
    });
    assert_eq!(gate.reopens(), u64::from(ATTEMPTS - 1));
    assert_eq!(gate.last_closes(), 1);
    assert_eq!(gate.state.load(SeqCst), 0);
}

/// Three threads run operations while 2,000 pushes swap: no swap sees an
/// operation inside.
fn operations_and_pushes_never_overlap(gate: Gate) {
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

#[test]
fn many_operations_and_pushes_never_overlap() {
    operations_and_pushes_never_overlap(Gate::default());
    operations_and_pushes_never_overlap(Gate::new(Some(DRAIN), None));
    operations_and_pushes_never_overlap(Gate::new(None, None));
    operations_and_pushes_never_overlap(Gate::new(None, Some(PATIENCE)));
}

#[test]
fn closes_given_up_at_once_never_let_a_swap_overlap_an_operation() {
    // A zero drain gives up every close that does not drain at once:
    // reopens race the last operations' leaving all the time.
    operations_and_pushes_never_overlap(Gate::new(Some(Duration::ZERO), None));
    // A zero patience closes at once after asking for an empty gate: the
    // close races the last ones out that would close it themselves.
    operations_and_pushes_never_overlap(Gate::new(Some(Duration::ZERO), Some(Duration::ZERO)));
    operations_and_pushes_never_overlap(Gate::new(None, Some(Duration::ZERO)));
}

#[test]
fn a_push_waits_for_an_empty_gate_while_operations_go_on() {
    let gate = &Gate::new(Some(DRAIN), Some(Duration::from_secs(60)));
    let (held, _) = gate.enter();
    thread::scope(|s| {
        let push = s.spawn(|| gate.close_and(|| (gate.holders(), thread::current().id())));
        while gate.state.load(SeqCst) & WANT == 0 {
            thread::sleep(Duration::from_micros(50));
        }
        // Operations come and go (never all gone) without waiting.
        for _ in 0..100 {
            let (h, waited) = gate.enter();
            assert!(waited.is_none(), "an operation waited while the push asked for an empty gate");
            drop(h);
        }
        assert_eq!(gate.state.load(SeqCst) & CLOSED, 0, "the push closed the gate");
        assert!(!push.is_finished(), "the push swapped with an operation inside");
        // The last one out closes the empty gate and swaps on its own thread.
        drop(held);
        assert_eq!(push.join().unwrap(), (0, thread::current().id()));
    });
    assert_eq!(gate.empties(), (1, 0));
    assert_eq!(gate.state.load(SeqCst), 0);
}

#[test]
fn a_push_out_of_patience_closes_on_the_operations_inside() {
    let patience = Duration::from_millis(3);
    let gate = &Gate::new(None, Some(patience));
    let (held, _) = gate.enter();
    thread::scope(|s| {
        let push = s.spawn(|| {
            let t0 = Instant::now();
            gate.close_and(|| assert_eq!(gate.holders(), 0));
            t0.elapsed()
        });
        wait_closed(gate);
        let rx = enter_and_leave(s, gate);
        assert!(rx.recv_timeout(Duration::from_millis(20)).is_err(), "an operation entered a close");
        drop(held);
        assert!(push.join().unwrap() >= patience);
        assert!(rx.recv_timeout(Duration::from_secs(20)).is_ok(), "the gate did not reopen after the swap");
    });
    assert_eq!(gate.empties(), (0, 1));
    // The operation inside was old: the push deferred its close for it, in vain.
    assert_eq!(gate.defers(), (1, 1));
    assert_eq!(gate.state.load(SeqCst), 0);
}

#[test]
fn a_background_thread_leaves_the_swap_to_a_request_thread() {
    let gate = &Gate::new(Some(DRAIN), Some(Duration::from_secs(60)));
    thread::scope(|s| {
        let push = s.spawn(|| {
            mark_background_thread();
            gate.close_and(|| thread::current().id())
        });
        while gate.state.load(SeqCst) & WANT == 0 {
            thread::sleep(Duration::from_micros(50));
        }
        assert!(!push.is_finished(), "the backend swapped on an empty gate itself");
        // A background thread's operation comes and goes: it leaves the swap.
        s.spawn(|| {
            mark_background_thread();
            drop(gate.enter());
        })
        .join()
        .unwrap();
        assert!(!push.is_finished(), "a background thread's operation took the swap on");
        drop(gate.enter());
        assert_eq!(push.join().unwrap(), thread::current().id());
    });
    assert_eq!(gate.empties(), (1, 0));
    // Other threads' pushes on an empty gate swap at once.
    assert_eq!(gate.close_and(|| thread::current().id()), thread::current().id());
}
