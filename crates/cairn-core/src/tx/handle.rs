//! The transaction handle, [`Tx`].
//!
//! A handle is what an operation holds while it changes metadata: the
//! transaction gate (shared; a commit closes it, so it snapshots only whole
//! operations; see `gate`) and a reservation of log credits. Reading code
//! takes `&Meta` ([`Tx::meta`] for an operation's reads); changing code takes
//! `&Tx`: the only ways to dirty a buffer, allocate or free go through a `Tx`.
//!
//! A handle holds the transaction gate from begin to end and changes the
//! running checkpoint directly, unless the mount asks for private handles
//! (`-o debug.private_handles`). Then its changes stay private until its
//! end (`buffer::join`): the
//! chunks it changes are claimed for its join group, and its allocation
//! intents and [`JoinAction`]s are recorded. [`Tx::join`], at the end of
//! `Engine::change`, hands them to the group; the group's last member joins
//! it (its claims become dirty chunks of the running checkpoint, then the
//! actions and intents are applied by the handle as a direct writer) and
//! the others wait for that. A handle that unwinds without joining after
//! changing something aborts the journal, then joins.
//!
//! Credits: [`Tx::require`] states the operation's worst case once it knows
//! it (tree depths are known only after the inode is locked). If that is
//! more than the handle reserved, the reservation grows when the log has
//! room; otherwise, if nothing was changed yet, the operation fails with
//! [`FsError::NeedCredits`] and is restarted with the larger reservation
//! after a commit. Every buffer the handle's group claims first, and every
//! buffer a direct writer newly dirties, is charged; charging past the
//! reservation is an accounting bug, counted in `journal.credit_overruns`.

use super::gate::Entry;
use crate::buffer::join::{EndWork, Finish, JoinGroup, Sealed};
use crate::buffer::probe::HandleMark;
use crate::buffer::{BitmapIntent, Buf, Change};
use crate::error::{FsError, Result};
use crate::meta::Meta;
use cairn_format::btree::Node;
use std::cell::{Cell, RefCell};
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
    /// The handle leaves the admission gate after `held_us`.
    fn leave(&self, held_us: u64);
    /// A finished handle enters the join gate (waiting while a push holds
    /// it closed).
    fn enter_join(&self, meta: &Meta) -> Entry;
    /// The join leaves the gate after `held_us` (and runs a waiting push's
    /// swap if it is the last one out).
    fn leave_join(&self, meta: &Meta, entry: Entry, held_us: u64);
    /// A handle dirtied more buffers than it reserved (an accounting bug).
    fn note_overrun(&self, used: u64, credits: u64);
    /// An operation restarts with more credits.
    fn note_restart(&self);
    /// What runs a handle's orphan-list actions at its end.
    fn join_hook(&self) -> Option<JoinHook>;
    /// A handle's end failed, or a handle that changed something ended
    /// without joining (an unwinding operation): the journal aborts before
    /// the handle leaves the gate, so no checkpoint takes half of it.
    fn abort_half_done(&self, meta: &Meta, e: &FsError);
}

