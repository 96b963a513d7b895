//! The FUSE request handlers: one `fuser::Filesystem` method per opcode, each
//! a thin call into [`cairn_core::Fs`].
//!
//! ## What the kernel is told
//! * Entry and attribute replies carry a long TTL (cairn is the only writer of
//!   its image, so the kernel's dentry and attribute caches stay right), and
//!   failed lookups are answered with a *negative entry* (inode 0 with the
//!   negative TTL) so that the kernel caches misses too.
//! * Every entry reply (lookup, create, mknod, mkdir, symlink, link, tmpfile,
//!   and each readdirplus entry other than `.` and `..`) counts as one lookup
//!   reference in the engine; `forget` returns them. An unlinked inode lives
//!   until its last reference is forgotten (the engine keeps it on the orphan
//!   list meanwhile).
//! * File handles are stateless (`fh = 0`): the engine needs nothing per
//!   open, and directory offsets are B+tree keys that stay valid while
//!   entries come and go.
//!
//! ## Locking
//! None here: the adapter holds no state besides the engine handle, its
//! settings and the request counters ([`crate::metrics`], atomics only).
//! Requests arrive on several fuser threads at once and go straight into the
//! engine, which has its own fine-grained locks. Every handler starts a
//! [`crate::metrics::Timer`] first and runs its engine call inside it.
//!
//! ## Durability
//! `fsync`, `fsyncdir` and `syncfs` (FUSE_SYNCFS: `sync(1)`, `syncfs(2)`) commit
//! the journal before replying. Everything else is durable at the next commit
//! (timer, size limit) or at unmount: `destroy_request` on FUSE_DESTROY
//! (fuseblk: before `umount(2)` returns), else `destroy` when the session
//! ends.

use crate::arming::Asked;
use crate::coherence::DirectWriteCoherence;
use crate::convert::{errno, file_attr, from_system_time, kind_of_dtype, negative_attr};
use crate::metrics::{Metrics, Op, Timer};
use crate::privs::{self, KernelNotifier, LazyCaller};
use crate::shutdown;
use crate::space::SpaceGuard;
use cairn_core::{Ctx, Fs, SetAttr, TimeSet};
use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Cache lifetimes the kernel is given.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// How long the kernel may trust a name → inode mapping.
    pub entry: Duration,
    /// How long the kernel may trust attributes.
    pub attr: Duration,
    /// How long the kernel may trust that a name does not exist (0 = never).
    pub negative: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { entry: Duration::from_secs(60), attr: Duration::from_secs(60), negative: Duration::from_secs(60) }
    }
}

/// Settings of the adapter (from `-o` options).
#[derive(Debug, Clone, Copy)]
pub struct AdapterOptions {
    pub timeouts: Timeouts,
    /// Ask for the kernel's writeback cache (buffered writes, kernel-owned
    /// size and mtime until flushed): `-o writeback_cache=0|1`, default 1.
    pub writeback_cache: bool,
    /// Largest write request, bytes.
    pub max_write: u32,
    /// POSIX ACLs (FUSE_POSIX_ACL): `-o acl` (default) / `noacl`.
    pub acl: bool,
    /// Ask for FUSE over io_uring in INIT (`-o io_uring=0|1`, default 1;
    /// the session serves it, see the vendored fuser's `uring`).
    pub io_uring: bool,
    /// Answer OPEN (`-o parallel_dio=1`), so that a file opened with
    /// O_DIRECT gets FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES: the
    /// kernel then takes its inode lock shared for O_DIRECT writes inside
    /// the file, and writers to one file overlap end to end. It costs an
    /// OPEN and a RELEASE request per open of any file; off, OPEN is
    /// answered ENOSYS once and opens cost no request (see `open`).
    pub parallel_dio: bool,
    /// Answer `fstrim` (FITRIM) EOPNOTSUPP: an encrypted image mounted
    /// without `-o allow_discards` (see the CLI's `encrypted_mount`).
    pub trim_refused: bool,
    /// Free bytes below which the space guard gates buffered writes (see
    /// `space`); 0 turns it off. Set by the mount from `-o dirty_limit_mb`.
    pub space_reserve: u64,
    /// Threads that serve one request queue (`ring_threads` under FUSE
    /// over io_uring, else `threads`): whether a direct write may drop the
    /// kernel's pages inline (see `coherence`). Set by the mount.
    pub serving_threads: usize,
    /// READDIRPLUS for every listing (`-o readdirplus=always`, default), or
    /// only where the kernel's heuristic asks for it (`auto`: the first
    /// batch of a listing, and later ones after a LOOKUP in the directory).
    /// `rm -rf` and `find` read a whole directory before they stat or
    /// unlink its entries, so under `auto` all but the first batch cost a
    /// LOOKUP each; `always` makes a names-only listing (`ls -f`) dearer.
    pub readdirplus_always: bool,
    /// Answer CREATE with ENOSYS (`-o mknod_create=1`, default) where OPEN is
    /// not served: the kernel then makes a file with MKNOD and opens it
    /// with no request, as every other open, and its close sends no
    /// RELEASE. A create costs 3 requests instead of 4 (fs_mark: LOOKUP,
    /// MKNOD, LOOKUP of the directory it checks). The permission a creator
    /// asked for holds as with CREATE (a 0444 file opened for writing by
    /// the `open` that made it).
    pub mknod_create: bool,
}

