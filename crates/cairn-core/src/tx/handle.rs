//! The transaction handle, [`Tx`].
//!
//! A handle is what an operation holds while it changes metadata: the
//! transaction gate (shared; a commit closes it, so it snapshots only whole
//! operations; see `gate`) and a reservation of log credits. Reading code
//! takes `&Meta` ([`Tx::meta`] for an operation's reads); changing code takes
//! `&Tx`: the only ways to dirty a buffer, allocate or free go through a `Tx`.
//!
//! A handle holds the transaction gate from begin to end and changes the
//! running checkpoint directly: every buffer change, allocation bitmap
//! change and orphan-list change applies at once. [`Tx::end`], at the end of
//! `Engine::change` (after the operation's error is latched), lets it go.
//! A handle that unwinds without it after changing something aborts the
//! journal before it leaves the gate, so no checkpoint takes half an
//! operation. (Handles that kept their changes private until their end
//! were built and measured slower: `docs/gate-plan.md`.)
//!
//! Credits: [`Tx::require`] states the operation's worst case once it knows
//! it (tree depths are known only after the inode is locked). If that is
//! more than the handle reserved, the reservation grows when the log has
//! room; otherwise, if nothing was changed yet, the operation fails with
//! [`FsError::NeedCredits`] and is restarted with the larger reservation
//! after a commit. Every buffer the handle newly dirties is charged;
//! charging past the reservation is an accounting bug, counted in
//! `tx.credit_overruns`.

use super::gate::Entry;
use crate::buffer::probe::HandleMark;
use crate::buffer::Buf;
use crate::error::{FsError, Result};
use crate::meta::Meta;
use cairn_format::btree::Node;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// What a handle asks of the manager that opened it (`manager`'s
/// `TxManager` is the one host; the trait keeps the handle below the
/// manager, which creates handles).
pub(super) trait Host: Sync {
    /// The most credits all handles of one checkpoint may hold together.
    fn limit(&self) -> u64;
    /// Grows a reservation by `extra` if the log has room now.
    fn try_extend(&self, meta: &Meta, extra: u64) -> bool;
    /// Gives back `credits` of reservation.
    fn release(&self, credits: u64);
    /// The handle leaves the transaction gate after `held_us` (running a
    /// waiting push's swap if it is the last one out).
    fn leave(&self, meta: &Meta, entry: Entry, held_us: u64);
    /// A handle dirtied more buffers than it reserved (an accounting bug).
    fn note_overrun(&self, used: u64, credits: u64);
    /// An operation restarts with more credits.
    fn note_restart(&self);
    /// A handle that changed something ended without [`Tx::end`] (an
    /// unwinding operation): the journal aborts before the handle leaves
    /// the gate, so no checkpoint takes half of it.
    fn abort_half_done(&self, meta: &Meta, e: &FsError);
}

/// A transaction handle (see the module essay).
pub struct Tx<'a> {
    meta: &'a Meta,
    mgr: &'a dyn Host,
    /// When the handle began (it holds the gate until its drop); `None`
    /// only for a direct writer (a swap's, a quiesced change's), which
    /// holds no reservation.
    entered: Option<Instant>,
    credits: Cell<u64>,
    used: Cell<u64>,
    touched: Cell<bool>,
    /// The handle's mark for the conflict probe (`buffer::probe`), when on.
    mark: Option<Arc<HandleMark>>,
    /// Set by [`Tx::end`]; a handle dropped without it is unwinding.
    ended: bool,
    /// The transaction gate, held from begin to end; `None` for a direct
    /// writer, which runs where no swap can (a swap's own, a quiesced
    /// change's).
    held: Option<Entry>,
}

