//! The transaction gate: operations hold it shared while they change
//! metadata; a push closes it for the few microseconds of its swap (see
//! `cil`), so a checkpoint holds only whole operations.
//!
//! ## Shape
//! jbd2's: a count of operations inside, a closed flag, and a wait queue,
//! in one atomic word plus one mutex and two condition variables. Two
//! refinements, each measured to pay on this two-core machine (see
//! `bench/results/2026-11-26-fsmark-scale-1m-empty` and the history under
//! "Writer waits at a push" in `docs/performance.md`):
//!
//! * **The last one out swaps.** A thread that has to be woken runs only at
//!   the next scheduler tick when both cores are busy (4 ms here), so a
//!   push that parks until the gate drains, then swaps, held every entrant
//!   out for milliseconds. Instead, whoever sees the closed gate empty runs
//!   the swap at once, on its own CPU: the push itself if nobody was
//!   inside, else the last operation to leave. The gate does not run the
//!   swap: it hands the *turn* ([`Turn`]) to that thread, and the owner
//!   (the transaction manager) runs its swap, a method of shared state, and
//!   then [`Gate::open`]s. Nothing is lent between threads.
//! * **A push first waits for an empty moment.** It sets the `WANT` bit,
//!   which keeps nobody out, and the first thread to see the count of
//!   operations inside reach zero closes the gate and takes the turn. Only
//!   after the patience ([`PATIENCE`], `-o push_patience_us`) does the push
//!   close the gate on the operations inside. At 1M files through FUSE
//!   every push of the create and most of the unlink found such a moment,
//!   and an operation waits for the swap alone.
//!
//! * **A close that does not drain is given up.** A handle inside can lose
//!   its CPU for a scheduler tick in the middle of an ordinary operation,
//!   and a close then holds every entrant behind it. When the handles
//!   inside have not all left [`DRAIN`] after a close (`-o push_drain_us`),
//!   the gate reopens and the push starts over (its patience first); after
//!   [`ATTEMPTS`] closes the last one waits however long (handles that are
//!   long for real must not starve the push). Whoever notices first reopens:
//!   an entrant spinning on the gate (it is on a CPU; the push, parked, may
//!   have to wait for one) or the push at its deadline. A reopen clears
//!   `CLOSED` only while handles are inside (a compare-and-swap from
//!   `CLOSED | n`, n > 0): once the count is zero the last one out has taken
//!   the turn, so a turn is never both taken and abandoned. Through FUSE at
//!   1M files, the parallel `rm -rf`'s longest wait was 0.2–0.4 ms with it
//!   and 0.8–2.0 ms without (`bench/results/2026-11-27-gate-turn-1m`).
//!
//! * **The push waits for a good moment to close.** Before each close out
//!   of patience it defers while an operation has been inside for longer
//!   than [`YOUNG`] (most likely its thread lost its CPU: the close would
//!   only be given up), for at most [`MAX_DEFER`], the gate open meanwhile.
//!   Operations stamp their entry time in a per-thread slot for this.
//!   Engine, 1M creates and unlinks in two threads: without it the longest
//!   wait of a thread that kept its CPU was the drain itself, 220–300 µs, in
//!   every phase.
//!
//! Background threads (the backend, at a lowered priority, and the reaper;
//! see [`mark_background_thread`]) do not take a turn at an empty moment:
//! the kernel switches them out at the next wake-up of a request thread, and
//! a swap they were running held the gate closed for milliseconds. The last
//! one out of a closed gate takes the turn, whoever it is.
//!
//! An operation that finds the gate closed spins (a parked thread gets its
//! CPU back only at a tick): through a close that may be given up, until it
//! is; through any other for [`SPIN`], then it parks.
//!
//! ## State
//! One atomic word: the number of operations inside, the `CLOSED` bit and
//! the `WANT` bit. An operation enters by incrementing the count while
//! `CLOSED` is clear. Exactly one thread moves the word to `CLOSED` with a
//! count of zero, and it takes the turn: the push (a compare-and-swap from
//! `WANT` on an empty gate, or its close when nobody is inside) or the last
//! one out (its `fetch_sub` to `CLOSED`, or to `WANT` followed by a
//! compare-and-swap to `CLOSED`, which fails if an operation got in
//! meanwhile or the push closed first). One push at a time (the caller's
//! commit mutex). A push that runs its work itself (`delegate` false: a
//! quiesce) is woken by the last one out instead.
//!
//! ## Wake-ups
//! [`Gate::open`] clears `CLOSED`, then, under the mutex, marks the push done
//! and wakes the parked entrants and the push; each side re-checks its
//! condition under the mutex before it sleeps, so no wake-up is lost.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::hint::spin_loop;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

