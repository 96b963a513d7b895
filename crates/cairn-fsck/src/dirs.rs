//! Pass 2: directory entries and the shape of the namespace.
//!
//! ## Purpose
//! Pass 1 verified each directory's entry tree as a B+tree and kept its leaf
//! entries. This pass checks what the entries *mean*:
//!
//! * each value decodes (`ino | dtype | name_len | name`): a name of 1..=255
//!   bytes without `/` or NUL, and never `.` or `..` (those are not stored:
//!   `..` is the directory inode's `parent` field);
//! * each key is the name's seeded hash in the high 32 bits (`name_hash` with
//!   the superblock's `hash_seed`) and a collision index `>= DIRENT_MIN_LOW`
//!   in the low bits; no name appears twice in one directory;
//! * the target is a valid inode number, is in use, and its type matches the
//!   entry's `dtype`. A target whose bitmap bit is clear but whose slot holds
//!   a valid inode with links is taken to be in use (the bitmap lost a bit;
//!   pass 5 sets it again) — freed inodes always have `nlink == 0`;
//! * each directory's `entries` field equals the entries in its tree;
//! * no entry names the root; every other directory is named by exactly one
//!   entry, in the directory its `parent` field names; the root's parent is
//!   itself;
//! * every directory is reachable from the root (a breadth-first walk over
//!   the entries, so cycles in damaged images cannot recurse).
//!
//! ## What it concludes
//! Per inode: how many entries point at it (`refs`), and per directory the
//! number of subdirectories and its parents — the inputs of the link-count
//! pass. Repairs decided here: wrong `dtype` (the leaf is rewritten), wrong
//! `entries` or `parent` fields, and entries pointing at inodes that are not
//! in use (removed from their leaf when the leaf keeps other entries).

use crate::ctx::{Ctx, DirentFix, InodeInfo};
use crate::error::FsckError;
use crate::inodes;
use crate::problems::Code;
use crate::report::name;
use cairn_format::dirent::*;
use cairn_format::{FIRST_INO, ROOT_INO};
use std::collections::{HashMap, VecDeque};

/// Checks every directory entry, then connectivity.
pub fn run(ctx: &mut Ctx) -> Result<(), FsckError> {
    // dir -> child directories (by entry), for the reachability walk.
    let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut all = Vec::new();
    // A directory proven in use in pass 2 adds its entries to ctx.dirents:
    // they are checked in the next round.
    loop {
        let batch = std::mem::take(&mut ctx.dirents);
        if batch.is_empty() {
            break;
        }
        check_entries(ctx, &batch, &mut children)?;
        all.extend(batch);
    }
    check_dirs(ctx);
    reachability(ctx, &children, &all);
    ctx.dirents = all;
    Ok(())
}

