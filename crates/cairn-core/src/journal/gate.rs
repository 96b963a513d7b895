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
//! * **A push first waits for an empty gate.** It does not close the gate
//!   at once: it sets the `WANT` bit, which keeps nobody out, and the
//!   first thread that sees the count of operations inside reach zero (the
//!   last one out, in its [`Held`]'s drop) closes the gate and runs the
//!   swap at once, on its own CPU. So no operation is kept out but for the
//!   swap itself (tens of µs), and no operation is waited for. Only if the
//!   gate has not emptied after the patience (`-o push_patience_us`,
//!   [`PATIENCE`]) does the push close it on the operations inside, as
//!   below. Through FUSE, 1M creates and a parallel `rm -rf`: every push of
//!   the create and 51 of 59 of the unlink found an empty moment, and the
//!   longest wait fell from 2.7 and 16 ms to 23 and 197 µs (the drain of
//!   a close out of patience). Background threads (the backend, the
//!   reaper; see [`mark_background_thread`]) do not take such a swap on:
//!   the kernel switches them out at the next wake-up of a request thread,
//!   and a swap they were running then held the gate closed for
//!   milliseconds.
//! * **The last one out swaps.** The push hands its swap to the gate
//!   ([`Gate::close_and`]) and closes it. Whoever sees the gate closed with
//!   no operation inside runs the swap at once: the push itself if none
//!   was, else the last operation to leave, on its own CPU, in its
//!   [`Held`]'s drop. It then reopens the gate and wakes the push. So the
//!   gate is closed for the rest of the running operations plus the swap,
//!   and no thread must be scheduled in between.
//! * **A close that does not drain is given up.** An operation inside can
//!   lose its CPU for a scheduler tick (4 ms here) in the middle of an
//!   ordinary create: traced, about 500 holds of 3–11 ms in 2 million
//!   creates and unlinks, every one in `Fs::change`. A push that closed the
//!   gate then held every entrant behind it. Now, when the operations inside
//!   have not all left [`DRAIN`] after the close, the gate reopens: the
//!   entrants go on, the push waits for the old operation to leave (the
//!   deferral below) and closes again. Whoever notices first reopens: an
//!   entrant spinning on the gate (it is on a CPU; the push, parked, may
//!   have to wait for one) or the push at its timeout. A reopen clears
//!   `CLOSED` only while operations are inside: once the count is zero the
//!   last one out runs the swap, so a swap is never both run and abandoned.
//!   After [`ATTEMPTS`] closes, the last waits for the drain however long
//!   (operations that are long for real, say behind a device read, must not
//!   starve the push).
//! * **Operations spin through a close.** One that finds the gate closed
//!   spins (a parked thread gets its CPU back only at a tick) while the
//!   close may be given up, so for about [`DRAIN`] at most, and gives it up
//!   itself once it is overdue; on a close that will not be given up (the
//!   last attempt's, or every close with `push_drain_us=0`) it spins for
//!   [`SPIN`] and then parks. Spinning longer there made things worse: the
//!   operation the gate waited for was often queued on the spinner's own
//!   CPU, and ran only when the spinner gave it up (traced: closes of
//!   exactly the spin time, 1 ms, when operations spun for 1 ms). Yielding
//!   instead of parking was worse still: the yielder got its CPU back only
//!   at the next tick.
//! * **The push waits for a good moment.** Before each close (once its
//!   patience has run out, or at once without one), it defers while an
//!   operation has been inside for longer than [`YOUNG`] (most likely its
//!   thread lost its CPU: closing then would only be given up), for at most
//!   [`MAX_DEFER`], sleeping so that the operation can have the CPU; the
//!   gate stays open meanwhile (and, with a patience, its last one out may
//!   still swap). Operations stamp their entry time in a per-thread slot
//!   for this.
//! * **What a wait is.** An operation's wait is measured from finding the
//!   gate closed to the gate's first opening after that ([`Wait::kept_out`]):
//!   what the push cost it. The time by the clock until it got in is kept
//!   too, with whether the kernel switched the spinning thread out meanwhile
//!   (its count of involuntary switches, `getrusage`): a thread that loses
//!   its CPU while it spins waits for that CPU, not for the push. A swap
//!   that has begun is waited for however long it takes; swaps whose thread
//!   the kernel switched out are counted apart from the others' longest.
//!
//! ## State
//! One atomic word: the number of operations inside, the `CLOSED` bit and
//! the `WANT` bit. An operation enters by incrementing the count while
//! `CLOSED` is clear. Exactly one thread moves the word to `CLOSED` with a
//! count of zero, and it runs the swap: the push (a compare-and-swap from
//! `WANT` on an empty gate, or its close, which clears `WANT`, when nobody
//! is inside), or the last one out (its `fetch_sub` to `CLOSED`, or to
//! `WANT` followed by a compare-and-swap to `CLOSED`, which fails if an
//! operation got in meanwhile or the push closed first).
//! A reopen is a compare-and-swap from `CLOSED | n` (n > 0) to `n`, under
//! the handoff mutex. One push at a time (the commit mutex).
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
use std::cell::Cell;
use std::hint::spin_loop;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64};
use std::time::{Duration, Instant};

