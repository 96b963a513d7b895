//! In-core inodes, the inode cache, and the kernel's lookup references.
//!
//! An in-core inode ([`InodeState`]) is the decoded [`DiskInode`] plus a few
//! in-memory flags. Every change is written back into its inode-table
//! buffer at once ([`Tx::store_inode`]), inside the running transaction, so
//! the in-core copy is never dirtier than the buffer cache and eviction never
//! loses anything — with one exception, the *dirty times*.
//!
//! ## Dirty times
//! A write on the overwrite fast path (see `overwrite`) changes no metadata
//! but the file's mtime and ctime, and takes no transaction: it records the
//! new time in [`InodeState::lazy_time`] (under the inode's *shared* lock,
//! hence the mutex) and queues the inode once on the file system's dirty-times
//! list. The time reaches the inode-table buffer at the next commit, which
//! logs every queued inode first (as ext4's lazytime does at writeback), or
//! earlier, whenever the inode is stored for another reason (`Fs::store`
//! writes `max(d.mtime, lazy_time)`). Readers see the merged times
//! (`Fs::attr`). An explicit time (utimens) folds the lazy time in first, so
//! it is never overridden. A queued inode is held by the list (one `Arc`), so
//! eviction cannot drop it before its times are logged.
//!
//! ## Lookup references
//! The kernel's FUSE lookup count (nlookup: one per LOOKUP, CREATE, ... reply,
//! returned by FORGET) is kept apart from the in-core inode, in a compact
//! table ([`LookupRefs`]: inode number → count; an inode with one reference,
//! the usual case, costs a hash-set slot of 8 bytes and a control byte, 10 to
//! 21 bytes with the table's load-factor slack, one with more a 16-byte map
//! slot, 19 to 37 bytes). That table is the fixed overhead the cache
//! budget does not cover: the kernel may hold millions of inodes, and the
//! daemon keeps only their counts, not their full in-core copies. The count
//! changes only under the inode's lock (shared for an increment, exclusive
//! for a decrement), so a holder of the exclusive lock that sees 0 knows no
//! reference appears meanwhile — or, for an inode not in core, under its
//! cache shard's lock (a FORGET of an evicted inode needs no reload).
//!
//! ## Listings
//! A READDIRPLUS gives the kernel each entry's attributes and a lookup
//! reference. For an inode not in core, `Fs::listing_entry` reads the
//! attributes from its inode-table buffer and makes no in-core inode: the
//! kernel caches the attributes, and a walk of millions of files would
//! otherwise fill the cache with inodes nobody asks for again (making them
//! in core, as before, measured no faster: bench/results/2026-11-29-floor-listings).
//! The reference is added
//! first, under the inode's cache shard lock and only if the inode is not
//! in core ([`InodeCache::add_lookups_if_uncached`]): a change to an inode
//! holds it in core from its load to its end (a held `Arc` is never
//! dropped), so an unlink either finished before — its free reached the
//! buffer, and the listing sees no links — or comes after and sees the
//! reference (the file goes to the orphan list, freed at the kernel's
//! FORGET). A listing that then finds no links, or whose entry does not fit
//! in the reply, gives its reference back through `InodeStore::forget`, as the
//! kernel would.
//!
//! ## The cache (`-o lru_caches=1`, the default)
//! In-core inodes live in a sharded LRU (`lru`) under a byte budget
//! (`MountOptions::inode_cache_bytes`). A hit sets the entry's referenced
//! bit; an insert past the shard's budget walks its list: referenced entries
//! rotate, *busy or dirty* ones are skipped, the rest are dropped. Busy or
//! dirty means any of:
//! * its `Arc` is held outside the cache (an operation in flight, the
//!   dirty-times list) — this also covers a locked inode;
//! * dirty times not yet stored (`lazy_time`, `times_queued`);
//! * no links and not freed: an open unlinked file (on the orphan list until
//!   its last lookup reference goes) or one being freed in steps.
//!
//! An inode the kernel holds may be dropped when it is none of these: its
//! lookup count stays in the table and the inode is read back from its
//! buffer on the next use. What an in-core inode knows beyond its buffer is
//! `stored_seq` (for `fdatasync`): a dropped inode's value is folded into a
//! cache-wide maximum that every inode read back starts from, so fdatasync
//! of a reloaded inode commits whenever some dropped inode's last store may
//! not be committed yet (conservative, never wrong).
//!
//! With `-o lru_caches=0` there is no budget: an inode stays in core until
//! the kernel forgets it and nobody uses it (`evict_if_unused`), as before.
//!
//! ## Invariants
//! * At most one in-core copy of an inode exists: the cache hands out clones
//!   of one `Arc`, and drops an entry only when nobody else holds it.
//! * A load that raced with an entry leaving its shard is redone (the shard's
//!   epoch moved): it may have read the inode before its last store.
//! * An inode with `nlink == 0` stays allocated while its lookup count is
//!   above 0 (an open, unlinked file); it sits on the on-disk orphan list
//!   meanwhile, so a crash frees it at the next mount. Such an inode is never
//!   dropped from the cache, so an inode that is not in core and has lookup
//!   references has links.
//!
//! ## Locking
//! One `RwLock` per inode. Operations that need several lock them in
//! ascending inode-number order ([`lock_many`]). Cache shard locks and
//! lookup-table shard locks are taken under inode locks, never the other
//! way round (the shrinker only *tries* an inode's locks); a cache shard
//! lock is taken before a lookup-table shard lock.

