//! `cairn-bench-driver nullfs MOUNTPOINT [-o OPTIONS] [--counters FILE] [--data FILE]`:
//! the FUSE floor (issue #37).
//!
//! A FUSE server with no engine behind it: its tree lives in memory (a hash
//! map of inodes, each directory a map of names), a file's bytes are not
//! kept (a READ answers zeros up to the file's size, a WRITE only moves the
//! size). Everything else is cairn's own: the same vendored fuser, the same
//! transport (FUSE over io_uring or /dev/fuse, the same threads), the same
//! INIT request ([`cairn_fuse::negotiate`]), mount options
//! ([`cairn_fuse::session_config`], `default_permissions` included), entry,
//! attribute and negative TTLs, the same answers where cairn declines work
//! (OPEN, OPENDIR and FLUSH with ENOSYS, so no request per open or close;
//! all but OPEN by cairn's own handlers, [`cairn_fuse::declined`]),
//! the same readahead, and the same request counters ([`cairn_fuse::Metrics`]:
//! the root's extended attribute `user.nullfs.counters` reads them as JSON
//! while mounted, and `--counters FILE` gets them at unmount). Extended
//! attributes are kept, in memory, as given (issue #53: setxattr and
//! getxattr are measured against this floor).
//!
//! `--data FILE` (issue #53, `nullfs-data` in `bench/run`): a file's bytes
//! go to FILE and come back from it, at `(ino % 8) * 2 GiB + offset`, by
//! `pwrite` and `pread` straight into and out of the request's buffer: the
//! floor of a server that must move its bytes through one file (a READ
//! costs one copy out of FILE's pages, as cairn's out of its image). Files
//! beyond 2 GiB overlap the next inode's bytes: a floor, not a file system.
//!
//! What cairn does on top
//! of this is cairn's cost; what this costs is the transport's: the floor
//! `bench/run floor` puts cairn beside.
//!
//! ## Locking
//! Inodes live in 64 shards, each behind a mutex; no operation holds two
//! at once (a create inserts the inode, then its name; an unlink removes the
//! name, then drops the link), so there is no lock order to keep. A rename
//! is not atomic across its two directories: this is a floor, not a file
//! system.

use cairn_fuse::metrics::Op;
use cairn_fuse::{negotiate, AdapterOptions, Metrics, Negotiated};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::SystemTime;

const SHARDS: usize = 64;
/// A directory entry as READDIRPLUS lists it: (inode, cookie, name).
type Listed = (u64, u64, Box<[u8]>);
const ROOT: u64 = 1;

/// A directory's entries: by name (inode, cookie), and by cookie (the
/// READDIR offset, stable while entries come and go).
#[derive(Default)]
struct Dir {
    by_name: HashMap<Box<[u8]>, (u64, u64)>,
    by_cookie: BTreeMap<u64, Box<[u8]>>,
    next_cookie: u64,
}

struct Node {
    attr: FileAttr,
    /// Lookup references the kernel holds.
    lookups: u64,
    dir: Option<Dir>,
    target: Option<Box<[u8]>>,
    /// Extended attributes, name → value.
    xattrs: BTreeMap<Box<[u8]>, Box<[u8]>>,
}

/// The null server.
pub struct NullFs {
    shards: Vec<Mutex<HashMap<u64, Node>>>,
    next_ino: AtomicU64,
    opts: AdapterOptions,
    got: Negotiated,
    metrics: Arc<Metrics>,
    /// `--data`: where file bytes go (None: not kept).
    data: Option<std::fs::File>,
}

/// `--data`: bytes of each of 8 inode slots in the data file.
const DATA_SLOT: u64 = 2 << 30;

/// Where byte `offset` of inode `ino` lives in the data file.
fn data_at(ino: u64, offset: u64) -> u64 {
    (ino % 8) * DATA_SLOT + offset
}

