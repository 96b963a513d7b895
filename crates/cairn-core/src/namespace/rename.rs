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
use crate::inode::find;
use crate::inode::lock_many;
use crate::journal::credits;
use crate::tx::Tx;
use crate::types::now as now_ts;
use crate::types::{Ctx, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
use cairn_format::dirent::dtype_of_mode;
use cairn_format::ROOT_INO;

/// Renames `parent/name` to `newparent/newname` inside `tx`.
#[allow(clippy::too_many_arguments)]
pub fn rename(
    ns: &Namespace,
    tx: &Tx<'_>,
    ctx: &Ctx,
    parent: u64,
    name: &[u8],
    newparent: u64,
    newname: &[u8],
    flags: u32,
) -> Result<()> {
    let meta = tx;
    let p1 = ns.inodes.iget(parent)?;
    let p2 = ns.inodes.iget(newparent)?;
    for _ in 0..64 {
        let look = |p: &crate::inode::InodeRef, n: &[u8]| -> Result<Option<(u64, u64)>> {
            let g = p.read();
            if !g.d.is_dir() {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
            Ok(dir::lookup(meta.meta(), &g, n)?.map(|(k, e)| (k, e.ino)))
        };
        let (k1, src) = look(&p1, name)?.ok_or(FsError::Errno(libc::ENOENT))?;
        let dst = look(&p2, newname)?;
        let s = ns.inodes.iget(src)?;
        let d = match dst {
            Some((_, ino)) => Some(ns.inodes.iget(ino)?),
            None => None,
        };
        // A directory may not move below itself. The walk up from the
        // target takes each inode's lock alone, before the locks below: the
        // caller holds the rename mutex for moves between directories, so
        // no other move changes the ancestry meanwhile (as the VFS's
        // s_vfs_rename_mutex), and walking while holding inode locks could
        // deadlock with a rename that holds an ancestor.
        if parent != newparent {
            let is_dir = |r: &crate::inode::InodeRef| r.read().d.is_dir();
            if is_dir(&s) {
                below_itself(ns, src, newparent)?;
            }
            if let (Some(d), Some((_, dino))) = (&d, dst) {
                if flags & RENAME_EXCHANGE != 0 && is_dir(d) {
                    below_itself(ns, dino, parent)?;
                }
            }
        }
        let mut refs = vec![&p1, &p2, &s];
        if let Some(d) = &d {
            refs.push(d);
        }
        let mut gs = lock_many(&refs);
        // Re-check under the locks.
        let again1 = dir::lookup(meta.meta(), find(&mut gs, parent), name)?.map(|(k, e)| (k, e.ino));
        let again2 = dir::lookup(meta.meta(), find(&mut gs, newparent), newname)?.map(|(k, e)| (k, e.ino));
        if again1 != Some((k1, src)) || again2 != dst {
            continue;
        }
        if find(&mut gs, parent).d.nlink == 0 || find(&mut gs, newparent).d.nlink == 0 {
            return Err(FsError::Errno(libc::ENOENT));
        }
        // chattr's i and a: the old name is removed, the new one added (and
        // an entry it replaces removed); neither inode may be protected.
        {
            use crate::inode_flags::{refuse_if_immutable, refuse_if_protected};
            refuse_if_protected(find(&mut gs, parent))?;
            refuse_if_protected(find(&mut gs, src))?;
            match dst {
                Some((_, dino)) => {
                    refuse_if_protected(find(&mut gs, newparent))?;
                    refuse_if_protected(find(&mut gs, dino))?;
                }
                None => refuse_if_immutable(find(&mut gs, newparent))?,
            }
        }
        // Worst case: an entry insert (or retarget, a replacing insert),
        // then a second retarget (exchange) or the removal of the old entry
        // and the overwritten target's last link; four inodes.
        let levels = crate::dir::levels(meta.meta(), find(&mut gs, parent))?
            .max(crate::dir::levels(meta.meta(), find(&mut gs, newparent))?);
        let target = match dst {
            Some((_, dino)) => ns.inodes.drop_link_credits(find(&mut gs, dino))?,
            None => 0,
        };
        let second = credits::tree_insert(levels).max(credits::tree_remove(levels) + target);
        let whiteout = flags & RENAME_WHITEOUT != 0;
        let whiteout_credits = if whiteout { credits::ALLOC + credits::INODE + credits::FREE } else { 0 };
        tx.require(credits::tree_insert(levels) + second + 4 * credits::INODE + whiteout_credits)?;
        let src_mode = find(&mut gs, src).d.mode;
        let src_dir = src_mode & libc::S_IFMT == libc::S_IFDIR;
        if let Some((_, dino)) = dst {
            if dino == src {
                return Ok(());
            }
        }
        let t = now_ts();
        // Both names change (or fail half-way): uncached until done.
        ns.dcache.invalidate(find(&mut gs, parent), name);
        ns.dcache.invalidate(find(&mut gs, newparent), newname);
        let mut whiteout_ino = None;
        if flags & RENAME_EXCHANGE != 0 {
            let Some((k2, dino)) = dst else { return Err(FsError::Errno(libc::ENOENT)) };
            let dst_mode = find(&mut gs, dino).d.mode;
            let dst_dir = dst_mode & libc::S_IFMT == libc::S_IFDIR;
            dir::retarget(meta, find(&mut gs, parent), k1, name, dino, dtype_of_mode(dst_mode))?;
            dir::retarget(meta, find(&mut gs, newparent), k2, newname, src, dtype_of_mode(src_mode))?;
            if parent != newparent && src_dir != dst_dir {
                let (gain, lose) = if src_dir { (newparent, parent) } else { (parent, newparent) };
                find(&mut gs, gain).d.nlink += 1;
                let l = find(&mut gs, lose);
                l.d.nlink = l.d.nlink.saturating_sub(1);
            }
            if src_dir {
                find(&mut gs, src).d.parent = newparent;
            }
            if dst_dir {
                find(&mut gs, dino).d.parent = parent;
            }
            for ino in [src, dino] {
                let g = find(&mut gs, ino);
                g.d.ctime = t;
                ns.inodes.store(tx, g)?;
            }
        } else {
            if let Some((_, dino)) = dst {
                if flags & RENAME_NOREPLACE != 0 {
                    return Err(FsError::Errno(libc::EEXIST));
                }
                let dg = find(&mut gs, dino);
                match (src_dir, dg.d.is_dir()) {
                    (true, false) => return Err(FsError::Errno(libc::ENOTDIR)),
                    (false, true) => return Err(FsError::Errno(libc::EISDIR)),
                    (true, true) if dg.d.entries > 0 => return Err(FsError::Errno(libc::ENOTEMPTY)),
                    _ => {}
                }
            }
            // The whiteout first: its allocation is the step that may fail
            // for want of space, before any entry changes.
            let mut whiteout_ref = None;
            if whiteout {
                let (ino, d) = ns.inodes.new_inode(tx, ctx, find(&mut gs, parent), libc::S_IFCHR, 0)?;
                let r = ns.inodes.cache().insert(ino, d);
                ns.inodes.store(tx, &r.write())?;
                whiteout_ino = Some(ino);
                whiteout_ref = Some(r);
            }
            let target = (|| {
                if let Some((k2, dino)) = dst {
                    let dst_dir = find(&mut gs, dino).d.is_dir();
                    dir::retarget(meta, find(&mut gs, newparent), k2, newname, src, dtype_of_mode(src_mode))?;
                    if dst_dir {
                        let np = find(&mut gs, newparent);
                        np.d.nlink = np.d.nlink.saturating_sub(1);
                    }
                    ns.inodes.drop_link(tx, find(&mut gs, dino), dst_dir)
                } else {
                    // A new entry may need a new directory block: ENOSPC.
                    dir::add(meta, find(&mut gs, newparent), newname, src, dtype_of_mode(src_mode))
                }
            })();
            if let Err(e) = target {
                // Nothing half-done: the whiteout no entry names goes again.
                if let Some(r) = whiteout_ref {
                    let mut st = r.write();
                    st.d.nlink = 0;
                    if let Err(e2) = ns.inodes.release_unlinked(tx, &mut st) {
                        tracing::error!(ino = st.ino, error = %e2, "could not undo a whiteout");
                    }
                }
                return Err(e);
            }
            match whiteout_ino {
                Some(w) => dir::retarget(meta, find(&mut gs, parent), k1, name, w, dtype_of_mode(libc::S_IFCHR))?,
                None => dir::remove(meta, find(&mut gs, parent), k1)?,
            }
            if src_dir && parent != newparent {
                let op = find(&mut gs, parent);
                op.d.nlink = op.d.nlink.saturating_sub(1);
                find(&mut gs, newparent).d.nlink += 1;
                find(&mut gs, src).d.parent = newparent;
            }
            let sg = find(&mut gs, src);
            sg.d.ctime = t;
            ns.inodes.store(tx, sg)?;
        }
        for ino in [parent, newparent] {
            let g = find(&mut gs, ino);
            g.d.mtime = t;
            g.d.ctime = t;
            ns.inodes.store(tx, g)?;
        }
        let old_name = match (flags & RENAME_EXCHANGE != 0, dst) {
            (true, Some((_, dino))) => Some((dino, dtype_of_mode(find(&mut gs, dino).d.mode))),
            _ => whiteout_ino.map(|w| (w, dtype_of_mode(libc::S_IFCHR))),
        };
        ns.dcache.insert(find(&mut gs, parent), name, old_name);
        ns.dcache.insert(find(&mut gs, newparent), newname, Some((src, dtype_of_mode(src_mode))));
        return Ok(());
    }
    Err(FsError::Errno(libc::EAGAIN))
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
