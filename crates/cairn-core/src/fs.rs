//! The POSIX-shaped API of the engine ([`Fs`]) and its commit machinery.
//!
//! ## Operations and transactions
//! Every changing operation runs inside the *transaction gate* (shared) and
//! changes metadata only through the buffer cache, so each operation lands
//! whole in one checkpoint. The backend thread commits every
//! `commit_interval`, when dirty metadata passes a soft limit (a hard limit
//! makes writers commit synchronously, as XFS stalls at its hard CIL limit),
//! and on `fsync`/`syncfs`/unmount; concurrent `fsync`s wait on one commit
//! (group commit). See `journal` for what is durable when.
//!
//! ## Locking order
//! commit mutex → transaction gate → inode locks (ascending inode number) →
//! orphan-list mutex → group mutexes → buffer-cache shard → buffer bytes.

use crate::alloc::Allocator;
use crate::btree::Tree;
use crate::buffer::BufferCache;
use crate::dev::BlockDevice;
use crate::error::{FsError, Result};
use crate::inode::{lock_many, InodeCache, InodeGuard, InodeRef, InodeState};
use crate::journal::Journal;
use crate::meta::Meta;
use crate::types::*;
use crate::{dir, file, xattr};
use cairn_format::btree::KIND_ORPHANS;
use cairn_format::dirent::{dtype_of_mode, DIRENT_MIN_LOW};
use cairn_format::inode::*;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, STATE_CLEAN};
use cairn_format::{FormatError, NAME_MAX, ROOT_INO, SYMLINK_MAX};
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Options for [`Fs::mount`].
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Refuse every change; the journal is not replayed into the image.
    pub read_only: bool,
    /// Commit interval of the backend thread (`-o commit=SECONDS`).
    pub commit_interval: Duration,
    /// Metadata buffer cache size, in blocks.
    pub cache_blocks: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { read_only: false, commit_interval: Duration::from_secs(5), cache_blocks: 65536 }
    }
}

struct Backend {
    kick: Mutex<bool>,
    cv: Condvar,
    stop: AtomicBool,
}

/// A mounted file system.
pub struct Fs {
    pub(crate) meta: Meta,
    journal: Journal,
    icache: InodeCache,
    gate: RwLock<()>,
    commit_lock: Mutex<()>,
    sb: Mutex<Superblock>,
    orphan_root: Mutex<u64>,
    opts: MountOptions,
    shutdown: AtomicBool,
    unmounted: AtomicBool,
    generation: AtomicU32,
    /// Commit snapshots taken, and those whose commit finished.
    snapshots: AtomicU64,
    committed_snapshots: AtomicU64,
    /// Syncs that found their changes already committed by another caller.
    pub(crate) group_joins: AtomicU64,
    backend: Backend,
    backend_thread: Mutex<Option<JoinHandle<()>>>,
    pub(crate) replayed: crate::journal::ReplayReport,
}

pub(crate) fn now() -> Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::Errno(libc::ENAMETOOLONG));
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
        return Err(FsError::Errno(libc::EINVAL));
    }
    Ok(())
}

pub(crate) fn find(gs: &mut [InodeGuard], ino: u64) -> &mut InodeState {
    let i = gs.iter().position(|g| g.ino == ino).expect("inode was locked by the caller");
    &mut gs[i]
}

impl Fs {
    // ---------------------------------------------------------------- mount

