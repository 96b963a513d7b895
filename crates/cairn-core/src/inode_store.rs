//! Inode lifecycle: loading and storing in-core inodes, new inodes, the
//! orphan list, and freeing — in steps when a file is large.
//!
//! ## The orphan list
//! A B+tree keyed by inode number (empty values), rooted in the superblock.
//! An inode is on it while
//! * it has no links but is still open (FUSE lookups > 0): freed at the last
//!   `forget`, or at the next mount after a crash;
//! * a delete is in progress (no links, no references): its blocks are being
//!   freed in steps, each its own transaction;
//! * a truncate is in progress (links > 0): its size is already the new one
//!   and the blocks past it are being freed in steps.
//!
//! Mount (and unmount) finishes all three ([`InodeStore::process_orphans`]): a crash
//! in the middle of deleting a file of a million extents leaves a consistent
//! image whose next mount completes the delete.
//!
//! ## Small and large
//! Freeing a file whose extents fit in the inode (most files) happens in the
//! transaction that drops its last link, if nobody holds the file. A larger
//! one is put on the orphan list there and queued on the reaper, whose
//! thread frees it in steps (`reaper`; with `-o sync_delete` the operation
//! that dropped the link does, once its own handle is closed).
//!
//! Through FUSE the kernel usually still holds the file when its last link
//! goes, so the unlink puts it on the orphan list whatever its size, and
//! the kernel's FORGET releases it later. That FORGET only queues the inode
//! on the reaper — no transaction on the request thread — unless
//! `-o sync_delete`, where it frees the file itself.
//!
//! A truncate frees in its own transaction what one handle covers; if more
//! is left, the inode goes on the orphan list with its new size and the
//! rest is queued on the reaper as well (or finished by the caller under
//! `sync_delete`). Until the reaper gets to it, the blocks past the size
//! stay mapped, invisible to reads (which stop at the size); the file's
//! next write, fallocate or size change finishes the truncate first
//! ([`InodeStore::settle_truncate`]), so no old byte comes back.
//!
//! ## By number: file handles
//! cairn offers FUSE export support, so `name_to_handle_at` handles (and
//! NFS) hold (inode number, generation). When the kernel has forgotten the
//! inode, `open_by_handle_at` reconnects it with a LOOKUP of `.` on that
//! number (`fuse_get_dentry`), whatever its type; the kernel itself then
//! compares the generation. [`InodeStore::lookup_self`] answers it from the inode
//! bitmap and the inode, never reading a table slot that is not in use (a
//! stale or forged handle must not look like corruption): ESTALE for a
//! number out of range, free, or with no links left (as ext4's
//! `EXT4_IGET_HANDLE`: a file the kernel forgot after its last unlink is
//! being freed). The root reports generation 0, as the kernel wants of
//! FUSE's root node ("fuse: root generation should be zero").
//!
//! ## Locking
//! Steps of one inode run under its I/O lock (`io_locks`), taken before
//! each step's handle, so writes and truncates of the inode wait for them.

use crate::btree::Tree;
use crate::engine::Engine;
use crate::error::{FsError, Result};
use crate::file;
use crate::inode::InodeCache;
use crate::inode::{InodeRef, InodeState};
use crate::io_locks::IoLocks;
use crate::journal::credits;
use crate::meta::Meta;
use crate::tx::Tx;
use crate::types::*;
use cairn_format::btree::KIND_ORPHANS;
use cairn_format::inode::*;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The inodes of a mount: the in-core inode cache, the generation
/// counter, the per-inode I/O locks, and everything that loads, stores,
/// creates, orphans and frees inodes (see the module essay).
pub struct InodeStore {
    engine: Arc<Engine>,
    icache: InodeCache,
    generation: AtomicU32,
    io_locks: IoLocks,
}

impl InodeStore {
    pub(crate) fn new(engine: Arc<Engine>, icache: InodeCache) -> InodeStore {
        InodeStore { engine, icache, generation: AtomicU32::new(rand::random()), io_locks: IoLocks::new() }
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.engine.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            Ok(self.attr(&g))
        })
    }

    /// The in-core inode cache (lookup counts, new inodes, eviction).
    pub(crate) fn cache(&self) -> &InodeCache {
        &self.icache
    }

    /// The per-inode I/O locks.
    pub(crate) fn io_locks(&self) -> &IoLocks {
        &self.io_locks
    }
}