/// How long an operation spins on a close that will not be given up
/// before it parks.
pub const SPIN: Duration = Duration::from_micros(20);

/// An operation inside for less than this is still running on its CPU.
pub const YOUNG: Duration = Duration::from_micros(50);

/// The longest a push defers its close for an operation inside for long.
pub const MAX_DEFER: Duration = Duration::from_millis(5);

/// How often a deferring push looks again.
const DEFER_STEP: Duration = Duration::from_micros(20);

/// How long a closed gate waits for the operations inside to leave before
/// it reopens and the push tries again (the default of `-o push_drain_us`).
pub const DRAIN: Duration = Duration::from_micros(200);

/// How many times a push closes the gate and reopens it; its last close
/// waits for the drain, however long.
pub const ATTEMPTS: u32 = 10;

/// How long a push waits for a moment with no operation inside before it
/// closes the gate on the operations inside (the default of
/// `-o push_patience_us`).
pub const PATIENCE: Duration = Duration::from_millis(5);

/// Operations may not enter (a push's close, or its swap running).
const CLOSED: u64 = 1 << 63;
/// A push waits for the gate to empty: whoever sees the count reach zero
/// closes it and swaps. Operations still enter.
const WANT: u64 = 1 << 62;
/// The operations inside.
const COUNT: u64 = WANT - 1;

/// Entry-time slots (threads share one only when there are more of them).
const SLOTS: usize = 16;

/// Openings whose time a waiting operation can look up.
const OPEN_STAMPS: usize = 8;