use crate::error::{FsError, Result};
use crate::lru::{Isolate, Shard, ShardedLru};
use crate::meta::Meta;
use crate::stats::Publish;
use crate::tx::Tx;
use cairn_format::inode::Timestamp;
use cairn_format::inode::{DataArea, DiskInode, ATTR_APPEND, ATTR_DIRSYNC, ATTR_IMMUTABLE, ATTR_SYNC};
use cairn_format::FormatError;
use parking_lot::lock_api::ArcRwLockWriteGuard;
use parking_lot::{Mutex, RawRwLock, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// An in-core inode.
pub struct InodeState {
    pub ino: u64,
    pub d: DiskInode,
    /// The inode was freed; the number may already belong to a new file.
    pub freed: bool,
    /// mtime and ctime of fast-path writes not yet stored (see "Dirty
    /// times" above); `None` when the buffer has them.
    pub lazy_time: Mutex<Option<Timestamp>>,
    /// The inode is on the file system's dirty-times list.
    pub times_queued: AtomicBool,
    /// The checkpoint that last stored this inode (0: loaded from disk, so
    /// durable): `fdatasync` commits only when that one is not yet.
    pub stored_seq: AtomicU64,
    /// Unlinked while the kernel held it: counted in the reaper's
    /// `held_unlinked` until its FORGET.
    pub held_unlinked: bool,
    /// Changes of a directory's entries made through this in-core inode
    /// (`dir::add`, `remove`, `retarget`, under its exclusive lock): an
    /// entry found under the shared lock is still where it was if the count
    /// has not moved by the time the caller holds the lock exclusively.
    pub entry_changes: u32,
}

/// The chattr flags the engine enforces (see `inode_flags`).
const PROTECTING: u32 = ATTR_IMMUTABLE | ATTR_APPEND | ATTR_SYNC | ATTR_DIRSYNC;

impl InodeState {
    pub(crate) fn new(ino: u64, d: DiskInode) -> InodeState {
        InodeState {
            ino,
            d,
            freed: false,
            lazy_time: Mutex::new(None),
            times_queued: AtomicBool::new(false),
            stored_seq: AtomicU64::new(0),
            held_unlinked: false,
            entry_changes: 0,
        }
    }

    /// mtime and ctime with the dirty times merged in.
    pub fn times(&self) -> (Timestamp, Timestamp) {
        match *self.lazy_time.lock() {
            Some(t) => (self.d.mtime.max(t), self.d.ctime.max(t)),
            None => (self.d.mtime, self.d.ctime),
        }
    }

    /// Moves the dirty times into `d` (the caller holds the inode
    /// exclusively and stores it, or is about to set the times itself).
    pub fn fold_lazy_time(&mut self) {
        if let Some(t) = self.lazy_time.get_mut().take() {
            self.d.mtime = self.d.mtime.max(t);
            self.d.ctime = self.d.ctime.max(t);
        }
    }
}

/// A shared reference to an in-core inode.
pub type InodeRef = Arc<RwLock<InodeState>>;
/// A write guard that owns its reference.
pub type InodeGuard = ArcRwLockWriteGuard<RawRwLock, InodeState>;

/// Estimated bytes of an in-core inode that owns no heap data: the
/// `Arc<RwLock<InodeState>>` allocation (248 bytes, malloc's 256-byte size
/// class), its list node (32) and map slot (17), and the tables' growth
/// slack. `cargo test -p cairn-core icache_entry_size -- --nocapture` prints
/// the parts; the `rss_per_in_core_inode` measurement (200,000 empty files
/// with `lru_caches=0` against `=1`) found 299 bytes of RSS per in-core
/// inode.
pub const INODE_BASE_BYTES: usize = 320;

/// Estimated bytes of the in-core inode `d` (what its data area holds on the
/// heap added to the fixed part).
pub fn inode_bytes(d: &DiskInode) -> usize {
    let heap = match &d.data {
        DataArea::Extents(v) => v.capacity() * std::mem::size_of::<cairn_format::extent::Extent>(),
        DataArea::Inline(v) => v.capacity(),
        DataArea::Tree(_) => 0,
    };
    // The allocator rounds small blocks up: count a 16-byte header.
    INODE_BASE_BYTES + if heap > 0 { heap + 16 } else { 0 }
}

const REF_SHARDS: usize = 64;

/// One shard of [`LookupRefs`]. Most inodes the kernel holds have exactly
/// one reference: those cost a set slot (8 bytes and a control byte); the
/// rest a map slot (16 and one).
#[derive(Default)]
struct RefShard {
    one: foldhash::HashSet<u64>,
    more: foldhash::HashMap<u64, u64>,
}

impl RefShard {
    fn get(&self, ino: u64) -> u64 {
        if self.one.contains(&ino) {
            1
        } else {
            self.more.get(&ino).copied().unwrap_or(0)
        }
    }

    /// Adds `n` (> 0): the common first reference is one probe of the
    /// (mostly empty) map and one set insert.
    fn add(&mut self, ino: u64, n: u64) {
        if let Some(c) = self.more.get_mut(&ino) {
            *c = c.saturating_add(n);
            return;
        }
        if n == 1 && self.one.insert(ino) {
            return;
        }
        // It held one (a failed insert found it there) or none, and now
        // holds more than one.
        let had = self.one.remove(&ino);
        self.more.insert(ino, u64::from(had).saturating_add(n));
    }

    fn set(&mut self, ino: u64, n: u64) {
        match n {
            0 => {
                if !self.one.remove(&ino) {
                    self.more.remove(&ino);
                }
                // Give memory back once the kernel has let most go.
                if self.one.capacity() > 1024 && self.one.len() < self.one.capacity() / 4 {
                    self.one.shrink_to_fit();
                }
                if self.more.capacity() > 1024 && self.more.len() < self.more.capacity() / 4 {
                    self.more.shrink_to_fit();
                }
            }
            1 => {
                self.more.remove(&ino);
                self.one.insert(ino);
            }
            _ => {
                self.one.remove(&ino);
                self.more.insert(ino, n);
            }
        }
    }
}

/// The kernel's lookup references (FUSE nlookup) per inode number; inodes
/// with none are absent. See "Lookup references" above.
pub struct LookupRefs {
    shards: Vec<Mutex<RefShard>>,
}

impl Default for LookupRefs {
    fn default() -> Self {
        LookupRefs { shards: (0..REF_SHARDS).map(|_| Mutex::new(RefShard::default())).collect() }
    }
}

impl LookupRefs {
    fn shard(&self, ino: u64) -> &Mutex<RefShard> {
        &self.shards[(ino as usize) % REF_SHARDS]
    }

    fn get(&self, ino: u64) -> u64 {
        self.shard(ino).lock().get(ino)
    }

    fn add(&self, ino: u64, n: u64) {
        if n > 0 {
            self.shard(ino).lock().add(ino, n);
        }
    }

    /// Drops `n` references; returns what is left.
    fn sub(&self, ino: u64, n: u64) -> u64 {
        let mut sh = self.shard(ino).lock();
        let c = sh.get(ino);
        if c == 0 {
            return 0;
        }
        let left = c.saturating_sub(n);
        sh.set(ino, left);
        left
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock()).map(|s| s.one.len() + s.more.len()).sum()
    }

    /// Every inode number that holds a reference now.
    fn held(&self) -> Vec<u64> {
        let mut v = Vec::new();
        for sh in &self.shards {
            let sh = sh.lock();
            v.extend(sh.one.iter().copied());
            v.extend(sh.more.keys().copied());
        }
        v
    }
}