/// How long an operation spins on a closed gate before it parks.
pub const SPIN: Duration = Duration::from_micros(20);

/// How long a closed gate waits for the operations inside to leave before
/// it reopens and the push tries again (the default of `-o push_drain_us`).
pub const DRAIN: Duration = Duration::from_micros(200);

/// How many times a push closes the gate; its last close waits for the
/// drain, however long.
pub const ATTEMPTS: u32 = 10;

/// An operation inside for less than this is still running on its CPU.
pub const YOUNG: Duration = Duration::from_micros(50);

/// The longest a push defers its close for an operation inside for long.
pub const MAX_DEFER: Duration = Duration::from_millis(5);

/// How often a deferring push looks again.
const DEFER_STEP: Duration = Duration::from_micros(20);

/// Entry-time slots (threads share one only when there are more of them).
const SLOTS: usize = 16;

/// How long a push waits for a moment with no operation inside before it
/// closes the gate on the operations inside (the default of
/// `-o push_patience_us`).
pub const PATIENCE: Duration = Duration::from_millis(5);

/// Operations may not enter (a push's close, or its swap running).
const CLOSED: u64 = 1 << 63;
/// A push waits for the gate to empty: whoever sees the count reach zero
/// closes it and takes the turn. Operations still enter.
const WANT: u64 = 1 << 62;
/// The operations inside.
const COUNT: u64 = WANT - 1;

thread_local! {
    /// The calling thread does background work (see
    /// [`mark_background_thread`]).
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one that does long stretches of background
/// work (the backend, at a lowered priority; the reaper): it does not take
/// a turn at an empty moment (see the module essay).
pub fn mark_background_thread() {
    BACKGROUND.with(|b| b.set(true));
}

fn background() -> bool {
    BACKGROUND.with(Cell::get)
}

/// An operation's place inside the gate: the entry-time slot it stamped,
/// if it got one. Given back to [`Gate::leave`].
#[derive(Debug, Clone, Copy)]
pub struct Entry(Option<u8>);

/// How long an operation waited at a closed gate.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    /// From finding the gate closed until it was in.
    pub wall: Duration,
    /// The kernel switched the waiting thread out while it spun
    /// (involuntarily: its count of preemptions rose), so part of `wall`
    /// may be another thread's time on its CPU. Never set for a thread that
    /// parked (it gave its CPU up itself).
    pub preempted: bool,
}

/// Times the kernel has switched this thread out involuntarily.
fn preemptions() -> u64 {
    // SAFETY: a zeroed `rusage` is a valid value of that plain C struct, and
    // getrusage writes at most one `rusage` to the pointer, which is to a
    // live local; RUSAGE_THREAD reports the calling thread alone.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
            return 0;
        }
        ru
    };
    ru.ru_nivcsw as u64
}

/// The gate is closed and empty, and the holder of this turn runs the
/// push's work now, then passes the turn to [`Gate::open`].
#[must_use = "the gate stays closed until the turn is passed to Gate::open"]
pub struct Turn {
    began: Instant,
    preemptions: u64,
}

impl Turn {
    fn now() -> Turn {
        Turn { began: Instant::now(), preemptions: preemptions() }
    }
}

