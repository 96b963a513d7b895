//! Passes 3 and 4: link counts, the orphan list, shared xattr blocks.
//!
//! ## Purpose
//! After pass 2 every in-use inode knows how many directory entries name it.
//! This pass compares that with what the inode says, following the engine's
//! rules:
//!
//! * a non-directory's `nlink` equals the entries naming it;
//! * a directory's `nlink` is `2 + subdirectories` (its own `.`, the entry in
//!   its parent, and each child's `..`); the root counts the same way;
//! * an inode no entry names must have `nlink == 0` **and** be on the orphan
//!   list (unlinked while open, or an `O_TMPFILE` file): mount frees exactly
//!   what that list holds. An inode with no links that is not listed would
//!   leak forever; one still linked but listed would be freed under its
//!   entries at the next mount.
//!
//! The orphan list is a B+tree (kind `KIND_ORPHANS`, owner 0) rooted at the
//! superblock's `orphan_root`, keyed by inode number with empty values.
//! [`walk_orphans`] verifies it as a tree (see `btree`) and claims its
//! nodes; [`run`] then checks that every listed inode is in use and carries
//! `INODE_FLAG_ORPHAN`, and that every inode with that flag is listed.
//!
//! Finally each xattr block's refcount must equal the number of live inodes
//! pointing at it (blocks are shared mbcache-style).
//!
//! ## What it concludes (and repairs, with `--repair`)
//! * wrong link counts are set to the counted value;
//! * an unlisted inode with no links and no entries is freed (what mount
//!   would have done had it been listed); pass 5 then releases its blocks;
//! * a listed inode that is still named gets its link count from its entries
//!   (mount then drops it from the list instead of freeing it);
//! * missing or stray orphan flags are set or cleared;
//! * list entries naming inodes that are not in use are removed from their
//!   leaf (when it keeps other entries);
//! * xattr refcounts are set to the number of live inodes pointing at them.
//!
//! Inodes that have links but no entries were reconnected to `/lost+found`
//! by `salvage` (repair), unless some directory could not be read; those
//! left, and a directory with several parents, are reported and left alone.

use crate::btree;
use crate::ctx::{Ctx, Owner};
use crate::inodes::type_name;
use crate::problems::{Code, Pass};
use crate::report::entries_point;
use cairn_format::btree::KIND_ORPHANS;
use cairn_format::inode::INODE_FLAG_ORPHAN;
use cairn_format::ROOT_INO;

/// Walks the orphan list and claims its nodes.
pub fn walk_orphans(ctx: &mut Ctx) {
    let root = ctx.sb.orphan_root;
    if root == 0 {
        return;
    }
    let w = btree::walk(
        &mut ctx.img,
        &mut ctx.report,
        &ctx.geo,
        ctx.seed,
        KIND_ORPHANS,
        0,
        root,
        "the orphan list",
        Pass::Links,
    );
    for &b in &w.nodes {
        ctx.claim(b, 1, Owner::Orphans);
    }
    if !w.complete {
        ctx.incomplete = true;
    }
    for (leaf, ino, value) in w.entries {
        if !value.is_empty() {
            ctx.report.problem(
                Code::OrphanValueSize,
                format!("the orphan list: entry for inode {ino} carries a {}-byte value", value.len()),
            );
        }
        ctx.orphans.insert(ino, leaf);
    }
}

