//! rename(2) and renameat2's RENAME_NOREPLACE / RENAME_EXCHANGE /
//! RENAME_WHITEOUT.
//!
//! All inodes involved (both parents, the source, an existing target) are
//! locked together in inode-number order after a first unlocked lookup; the
//! lookups are repeated under the locks and the operation retried if the
//! names moved meanwhile. Moving a directory rewrites its `parent` field
//! ("..") and the two parents' link counts in the same transaction.
//! Both names leave the dentry cache before the trees change and come back
//! (the source negative, or the other inode after an exchange) once the
//! rename succeeded, under the parents' exclusive locks.
//!
//! RENAME_WHITEOUT (overlayfs's upper directory: a file removed or renamed
//! over a lower layer must stay hidden) leaves a *whiteout* at the source
//! name in the same transaction: a new character device 0:0 with mode 0,
//! owned by the caller (the parent's group under a set-gid parent), its
//! entry taking the source's key in place. The whiteout inode is allocated
//! before anything else changes, so a full inode table fails the rename
//! with nothing done.

use super::Namespace;
use crate::dir;
use crate::error::{FsError, Result};
use crate::inode::{find, lock_many, InodeGuard, InodeRef};
use crate::journal::credits;
use crate::tx::Tx;
use crate::types::now as now_ts;
use crate::types::{Ctx, Timestamp, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
use cairn_format::dirent::dtype_of_mode;
use cairn_format::ROOT_INO;

/// The names a rename moves between, and its flags.
pub(super) struct Names<'n> {
    pub parent: u64,
    pub name: &'n [u8],
    pub newparent: u64,
    pub newname: &'n [u8],
    pub flags: u32,
}

impl Names<'_> {
    fn exchange(&self) -> bool {
        self.flags & RENAME_EXCHANGE != 0
    }

    fn whiteout(&self) -> bool {
        self.flags & RENAME_WHITEOUT != 0
    }
}

/// What the lookups found: the source entry's key and inode, and the
/// target's (key, inode) if the new name exists.
#[derive(Clone, Copy)]
struct Found {
    k1: u64,
    src: u64,
    dst: Option<(u64, u64)>,
}

