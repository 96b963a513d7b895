//! [`Fs`]: the POSIX-shaped facade of the engine.
//!
//! `Fs` owns the pieces and routes each request: reads go straight to the
//! objects (`dir`, `file`, `xattr`); changes run inside a transaction
//! handle through [`Fs::change`] (see `journal` for handles, credits, commit
//! and the error latch). Namespace operations live in `namespace`, inode
//! lifecycle (orphans, deferred and stepwise frees) in `lifecycle`, file
//! data changes in `file_ops`, the commit thread in `backend`.
//!
//! ## Locking order
//! rename mutex (moves between directories) → inode I/O lock (one per inode,
//! striped; held across the steps of a long operation) → commit mutex → transaction gate → inode locks (ascending
//! inode number) → orphan-list mutex → group mutexes → buffer-cache shard →
//! buffer bytes. Inode-cache shard → lookup-count shard, and dentry-cache
//! shards: taken under inode locks, leaves otherwise (reclaim only tries an
//! inode's lock; see `inode`, `dcache`, `lru`).

use crate::alloc::{AllocOptions, Allocator};
use crate::backend::Backend;
use crate::buffer::BufferCache;
use crate::dcache::{Cached, DentryCache};
use crate::dev::BlockDevice;
use crate::error::{FsError, Result};
use crate::inode::{InodeCache, InodeGuard, InodeState};
use crate::journal::{credits, ErrorPolicy, Journal, Latch};
use crate::meta::Meta;
pub use crate::mount_options::MountOptions;
use crate::overwrite_state::Overwrite;
use crate::reaper::Reaper;
use crate::tx::{Tx, TxManager};
use crate::types::*;
use crate::{acl, dir, file, xattr};
use cairn_format::dirent::DIRENT_MIN_LOW;
use cairn_format::inode::*;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{STATE_CLEAN, STATE_ERRORS};
use cairn_format::{FormatError, NAME_MAX, ROOT_INO, SYMLINK_MAX};
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// Stripes of the per-inode I/O lock.
const IO_LOCKS: usize = 256;

