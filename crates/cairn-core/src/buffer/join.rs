//! Join groups: a handle's changes stay private until its end (step S4 of
//! `docs/gate-plan.md`).
//!
//! ## Purpose
//! A handle changes buffers in place, so its own reads (and everybody
//! else's) see its changes. But the chunks it changes are *claimed* for its
//! join group, each with the bytes it had before ([`Claim`]'s undo), and
//! nothing enters the committed-item list until the handle's end. There
//! the last member of the group *joins* it: its claimed chunks become dirty
//! chunks of the running checkpoint, and its recorded end work (allocation
//! intents, orphan-list actions) is applied. A capture that meets a claim
//! restores the undo bytes in its copy, so a checkpoint holds exactly the
//! groups that joined while it ran, whatever handles are still running.
//!
//! ## Groups and merges
//! Each handle begins in a group of its own. When a handle changes a chunk
//! that another running group claims, the two groups *merge* (union-find:
//! the absorbed group points at the other), and join as one: the last
//! member to finish joins for all, the others wait for it. A chunk claimed
//! by a group that is already *sealed* (its last member finished; its join
//! is running) is claimed again, with the sealed group's bytes as undo:
//! restores apply claims newest first, so the older undo wins until the
//! sealed group's join removes its claim. That is the only way two claims
//! cover one chunk.
//!
//! ## Invariants
//! * A chunk claimed by a group is covered by that group's claim until its
//!   join; claims of one group never overlap each other.
//! * Structures every handle shares (bitmaps, group descriptors, the
//!   superblock, the orphan tree) change only in joins, the swap and
//!   quiesced changes, by *direct* writers that claim nothing.
//! * A finished member does not return before its group has joined, so an
//!   operation never replies with changes a later commit could miss.
//!
//! ## Locking
//! A group's state lock is a leaf: it is taken under a buffer's log lock
//! (claims, merges) and never held while taking a buffer's lock. Two roots
//! are locked in id order.

use super::{BitmapIntent, Buf, LogState};
use crate::journal::image::{Image, ImageBytes};
use cairn_format::journal::chunk_size;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Undo buffers of joined claims, for this thread's next claims (one
    /// claim per buffer a handle changes: an allocation each otherwise).
    static UNDO_POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Most undo buffers a thread keeps (each at most a block and its indexes).
const UNDO_POOL_MAX: usize = 64;

/// An empty undo buffer with room for `chunks` of a `block_size` block.
fn undo_buffer(chunks: u64, block_size: usize) -> Vec<u8> {
    let mut undo = UNDO_POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    undo.reserve(undo_len(chunks, block_size));
    undo
}

/// Bytes of undo records for `chunks` (an index byte and the chunk each).
fn undo_len(chunks: u64, block_size: usize) -> usize {
    chunks.count_ones() as usize * (chunk_size(block_size) + 1)
}

/// Gives a joined claim's undo buffer back to this thread's pool.
fn recycle(mut undo: Vec<u8>) {
    undo.clear();
    UNDO_POOL.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < UNDO_POOL_MAX {
            pool.push(undo);
        }
    });
}

/// A change a handle's end makes besides the allocator's intents (steps S2
/// and S4 of `docs/gate-plan.md`): what an operation decided about state
/// that other handles share, applied when its group joins. Carried here
/// (the tx layer interprets it) so that merged groups can pool it.
pub enum JoinAction {
    /// Put inode `ino` on the orphan list (`inode_store::orphan_add`).
    OrphanAdd(u64),
    /// Take inode `ino` off the orphan list.
    OrphanRemove(u64),
    /// Note that an inode was stored in the running checkpoint (for
    /// `fdatasync`: the inode's `stored_seq`).
    StoredSeq(Arc<AtomicU64>),
}

/// What a group's join applies besides its buffers.
#[derive(Default)]
pub struct EndWork {
    /// Allocation bitmap changes with their tickets (`alloc::intents`).
    pub intents: Vec<(u64, BitmapIntent)>,
    pub actions: Vec<JoinAction>,
}

impl EndWork {
    fn append(&mut self, other: &mut EndWork) {
        self.intents.append(&mut other.intents);
        self.actions.append(&mut other.actions);
    }
}

