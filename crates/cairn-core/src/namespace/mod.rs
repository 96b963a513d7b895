//! [`Namespace`]: the owner of the dentry cache and the rename lock, and
//! the namespace operations: name lookups, create (files, directories,
//! symlinks, nodes, O_TMPFILE), link, unlink, rmdir and rename
//! (`rename.rs`). It works through the engine (transactions) and the inode
//! store (inodes, orphans, frees), both held by `Arc`; `Fs` routes to it.
//!
//! Each runs in one transaction handle. Once its locks are held (and so
//! its trees' depths are known) it states its worst case with
//! `Tx::require`: directory-entry insert or remove, the inodes it stores,
//! inode allocation, orphan-list changes, and for a last link the release of
//! the inode (`inode_store`). A large file that loses its last link is freed
//! in steps after the handle closes, by the reaper (`reaper`).
//!
//! Locking: the parent and child inodes are locked in inode-number order
//! (`inode::lock_many`); an entry found before locking is looked up again
//! under the locks.
//!
//! The dentry cache (`dcache`): each operation drops the names it changes
//! under the directory's exclusive lock before changing the tree, and caches
//! the new state (the new inode, or a negative entry after unlink and rmdir)
//! once it succeeded, still under the lock. The EEXIST checks of create and
//! link ask the cache first: the kernel's LOOKUP before a create has left a
//! negative entry there.

use crate::dcache::{Cached, DentryCache};
use crate::engine::Engine;
use crate::error::{FsError, Result};
use crate::file;
use crate::inode::{find, lock_many, InodeGuard, InodeState};
use crate::inode_store::InodeStore;
use crate::journal::credits;
use crate::types::*;
use crate::{acl, dir, xattr};
use cairn_format::dirent::dtype_of_mode;
use cairn_format::inode::*;
use cairn_format::{NAME_MAX, SYMLINK_MAX};
use parking_lot::Mutex;
use std::sync::Arc;

/// The ACLs a new inode inherits from its directory's default ACL.
#[derive(Default)]
struct Inherited {
    access: Option<Vec<u8>>,
    default: Option<Vec<u8>>,
}

impl Inherited {
    /// Credits of setting them: per xattr, a block shared, allocated or
    /// changed, and the previous one released.
    fn credits(&self) -> u64 {
        let n = u64::from(self.access.is_some()) + u64::from(self.default.is_some());
        n * (credits::ALLOC + credits::FREE + 2)
    }

    fn apply(&self, tx: &crate::tx::Tx<'_>, st: &mut InodeState) -> Result<()> {
        if let Some(a) = &self.access {
            xattr::set(tx, st, acl::ACCESS, a, 0)?;
        }
        if let Some(d) = &self.default {
            xattr::set(tx, st, acl::DEFAULT, d, 0)?;
        }
        Ok(())
    }
}

mod rename;

/// A name a directory entry may have: not empty, `.` or `..`, no `/` or
/// NUL, at most `NAME_MAX` bytes.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::Errno(libc::ENAMETOOLONG));
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
        return Err(FsError::Errno(libc::EINVAL));
    }
    Ok(())
}

/// The namespace of a mount: the dentry cache and the directory operations
/// (see the module essay).
pub struct Namespace {
    engine: Arc<Engine>,
    inodes: Arc<InodeStore>,
    dcache: DentryCache,
    /// Serialises renames between directories (see `rename`).
    rename_lock: Mutex<()>,
}

impl Namespace {
    pub(crate) fn new(engine: Arc<Engine>, inodes: Arc<InodeStore>, dcache: DentryCache) -> Namespace {
        Namespace { engine, inodes, dcache, rename_lock: Mutex::new(()) }
    }

    /// The dentry cache (its counters for `cairn stats`).
    pub(crate) fn dcache(&self) -> &DentryCache {
        &self.dcache
    }

    /// The inode `name` names in directory `dir` (locked by the caller,
    /// shared or exclusive), through the dentry cache: a miss reads the
    /// directory and caches what it found, or that nothing was.
    pub(crate) fn lookup_name(&self, dir: &InodeState, name: &[u8]) -> Result<Option<u64>> {
        // After an abort the tree may no longer be what the cache saw.
        let cached = if self.engine.txm().latch.aborted() { Cached::Miss } else { self.dcache.lookup(dir, name) };
        match cached {
            Cached::Found(ino, _) => Ok(Some(ino)),
            Cached::Negative => Ok(None),
            Cached::Miss => {
                let found = dir::lookup(self.engine.meta(), dir, name)?.map(|(_, e)| (e.ino, e.dtype));
                if !self.engine.txm().latch.aborted() {
                    self.dcache.insert(dir, name, found);
                }
                Ok(found.map(|(ino, _)| ino))
            }
        }
    }
}