/// What [`Gate::push`] left its caller to do.
#[must_use]
pub enum Push {
    /// Run the work, then [`Gate::open`].
    Mine(Turn),
    /// An operation leaving the gate took the turn and has opened the gate
    /// again: its work is done.
    Done,
}

#[derive(Default)]
struct Progress {
    /// The push's turn has ended (the gate opened).
    done: bool,
    /// The gate closed by a push that runs its own work has drained.
    drained: bool,
    /// The close was given up (see `reopen`).
    reopened: bool,
}

/// See the module essay.
pub struct Gate {
    state: AtomicU64,
    /// [`PATIENCE`], or `None`: a push closes the gate at once.
    patience: Option<Duration>,
    /// [`DRAIN`], or `None`: a close is never given up.
    drain: Option<Duration>,
    /// The running close may be given up.
    reopenable: AtomicBool,
    /// The running push lets the last one out take its turn.
    delegate: AtomicBool,
    progress: Mutex<Progress>,
    /// Parked entrants wait here for the gate to open.
    opened: Condvar,
    /// The push waits here for its turn to end (or the gate to drain).
    pushed: Condvar,
    epoch: Instant,
    /// When the gate last closed (µs since `epoch`).
    closed_at: AtomicU64,
    /// Turns taken at a moment the gate was empty (nobody kept out but for
    /// the swap), and pushes whose patience ran out so that they closed the
    /// gate on operations inside.
    empty_swaps: AtomicU64,
    impatient_closes: AtomicU64,
    /// Turns during which the kernel switched their thread out, and the
    /// longest (µs) of the others.
    swaps_preempted: AtomicU64,
    swap_on_cpu_us_max: AtomicU64,
    /// The longest the gate stayed closed (µs, one close to its opening).
    closed_us_max: AtomicU64,
    /// Closes given up, and pushes that reached their last close.
    reopens: AtomicU64,
    last_closes: AtomicU64,
    /// When each thread's operation entered (µs since `epoch`, plus one;
    /// 0: none), by thread slot.
    entered: [AtomicU64; SLOTS],
    /// Pushes that deferred their close, and those that gave up deferring.
    defers: AtomicU64,
    defers_given_up: AtomicU64,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate::new(Some(PATIENCE), Some(DRAIN))
    }
}

impl Gate {
    /// A gate whose pushes wait up to `patience` for it to empty (`None`:
    /// they close it at once) and whose closes are given up after `drain`
    /// (`None`: never).
    pub fn new(patience: Option<Duration>, drain: Option<Duration>) -> Gate {
        Gate {
            state: AtomicU64::new(0),
            patience,
            drain,
            reopenable: AtomicBool::new(false),
            delegate: AtomicBool::new(false),
            progress: Mutex::new(Progress::default()),
            opened: Condvar::new(),
            pushed: Condvar::new(),
            epoch: Instant::now(),
            closed_at: AtomicU64::new(0),
            empty_swaps: AtomicU64::new(0),
            impatient_closes: AtomicU64::new(0),
            swaps_preempted: AtomicU64::new(0),
            swap_on_cpu_us_max: AtomicU64::new(0),
            closed_us_max: AtomicU64::new(0),
            reopens: AtomicU64::new(0),
            last_closes: AtomicU64::new(0),
            entered: std::array::from_fn(|_| AtomicU64::new(0)),
            defers: AtomicU64::new(0),
            defers_given_up: AtomicU64::new(0),
        }
    }

    fn try_enter(&self) -> bool {
        let s = self.state.load(SeqCst);
        s & CLOSED == 0 && self.state.compare_exchange_weak(s, s + 1, SeqCst, SeqCst).is_ok()
    }