/// The inode cache (see the module essay).
pub struct InodeCache {
    lru: ShardedLru<u64, InodeRef>,
    refs: LookupRefs,
    /// The largest `stored_seq` of any inode dropped from the cache: what an
    /// inode read back starts from.
    evicted_seq: AtomicU64,
    /// Whether any inode of this mount with chattr flags that the engine
    /// enforces (`i`, `a`, `S`, `D`) has been loaded or given them: until
    /// then the hot paths skip the checks (see `inode_flags`). Per mount:
    /// one mount's flags cost another in the same process nothing.
    flags_in_use: AtomicBool,
    /// Whether any inode of this mount with a set-id bit or an xattr block
    /// has been loaded, created or stored: until then a write has no
    /// privilege to drop (see `FileIo::kill_privs`) and skips the look at
    /// the inode, whose lock a write in flight holds. Only ever set, per
    /// mount, like `flags_in_use`.
    privs_in_use: AtomicBool,
}

impl Default for InodeCache {
    fn default() -> Self {
        InodeCache::new(None)
    }
}

impl InodeCache {
    /// A cache bounded by `budget` bytes, or unbounded (`-o lru_caches=0`:
    /// inodes leave only through [`InodeCache::evict_if_unused`]).
    pub fn new(budget: Option<usize>) -> InodeCache {
        InodeCache {
            lru: ShardedLru::new(budget, INODE_BASE_BYTES),
            refs: LookupRefs::default(),
            evicted_seq: AtomicU64::new(0),
            flags_in_use: AtomicBool::new(false),
            privs_in_use: AtomicBool::new(false),
        }
    }

