//! [`Fs`]: the POSIX-shaped facade of the engine.
//!
//! `Fs` owns the pieces and routes each request: reads go straight to the
//! objects (`dir`, `file`, `xattr`); changes run inside a transaction
//! handle through the [`Engine`] (`engine`: metadata, transactions, mount
//! state, the backend and reaper threads; see `journal` for handles,
//! credits, commit and the error latch); inodes through the
//! [`InodeStore`] (`inode_store`: the inode cache, loading and storing,
//! new inodes, the orphan list, deferred and stepwise frees, the per-inode
//! I/O locks); names through the [`Namespace`] (`namespace`: the dentry
//! cache, create, link, unlink, rename); file data through [`FileIo`]
//! (`file_io`: reads, writes, fallocate, setattr, chattr, the overwrite fast
//! path and its dirty times, fsync). Each owner holds the engine (and the
//! inode store) by `Arc`; `Fs` keeps what mounting and unmounting need and
//! routes the public calls (docs/design.md, "Owners").
//!
//! ## Locking order
//! rename mutex (moves between directories) → inode I/O lock (one per inode,
//! striped; held across the steps of a long operation) → commit mutex → transaction gate → inode locks (ascending
//! inode number) → orphan-list mutex → group mutexes → buffer-cache shard →
//! buffer bytes. Inode-cache shard → lookup-count shard, and dentry-cache
//! shards: taken under inode locks, leaves otherwise (reclaim only tries an
//! inode's lock; see `inode`, `dcache`, `lru`).

mod discard;
#[cfg(feature = "testing")]
mod faults;
mod online_resize;
mod ro_recovery;
mod shutdown;