/// Checks link counts, orphans and xattr refcounts.
pub fn run(ctx: &mut Ctx) {
    // If some directory could not be read in full, entries may exist that
    // fsck did not see: never lower a link count or free an inode then.
    let blind = ctx.inodes.values().any(|i| i.bad || (i.is_dir() && (i.damaged || i.tree_damaged)));
    if blind {
        ctx.report.note("some directories could not be read completely: link counts are only raised, never lowered");
    }
    let repair = ctx.repair;
    let mut inos: Vec<u64> = ctx.inodes.keys().copied().collect();
    inos.sort_unstable();
    for ino in inos {
        let i = &ctx.inodes[&ino];
        if i.bad {
            continue;
        }
        let listed = ctx.orphans.contains_key(&ino);
        let flagged = i.flags & INODE_FLAG_ORPHAN != 0;
        let what = type_name(i.mode);
        let expected: Option<u64> = if i.is_dir() {
            if ino == ROOT_INO || i.parents.len() == 1 {
                Some(2 + i.subdirs)
            } else if i.parents.is_empty() {
                Some(0)
            } else {
                None // several parents: reported by pass 2
            }
        } else {
            Some(i.refs)
        };
        let Some(expected) = expected else { continue };
        let nlink = u64::from(i.nlink);
        if expected == 0 {
            if nlink != 0 && listed {
                let msg = format!("inode {ino} ({what}) is on the orphan list with link count {nlink}, but no directory entry points to it");
                let fix = repair && !blind && !(i.is_dir() && i.dirents_found > 0);
                ctx.report.push(Code::OrphanListedButLinked, msg, fix);
                if fix {
                    ctx.fix(ino).nlink = Some(0);
                }
            } else if nlink != 0 {
                ctx.report.problem(
                    Code::InodeLost,
                    format!("inode {ino} ({what}) has link count {nlink}, but no directory entry points to it (it is lost; a repair reconnects it to /lost+found when every directory could be read)"),
                );
            } else if !listed {
                let has_entries = i.is_dir() && i.dirents_found > 0;
                let msg = format!("inode {ino} ({what}) has no links and is not on the orphan list (its space would never be reclaimed)");
                let fix = repair && !has_entries && !blind;
                ctx.report.push(Code::UnlinkedNotOrphan, format!("{msg}{}", if fix { "; freed" } else { "" }), fix);
                if fix {
                    if let Some(x) = ctx.inodes.get_mut(&ino) {
                        x.freed = true;
                    }
                }
                continue;
            }
        } else if nlink != expected {
            let msg = if i.is_dir() {
                format!(
                    "directory {ino}: link count is {nlink}, but it should be {expected} (2 + {} subdirectories)",
                    i.subdirs
                )
            } else {
                format!("inode {ino} ({what}): link count is {nlink}, but {} to it", entries_point(expected))
            };
            let fix = repair && (!blind || expected > nlink);
            ctx.report.push(Code::LinkCount, msg, fix);
            if fix {
                ctx.fix(ino).nlink = Some(expected.min(u64::from(u32::MAX)) as u32);
            }
        }
        check_orphan_flag(ctx, ino, listed, flagged);
    }
    let listed: Vec<(u64, u64)> = ctx.orphans.iter().map(|(i, l)| (*i, *l)).collect();
    let mut live_orphans = 0;
    for (ino, leaf) in listed {
        if ctx.inodes.get(&ino).is_some_and(|i| !i.freed) {
            live_orphans += 1;
            continue;
        }
        ctx.report.push(
            Code::OrphanNotInUse,
            format!("the orphan list names inode {ino}, which is not in use"),
            repair,
        );
        if repair {
            ctx.orphan_removals.push((leaf, ino));
        }
    }
    ctx.report.orphans = live_orphans;
    check_xattr_refcounts(ctx);
}

/// An inode's orphan flag against the orphan list: set on every inode the
/// list holds, on no other; a repair sets or clears the flag to match the
/// list.
fn check_orphan_flag(ctx: &mut Ctx, ino: u64, listed: bool, flagged: bool) {
    let (code, msg) = match (listed, flagged) {
        (true, false) => (Code::OrphanFlagMissing, "is on the orphan list but lacks the orphan flag"),
        (false, true) => (Code::OrphanFlagStray, "has the orphan flag but is not on the orphan list"),
        _ => return,
    };
    ctx.report.push(code, format!("inode {ino} {msg}"), ctx.repair);
    if ctx.repair {
        let fix = ctx.fix(ino);
        if listed {
            fix.set_flags |= INODE_FLAG_ORPHAN;
        } else {
            fix.clear_flags |= INODE_FLAG_ORPHAN;
        }
    }
}

fn check_xattr_refcounts(ctx: &mut Ctx) {
    let mut blocks: Vec<u64> = ctx.xattrs.keys().copied().collect();
    blocks.sort_unstable();
    for blk in blocks {
        let x = &ctx.xattrs[&blk];
        if !x.ok {
            continue;
        }
        let live = x.inodes.iter().filter(|i| !ctx.inodes.get(i).is_some_and(|y| y.freed)).count() as u32;
        let total = x.inodes.len() as u32;
        if live == 0 {
            continue; // released with its last inode (pass 5 frees it)
        }
        if x.refcount != total {
            let msg = format!("xattr block {blk}: refcount is {}, but {total} inode(s) point to it", x.refcount);
            ctx.report.push(Code::XattrRefcount, msg, ctx.repair);
        }
        if ctx.repair && x.refcount != live {
            ctx.xattr_fixes.insert(blk, live);
        }
    }
}