impl Default for AdapterOptions {
    fn default() -> Self {
        AdapterOptions {
            timeouts: Timeouts::default(),
            writeback_cache: true,
            max_write: 1 << 20,
            acl: true,
            io_uring: true,
            parallel_dio: false,
            trim_refused: false,
            space_reserve: 0,
            serving_threads: 2,
            readdirplus_always: true,
            mknod_create: true,
        }
    }
}

/// cairn as a FUSE file system.
pub struct CairnFuse {
    fs: Arc<Fs>,
    opts: AdapterOptions,
    metrics: Arc<Metrics>,
    /// The kernel granted FUSE_DONT_MASK: creates carry the caller's umask
    /// unapplied, and cairn applies it unless a default ACL is inherited.
    dont_mask: bool,
    /// The kernel granted FUSE_HANDLE_KILLPRIV_V2: it leaves dropping
    /// privileges on write, truncate and chown to cairn, and asks for
    /// `security.capability` before a buffered write only when the inode's
    /// attributes were refreshed since its last write (the superblock is
    /// NOSEC; an attribute reply clears the inode's S_NOSEC).
    killpriv_v2: bool,
    /// The kernel granted FUSE_WRITEBACK_CACHE: written pages may sit in the
    /// kernel, unseen by cairn, so LSEEK is answered ENOSYS (see `lseek`).
    writeback: bool,
    /// Gates buffered writes while the disk is nearly full (`space`).
    space: Arc<SpaceGuard>,
    /// Invalidates the kernel's cached attributes where a reply cannot
    /// carry new ones (see `privs`).
    notify: KernelNotifier,
    /// Drops the kernel's stale pages after direct writes (`coherence`).
    dio: DirectWriteCoherence,
    /// OPEN is answered (not ENOSYS): `-o parallel_dio=1`, or an image with
    /// immutable or append-only inodes, whose opens are checked (`chattr`).
    serve_open: bool,
}

/// `_IOWR('X', 121, struct fstrim_range)`: discard free space (`fstrim`).
const FITRIM: u32 = 0xc018_5879;

fn ctx(req: &Request) -> Ctx {
    Ctx { uid: req.uid(), gid: req.gid(), pid: req.pid(), umask: 0 }
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(st) => TimeSet::At(from_system_time(st)),
    }
}

/// What the kernel granted of what cairn asks for in INIT.
#[derive(Debug, Clone, Copy, Default)]
pub struct Negotiated {
    /// FUSE_DONT_MASK: creates carry the umask unapplied.
    pub dont_mask: bool,
    /// FUSE_HANDLE_KILLPRIV_V2: suid/sgid and capabilities are the server's to drop.
    pub killpriv_v2: bool,
    /// FUSE_WRITEBACK_CACHE: the kernel owns size and times of cached files.
    pub writeback: bool,
}

