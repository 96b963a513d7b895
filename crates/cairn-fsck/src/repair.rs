//! Applying the repairs the passes decided, object by object.
//!
//! ## Purpose
//! Passes 1–4 only *decide* repairs (recorded in [`Ctx`]); nothing is written
//! while the image is still being read, so every decision is made against one
//! consistent view. This module then writes them, before pass 5 rebuilds the
//! bitmaps and counters from the final state:
//!
//! * inode checksums that were the inode's only fault, rewritten; inodes
//!   that do not decode, their slot zeroed (cleared);
//! * inode field rewrites — link count, block count, `parent`, `entries`,
//!   orphan flag — by read-modify-write of the inode with a fresh checksum
//!   (`DiskInode::encode`); an inode that no longer decodes is left alone;
//! * inodes freed by the link-count pass: their slot is rewritten the way the
//!   engine leaves a freed inode (no links, no size, no blocks, no xattr
//!   block); pass 5 clears their bitmap bit and releases their blocks;
//! * rebuilt directory trees (`salvage`), written first, then the inode
//!   fixes that point their directories at them;
//! * directory entries: a wrong file type is rewritten in place; an entry
//!   naming an inode that is not in use is removed from its leaf, provided
//!   the leaf keeps at least one entry (removing a leaf would change the
//!   tree's shape, which fsck does not do);
//! * xattr blocks: refcounts, and entries whose external value is damaged
//!   dropped (pass 5 then frees the value's blocks), re-encoded with a
//!   fresh checksum;
//! * orphan-list entries naming inodes not in use; when the list is a single
//!   leaf holding only such entries, the list is emptied (root 0) and pass 5
//!   releases the leaf.
//!
//! Every write recomputes checksums with the format crate's encoders. A
//! repair that cannot be applied is recorded as a problem left uncorrected,
//! and the verification run after the repair reports what remains.

use crate::btree::rewrite_leaf;
use crate::ctx::{Ctx, DirentFix, Owner};
use crate::error::FsckError;
use crate::problems::Code;
use cairn_format::dirent::Dirent;
use cairn_format::inode::{DataArea, DiskInode, INODE_FLAG_ORPHAN, INODE_SIZE};
use cairn_format::xattr::XattrBlock;
use std::collections::{BTreeMap, BTreeSet};

/// Applies every decided object repair.
pub fn apply(ctx: &mut Ctx) -> Result<(), FsckError> {
    checksums_and_clears(ctx)?;
    crate::salvage::write_trees(ctx)?;
    inodes(ctx)?;
    dirents(ctx)?;
    xattrs(ctx)?;
    orphans(ctx)?;
    Ok(())
}

/// Rewrites the checksum of inodes whose only fault it was, and zeroes the
/// slots of inodes that do not decode.
fn checksums_and_clears(ctx: &mut Ctx) -> Result<(), FsckError> {
    for ino in std::mem::take(&mut ctx.checksum_fixes) {
        let (blk, off) = ctx.geo.inode_location(ino);
        let mut b = ctx.img.read_block(blk)?;
        if let Ok(d) = DiskInode::decode_ignoring_checksum(ctx.seed, ino, &b[off..off + INODE_SIZE]) {
            d.encode(ctx.seed, ino, &mut b[off..off + INODE_SIZE]);
            ctx.img.write_block(blk, &b)?;
        }
    }
    for ino in std::mem::take(&mut ctx.cleared) {
        let (blk, off) = ctx.geo.inode_location(ino);
        let mut b = ctx.img.read_block(blk)?;
        b[off..off + INODE_SIZE].fill(0);
        ctx.img.write_block(blk, &b)?;
    }
    Ok(())
}

fn rewrite_inode(ctx: &mut Ctx, ino: u64, f: impl FnOnce(&mut DiskInode)) -> Result<bool, FsckError> {
    let (blk, off) = ctx.geo.inode_location(ino);
    let mut b = ctx.img.read_block(blk)?;
    let Ok(mut d) = DiskInode::decode(ctx.seed, ino, &b[off..off + INODE_SIZE]) else { return Ok(false) };
    f(&mut d);
    d.encode(ctx.seed, ino, &mut b[off..off + INODE_SIZE]);
    ctx.img.write_block(blk, &b)?;
    Ok(true)
}