fn check_entries(
    ctx: &mut Ctx,
    dirents: &[crate::ctx::DirentRec],
    children: &mut HashMap<u64, Vec<u64>>,
) -> Result<(), FsckError> {
    let mut i = 0;
    while i < dirents.len() {
        let dir = dirents[i].dir;
        let mut j = i;
        while j < dirents.len() && dirents[j].dir == dir {
            j += 1;
        }
        let mut names: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut subdirs = 0u64;
        for rec in &dirents[i..j] {
            let e = match Dirent::decode(dir, &rec.value) {
                Ok(e) => e,
                Err(_) if rec.salvaged => {
                    drop_salvaged(ctx, rec, "does not decode");
                    continue;
                }
                Err(err) => {
                    ctx.report.problem(
                        Code::DirentDamaged,
                        format!("directory {dir}: entry with key {:#x} is damaged ({err})", rec.key),
                    );
                    continue;
                }
            };
            let h = name_hash(&ctx.sb.hash_seed, &e.name);
            let nm = name(&e.name);
            if rec.salvaged {
                // An entry from a damaged leaf is kept only if it passes
                // every check a damaged byte could make it fail.
                let bad_key = rec.key >> 32 != u64::from(h) || rec.key & 0xffff_ffff < DIRENT_MIN_LOW;
                let twice = names.iter().any(|(hh, n)| *hh == rec.key >> 32 && *n == e.name);
                let target_ok = ctx.geo.valid_ino(e.ino)
                    && e.ino >= FIRST_INO
                    && ctx.inodes.get(&e.ino).is_some_and(|t| !t.freed && !t.bad && dtype_of_mode(t.mode) == e.dtype);
                if bad_key || twice || !target_ok {
                    let why = if bad_key {
                        "its key does not match its name"
                    } else if twice {
                        "its name appears twice"
                    } else {
                        "its inode is not a live inode of its type"
                    };
                    drop_salvaged(ctx, rec, why);
                    continue;
                }
            }
            if rec.key >> 32 != u64::from(h) || rec.key & 0xffff_ffff < DIRENT_MIN_LOW {
                ctx.report.problem(
                    Code::DirentHashMismatch,
                    format!("directory {dir}: entry {nm} is stored under key {:#x}, which does not match its name's hash {h:#x} (lookups cannot find it)", rec.key),
                );
            }
            if let Some((_, _)) = names.iter().find(|(hh, n)| *hh == rec.key >> 32 && *n == e.name) {
                ctx.report.problem(Code::DirentDuplicateName, format!("directory {dir}: name {nm} appears twice"));
            }
            names.push((rec.key >> 32, e.name.clone()));
            let target = e.ino;
            let invalid = !ctx.geo.valid_ino(target) || (target != ROOT_INO && target < FIRST_INO);
            if invalid || !ensure_in_use(ctx, target, dir, &nm)? {
                let why = if invalid { "an invalid inode number" } else { "an inode that is not in use" };
                let msg = format!("directory {dir}: entry {nm} points to inode {target}, {why}");
                let fixed = ctx.repair;
                if fixed {
                    ctx.dirent_fixes.push((rec.leaf, dir, rec.key, DirentFix::Remove));
                    if let Some(d) = ctx.inodes.get_mut(&dir) {
                        d.dirents_found = d.dirents_found.saturating_sub(1);
                    }
                }
                ctx.report.push(Code::DirentBadTarget, msg, fixed);
                continue;
            }
            if target == ROOT_INO {
                ctx.report.problem(
                    Code::DirentPointsToRoot,
                    format!("directory {dir}: entry {nm} points to the root directory"),
                );
            }
            let t = ctx.inodes.get_mut(&target).expect("ensure_in_use inserted it");
            t.refs += 1;
            if !t.bad {
                let want = dtype_of_mode(t.mode);
                if e.dtype != want {
                    let msg = format!(
                        "directory {dir}: entry {nm} says file type {}, but inode {target} is a {}",
                        e.dtype,
                        inodes::type_name(t.mode)
                    );
                    if ctx.repair {
                        ctx.dirent_fixes.push((rec.leaf, dir, rec.key, DirentFix::Dtype(want)));
                    }
                    ctx.report.push(Code::DirentType, msg, ctx.repair);
                }
            }
            if t.is_dir() {
                t.parents.push(dir);
                subdirs += 1;
                children.entry(dir).or_default().push(target);
            }
        }
        if let Some(d) = ctx.inodes.get_mut(&dir) {
            d.subdirs += subdirs;
        }
        i = j;
    }
    Ok(())
}

/// True if `ino` is in use; proves it in use when the bitmap lost its bit.
fn ensure_in_use(ctx: &mut Ctx, ino: u64, dir: u64, nm: &str) -> Result<bool, FsckError> {
    if ctx.inodes.get(&ino).is_some_and(|i| !i.freed) {
        return Ok(true);
    }
    // Cleared by pass 1 (repair): gone, whatever its slot still says.
    if ctx.cleared.contains(&ino) {
        return Ok(false);
    }
    let Some(d) = inodes::read_slot(ctx, ino)? else { return Ok(false) };
    if d.nlink == 0 {
        return Ok(false);
    }
    let msg = format!(
        "inode {ino} ({}) is named by entry {nm} in directory {dir} but is marked free in the inode bitmap",
        inodes::type_name(d.mode)
    );
    ctx.report.push(Code::DirentTargetMarkedFree, msg, ctx.repair);
    let (blk, off) = ctx.geo.inode_location(ino);
    let raw = ctx.img.read_block(blk)?;
    let mut info = inodes::check_inode(ctx, ino, &raw[off..off + cairn_format::inode::INODE_SIZE]);
    if info.clear {
        inodes::forget_claims(ctx, ino);
        ctx.cleared.push(ino);
        return Ok(false);
    }
    info.resurrected = true;
    ctx.inodes.insert(ino, info);
    Ok(true)
}