impl<'a> Tx<'a> {
    pub(super) fn new(
        meta: &'a Meta,
        mgr: &'a dyn Host,
        entered: Option<Instant>,
        credits: u64,
        held: Option<Entry>,
    ) -> Tx<'a> {
        let mark = entered.and(meta.bufs().probe()).map(|p| p.begin());
        Tx {
            meta,
            mgr,
            entered,
            credits: Cell::new(credits),
            used: Cell::new(0),
            touched: Cell::new(false),
            mark,
            ended: false,
            held,
        }
    }

    /// The metadata this handle changes: reading code takes `&Meta`, and a
    /// changing operation reaches it here.
    pub fn meta(&self) -> &'a Meta {
        self.meta
    }

    /// Buffers this handle newly dirtied so far.
    pub fn used(&self) -> u64 {
        self.used.get()
    }

    /// Whether this handle changed any buffer (newly dirtied or not) or
    /// the orphan list.
    pub fn changed(&self) -> bool {
        self.touched.get()
    }

    /// Ends the handle: it leaves the gate. The end of `Engine::change`,
    /// which has latched the operation's own error first (the latch rule:
    /// no swap runs between half-applied changes and the abort).
    pub(crate) fn end(mut self) {
        self.ended = true;
    }

    /// Notes a change to a buffer that was already dirty.
    pub(crate) fn touch(&self) {
        self.touched.set(true);
    }

    /// Charges `n` newly dirtied buffers to the handle.
    pub(crate) fn charge(&self, n: u64) {
        self.touched.set(true);
        let used = self.used.get() + n;
        self.used.set(used);
        if used > self.credits.get() {
            self.mgr.note_overrun(used, self.credits.get());
        }
    }

    /// States that the operation may newly dirty up to `total` buffers in
    /// all (counting what it already dirtied). Fails with
    /// [`FsError::NeedCredits`] (restart after a commit) when the log has no
    /// room for the difference and nothing was changed yet.
    pub fn require(&self, total: u64) -> Result<()> {
        let have = self.credits.get();
        if total <= have {
            return Ok(());
        }
        if self.entered.is_none() || self.mgr.try_extend(self.meta, total - have) {
            self.credits.set(total);
            return Ok(());
        }
        if !self.changed() {
            self.mgr.note_restart();
            return Err(FsError::NeedCredits(total));
        }
        // Changes are made and cannot be undone: go on within the margin the
        // limit keeps; `journal.credit_overruns` shows it if it was needed.
        tracing::warn!(total, have, "a handle needs more credits than the log has room for");
        Ok(())
    }

    /// The most credits all handles of one checkpoint may hold together.
    pub fn log_limit(&self) -> u64 {
        self.mgr.limit()
    }

    /// Reserves `credits` of the log's room for a change a later swap makes
    /// (a deferred orphan insert, see `deferred_orphans`), without waiting:
    /// false when the log has no room now.
    pub(crate) fn reserve_aside(&self, credits: u64) -> bool {
        self.mgr.try_extend(self.meta, credits)
    }

    /// Gives back credits reserved by [`Tx::reserve_aside`].
    pub(crate) fn release_aside(&self, credits: u64) {
        self.mgr.release(credits)
    }

    /// Room left in the reservation.
    pub fn left(&self) -> u64 {
        self.credits.get().saturating_sub(self.used.get())
    }
}

impl crate::buffer::Change for Tx<'_> {
    fn bufs(&self) -> &crate::buffer::BufferCache {
        self.meta.bufs()
    }
    fn charge(&self, n: u64) {
        Tx::charge(self, n)
    }
    fn touch(&self) {
        Tx::touch(self)
    }
    fn mark(&self) -> Option<&Arc<HandleMark>> {
        self.mark.as_ref()
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.ended && self.entered.is_some() && self.changed() {
            // Only an unwinding operation ends without `Engine::change`'s
            // `end`: its changes are half an operation. Abort before
            // leaving the gate.
            let e = FsError::Io(std::io::Error::other("an operation ended half-way (a panic)"));
            self.mgr.abort_half_done(self.meta, &e);
        }
        if let Some(entered) = self.entered {
            self.mgr.release(self.credits.get());
            let held_us = entered.elapsed().as_micros() as u64;
            let entry = self.held.take().expect("a handle holds the gate from begin to end");
            self.mgr.leave(self.meta, entry, held_us);
        }
        if let (Some(mark), Some(probe)) = (&self.mark, self.meta.bufs().probe()) {
            probe.end(mark);
        }
    }
}

/// Changing metadata: only through a transaction handle.
impl Tx<'_> {
    /// Changes bytes `range` of `buf` in the running checkpoint (see
    /// `BufferCache::modify`: only the chunks that change are logged).
    pub fn modify<R>(&self, buf: &Arc<Buf>, range: std::ops::Range<usize>, f: impl FnOnce(&mut [u8]) -> R) -> R {
        self.meta.bufs().modify(self, buf, range, f)
    }

    /// Changes `buf` by `f`, which returns the journal chunks it wrote (see
    /// `BufferCache::modify_mapped`).
    pub fn modify_mapped<R>(&self, buf: &Arc<Buf>, f: impl FnOnce(&mut [u8]) -> (R, u64)) -> R {
        self.meta.bufs().modify_mapped(self, buf, f)
    }

    /// Encodes `node` into `buf` in the running checkpoint.
    pub fn write_node(&self, buf: &Arc<Buf>, node: &Node) {
        self.modify(buf, 0..self.meta.bs(), |d| node.encode(self.meta.seed(), buf.blk, d));
    }

    /// Allocates one metadata block near `goal` and returns a zeroed buffer,
    /// logged whole (`critical`: may take the last of the reserve, see `alloc`).
    pub fn alloc_meta(&self, goal: u64, critical: bool) -> Result<Arc<Buf>> {
        let blk = self.meta.alloc().alloc_meta_block(self, goal, critical)?;
        Ok(self.meta.bufs().get_new(self, blk))
    }

    /// Frees blocks in the running checkpoint.
    pub fn free(&self, start: u64, len: u64) -> Result<()> {
        self.meta.alloc().free_blocks(self, self.meta.running_seq().load(Ordering::Acquire), start, len)
    }
}