    fn micros(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Enters the gate, waiting while a push holds it closed; the caller
    /// must [`Gate::leave`] exactly once, with the entry. Also returns how
    /// long it waited: `None` if the gate was open.
    pub fn enter(&self) -> (Entry, Option<Wait>) {
        let waited = if self.try_enter() { None } else { Some(self.wait_to_enter()) };
        let slot = crate::thread_index::thread_index() % SLOTS;
        let stamp = self.micros() + 1;
        let stamped = self.entered[slot].compare_exchange(0, stamp, Relaxed, Relaxed).is_ok();
        (Entry(stamped.then_some(slot as u8)), waited)
    }

    /// Spins, then parks until the gate lets this thread in.
    fn wait_to_enter(&self) -> Wait {
        let start = Instant::now();
        let switched_out = preemptions();
        let mut n = 0u32;
        loop {
            if self.try_enter() {
                return Wait { wall: start.elapsed(), preempted: preemptions() != switched_out };
            }
            n = n.wrapping_add(1);
            // Read the clock only every so often: it costs more than a spin.
            if n.is_multiple_of(64) && !self.reopen_if_stuck() && start.elapsed() > SPIN {
                break;
            }
            spin_loop();
        }
        let mut p = self.progress.lock();
        while !self.try_enter() {
            if self.state.load(SeqCst) & CLOSED != 0 {
                self.opened.wait(&mut p);
            }
        }
        Wait { wall: start.elapsed(), preempted: false }
    }

    /// Leaves the gate. `Some` if the caller is the one to run the waiting
    /// push's work now (the gate is closed and empty); it must then pass
    /// the turn to [`Gate::open`].
    pub fn leave(&self, entry: Entry) -> Option<Turn> {
        if let Entry(Some(slot)) = entry {
            self.entered[usize::from(slot)].store(0, Relaxed);
        }
        match self.state.fetch_sub(1, SeqCst) {
            // The last one out of a closed gate.
            s if s == CLOSED | 1 => {
                if self.delegate.load(SeqCst) {
                    return Some(Turn::now());
                }
                let mut p = self.progress.lock();
                p.drained = true;
                self.pushed.notify_one();
                None
            }
            // The last one out while a push waits for an empty gate: it
            // closes the gate, unless an operation got in meanwhile (then a
            // later last one out will) or the push closed it first.
            s if s == WANT | 1 && !background() => self.close_empty(),
            _ => None,
        }
    }

    /// Closes the gate at an empty moment a push waits for; `None` if an
    /// operation got in meanwhile or the push closed it first.
    fn close_empty(&self) -> Option<Turn> {
        self.state.compare_exchange(WANT, CLOSED, SeqCst, SeqCst).ok()?;
        self.closed_at.store(self.micros(), SeqCst);
        self.empty_swaps.fetch_add(1, Relaxed);
        Some(Turn::now())
    }

    /// Starts a push: closes the gate once it is empty. With `delegate`,
    /// the push first waits up to the patience for an empty moment, and
    /// the last operation out may take the turn (then this returns
    /// [`Push::Done`] once it has opened the gate again); without, the push
    /// closes at once and always gets the turn itself, once the gate has
    /// drained. The caller must be the only one pushing and must not be
    /// inside the gate.
    pub fn push(&self, delegate: bool) -> Push {
        self.delegate.store(delegate, SeqCst);
        let patience = self.patience.filter(|_| delegate);
        let drain = self.drain.filter(|_| delegate);
        for attempt in 1.. {
            *self.progress.lock() = Progress::default();
            // Entrants spin through a close that may be given up, and
            // through a turn taken at an empty moment.
            let last = drain.is_none() || attempt >= ATTEMPTS;
            self.reopenable.store(!last, SeqCst);
            if let Some(patience) = patience {
                if let Some(push) = self.wait_for_empty(patience) {
                    return push;
                }
            }
            if delegate && self.defer() {
                return Push::Done;
            }
            // Close on the operations inside. The stamp first: an entrant
            // that finds the gate closed must not judge this close by the
            // last one's.
            self.closed_at.store(self.micros(), SeqCst);
            let mut s = self.state.load(SeqCst);
            loop {
                if patience.is_some() && s & WANT == 0 {
                    // A last one out closed the empty gate first: its turn.
                    return self.wait_done();
                }
                match self.state.compare_exchange_weak(s, (s & !WANT) | CLOSED, SeqCst, SeqCst) {
                    Ok(_) => break,
                    Err(now) => s = now,
                }
            }
            if s & COUNT == 0 {
                return Push::Mine(Turn::now());
            }
            if patience.is_some() {
                self.impatient_closes.fetch_add(1, Relaxed);
            }
            if !delegate {
                let mut p = self.progress.lock();
                while !p.drained {
                    self.pushed.wait(&mut p);
                }
                return Push::Mine(Turn::now());
            }
            if drain.is_some() && last {
                self.last_closes.fetch_add(1, Relaxed);
            }
            let deadline = drain.filter(|_| !last).map(|d| Instant::now() + d);
            if self.wait_swapped(deadline) {
                return Push::Done;
            }
        }
        unreachable!("a push's last close waits for the drain")
    }

    /// Sets `WANT` and waits up to `patience` for a moment with no operation
    /// inside; `Some` if the push's work was then taken on (by this thread,
    /// on an empty gate, or by a last one out).
    fn wait_for_empty(&self, patience: Duration) -> Option<Push> {
        let s = self.state.fetch_or(WANT, SeqCst);
        debug_assert_eq!(s & (WANT | CLOSED), 0, "a push found the gate closed");
        // Empty now: nobody is left to leave, so close it here (unless this
        // thread is likely to be switched out in the middle).
        if s == 0 && !background() {
            if let Some(turn) = self.close_empty() {
                return Some(Push::Mine(turn));
            }
        }
        let deadline = Instant::now() + patience;
        let mut p = self.progress.lock();
        while !p.done && Instant::now() < deadline {
            let _ = self.pushed.wait_until(&mut p, deadline);
        }
        p.done.then_some(Push::Done)
    }

    /// Before a close: defers while an operation has been inside for longer
    /// than [`YOUNG`], for at most [`MAX_DEFER`], the gate open (and, with a
    /// patience, its last one out may still take the turn: then true).
    fn defer(&self) -> bool {
        let until = Instant::now() + MAX_DEFER;
        let mut deferred = false;
        let mut p = self.progress.lock();
        loop {
            if p.done {
                return true;
            }
            if !self.old_hold_inside() {
                return false;
            }
            let now = Instant::now();
            if now >= until {
                self.defers_given_up.fetch_add(1, Relaxed);
                return false;
            }
            if !deferred {
                deferred = true;
                self.defers.fetch_add(1, Relaxed);
            }
            let _ = self.pushed.wait_until(&mut p, now + DEFER_STEP);
        }
    }

    /// Whether an operation has been inside for longer than [`YOUNG`].
    fn old_hold_inside(&self) -> bool {
        let now = self.micros() + 1;
        let young = YOUNG.as_micros() as u64;
        self.entered.iter().any(|e| {
            let t = e.load(Relaxed);
            t != 0 && now.saturating_sub(t) > young
        })
    }

    /// Pushes that deferred their close for an operation inside for long,
    /// and those of them that closed after [`MAX_DEFER`] regardless.
    pub fn defers(&self) -> (u64, u64) {
        (self.defers.load(Relaxed), self.defers_given_up.load(Relaxed))
    }

    /// Waits for the turn taken by a last one out to end (true), or for the
    /// close to be given up before it could be (false). With a deadline,
    /// gives the close up itself then if operations are still inside.
    fn wait_swapped(&self, deadline: Option<Instant>) -> bool {
        let mut p = self.progress.lock();
        loop {
            if p.done {
                return true;
            }
            if p.reopened {
                return false;
            }
            match deadline {
                Some(at) if Instant::now() >= at => {
                    if self.reopen(&mut p) {
                        return false;
                    }
                    // The last one is out and has the turn.
                    self.pushed.wait(&mut p);
                }
                Some(at) => drop(self.pushed.wait_until(&mut p, at)),
                None => self.pushed.wait(&mut p),
            }
        }
    }

    /// Gives up a close while operations are still inside: clears `CLOSED`
    /// (the push closes again later) and wakes the parked entrants and the
    /// push. False if the gate is not closed, or is empty (its last
    /// operation out has the turn).
    fn reopen(&self, p: &mut Progress) -> bool {
        let mut s = self.state.load(SeqCst);
        loop {
            if s & CLOSED == 0 || s & COUNT == 0 {
                return false;
            }
            match self.state.compare_exchange_weak(s, s & !CLOSED, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        p.reopened = true;
        self.reopenable.store(false, SeqCst);
        self.reopens.fetch_add(1, Relaxed);
        let closed = self.micros().saturating_sub(self.closed_at.load(SeqCst));
        self.closed_us_max.fetch_max(closed, Relaxed);
        self.opened.notify_all();
        self.pushed.notify_one();
        true
    }

    /// Called by a spinning entrant: gives up a close that has lasted longer
    /// than the drain (an operation inside lost its CPU; the push, parked,
    /// may not get one soon either). Whether the close may still be given
    /// up (the entrant need not park).
    fn reopen_if_stuck(&self) -> bool {
        if !self.reopenable.load(SeqCst) {
            return false;
        }
        let drain = self.drain.map_or(u64::MAX, |d| d.as_micros() as u64);
        let closed_at = self.closed_at.load(SeqCst);
        if self.micros().saturating_sub(closed_at) > drain {
            // Only tried: a turn's runner takes the mutex as it opens.
            if let Some(mut p) = self.progress.try_lock() {
                if self.closed_at.load(SeqCst) == closed_at {
                    self.reopen(&mut p);
                }
            }
        }
        true
    }

    fn wait_done(&self) -> Push {
        let mut p = self.progress.lock();
        while !p.done {
            self.pushed.wait(&mut p);
        }
        Push::Done
    }

    /// Ends a turn: reopens the gate and wakes the parked entrants and the
    /// push.
    pub fn open(&self, turn: Turn) {
        let us = turn.began.elapsed().as_micros() as u64;
        if preemptions() != turn.preemptions {
            self.swaps_preempted.fetch_add(1, Relaxed);
        } else {
            self.swap_on_cpu_us_max.fetch_max(us, Relaxed);
        }
        let closed = self.micros().saturating_sub(self.closed_at.load(SeqCst));
        self.closed_us_max.fetch_max(closed, Relaxed);
        // Operations spinning on the gate go on at once (`reopenable` stays
        // as it is: cleared before the opening, it made spinners park, and
        // wait for a CPU, just as the gate opened); the parked ones and the
        // push are woken under the mutex.
        let s = self.state.fetch_and(!CLOSED, SeqCst);
        debug_assert_eq!(s, CLOSED, "a turn ended on a gate not closed and empty");
        let mut p = self.progress.lock();
        p.done = true;
        self.opened.notify_all();
        self.pushed.notify_one();
    }

    /// The longest the gate stayed closed for one close (µs).
    pub fn closed_us_max(&self) -> u64 {
        self.closed_us_max.load(Relaxed)
    }

    /// Turns taken at a moment with no operation inside, and pushes that
    /// closed the gate on operations inside once their patience ran out.
    pub fn empties(&self) -> (u64, u64) {
        (self.empty_swaps.load(Relaxed), self.impatient_closes.load(Relaxed))
    }

    /// Turns whose thread the kernel switched out while it ran one, and the
    /// longest turn (µs, taken to reopening) of the others.
    pub fn swaps(&self) -> (u64, u64) {
        (self.swaps_preempted.load(Relaxed), self.swap_on_cpu_us_max.load(Relaxed))
    }

    /// Closes given up because an operation inside did not leave in time,
    /// and pushes that reached their last close (never given up).
    pub fn reopens(&self) -> (u64, u64) {
        (self.reopens.load(Relaxed), self.last_closes.load(Relaxed))
    }

    /// Operations inside the gate now.
    #[cfg(test)]
    fn holders(&self) -> u64 {
        self.state.load(SeqCst) & COUNT
    }
}

#[cfg(test)]
mod tests;