    /// Mounts the image on `dev`: verifies the superblock, replays the journal,
    /// processes the orphan list and starts the backend (commit) thread.
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Arc<Fs>> {
        let size = dev.size();
        let mut head = vec![0u8; cairn_format::superblock::SB_SIZE];
        dev.read_at(&mut head, 0).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                FsError::Corrupt(FormatError::BadMagic { what: "superblock", at: 0 })
            } else {
                e.into()
            }
        })?;
        let sb = Superblock::decode(&head, size)?;
        let geo = Geometry::new(&sb)?;
        let seed = cairn_format::checksum::seed_from_uuid(&sb.uuid);
        let (journal, replayed) = Journal::open(dev.clone(), &sb, seed, !opts.read_only)?;
        // The superblock itself may have been replayed.
        dev.read_at(&mut head, 0)?;
        let mut sb = Superblock::decode(&head, size)?;
        let bufs = BufferCache::new(dev.clone(), geo.block_size as usize, opts.cache_blocks.max(1024));
        let alloc = Allocator::load(geo, seed, sb.gdt_start, &bufs, sb.next_ino)?;
        let meta =
            Meta { dev, bufs, alloc, geo, seed, hash_seed: sb.hash_seed, running_seq: journal.next_seq().into() };
        let root = meta.load_inode(ROOT_INO)?;
        if !root.is_dir() {
            return Err(FormatError::corrupt("inode", ROOT_INO, "root is not a directory").into());
        }
        if sb.orphan_root != 0 && !geo.valid_data_range(sb.orphan_root, 1) {
            return Err(FormatError::corrupt("superblock", 0, "orphan list root out of range").into());
        }
        let t = now();
        if !opts.read_only {
            sb.state &= !STATE_CLEAN;
            sb.mount_count = sb.mount_count.wrapping_add(1);
            sb.last_mount_time = t.sec as u64;
        }
        let fs = Arc::new(Fs {
            meta,
            journal,
            icache: InodeCache::default(),
            gate: RwLock::new(()),
            commit_lock: Mutex::new(()),
            orphan_root: Mutex::new(sb.orphan_root),
            sb: Mutex::new(sb),
            opts,
            shutdown: AtomicBool::new(false),
            unmounted: AtomicBool::new(false),
            generation: AtomicU32::new(rand::random()),
            snapshots: AtomicU64::new(0),
            committed_snapshots: AtomicU64::new(0),
            group_joins: AtomicU64::new(0),
            backend: Backend { kick: Mutex::new(false), cv: Condvar::new(), stop: AtomicBool::new(false) },
            backend_thread: Mutex::new(None),
            replayed,
        });
        if !fs.opts.read_only {
            {
                let _g = fs.gate.read();
                fs.process_orphans()?;
                fs.write_sb_buffer()?;
            }
            fs.commit()?;
            let f2 = fs.clone();
            let h = std::thread::Builder::new().name("cairn-backend".into()).spawn(move || f2.backend_loop())?;
            *fs.backend_thread.lock() = Some(h);
        }
        Ok(fs)
    }

    fn backend_loop(&self) {
        loop {
            {
                let mut k = self.backend.kick.lock();
                if !*k && !self.backend.stop.load(Ordering::Acquire) {
                    self.backend.cv.wait_for(&mut k, self.opts.commit_interval);
                }
                *k = false;
            }
            if self.backend.stop.load(Ordering::Acquire) {
                return;
            }
            if let Err(e) = self.commit() {
                tracing::error!(error = %e, "background commit failed; shutting the file system down");
                self.shutdown.store(true, Ordering::Release);
                return;
            }
        }
    }

    fn kick_backend(&self) {
        *self.backend.kick.lock() = true;
        self.backend.cv.notify_one();
    }

    /// Commits everything, checkpoints the journal, marks the image clean and
    /// stops the backend thread. Later calls fail with `Shutdown`.
    pub fn unmount(&self) -> Result<()> {
        if self.unmounted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.backend.stop.store(true, Ordering::Release);
        self.kick_backend();
        if let Some(h) = self.backend_thread.lock().take() {
            let _ = h.join();
        }
        if self.opts.read_only || self.shutdown.load(Ordering::Acquire) {
            return Ok(());
        }
        {
            let _g = self.gate.read();
            self.process_orphans()?;
            self.sb.lock().state |= STATE_CLEAN;
            self.write_sb_buffer()?;
        }
        self.commit()?;
        self.journal.checkpoint_all()?;
        self.shutdown.store(true, Ordering::Release);
        Ok(())
    }

    // --------------------------------------------------------------- commit

    fn write_sb_buffer(&self) -> Result<()> {
        let mut sb = self.sb.lock();
        sb.free_blocks = self.meta.alloc.disk_free_blocks.load(Ordering::Relaxed);
        sb.free_inodes = self.meta.alloc.free_inodes.load(Ordering::Relaxed);
        sb.next_ino = self.meta.alloc.next_ino.load(Ordering::Relaxed);
        sb.orphan_root = *self.orphan_root.lock();
        sb.last_write_time = now().sec as u64;
        let buf = self.meta.bufs.get(0, |_, _| Ok(()))?;
        sb.encode(&mut buf.data.write());
        self.meta.bufs.mark_dirty(&buf);
        Ok(())
    }

    /// Makes everything changed before this call durable. Callers that
    /// arrive while a commit is running wait for the next one, and callers
    /// whose changes a commit started after their arrival already covered
    /// return at once: concurrent `fsync`s share one commit (group commit).
    fn commit(&self) -> Result<()> {
        let arrived = self.snapshots.load(Ordering::Acquire);
        let _c = self.commit_lock.lock();
        if self.committed_snapshots.load(Ordering::Acquire) > arrived {
            self.group_joins.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let images = {
            let _g = self.gate.write();
            if self.meta.bufs.dirty_count() > 0 {
                self.write_sb_buffer()?;
            }
            let imgs = self.meta.bufs.take_dirty();
            if !imgs.is_empty() {
                self.meta.running_seq.fetch_add(1, Ordering::AcqRel);
            }
            self.snapshots.fetch_add(1, Ordering::AcqRel);
            imgs
        };
        let r = self.journal.commit(&images);
        if let Err(e) = &r {
            tracing::error!(error = %e, "commit failed; shutting down");
            self.shutdown.store(true, Ordering::Release);
        }
        r?;
        self.committed_snapshots.fetch_add(1, Ordering::AcqRel);
        self.meta.alloc.release_pending(self.journal.durable_tail_seq());
        Ok(())
    }

    fn alive(&self) -> Result<()> {
        if self.shutdown.load(Ordering::Acquire) {
            return Err(FsError::Shutdown);
        }
        Ok(())
    }

    /// Runs a changing operation inside the transaction gate. An operation
    /// that finds the file system full while freed blocks still wait for the
    /// journal (see `alloc`) is retried once after two commits have made
    /// them reusable; operations leave nothing half-done when they fail
    /// with ENOSPC, so the retry is safe.
    fn change<T>(&self, f: impl Fn() -> Result<T>) -> Result<T> {
        match self.change_once(&f) {
            Err(FsError::Errno(libc::ENOSPC)) if self.meta.alloc.pending_blocks() > 0 => {
                self.commit()?;
                self.commit()?;
                self.change_once(&f)
            }
            r => r,
        }
    }

    fn change_once<T>(&self, f: &impl Fn() -> Result<T>) -> Result<T> {
        self.alive()?;
        if self.opts.read_only {
            return Err(FsError::Errno(libc::EROFS));
        }
        let max = self.journal.max_record_images();
        let dirty = self.meta.bufs.dirty_count();
        if dirty > max * 3 / 4 {
            self.commit()?;
        } else if dirty > max / 2 {
            self.kick_backend();
        }
        let r = {
            let _g = self.gate.read();
            f()
        };
        if let Err(e) = &r {
            self.note_error(e);
        }
        r
    }

    fn note_error(&self, e: &FsError) {
        match e {
            FsError::Corrupt(c) => tracing::error!(error = %c, "corrupt metadata"),
            FsError::Io(io) => {
                tracing::error!(error = %io, "I/O error on the image; shutting down");
                self.shutdown.store(true, Ordering::Release);
            }
            _ => {}
        }
    }

    fn read_op<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.alive()?;
        let r = f();
        if let Err(e) = &r {
            self.note_error(e);
        }
        r
    }

    // --------------------------------------------------------------- inodes

    fn iget(&self, ino: u64) -> Result<InodeRef> {
        let r = self.icache.get(&self.meta, ino)?;
        if r.read().freed {
            return Err(FsError::Errno(libc::ENOENT));
        }
        Ok(r)
    }

    fn attr(&self, st: &InodeState) -> Attr {
        let d = &st.d;
        Attr {
            ino: st.ino,
            generation: d.generation,
            size: d.size,
            blocks: d.blocks * u64::from(self.meta.geo.block_size / 512),
            atime: d.atime,
            mtime: d.mtime,
            ctime: d.ctime,
            crtime: d.crtime,
            mode: d.mode,
            nlink: d.nlink,
            uid: d.uid,
            gid: d.gid,
            rdev: d.rdev,
            blksize: self.meta.geo.block_size,
        }
    }

    fn store(&self, st: &InodeState) -> Result<()> {
        self.meta.store_inode(st.ino, &st.d)
    }

    fn orphan_tree(&self) -> Tree<'_> {
        Tree::new(&self.meta, KIND_ORPHANS, 0, 0)
    }

    fn orphan_add(&self, st: &mut InodeState) -> Result<()> {
        if st.d.flags & INODE_FLAG_ORPHAN != 0 {
            return Ok(());
        }
        let mut root = self.orphan_root.lock();
        self.orphan_tree().insert(&mut root, st.ino, &[])?;
        st.d.flags |= INODE_FLAG_ORPHAN;
        Ok(())
    }

    fn orphan_remove(&self, st: &mut InodeState) -> Result<()> {
        if st.d.flags & INODE_FLAG_ORPHAN == 0 {
            return Ok(());
        }
        let mut root = self.orphan_root.lock();
        self.orphan_tree().remove(&mut root, st.ino)?;
        st.d.flags &= !INODE_FLAG_ORPHAN;
        Ok(())
    }

    /// Frees an inode with no links: its blocks, xattrs and number.
    fn free_inode(&self, st: &mut InodeState) -> Result<()> {
        if st.d.file_type() != S_IFDIR {
            file::free_range(&self.meta, st, 0, u64::MAX)?;
        } else if let DataArea::Tree(root) = st.d.data {
            let goal = 0;
            let mut t = Tree::new(&self.meta, cairn_format::btree::KIND_DIRENTS, st.ino, goal);
            t.destroy(root)?;
        }
        xattr::release(&self.meta, st)?;
        self.orphan_remove(st)?;
        self.meta.alloc.free_inode(&self.meta.bufs, st.ino, st.d.is_dir())?;
        st.d.nlink = 0;
        st.d.size = 0;
        st.d.blocks = 0;
        st.d.data = if st.d.is_dir() { DataArea::Tree(0) } else { DataArea::Extents(Vec::new()) };
        self.store(st)?;
        st.freed = true;
        self.icache.remove(st.ino);
        Ok(())
    }

    /// Frees orphans that nobody holds any more (mount and unmount).
    fn process_orphans(&self) -> Result<()> {
        let root = *self.orphan_root.lock();
        let mut inos = Vec::new();
        self.orphan_tree().scan(root, 0, &mut |k, _| {
            inos.push(k);
            true
        })?;
        for ino in inos {
            if !self.meta.geo.valid_ino(ino) || !self.meta.alloc.inode_in_use(&self.meta.bufs, ino)? {
                // A stale entry (a damaged list): drop it rather than free a
                // free inode twice.
                tracing::warn!(ino, "orphan list names an inode that is not in use; dropping the entry");
                let mut root = self.orphan_root.lock();
                self.orphan_tree().remove(&mut root, ino)?;
                continue;
            }
            let r = self.icache.get(&self.meta, ino)?;
            let mut st = r.write();
            if st.freed {
                continue;
            }
            if st.d.nlink == 0 {
                self.free_inode(&mut st)?;
            } else {
                self.orphan_remove(&mut st)?;
                self.store(&st)?;
            }
        }
        Ok(())
    }

    fn new_inode(&self, ctx: &Ctx, parent: &InodeState, mode: u32, rdev: u64) -> Result<(u64, DiskInode)> {
        let is_dir = mode & S_IFMT == S_IFDIR;
        let ino = self.meta.alloc.alloc_inode(&self.meta.bufs, is_dir)?;
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
            data: if is_dir { DataArea::Tree(0) } else { DataArea::Extents(Vec::new()) },
            ..Default::default()
        };
        Ok((ino, d))
    }

    /// Shared body of mknod/mkdir/symlink.
    fn create(&self, ctx: &Ctx, parent: u64, name: &[u8], mode: u32, rdev: u64, target: Option<&[u8]>) -> Result<Attr> {
        check_name(name)?;
        self.change(|| {
            let p = self.iget(parent)?;
            let mut pg = p.write();
            if !pg.d.is_dir() {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
            if pg.d.nlink == 0 {
                return Err(FsError::Errno(libc::ENOENT));
            }
            if dir::lookup(&self.meta, &pg, name)?.is_some() {
                return Err(FsError::Errno(libc::EEXIST));
            }
            let is_dir = mode & S_IFMT == S_IFDIR;
            if is_dir && pg.d.nlink >= u32::MAX - 1 {
                return Err(FsError::Errno(libc::EMLINK));
            }
            let (ino, d) = self.new_inode(ctx, &pg, mode, rdev)?;
            let r = self.icache.insert(ino, d);
            let mut st = r.write();
            let filled = (|| {
                if let Some(t) = target {
                    if t.len() <= DATA_AREA {
                        st.d.size = t.len() as u64;
                        st.d.data = DataArea::Inline(t.to_vec());
                    } else {
                        file::write(&self.meta, &mut st, 0, t)?;
                    }
                }
                self.store(&st)?;
                dir::add(&self.meta, &mut pg, name, ino, dtype_of_mode(mode))
            })();
            if let Err(e) = filled {
                // Undo: nothing may stay half-created (the caller may retry).
                st.d.nlink = 0;
                if let Err(e2) = self.free_inode(&mut st) {
                    tracing::error!(ino, error = %e2, "could not undo a failed create");
                }
                return Err(e);
            }
            st.lookups += 1;
            let t = now();
            pg.d.mtime = t;
            pg.d.ctime = t;
            if is_dir {
                pg.d.nlink += 1;
            }
            self.store(&pg)?;
            Ok(self.attr(&st))
        })
    }

    // ---------------------------------------------------------- public API

    /// Looks `name` up in directory `parent`; on success the inode's lookup
    /// count (FUSE nlookup) is incremented.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(FsError::Errno(libc::ENAMETOOLONG));
        }
        self.read_op(|| {
            let p = self.iget(parent)?;
            let target = {
                let pg = p.read();
                if !pg.d.is_dir() {
                    return Err(FsError::Errno(libc::ENOTDIR));
                }
                match name {
                    b"." => parent,
                    b".." => {
                        if parent == ROOT_INO {
                            ROOT_INO
                        } else {
                            pg.d.parent
                        }
                    }
                    _ => dir::lookup(&self.meta, &pg, name)?.ok_or(FsError::Errno(libc::ENOENT))?.1.ino,
                }
            };
            let c = self.iget(target)?;
            let mut cg = c.write();
            if cg.freed {
                return Err(FsError::Errno(libc::ENOENT));
            }
            cg.lookups += 1;
            Ok(self.attr(&cg))
        })
    }

    /// Takes one lookup reference on `ino` (FUSE readdirplus hands the
    /// kernel an entry for each listed name: each counts as a lookup).
    pub fn add_lookup(&self, ino: u64) -> Result<()> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            if g.freed {
                return Err(FsError::Errno(libc::ENOENT));
            }
            g.lookups += 1;
            Ok(())
        })
    }

    /// Drops `n` lookup references; an unlinked inode is freed at zero.
    pub fn forget(&self, ino: u64, n: u64) {
        let Ok(r) = self.icache.get(&self.meta, ino) else { return };
        let free = {
            let mut g = r.write();
            g.lookups = g.lookups.saturating_sub(n);
            g.lookups == 0 && g.d.nlink == 0 && !g.freed
        };
        if free && !self.opts.read_only && self.alive().is_ok() {
            let res = self.change(|| {
                let mut g = r.write();
                if g.lookups == 0 && g.d.nlink == 0 && !g.freed {
                    self.free_inode(&mut g)?;
                }
                Ok(())
            });
            if let Err(e) = res {
                tracing::warn!(ino, error = %e, "freeing an unlinked inode failed; it stays on the orphan list");
            }
        }
        drop(r);
        self.icache.evict_if_unused(ino);
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            Ok(self.attr(&g))
        })
    }

    /// Changes attributes (chmod, chown, truncate, utimens).
    pub fn setattr(&self, _ctx: &Ctx, ino: u64, set: &SetAttr) -> Result<Attr> {
        self.change(|| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            let t = now();
            if let Some(size) = set.size {
                match g.d.file_type() {
                    S_IFREG => {}
                    S_IFDIR => return Err(FsError::Errno(libc::EISDIR)),
                    _ => return Err(FsError::Errno(libc::EINVAL)),
                }
                if size != g.d.size {
                    file::set_size(&self.meta, &mut g, size)?;
                }
                g.d.mtime = t;
            }
            if let Some(m) = set.mode {
                g.d.mode = (g.d.mode & S_IFMT) | (m & 0o7777);
            }
            if let Some(u) = set.uid {
                g.d.uid = u;
            }
            if let Some(gid) = set.gid {
                g.d.gid = gid;
            }
            let resolve = |ts: TimeSet| match ts {
                TimeSet::Now => t,
                TimeSet::At(x) => x,
            };
            if let Some(a) = set.atime {
                g.d.atime = resolve(a);
            }
            if let Some(m) = set.mtime {
                g.d.mtime = resolve(m);
            }
            g.d.ctime = set.ctime.unwrap_or(t);
            self.store(&g)?;
            Ok(self.attr(&g))
        })
    }

    /// Creates a regular file, device node, FIFO or socket; `mode` includes
    /// the `S_IF*` type (umask already applied). Increments the lookup count.
    pub fn mknod(&self, ctx: &Ctx, parent: u64, name: &[u8], mode: u32, rdev: u64) -> Result<Attr> {
        let kind = mode & S_IFMT;
        let mode = if kind == 0 { mode | S_IFREG } else { mode };
        if !matches!(mode & S_IFMT, S_IFREG | S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK) {
            return Err(FsError::Errno(libc::EINVAL));
        }
        self.create(ctx, parent, name, mode, rdev, None)
    }

    /// Creates a directory. Increments the lookup count.
    pub fn mkdir(&self, ctx: &Ctx, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        self.create(ctx, parent, name, S_IFDIR | (mode & 0o7777), 0, None)
    }

    /// Creates a symbolic link. Increments the lookup count.
    pub fn symlink(&self, ctx: &Ctx, parent: u64, name: &[u8], target: &[u8]) -> Result<Attr> {
        if target.len() > SYMLINK_MAX {
            return Err(FsError::Errno(libc::ENAMETOOLONG));
        }
        if target.is_empty() {
            return Err(FsError::Errno(libc::ENOENT));
        }
        self.create(ctx, parent, name, S_IFLNK | 0o777, 0, Some(target))
    }

    /// Creates an unnamed regular file (O_TMPFILE): an orphan until linked.
    pub fn tmpfile(&self, ctx: &Ctx, parent: u64, mode: u32) -> Result<Attr> {
        self.change(|| {
            let p = self.iget(parent)?;
            let pg = p.read();
            if !pg.d.is_dir() {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
            let (ino, mut d) = self.new_inode(ctx, &pg, S_IFREG | (mode & 0o7777), 0)?;
            d.nlink = 0;
            let r = self.icache.insert(ino, d);
            let mut st = r.write();
            st.lookups = 1;
            self.orphan_add(&mut st)?;
            self.store(&st)?;
            Ok(self.attr(&st))
        })
    }

    /// Adds a hard link. Increments the lookup count.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr> {
        check_name(newname)?;
        self.change(|| {
            let p = self.iget(newparent)?;
            let c = self.iget(ino)?;
            let mut gs = lock_many(&[&p, &c]);
            {
                let pg = find(&mut gs, newparent);
                if !pg.d.is_dir() {
                    return Err(FsError::Errno(libc::ENOTDIR));
                }
                if pg.d.nlink == 0 {
                    return Err(FsError::Errno(libc::ENOENT));
                }
                if dir::lookup(&self.meta, pg, newname)?.is_some() {
                    return Err(FsError::Errno(libc::EEXIST));
                }
            }
            let (mode, nlink) = {
                let cg = find(&mut gs, ino);
                (cg.d.mode, cg.d.nlink)
            };
            if mode & S_IFMT == S_IFDIR {
                return Err(FsError::Errno(libc::EPERM));
            }
            if nlink >= u32::MAX - 1 {
                return Err(FsError::Errno(libc::EMLINK));
            }
            let t = now();
            {
                let pg = find(&mut gs, newparent);
                dir::add(&self.meta, pg, newname, ino, dtype_of_mode(mode))?;
                pg.d.mtime = t;
                pg.d.ctime = t;
                self.store(pg)?;
            }
            let cg = find(&mut gs, ino);
            cg.d.nlink += 1;
            cg.d.ctime = t;
            if cg.d.nlink == 1 {
                self.orphan_remove(cg)?;
            }
            cg.lookups += 1;
            self.store(cg)?;
            Ok(self.attr(cg))
        })
    }

    /// Looks `name` up in `parent` and locks both, re-checking the entry.
    fn lock_entry(&self, parent: u64, name: &[u8]) -> Result<(Vec<InodeGuard>, u64, u64)> {
        let p = self.iget(parent)?;
        for _ in 0..64 {
            let (key, ino) = {
                let pg = p.read();
                if !pg.d.is_dir() {
                    return Err(FsError::Errno(libc::ENOTDIR));
                }
                let (k, e) = dir::lookup(&self.meta, &pg, name)?.ok_or(FsError::Errno(libc::ENOENT))?;
                (k, e.ino)
            };
            let c = self.iget(ino)?;
            let mut gs = lock_many(&[&p, &c]);
            let again = dir::lookup(&self.meta, find(&mut gs, parent), name)?;
            if again.is_some_and(|(k, e)| k == key && e.ino == ino) {
                return Ok((gs, key, ino));
            }
        }
        Err(FsError::Errno(libc::EAGAIN))
    }

    /// Drops one link of `st`; frees or orphans it at zero.
    fn drop_link(&self, st: &mut InodeState, all: bool) -> Result<()> {
        st.d.nlink = if all { 0 } else { st.d.nlink.saturating_sub(1) };
        st.d.ctime = now();
        if st.d.nlink == 0 {
            if st.lookups > 0 {
                self.orphan_add(st)?;
            } else {
                return self.free_inode(st);
            }
        }
        self.store(st)
    }

    fn remove_entry(&self, parent: u64, name: &[u8], want_dir: bool) -> Result<()> {
        if name.len() > NAME_MAX {
            return Err(FsError::Errno(libc::ENAMETOOLONG));
        }
        if want_dir && name == b"." {
            return Err(FsError::Errno(libc::EINVAL));
        }
        if want_dir && name == b".." {
            return Err(FsError::Errno(libc::ENOTEMPTY));
        }
        self.change(|| {
            let (mut gs, key, ino) = self.lock_entry(parent, name)?;
            if ino == parent {
                return Err(FsError::Errno(libc::EINVAL));
            }
            {
                let cg = find(&mut gs, ino);
                match (want_dir, cg.d.is_dir()) {
                    (false, true) => return Err(FsError::Errno(libc::EISDIR)),
                    (true, false) => return Err(FsError::Errno(libc::ENOTDIR)),
                    (true, true) if cg.d.entries > 0 => return Err(FsError::Errno(libc::ENOTEMPTY)),
                    _ => {}
                }
            }
            let t = now();
            {
                let pg = find(&mut gs, parent);
                dir::remove(&self.meta, pg, key)?;
                pg.d.mtime = t;
                pg.d.ctime = t;
                if want_dir {
                    pg.d.nlink = pg.d.nlink.saturating_sub(1);
                }
                self.store(pg)?;
            }
            self.drop_link(find(&mut gs, ino), want_dir)
        })
    }

    /// Removes a non-directory entry.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.remove_entry(parent, name, false)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.remove_entry(parent, name, true)
    }

    /// Renames, with `RENAME_NOREPLACE` / `RENAME_EXCHANGE` flags.
    pub fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8], flags: u32) -> Result<()> {
        check_name(name)?;
        check_name(newname)?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 || flags == RENAME_NOREPLACE | RENAME_EXCHANGE {
            return Err(FsError::Errno(libc::EINVAL));
        }
        self.change(|| crate::rename::rename(self, parent, name, newparent, newname, flags))
    }

    /// Target of a symbolic link.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            if g.d.file_type() != S_IFLNK {
                return Err(FsError::Errno(libc::EINVAL));
            }
            match &g.d.data {
                DataArea::Inline(t) => Ok(t.clone()),
                _ => file::read(&self.meta, &g, 0, g.d.size.min(SYMLINK_MAX as u64) as u32),
            }
        })
    }

    /// Reads up to `size` bytes at `off` (short only at end of file).
    pub fn read(&self, ino: u64, off: u64, size: u32) -> Result<Vec<u8>> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            match g.d.file_type() {
                S_IFREG => file::read(&self.meta, &g, off, size),
                S_IFDIR => Err(FsError::Errno(libc::EISDIR)),
                _ => Err(FsError::Errno(libc::EINVAL)),
            }
        })
    }

    /// Writes `data` at `off`; returns the bytes written.
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<u32> {
        self.change(|| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            match g.d.file_type() {
                S_IFREG => {}
                S_IFDIR => return Err(FsError::Errno(libc::EISDIR)),
                _ => return Err(FsError::Errno(libc::EINVAL)),
            }
            let n = file::write(&self.meta, &mut g, off, data)?;
            let t = now();
            g.d.mtime = t;
            g.d.ctime = t;
            self.store(&g)?;
            Ok(n)
        })
    }

    /// fallocate(2): `mode` is 0 or a combination of `FALLOC_FL_*`.
    pub fn fallocate(&self, ino: u64, off: u64, len: u64, mode: i32) -> Result<()> {
        self.change(|| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            match g.d.file_type() {
                S_IFREG => {}
                S_IFDIR => return Err(FsError::Errno(libc::EISDIR)),
                _ => return Err(FsError::Errno(libc::ENODEV)),
            }
            file::fallocate(&self.meta, &mut g, off, len, mode)?;
            let t = now();
            if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
                g.d.mtime = t;
            }
            g.d.ctime = t;
            self.store(&g)
        })
    }

    /// lseek(2) for `SEEK_DATA` / `SEEK_HOLE` (other whences are the kernel's).
    pub fn lseek(&self, ino: u64, off: u64, whence: i32) -> Result<u64> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            match whence {
                libc::SEEK_DATA | libc::SEEK_HOLE => file::seek(&self.meta, &g, off, whence),
                libc::SEEK_SET => Ok(off),
                libc::SEEK_END => Ok(g.d.size.saturating_add(off)),
                _ => Err(FsError::Errno(libc::EINVAL)),
            }
        })
    }

    /// Lists directory `ino` from `offset` (0 = start; `.` and `..` come
    /// first), calling `f` per entry until it returns false. Offsets are
    /// stable across concurrent creates and unlinks.
    pub fn readdir(&self, ino: u64, offset: u64, f: &mut dyn FnMut(&DirEntry) -> bool) -> Result<()> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            if !g.d.is_dir() {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
            let dt = (libc::S_IFDIR >> 12) as u8;
            if offset == 0 && !f(&DirEntry { ino, next_offset: 1, dtype: dt, name: b".".to_vec() }) {
                return Ok(());
            }
            if offset <= 1 {
                let parent = if ino == ROOT_INO { ROOT_INO } else { g.d.parent };
                if !f(&DirEntry { ino: parent, next_offset: 2, dtype: dt, name: b"..".to_vec() }) {
                    return Ok(());
                }
            }
            let from = if offset <= 2 { DIRENT_MIN_LOW } else { offset };
            dir::list(&self.meta, &g, from, &mut |k, e| {
                f(&DirEntry { ino: e.ino, next_offset: k + 1, dtype: e.dtype, name: e.name })
            })
        })
    }

    /// Makes the file's data and metadata durable (fsync / fdatasync).
    pub fn fsync(&self, _ino: u64, _datasync: bool) -> Result<()> {
        self.sync_fs()
    }

    /// Commits everything (syncfs / sync).
    pub fn sync_fs(&self) -> Result<()> {
        self.alive()?;
        if self.opts.read_only {
            return Ok(());
        }
        self.commit()
    }

    /// statfs(2).
    pub fn statfs(&self) -> Result<StatFs> {
        self.alive()?;
        let a = &self.meta.alloc;
        let free = a.disk_free_blocks.load(Ordering::Relaxed);
        Ok(StatFs {
            block_size: self.meta.geo.block_size,
            blocks: self.meta.geo.total_blocks,
            blocks_free: free,
            blocks_avail: free,
            files: self.meta.geo.total_inodes(),
            files_free: a.free_inodes.load(Ordering::Relaxed),
            name_max: NAME_MAX as u32,
        })
    }

    /// Sets an extended attribute (`flags`: `XATTR_CREATE` / `XATTR_REPLACE`).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        self.change(|| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            xattr::set(&self.meta, &mut g, name, value, flags)?;
            g.d.ctime = now();
            self.store(&g)
        })
    }

    /// Value of an extended attribute (ENODATA if absent).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        self.read_op(|| xattr::get(&self.meta, &self.iget(ino)?.read(), name))
    }

    /// Names of all extended attributes, each followed by a NUL byte.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        self.read_op(|| xattr::list(&self.meta, &self.iget(ino)?.read()))
    }

    /// Removes an extended attribute (ENODATA if absent).
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.change(|| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            xattr::remove(&self.meta, &mut g, name)?;
            g.d.ctime = now();
            self.store(&g)
        })
    }

    /// Live counters, as (dotted name, value) pairs: `journal.commits`,
    /// `alloc.blocks_allocated`, `cache.hits`, ... Later subsystems add theirs.
    pub fn stats(&self) -> Vec<(String, u64)> {
        crate::stats::collect(self)
    }

    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    pub(crate) fn icache(&self) -> &InodeCache {
        &self.icache
    }

    pub(crate) fn iget_pub(&self, ino: u64) -> Result<InodeRef> {
        self.iget(ino)
    }

    pub(crate) fn store_pub(&self, st: &InodeState) -> Result<()> {
        self.store(st)
    }

    pub(crate) fn drop_link_pub(&self, st: &mut InodeState, all: bool) -> Result<()> {
        self.drop_link(st, all)
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        if !self.unmounted.load(Ordering::Acquire) && !self.opts.read_only {
            tracing::warn!("file system dropped without unmount; the journal holds its last changes");
        }
    }
}