thread_local! {
    /// The calling thread does background work (see
    /// [`mark_background_thread`]).
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one that does long stretches of background
/// work (the backend, at a lowered priority; the reaper): the kernel
/// switches such a thread out at the next wake-up of a request thread, and
/// a swap it was running then held the gate closed for milliseconds. So it
/// does not take a swap on at an empty moment: its pushes leave the swap
/// to the last operation out (and swap themselves only on a gate that
/// stayed empty for the patience), and its own operations leave it to the
/// next one out. A close's last one out still swaps, whoever it is.
pub fn mark_background_thread() {
    BACKGROUND.with(|b| b.set(true));
}

/// How long an operation waited at a closed gate.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    /// Until the gate first opened after it began to wait (all of `wall` if
    /// it parked: its wake-up is the close's doing too). What a push cost it.
    pub kept_out: Duration,
    /// Until it was in: `kept_out` plus, if it lost its CPU while it waited,
    /// the time until it got it back and the gate was open.
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

/// The push's swap, lent to whichever thread runs it.
type Swap = dyn FnMut() + Send;

#[derive(Default)]
struct Handoff {
    done: bool,
    /// The gate was reopened before the swap could run (see `reopen`).
    reopened: bool,
    panic: Option<Box<dyn Any + Send>>,
}

/// See the module essay.
pub struct Gate {
    state: AtomicU64,
    /// The push's swap, lent: a pointer to the push's pointer to its
    /// closure; null when there is none, or once taken. An atomic, not under
    /// the handoff mutex, so the last one out runs the swap and reopens the
    /// gate without waiting for a lock the parked push may hold.
    ///
    /// It points into `close_and`'s frame, which outlives every use:
    /// `close_and` does not return before `done`, which the runner sets
    /// after it has run the swap, and the runner takes the pointer (swaps in
    /// null) before it runs it. The closure is `Send`.
    swap: AtomicPtr<*mut Swap>,
    /// [`DRAIN`], or `None`: a close is never given up.
    drain: Option<Duration>,
    /// [`PATIENCE`], or `None`: a push closes the gate at once (after the
    /// deferral for old operations).
    patience: Option<Duration>,
    handoff: Mutex<Handoff>,
    opened: Condvar,
    swapped: Condvar,
    /// When each thread's operation entered (µs since `epoch`, plus one;
    /// 0: none), by thread slot.
    entered: [AtomicU64; SLOTS],
    epoch: Instant,
    /// When the push closed the gate (a stamp).
    closed_at: AtomicU64,
    /// Whether the close may be given up (the push is not past its
    /// [`ATTEMPTS`]).
    reopenable: AtomicBool,
    /// Pushes that deferred their close, and those that gave up deferring.
    defers: AtomicU64,
    defers_given_up: AtomicU64,
    /// Closes given up (the gate reopened) because an operation inside did
    /// not leave within the drain.
    reopens: AtomicU64,
    /// Pushes that reached their last close, the one never given up.
    last_closes: AtomicU64,
    /// Swaps run at a moment the gate was empty (no operation kept out but
    /// for the swap itself), and pushes whose patience ran out so that they
    /// closed the gate on operations inside.
    empty_swaps: AtomicU64,
    impatient_closes: AtomicU64,
    /// Swaps during which the kernel switched their thread out, and the
    /// longest (µs) of the others.
    swaps_preempted: AtomicU64,
    swap_on_cpu_us_max: AtomicU64,
    /// The longest the gate stayed closed (µs, one close to its swap or
    /// reopening).
    closed_us_max: AtomicU64,
    /// Times the gate opened after a close, and when (stamps) the last
    /// [`OPEN_STAMPS`] did, by count: a waiting operation's time kept out is
    /// up to the first opening after it began to wait.
    opens: AtomicU64,
    open_stamps: [AtomicU64; OPEN_STAMPS],
}

impl Default for Gate {
    fn default() -> Gate {
        Gate::new(Some(DRAIN), Some(PATIENCE))
    }
}

impl Gate {
    /// A gate whose pushes wait up to `patience` for it to empty (`None`:
    /// they close it at once) and whose closes are given up after `drain`
    /// (`None`: never).
    pub fn new(drain: Option<Duration>, patience: Option<Duration>) -> Gate {
        Gate {
            state: AtomicU64::new(0),
            swap: AtomicPtr::new(std::ptr::null_mut()),
            drain,
            patience,
            handoff: Mutex::new(Handoff::default()),
            opened: Condvar::new(),
            swapped: Condvar::new(),
            entered: std::array::from_fn(|_| AtomicU64::new(0)),
            epoch: Instant::now(),
            closed_at: AtomicU64::new(0),
            reopenable: AtomicBool::new(false),
            defers: AtomicU64::new(0),
            defers_given_up: AtomicU64::new(0),
            reopens: AtomicU64::new(0),
            last_closes: AtomicU64::new(0),
            empty_swaps: AtomicU64::new(0),
            impatient_closes: AtomicU64::new(0),
            swaps_preempted: AtomicU64::new(0),
            swap_on_cpu_us_max: AtomicU64::new(0),
            closed_us_max: AtomicU64::new(0),
            opens: AtomicU64::new(0),
            open_stamps: std::array::from_fn(|_| AtomicU64::new(0)),
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
    pub fn enter(&self) -> (Held<'_>, Option<Wait>) {
        // Openings are counted from before the first try: one between a
        // failed try and the wait's start is the first opening of the wait.
        let opens = self.opens.load(SeqCst);
        let waited = if self.try_enter() { None } else { Some(self.wait_to_enter(opens)) };
        // One clock read stamps the slot and starts the hold.
        let entered = Instant::now();
        let slot = thread_index() % SLOTS;
        let stamped = self.entered[slot].compare_exchange(0, self.stamp(entered), Relaxed, Relaxed).is_ok();
        (Held { gate: self, slot: stamped.then_some(slot), entered }, waited)
    }

    /// Spins, then parks until the gate lets this thread in (`opens`: the
    /// count of openings before it found the gate closed).
    fn wait_to_enter(&self, opens: u64) -> Wait {
        let start = Instant::now();
        let switched_out = preemptions();
        let mut n = 0u32;
        loop {
            if self.try_enter() {
                let wall = start.elapsed();
                let preempted = preemptions() != switched_out;
                return Wait { kept_out: self.kept_out(opens, start, wall), wall, preempted };
            }
            n = n.wrapping_add(1);
            // Read the clock only every so often: it costs more than a spin.
            if n.is_multiple_of(64) {
                // A close that may be given up lasts at most `DRAIN`: spin
                // through it (a parked thread waits for a CPU at its wake-up).
                if !self.reopen_if_stuck() && start.elapsed() > SPIN {
                    break;
                }
            }
            spin_loop();
        }
        let mut h = self.handoff.lock();
        while !self.try_enter() {
            if self.state.load(SeqCst) & CLOSED != 0 {
                self.opened.wait(&mut h);
            }
        }
        // Parked because of the close: its wake-up counts too.
        let wall = start.elapsed();
        Wait { kept_out: wall, wall, preempted: false }
    }

    /// How long after `start` the gate first opened (`opens`: the count of
    /// openings then); `wall` if that is no longer known.
    fn kept_out(&self, opens: u64, start: Instant, wall: Duration) -> Duration {
        let now = self.opens.load(SeqCst);
        if now == opens || now - opens > OPEN_STAMPS as u64 {
            return wall;
        }
        let first = self.open_stamps[opens as usize % OPEN_STAMPS].load(SeqCst);
        Duration::from_micros(first.saturating_sub(self.stamp(start))).min(wall)
    }

    fn leave(&self, slot: Option<usize>) {
        if let Some(i) = slot {
            self.entered[i].store(0, Relaxed);
        }
        match self.state.fetch_sub(1, SeqCst) {
            // The last one out of a closing gate.
            s if s == CLOSED | 1 => self.run_swap(),
            // The last one out while a push waits for an empty gate: it
            // closes the gate, unless an operation got in meanwhile (then a
            // later last one out will) or the push closed it first.
            s if s == WANT | 1 && !BACKGROUND.with(Cell::get) => self.close_empty(),
            _ => {}
        }
    }

    /// Runs the lent swap (the gate is closed and empty), reopens the gate
    /// and wakes everyone.
    fn run_swap(&self) {
        let lent = self.swap.swap(std::ptr::null_mut(), SeqCst);
        assert!(!lent.is_null(), "a closed, empty gate without a swap");
        let (switched_out, t0) = (preemptions(), Instant::now());
        // SAFETY: see `Gate::swap`: the push waits for `done`, so its frame
        // (the pointer to the closure, and the closure) is alive, and nothing
        // else runs the closure (the pointer was just taken).
        #[allow(unsafe_code)]
        let r = catch_unwind(AssertUnwindSafe(|| unsafe { (**lent)() }));
        let us = t0.elapsed().as_micros() as u64;
        // Operations wait for a swap that has begun, however long it takes.
        if preemptions() != switched_out {
            self.swaps_preempted.fetch_add(1, Relaxed);
        } else {
            self.swap_on_cpu_us_max.fetch_max(us, Relaxed);
        }
        self.note_opened();
        // Operations spinning on the gate go on at once; the push, parked,
        // is woken under the mutex.
        self.state.fetch_and(!CLOSED, SeqCst);
        let mut h = self.handoff.lock();
        h.panic = r.err();
        h.done = true;
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
        // SAFETY: only the lifetime is erased; see `Gate::swap` for why the
        // closure outlives every use of the pointer.
        #[allow(unsafe_code)]
        let mut lent: *mut Swap =
            unsafe { std::mem::transmute::<&mut (dyn FnMut() + Send + '_), &'static mut Swap>(lent) };
        let mut attempt = 0;
        *self.handoff.lock() = Handoff::default();
        let before = self.swap.swap(&mut lent, SeqCst);
        debug_assert!(before.is_null(), "two pushes closed the gate");
        loop {
            // Past its patience the push waits for the drain, however long.
            attempt += 1;
            let patient = self.drain.is_some() && attempt < ATTEMPTS;
            // Spinning entrants go on spinning through a close that may be
            // given up, and through a swap at an empty moment.
            self.reopenable.store(patient, SeqCst);
            if self.wait_for_empty() {
                break;
            }
            if self.drain.is_some() && !patient {
                self.last_closes.fetch_add(1, Relaxed);
            }
            self.closed_at.store(self.stamp(Instant::now()), SeqCst);
            if !self.close() {
                // A last one out closed the empty gate first and swaps.
                self.wait_swapped(None);
                break;
            }
            let deadline = self.drain.filter(|_| patient).map(|d| Instant::now() + d);
            if self.wait_swapped(deadline) {
                break;
            }
        }
        let mut h = self.handoff.lock();
        if let Some(p) = h.panic.take() {
            drop(h);
            resume_unwind(p);
        }
        drop(h);
        out.expect("the swap ran")
    }

    /// Before a close: waits up to the patience for a moment with no
    /// operation inside, at which the swap runs (on this thread if the gate
    /// is empty now, else on the last one's out), then defers while an
    /// operation has been inside for long (see the essay). True if the swap
    /// ran. Without a patience, only defers.
    fn wait_for_empty(&self) -> bool {
        let now = Instant::now();
        let deadline = match self.patience {
            Some(patience) => {
                let s = self.state.fetch_or(WANT, SeqCst);
                debug_assert_eq!(s & (WANT | CLOSED), 0, "a push found the gate closed");
                // Empty now: nobody is left to leave, so close it here
                // (unless this thread is likely to be switched out in the
                // middle of the swap).
                if s == 0 && !BACKGROUND.with(Cell::get) {
                    self.close_empty();
                }
                now + patience
            }
            None => now,
        };
        let mut h = self.handoff.lock();
        let mut deferred = false;
        loop {
            if h.done {
                return true;
            }
            let now = Instant::now();
            if now < deadline {
                let _ = self.swapped.wait_until(&mut h, deadline);
                continue;
            }
            // Out of patience (or without one): close, but not on an
            // operation inside for long (its thread most likely lost its
            // CPU, and the close would only be given up), for at most
            // MAX_DEFER more. The gate stays open meanwhile.
            if !self.old_hold_inside() {
                return false;
            }
            if now >= deadline + MAX_DEFER {
                self.defers_given_up.fetch_add(1, Relaxed);
                return false;
            }
            if !deferred {
                deferred = true;
                self.defers.fetch_add(1, Relaxed);
            }
            let _ = self.swapped.wait_until(&mut h, now + DEFER_STEP);
        }
    }

    /// Closes the gate while a push waits for it to empty and nobody is
    /// inside, and runs the swap; does nothing if an operation got in
    /// meanwhile (a later last one out will) or the push closed it first.
    fn close_empty(&self) {
        if self.state.compare_exchange(WANT, CLOSED, SeqCst, SeqCst).is_ok() {
            self.closed_at.store(self.stamp(Instant::now()), SeqCst);
            self.empty_swaps.fetch_add(1, Relaxed);
            self.run_swap();
        }
    }

    /// Closes the gate (ending a wait for an empty one). True if this
    /// thread closed it (and ran the swap if nobody was inside); false if a
    /// last one out had closed the empty gate first and runs the swap.
    fn close(&self) -> bool {
        let mut s = self.state.load(SeqCst);
        loop {
            if self.patience.is_some() && s & WANT == 0 {
                return false;
            }
            match self.state.compare_exchange_weak(s, (s & !WANT) | CLOSED, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        if s & COUNT == 0 {
            // Nobody inside: swap here.
            self.run_swap();
        } else if self.patience.is_some() {
            self.impatient_closes.fetch_add(1, Relaxed);
        }
        true
    }

    /// Waits for the lent swap to have run (true), or for the gate to be
    /// reopened before it could (false). With a deadline, reopens the gate
    /// itself then if operations are still inside.
    fn wait_swapped(&self, deadline: Option<Instant>) -> bool {
        let mut h = self.handoff.lock();
        loop {
            if h.done {
                return true;
            }
            if std::mem::take(&mut h.reopened) {
                return false;
            }
            match deadline {
                Some(at) if Instant::now() >= at => {
                    if self.reopen(&mut h) {
                        h.reopened = false;
                        return false;
                    }
                    // The last one is out and runs the swap (it waits for
                    // this mutex).
                    self.swapped.wait(&mut h);
                }
                Some(at) => drop(self.swapped.wait_until(&mut h, at)),
                None => self.swapped.wait(&mut h),
            }
        }
    }

    /// Gives up a close while operations are still inside: clears `CLOSED`
    /// (nobody will run the swap until the push closes again) and wakes the
    /// waiting operations and the push. False if the gate is not closed, or
    /// is empty (its last operation out runs the swap).
    fn reopen(&self, h: &mut Handoff) -> bool {
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
        h.reopened = true;
        self.reopens.fetch_add(1, Relaxed);
        self.note_opened();
        self.opened.notify_all();
        self.swapped.notify_one();
        true
    }

    /// Notes that the gate opens now (one opener at a time: the swap's
    /// runner, or the one reopening, for the one push).
    fn note_opened(&self) {
        let now = self.stamp(Instant::now());
        let us = now.saturating_sub(self.closed_at.load(SeqCst));
        self.closed_us_max.fetch_max(us, Relaxed);
        let n = self.opens.load(SeqCst);
        self.open_stamps[n as usize % OPEN_STAMPS].store(now, SeqCst);
        self.opens.store(n + 1, SeqCst);
    }

    /// The longest the gate stayed closed for one close (µs).
    pub fn closed_us_max(&self) -> u64 {
        self.closed_us_max.load(Relaxed)
    }

    /// Called by a spinning operation: reopens a gate that has been closed
    /// for longer than its drain (an operation inside lost its CPU; the push,
    /// parked, may not get one soon either).
    /// Returns whether the close may still be given up (the caller need not
    /// park).
    fn reopen_if_stuck(&self) -> bool {
        if !self.reopenable.load(SeqCst) {
            return false;
        }
        let c = self.closed_at.load(SeqCst);
        let drain = self.drain.unwrap_or(Duration::MAX).as_micros() as u64;
        if self.stamp(Instant::now()).saturating_sub(c) > drain {
            // Only tried: the swap's runner holds the mutex while it swaps.
            if let Some(mut h) = self.handoff.try_lock() {
                if self.closed_at.load(SeqCst) == c {
                    self.reopen(&mut h);
                }
            }
        }
        true
    }

    /// Whether an operation has been inside for longer than [`YOUNG`].
    fn old_hold_inside(&self) -> bool {
        let now = self.stamp(Instant::now());
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

    /// Swaps run at a moment with no operation inside, and pushes that
    /// closed the gate on operations inside once their patience ran out.
    pub fn empties(&self) -> (u64, u64) {
        (self.empty_swaps.load(Relaxed), self.impatient_closes.load(Relaxed))
    }

    /// Closes given up because an operation inside did not leave in time.
    pub fn reopens(&self) -> u64 {
        self.reopens.load(Relaxed)
    }

    /// Swaps whose thread the kernel switched out while it ran one, and the
    /// longest swap (µs, run to reopening) of the others.
    pub fn swaps(&self) -> (u64, u64) {
        (self.swaps_preempted.load(Relaxed), self.swap_on_cpu_us_max.load(Relaxed))
    }

    /// Pushes whose closes were given up until their last, which waited for
    /// the operations inside however long.
    pub fn last_closes(&self) -> u64 {
        self.last_closes.load(Relaxed)
    }

    /// Operations inside the gate now.
    #[cfg(test)]
    fn holders(&self) -> u64 {
        self.state.load(SeqCst) & COUNT
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gate.leave(self.slot);
    }
}

#[cfg(test)]
mod tests;