impl Namespace {
    /// A new inode's mode and ACLs in directory `parent`: with a default
    /// ACL there, the inode inherits it (masked by `mode`; no umask), and a
    /// directory keeps it as its own default; without one, the umask.
    fn inherit(&self, parent: &InodeState, mode: u32, ctx: &Ctx) -> Result<(u32, Inherited)> {
        match xattr::get(self.engine.meta(), parent, acl::DEFAULT) {
            Ok(v) => {
                let (mode, access) = acl::Acl::parse(&v)?.inherit(mode);
                let default = (mode & S_IFMT == S_IFDIR).then_some(v);
                Ok((mode, Inherited { access: access.map(|a| a.encode()), default }))
            }
            Err(FsError::Errno(libc::ENODATA)) => Ok((mode & !(ctx.umask & 0o777), Inherited::default())),
            Err(e) => Err(e),
        }
    }

    /// Credits of adding an entry to `dir`.
    fn entry_add_credits(&self, dir: &InodeState) -> Result<u64> {
        Ok(credits::tree_insert(crate::dir::levels(self.engine.meta(), dir)?))
    }

    /// Shared body of mknod/mkdir/symlink.
    fn create(&self, ctx: &Ctx, parent: u64, name: &[u8], mode: u32, rdev: u64, target: Option<&[u8]>) -> Result<Attr> {
        check_name(name)?;
        let a = self.create_in(ctx, parent, name, mode, rdev, target)?;
        self.dirsync(parent)?;
        Ok(a)
    }