/// What runs a handle's join actions at its end (`TxManager::set_join_hook`).
pub type JoinHook = fn(&Tx<'_>, &[JoinAction]) -> Result<()>;

pub use crate::buffer::join::JoinAction;

/// A transaction handle (see the module essay).
pub struct Tx<'a> {
    meta: &'a Meta,
    mgr: &'a dyn Host,
    /// When the handle began (it is inside the admission gate until its
    /// drop); `None` only for a direct writer (a swap's, a quiesced
    /// change's), which holds no reservation.
    entered: Option<Instant>,
    credits: Cell<u64>,
    used: Cell<u64>,
    touched: Cell<bool>,
    /// The handle's mark for the conflict probe (`buffer::probe`), when on.
    mark: Option<Arc<HandleMark>>,
    /// What the handle's end applies: allocation bitmap changes with their
    /// tickets (`alloc::intents`) and [`JoinAction`]s.
    work: RefCell<EndWork>,
    /// The join group the handle's changes are claimed for (`buffer::join`);
    /// `None` for a direct writer.
    group: Option<Arc<JoinGroup>>,
    /// The handle applies its group's end, as a direct writer.
    direct: Cell<bool>,
    /// Set by [`Tx::join`]; a handle dropped without it is unwinding.
    joined: bool,
    /// The gate, held from begin to end when handles are not private
    /// (`-o debug.private_handles` off): such a handle changes the running
    /// checkpoint directly.
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
            work: RefCell::default(),
            group: entered.filter(|_| held.is_none()).map(|_| JoinGroup::new()),
            direct: Cell::new(false),
            joined: false,
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

    /// Whether this handle changed any buffer (newly dirtied or not), or
    /// recorded a change of the allocation bitmaps or the orphan list.
    pub fn changed(&self) -> bool {
        self.touched.get()
    }

    /// Records `action` for the handle's end; a handle that does not defer
    /// (a commit's own, a quiesced change) runs it at once.
    pub(crate) fn join_action(&self, action: JoinAction) -> Result<()> {
        if Change::group(self).is_none() {
            return self.run_actions(vec![action]);
        }
        let mut work = self.work.borrow_mut();
        let actions = &mut work.actions;
        match &action {
            // An operation stores its inodes more than once. A note of the
            // checkpoint changes nothing: a restart may drop it.
            JoinAction::StoredSeq(s) => {
                if actions.iter().any(|a| matches!(a, JoinAction::StoredSeq(t) if Arc::ptr_eq(s, t))) {
                    return Ok(());
                }
            }
            JoinAction::OrphanAdd(_) | JoinAction::OrphanRemove(_) => self.touched.set(true),
        }
        actions.push(action);
        Ok(())
    }

    /// Ends the handle: its group joins the running checkpoint (see
    /// [`Tx::end`]) and the handle leaves the gate. The end of
    /// `Engine::change`, which has latched the operation's own error first.
    /// A failure here latches an abort before the handle leaves the gate
    /// (the latch rule: no swap runs between half-applied changes and the
    /// abort), and is the operation's error.
    pub(crate) fn join(mut self) -> Result<()> {
        self.joined = true;
        self.end()
    }

    /// The handle is finished: hands its end work to its group and, as the
    /// group's last member, joins it (its claimed buffers, then the join
    /// actions and the allocation intents, those of the actions' own tree
    /// work included, in the order they were recorded); otherwise waits for
    /// the member that does.
    fn end(&self) -> Result<()> {
        let Some(group) = &self.group else { return Ok(()) };
        if !self.changed() {
            // Nothing claimed, recorded or merged (at most a note that an
            // unchanged inode was stored): nothing to join.
            return Ok(());
        }
        let work = std::mem::take(&mut *self.work.borrow_mut());
        // Sealing happens inside the join gate, so no swap falls between
        // a group's seal and its join (an intent applied early for a sealed
        // group lands in the group's checkpoint: `alloc::intents`).
        let entry = self.mgr.enter_join(self.meta);
        let t0 = Instant::now();
        let r = match group.finish(work) {
            Finish::Wait => {
                self.mgr.leave_join(self.meta, entry, t0.elapsed().as_micros() as u64);
                return if group.wait_joined() { Ok(()) } else { Err(FsError::Shutdown) };
            }
            Finish::Last(mut sealed) => {
                self.direct.set(true);
                let r = self.apply_group(&mut sealed);
                sealed.done(r.is_ok());
                r
            }
        };
        if let Err(e) = &r {
            // Before leaving the gate: no swap may take the half-applied end.
            self.mgr.abort_half_done(self.meta, e);
        }
        self.mgr.leave_join(self.meta, entry, t0.elapsed().as_micros() as u64);
        r
    }

    fn apply_group(&self, sealed: &mut Sealed) -> Result<()> {
        self.meta.bufs().join_group(sealed);
        let actions = std::mem::take(&mut sealed.work.actions);
        if !actions.is_empty() {
            self.run_actions(actions)?;
        }
        let mut intents = std::mem::take(&mut sealed.work.intents);
        if intents.is_empty() {
            return Ok(());
        }
        // Merged members' intents, in the order they were recorded.
        intents.sort_unstable_by_key(|&(ticket, _)| ticket);
        let seq = self.meta.running_seq().load(Ordering::Acquire);
        self.meta.alloc().apply_intents(self, &intents, seq)
    }

    fn run_actions(&self, actions: Vec<JoinAction>) -> Result<()> {
        let seq = self.meta.running_seq().load(Ordering::Acquire);
        for a in &actions {
            if let JoinAction::StoredSeq(stored) = a {
                stored.fetch_max(seq, Ordering::AcqRel);
            }
        }
        let orphans = actions.iter().any(|a| !matches!(a, JoinAction::StoredSeq(_)));
        match self.mgr.join_hook() {
            Some(hook) if orphans => hook(self, &actions),
            _ => Ok(()),
        }
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
    fn defer_bitmap(&self, ticket: u64, intent: BitmapIntent) -> bool {
        if Change::group(self).is_none() {
            return false;
        }
        self.touched.set(true);
        self.work.borrow_mut().intents.push((ticket, intent));
        true
    }
    fn group(&self) -> Option<&Arc<JoinGroup>> {
        self.group.as_ref().filter(|_| !self.direct.get())
    }
    fn as_direct(&self, f: &mut dyn FnMut(&dyn Change) -> Result<()>) -> Result<()> {
        let was = self.direct.replace(true);
        let r = f(self);
        self.direct.set(was);
        r
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.joined && self.entered.is_some() {
            // Only an unwinding operation ends without `Engine::change`'s
            // join. If it changed anything, its changes are half an
            // operation: abort before leaving the gate. Then join as usual,
            // so that memory and disk agree and merged partners go on.
            if self.changed() {
                let e = FsError::Io(std::io::Error::other("an operation ended half-way (a panic)"));
                self.mgr.abort_half_done(self.meta, &e);
            }
            if let Err(e) = self.end() {
                tracing::error!(error = %e, "a handle that ended early could not apply its recorded changes");
            }
        }
        if let Some(entered) = self.entered {
            self.mgr.release(self.credits.get());
            let held_us = entered.elapsed().as_micros() as u64;
            if let Some(entry) = self.held.take() {
                self.mgr.leave_join(self.meta, entry, 0);
            }
            self.mgr.leave(held_us);
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