    /// Notes that an inode of this mount has chattr flags the engine
    /// enforces.
    pub(crate) fn note_protected(&self) {
        self.flags_in_use.store(true, Ordering::Relaxed);
    }

    /// Whether the checks of `inode_flags` can matter on this mount.
    pub(crate) fn flags_in_use(&self) -> bool {
        self.flags_in_use.load(Ordering::Relaxed)
    }

    /// Notes `d`'s flags as it comes into the cache.
    fn note_flags(&self, d: &DiskInode) {
        if d.attr_flags & PROTECTING != 0 {
            self.note_protected();
        }
        self.note_privs(d);
    }

    /// Notes `d`'s set-id bits and xattr block (a file capability may be
    /// in it), as it comes into the cache or is stored. Set before the
    /// change that gave them is committed or answered, so a write that
    /// comes after sees it.
    pub(crate) fn note_privs(&self, d: &DiskInode) {
        if (d.mode & (libc::S_ISUID | libc::S_ISGID) != 0 || d.xattr_block != 0)
            && !self.privs_in_use.load(Ordering::Relaxed)
        {
            self.privs_in_use.store(true, Ordering::Release);
        }
    }

    /// Whether any inode of this mount may have a privilege for a write to
    /// drop (a set-id bit or a file capability); false: none has.
    pub(crate) fn privs_in_use(&self) -> bool {
        self.privs_in_use.load(Ordering::Acquire)
    }