thread_local! {
    /// I/O locks the calling thread holds (see [`IoGuard`]).
    static IO_LOCKS_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A held I/O lock. The locks are striped (`ino % IO_LOCKS`), so the reaper,
/// which takes the I/O lock of every inode it frees, may need the very
/// stripe a thread holds: a thread holding one must never wait for the
/// reaper ([`Fs::wait_for_reaper`] declines), or both wait for each other.
pub(crate) struct IoGuard<G> {
    _guard: G,
}

impl<G> IoGuard<G> {
    fn new(guard: G) -> IoGuard<G> {
        IO_LOCKS_HELD.with(|n| n.set(n.get() + 1));
        IoGuard { _guard: guard }
    }
}

impl<G> Drop for IoGuard<G> {
    fn drop(&mut self) {
        IO_LOCKS_HELD.with(|n| n.set(n.get() - 1));
    }
}

/// Whether the calling thread holds an I/O lock.
pub(crate) fn holds_io_lock() -> bool {
    IO_LOCKS_HELD.with(|n| n.get() > 0)
}

/// A mounted file system.
pub struct Fs {
    pub(crate) meta: Meta,
    pub(crate) txm: TxManager,
    pub(crate) icache: InodeCache,
    pub(crate) dcache: DentryCache,
    pub(crate) opts: MountOptions,
    /// Changes are refused: `opts.read_only` until [`Fs::make_writable`]
    /// (`ro_recovery`) clears it.
    pub(crate) read_only: AtomicBool,
    unmounted: AtomicBool,
    /// Set when unmount finished: later requests fail with `Shutdown`.
    closed: AtomicBool,
    pub(crate) generation: AtomicU32,
    backend: Backend,
    /// Inodes whose last link and reference are gone and whose blocks are
    /// still to free, in steps, and the thread that frees them (`reaper`).
    pub(crate) reaper: Reaper,
    io_locks: Vec<RwLock<()>>,
    /// The overwrite fast path and its dirty-times list.
    pub(crate) ow: Overwrite,
    /// Serialises renames between directories (see `rename`).
    pub(crate) rename_lock: Mutex<()>,
    /// Serialises [`Fs::make_writable`].
    pub(crate) remount_lock: Mutex<()>,
}

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
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
    /// finishes what the orphan list holds and starts the backend thread.
    pub fn mount(dev: Arc<dyn BlockDevice>, mut opts: MountOptions) -> Result<Arc<Fs>> {
        let sb = crate::dev::read_superblock(dev.as_ref())?;
        let geo = Geometry::new(&sb)?;
        if let Some(bytes) = opts.memory_budget {
            opts.split_budget(bytes, geo.block_size);
        }
        let seed = sb.csum_seed();
        let (journal, _replayed) = Journal::open(dev.clone(), &sb, seed, !opts.read_only)?;
        // The superblock itself may have been replayed.
        let errors_before_replay = sb.state & STATE_ERRORS;
        let mut sb = crate::dev::read_superblock(dev.as_ref())?;
        // STATE_ERRORS is written in place, outside the journal (see
        // `journal::latch`): a replayed superblock image must not clear it.
        sb.state |= errors_before_replay;
        // A replayed grow (`online_resize`) changes the geometry.
        let geo = Geometry::new(&sb)?;
        let cache_blocks = opts.cache_blocks.max(64);
        // Deferred images no cached buffer shares may hold a quarter of the
        // cache's size in memory; those it shares keep their buffers cached.
        let cache_bytes = (cache_blocks * geo.block_size as usize) as u64;
        journal.ail.set_budget(cache_bytes / 4, cache_bytes);
        journal.ail.defer.store(opts.delaylog, Ordering::Relaxed);
        if opts.journal_compress && sb.feature_incompat & cairn_format::superblock::INCOMPAT_JOURNAL_ZSTD != 0 {
            journal.compress_records();
        }
        let home_lock = journal.ail.home_lock.clone();
        let bufs =
            BufferCache::new(dev.clone(), geo.block_size as usize, cache_blocks, journal.ail.clone(), opts.delaylog);
        let alloc_opts = AllocOptions {
            optimize_scan: opts.mb_optimize_scan,
            // A loaded buddy costs about three blocks: a sixteenth of the
            // buffer cache's size in buddies.
            buddy_cap: opts.cache_blocks / 16,
            group_prealloc: opts.mb_group_prealloc,
            discard: opts.discard,
        };
        let zeroed = sb.feature_compat & cairn_format::superblock::COMPAT_ITABLES_ZEROED != 0;
        let alloc = Allocator::load(geo, seed, (sb.gdt_start, sb.gdt_blocks), &bufs, sb.next_ino, zeroed, alloc_opts)?;
        let meta = Meta {
            dev,
            bufs,
            alloc,
            seed,
            hash_seed: sb.hash_seed,
            running_seq: journal.next_seq().into(),
            orphan_root: Mutex::new(sb.orphan_root),
            orphans: crate::deferred_orphans::DeferredOrphans::new(),
            inode_readahead: u64::from(opts.inode_readahead_blks),
            node_readahead: opts.node_readahead,
            sb: Mutex::new(sb.clone()),
            xattrs: crate::mbcache::XattrShare::new(
                opts.mbcache,
                sb.feature_incompat & cairn_format::superblock::INCOMPAT_XATTR_EXTERNAL != 0,
            ),
        };
        let root = meta.load_inode(ROOT_INO)?;
        if !root.is_dir() {
            return Err(FormatError::corrupt("inode", ROOT_INO, "root is not a directory").into());
        }
        if sb.orphan_root != 0 && !geo.valid_data_range(sb.orphan_root, 1) {
            return Err(FormatError::corrupt("superblock", 0, "orphan list root out of range").into());
        }
        let had_errors = sb.state & STATE_ERRORS != 0;
        if had_errors {
            tracing::warn!("the image is marked as having errors; run `cairn fsck` to check and clear it");
        }
        let fs = Arc::new(Fs {
            meta,
            // A checkpoint's dirty buffers cannot be evicted before its push,
            // and a change after the capture copies them (copy-on-write): an
            // eighth of the cache at most, so a small `cache_mb` bounds the
            // commit's working set too.
            txm: TxManager::new(
                journal,
                Latch::new(opts.errors, had_errors, home_lock),
                (cache_blocks / 8).max(256) as u64,
                opts.push_patience,
                opts.push_drain,
            ),
            icache: InodeCache::new(opts.lru_caches.then_some(opts.inode_cache_bytes)),
            dcache: DentryCache::new(opts.lru_caches.then_some(opts.dentry_cache_bytes)),
            opts: opts.clone(),
            read_only: AtomicBool::new(opts.read_only),
            unmounted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            generation: AtomicU32::new(rand::random()),
            backend: Backend::default(),
            reaper: Reaper::new(!opts.sync_delete),
            io_locks: (0..IO_LOCKS).map(|_| RwLock::new(())).collect(),
            ow: Overwrite::new(opts.overwrite_fastpath),
            rename_lock: Mutex::new(()),
            remount_lock: Mutex::new(()),
        });
        fs.install_orphan_flush();
        if !fs.opts.read_only {
            fs.start_writing()?;
        }
        Ok(fs)
    }

    /// What a read-write mount does once the engine is up (and a read-only
    /// one when it becomes writable): records the mount in the superblock
    /// (not clean, one more mount, its time), finishes the orphan list,
    /// commits, and starts the backend, the mbcache's reclaim and the reaper.
    pub(crate) fn start_writing(self: &Arc<Self>) -> Result<()> {
        {
            let mut sb = self.meta.sb.lock();
            sb.state &= !STATE_CLEAN;
            sb.mount_count = sb.mount_count.wrapping_add(1);
            sb.last_mount_time = now().sec as u64;
        }
        self.change(credits::DEFAULT, |tx| self.write_sb_buffer(tx))?;
        self.process_orphans(false)?;
        // The not-clean superblock goes home before anything else is logged:
        // a superblock that says clean then means an empty log (the journal
        // open trusts it to skip its scan for damage).
        self.commit_and_checkpoint()?;
        let fs = self.clone();
        let (interval, nice) = (self.opts.commit_interval, crate::backend::NICE);
        self.backend.spawn(move || fs.backend.run(interval, nice, &mut || fs.background_commit()))?;
        self.meta.xattrs.cache.start()?;
        if self.reaper.deferred {
            let fs = self.clone();
            self.reaper.spawn(move || fs.reaper.run(&|| fs.reap_queued()))?;
        }
        Ok(())
    }

    /// One round of the backend thread: a commit, and under `-o discard` a
    /// checkpoint that releases (and discards) the blocks freed so far,
    /// rather than when the log next needs room. False stops the thread
    /// (the error is logged).
    fn background_commit(&self) -> bool {
        if let Err(e) = self.commit() {
            tracing::error!(error = %e, "background commit failed; the backend stops");
            return false;
        }
        if self.opts.discard && self.meta.alloc.pending_blocks() > 0 {
            if let Err(e) = self.txm.checkpoint(&self.meta) {
                tracing::error!(error = %e, "background checkpoint failed; the backend stops");
                return false;
            }
        }
        true
    }

    /// Commits everything, checkpoints the journal, marks the image clean and
    /// stops the backend thread. Later calls fail with `Shutdown`.
    pub fn unmount(&self) -> Result<()> {
        if self.unmounted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.backend.stop();
        self.reaper.stop();
        self.meta.xattrs.cache.stop();
        let r = self.unmount_commit();
        self.closed.store(true, Ordering::Release);
        r
    }

    fn unmount_commit(&self) -> Result<()> {
        if self.read_only.load(Ordering::Acquire) || self.txm.latch.check_writable().is_err() {
            return Ok(());
        }
        self.reap_queued();
        self.process_orphans(true)?;
        self.meta.alloc.discard_all_preallocs(&self.meta.bufs);
        self.meta.sb.lock().state |= STATE_CLEAN;
        self.change(credits::DEFAULT, |tx| self.write_sb_buffer(tx))?;
        // Everything home and the log empty; blocks freed meanwhile are
        // released (and discarded under `-o discard`).
        self.commit_and_checkpoint()
    }

    // --------------------------------------------------------------- commit

    fn write_sb_buffer(&self, tx: &Tx<'_>) -> Result<()> {
        self.meta.write_sb_buffer(tx, self.txm.latch.flagged())
    }

    /// Makes everything changed before this call durable; concurrent callers
    /// share one commit (see `tx::manager`).
    pub(crate) fn commit(&self) -> Result<()> {
        self.log_dirty_times()?;
        self.txm.commit(&self.meta)
    }

    /// Commits, then writes every deferred image home and empties the log,
    /// so that every block freed so far may be reused (a full file system).
    pub(crate) fn commit_and_checkpoint(&self) -> Result<()> {
        self.commit()?;
        self.txm.checkpoint(&self.meta)
    }

    pub(crate) fn alive(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(FsError::Shutdown);
        }
        self.txm.latch.check_alive()
    }

    pub(crate) fn writable(&self) -> Result<()> {
        self.alive()?;
        if self.read_only.load(Ordering::Acquire) {
            return Err(FsError::Errno(libc::EROFS));
        }
        self.txm.latch.check_writable()
    }

    /// Runs a changing operation in a transaction handle of `credits` log
    /// credits (see `tx::handle`): restarts it with more credits when it
    /// asks for them before changing anything, and retries once, after two
    /// commits, an operation that found the file system full while freed
    /// blocks still waited for the journal (operations leave nothing
    /// half-done when they fail with ENOSPC). Corruption and I/O errors go
    /// to the error latch.
    pub(crate) fn change<T>(&self, credits: u64, f: impl Fn(&Tx<'_>) -> Result<T>) -> Result<T> {
        let mut credits = credits;
        let mut retried_enospc = false;
        loop {
            self.writable()?;
            if self.meta.bufs.dirty_count() > self.txm.limit() / 2 {
                self.backend.kick();
            }
            let tx = self.txm.begin(&self.meta, credits, &|| self.commit())?;
            let r = f(&tx);
            let changed = tx.changed();
            if let Err(e) = &r {
                // Latch while the handle still holds the gate: a commit
                // waiting for it must see the abort and not snapshot half an
                // operation.
                self.txm.latch.note(&self.meta.dev, e, changed);
            }
            drop(tx);
            match r {
                Err(FsError::NeedCredits(n)) if !changed => credits = n,
                Err(FsError::Errno(libc::ENOSPC))
                    if !retried_enospc
                        && (self.meta.alloc.pending_blocks() > 0
                            || self.reaper.backlog_inodes() > 0
                            || self.reaper.held_unlinked() > 0) =>
                {
                    // Blocks wait for the journal, or inodes and blocks for
                    // the reaper (a create after a batch of deletes): let
                    // them go and try once more.
                    retried_enospc = true;
                    if !self.wait_for_reaper()? {
                        self.commit_and_checkpoint()?;
                    }
                }
                Err(e) => return Err(e),
                Ok(v) => return Ok(v),
            }
        }
    }

    /// Runs a reading operation; corruption and I/O errors go to the latch.
    pub(crate) fn read_op<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.alive()?;
        let r = f();
        if let Err(e) = &r {
            self.txm.latch.note(&self.meta.dev, e, false);
        }
        r
    }

    /// The I/O lock of inode `ino`, exclusive (serialises journaled writes,
    /// truncates, fallocate and stepwise frees of one inode across their
    /// handles, and keeps fast-path overwrites out meanwhile).
    pub(crate) fn io_lock(&self, ino: u64) -> IoGuard<RwLockWriteGuard<'_, ()>> {
        IoGuard::new(self.io_locks[(ino as usize) % IO_LOCKS].write())
    }

    /// The I/O lock of inode `ino`, shared (fast-path overwrites).
    pub(crate) fn io_lock_shared(&self, ino: u64) -> IoGuard<RwLockReadGuard<'_, ()>> {
        IoGuard::new(self.io_locks[(ino as usize) % IO_LOCKS].read())
    }

    /// Whether changes are refused (read-only mount or aborted journal).
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire) || self.txm.latch.aborted()
    }

    // ---------------------------------------------------------- public API

    /// Looks `name` up in directory `parent`; on success the inode's lookup
    /// count (FUSE nlookup) is incremented.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(FsError::Errno(libc::ENAMETOOLONG));
        }
        if name == b"." {
            // Any inode, not only a directory: file handles (`lifecycle`).
            return self.lookup_self(parent);
        }
        self.read_op(|| {
            let p = self.iget(parent)?;
            let target = {
                let pg = p.read();
                if !pg.d.is_dir() {
                    return Err(FsError::Errno(libc::ENOTDIR));
                }
                match name {
                    b".." => {
                        if parent == ROOT_INO {
                            ROOT_INO
                        } else {
                            pg.d.parent
                        }
                    }
                    _ => self.lookup_name(&pg, name)?.ok_or(FsError::Errno(libc::ENOENT))?,
                }
            };
            let c = self.iget(target)?;
            // Shared is enough to take a reference (see `inode`).
            let cg = c.read();
            if cg.freed {
                return Err(FsError::Errno(libc::ENOENT));
            }
            self.icache.add_lookups(target, 1);
            Ok(self.attr(&cg))
        })
    }

    /// The inode `name` names in directory `dir` (locked by the caller,
    /// shared or exclusive), through the dentry cache: a miss reads the
    /// directory and caches what it found, or that nothing was.
    pub(crate) fn lookup_name(&self, dir: &InodeState, name: &[u8]) -> Result<Option<u64>> {
        // After an abort the tree may no longer be what the cache saw.
        let cached = if self.txm.latch.aborted() { Cached::Miss } else { self.dcache.lookup(dir, name) };
        match cached {
            Cached::Found(ino, _) => Ok(Some(ino)),
            Cached::Negative => Ok(None),
            Cached::Miss => {
                let found = dir::lookup(&self.meta, dir, name)?.map(|(_, e)| (e.ino, e.dtype));
                if !self.txm.latch.aborted() {
                    self.dcache.insert(dir, name, found);
                }
                Ok(found.map(|(ino, _)| ino))
            }
        }
    }

    /// Takes one lookup reference on `ino` (FUSE readdirplus hands the
    /// kernel an entry for each listed name: each counts as a lookup).
    pub fn add_lookup(&self, ino: u64) -> Result<()> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            if g.freed {
                return Err(FsError::Errno(libc::ENOENT));
            }
            self.icache.add_lookups(ino, 1);
            Ok(())
        })
    }

    /// A READDIRPLUS entry: `ino`'s attributes go to `add`, which says
    /// whether it took the entry; `counts`: a taken entry takes a lookup
    /// reference (the kernel takes one on every entry it was given but `.`
    /// and `..`). Returns what `add` returned.
    ///
    /// An inode that is not in core is not made so: its attributes come from its inode-table buffer, and
    /// its reference is taken first, under its cache shard's lock (see
    /// "Listings" in `inode`). The kernel holds the attributes from here on,
    /// and a walk of a large tree would fill the cache with inodes nobody
    /// asks for again.
    pub fn listing_entry(&self, ino: u64, counts: bool, add: impl FnOnce(&Attr) -> bool) -> Result<bool> {
        self.read_op(|| {
            if counts && self.icache.add_lookups_if_uncached(ino, 1) {
                match self.meta.load_inode(ino) {
                    Ok(d) if d.nlink > 0 => {
                        let taken = add(&self.disk_attr(ino, &d, d.mtime, d.ctime));
                        if !taken {
                            self.forget(ino, 1);
                        }
                        return Ok(taken);
                    }
                    // Unlinked since the listing: the in-core path below
                    // decides whether it is still a file.
                    Ok(_) => self.forget(ino, 1),
                    Err(e) => {
                        self.forget(ino, 1);
                        return Err(e);
                    }
                }
            }
            let r = self.iget(ino)?;
            let g = r.read();
            let taken = add(&self.attr(&g));
            if taken && counts && !g.freed {
                self.icache.add_lookups(ino, 1);
            }
            Ok(taken)
        })
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            Ok(self.attr(&g))
        })
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

    /// The extents of file `ino`, in file order (what FIEMAP and filefrag
    /// report; adjacent ones are not merged).
    pub fn extents(&self, ino: u64) -> Result<Vec<cairn_format::extent::Extent>> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            if g.d.file_type() != S_IFREG {
                return Err(FsError::Errno(libc::EINVAL));
            }
            crate::extent_map::overlapping(&self.meta, &g, 0, u64::MAX)
        })
    }

    /// Reads up to `size` bytes at `off` (short only at end of file).
    pub fn read(&self, ino: u64, off: u64, size: u32) -> Result<Vec<u8>> {
        self.with_regular(ino, |st| file::read(&self.meta, st, off, size))
    }

    /// Reads into `buf` at `off` (clipped at end of file): the bytes read,
    /// every one of them written (see `file::read_into`). For a caller that
    /// has a buffer already, such as a FUSE reply's.
    pub fn read_into(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.with_regular(ino, |st| file::read_into(&self.meta, st, off, buf))
    }

    /// Runs `f` on regular file `ino`, locked shared (EISDIR for a
    /// directory, EINVAL for anything else).
    fn with_regular<T>(&self, ino: u64, f: impl FnOnce(&crate::inode::InodeState) -> Result<T>) -> Result<T> {
        self.read_op(|| {
            let r = self.iget(ino)?;
            let g = r.read();
            match g.d.file_type() {
                S_IFREG => f(&g),
                S_IFDIR => Err(FsError::Errno(libc::EISDIR)),
                _ => Err(FsError::Errno(libc::EINVAL)),
            }
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
        self.readdir_ahead(ino, offset, false, f)
    }

    /// [`Fs::readdir`]; `inodes`: `f` loads each entry's inode (a
    /// READDIRPLUS), so each batch's inode-table blocks are read ahead
    /// first, nearby ones together ([`Meta::prefetch_inodes`]).
    pub fn readdir_ahead(
        &self,
        ino: u64,
        offset: u64,
        inodes: bool,
        f: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        // Entries are gathered in batches under the directory's lock and
        // handed to `f` with no lock held: `f` may look inodes up (FUSE
        // readdirplus takes a lookup reference on each), including this
        // directory and its parent, and must not wait on locks we hold.
        const BATCH: usize = 128;
        let mut next = offset;
        loop {
            let batch = self.read_op(|| {
                let r = self.iget(ino)?;
                let g = r.read();
                if !g.d.is_dir() {
                    return Err(FsError::Errno(libc::ENOTDIR));
                }
                let dt = (libc::S_IFDIR >> 12) as u8;
                let mut out = Vec::new();
                if next == 0 {
                    out.push(DirEntry { ino, next_offset: 1, dtype: dt, name: b".".to_vec() });
                }
                if next <= 1 {
                    let parent = if ino == ROOT_INO { ROOT_INO } else { g.d.parent };
                    out.push(DirEntry { ino: parent, next_offset: 2, dtype: dt, name: b"..".to_vec() });
                }
                let from = if next <= 2 { DIRENT_MIN_LOW } else { next };
                dir::list(&self.meta, &g, from, &mut |k, e| {
                    out.push(DirEntry { ino: e.ino, next_offset: k + 1, dtype: e.dtype, name: e.name });
                    out.len() < BATCH
                })?;
                Ok(out)
            })?;
            let full = batch.len() >= BATCH;
            if inodes {
                self.meta.prefetch_inodes(batch.iter().map(|e| e.ino));
            }
            for e in &batch {
                if !f(e) {
                    return Ok(());
                }
                next = e.next_offset;
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// statfs(2).
    pub fn statfs(&self) -> Result<StatFs> {
        self.alive()?;
        let a = &self.meta.alloc;
        // Blocks of deleted files the reaper has still to free count as free.
        let free = (a.disk_free_blocks.load(Ordering::Relaxed) + self.reaper.backlog_blocks())
            .min(self.meta.geo().total_blocks);
        Ok(StatFs {
            block_size: self.meta.geo().block_size,
            blocks: self.meta.geo().total_blocks,
            blocks_free: free,
            // File data cannot take the metadata reserve, nor what is held
            // for the kernel's write-backs: a program that fallocates what
            // statfs says is available must get it.
            blocks_avail: free.saturating_sub(a.reserve_blocks() + a.held_for_write_back()),
            files: self.meta.geo().total_inodes(),
            files_free: a.free_inodes.load(Ordering::Relaxed),
            name_max: NAME_MAX as u32,
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

    /// Makes the file's data and metadata durable (fsync / fdatasync).
    /// `fdatasync` of a file whose last metadata change is committed already
    /// (say, after fast-path overwrites) only flushes the device: its dirty
    /// times wait for the next commit, as fdatasync(2) allows.
    pub fn fsync(&self, ino: u64, datasync: bool) -> Result<()> {
        if datasync && !self.read_only.load(Ordering::Acquire) {
            self.alive()?;
            self.txm.latch.check_commit()?;
            let stored = self.read_op(|| Ok(self.iget(ino)?.read().stored_seq.load(Ordering::Acquire)))?;
            if stored <= self.txm.log.committed_seq() {
                self.ow.stats.datasync_flush_only.fetch_add(1, Ordering::Relaxed);
                return self.read_op(|| Ok(self.meta.dev.flush()?));
            }
        }
        self.sync_fs()
    }

    /// Commits everything (syncfs / sync).
    pub fn sync_fs(&self) -> Result<()> {
        self.alive()?;
        if self.read_only.load(Ordering::Acquire) {
            return Ok(());
        }
        // After an abort, changes made since the last commit are lost: say so.
        self.txm.latch.check_commit()?;
        self.commit()
    }

    /// Sets an extended attribute (`flags`: `XATTR_CREATE` / `XATTR_REPLACE`).
    /// POSIX ACLs (`system.posix_acl_access` / `_default`) are checked and
    /// kept in step with the mode (see `acl`).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        self.setxattr_by(ino, name, value, flags, &|_| true)
    }

    /// [`Fs::setxattr`] for a caller who may keep a file's sgid bit only if
    /// `may_keep_sgid(gid)` (in the file's group, or CAP_FSETID): setting an
    /// access ACL updates the mode as the kernel's `posix_acl_update_mode`
    /// does, dropping the sgid bit for anyone else.
    pub fn setxattr_by(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        may_keep_sgid: &dyn Fn(u32) -> bool,
    ) -> Result<()> {
        let parsed = if name == acl::ACCESS || name == acl::DEFAULT { Some(acl::Acl::parse(value)?) } else { None };
        self.change(credits::DEFAULT, |tx| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            crate::inode_flags::refuse_if_protected(&g)?;
            match &parsed {
                Some(a) if name == acl::ACCESS => {
                    if g.d.file_type() == S_IFLNK {
                        return Err(FsError::Errno(libc::EOPNOTSUPP));
                    }
                    let mut mode = (g.d.mode & !0o777) | a.mode_bits();
                    if mode & libc::S_ISGID != 0 && !may_keep_sgid(g.d.gid) {
                        mode &= !libc::S_ISGID;
                    }
                    if a.is_mode_equivalent() {
                        // Says no more than the mode: no ACL is kept.
                        match xattr::remove(tx, &mut g, name) {
                            Ok(()) | Err(FsError::Errno(libc::ENODATA)) => {}
                            Err(e) => return Err(e),
                        }
                    } else {
                        xattr::set(tx, &mut g, name, value, flags)?;
                    }
                    // Only once the ACL is stored: a failure (ENOSPC) leaves
                    // the mode as it was.
                    g.d.mode = mode;
                }
                Some(_) if !g.d.is_dir() => return Err(FsError::Errno(libc::EACCES)),
                _ => xattr::set(tx, &mut g, name, value, flags)?,
            }
            g.d.ctime = now();
            self.store(tx, &g)
        })
    }

    /// Removes an extended attribute (ENODATA if absent).
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.change(credits::DEFAULT, |tx| {
            let r = self.iget(ino)?;
            let mut g = r.write();
            crate::inode_flags::refuse_if_protected(&g)?;
            xattr::remove(tx, &mut g, name)?;
            g.d.ctime = now();
            self.store(tx, &g)
        })
    }

    /// Live counters, as (dotted name, value) pairs: `journal.commits`,
    /// `alloc.blocks_allocated`, `cache.hits`, ... Later subsystems add theirs.
    pub fn stats(&self) -> Vec<(String, u64)> {
        use crate::stats::Publish;
        let mut v: Vec<(String, u64)> = Vec::new();
        let mut put = |k: &str, x: u64| v.push((k.to_string(), x));
        self.txm.publish(&mut put);
        self.meta.bufs.publish(&mut put);
        self.icache.publish(&mut put);
        self.dcache.publish(&mut put);
        self.ow.publish(&mut put);
        self.reaper.publish(&mut put);
        self.meta.orphans.publish(&mut put);
        self.meta.xattrs.cache.publish(&mut put);
        self.meta.alloc.publish(&mut put);
        self.meta.dev.publish(&mut put);
        v
    }

    /// Tests: pauses each commit this long after capturing each buffer, so
    /// that operations overtake the push (see `buffer::cil`).
    #[cfg(feature = "testing")]
    pub fn debug_slow_capture(&self, pause: std::time::Duration) {
        self.meta.bufs.cil.set_capture_pause(pause);
    }

    /// Tests: keeps the reaper thread from freeing what is queued while
    /// `hold` is set (see `reaper`).
    #[cfg(feature = "testing")]
    pub fn debug_hold_reaper(&self, hold: bool) {
        self.reaper.debug_hold(hold);
    }

    /// Checks the engine's in-memory invariants (buffer cache, allocator);
    /// panics with what is wrong. For tests and debugging: it walks every
    /// cached buffer.
    #[cfg(feature = "testing")]
    pub fn debug_check_consistency(&self) {
        self.txm.quiesced(|| {
            self.meta.bufs.debug_check_consistency();
            self.meta.alloc.debug_check_consistency();
        });
    }

    /// The error policy in force (`-o errors=`).
    pub fn error_policy(&self) -> ErrorPolicy {
        self.txm.latch.policy()
    }

    /// The first error latched since mount (see `-o errors=`), if any.
    pub fn first_error(&self) -> Option<String> {
        self.txm.latch.first_error()
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        self.meta.xattrs.cache.stop();
        self.reaper.stop();
        if !self.unmounted.load(Ordering::Acquire) && !self.read_only.load(Ordering::Acquire) {
            tracing::warn!("file system dropped without unmount; the journal holds its last changes");
        }
    }
}