impl InodeStore {
    /// The in-core inode `ino` (ENOENT once freed).
    pub(crate) fn iget(&self, ino: u64) -> Result<InodeRef> {
        let r = self.icache.get(self.engine.meta(), ino)?;
        let (freed, unlinked) = {
            let g = r.read();
            (g.freed, g.d.nlink == 0 && g.d.flags & INODE_FLAG_ORPHAN == 0)
        };
        if freed {
            return Err(FsError::Errno(libc::ENOENT));
        }
        if unlinked && !self.engine.meta().alloc().inode_in_use(self.engine.meta().bufs(), ino)? {
            // A freed inode read back from disk (the cache dropped it when
            // it was freed): it is not a live file.
            r.write().freed = true;
            return Err(FsError::Errno(libc::ENOENT));
        }
        Ok(r)
    }

    pub(crate) fn attr(&self, st: &InodeState) -> Attr {
        let (mtime, ctime) = st.times();
        self.disk_attr(st.ino, &st.d, mtime, ctime)
    }

    /// The attributes of inode `ino` as `d` holds them, with these times.
    pub(crate) fn disk_attr(&self, ino: u64, d: &DiskInode, mtime: Timestamp, ctime: Timestamp) -> Attr {
        // What the kernel is told of may be written next, cached or not (a
        // listing's entry is not): see `InodeCache::privs_in_use`.
        self.icache.note_privs(d);
        Attr {
            ino,
            generation: if ino == cairn_format::ROOT_INO { 0 } else { d.generation },
            size: d.size,
            blocks: d.blocks * u64::from(self.engine.meta().geo().block_size / 512),
            atime: d.atime,
            mtime,
            ctime,
            crtime: d.crtime,
            mode: d.mode,
            nlink: d.nlink,
            uid: d.uid,
            gid: d.gid,
            rdev: d.rdev,
            blksize: self.engine.meta().geo().block_size,
            flags: d.attr_flags,
        }
    }

    /// Writes the in-core inode into its inode-table buffer, with its dirty
    /// times merged in (see `inode`), and notes the checkpoint that holds it
    /// (for `fdatasync`).
    pub(crate) fn store(&self, tx: &Tx<'_>, st: &InodeState) -> Result<()> {
        // The running checkpoint's sequence is stable while a handle holds
        // the gate (a push moves it on under the closed gate).
        st.stored_seq.fetch_max(tx.meta().running_seq().load(Ordering::Acquire), Ordering::AcqRel);
        self.icache.note_privs(&st.d);
        if st.lazy_time.lock().is_none() {
            return tx.store_inode(st.ino, &st.d);
        }
        let mut d = st.d.clone();
        (d.mtime, d.ctime) = st.times();
        tx.store_inode(st.ino, &d)
    }