    /// Whether an unreferenced entry may be dropped (see "busy or dirty").
    fn isolate(evicted_seq: &AtomicU64, r: &InodeRef) -> Isolate {
        if Arc::strong_count(r) > 1 {
            return Isolate::Skip;
        }
        // Nobody else holds the Arc (and none can clone it: that takes the
        // shard lock we hold), so nobody holds its lock either.
        let Some(g) = r.try_read() else { return Isolate::Skip };
        if g.freed {
            return Isolate::Remove;
        }
        if g.d.nlink == 0 || g.times_queued.load(Ordering::Acquire) || g.lazy_time.lock().is_some() {
            return Isolate::Skip;
        }
        evicted_seq.fetch_max(g.stored_seq.load(Ordering::Acquire), Ordering::AcqRel);
        Isolate::Remove
    }

    /// Inserts `r` into its (locked) shard and shrinks the shard; returns
    /// what was dropped, to be freed after the lock.
    fn insert_locked(&self, sh: &mut Shard<u64, InodeRef>, ino: u64, r: InodeRef, bytes: usize) -> Vec<InodeRef> {
        let mut gone: Vec<InodeRef> = sh.insert(ino, r, bytes).into_iter().collect();
        let seq = &self.evicted_seq;
        let shrunk = self.lru.shrink(sh, &mut |_, r| Self::isolate(seq, r));
        if !shrunk.is_empty() {
            sh.epoch += 1;
        }
        gone.extend(shrunk);
        gone
    }

    /// The in-core inode `ino`, read from disk if needed.
    pub fn get(&self, meta: &Meta, ino: u64) -> Result<InodeRef> {
        let mut epoch = {
            let mut sh = self.lru.lock(&ino);
            if let Some(i) = sh.get(&ino) {
                let i = i.clone();
                sh.hits += 1;
                return Ok(i);
            }
            sh.misses += 1;
            sh.epoch
        };
        loop {
            let d = meta.load_inode(ino)?;
            let mut sh = self.lru.lock(&ino);
            if let Some(i) = sh.get(&ino) {
                return Ok(i.clone());
            }
            if sh.epoch != epoch {
                epoch = sh.epoch;
                continue;
            }
            let bytes = inode_bytes(&d);
            self.note_flags(&d);
            let st = InodeState::new(ino, d);
            // Read under the shard lock: an eviction of this inode before
            // it (same lock) has folded its `stored_seq` in.
            st.stored_seq.store(self.evicted_seq.load(Ordering::Acquire), Ordering::Release);
            let r = Arc::new(RwLock::new(st));
            let gone = self.insert_locked(&mut sh, ino, r.clone(), bytes);
            drop(sh);
            drop(gone);
            return Ok(r);
        }
    }

    /// Inserts a freshly created inode.
    pub fn insert(&self, ino: u64, d: DiskInode) -> InodeRef {
        let bytes = inode_bytes(&d);
        self.note_flags(&d);
        let r = Arc::new(RwLock::new(InodeState::new(ino, d)));
        let mut sh = self.lru.lock(&ino);
        let gone = self.insert_locked(&mut sh, ino, r.clone(), bytes);
        drop(sh);
        drop(gone);
        r
    }

    /// Drops `ino` from the cache if the kernel forgot it and nobody uses
    /// it (unbounded cache only; a bounded one keeps it until reclaim).
    pub fn evict_if_unused(&self, ino: u64) {
        if self.lru.bounded() {
            return;
        }
        let mut sh = self.lru.lock(&ino);
        let unused = sh.peek(&ino).is_some_and(|r| {
            Arc::strong_count(r) == 1 && r.try_read().is_some_and(|g| g.freed || self.refs.get(ino) == 0)
        });
        if unused {
            let gone = sh.remove(&ino);
            sh.epoch += 1;
            drop(sh);
            drop(gone);
        }
    }