    fn create_in(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        target: Option<&[u8]>,
    ) -> Result<Attr> {
        self.engine.change(credits::DEFAULT, |tx| {
            let p = self.inodes.iget(parent)?;
            let mut pg = p.write();
            if !pg.d.is_dir() {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
            if pg.d.nlink == 0 {
                return Err(FsError::Errno(libc::ENOENT));
            }
            if self.lookup_name(&pg, name)?.is_some() {
                return Err(FsError::Errno(libc::EEXIST));
            }
            crate::inode_flags::refuse_if_immutable(&pg)?;
            let is_dir = mode & S_IFMT == S_IFDIR;
            if is_dir && pg.d.nlink >= u32::MAX - 1 {
                return Err(FsError::Errno(libc::EMLINK));
            }
            // Inode number, the new inode and its parent, the entry, a
            // symlink's block, and the undo of a failed create.
            let undo = credits::ALLOC + credits::INODE + credits::FREE;
            let symlink_block = match target {
                Some(t) if t.len() > DATA_AREA => credits::map_extent(1) + credits::INODE,
                _ => 0,
            };
            let (mode, acls) =
                if target.is_some() { (mode, Inherited::default()) } else { self.inherit(&pg, mode, ctx)? };
            tx.require(
                credits::ALLOC
                    + 2 * credits::INODE
                    + self.entry_add_credits(&pg)?
                    + symlink_block
                    + undo
                    + acls.credits(),
            )?;
            let (ino, d) = self.inodes.new_inode(tx, ctx, &pg, mode, rdev)?;
            let r = self.inodes.cache().insert(ino, d);
            let mut st = r.write();
            self.dcache.invalidate(&pg, name);
            let filled = (|| {
                if let Some(t) = target {
                    if t.len() <= DATA_AREA {
                        st.d.size = t.len() as u64;
                        st.d.data = DataArea::Inline(t.to_vec());
                    } else {
                        let (n, _) = file::write(tx, &mut st, 0, t)?;
                        if n as usize != t.len() {
                            // A short write (a full file system): no
                            // truncated link target, undo the create.
                            return Err(FsError::Errno(libc::ENOSPC));
                        }
                    }
                }
                acls.apply(tx, &mut st)?;
                self.inodes.store(tx, &st)?;
                dir::add(tx, &mut pg, name, ino, dtype_of_mode(mode))
            })();
            if let Err(e) = filled {
                // Undo: nothing may stay half-created (the caller may retry).
                st.d.nlink = 0;
                if let Err(e2) = self.inodes.release_unlinked(tx, &mut st) {
                    tracing::error!(ino, error = %e2, "could not undo a failed create");
                }
                return Err(e);
            }
            self.inodes.cache().add_lookups(ino, 1);
            let t = now();
            pg.d.mtime = t;
            pg.d.ctime = t;
            if is_dir {
                pg.d.nlink += 1;
            }
            self.inodes.store(tx, &pg)?;
            self.dcache.insert(&pg, name, Some((ino, dtype_of_mode(mode))));
            Ok(self.inodes.attr(&st))
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
        self.engine.change(credits::DEFAULT, |tx| {
            let p = self.inodes.iget(parent)?;
            let pg = p.read();
            if !pg.d.is_dir() {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
            let (mode, acls) = self.inherit(&pg, S_IFREG | (mode & 0o7777), ctx)?;
            tx.require(credits::ALLOC + credits::INODE + self.inodes.orphan_credits()? + acls.credits())?;
            let (ino, mut d) = self.inodes.new_inode(tx, ctx, &pg, mode, 0)?;
            d.nlink = 0;
            let r = self.inodes.cache().insert(ino, d);
            let mut st = r.write();
            self.inodes.cache().add_lookups(ino, 1);
            self.inodes.orphan_add(tx, &mut st)?;
            acls.apply(tx, &mut st)?;
            self.inodes.store(tx, &st)?;
            Ok(self.inodes.attr(&st))
        })
    }

    /// Adds a hard link. Increments the lookup count.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr> {
        check_name(newname)?;
        let a = self.link_in(ino, newparent, newname)?;
        self.dirsync(newparent)?;
        Ok(a)
    }

    fn link_in(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr> {
        self.engine.change(credits::DEFAULT, |tx| {
            let p = self.inodes.iget(newparent)?;
            let c = self.inodes.iget(ino)?;
            let mut gs = lock_many(&[&p, &c]);
            {
                let pg = find(&mut gs, newparent);
                if !pg.d.is_dir() {
                    return Err(FsError::Errno(libc::ENOTDIR));
                }
                if pg.d.nlink == 0 {
                    return Err(FsError::Errno(libc::ENOENT));
                }
                if self.lookup_name(pg, newname)?.is_some() {
                    return Err(FsError::Errno(libc::EEXIST));
                }
                crate::inode_flags::refuse_if_immutable(pg)?;
            }
            let (mode, nlink) = {
                let cg = find(&mut gs, ino);
                crate::inode_flags::refuse_if_protected(cg)?;
                (cg.d.mode, cg.d.nlink)
            };
            if mode & S_IFMT == S_IFDIR {
                return Err(FsError::Errno(libc::EPERM));
            }
            if nlink >= u32::MAX - 1 {
                return Err(FsError::Errno(libc::EMLINK));
            }
            let add = self.entry_add_credits(find(&mut gs, newparent))?;
            tx.require(add + 2 * credits::INODE + self.inodes.orphan_credits()?)?;
            let t = now();
            {
                let pg = find(&mut gs, newparent);
                self.dcache.invalidate(pg, newname);
                dir::add(tx, pg, newname, ino, dtype_of_mode(mode))?;
                pg.d.mtime = t;
                pg.d.ctime = t;
                self.inodes.store(tx, pg)?;
            }
            let cg = find(&mut gs, ino);
            cg.d.nlink += 1;
            cg.d.ctime = t;
            if cg.d.nlink == 1 {
                self.inodes.orphan_remove(tx, cg)?;
            }
            self.inodes.cache().add_lookups(ino, 1);
            self.inodes.store(tx, cg)?;
            let attr = self.inodes.attr(cg);
            self.dcache.insert(find(&mut gs, newparent), newname, Some((ino, dtype_of_mode(mode))));
            Ok(attr)
        })
    }

    /// Looks `name` up in `parent` and locks both, re-checking the entry.
    fn lock_entry(&self, parent: u64, name: &[u8]) -> Result<(Vec<InodeGuard>, u64, u64)> {
        let p = self.inodes.iget(parent)?;
        for _ in 0..64 {
            let (key, ino, changes) = {
                let pg = p.read();
                if !pg.d.is_dir() {
                    return Err(FsError::Errno(libc::ENOTDIR));
                }
                let (k, e) = dir::lookup(self.engine.meta(), &pg, name)?.ok_or(FsError::Errno(libc::ENOENT))?;
                (k, e.ino, pg.entry_changes)
            };
            let c = self.inodes.iget(ino)?;
            let mut gs = lock_many(&[&p, &c]);
            if find(&mut gs, parent).entry_changes == changes {
                // No entry changed in between: the one found is still there.
                return Ok((gs, key, ino));
            }
            let again = dir::lookup(self.engine.meta(), find(&mut gs, parent), name)?;
            if again.is_some_and(|(k, e)| k == key && e.ino == ino) {
                return Ok((gs, key, ino));
            }
        }
        Err(FsError::Errno(libc::EAGAIN))
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
        self.engine.change(credits::DEFAULT, |tx| {
            let (mut gs, key, ino) = self.lock_entry(parent, name)?;
            if ino == parent {
                return Err(FsError::Errno(libc::EINVAL));
            }
            crate::inode_flags::refuse_if_protected(find(&mut gs, parent))?;
            {
                let cg = find(&mut gs, ino);
                crate::inode_flags::refuse_if_protected(cg)?;
                match (want_dir, cg.d.is_dir()) {
                    (false, true) => return Err(FsError::Errno(libc::EISDIR)),
                    (true, false) => return Err(FsError::Errno(libc::ENOTDIR)),
                    (true, true) if cg.d.entries > 0 => return Err(FsError::Errno(libc::ENOTEMPTY)),
                    _ => {}
                }
            }
            let levels = crate::dir::levels(self.engine.meta(), find(&mut gs, parent))?;
            tx.require(
                credits::tree_remove(levels) + credits::INODE + self.inodes.drop_link_credits(find(&mut gs, ino))?,
            )?;
            let t = now();
            // The link first: its last one puts the inode on the orphan
            // list, an insert that may allocate (and fail on a full disk)
            // before anything else has changed; removing the entry
            // allocates nothing.
            self.inodes.drop_link(tx, find(&mut gs, ino), want_dir)?;
            {
                let pg = find(&mut gs, parent);
                self.dcache.invalidate(pg, name);
                dir::remove(tx, pg, key)?;
                pg.d.mtime = t;
                pg.d.ctime = t;
                if want_dir {
                    pg.d.nlink = pg.d.nlink.saturating_sub(1);
                }
                self.inodes.store(tx, pg)?;
            }
            // Into the name's own slot only: a removal (a whole `rm -rf`)
            // allocates no negative entries.
            self.dcache.record_gone(find(&mut gs, parent), name);
            Ok(())
        })
    }

    /// Removes a non-directory entry.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.remove_entry(parent, name, false)?;
        self.inodes.after_unlink();
        self.dirsync(parent)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.remove_entry(parent, name, true)?;
        self.inodes.after_unlink();
        self.dirsync(parent)
    }

    /// Renames, with `RENAME_NOREPLACE` / `RENAME_EXCHANGE` / `RENAME_WHITEOUT` flags.
    pub fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8], flags: u32) -> Result<()> {
        self.rename_as(&Ctx::root(), parent, name, newparent, newname, flags)
    }

    /// [`Namespace::rename`] on behalf of `ctx`, who owns the whiteout that
    /// RENAME_WHITEOUT leaves (as the kernel's `vfs_whiteout` does).
    pub fn rename_as(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        check_name(name)?;
        check_name(newname)?;
        let exchange = flags & RENAME_EXCHANGE != 0;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || exchange && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0
        {
            return Err(FsError::Errno(libc::EINVAL));
        }
        // Moves between directories are serialised (the VFS does the same
        // with s_vfs_rename_mutex): the below-itself check walks ancestors.
        let _cross = (parent != newparent).then(|| self.rename_lock.lock());
        self.engine.change(credits::DEFAULT, |tx| {
            rename::rename(self, tx, ctx, &rename::Names { parent, name, newparent, newname, flags })
        })?;
        self.inodes.after_unlink();
        self.dirsync(parent)?;
        if newparent != parent {
            self.dirsync(newparent)?;
        }
        Ok(())
    }

    /// After a change of directory `dir`'s entries: commits it if the
    /// directory is `D` or `S` (chattr; see `inode_flags`).
    fn dirsync(&self, dir: u64) -> Result<()> {
        if self.inodes.cache().flags_in_use() && crate::inode_flags::is_dirsync(&self.inodes.iget(dir)?.read()) {
            self.engine.sync()?;
        }
        Ok(())
    }
}