/// One or more handles that join together (see the module essay).
pub struct JoinGroup {
    id: u64,
    /// Set (under the state lock, never cleared) when the group merges into
    /// another: a group without it is its own root, found with no lock.
    absorbed: AtomicBool,
    state: Mutex<GroupState>,
    done: Condvar,
}

#[derive(Default)]
struct GroupState {
    /// The group this one merged into; `None` for a root.
    parent: Option<Arc<JoinGroup>>,
    /// Members not finished yet (a root's count covers its merged groups).
    running: u32,
    /// The last member finished: the join is running.
    sealed: bool,
    /// Set once the group's changes are joined: whether the join succeeded.
    joined: Option<bool>,
    /// Buffers the group claimed chunks of (a buffer may be listed twice
    /// after a merge).
    bufs: Vec<Arc<Buf>>,
    /// End work of the members that finished.
    work: EndWork,
    /// Groups merged into this root, to wake when it joins.
    merged: Vec<Arc<JoinGroup>>,
}

/// What [`JoinGroup::merge`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Merge {
    /// The two are (now) one group.
    Joined,
    /// The other group is sealed: its join is running.
    Sealed,
}

/// What a finishing member does next ([`JoinGroup::finish`]).
pub enum Finish {
    /// It was the last: it joins the group.
    Last(Sealed),
    /// Others still run: it waits for the last one's join.
    Wait,
}

/// A sealed group, handed to its joiner.
pub struct Sealed {
    root: Arc<JoinGroup>,
    merged: Vec<Arc<JoinGroup>>,
    pub bufs: Vec<Arc<Buf>>,
    pub work: EndWork,
}

impl JoinGroup {
    /// A group of one running member.
    pub fn new() -> Arc<JoinGroup> {
        let state = GroupState { running: 1, ..GroupState::default() };
        Arc::new(JoinGroup {
            id: NEXT_GROUP.fetch_add(1, Ordering::Relaxed),
            absorbed: AtomicBool::new(false),
            state: Mutex::new(state),
            done: Condvar::new(),
        })
    }

    /// The group's root (itself unless merged).
    fn root(self: &Arc<Self>) -> Arc<JoinGroup> {
        let mut g = self.clone();
        loop {
            if !g.absorbed.load(Ordering::Acquire) {
                // A root now (a merge may make it a child right after: the
                // callers lock it and look again).
                return g;
            }
            let parent = g.state.lock().parent.clone();
            match parent {
                Some(p) => g = p,
                None => return g,
            }
        }
    }

    /// Whether `a` and `b` are one group.
    pub fn same(a: &Arc<JoinGroup>, b: &Arc<JoinGroup>) -> bool {
        if Arc::ptr_eq(a, b) {
            return true;
        }
        if !a.absorbed.load(Ordering::Acquire) && !b.absorbed.load(Ordering::Acquire) {
            // Two distinct roots (the common case: no lock, no clone).
            return false;
        }
        Arc::ptr_eq(&a.root(), &b.root())
    }