    /// Removes `ino` unconditionally (it was freed).
    pub fn remove(&self, ino: u64) {
        let mut sh = self.lru.lock(&ino);
        let gone = sh.remove(&ino);
        sh.epoch += 1;
        drop(sh);
        drop(gone);
    }

    /// The kernel's lookup references on `ino` (stable while its inode lock
    /// is held).
    pub fn lookups(&self, ino: u64) -> u64 {
        self.refs.get(ino)
    }

    /// Adds `n` lookup references to `ino`; the caller holds its inode lock
    /// (shared is enough).
    pub fn add_lookups(&self, ino: u64, n: u64) {
        self.refs.add(ino, n);
    }

    /// Drops `n` lookup references of `ino`, returning what is left; the
    /// caller holds its inode lock exclusively.
    pub fn sub_lookups(&self, ino: u64, n: u64) -> u64 {
        self.refs.sub(ino, n)
    }

    /// Every inode the kernel holds a lookup reference on now.
    pub fn kernel_held(&self) -> Vec<u64> {
        self.refs.held()
    }

    /// Drops every lookup reference of `ino` (unmount).
    pub fn clear_lookups(&self, ino: u64) {
        self.refs.sub(ino, u64::MAX);
    }

    /// For a listing (`Fs::listing_entry`): if `ino` is not in core, adds
    /// `n` lookup references under its cache shard's lock and returns true;
    /// false (nothing added) if it is in core. See "Listings".
    pub fn add_lookups_if_uncached(&self, ino: u64, n: u64) -> bool {
        let sh = self.lru.lock(&ino);
        if sh.peek(&ino).is_some() {
            return false;
        }
        self.refs.add(ino, n);
        true
    }

    /// FORGET of an inode that is not in core: drops `n` references under
    /// the cache shard's lock (no load can race with it) and returns what is
    /// left, or `None` when the inode is in core (the caller takes its lock).
    /// Such an inode has links (see "Invariants"), so nothing is freed.
    pub fn forget_uncached(&self, ino: u64, n: u64) -> Option<u64> {
        let sh = self.lru.lock(&ino);
        if sh.peek(&ino).is_some() {
            return None;
        }
        Some(self.refs.sub(ino, n))
    }
}

/// Write-locks several inodes in ascending number order (deduplicated).
pub fn lock_many(refs: &[&InodeRef]) -> Vec<InodeGuard> {
    let mut v: Vec<&InodeRef> = refs.to_vec();
    v.sort_by_key(|r| Arc::as_ptr(r) as usize);
    v.dedup_by_key(|r| Arc::as_ptr(r) as usize);
    // Order by inode number: read it without locking via a brief read lock.
    let mut keyed: Vec<(u64, &InodeRef)> = v.into_iter().map(|r| (r.read().ino, r)).collect();
    keyed.sort_by_key(|(i, _)| *i);
    keyed.into_iter().map(|(_, r)| r.write_arc()).collect()
}

impl Meta {
    /// Reads and verifies inode `ino` (checksum, file type, block pointers).
    pub fn load_inode(&self, ino: u64) -> Result<DiskInode> {
        if !self.geo().valid_ino(ino) {
            return Err(FsError::Errno(libc::ESTALE));
        }
        let geo = self.geo();
        let (blk, off) = geo.inode_location(ino);
        // Read ahead in the group's inode table (ext4's
        // `inode_readahead_blks`): inodes made in a row sit side by side.
        let table_end = geo.inode_table(geo.group_of_ino(ino)) + geo.itable_blocks;
        let buf = self.bufs().get_ahead(blk, table_end.min(blk + self.inode_readahead()), |_, _| Ok(()))?;
        let d = DiskInode::decode(self.seed(), ino, &buf.read()[off..off + cairn_format::inode::INODE_SIZE])?;
        match &d.data {
            DataArea::Extents(list) => {
                for e in list {
                    if e.len == 0 || !self.geo().valid_data_range(e.pblk, u64::from(e.len)) {
                        return Err(FormatError::corrupt("inode", ino, format!("extent {e:?} out of range")).into());
                    }
                }
            }
            DataArea::Tree(root) if *root != 0 && !self.geo().valid_data_range(*root, 1) => {
                return Err(FormatError::corrupt("inode", ino, "tree root out of range").into());
            }
            _ => {}
        }
        if d.xattr_block != 0 && !self.geo().valid_data_range(d.xattr_block, 1) {
            return Err(FormatError::corrupt("inode", ino, "xattr block out of range").into());
        }
        Ok(d)
    }
}