use crate::alloc::{AllocOptions, Allocator};
use crate::buffer::BufferCache;
use crate::dcache::DentryCache;
use crate::dev::BlockDevice;
use crate::engine::Engine;
use crate::error::{FsError, Result};
use crate::file_io::FileIo;
use crate::inode::InodeCache;
use crate::inode_store::InodeStore;
use crate::journal::{credits, ErrorPolicy, Journal, Latch};
use crate::meta::{Meta, MetaOptions};
pub use crate::mount_options::MountOptions;
use crate::namespace::Namespace;
use crate::overwrite_state::Overwrite;
use crate::tx::TxManager;
use crate::types::*;
use crate::{acl, dir, file, xattr};
use cairn_format::dirent::DIRENT_MIN_LOW;
use cairn_format::inode::*;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{STATE_CLEAN, STATE_ERRORS};
use cairn_format::{FormatError, NAME_MAX, ROOT_INO, SYMLINK_MAX};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A mounted file system.
pub struct Fs {
    /// Metadata, transactions, mount state, backend and reaper.
    engine: Arc<Engine>,
    /// The inode cache, I/O locks, orphans and frees.
    inodes: Arc<InodeStore>,
    /// The dentry cache and the directory operations.
    names: Namespace,
    unmounted: AtomicBool,
    /// File data: reads, writes, fallocate, setattr, chattr, the overwrite
    /// fast path and its dirty times, fsync.
    files: FileIo,
    /// Serialises [`Fs::make_writable`].
    remount_lock: Mutex<()>,
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
        if opts.conflict_probe {
            bufs.enable_probe(geo);
        }
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
        let meta_opts = MetaOptions {
            inode_readahead: u64::from(opts.inode_readahead_blks),
            node_readahead: opts.node_readahead,
            mbcache: opts.mbcache,
        };
        let meta = Meta::new(dev, bufs, alloc, &sb, journal.next_seq(), meta_opts);
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
        // A checkpoint's dirty buffers cannot be evicted before its push,
        // and a change after the capture copies them (copy-on-write): an
        // eighth of the cache at most, so a small `cache_mb` bounds the
        // commit's working set too.
        let txm = TxManager::new(
            journal,
            Latch::new(opts.errors, had_errors, home_lock),
            (cache_blocks / 8).max(256) as u64,
            opts.push_patience,
            opts.push_drain,
        );
        let engine = Arc::new(Engine::new(meta, txm, opts.clone()));
        let inodes = Arc::new(InodeStore::new(
            engine.clone(),
            InodeCache::new(opts.lru_caches.then_some(opts.inode_cache_bytes)),
        ));
        let fs = Arc::new(Fs {
            files: FileIo::new(engine.clone(), inodes.clone(), Overwrite::new(opts.overwrite_fastpath)),
            names: Namespace::new(
                engine.clone(),
                inodes.clone(),
                DentryCache::new(opts.lru_caches.then_some(opts.dentry_cache_bytes)),
            ),
            inodes,
            engine,
            unmounted: AtomicBool::new(false),
            remount_lock: Mutex::new(()),
        });
        fs.inodes.install_orphan_flush();
        if !fs.engine.opts().read_only {
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
            let mut sb = self.engine.meta().sb().lock();
            sb.state &= !STATE_CLEAN;
            sb.mount_count = sb.mount_count.wrapping_add(1);
            sb.last_mount_time = now().sec as u64;
        }
        self.engine.log_superblock()?;
        self.inodes.process_orphans(false)?;
        // The not-clean superblock goes home before anything else is logged:
        // a superblock that says clean then means an empty log (the journal
        // open trusts it to skip its scan for damage).
        self.files.commit_and_checkpoint()?;
        let fs = self.clone();
        let (interval, nice) = (self.engine.opts().commit_interval, crate::backend::NICE);
        self.engine.backend().spawn(move || fs.engine.backend().run(interval, nice, &mut || fs.background_commit()))?;
        self.engine.meta().xattrs().cache.start()?;
        if self.engine.reaper().deferred {
            let fs = self.clone();
            self.engine.reaper().spawn(move || fs.engine.reaper().run(&|| fs.inodes.reap_queued()))?;
        }
        Ok(())
    }

    /// One round of the backend thread: a commit, and under `-o discard` a
    /// checkpoint that releases (and discards) the blocks freed so far,
    /// rather than when the log next needs room. False stops the thread
    /// (the error is logged).
    fn background_commit(&self) -> bool {
        if let Err(e) = self.files.commit() {
            tracing::error!(error = %e, "background commit failed; the backend stops");
            return false;
        }
        if self.engine.opts().discard && self.engine.meta().alloc().pending_blocks() > 0 {
            if let Err(e) = self.engine.checkpoint() {
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
        self.engine.backend().stop();
        self.engine.reaper().stop();
        self.engine.meta().xattrs().cache.stop();
        let r = self.unmount_commit();
        self.engine.close();
        r
    }

    /// [`Fs::unmount`] that leaves no trace of this mount in the superblock
    /// (its count and time): mkfs's own mount, which makes `/lost+found`.
    pub(crate) fn unmount_unrecorded(&self) -> Result<()> {
        {
            let mut sb = self.engine.meta().sb().lock();
            sb.mount_count = 0;
            sb.last_mount_time = 0;
        }
        self.unmount()
    }

    fn unmount_commit(&self) -> Result<()> {
        if self.engine.mounted_read_only() || self.engine.txm().latch.check_writable().is_err() {
            return Ok(());
        }
        self.inodes.reap_queued();
        self.inodes.process_orphans(true)?;
        self.engine.meta().alloc().discard_all_preallocs(self.engine.meta().bufs());
        self.engine.meta().sb().lock().state |= STATE_CLEAN;
        self.engine.log_superblock()?;
        // Everything home and the log empty; blocks freed meanwhile are
        // released (and discarded under `-o discard`).
        self.files.commit_and_checkpoint()
    }

    // --------------------------------------------------------------- commit

    /// Whether changes are refused (read-only mount or aborted journal).
    pub fn is_read_only(&self) -> bool {
        self.engine.is_read_only()
    }

    // ---------------------------------------------------------- public API

    /// The namespace: create, link, unlink, rename (see `namespace`).
    pub fn names(&self) -> &Namespace {
        &self.names
    }

    /// File data: read, write, fallocate, setattr, chattr flags, fsync
    /// (see `file_io`).
    pub fn files(&self) -> &FileIo {
        &self.files
    }

    /// The inodes: attributes, the kernel's lookup counts, FORGET (see
    /// `inode_store`).
    pub fn inodes(&self) -> &InodeStore {
        &self.inodes
    }

    /// statfs(2).
    pub fn statfs(&self) -> Result<StatFs> {
        self.engine.statfs()
    }

    /// Looks `name` up in directory `parent`; on success the inode's lookup
    /// count (FUSE nlookup) is incremented.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(FsError::Errno(libc::ENAMETOOLONG));
        }
        if name == b"." {
            // Any inode, not only a directory: file handles (`inode_store`).
            return self.inodes.lookup_self(parent);
        }
        self.engine.read_op(|| {
            let p = self.inodes.iget(parent)?;
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
                    _ => self.names.lookup_name(&pg, name)?.ok_or(FsError::Errno(libc::ENOENT))?,
                }
            };
            let c = self.inodes.iget(target)?;
            // Shared is enough to take a reference (see `inode`).
            let cg = c.read();
            if cg.freed {
                return Err(FsError::Errno(libc::ENOENT));
            }
            self.inodes.cache().add_lookups(target, 1);
            Ok(self.inodes.attr(&cg))
        })
    }

    /// Takes one lookup reference on `ino` (FUSE readdirplus hands the
    /// kernel an entry for each listed name: each counts as a lookup).
    pub fn add_lookup(&self, ino: u64) -> Result<()> {
        self.engine.read_op(|| {
            let r = self.inodes.iget(ino)?;
            let g = r.read();
            if g.freed {
                return Err(FsError::Errno(libc::ENOENT));
            }
            self.inodes.cache().add_lookups(ino, 1);
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
        self.engine.read_op(|| {
            if counts && self.inodes.cache().add_lookups_if_uncached(ino, 1) {
                match self.engine.meta().load_inode(ino) {
                    Ok(d) if d.nlink > 0 => {
                        let taken = add(&self.inodes.disk_attr(ino, &d, d.mtime, d.ctime));
                        if !taken {
                            self.inodes.forget(ino, 1);
                        }
                        return Ok(taken);
                    }
                    // Unlinked since the listing: the in-core path below
                    // decides whether it is still a file.
                    Ok(_) => self.inodes.forget(ino, 1),
                    Err(e) => {
                        self.inodes.forget(ino, 1);
                        return Err(e);
                    }
                }
            }
            let r = self.inodes.iget(ino)?;
            let g = r.read();
            let taken = add(&self.inodes.attr(&g));
            if taken && counts && !g.freed {
                self.inodes.cache().add_lookups(ino, 1);
            }
            Ok(taken)
        })
    }

    /// Target of a symbolic link.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.engine.read_op(|| {
            let r = self.inodes.iget(ino)?;
            let g = r.read();
            if g.d.file_type() != S_IFLNK {
                return Err(FsError::Errno(libc::EINVAL));
            }
            match &g.d.data {
                DataArea::Inline(t) => Ok(t.clone()),
                _ => file::read(self.engine.meta(), &g, 0, g.d.size.min(SYMLINK_MAX as u64) as u32),
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
            let batch = self.engine.read_op(|| {
                let r = self.inodes.iget(ino)?;
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
                dir::list(self.engine.meta(), &g, from, &mut |k, e| {
                    out.push(DirEntry { ino: e.ino, next_offset: k + 1, dtype: e.dtype, name: e.name });
                    out.len() < BATCH
                })?;
                Ok(out)
            })?;
            let full = batch.len() >= BATCH;
            if inodes {
                self.engine.meta().prefetch_inodes(batch.iter().map(|e| e.ino));
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

    /// Value of an extended attribute (ENODATA if absent).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        self.engine.read_op(|| xattr::get(self.engine.meta(), &self.inodes.iget(ino)?.read(), name))
    }

    /// Names of all extended attributes, each followed by a NUL byte.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        self.engine.read_op(|| xattr::list(self.engine.meta(), &self.inodes.iget(ino)?.read()))
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
        self.engine.change(credits::DEFAULT, |tx| {
            let r = self.inodes.iget(ino)?;
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
            self.inodes.store(tx, &g)
        })
    }

    /// Removes an extended attribute (ENODATA if absent).
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.engine.change(credits::DEFAULT, |tx| {
            let r = self.inodes.iget(ino)?;
            let mut g = r.write();
            crate::inode_flags::refuse_if_protected(&g)?;
            xattr::remove(tx, &mut g, name)?;
            g.d.ctime = now();
            self.inodes.store(tx, &g)
        })
    }

    /// Live counters, as (dotted name, value) pairs: `journal.commits`,
    /// `alloc.blocks_allocated`, `cache.hits`, ... Later subsystems add theirs.
    pub fn stats(&self) -> Vec<(String, u64)> {
        use crate::stats::Publish;
        let mut v: Vec<(String, u64)> = Vec::new();
        let mut put = |k: &str, x: u64| v.push((k.to_string(), x));
        self.engine.txm().publish(&mut put);
        self.engine.meta().bufs().publish(&mut put);
        self.inodes.cache().publish(&mut put);
        self.names.dcache().publish(&mut put);
        self.files.overwrite().publish(&mut put);
        self.engine.reaper().publish(&mut put);
        self.engine.meta().orphans().publish(&mut put);
        self.engine.meta().xattrs().cache.publish(&mut put);
        self.engine.meta().alloc().publish(&mut put);
        self.engine.meta().dev().publish(&mut put);
        v
    }

    /// Tests: pauses each commit this long after capturing each buffer, so
    /// that operations overtake the push (see `buffer::cil`).
    #[cfg(feature = "testing")]
    pub fn debug_slow_capture(&self, pause: std::time::Duration) {
        self.engine.meta().bufs().cil.set_capture_pause(pause);
    }

    /// Tests: keeps the reaper thread from freeing what is queued while
    /// `hold` is set (see `reaper`).
    #[cfg(feature = "testing")]
    pub fn debug_hold_reaper(&self, hold: bool) {
        self.engine.reaper().debug_hold(hold);
    }

    /// Checks the engine's in-memory invariants (buffer cache, allocator);
    /// panics with what is wrong. For tests and debugging: it walks every
    /// cached buffer.
    #[cfg(feature = "testing")]
    pub fn debug_check_consistency(&self) {
        self.engine.txm().quiesced(self.engine.meta(), || {
            self.engine.meta().bufs().debug_check_consistency();
            self.engine.meta().alloc().debug_check_consistency();
        });
    }

    /// The error policy in force (`-o errors=`).
    pub fn error_policy(&self) -> ErrorPolicy {
        self.engine.txm().latch.policy()
    }

    /// The first error latched since mount (see `-o errors=`), if any.
    pub fn first_error(&self) -> Option<String> {
        self.engine.txm().latch.first_error()
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        self.engine.meta().xattrs().cache.stop();
        self.engine.reaper().stop();
        if !self.unmounted.load(Ordering::Acquire) && !self.engine.mounted_read_only() {
            tracing::warn!("file system dropped without unmount; the journal holds its last changes");
        }
    }
}