    /// Locks two distinct roots in id order; `None` if they are one, or if
    /// either stopped being a root meanwhile (the caller looks again).
    fn lock_pair<'a>(
        a: &'a Arc<JoinGroup>,
        b: &'a Arc<JoinGroup>,
    ) -> Option<(MutexGuard<'a, GroupState>, MutexGuard<'a, GroupState>)> {
        let (ga, gb) = if a.id < b.id {
            let ga = a.state.lock();
            (ga, b.state.lock())
        } else {
            let gb = b.state.lock();
            (a.state.lock(), gb)
        };
        (ga.parent.is_none() && gb.parent.is_none()).then_some((ga, gb))
    }

    /// Merges the running group `mine` with `other` (a claim's group, or
    /// the group of an unapplied allocation intent), unless `other` is
    /// sealed or already joined.
    pub fn merge(mine: &Arc<JoinGroup>, other: &Arc<JoinGroup>) -> Merge {
        loop {
            let (rm, ro) = (mine.root(), other.root());
            if Arc::ptr_eq(&rm, &ro) {
                return Merge::Joined;
            }
            let Some((mut gm, mut go)) = Self::lock_pair(&rm, &ro) else { continue };
            if go.sealed || go.joined.is_some() {
                return Merge::Sealed;
            }
            debug_assert!(!gm.sealed && gm.running > 0, "a running handle's group is open");
            go.running += std::mem::take(&mut gm.running);
            go.bufs.append(&mut gm.bufs);
            let mut work = std::mem::take(&mut gm.work);
            go.work.append(&mut work);
            go.merged.append(&mut gm.merged);
            go.merged.push(rm.clone());
            gm.parent = Some(ro.clone());
            rm.absorbed.store(true, Ordering::Release);
            return Merge::Joined;
        }
    }

    /// Lists `buf` in the group's set (its first claim in the buffer).
    pub fn add_buf(self: &Arc<Self>, buf: Arc<Buf>) {
        loop {
            let root = self.root();
            let mut st = root.state.lock();
            if st.parent.is_none() {
                st.bufs.push(buf);
                return;
            }
        }
    }

    /// A member finished, handing over its end work: the last one gets the
    /// sealed group to join.
    pub fn finish(self: &Arc<Self>, mut work: EndWork) -> Finish {
        loop {
            let root = self.root();
            let mut st = root.state.lock();
            if st.parent.is_some() {
                continue;
            }
            st.work.append(&mut work);
            st.running -= 1;
            if st.running > 0 {
                return Finish::Wait;
            }
            st.sealed = true;
            let (bufs, work, merged) =
                (std::mem::take(&mut st.bufs), std::mem::take(&mut st.work), std::mem::take(&mut st.merged));
            drop(st);
            return Finish::Last(Sealed { root, merged, bufs, work });
        }
    }

    /// Waits until the group this member belongs to has joined; whether the
    /// join succeeded.
    pub fn wait_joined(&self) -> bool {
        let mut st = self.state.lock();
        loop {
            if let Some(ok) = st.joined {
                return ok;
            }
            self.done.wait(&mut st);
        }
    }
}

impl Sealed {
    /// Whether `claim` belongs to this group.
    pub(crate) fn owns(&self, claim: &Claim) -> bool {
        Arc::ptr_eq(&claim.group, &self.root) || self.merged.iter().any(|g| Arc::ptr_eq(&claim.group, g))
    }

    /// The join is over: wakes the members waiting for it.
    pub fn done(self, ok: bool) {
        for g in std::iter::once(&self.root).chain(&self.merged) {
            g.state.lock().joined = Some(ok);
            g.done.notify_all();
        }
    }
}

/// Chunks of one buffer a running group claims (see the module essay).
pub(crate) struct Claim {
    pub group: Arc<JoinGroup>,
    /// The chunks claimed: their undo bytes are meaningful.
    pub chunks: u64,
    /// The chunks to log when the group joins (the claimed ones, or more: a
    /// block logged whole).
    pub map: u64,
    /// The claimed chunks' bytes from before the group changed them: one
    /// record per chunk, its index then its bytes, in the order claimed.
    pub undo: Vec<u8>,
}

impl Claim {
    /// Saves chunk `chunk`'s bytes from before the change: those inside
    /// the changed range (`before`, from byte `at`) from `before`, the rest
    /// from `live`, which the change did not touch there.
    fn save(&mut self, chunk: usize, before: &[u8], at: usize, live: &[u8]) {
        let cs = chunk_size(live.len());
        let (lo, hi) = (chunk * cs, (chunk + 1) * cs);
        let (in_lo, in_hi) = (lo.max(at), hi.min(at + before.len()));
        self.undo.push(chunk as u8);
        if in_lo >= in_hi {
            self.undo.extend_from_slice(&live[lo..hi]);
        } else {
            self.undo.extend_from_slice(&live[lo..in_lo]);
            self.undo.extend_from_slice(&before[in_lo - at..in_hi - at]);
            self.undo.extend_from_slice(&live[in_hi..hi]);
        }
        self.chunks |= 1 << chunk;
    }
}