impl Tx<'_> {
    /// Writes inode `ino` into its inode-table buffer (running transaction).
    pub fn store_inode(&self, ino: u64, d: &DiskInode) -> Result<()> {
        let (blk, off) = self.meta().geo().inode_location(ino);
        let buf = self.meta().bufs().get(blk, |_, _| Ok(()))?;
        self.modify(&buf, off..off + cairn_format::inode::INODE_SIZE, |slot| d.encode(self.meta().seed(), ino, slot));
        Ok(())
    }
}

impl Publish for InodeCache {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        self.lru.publish("icache", put);
        put("icache.lookup_refs", self.refs.len() as u64);
    }
}

/// The state of inode `ino` among guards the caller locked together
/// (`lock_many`).
pub(crate) fn find(gs: &mut [InodeGuard], ino: u64) -> &mut InodeState {
    let i = gs.iter().position(|g| g.ino == ino).expect("inode was locked by the caller");
    &mut gs[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_refs_move_between_the_set_and_the_map() {
        let r = LookupRefs::default();
        assert_eq!(r.sub(7, 1), 0);
        r.add(7, 1);
        assert_eq!((r.get(7), r.len()), (1, 1));
        r.add(7, 2);
        assert_eq!((r.get(7), r.len()), (3, 1));
        assert_eq!(r.sub(7, 1), 2);
        assert_eq!(r.sub(7, 1), 1);
        assert_eq!((r.get(7), r.len()), (1, 1));
        assert_eq!(r.sub(7, 5), 0);
        assert_eq!((r.get(7), r.len()), (0, 0));
        for i in 0..10_000 {
            r.add(i, 1 + i % 2);
        }
        assert_eq!(r.len(), 10_000);
        for i in 0..10_000 {
            assert_eq!(r.get(i), 1 + i % 2);
            r.sub(i, u64::MAX);
        }
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn lookup_refs_agree_with_a_plain_count_under_random_adds_and_subs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(37);
        let r = LookupRefs::default();
        let mut model = std::collections::HashMap::<u64, u64>::new();
        for _ in 0..50_000 {
            let ino = rng.gen_range(0..300u64);
            let n = [1, 1, 1, 2, 3][rng.gen_range(0..5usize)];
            if rng.gen_bool(0.55) {
                r.add(ino, n);
                *model.entry(ino).or_default() += n;
            } else {
                let m = model.entry(ino).or_default();
                *m = m.saturating_sub(n);
                assert_eq!(r.sub(ino, n), *m);
            }
            assert_eq!(r.get(ino), model[&ino], "inode {ino}");
        }
        assert_eq!(r.len(), model.values().filter(|&&c| c > 0).count());
    }

    /// Prints the parts of [`INODE_BASE_BYTES`] (run with `--nocapture`).
    #[test]
    fn icache_entry_size() {
        let state = std::mem::size_of::<RwLock<InodeState>>();
        let arc = state + 16;
        let node = std::mem::size_of::<Option<(u64, InodeRef, u32, u32, u32, bool)>>();
        let slot = std::mem::size_of::<(u64, u32)>() + 1;
        println!("RwLock<InodeState> {state}, Arc allocation {arc}, list node {node}, map slot {slot}");
        // The allocator rounds the Arc up to its size class; the map and
        // slab's growth slack is what the rest leaves (see the measurement).
        assert!(arc.next_power_of_two() + node + slot <= INODE_BASE_BYTES);
    }
}