fn attr(ino: u64, kind: FileType, mode: u32, req: &Request) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm: (mode & 0o7777) as u16,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl NullFs {
    pub fn new(opts: AdapterOptions, metrics: Arc<Metrics>, data: Option<std::fs::File>) -> NullFs {
        let fs = NullFs {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            next_ino: AtomicU64::new(ROOT + 1),
            opts,
            got: Negotiated::default(),
            metrics,
            data,
        };
        let now = SystemTime::now();
        let root = FileAttr {
            ino: INodeNo(ROOT),
            size: 4096,
            blocks: 8,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        };
        fs.shard(ROOT).lock().insert(
            ROOT,
            Node { attr: root, lookups: 1, dir: Some(Dir::default()), target: None, xattrs: BTreeMap::new() },
        );
        fs
    }

    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, Node>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// Runs `f` on inode `ino`, or ENOENT.
    fn with<R>(&self, ino: u64, f: impl FnOnce(&mut Node) -> Result<R, Errno>) -> Result<R, Errno> {
        self.shard(ino).lock().get_mut(&ino).ok_or(Errno::ENOENT).and_then(f)
    }

    /// Drops `ino` once no name and no kernel reference is left.
    fn maybe_drop(&self, ino: u64) {
        let mut s = self.shard(ino).lock();
        if s.get(&ino).is_some_and(|n| n.lookups == 0 && n.attr.nlink == 0) {
            s.remove(&ino);
        }
    }

    fn entry(&self, reply: ReplyEntry, r: Result<FileAttr, Errno>) {
        match r {
            Ok(a) => reply.entry_with_ttls(&self.opts.timeouts.entry, &self.opts.timeouts.attr, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Makes a new inode named `name` in `parent`; one lookup reference.
    /// `umask` is applied when the kernel left it to the server (as cairn does).
    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        target: Option<&[u8]>,
    ) -> Result<FileAttr, Errno> {
        let mode = if self.got.dont_mask { mode & !(umask & 0o777) } else { mode };
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.next_ino.fetch_add(1, Relaxed);
        let kind = cairn_fuse::convert::kind_of_mode(mode);
        let mut a = attr(ino, kind, mode, req);
        if let Some(t) = target {
            a.size = t.len() as u64;
        }
        let node = Node {
            attr: a,
            lookups: 1,
            dir: (kind == FileType::Directory).then(Dir::default),
            target: target.map(Into::into),
            xattrs: BTreeMap::new(),
        };
        self.shard(ino).lock().insert(ino, node);
        let named = self.with(parent, |p| {
            let d = p.dir.as_mut().ok_or(Errno::ENOTDIR)?;
            if d.by_name.contains_key(name.as_bytes()) {
                return Err(Errno::EEXIST);
            }
            d.next_cookie += 1;
            let c = d.next_cookie;
            d.by_name.insert(name.as_bytes().into(), (ino, c));
            d.by_cookie.insert(c, name.as_bytes().into());
            p.attr.mtime = SystemTime::now();
            p.attr.ctime = p.attr.mtime;
            if kind == FileType::Directory {
                p.attr.nlink += 1;
            }
            Ok(())
        });
        if let Err(e) = named {
            self.shard(ino).lock().remove(&ino);
            return Err(e);
        }
        Ok(a)
    }

    /// Removes `name` from `parent` (a directory only if `dir`, and empty).
    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.with(parent, |p| {
            let d = p.dir.as_ref().ok_or(Errno::ENOTDIR)?;
            let &(ino, _) = d.by_name.get(name.as_bytes()).ok_or(Errno::ENOENT)?;
            Ok(ino)
        })?;
        self.with(ino, |n| match (&n.dir, dir) {
            (Some(d), true) if !d.by_name.is_empty() => Err(Errno::ENOTEMPTY),
            (Some(_), false) => Err(Errno::EISDIR),
            (None, true) => Err(Errno::ENOTDIR),
            _ => Ok(()),
        })?;
        self.with(parent, |p| {
            let d = p.dir.as_mut().ok_or(Errno::ENOTDIR)?;
            let (_, c) = d.by_name.remove(name.as_bytes()).ok_or(Errno::ENOENT)?;
            d.by_cookie.remove(&c);
            p.attr.mtime = SystemTime::now();
            p.attr.ctime = p.attr.mtime;
            if dir {
                p.attr.nlink -= 1;
            }
            Ok(())
        })?;
        self.with(ino, |n| {
            n.attr.nlink = if dir { 0 } else { n.attr.nlink.saturating_sub(1) };
            n.attr.ctime = SystemTime::now();
            Ok(())
        })?;
        self.maybe_drop(ino);
        Ok(())
    }
}

fn set_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.got = negotiate(&self.opts, config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _t = self.metrics.timer(Op::Lookup);
        let found = self.with(parent.0, |p| {
            let d = p.dir.as_ref().ok_or(Errno::ENOTDIR)?;
            d.by_name.get(name.as_bytes()).map(|e| e.0).ok_or(Errno::ENOENT)
        });
        let r = found.and_then(|ino| {
            self.with(ino, |n| {
                n.lookups += 1;
                Ok(n.attr)
            })
        });
        match r {
            Err(Errno::ENOENT) if !self.opts.timeouts.negative.is_zero() => {
                reply.entry(&self.opts.timeouts.negative, &cairn_fuse::convert::negative_attr(), Generation(0))
            }
            r => self.entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _t = self.metrics.timer(Op::Forget);
        let _ = self.with(ino.0, |n| {
            n.lookups = n.lookups.saturating_sub(nlookup);
            Ok(())
        });
        self.maybe_drop(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _t = self.metrics.timer(Op::Getattr);
        match self.with(ino.0, |n| Ok(n.attr)) {
            Ok(a) => reply.attr(&self.opts.timeouts.attr, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
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
        let _t = self.metrics.timer(Op::Setattr);
        let r = self.with(ino.0, |n| {
            let a = &mut n.attr;
            if let Some(m) = mode {
                a.perm = (m & 0o7777) as u16;
            }
            a.uid = uid.unwrap_or(a.uid);
            a.gid = gid.unwrap_or(a.gid);
            if let Some(s) = size {
                a.size = s;
                a.blocks = s.div_ceil(512);
            }
            if let Some(t) = atime {
                a.atime = set_time(t);
            }
            if let Some(t) = mtime {
                a.mtime = set_time(t);
            }
            a.ctime = ctime.unwrap_or_else(SystemTime::now);
            Ok(*a)
        });
        match r {
            Ok(a) => reply.attr(&self.opts.timeouts.attr, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _t = self.metrics.timer(Op::Readlink);
        match self.with(ino.0, |n| n.target.clone().ok_or(Errno::EINVAL)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let _t = self.metrics.timer(Op::Mknod);
        self.entry(reply, self.make(req, parent.0, name, mode, umask, None));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _t = self.metrics.timer(Op::Mkdir);
        self.entry(reply, self.make(req, parent.0, name, mode | libc::S_IFDIR, umask, None));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _t = self.metrics.timer(Op::Unlink);
        match self.remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _t = self.metrics.timer(Op::Rmdir);
        match self.remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _t = self.metrics.timer(Op::Symlink);
        let t = target.as_os_str().as_bytes();
        self.entry(reply, self.make(req, parent.0, link_name, libc::S_IFLNK | 0o777, 0, Some(t)));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _t = self.metrics.timer(Op::Rename);
        if !flags.is_empty() {
            reply.error(Errno::EINVAL);
            return;
        }
        let r = (|| {
            let ino = self.with(parent.0, |p| {
                let d = p.dir.as_mut().ok_or(Errno::ENOTDIR)?;
                let (ino, c) = d.by_name.remove(name.as_bytes()).ok_or(Errno::ENOENT)?;
                d.by_cookie.remove(&c);
                Ok(ino)
            })?;
            let replaced = self.with(newparent.0, |p| {
                let d = p.dir.as_mut().ok_or(Errno::ENOTDIR)?;
                d.next_cookie += 1;
                let c = d.next_cookie;
                let old = d.by_name.insert(newname.as_bytes().into(), (ino, c));
                if let Some((_, oc)) = old {
                    d.by_cookie.remove(&oc);
                }
                d.by_cookie.insert(c, newname.as_bytes().into());
                Ok(old.map(|o| o.0))
            })?;
            if let Some(old) = replaced {
                self.with(old, |n| {
                    n.attr.nlink = n.attr.nlink.saturating_sub(1);
                    Ok(())
                })?;
                self.maybe_drop(old);
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _t = self.metrics.timer(Op::Link);
        let r = self.with(newparent.0, |p| {
            let d = p.dir.as_mut().ok_or(Errno::ENOTDIR)?;
            if d.by_name.contains_key(newname.as_bytes()) {
                return Err(Errno::EEXIST);
            }
            d.next_cookie += 1;
            let c = d.next_cookie;
            d.by_name.insert(newname.as_bytes().into(), (ino.0, c));
            d.by_cookie.insert(c, newname.as_bytes().into());
            Ok(())
        });
        let r = r.and_then(|()| {
            self.with(ino.0, |n| {
                n.attr.nlink += 1;
                n.lookups += 1;
                Ok(n.attr)
            })
        });
        self.entry(reply, r);
    }

    /// As cairn's default: ENOSYS (`no_open`: no OPEN or RELEASE again).
    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _t = self.metrics.timer(Op::Open);
        reply.error(Errno::ENOSYS);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let _t = self.metrics.timer(Op::Read);
        match self.with(ino.0, |n| Ok(n.attr.size)) {
            Ok(len) => {
                let n = len.saturating_sub(offset).min(u64::from(size)) as usize;
                reply.data_with(n, |buf| {
                    match &self.data {
                        Some(f) => {
                            use std::os::unix::fs::FileExt;
                            // Past the data file's end (never written): zeros.
                            let got = f.read_at(&mut buf[..n], data_at(ino.0, offset))?;
                            buf[got..n].fill(0);
                        }
                        None => buf[..n].fill(0),
                    }
                    Ok(n)
                })
            }
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let _t = self.metrics.timer(Op::Write);
        let writeback = self.got.writeback;
        if let Some(f) = &self.data {
            use std::os::unix::fs::FileExt;
            if let Err(e) = f.write_all_at(data, data_at(ino.0, offset)) {
                return reply.error(Errno::from(e));
            }
        }
        let r = self.with(ino.0, |n| {
            let end = offset + data.len() as u64;
            if end > n.attr.size {
                n.attr.size = end;
                n.attr.blocks = end.div_ceil(512);
            }
            if !writeback {
                n.attr.mtime = SystemTime::now();
                n.attr.ctime = n.attr.mtime;
            }
            Ok(data.len() as u32)
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    // FLUSH, RELEASE, OPENDIR and RELEASEDIR: declined exactly as cairn
    // declines them, by the same code (`cairn_fuse::declined`).
    cairn_fuse::declined_requests!();

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let _t = self.metrics.timer(Op::Fsync);
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let _t = self.metrics.timer(Op::Readdir);
        let r = self.with(ino.0, |n| {
            let d = n.dir.as_ref().ok_or(Errno::ENOTDIR)?;
            for (&c, name) in d.by_cookie.range(offset + 1..) {
                let (child, _) = d.by_name[name];
                if reply.add(INodeNo(child), c, FileType::RegularFile, OsStr::from_bytes(name)) {
                    break;
                }
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let _t = self.metrics.timer(Op::Readdirplus);
        // The names first (the directory's lock), then each inode's
        // attributes (its own): never two locks at once.
        let batch: Result<Vec<Listed>, Errno> = self.with(ino.0, |n| {
            let d = n.dir.as_ref().ok_or(Errno::ENOTDIR)?;
            Ok(d.by_cookie
                .range(offset + 1..)
                .take(512)
                .map(|(&c, name)| (d.by_name[name].0, c, name.clone()))
                .collect())
        });
        let batch = match batch {
            Ok(b) => b,
            Err(e) => return reply.error(e),
        };
        for (child, c, name) in batch {
            let Ok(a) = self.with(child, |n| Ok(n.attr)) else { continue };
            if reply.add(INodeNo(child), c, OsStr::from_bytes(&name), &self.opts.timeouts.entry, &a, Generation(0)) {
                break;
            }
            let _ = self.with(child, |n| {
                n.lookups += 1;
                Ok(())
            });
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let _t = self.metrics.timer(Op::Fsyncdir);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _t = self.metrics.timer(Op::Statfs);
        reply.statfs(1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 4096, 255, 4096);
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _t = self.metrics.timer(Op::Setxattr);
        let name = name.as_bytes();
        if name.len() > 255 || value.len() > 65536 {
            reply.error(if name.len() > 255 { Errno::ERANGE } else { Errno::E2BIG });
            return;
        }
        let r = self.with(ino.0, |n| {
            let has = n.xattrs.contains_key(name);
            if flags & libc::XATTR_CREATE != 0 && has {
                return Err(Errno::EEXIST);
            }
            if flags & libc::XATTR_REPLACE != 0 && !has {
                return Err(Errno::ENODATA);
            }
            n.xattrs.insert(name.into(), value.into());
            n.attr.ctime = SystemTime::now();
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// The value given to SETXATTR; and `user.nullfs.counters` of the root:
    /// the request counters, as JSON (those not zero), which `bench/` reads
    /// as it reads `cairn stats`.
    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _t = self.metrics.timer(Op::Getxattr);
        let (value, slack) = if ino.0 == ROOT && name.as_bytes() == COUNTERS_XATTR {
            // Room for what the counters may grow by before the read.
            (counters_json(&self.metrics).into_bytes().into_boxed_slice(), 512)
        } else {
            match self.with(ino.0, |n| n.xattrs.get(name.as_bytes()).cloned().ok_or(Errno::ENODATA)) {
                Ok(v) => (v, 0),
                Err(e) => return reply.error(e),
            }
        };
        if size == 0 {
            reply.size(value.len() as u32 + slack);
        } else if value.len() > size as usize {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(&value);
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _t = self.metrics.timer(Op::Listxattr);
        let r = self.with(ino.0, |n| {
            let mut names = Vec::new();
            for k in n.xattrs.keys() {
                names.extend_from_slice(k);
                names.push(0);
            }
            Ok(names)
        });
        match r {
            Ok(names) if size == 0 => reply.size(names.len() as u32),
            Ok(names) if names.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(names) => reply.data(&names),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _t = self.metrics.timer(Op::Removexattr);
        let r = self.with(ino.0, |n| {
            n.xattrs.remove(name.as_bytes()).ok_or(Errno::ENODATA)?;
            n.attr.ctime = SystemTime::now();
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        let _t = self.metrics.timer(Op::Access);
        match self.with(ino.0, |_| Ok(())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let _t = self.metrics.timer(Op::Create);
        if self.opts.mknod_create {
            // As cairn: files are made with MKNOD (no RELEASE at close).
            reply.error(Errno::ENOSYS);
            return;
        }
        let mode = if mode & libc::S_IFMT == 0 { mode | libc::S_IFREG } else { mode };
        // cairn's open flags without `parallel_dio`.
        let open = if self.got.writeback {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH
        };
        match self.make(req, parent.0, name, mode, umask, None) {
            Ok(a) => reply.created(&self.opts.timeouts.entry, &a, Generation(0), FileHandle(0), open),
            Err(e) => reply.error(e),
        }
    }

    fn syncfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyEmpty) {
        let _t = self.metrics.timer(Op::Syncfs);
        reply.ok();
    }
}

/// The root's extended attribute that holds the request counters.
const COUNTERS_XATTR: &[u8] = b"user.nullfs.counters";

/// The counters that are not zero, as a JSON object.
fn counters_json(metrics: &Metrics) -> String {
    let doc: serde_json::Map<String, serde_json::Value> =
        metrics.counters().into_iter().filter(|(_, v)| *v != 0).map(|(k, v)| (k, serde_json::json!(v))).collect();
    serde_json::Value::Object(doc).to_string()
}

/// Mounts the null server at `mountpoint` with cairn's `-o` options and
/// serves until it is unmounted; then writes the request counters to
/// `counters` (JSON), if given.
pub fn run(mountpoint: &Path, options: &[String], counters: Option<&Path>, data: Option<&Path>) -> Result<(), String> {
    let data = data
        .map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))
        })
        .transpose()?;
    let mut settings = cairn_fuse::parse_options(options)?;
    let mut cfg = cairn_fuse::session_config(&settings, "nullfs");
    cfg.mount_options.retain(|o| !matches!(o, fuser::MountOption::Subtype(_)));
    cfg.mount_options.push(fuser::MountOption::Subtype("nullfs".into()));
    if settings.adapter.io_uring && !fuser::io_uring_kernel_switch(true) {
        eprintln!("nullfs: FUSE over io_uring is off in this kernel: serving through /dev/fuse");
        settings.adapter.io_uring = false;
        cfg.io_uring = false;
    }
    let metrics = Arc::new(Metrics::new());
    let fs = NullFs::new(settings.adapter, metrics.clone(), data);
    let session =
        fuser::Session::new(fs, mountpoint, &cfg).map_err(|e| format!("mount {}: {e}", mountpoint.display()))?;
    if let Err(e) = cairn_fuse::set_readahead(mountpoint, settings.readahead_kb) {
        eprintln!("nullfs: could not set the readahead: {e}");
    }
    session.run().map_err(|e| format!("serving {}: {e}", mountpoint.display()))?;
    if let Some(path) = counters {
        std::fs::write(path, counters_json(&metrics)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
