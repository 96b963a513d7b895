//! The transaction manager: admission of handles against the log's room,
//! group commit, snapshot and pinning of dirty buffers.
//!
//! ## Limits
//! One checkpoint is one log record, and a record may fill at most a third
//! of the ring (`log`); it also holds at most an eighth of the buffer cache
//! (its dirty buffers stay in memory until the push, and a change after the
//! capture copies them). The manager keeps the invariant
//! `dirty buffers + outstanding reservations <= limit`, with
//! `limit = max record images - MARGIN`: a handle is admitted only if its
//! credits fit; otherwise the caller commits (emptying the running
//! checkpoint) and tries again, waiting for other handles to finish if
//! their reservations alone fill the record. A reservation therefore waits
//! for log space and never fails, and no record larger than the log can be
//! built while handles keep within their credits.
//!
//! ## Commit
//! A handle holds the transaction gate (see `gate`) from begin to end. A
//! quiesce (a grow, a consistency check) closes it and waits for every
//! handle however long; [`TxManager::commit`] closes it only to rewrite
//! the superblock buffer and to swap the committed-item list for an empty
//! one (see `cil`: a few locks, whatever the amount dirty): [`TxManager`]'s
//! `swap`, which needs nothing but the manager and [`Meta`]. The swap runs
//! on whichever thread finds the gate empty first (the gate hands it the
//! turn): the commit's, or the last handle's to leave, so no thread need
//! be scheduled while the gate holds handles out. Its result (or its
//! panic) reaches the commit through `swapped`. The commit first waits up
//! to `-o push_patience_us` for such a moment without closing the gate; a
//! close that has not drained after `-o push_drain_us` is given up and
//! tried again (see `gate`). Capturing the buffers, the log write, the
//! barriers and the home writes run with the gate released, so operations
//! go on meanwhile. The captured buffers stay pinned (in flight) until
//! their home writes are done. Commits are serialised by the commit mutex,
//! which also groups concurrent syncs: a caller whose changes a commit
//! started after its arrival already covered returns at once.
//! (Handles that held the gate only to join their changes at their end
//! were built and measured slower: `docs/gate-plan.md` §7.)
//!
//! ## Locking order
//! commit mutex → transaction gate → inode locks → buffer-cache shards →
//! buffer data → buffer log state. The swap, run on a handle's thread as
//! it leaves the gate, takes only what a swap takes (the superblock buffer,
//! the orphan tree, the insertion lists): a handle must not hold an inode
//! lock or an allocator lock when it ends.

use super::gate::{Entry, Gate, Push, Turn};
use super::handle::{Host, Tx};
use crate::buffer::cil::Batch;
use crate::error::{FsError, Result};
use crate::journal::{Journal, Latch};
use crate::meta::Meta;
use crate::stats::Publish;
use parking_lot::Mutex;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Record room kept outside the reservations: the superblock that every
/// commit rewrites, and slack for one overrun.
pub const MARGIN: u64 = 4;

/// Transaction counters.
#[derive(Default)]
pub struct TxStats {
    pub handles: AtomicU64,
    /// Handles that found no room and committed (or waited) first.
    pub reserve_waits: AtomicU64,
    /// Operations restarted with a larger reservation (`NeedCredits`).
    pub restarts: AtomicU64,
    /// Buffers dirtied beyond a handle's credits (an accounting bug if > 0).
    pub credit_overruns: AtomicU64,
    /// Largest reservation granted.
    pub max_credits: AtomicU64,
    /// Syncs that found their changes already committed by another caller.
    pub group_joins: AtomicU64,
    /// Steps of long operations (truncate, delete, large writes).
    pub steps: AtomicU64,
    /// Longest time one handle held the gate, begin to end, in µs.
    pub gate_hold_us_max: AtomicU64,
}

/// See the module essay.
pub struct TxManager {
    pub log: Journal,
    pub latch: Latch,
    /// Entered by every handle from begin to end; a push closes it for
    /// its swap (see `gate`).
    gate: Gate,
    /// What the running commit's swap returned (or its panic), handed from
    /// whichever thread took the turn to the commit.
    swapped: Mutex<Option<std::thread::Result<Result<Batch>>>>,
    commit_lock: Mutex<()>,
    reserved: AtomicU64,
    limit: u64,
    /// Commit snapshots taken, and those whose commit finished.
    snapshots: AtomicU64,
    committed_snapshots: AtomicU64,
    /// Run by each swap before the superblock is logged, with a handle of
    /// its own under the closed gate: changes that must be in the
    /// checkpoint being closed (the deferred orphan inserts,
    /// `deferred_orphans`). Set once, by the file system at mount.
    swap_hook: std::sync::OnceLock<SwapHook>,
    pub stats: TxStats,
}