fn inodes(ctx: &mut Ctx) -> Result<(), FsckError> {
    let fixes = std::mem::take(&mut ctx.inode_fixes);
    for (ino, fx) in fixes {
        if ctx.inodes.get(&ino).is_some_and(|i| i.freed) {
            continue;
        }
        let ok = rewrite_inode(ctx, ino, |d| {
            if let Some(n) = fx.nlink {
                d.nlink = n;
            }
            if let Some(b) = fx.blocks {
                d.blocks = b;
            }
            if let Some(p) = fx.parent {
                d.parent = p;
            }
            if let Some(e) = fx.entries {
                d.entries = e;
            }
            if let Some(x) = fx.xattr_block {
                d.xattr_block = x;
            }
            if let Some(r) = fx.tree_root {
                d.data = DataArea::Tree(r);
            }
            if let Some(list) = &fx.inline_extents {
                d.data = DataArea::Extents(list.clone());
            }
            d.flags = (d.flags | fx.set_flags) & !fx.clear_flags;
        })?;
        if !ok {
            ctx.report.problem(
                Code::RepairNotApplied,
                format!("inode {ino}: could not apply the repair (the inode no longer decodes)"),
            );
        }
    }
    let mut freed: Vec<u64> = ctx.inodes.iter().filter(|(_, i)| i.freed).map(|(k, _)| *k).collect();
    freed.sort_unstable();
    for ino in freed {
        rewrite_inode(ctx, ino, |d| {
            d.nlink = 0;
            d.size = 0;
            d.blocks = 0;
            d.xattr_block = 0;
            d.flags &= !INODE_FLAG_ORPHAN;
            d.data = if d.is_dir() { DataArea::Tree(0) } else { DataArea::Extents(Vec::new()) };
        })?;
    }
    Ok(())
}

fn dirents(ctx: &mut Ctx) -> Result<(), FsckError> {
    let mut by_leaf: BTreeMap<u64, Vec<(u64, u64, DirentFix)>> = BTreeMap::new();
    for (leaf, dir, key, fix) in std::mem::take(&mut ctx.dirent_fixes) {
        by_leaf.entry(leaf).or_default().push((dir, key, fix));
    }
    for (leaf, fixes) in by_leaf {
        let ok = rewrite_leaf(&mut ctx.img, ctx.seed, leaf, |entries| {
            for (dir, key, fix) in &fixes {
                match fix {
                    DirentFix::Remove => entries.retain(|(k, _)| k != key),
                    DirentFix::Dtype(t) => {
                        if let Some((_, v)) = entries.iter_mut().find(|(k, _)| k == key) {
                            if let Ok(mut e) = Dirent::decode(*dir, v) {
                                e.dtype = *t;
                                *v = e.encode();
                            }
                        }
                    }
                }
            }
        })?;
        if !ok {
            let dir = fixes.first().map_or(0, |f| f.0);
            ctx.report.problem(
                Code::LeafRewriteFailed,
                format!("directory {dir}: could not rewrite leaf {leaf} (removing its entries would empty it)"),
            );
        }
    }
    Ok(())
}

fn xattrs(ctx: &mut Ctx) -> Result<(), FsckError> {
    let refcounts = std::mem::take(&mut ctx.xattr_fixes);
    let mut drops = std::mem::take(&mut ctx.xattr_drops);
    let blocks: BTreeSet<u64> = refcounts.keys().chain(drops.keys()).copied().collect();
    for blk in blocks {
        let data = ctx.img.read_block(blk)?;
        let Ok(mut x) = XattrBlock::decode(ctx.seed, blk, &data) else { continue };
        if let Some(r) = refcounts.get(&blk) {
            x.refcount = *r;
        }
        let dropped = drops.remove(&blk).unwrap_or_default();
        x.entries.retain(|e| !dropped.iter().any(|(ns, n)| *ns == e.namespace && *n == e.name));
        let mut out = vec![0u8; data.len()];
        x.encode(ctx.seed, blk, &mut out);
        ctx.img.write_block(blk, &out)?;
    }
    Ok(())
}

fn orphans(ctx: &mut Ctx) -> Result<(), FsckError> {
    let removals = std::mem::take(&mut ctx.orphan_removals);
    if removals.is_empty() {
        return Ok(());
    }
    let mut by_leaf: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (leaf, ino) in removals {
        by_leaf.entry(leaf).or_default().push(ino);
    }
    for (leaf, inos) in by_leaf {
        let ok = rewrite_leaf(&mut ctx.img, ctx.seed, leaf, |e| e.retain(|(k, _)| !inos.contains(k)))?;
        if ok {
            continue;
        }
        let all_listed_here = ctx.orphans.values().all(|l| *l == leaf);
        if leaf == ctx.sb.orphan_root && all_listed_here && ctx.orphans.len() == inos.len() {
            // The whole list was this one leaf of stale entries: empty it.
            ctx.sb.orphan_root = 0;
            ctx.sb_dirty = true;
            ctx.claims.retain(|c| c.owner != Owner::Orphans);
        } else {
            ctx.report.problem(
                Code::OrphanRemovalFailed,
                format!("the orphan list: could not remove stale entries from leaf {leaf}"),
            );
        }
    }
    Ok(())
}