/// Asks the kernel in INIT for what `opts` say (capabilities, largest
/// write and readahead, background queue, time granularity): cairn's mount
/// and the benchmark's null server (`cairn-bench-driver nullfs`, the FUSE
/// floor) ask the same, so that they differ only behind the transport.
pub fn negotiate(opts: &AdapterOptions, config: &mut KernelConfig) -> Negotiated {
    let mut wanted = InitFlags::FUSE_ASYNC_READ
        | InitFlags::FUSE_BIG_WRITES
        | InitFlags::FUSE_PARALLEL_DIROPS
        | InitFlags::FUSE_DO_READDIRPLUS
        | InitFlags::FUSE_ASYNC_DIO
        | InitFlags::FUSE_CACHE_SYMLINKS
        | InitFlags::FUSE_MAX_PAGES
        | InitFlags::FUSE_EXPORT_SUPPORT
        | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
    if !opts.readdirplus_always {
        wanted |= InitFlags::FUSE_READDIRPLUS_AUTO;
    }
    if opts.writeback_cache {
        wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
    }
    if opts.io_uring {
        wanted |= InitFlags::FUSE_OVER_IO_URING;
    }
    if opts.parallel_dio {
        // MAP_SHARED of a file opened with FOPEN_DIRECT_IO (fsx -Z
        // mmaps its O_DIRECT descriptor); the kernel keeps such an
        // inode in caching mode while it is mapped.
        wanted |= InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
    }
    if opts.acl {
        // The kernel caches and enforces POSIX ACLs; cairn keeps them
        // (mode sync, chmod, inheritance: cairn-core `acl`), which needs
        // the umask unapplied.
        wanted |= InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
    }
    let mut got = Negotiated::default();
    for flag in wanted.iter() {
        if config.add_capabilities(flag).is_err() {
            tracing::debug!(?flag, "the kernel does not offer this FUSE capability");
        } else if flag == InitFlags::FUSE_DONT_MASK {
            got.dont_mask = true;
        } else if flag == InitFlags::FUSE_HANDLE_KILLPRIV_V2 {
            got.killpriv_v2 = true;
        } else if flag == InitFlags::FUSE_WRITEBACK_CACHE {
            got.writeback = true;
        }
    }
    if let Err(best) = config.set_max_write(opts.max_write) {
        let _ = config.set_max_write(best);
    }
    if let Err(best) = config.set_max_readahead(opts.max_write) {
        let _ = config.set_max_readahead(best);
    }
    let _ = config.set_max_background(64);
    let _ = config.set_congestion_threshold(48);
    let _ = config.set_time_granularity(Duration::from_nanos(1));
    got
}

/// Answers a READ of `size` bytes of `ino` at `offset`.
fn read_reply(fs: &Fs, metrics: &Metrics, ino: u64, offset: u64, size: u32, reply: ReplyData) {
    let mut t = metrics.timer(Op::Read);
    // Straight into the reply's buffer: no buffer of our own to zero, fill
    // and copy.
    reply.data_with(size as usize, |buf| t.call(|| fs.files().read_into(ino, offset, buf)).map_err(|e| errno(&e)));
}

impl CairnFuse {
    /// The caller of a create, with its umask when cairn must apply it.
    fn create_ctx(&self, req: &Request, umask: u32) -> Ctx {
        Ctx { umask: if self.dont_mask { umask } else { 0 }, ..ctx(req) }
    }

    /// Wraps a mounted engine.
    pub fn new(fs: Arc<Fs>, opts: AdapterOptions) -> CairnFuse {
        CairnFuse::with_metrics(fs, opts, Arc::new(Metrics::new()))
    }

    /// Wraps a mounted engine, counting requests in `metrics`.
    pub fn with_metrics(fs: Arc<Fs>, opts: AdapterOptions, metrics: Arc<Metrics>) -> CairnFuse {
        let notify = KernelNotifier::default();
        let space = SpaceGuard::start(
            fs.clone(),
            opts.space_reserve,
            metrics.space.clone(),
            notify.clone(),
            opts.timeouts.attr,
        );
        let dio = DirectWriteCoherence::start(notify.clone(), metrics.dio.clone(), opts.serving_threads);
        let serve_open = opts.parallel_dio || fs.files().has_protected_inodes();
        CairnFuse {
            fs,
            opts,
            metrics,
            dont_mask: false,
            killpriv_v2: false,
            writeback: false,
            space,
            notify,
            dio,
            serve_open,
        }
    }