    fn orphan_tree(&self) -> Tree<'_> {
        Tree::new(self.engine.meta(), KIND_ORPHANS, 0, 0)
    }

    fn orphan_levels(&self) -> Result<u64> {
        let root = *self.engine.meta().orphan_root().lock();
        crate::btree::levels(self.engine.meta(), root, KIND_ORPHANS, 0)
    }

    /// Credits of adding to (or removing from) the orphan list (one level
    /// more than now: another insert may deepen it before ours).
    pub(crate) fn orphan_credits(&self) -> Result<u64> {
        orphan_credits(self.engine.meta())
    }

    /// Puts `st` on the orphan list: into the set the next swap inserts
    /// (`deferred_orphans`) when there is room, else into the tree now.
    pub(crate) fn orphan_add(&self, tx: &Tx<'_>, st: &mut InodeState) -> Result<()> {
        if st.d.flags & INODE_FLAG_ORPHAN != 0 {
            return Ok(());
        }
        // A change of the list even when no buffer changes yet.
        tx.touch();
        // The set's base: two whole inserts (see `deferred_orphans`).
        let base = 2 * self.orphan_credits()?;
        if !self.engine.meta().orphans().add(st.ino, base, tx.log_limit() / 4, |c| tx.reserve_aside(c)) {
            let mut root = self.engine.meta().orphan_root().lock();
            self.orphan_tree().insert(tx, &mut root, st.ino, &[])?;
            self.engine.meta().orphans().direct.fetch_add(1, Ordering::Relaxed);
        }
        st.d.flags |= INODE_FLAG_ORPHAN;
        Ok(())
    }

    /// Takes `st` off the orphan list: out of the deferred set if its
    /// insert is still waiting there (no tree work), else out of the tree.
    pub(crate) fn orphan_remove(&self, tx: &Tx<'_>, st: &mut InodeState) -> Result<()> {
        if st.d.flags & INODE_FLAG_ORPHAN == 0 {
            return Ok(());
        }
        tx.touch();
        if let Some(credits) = self.engine.meta().orphans().cancel(st.ino) {
            tx.release_aside(credits);
        } else {
            let mut root = self.engine.meta().orphan_root().lock();
            self.orphan_tree().remove(tx, &mut root, st.ino)?;
        }
        st.d.flags &= !INODE_FLAG_ORPHAN;
        Ok(())
    }

    /// Whether freeing `st` fits in one small transaction: its extents live
    /// in the inode, or it is a directory (empty when it is freed).
    fn frees_at_once(st: &InodeState) -> bool {
        !matches!(st.d.data, DataArea::Tree(_)) || st.d.is_dir()
    }

    /// Credits of freeing `st` at once ([`InodeStore::frees_at_once`]).
    pub(crate) fn free_now_credits(&self, st: &InodeState) -> Result<u64> {
        let blocks = match &st.d.data {
            DataArea::Extents(list) => list.len() as u64 * credits::FREE,
            DataArea::Tree(root) if st.d.is_dir() => {
                let kind = cairn_format::btree::KIND_DIRENTS;
                crate::btree::levels(self.engine.meta(), *root, kind, st.ino)? * credits::FREE
            }
            DataArea::Tree(_) => credits::FREE,
            DataArea::Inline(_) => 0,
        };
        let xattr = crate::xattr::release_credits(self.engine.meta(), st)?;
        let orphan = if st.d.flags & INODE_FLAG_ORPHAN != 0 { credits::tree_remove(self.orphan_levels()?) } else { 0 };
        Ok(blocks + xattr + orphan + credits::ALLOC + credits::INODE)
    }

    /// Credits of dropping a link of `st` ([`InodeStore::drop_link`]).
    pub(crate) fn drop_link_credits(&self, st: &InodeState) -> Result<u64> {
        let free = if Self::frees_at_once(st) { self.free_now_credits(st)? } else { 0 };
        Ok(free.max(self.orphan_credits()?) + credits::INODE)
    }

    /// Frees a small inode with no links: blocks, xattrs, orphan entry, number.
    fn free_now(&self, tx: &Tx<'_>, st: &mut InodeState) -> Result<()> {
        if st.d.file_type() != S_IFDIR {
            file::free_range(tx, st, 0, u64::MAX)?;
            if let DataArea::Tree(root) = st.d.data {
                // An extent tree left with no extents (a damaged map).
                Tree::new(self.engine.meta(), cairn_format::btree::KIND_EXTENTS, st.ino, 0).destroy(tx, root)?;
            }
        } else if let DataArea::Tree(root) = st.d.data {
            let mut t = Tree::new(self.engine.meta(), cairn_format::btree::KIND_DIRENTS, st.ino, 0);
            t.destroy(tx, root)?;
        }
        xattr_release(tx, st)?;
        self.orphan_remove(tx, st)?;
        self.engine.meta().alloc().free_inode(tx, st.ino, st.d.is_dir())?;
        st.d.nlink = 0;
        st.d.size = 0;
        st.d.blocks = 0;
        st.d.data = if st.d.is_dir() { DataArea::Tree(0) } else { DataArea::Extents(Vec::new()) };
        self.store(tx, st)?;
        st.freed = true;
        self.icache.remove(st.ino);
        Ok(())
    }

    /// Frees `st` (no links) now if it is small and unreferenced, else puts
    /// it on the orphan list: freed at the last `forget`, or in steps by
    /// the reaper once the caller's handle is closed (see `reaper`).
    pub(crate) fn release_unlinked(&self, tx: &Tx<'_>, st: &mut InodeState) -> Result<()> {
        let lookups = self.icache.lookups(st.ino);
        if lookups == 0 && Self::frees_at_once(st) {
            return self.free_now(tx, st);
        }
        self.orphan_add(tx, st)?;
        if lookups == 0 {
            self.engine.reaper().push(st.ino, st.d.blocks);
        } else if !st.held_unlinked && !st.d.is_dir() {
            st.held_unlinked = true;
            self.engine.reaper().hold_unlinked();
        }
        self.store(tx, st)
    }

    /// Drops one link of `st` (all of a directory's); releases it at zero.
    pub(crate) fn drop_link(&self, tx: &Tx<'_>, st: &mut InodeState, all: bool) -> Result<()> {
        let nlink = if all { 0 } else { st.d.nlink.saturating_sub(1) };
        if nlink == 0 && !(self.icache.lookups(st.ino) == 0 && Self::frees_at_once(st)) {
            // The orphan-list insert may allocate, and fail on a full disk:
            // before the inode changes (`release_unlinked` then finds it
            // listed).
            self.orphan_add(tx, st)?;
        }
        st.d.nlink = nlink;
        st.d.ctime = now();
        if st.d.nlink == 0 {
            return self.release_unlinked(tx, st);
        }
        self.store(tx, st)
    }

    /// Frees an unlinked, unreferenced inode in steps: each step unmaps and
    /// frees the last extents that its handle's credits cover; the last one
    /// frees the rest (xattrs, orphan entry, inode number).
    pub(crate) fn finish_delete(&self, ino: u64) -> Result<()> {
        let _io = self.io_locks.exclusive(ino);
        loop {
            let (more, freed) = self.engine.change(credits::DEFAULT, |tx| {
                let r = self.icache.get(self.engine.meta(), ino)?;
                let mut st = r.write();
                if st.freed || st.d.nlink > 0 || self.icache.lookups(ino) > 0 {
                    return Ok((false, st.d.blocks));
                }
                if !self.engine.meta().alloc().inode_in_use(self.engine.meta().bufs(), ino)? {
                    // Freed already (queued twice: a reference taken and
                    // dropped again after the first queueing), and read
                    // back from its table: freeing it again would corrupt
                    // the counts.
                    st.freed = true;
                    return Ok((false, 0));
                }
                let before = st.d.blocks;
                if !Self::frees_at_once(&st) {
                    file::free_range_step(tx, &mut st, 0, u64::MAX, 0)?;
                    if tx.changed() {
                        self.engine.txm().stats.steps.fetch_add(1, Ordering::Relaxed);
                        self.engine.reaper().stats.steps.fetch_add(1, Ordering::Relaxed);
                        self.store(tx, &st)?;
                        return Ok((true, before.saturating_sub(st.d.blocks)));
                    }
                }
                tx.require(self.free_now_credits(&st)?)?;
                self.free_now(tx, &mut st)?;
                Ok((false, before))
            })?;
            self.engine.reaper().freed(freed);
            if !more {
                return Ok(());
            }
        }
    }

    /// Frees the blocks of `ino` past its size, in steps, the inode on the
    /// orphan list meanwhile (a truncate; see the module essay). The caller
    /// holds the inode's I/O lock and has set the new size.
    /// `on_freed` hears how many blocks each step freed.
    pub(crate) fn finish_truncate(&self, ino: u64, on_freed: &mut dyn FnMut(u64)) -> Result<()> {
        loop {
            let (more, freed) = self.engine.change(credits::DEFAULT, |tx| {
                let r = self.iget(ino)?;
                let mut st = r.write();
                let from = st.d.size.div_ceil(u64::from(self.engine.meta().geo().block_size));
                let before = st.d.blocks;
                let more = file::free_range_step(tx, &mut st, from, u64::MAX, self.orphan_credits()?)?;
                if tx.changed() {
                    self.engine.txm().stats.steps.fetch_add(1, Ordering::Relaxed);
                    if more {
                        self.orphan_add(tx, &mut st)?;
                    }
                    self.store(tx, &st)?;
                    return Ok((true, before.saturating_sub(st.d.blocks)));
                }
                if st.d.flags & INODE_FLAG_ORPHAN != 0 && st.d.nlink > 0 {
                    tx.require(self.orphan_credits()? + credits::INODE)?;
                    self.orphan_remove(tx, &mut st)?;
                }
                self.store(tx, &st)?;
                Ok((false, 0))
            })?;
            on_freed(freed);
            if !more {
                return Ok(());
            }
        }
    }

    /// Whether `ino` has a truncate in progress: linked, yet on the orphan
    /// list (see the module essay).
    fn truncate_pending(&self, ino: u64) -> Result<bool> {
        let r = self.iget(ino)?;
        let st = r.read();
        Ok(st.d.nlink > 0 && st.d.flags & INODE_FLAG_ORPHAN != 0 && !st.freed)
    }

    /// [`InodeStore::finish_truncate`] if a truncate of `ino` is still in progress
    /// (the reaper's deferred truncates; a write may have finished it
    /// first). The caller holds the inode's I/O lock.
    pub(crate) fn finish_truncate_if_pending(&self, ino: u64, on_freed: &mut dyn FnMut(u64)) -> Result<()> {
        match self.truncate_pending(ino) {
            Ok(true) => self.finish_truncate(ino, on_freed),
            Ok(false) | Err(FsError::Errno(libc::ENOENT)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Before a write, fallocate or size change of `ino` (under its I/O
    /// lock): finishes a deferred truncate still queued on the reaper. Its
    /// blocks past the size are still mapped; a write past the end, or a
    /// file grown over them, must not find their old bytes.
    pub(crate) fn settle_truncate(&self, ino: u64) -> Result<()> {
        if self.truncate_pending(ino)? {
            self.finish_truncate(ino, &mut |_| {})?;
            self.engine.reaper().stats.truncates_settled.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Has every commit's swap insert the deferred orphans
    /// ([`flush_deferred_orphans`]).
    pub(crate) fn install_orphan_flush(&self) {
        self.engine.txm().set_swap_hook(flush_deferred_orphans);
    }

    /// Finishes what the orphan list holds (mount and unmount): frees
    /// unlinked inodes nobody holds, completes interrupted truncates. At
    /// unmount the kernel's references are gone whatever their count says.
    pub(crate) fn process_orphans(&self, unmounting: bool) -> Result<()> {
        let root = *self.engine.meta().orphan_root().lock();
        // Those whose insert still waits for a swap too (an unmount).
        let mut inos = self.engine.meta().orphans().inos();
        self.orphan_tree().scan(root, 0, &mut |k, _| {
            inos.push(k);
            true
        })?;
        for ino in inos {
            let valid = self.engine.meta().geo().valid_ino(ino)
                && self.engine.meta().alloc().inode_in_use(self.engine.meta().bufs(), ino)?;
            if !valid {
                // A stale entry (a damaged list): drop it rather than free a
                // free inode twice.
                tracing::warn!(ino, "orphan list names an inode that is not in use; dropping the entry");
                self.engine.change(credits::DEFAULT, |tx| {
                    tx.require(self.orphan_credits()?)?;
                    let mut root = self.engine.meta().orphan_root().lock();
                    self.orphan_tree().remove(tx, &mut root, ino)?;
                    Ok(())
                })?;
                continue;
            }
            let (nlink, lookups, freed) = {
                let r = self.icache.get(self.engine.meta(), ino)?;
                let st = r.write();
                if unmounting {
                    self.icache.clear_lookups(ino);
                }
                (st.d.nlink, self.icache.lookups(ino), st.freed)
            };
            if freed || lookups > 0 {
                continue;
            }
            if nlink == 0 {
                self.finish_delete(ino)?;
            } else {
                let _io = self.io_locks.exclusive(ino);
                self.finish_truncate(ino, &mut |_| {})?;
            }
        }
        Ok(())
    }

    pub(crate) fn new_inode(
        &self,
        tx: &Tx<'_>,
        ctx: &Ctx,
        parent: &InodeState,
        mode: u32,
        rdev: u64,
    ) -> Result<(u64, DiskInode)> {
        let is_dir = mode & S_IFMT == S_IFDIR;
        let ino = self.engine.meta().alloc().alloc_inode(tx, is_dir)?;
        let t = now();
        let mut mode = mode;
        let gid = if parent.d.mode & libc::S_ISGID != 0 {
            if is_dir {
                mode |= libc::S_ISGID;
            }
            parent.d.gid
        } else {
            ctx.gid
        };
        let d = DiskInode {
            mode,
            uid: ctx.uid,
            gid,
            nlink: if is_dir { 2 } else { 1 },
            generation: self.generation.fetch_add(1, Ordering::Relaxed),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            rdev,
            parent: if is_dir { parent.ino } else { 0 },
            attr_flags: crate::inode_flags::inherited(parent.d.attr_flags, mode),
            data: if is_dir { DataArea::Tree(0) } else { DataArea::Extents(Vec::new()) },
            ..Default::default()
        };
        Ok((ino, d))
    }

    /// The inode `ino` itself, as a LOOKUP of `.` on it (any type) finds
    /// it, taking one lookup reference: ESTALE unless it is a live, linked
    /// inode (see "By number" above).
    pub(crate) fn lookup_self(&self, ino: u64) -> Result<Attr> {
        let stale = || FsError::Errno(libc::ESTALE);
        self.engine.read_op(|| {
            if !self.engine.meta().geo().valid_ino(ino)
                || !self.engine.meta().alloc().inode_in_use(self.engine.meta().bufs(), ino)?
            {
                return Err(stale());
            }
            let r = match self.iget(ino) {
                Err(FsError::Errno(libc::ENOENT)) => return Err(stale()),
                r => r?,
            };
            let g = r.read();
            if g.freed || g.d.nlink == 0 {
                return Err(stale());
            }
            self.icache.add_lookups(ino, 1);
            Ok(self.attr(&g))
        })
    }

    /// Whether inode number `ino` is in use: in range, and set in its
    /// group's inode bitmap (the reserved numbers below `FIRST_INO` are set
    /// there too). No inode-table slot is read, so a free number never
    /// looks like corruption (`cairn inspect IMAGE stat '#N'`).
    pub fn inode_in_use(&self, ino: u64) -> Result<bool> {
        self.engine.read_op(|| {
            Ok(self.engine.meta().geo().valid_ino(ino)
                && self.engine.meta().alloc().inode_in_use(self.engine.meta().bufs(), ino)?)
        })
    }

    /// The kernel's lookup references on `ino` now (0: the kernel holds
    /// it no more, nor any page of it).
    pub fn kernel_lookups(&self, ino: u64) -> u64 {
        self.icache.lookups(ino)
    }

    /// Every inode the kernel holds now (has looked up and not forgotten):
    /// the ones whose cached attributes or pages it may use without asking.
    pub fn kernel_held_inodes(&self) -> Vec<u64> {
        self.icache.kernel_held()
    }

    /// Drops `n` lookup references; an unlinked inode is freed at zero.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut let_go = false;
        let (free, unused) = match self.icache.forget_uncached(ino, n) {
            // Not in core: it has links (see `inode`), nothing to free.
            Some(left) => (false, left == 0),
            None => {
                let Ok(r) = self.iget(ino) else {
                    // Freed (or unreadable): nothing to free, but the
                    // references go, or a new file given the number would
                    // inherit them.
                    self.icache.sub_lookups(ino, n);
                    return;
                };
                let mut g = r.write();
                let left = self.icache.sub_lookups(ino, n);
                if left == 0 {
                    let_go = std::mem::take(&mut g.held_unlinked);
                }
                (left == 0 && g.d.nlink == 0 && !g.freed, left == 0)
            }
        };
        // Told once the file is queued or freed (an allocation may wait).
        let _told = LetGo(let_go.then_some(self.engine.reaper()));
        if unused {
            // The kernel holds the file no more: its stream has ended.
            self.engine.meta().alloc().discard_prealloc(self.engine.meta().bufs(), ino);
        }
        if free && !self.engine.is_read_only() && self.engine.reaper().deferred {
            // On the orphan list since its unlink: the reaper frees it, and
            // FORGET needs no transaction of its own (Tux3's frontend only
            // queues; see `reaper`).
            let queued = self.iget(ino).ok().is_some_and(|r| {
                let g = r.read();
                let queue = g.d.nlink == 0 && g.d.flags & INODE_FLAG_ORPHAN != 0 && !g.freed;
                if queue {
                    self.engine.reaper().push(ino, g.d.blocks);
                }
                queue
            });
            if queued {
                self.engine.reaper().kick();
                self.icache.evict_if_unused(ino);
                return;
            }
        }
        if free && !self.engine.is_read_only() {
            let res = self.engine.change(credits::DEFAULT, |tx| {
                let r = self.icache.get(self.engine.meta(), ino)?;
                let mut g = r.write();
                tx.require(self.drop_link_credits(&g)?)?;
                if self.icache.lookups(ino) == 0 && g.d.nlink == 0 && !g.freed {
                    self.release_unlinked(tx, &mut g)?;
                }
                Ok(())
            });
            match res {
                Ok(()) => self.after_unlink(),
                Err(e) => {
                    tracing::warn!(ino, error = %e, "freeing an unlinked inode failed; it stays on the orphan list")
                }
            }
        }
        self.icache.evict_if_unused(ino);
    }
}

/// Tells the reaper, when dropped, that the FORGET of a file unlinked while
/// the kernel held it has been dealt with (on every way out of `forget`).
struct LetGo<'a>(Option<&'a crate::reaper::Reaper>);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.0 {
            r.let_go();
        }
    }
}

fn xattr_release(tx: &Tx<'_>, st: &mut InodeState) -> Result<()> {
    crate::xattr::release(tx, st)
}

/// The reaper's work (see `reaper`).
impl InodeStore {
    /// Frees every queued inode, in steps (the reaper thread, unmount, and
    /// callers under `-o sync_delete`). Call with no handle held. A failure
    /// leaves the inode on the orphan list (the next mount finishes it).
    pub(crate) fn reap_queued(&self) {
        crate::reaper::reaping(|| self.reap_queued_here());
    }

    fn reap_queued_here(&self) {
        while let Some(job) = self.engine.reaper().take() {
            match job {
                crate::reaper::Job::Delete(ino) => {
                    if let Err(e) = self.finish_delete(ino) {
                        tracing::warn!(ino, error = %e, "freeing a deleted file failed; it stays on the orphan list");
                    }
                }
                crate::reaper::Job::Truncate { ino, blocks } => {
                    let mut freed = 0;
                    let res = {
                        let _io = self.io_locks.exclusive(ino);
                        self.finish_truncate_if_pending(ino, &mut |n| {
                            freed += n;
                            self.engine.reaper().freed(n);
                        })
                    };
                    // The estimate's rest: blocks a write settled first,
                    // holes, or a delete that took the file over.
                    self.engine.reaper().freed(blocks.saturating_sub(freed));
                    if let Err(e) = res {
                        tracing::warn!(ino, error = %e, "a deferred truncate failed; the file stays on the orphan list");
                    }
                }
            }
            self.engine.reaper().finished();
        }
    }

    /// After an operation that may have queued inodes: free them now
    /// (`sync_delete`) or wake the reaper.
    pub(crate) fn after_unlink(&self) {
        if self.engine.reaper().deferred {
            self.engine.reaper().kick();
        } else {
            self.reap_queued();
        }
    }
}

/// Credits of adding to (or removing from) the orphan list (one level
/// more than now: another insert may deepen it before ours).
fn orphan_credits(meta: &Meta) -> Result<u64> {
    let root = *meta.orphan_root().lock();
    Ok(credits::tree_insert(crate::btree::levels(meta, root, KIND_ORPHANS, 0)? + 1))
}

/// The swap hook (`tx::manager`): inserts the deferred orphans into the
/// tree in the checkpoint the swap closes, and gives back the credits set
/// aside for them (see `deferred_orphans`). On a failure, what was not
/// inserted waits for the next swap.
fn flush_deferred_orphans(tx: &Tx<'_>) -> Result<()> {
    let (inos, credits) = tx.meta().orphans().take();
    if inos.is_empty() {
        return Ok(());
    }
    let mut tree = Tree::new(tx.meta(), KIND_ORPHANS, 0, 0);
    let mut root = tx.meta().orphan_root().lock();
    for (i, &ino) in inos.iter().enumerate() {
        if let Err(e) = tree.insert(tx, &mut root, ino, &[]) {
            // The rest waits for the next swap, with all the credits.
            tx.meta().orphans().restore(&inos[i..], credits);
            return Err(e);
        }
    }
    tx.meta().orphans().flushed.fetch_add(inos.len() as u64, Ordering::Relaxed);
    if tx.used() > credits {
        // The set's credits did not cover its inserts: an accounting bug.
        tx.meta().orphans().overruns.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(used = tx.used(), credits, "the deferred orphan inserts dirtied more buffers than set aside");
    }
    tx.release_aside(credits);
    Ok(())
}