/// Claims for `group` the chunks `changed` of a buffer (its log state
/// `st`, its bytes `live` after the change; `before` held bytes `at..` of it
/// before), merging with running groups that claim some of them, and notes
/// `map` to log. True if this is the group's first claim in the buffer.
pub(crate) fn claim(
    st: &mut LogState,
    group: &Arc<JoinGroup>,
    changed: u64,
    map: u64,
    before: &[u8],
    at: usize,
    live: &[u8],
) -> bool {
    let mut todo = changed;
    let mut over_sealed = 0u64;
    let mut had = false;
    let mut mine = None;
    for (i, c) in st.claims.iter().enumerate() {
        if JoinGroup::same(&c.group, group) {
            had = true;
            mine = mine.or(Some(i));
            todo &= !c.chunks;
            continue;
        }
        let overlap = c.chunks & todo;
        if overlap == 0 {
            continue;
        }
        match JoinGroup::merge(group, &c.group) {
            Merge::Joined => {
                had = true;
                mine = mine.or(Some(i));
                todo &= !overlap;
            }
            Merge::Sealed => over_sealed |= overlap,
        }
    }
    let bs = live.len();
    let fresh = |chunks| Claim { group: group.clone(), chunks: 0, map: 0, undo: undo_buffer(chunks, bs) };
    // Chunks over a sealed group's claim go in a claim newer than it.
    let (plain, late) = (todo & !over_sealed, todo & over_sealed);
    if late != 0 {
        let mut c = fresh(late);
        for chunk in chunks_in(late) {
            c.save(chunk, before, at, live);
        }
        c.map = map;
        st.claims.push(c);
    }
    if plain != 0 || late == 0 {
        let i = match mine {
            Some(i) => i,
            None => {
                st.claims.push(fresh(plain));
                st.claims.len() - 1
            }
        };
        st.claims[i].map |= map;
        st.claims[i].undo.reserve(undo_len(plain, bs));
        for chunk in chunks_in(plain) {
            st.claims[i].save(chunk, before, at, live);
        }
    }
    !had
}

/// The indexes of the chunks set in `map`, lowest first.
fn chunks_in(mut map: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (map != 0).then(|| {
            let k = map.trailing_zeros() as usize;
            map &= map - 1;
            k
        })
    })
}

/// The bytes of `live` that joined groups made: a shared reference if no
/// running group claims a chunk, else a copy with the claims' undo bytes
/// restored (see `join`).
pub(crate) fn joined_image(live: &Image, claims: &[Claim]) -> Image {
    if claims.is_empty() {
        return Image::clone(live);
    }
    let mut copy = ImageBytes::clone(live);
    restore(&mut copy, claims);
    Arc::new(copy)
}

/// `image` with every claim's chunks restored, newest claim first (the
/// bytes of the groups that joined, whatever runs now).
pub(crate) fn restore(image: &mut [u8], claims: &[Claim]) {
    let cs = chunk_size(image.len());
    for c in claims.iter().rev() {
        for record in c.undo.chunks_exact(cs + 1) {
            let k = usize::from(record[0]);
            image[k * cs..(k + 1) * cs].copy_from_slice(&record[1..]);
        }
    }
}

impl super::BufferCache {
    /// Joins a sealed group's buffers to the running checkpoint: its claimed
    /// chunks become dirty chunks (a committing buffer is frozen first, with
    /// every claim restored), and its claims go. The caller runs as a
    /// direct writer (no swap runs meanwhile).
    pub fn join_group(&self, sealed: &Sealed) {
        let running = self.cil.running();
        for buf in &sealed.bufs {
            let data = buf.read_image();
            let mut st = buf.log.lock();
            if !st.claims.iter().any(|c| sealed.owns(c)) {
                // Listed twice after a merge: joined already.
                continue;
            }
            if st.dirty_seq != 0 && st.dirty_seq < running {
                let image = joined_image(&data, &st.claims);
                self.cil.freeze(&mut st, image);
            }
            let mut map = 0;
            st.claims.retain_mut(|c| {
                let mine = sealed.owns(c);
                if mine {
                    map |= c.map;
                    recycle(std::mem::take(&mut c.undo));
                }
                !mine
            });
            if map == 0 {
                continue;
            }
            let first = st.dirty_seq == 0;
            if first {
                st.dirty_seq = running;
            }
            st.map |= map;
            drop(st);
            drop(data);
            if first {
                self.cil.insert(buf.clone());
            } else {
                self.cil.note_relog();
            }
        }
    }
}

#[cfg(test)]
mod tests;