/// Renames `n.parent/n.name` to `n.newparent/n.newname` inside `tx`.
pub(super) fn rename(ns: &Namespace, tx: &Tx<'_>, ctx: &Ctx, n: &Names) -> Result<()> {
    let (parent, name, newparent, newname) = (n.parent, n.name, n.newparent, n.newname);
    let p1 = ns.inodes.iget(parent)?;
    let p2 = ns.inodes.iget(newparent)?;
    for _ in 0..64 {
        let look = |p: &InodeRef, name: &[u8]| -> Result<Option<(u64, u64)>> {
            let g = p.read();
            if !g.d.is_dir() {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
            Ok(dir::lookup(tx.meta(), &g, name)?.map(|(k, e)| (k, e.ino)))
        };
        let (k1, src) = look(&p1, name)?.ok_or(FsError::Errno(libc::ENOENT))?;
        let found = Found { k1, src, dst: look(&p2, newname)? };
        let s = ns.inodes.iget(src)?;
        let d = match found.dst {
            Some((_, ino)) => Some(ns.inodes.iget(ino)?),
            None => None,
        };
        refuse_moves_below_itself(ns, n, &found, &s, d.as_ref())?;
        let mut refs = vec![&p1, &p2, &s];
        if let Some(d) = &d {
            refs.push(d);
        }
        let mut gs = lock_many(&refs);
        // Re-check under the locks.
        let again1 = dir::lookup(tx.meta(), find(&mut gs, parent), name)?.map(|(k, e)| (k, e.ino));
        let again2 = dir::lookup(tx.meta(), find(&mut gs, newparent), newname)?.map(|(k, e)| (k, e.ino));
        if again1 != Some((k1, src)) || again2 != found.dst {
            continue;
        }
        return rename_locked(ns, tx, ctx, n, found, &mut gs);
    }
    Err(FsError::Errno(libc::EAGAIN))
}

/// A directory may not move below itself. The walk up from the target
/// takes each inode's lock alone, before the locks below: the caller holds
/// the rename mutex for moves between directories, so no other move
/// changes the ancestry meanwhile (as the VFS's s_vfs_rename_mutex), and
/// walking while holding inode locks could deadlock with a rename that
/// holds an ancestor.
fn refuse_moves_below_itself(ns: &Namespace, n: &Names, f: &Found, s: &InodeRef, d: Option<&InodeRef>) -> Result<()> {
    if n.parent == n.newparent {
        return Ok(());
    }
    let is_dir = |r: &InodeRef| r.read().d.is_dir();
    if is_dir(s) {
        below_itself(ns, f.src, n.newparent)?;
    }
    if let (Some(d), Some((_, dino))) = (d, f.dst) {
        if n.exchange() && is_dir(d) {
            below_itself(ns, dino, n.parent)?;
        }
    }
    Ok(())
}

/// The rename itself, with every inode involved locked and the lookups
/// confirmed.
fn rename_locked(ns: &Namespace, tx: &Tx<'_>, ctx: &Ctx, n: &Names, f: Found, gs: &mut [InodeGuard]) -> Result<()> {
    if find(gs, n.parent).d.nlink == 0 || find(gs, n.newparent).d.nlink == 0 {
        return Err(FsError::Errno(libc::ENOENT));
    }
    refuse_if_flags_forbid(gs, n, &f)?;
    require_credits(ns, tx, gs, n, &f)?;
    let src_mode = find(gs, f.src).d.mode;
    if let Some((_, dino)) = f.dst {
        if dino == f.src {
            return Ok(());
        }
    }
    let t = now_ts();
    // Both names change (or fail half-way): uncached until done.
    ns.dcache.invalidate(find(gs, n.parent), n.name);
    ns.dcache.invalidate(find(gs, n.newparent), n.newname);
    let whiteout_ino = if n.exchange() {
        exchange(ns, tx, gs, n, &f, t)?;
        None
    } else {
        move_entry(ns, tx, ctx, gs, n, &f, t)?
    };
    for ino in [n.parent, n.newparent] {
        let g = find(gs, ino);
        g.d.mtime = t;
        g.d.ctime = t;
        ns.inodes.store(tx, g)?;
    }
    let old_name = match (n.exchange(), f.dst) {
        (true, Some((_, dino))) => Some((dino, dtype_of_mode(find(gs, dino).d.mode))),
        _ => whiteout_ino.map(|w| (w, dtype_of_mode(libc::S_IFCHR))),
    };
    ns.dcache.insert(find(gs, n.parent), n.name, old_name);
    ns.dcache.insert(find(gs, n.newparent), n.newname, Some((f.src, dtype_of_mode(src_mode))));
    Ok(())
}

/// chattr's i and a: the old name is removed, the new one added (and an
/// entry it replaces removed); neither inode may be protected.
fn refuse_if_flags_forbid(gs: &mut [InodeGuard], n: &Names, f: &Found) -> Result<()> {
    use crate::inode_flags::{refuse_if_immutable, refuse_if_protected};
    refuse_if_protected(find(gs, n.parent))?;
    refuse_if_protected(find(gs, f.src))?;
    match f.dst {
        Some((_, dino)) => {
            refuse_if_protected(find(gs, n.newparent))?;
            refuse_if_protected(find(gs, dino))
        }
        None => refuse_if_immutable(find(gs, n.newparent)),
    }
}

/// Worst case: an entry insert (or retarget, a replacing insert), then a
/// second retarget (exchange) or the removal of the old entry and the
/// overwritten target's last link; four inodes; and a whiteout's inode.
fn require_credits(ns: &Namespace, tx: &Tx<'_>, gs: &mut [InodeGuard], n: &Names, f: &Found) -> Result<()> {
    let levels =
        crate::dir::levels(tx.meta(), find(gs, n.parent))?.max(crate::dir::levels(tx.meta(), find(gs, n.newparent))?);
    let target = match f.dst {
        Some((_, dino)) => ns.inodes.drop_link_credits(find(gs, dino))?,
        None => 0,
    };
    let second = credits::tree_insert(levels).max(credits::tree_remove(levels) + target);
    let whiteout = if n.whiteout() { credits::ALLOC + credits::INODE + credits::FREE } else { 0 };
    tx.require(credits::tree_insert(levels) + second + 4 * credits::INODE + whiteout)
}

/// RENAME_EXCHANGE: each name takes the other's inode.
fn exchange(ns: &Namespace, tx: &Tx<'_>, gs: &mut [InodeGuard], n: &Names, f: &Found, t: Timestamp) -> Result<()> {
    let Some((k2, dino)) = f.dst else { return Err(FsError::Errno(libc::ENOENT)) };
    let src_mode = find(gs, f.src).d.mode;
    let src_dir = src_mode & libc::S_IFMT == libc::S_IFDIR;
    let dst_mode = find(gs, dino).d.mode;
    let dst_dir = dst_mode & libc::S_IFMT == libc::S_IFDIR;
    dir::retarget(tx, find(gs, n.parent), f.k1, n.name, dino, dtype_of_mode(dst_mode))?;
    dir::retarget(tx, find(gs, n.newparent), k2, n.newname, f.src, dtype_of_mode(src_mode))?;
    if n.parent != n.newparent && src_dir != dst_dir {
        let (gain, lose) = if src_dir { (n.newparent, n.parent) } else { (n.parent, n.newparent) };
        find(gs, gain).d.nlink += 1;
        let l = find(gs, lose);
        l.d.nlink = l.d.nlink.saturating_sub(1);
    }
    if src_dir {
        find(gs, f.src).d.parent = n.newparent;
    }
    if dst_dir {
        find(gs, dino).d.parent = n.parent;
    }
    for ino in [f.src, dino] {
        let g = find(gs, ino);
        g.d.ctime = t;
        ns.inodes.store(tx, g)?;
    }
    Ok(())
}

/// A plain rename (or RENAME_NOREPLACE, RENAME_WHITEOUT): the new name
/// takes the source (replacing what it named), the old one goes or becomes
/// a whiteout. Returns the whiteout's inode.
fn move_entry(
    ns: &Namespace,
    tx: &Tx<'_>,
    ctx: &Ctx,
    gs: &mut [InodeGuard],
    n: &Names,
    f: &Found,
    t: Timestamp,
) -> Result<Option<u64>> {
    let src_mode = find(gs, f.src).d.mode;
    let src_dir = src_mode & libc::S_IFMT == libc::S_IFDIR;
    if let Some((_, dino)) = f.dst {
        if n.flags & RENAME_NOREPLACE != 0 {
            return Err(FsError::Errno(libc::EEXIST));
        }
        let dg = find(gs, dino);
        match (src_dir, dg.d.is_dir()) {
            (true, false) => return Err(FsError::Errno(libc::ENOTDIR)),
            (false, true) => return Err(FsError::Errno(libc::EISDIR)),
            (true, true) if dg.d.entries > 0 => return Err(FsError::Errno(libc::ENOTEMPTY)),
            _ => {}
        }
    }
    // The whiteout first: its allocation is the step that may fail for
    // want of space, before any entry changes.
    let whiteout = if n.whiteout() {
        let (ino, d) = ns.inodes.new_inode(tx, ctx, find(gs, n.parent), libc::S_IFCHR, 0)?;
        let r = ns.inodes.cache().insert(ino, d);
        ns.inodes.store(tx, &r.write())?;
        Some(r)
    } else {
        None
    };
    if let Err(e) = take_new_name(ns, tx, gs, n, f, src_mode) {
        // Nothing half-done: the whiteout no entry names goes again.
        if let Some(r) = whiteout {
            let mut st = r.write();
            st.d.nlink = 0;
            if let Err(e2) = ns.inodes.release_unlinked(tx, &mut st) {
                tracing::error!(ino = st.ino, error = %e2, "could not undo a whiteout");
            }
        }
        return Err(e);
    }
    let whiteout_ino = whiteout.map(|r| r.read().ino);
    match whiteout_ino {
        Some(w) => dir::retarget(tx, find(gs, n.parent), f.k1, n.name, w, dtype_of_mode(libc::S_IFCHR))?,
        None => dir::remove(tx, find(gs, n.parent), f.k1)?,
    }
    if src_dir && n.parent != n.newparent {
        let op = find(gs, n.parent);
        op.d.nlink = op.d.nlink.saturating_sub(1);
        find(gs, n.newparent).d.nlink += 1;
        find(gs, f.src).d.parent = n.newparent;
    }
    let sg = find(gs, f.src);
    sg.d.ctime = t;
    ns.inodes.store(tx, sg)?;
    Ok(whiteout_ino)
}

/// The new name takes the source: it replaces the target's entry (whose
/// inode loses a link), or is a new entry (which may need a new directory
/// block: ENOSPC).
fn take_new_name(
    ns: &Namespace,
    tx: &Tx<'_>,
    gs: &mut [InodeGuard],
    n: &Names,
    f: &Found,
    src_mode: u32,
) -> Result<()> {
    match f.dst {
        Some((k2, dino)) => {
            let dst_dir = find(gs, dino).d.is_dir();
            dir::retarget(tx, find(gs, n.newparent), k2, n.newname, f.src, dtype_of_mode(src_mode))?;
            if dst_dir {
                let np = find(gs, n.newparent);
                np.d.nlink = np.d.nlink.saturating_sub(1);
            }
            ns.inodes.drop_link(tx, find(gs, dino), dst_dir)
        }
        None => dir::add(tx, find(gs, n.newparent), n.newname, f.src, dtype_of_mode(src_mode)),
    }
}

/// Fails with EINVAL if `dir` is `from` or one of its ancestors.
fn below_itself(ns: &Namespace, dir: u64, from: u64) -> Result<()> {
    let mut cur = from;
    for _ in 0..4096 {
        if cur == dir {
            return Err(FsError::Errno(libc::EINVAL));
        }
        if cur == ROOT_INO {
            return Ok(());
        }
        cur = ns.inodes.iget(cur)?.read().d.parent;
    }
    Err(FsError::Errno(libc::ELOOP))
}