/// See [`TxManager::set_swap_hook`].
pub type SwapHook = fn(&Tx<'_>) -> Result<()>;

impl TxManager {
    /// `max_dirty`: the most buffers one checkpoint may hold whatever the
    /// log's room (the memory the caller allows a checkpoint).
    /// `patience`: how long a push waits for a moment with no handle inside
    /// before it closes the gate (`None`: it closes at once); `drain`: how
    /// long a close waits for the handles inside before it is given up
    /// (`None`: never; see `gate`).
    pub fn new(
        log: Journal,
        latch: Latch,
        max_dirty: u64,
        patience: Option<Duration>,
        drain: Option<Duration>,
    ) -> TxManager {
        let limit = log.max_record_images().min(max_dirty).saturating_sub(MARGIN).max(1);
        TxManager {
            log,
            latch,
            gate: Gate::new(patience, drain),
            swapped: Mutex::new(None),
            commit_lock: Mutex::new(()),
            reserved: AtomicU64::new(0),
            limit,
            snapshots: AtomicU64::new(0),
            committed_snapshots: AtomicU64::new(0),
            swap_hook: std::sync::OnceLock::new(),
            stats: TxStats::default(),
        }
    }

    /// Sets the hook every swap runs (see the field); a second call is
    /// ignored.
    pub fn set_swap_hook(&self, hook: SwapHook) {
        let _ = self.swap_hook.set(hook);
    }

    /// Buffers one checkpoint may hold, over all its handles.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Runs `f` with no handle and no commit running (the invariants of
    /// the cache and the allocator hold then).
    pub fn quiesced<R>(&self, meta: &Meta, f: impl FnOnce() -> R) -> R {
        let _c = self.commit_lock.lock();
        let Push::Mine(turn) = self.gate.push(false) else { unreachable!("a quiesce delegates nothing") };
        if cfg!(debug_assertions) {
            // No handle runs now: the in-memory invariants must hold.
            meta.alloc().debug_check_consistency();
        }
        let r = catch_unwind(AssertUnwindSafe(f));
        self.gate.open(turn);
        r.unwrap_or_else(|p| resume_unwind(p))
    }

    /// Runs `f` with a handle of its own while no other handle and no
    /// commit runs: a change the in-memory state must take whole (a grow
    /// adds groups the allocator serves at once). Its changes join the
    /// running checkpoint.
    pub fn quiesced_change<R>(&self, meta: &Meta, credits: u64, f: impl FnOnce(&Tx<'_>) -> Result<R>) -> Result<R> {
        self.quiesced(meta, || f(&Tx::new(meta, self, None, credits, None)))
    }

    /// A handle enters the gate (waiting while a push holds it closed).
    fn enter_gate(&self, meta: &Meta) -> Entry {
        let (entry, waited) = self.gate.enter();
        if let Some(w) = waited {
            let us = w.wall.as_micros() as u64;
            let cil = &meta.bufs().cil.stats;
            cil.writer_wait.add(us);
            cil.writer_wait_us_max.fetch_max(us, Relaxed);
            if w.preempted {
                cil.writer_waits_preempted.fetch_add(1, Relaxed);
            } else {
                cil.writer_wait_on_cpu_us_max.fetch_max(us, Relaxed);
            }
        }
        entry
    }

    /// A handle leaves the gate; if it is the last one out of a gate closed
    /// for a commit, it runs the commit's swap.
    fn leave_gate(&self, meta: &Meta, entry: Entry) {
        if let Some(turn) = self.gate.leave(entry) {
            self.take_turn(meta, turn);
        }
    }

    /// Runs the commit's swap with no handle inside, hands its result to the
    /// commit and reopens the gate.
    fn take_turn(&self, meta: &Meta, turn: Turn) {
        let r = catch_unwind(AssertUnwindSafe(|| self.swap(meta)));
        *self.swapped.lock() = Some(r);
        self.gate.open(turn);
    }

    /// Under the closed gate, with no handle inside: rewrites the superblock
    /// buffer and swaps the committed-item list for an empty one.
    fn swap(&self, meta: &Meta) -> Result<Batch> {
        let t0 = Instant::now();
        // An operation that failed while we waited may have aborted the
        // journal: its half-done changes must not be pushed.
        self.latch.check_commit()?;
        if cfg!(debug_assertions) {
            // No handle runs now: what is listed is exactly what is dirty.
            meta.bufs().debug_check_consistency();
        }
        if let Some(hook) = self.swap_hook.get() {
            // Its changes are charged to the credits set aside for them.
            hook(&Tx::new(meta, self, None, self.limit, None))?;
        }
        if meta.bufs().dirty_count() > 0 {
            let tx = Tx::new(meta, self, None, MARGIN, None);
            meta.write_sb_buffer(&tx, self.latch.flagged())?;
        }
        let batch = meta.bufs().cil.swap();
        if !batch.is_empty() {
            meta.running_seq().fetch_add(1, Ordering::AcqRel);
        }
        self.snapshots.fetch_add(1, Ordering::AcqRel);
        meta.bufs().cil.stats.swap_us_max.fetch_max(t0.elapsed().as_micros() as u64, Relaxed);
        Ok(batch)
    }

    /// Credits reserved by running handles.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    fn try_reserve(&self, meta: &Meta, credits: u64) -> bool {
        let mut r = self.reserved.load(Ordering::Acquire);
        loop {
            if meta.bufs().dirty_count() + r + credits > self.limit {
                return false;
            }
            match self.reserved.compare_exchange_weak(r, r + credits, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => r = now,
            }
        }
    }

    /// Grows a running handle's reservation by `extra` if the log has room
    /// now (never waits: the caller holds the gate).
    fn extend(&self, meta: &Meta, extra: u64) -> bool {
        let ok = self.try_reserve(meta, extra);
        if ok {
            self.stats.max_credits.fetch_max(extra, Ordering::Relaxed);
        }
        ok
    }

    /// Starts a handle of `credits` credits. Waits for log room: when the
    /// running checkpoint and the outstanding reservations leave too little,
    /// calls `commit` (which empties the checkpoint) and tries again.
    /// Must not be called while holding a handle (the gate is not reentrant
    /// once a commit waits for it).
    pub fn begin<'a>(&'a self, meta: &'a Meta, credits: u64, commit: &dyn Fn() -> Result<()>) -> Result<Tx<'a>> {
        // A first guess larger than the log is trimmed: the operation states
        // its real need with `Tx::require`.
        let credits = if credits == crate::journal::credits::DEFAULT { credits.min(self.limit) } else { credits };
        if credits > self.limit {
            tracing::error!(credits, limit = self.limit, "an operation needs more log room than the journal has");
            return Err(FsError::Errno(libc::ENOSPC));
        }
        let mut tries = 0u32;
        while !self.try_reserve(meta, credits) {
            if tries == 0 {
                self.stats.reserve_waits.fetch_add(1, Ordering::Relaxed);
            }
            tries += 1;
            if meta.bufs().dirty_count() > 0 {
                commit()?;
            } else {
                // Other handles' reservations fill the record: they finish soon.
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        self.stats.handles.fetch_add(1, Ordering::Relaxed);
        self.stats.max_credits.fetch_max(credits, Ordering::Relaxed);
        // A handle holds the gate from begin to end and changes the running
        // checkpoint directly.
        let held = Some(self.enter_gate(meta));
        Ok(Tx::new(meta, self, Some(Instant::now()), credits, held))
    }

    /// Makes everything changed before this call durable (see the module
    /// essay).
    pub fn commit(&self, meta: &Meta) -> Result<()> {
        let arrived = self.snapshots.load(Ordering::Acquire);
        let _c = self.commit_lock.lock();
        if self.committed_snapshots.load(Ordering::Acquire) > arrived {
            self.stats.group_joins.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.latch.check_commit()?;
        // The swap runs with no handle inside the gate, on this thread or on
        // the last handle's to leave (see `gate`).
        if let Push::Mine(turn) = self.gate.push(true) {
            self.take_turn(meta, turn);
        }
        let swapped = self.swapped.lock().take().expect("a push's turn ended without a swap");
        let batch = swapped.unwrap_or_else(|p| resume_unwind(p))?;
        // The gate is free again: operations fill the next checkpoint while
        // this one is captured and written.
        let t0 = Instant::now();
        let snap = meta.bufs().cil.capture(batch, meta.bs());
        let us = t0.elapsed().as_micros() as u64;
        meta.bufs().cil.stats.capture_us_total.fetch_add(us, Relaxed);
        meta.bufs().cil.stats.capture_us_max.fetch_max(us, Relaxed);
        if let Err(e) = self.log.commit(&snap.items) {
            // Not unpinned: the buffers stay in flight, so they are never
            // re-read from stale homes; nothing more is committed.
            drop(snap);
            self.latch.abort_half_done(meta.dev(), &e);
            return Err(e);
        }
        meta.bufs().cil.unpin(snap);
        if self.latch.errors() > 0 {
            // This commit's superblock image may predate the error: its home
            // write must not have cleared the flag set in place.
            self.latch.remark(meta.dev());
        }
        self.committed_snapshots.fetch_add(1, Ordering::AcqRel);
        meta.alloc().release_pending(meta.bufs(), self.log.durable_tail_seq());
        // Inode preallocations last until the next commit: cairn hears of no
        // close (zero-request opens), and a stream that goes on takes the
        // blocks right behind its last one again at once (its goal).
        meta.alloc().discard_inode_preallocs(meta.bufs());
        Ok(())
    }
}

impl TxManager {
    /// Writes every deferred home image, empties the log and releases the
    /// blocks freed so far (under the commit mutex: no commit runs).
    pub fn checkpoint(&self, meta: &Meta) -> Result<()> {
        let _c = self.commit_lock.lock();
        self.latch.check_commit()?;
        if let Err(e) = self.log.checkpoint_all() {
            self.latch.abort_half_done(meta.dev(), &e);
            return Err(e);
        }
        if self.latch.errors() > 0 {
            self.latch.remark(meta.dev());
        }
        meta.alloc().release_pending(meta.bufs(), self.log.durable_tail_seq());
        Ok(())
    }
}

impl Publish for TxManager {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let t = &self.stats;
        put("journal.group_commit_joins", t.group_joins.load(Relaxed));
        put("tx.handles", t.handles.load(Relaxed));
        put("tx.reserve_waits", t.reserve_waits.load(Relaxed));
        put("tx.restarts", t.restarts.load(Relaxed));
        put("tx.credit_overruns", t.credit_overruns.load(Relaxed));
        put("tx.max_credits", t.max_credits.load(Relaxed));
        put("tx.steps", t.steps.load(Relaxed));
        put("tx.gate_hold_us_max", t.gate_hold_us_max.load(Relaxed));
        let (empty, impatient) = self.gate.empties();
        put("tx.push_empty_swaps", empty);
        put("tx.push_impatient_closes", impatient);
        let (defers, given_up) = self.gate.defers();
        put("tx.push_defers", defers);
        put("tx.push_defers_given_up", given_up);
        let (reopens, last_closes) = self.gate.reopens();
        put("tx.push_reopens", reopens);
        put("tx.push_last_closes", last_closes);
        let (preempted, on_cpu_max) = self.gate.swaps();
        put("tx.swaps_preempted", preempted);
        put("tx.swap_on_cpu_us_max", on_cpu_max);
        put("tx.gate_closed_us_max", self.gate.closed_us_max());
        put("tx.reserved_credits", self.reserved());
        put("tx.record_limit_blocks", self.limit());
        self.log.publish(put);
        self.latch.publish(put);
    }
}

impl Host for TxManager {
    fn limit(&self) -> u64 {
        TxManager::limit(self)
    }

    fn try_extend(&self, meta: &Meta, extra: u64) -> bool {
        self.extend(meta, extra)
    }

    fn release(&self, credits: u64) {
        self.reserved.fetch_sub(credits, Ordering::AcqRel);
    }

    fn leave(&self, meta: &Meta, entry: Entry, held_us: u64) {
        self.stats.gate_hold_us_max.fetch_max(held_us, Ordering::Relaxed);
        self.leave_gate(meta, entry);
    }

    fn note_overrun(&self, used: u64, credits: u64) {
        if self.stats.credit_overruns.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(used, credits, "a transaction handle dirtied more buffers than it reserved");
        }
    }

    fn note_restart(&self) {
        self.stats.restarts.fetch_add(1, Ordering::Relaxed);
    }

    fn abort_half_done(&self, meta: &Meta, e: &FsError) {
        self.latch.abort_half_done(meta.dev(), e);
    }
}