/// Drops an entry of a damaged leaf that fails a check (repair).
fn drop_salvaged(ctx: &mut Ctx, rec: &crate::ctx::DirentRec, why: &str) {
    ctx.dirent_fixes.push((rec.leaf, rec.dir, rec.key, DirentFix::Remove));
    if let Some(d) = ctx.inodes.get_mut(&rec.dir) {
        d.dirents_found = d.dirents_found.saturating_sub(1);
    }
    let msg = format!("directory {}: an entry of a damaged leaf (key {:#x}) is dropped: {why}", rec.dir, rec.key);
    ctx.report.push(Code::DirentSalvageDropped, msg, true);
}

/// Per-directory fields: entry count, parent pointer, number of parents.
fn check_dirs(ctx: &mut Ctx) {
    let mut fixes: Vec<(u64, Option<u64>, Option<u64>)> = Vec::new();
    let mut inos: Vec<u64> = ctx.inodes.iter().filter(|(_, i)| i.is_dir()).map(|(k, _)| *k).collect();
    inos.sort_unstable();
    for ino in inos {
        let d: &InodeInfo = &ctx.inodes[&ino];
        let mut fix = (ino, None, None);
        if !d.damaged && !d.tree_damaged && d.entries != d.dirents_found {
            let msg = format!(
                "directory {ino}: entry count is {}, but its tree holds {} entries",
                d.entries, d.dirents_found
            );
            ctx.report.push(Code::DirEntryCount, msg, ctx.repair);
            fix.1 = Some(d.dirents_found);
        }
        if ino == ROOT_INO {
            if d.parent != ROOT_INO {
                ctx.report.push(
                    Code::RootParent,
                    format!("root directory: '..' points to {}, not to itself", d.parent),
                    ctx.repair,
                );
                fix.2 = Some(ROOT_INO);
            }
        } else if d.parents.len() > 1 {
            let list: Vec<String> = d.parents.iter().map(|p| p.to_string()).collect();
            ctx.report.problem(
                Code::DirMultipleParents,
                format!(
                    "directory {ino} has {} parents (it is named in directories {})",
                    d.parents.len(),
                    list.join(", ")
                ),
            );
        } else if let Some(&p) = d.parents.first() {
            if d.parent != p {
                let msg = format!(
                    "directory {ino}: '..' points to {}, but the directory is named in directory {p}",
                    d.parent
                );
                ctx.report.push(Code::DirParentPointer, msg, ctx.repair);
                fix.2 = Some(p);
            }
        }
        if fix.1.is_some() || fix.2.is_some() {
            fixes.push(fix);
        }
    }
    if ctx.repair {
        for (ino, entries, parent) in fixes {
            let f = ctx.fix(ino);
            if entries.is_some() {
                f.entries = entries;
            }
            if parent.is_some() {
                f.parent = parent;
            }
        }
    }
}

/// Marks what the root reaches; reports directories it does not.
fn reachability(ctx: &mut Ctx, children: &HashMap<u64, Vec<u64>>, dirents: &[crate::ctx::DirentRec]) {
    let mut queue = VecDeque::new();
    if let Some(r) = ctx.inodes.get_mut(&ROOT_INO) {
        r.reachable = true;
        queue.push_back(ROOT_INO);
    }
    while let Some(d) = queue.pop_front() {
        for &c in children.get(&d).map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(ci) = ctx.inodes.get_mut(&c) {
                if !ci.reachable {
                    ci.reachable = true;
                    queue.push_back(c);
                }
            }
        }
    }
    // Non-directories are reachable through any entry in a reachable directory.
    for rec in dirents {
        if !ctx.inodes.get(&rec.dir).is_some_and(|d| d.reachable) {
            continue;
        }
        if let Ok(e) = Dirent::decode(rec.dir, &rec.value) {
            if let Some(t) = ctx.inodes.get_mut(&e.ino) {
                t.reachable = true;
            }
        }
    }
    let mut lost: Vec<u64> = ctx
        .inodes
        .iter()
        .filter(|(_, i)| i.is_dir() && !i.reachable && !i.parents.is_empty())
        .map(|(k, _)| *k)
        .collect();
    lost.sort_unstable();
    for ino in lost {
        ctx.report.problem(
            Code::DirUnreachable,
            format!("directory {ino} is not reachable from the root (its parents form a loop or are themselves lost)"),
        );
    }
}