    /// Where the session's notifier goes once the session exists.
    pub fn kernel_notifier(&self) -> KernelNotifier {
        self.notify.clone()
    }

    /// The request counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The engine.
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// The space guard (the session gives it its notifier).
    pub fn space(&self) -> &Arc<SpaceGuard> {
        &self.space
    }

    /// How long the kernel may trust the attributes `a`: the mount's
    /// timeout, at least a second for a file the space guard arms (see
    /// `arming`).
    fn attr_ttl(&self, a: &cairn_core::Attr) -> Duration {
        self.space.attr_ttl(self.opts.timeouts.attr, a)
    }

    fn entry(&self, asked: Asked, reply: ReplyEntry, r: cairn_core::Result<cairn_core::Attr>) {
        match r {
            Ok(a) => {
                // fuser's order: the attributes' timeout, then the name's.
                reply.entry_with_ttls(
                    &self.attr_ttl(&a),
                    &self.opts.timeouts.entry,
                    &file_attr(&a),
                    Generation(u64::from(a.generation)),
                );
                self.space.replied(&a, asked);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Answers a create-and-open (CREATE, TMPFILE) with open flags `flags`.
    fn created(&self, asked: Asked, reply: ReplyCreate, flags: i32, r: cairn_core::Result<cairn_core::Attr>) {
        match r {
            Ok(a) => {
                reply.created(
                    &self.space.attr_ttl(self.opts.timeouts.entry, &a),
                    &file_attr(&a),
                    Generation(u64::from(a.generation)),
                    FileHandle(0),
                    self.file_open_flags(flags),
                );
                self.space.replied(&a, asked);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// GETATTR's and STATX's answer: the attributes of `ino` (the engine
    /// call timed by `t`), or the errno to reply. A request naming a file
    /// handle is what a buffered write sends before it fills the page
    /// cache: the space guard may refuse it ([`Self::refusal`]).
    fn attributes(
        &self,
        t: &mut Timer<'_>,
        req: &Request,
        ino: INodeNo,
        fh: Option<FileHandle>,
    ) -> Result<cairn_core::Attr, Errno> {
        let a = t.call(|| self.fs.inodes().getattr(ino.0)).map_err(|e| errno(&e))?;
        match self.refusal(req, fh, &a) {
            Some(e) => Err(e),
            None => Ok(a),
        }
    }

    /// The error for a GETATTR (or STATX) `req` of file `a`, naming file
    /// handle `fh` if it does: see `space::SpaceGuard::refusal`.
    fn refusal(&self, req: &Request, fh: Option<FileHandle>, a: &cairn_core::Attr) -> Option<Errno> {
        if self.writeback && fh.is_some() {
            self.space.refusal(a, req.pid())
        } else {
            None
        }
    }

    fn empty(reply: ReplyEmpty, r: cairn_core::Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Flags of a file open: keep the page cache across opens (cairn is
    /// the only writer), and no FLUSH on close (there is nothing to flush:
    /// without the writeback cache every write has reached cairn already, and
    /// POSIX locks are the kernel's), which saves a round trip per `close`.
    /// Under the writeback cache the kernel flushes at close regardless. An
    /// O_DIRECT open (with `parallel_dio`) bypasses the page cache instead,
    /// and lets O_DIRECT writers to one file run at once: cairn's overwrite
    /// fast path takes only shared locks, so the kernel's exclusive inode
    /// lock would be the only thing serialising them.
    fn file_open_flags(&self, open_flags: i32) -> FopenFlags {
        if self.opts.parallel_dio && open_flags & libc::O_DIRECT != 0 {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else if self.writeback {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH
        }
    }
}

impl Filesystem for CairnFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let got = negotiate(&self.opts, config);
        (self.dont_mask, self.killpriv_v2, self.writeback) = (got.dont_mask, got.killpriv_v2, got.writeback);
        Ok(())
    }

    fn destroy_request(&self) {
        let mut t = self.metrics.timer(Op::Destroy);
        if let Err(e) = t.call(|| self.fs.unmount()) {
            tracing::error!(error = %e, "unmount: final commit failed; the journal keeps the last committed state");
        }
    }

    fn destroy(&mut self) {
        self.space.stop();
        // Already done in `destroy_request` when the kernel sent FUSE_DESTROY
        // (fuseblk mounts); this covers sessions that ended without it.
        if let Err(e) = self.fs.unmount() {
            tracing::error!(error = %e, "unmount: final commit failed; the journal keeps the last committed state");
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let asked = Asked::now(req.pid());
        let mut t = self.metrics.timer(Op::Lookup);
        match t.call(|| self.fs.lookup(parent.0, name_bytes(name))) {
            Err(cairn_core::FsError::Errno(libc::ENOENT)) if !self.opts.timeouts.negative.is_zero() => {
                reply.entry(&self.opts.timeouts.negative, &negative_attr(), Generation(0))
            }
            r => self.entry(asked, reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut t = self.metrics.timer(Op::Forget);
        t.engine(|| self.fs.inodes().forget(ino.0, nlookup));
        self.dio.forgotten(ino.0, || self.fs.inodes().kernel_lookups(ino.0));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let asked = Asked::now(req.pid());
        let mut t = self.metrics.timer(Op::Getattr);
        match self.attributes(&mut t, req, ino, fh) {
            Ok(a) => {
                reply.attr(&self.attr_ttl(&a), &file_attr(&a));
                self.space.replied(&a, asked);
            }
            Err(e) => reply.error(e),
        }
    }

    /// `statx(2)` asking for the birth time: GETATTR's answer with the
    /// inode's creation time (kept on disk since the first format).
    fn statx(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: Option<FileHandle>,
        _flags: u32,
        _mask: u32,
        reply: fuser::ReplyStatx,
    ) {
        let asked = Asked::now(req.pid());
        let mut t = self.metrics.timer(Op::Statx);
        match self.attributes(&mut t, req, ino, fh) {
            Ok(a) => {
                let (attributes, mask) = crate::convert::statx_attributes(a.flags);
                reply.statx_with_attributes(&self.attr_ttl(&a), &file_attr(&a), attributes, mask);
                self.space.replied(&a, asked);
            }
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
            ctime: ctime.map(from_system_time),
        };
        let asked = Asked::now(req.pid());
        let mut t = self.metrics.timer(Op::Setattr);
        let res = t.call(|| {
            // Truncate and chown drop a file capability (the kernel leaves
            // it to cairn under HANDLE_KILLPRIV_V2; suid/sgid come through
            // `setattr_kill_suidgid`).
            if self.killpriv_v2 && (uid.is_some() || gid.is_some() || size.is_some()) {
                self.fs.files().kill_privs(ino.0, None)?;
            }
            self.fs.files().setattr(&ctx(req), ino.0, &set)
        });
        match res {
            Ok(a) => {
                reply.attr(&self.attr_ttl(&a), &file_attr(&a));
                if size.is_some() {
                    // A truncate: the kernel drops other replies meanwhile.
                    self.space.size_event(ino.0, req.pid());
                }
                self.space.replied(&a, asked);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr_kill_suidgid(&self, req: &Request, ino: INodeNo) {
        // Chown (by anyone) or truncate (without CAP_FSETID): the SETATTR
        // reply that follows carries the new mode.
        if let Err(e) = privs::on_write(&self.fs, req, ino.0, true) {
            tracing::warn!(ino = ino.0, error = %e, "could not clear suid/sgid");
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let mut t = self.metrics.timer(Op::Readlink);
        match t.call(|| self.fs.readlink(ino.0)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let mut t = self.metrics.timer(Op::Mknod);
        let c = self.create_ctx(req, umask);
        self.entry(
            Asked::now(req.pid()),
            reply,
            t.call(|| self.fs.names().mknod(&c, parent.0, name_bytes(name), mode, u64::from(rdev))),
        );
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let mut t = self.metrics.timer(Op::Mkdir);
        let c = self.create_ctx(req, umask);
        self.entry(
            Asked::now(req.pid()),
            reply,
            t.call(|| self.fs.names().mkdir(&c, parent.0, name_bytes(name), mode)),
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut t = self.metrics.timer(Op::Unlink);
        Self::empty(reply, t.call(|| self.fs.names().unlink(parent.0, name_bytes(name))));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut t = self.metrics.timer(Op::Rmdir);
        Self::empty(reply, t.call(|| self.fs.names().rmdir(parent.0, name_bytes(name))));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let mut t = self.metrics.timer(Op::Symlink);
        self.entry(
            Asked::now(req.pid()),
            reply,
            t.call(|| {
                self.fs.names().symlink(&ctx(req), parent.0, name_bytes(link_name), target.as_os_str().as_bytes())
            }),
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut t = self.metrics.timer(Op::Rename);
        let c = ctx(req);
        Self::empty(
            reply,
            t.call(|| {
                self.fs.names().rename_as(
                    &c,
                    parent.0,
                    name_bytes(name),
                    newparent.0,
                    name_bytes(newname),
                    flags.bits(),
                )
            }),
        );
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let mut t = self.metrics.timer(Op::Link);
        self.entry(
            Asked::now(req.pid()),
            reply,
            t.call(|| self.fs.names().link(ino.0, newparent.0, name_bytes(newname))),
        );
    }

    /// With `parallel_dio` OPEN is answered with the flags
    /// of [`CairnFuse::file_open_flags`] and file handle 0 (cairn keeps no
    /// per-open state). Without it (the default) OPEN is answered ENOSYS: the kernel then
    /// sets `no_open` for the connection and never sends OPEN or RELEASE
    /// again, opening every file as if with FOPEN_KEEP_CACHE: zero requests
    /// per open + close of a cached file, but O_DIRECT writes to one file
    /// serialised under the kernel's exclusive inode lock.
    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _t = self.metrics.timer(Op::Open);
        if self.serve_open {
            // chattr's i and a (see `chattr`).
            if let Err(e) = self.fs.files().check_open(ino.0, flags.0) {
                reply.error(errno(&e));
                return;
            }
            reply.opened(FileHandle(0), self.file_open_flags(flags.0));
        } else {
            reply.error(Errno::ENOSYS);
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        self.dio.note_read(ino.0, flags.0);
        read_reply(&self.fs, &self.metrics, ino.0, offset, size, reply);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut t = self.metrics.timer(Op::Write);
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let from_cache = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let mut dropped = false;
        let res = t.call(|| {
            if self.killpriv_v2 {
                dropped = privs::on_write(&self.fs, req, ino.0, kill)?;
            }
            if from_cache {
                // The kernel's dirty pages: whole or an error, never short
                // (the kernel would drop the rest unreported).
                self.fs.files().write_back(ino.0, offset, data)
            } else if flags.0 & libc::O_DIRECT != 0 {
                // Direct I/O: the kernel makes a short count EIO. It must
                // leave the kernel's dirty pages their space.
                if !self.space.leaves_room_for_dirty(ino.0, offset, data.len() as u64) {
                    return Err(cairn_core::FsError::Errno(libc::ENOSPC));
                }
                self.fs.files().write_whole(ino.0, offset, data, !self.writeback)
            } else {
                // Under the writeback cache the kernel owns mtime and ctime
                // and sends them in a SETATTR, possibly before these pages
                // arrive.
                self.fs.files().write_data(ino.0, offset, data, !self.writeback)
            }
        });
        if self.writeback {
            self.space.note_write(ino.0, res.as_ref().map(|n| *n).map_err(errno));
            if !from_cache {
                // A direct write moves the kernel's size (see `arming`).
                self.space.size_event(ino.0, req.pid());
            }
        }
        if res.is_ok() && DirectWriteCoherence::is_direct(flags.0, from_cache) {
            self.dio.after_direct_write(ino.0);
        }
        match res {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
        if dropped {
            self.notify.attributes_changed(ino.0);
        }
    }

    // FLUSH, RELEASE, OPENDIR and RELEASEDIR: declined, as the null
    // server declines them (`declined.rs`).
    crate::declined_requests!();

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let mut t = self.metrics.timer(Op::Fsync);
        Self::empty(reply, t.call(|| self.fs.files().fsync(ino.0, datasync)));
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let mut t = self.metrics.timer(Op::Readdir);
        let r = t.call(|| {
            self.fs.readdir(ino.0, offset, &mut |e| {
                !reply.add(INodeNo(e.ino), e.next_offset, kind_of_dtype(e.dtype), OsStr::from_bytes(&e.name))
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let asked = Asked::now(req.pid());
        let mut armed = Vec::new();
        let mut t = self.metrics.timer(Op::Readdirplus);
        let r = t.call(|| {
            self.fs.readdir_ahead(ino.0, offset, true, &mut |e| {
                // The kernel takes a lookup reference on every entry it was given,
                // except `.` and `..`, whose attributes it ignores.
                let dot = e.name == b"." || e.name == b"..";
                let taken = self.fs.listing_entry(e.ino, !dot, |a| {
                    let full = reply.add(
                        INodeNo(e.ino),
                        e.next_offset,
                        OsStr::from_bytes(&e.name),
                        &self.space.attr_ttl(self.opts.timeouts.entry, a),
                        &file_attr(a),
                        Generation(u64::from(a.generation)),
                    );
                    if !full && !dot && self.space.arms(a) {
                        armed.push(*a);
                    }
                    !full
                });
                // An entry whose inode vanished since the listing began is skipped.
                taken.unwrap_or(true)
            })
        });
        match r {
            Ok(()) => {
                reply.ok();
                for a in &armed {
                    self.space.replied(a, asked);
                }
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let mut t = self.metrics.timer(Op::Fsyncdir);
        Self::empty(reply, t.call(|| self.fs.files().fsync(ino.0, datasync)));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let mut t = self.metrics.timer(Op::Statfs);
        // What is held for write-backs follows the free space now (space
        // freed since the last write ends tight mode and the hold).
        self.space.tight();
        match t.call(|| self.fs.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let mut t = self.metrics.timer(Op::Setxattr);
        let caller = LazyCaller::new(req);
        let keep = |gid| caller.may_keep_sgid(gid);
        Self::empty(reply, t.call(|| self.fs.setxattr_by(ino.0, name_bytes(name), value, flags, &keep)));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let mut t = self.metrics.timer(Op::Getxattr);
        match t.call(|| self.fs.getxattr(ino.0, name_bytes(name))) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let mut t = self.metrics.timer(Op::Listxattr);
        match t.call(|| self.fs.listxattr(ino.0)) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut t = self.metrics.timer(Op::Removexattr);
        Self::empty(reply, t.call(|| self.fs.removexattr(ino.0, name_bytes(name))));
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (cairn always mounts with
        // `default_permissions`); this only answers whether the inode exists.
        let mut t = self.metrics.timer(Op::Access);
        Self::empty(reply, t.call(|| self.fs.inodes().getattr(ino.0).map(|_| ())));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut t = self.metrics.timer(Op::Create);
        if self.opts.mknod_create && !self.serve_open {
            // The kernel remembers this (`no_create`) and makes files with
            // MKNOD from now on (see `AdapterOptions::mknod_create`).
            reply.error(Errno::ENOSYS);
            return;
        }
        let mode = if mode & libc::S_IFMT == 0 { mode | libc::S_IFREG } else { mode };
        let c = self.create_ctx(req, umask);
        self.created(
            Asked::now(req.pid()),
            reply,
            flags,
            t.call(|| self.fs.names().mknod(&c, parent.0, name_bytes(name), mode, 0)),
        );
    }

    /// The one ioctl cairn serves is the shutdown (XFS_IOC_GOINGDOWN, also
    /// EXT4_IOC_SHUTDOWN), on any inode, for root (see `shutdown`); the
    /// rest are ENOTTY.
    fn ioctl_with_arg(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        arg: u64,
        in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        let mut t = self.metrics.timer(Op::Ioctl);
        if crate::chattr::handles(cmd) {
            match t.call(|| Ok(crate::chattr::ioctl(&self.fs, &ctx(req), ino.0, cmd, in_data, self.serve_open))) {
                Ok(Ok(out)) => {
                    // The new ctime; and the next buffered write of a file
                    // made immutable or append-only asks first (see
                    // `arming`): invalidated before the reply, so that no
                    // write after the ioctl returns can miss it.
                    self.notify.attributes_changed(ino.0);
                    reply.ioctl(0, &out);
                }
                Ok(Err(e)) | Err(e) => reply.error(e),
            }
            return;
        }
        if cmd == FITRIM {
            // `struct fstrim_range { start, len, minlen }` in, and back with
            // `len` set to the bytes discarded. CAP_SYS_ADMIN, as ext4 asks.
            if req.uid() != 0 {
                reply.error(Errno::EPERM);
                return;
            }
            if self.opts.trim_refused {
                tracing::warn!("fstrim refused: an encrypted image discards only with -o allow_discards");
                reply.error(Errno::EOPNOTSUPP);
                return;
            }
            let Some(range) = in_data.get(..24) else {
                reply.error(Errno::EINVAL);
                return;
            };
            // The caller's struct, in its memory: host byte order.
            #[allow(clippy::host_endian_bytes)]
            let field = |i: usize| u64::from_ne_bytes(range[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            let (start, len, min_len) = (field(0), field(1), field(2));
            match t.call(|| self.fs.trim(start, len, min_len)) {
                Ok(done) => {
                    let mut out = range.to_vec();
                    #[allow(clippy::host_endian_bytes)]
                    out[8..16].copy_from_slice(&done.to_ne_bytes());
                    reply.ioctl(0, &out);
                }
                Err(e) => reply.error(errno(&e)),
            }
            return;
        }
        if cmd != shutdown::GOINGDOWN {
            reply.error(Errno::ENOTTY);
            return;
        }
        match shutdown::flush_of(req.uid(), req.pid(), arg) {
            Ok(flush) => match t.call(|| self.fs.shutdown(flush)) {
                Ok(()) => reply.ioctl(0, &[]),
                Err(e) => reply.error(errno(&e)),
            },
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut t = self.metrics.timer(Op::Fallocate);
        // Space taken, not given back: it must leave the kernel's dirty pages theirs.
        let takes = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_COLLAPSE_RANGE) == 0;
        if takes && !self.space.leaves_room_for_dirty(ino.0, offset, length) {
            reply.error(Errno::ENOSPC);
            return;
        }
        // The kernel drops no privileges for a fallocate under
        // HANDLE_KILLPRIV_V2 and sends no flag: cairn decides (`privs`).
        // Under the writeback cache the kernel owns the file's times (as for
        // WRITE): it stamps them itself and sends them in a SETATTR.
        let mut dropped = false;
        let res = t.call(|| {
            if self.killpriv_v2 {
                dropped = privs::on_fallocate(&self.fs, req, ino.0)?;
            }
            self.fs.files().fallocate_data(ino.0, offset, length, mode, !self.writeback)
        });
        Self::empty(reply, res);
        // The kernel's size moves (see `arming`).
        self.space.size_event(ino.0, req.pid());
        if dropped {
            self.notify.attributes_changed(ino.0);
        }
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let mut t = self.metrics.timer(Op::Lseek);
        if self.writeback {
            // SEEK_DATA/SEEK_HOLE under the writeback cache: the kernel sends
            // LSEEK without writing its dirty pages back first, so cairn's
            // map of holes may miss data the caller has written. ENOSYS makes
            // the kernel stop asking (`no_lseek`) and answer from the size
            // alone, the whole file data: correct by POSIX, holes unreported.
            reply.error(Errno::ENOSYS);
            return;
        }
        if offset < 0 {
            reply.error(Errno::ENXIO);
            return;
        }
        match t.call(|| self.fs.files().lseek(ino.0, offset as u64, whence)) {
            Ok(o) => match i64::try_from(o) {
                Ok(o) => reply.offset(o),
                Err(_) => reply.error(Errno::EOVERFLOW),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn syncfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyEmpty) {
        let mut t = self.metrics.timer(Op::Syncfs);
        Self::empty(reply, t.call(|| self.fs.files().sync_fs()));
    }

    fn tmpfile(&self, req: &Request, parent: INodeNo, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let mut t = self.metrics.timer(Op::Tmpfile);
        let c = self.create_ctx(req, umask);
        self.created(Asked::now(req.pid()), reply, flags, t.call(|| self.fs.names().tmpfile(&c, parent.0, mode)));
    }
}
