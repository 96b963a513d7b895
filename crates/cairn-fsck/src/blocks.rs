//! Pass 1b: every block owned at most once.
//!
//! ## Purpose
//! Pass 1 (and the orphan-list walk) record each run of blocks an owner
//! uses as a [`Claim`]: file data, extent-tree nodes, directory-tree nodes,
//! xattr blocks (once per distinct block, however many inodes share it — the
//! sharing itself is checked against the block's refcount in pass 4) and
//! their external values' blocks, and orphan-list nodes. A value block
//! claimed by two xattr blocks (or by an xattr block and a file) is found
//! here like any other block owned twice. Fixed metadata (superblock, descriptor table, journal,
//! each group's bitmaps and inode table) is never claimed: pass 1 already
//! rejected any extent or node pointer that touches it, and pass 5 treats it
//! as owned by the layout.
//!
//! This pass sorts the claims by first block and sweeps them once, so
//! overlapping claims — the same block owned twice, by two inodes or twice
//! by one — are found in `O(n log n)` for `n` claims, with no per-block
//! table (a 16 TiB image has 4 billion blocks; the claims are only as many
//! as the extents and nodes in use). Overlaps are reported per pair of
//! owners, with the number of blocks and the first one.
//!
//! ## What it concludes
//! Duplicate ownership is reported. A repair clones data blocks two files
//! share, as e2fsck's passes 1B–1D do: the higher-numbered file gets a copy
//! of them in free blocks (`clone`), so both keep their data. When free
//! space cannot take the copy, it gives up the extents it shares instead
//! (see [`release`]: it reads holes there), and the message says so. Other
//! duplicates are left alone and their owners marked damaged so no repair
//! trusts their block counts. The claims stay sorted for pass 5,
//! which finds each group's claims by binary search.

use crate::clone::Outcome;
use crate::ctx::{Claim, Ctx, Owner};
use crate::error::FsckError;
use crate::problems::{Code, Pass};
use crate::report::num;
use cairn_format::btree::KIND_EXTENTS;
use cairn_format::extent::Extent;
use cairn_format::inode::DataArea;
use std::collections::BTreeMap;

/// Sorts the claims and reports blocks claimed more than once (with
/// repair, releases what it can: see [`release`]).
pub fn run(ctx: &mut Ctx) -> Result<(), FsckError> {
    ctx.claims.sort_unstable_by_key(|c| (c.start, c.len));
    let mut dups = duplicates(&ctx.claims);
    if ctx.repair && !dups.is_empty() {
        let mut free = crate::salvage::FreeBlocks::new(ctx);
        for (&(a, b), &(first, n)) in &dups {
            let both = format!("{a} and {b} both claim {} block(s), starting at block {first}", num(n));
            let why = match crate::clone::clone(ctx, &mut free, a, b)? {
                Outcome::Cloned { loser, blocks } => {
                    let msg = format!(
                        "{both}: inode {loser} gets its own copy of them ({} block(s) copied to free space; both \
                         files keep their data)",
                        num(blocks)
                    );
                    ctx.report.push(Code::BlockClaimedTwice, msg, true);
                    continue;
                }
                Outcome::NoSpace => "no free space is left to copy them: ",
                Outcome::NotCloned => "",
            };
            if let Some(loser) = release(ctx, a, b)? {
                let msg =
                    format!("{both}: {why}inode {loser} gives up the extents it shares (it reads as holes there)");
                ctx.report.push(Code::BlockClaimedTwice, msg, true);
            }
        }
        // What is left once the copies and releases are done.
        ctx.claims.sort_unstable_by_key(|c| (c.start, c.len));
        dups = duplicates(&ctx.claims);
    }
    for ((a, b), (first, n)) in dups {
        let msg = if a == b {
            format!("{a} claims {} block(s) twice, starting at block {first}", num(n))
        } else {
            format!("{a} and {b} both claim {} block(s), starting at block {first}", num(n))
        };
        ctx.report.problem(Code::BlockClaimedTwice, msg);
        for o in [a, b] {
            if let Some(i) = o.ino().and_then(|i| ctx.inodes.get_mut(&i)) {
                i.damaged = true;
            }
            if let Owner::Xattr(blk) | Owner::XattrValue(blk) = o {
                for ino in ctx.xattrs.get(&blk).map(|x| x.inodes.clone()).unwrap_or_default() {
                    if let Some(i) = ctx.inodes.get_mut(&ino) {
                        i.damaged = true;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Overlapping claims of sorted `claims`, per pair of owners: (first block,
/// blocks).
fn duplicates(claims: &[Claim]) -> BTreeMap<(Owner, Owner), (u64, u64)> {
    let mut dups: BTreeMap<(Owner, Owner), (u64, u64)> = BTreeMap::new();
    let mut active: Option<Claim> = None;
    for c in claims {
        if let Some(a) = active {
            let a_end = a.start + a.len;
            if c.start < a_end {
                let overlap = a_end.min(c.start + c.len) - c.start;
                let key = if a.owner <= c.owner { (a.owner, c.owner) } else { (c.owner, a.owner) };
                let e = dups.entry(key).or_insert((c.start, 0));
                e.1 += overlap;
                if c.start + c.len > a_end {
                    active = Some(*c);
                }
                continue;
            }
        }
        active = Some(*c);
    }
    dups
}

/// Repair of data blocks two files claim when they cannot be cloned (no
/// free space for a copy, see `clone`): the file with the higher inode number — usually
/// the newer one — gives up every extent that overlaps the other's blocks,
/// and reads as holes there; the other keeps its data. Inline extents are
/// rewritten in the inode; an extent tree is rebuilt from the extents it
/// keeps (`salvage`, as a damaged tree is). Returns the inode that gave
/// them up, or `None` when this pair is not released (not two files, or the
/// loser is damaged otherwise: reported and left alone).
fn release(ctx: &mut Ctx, a: Owner, b: Owner) -> Result<Option<u64>, FsckError> {
    let (Owner::Data(x), Owner::Data(y)) = (a, b) else { return Ok(None) };
    if x == y {
        return Ok(None);
    }
    let (winner, loser) = (x.min(y), x.max(y));
    let Some(d) = crate::inodes::read_slot(ctx, loser)? else { return Ok(None) };
    let theirs: Vec<(u64, u64)> =
        ctx.claims.iter().filter(|c| c.owner == Owner::Data(winner)).map(|c| (c.start, c.start + c.len)).collect();
    let shares = |e: &Extent| theirs.iter().any(|&(s, t)| e.pblk < t && s < e.pblk + u64::from(e.len));
    let list = match d.data {
        DataArea::Extents(list) => list,
        DataArea::Tree(root) if root != 0 => return release_from_tree(ctx, loser, root, &shares),
        _ => return Ok(None),
    };
    let (dropped, kept): (Vec<Extent>, Vec<Extent>) = list.into_iter().partition(|e| shares(e));
    if dropped.is_empty() {
        return Ok(None);
    }
    let gone = give_up_claims(ctx, loser, &dropped);
    let fix = ctx.fix(loser);
    fix.inline_extents = Some(kept);
    fix.blocks = Some(d.blocks.saturating_sub(gone));
    Ok(Some(loser))
}

/// Drops `loser`'s claims of the extents it gives up; returns their blocks.
pub(crate) fn give_up_claims(ctx: &mut Ctx, loser: u64, dropped: &[Extent]) -> u64 {
    ctx.claims.retain(|c| !(c.owner == Owner::Data(loser) && dropped.iter().any(|e| e.pblk == c.start)));
    dropped.iter().map(|e| u64::from(e.len)).sum()
}

/// [`release`] for a loser that maps its data with an extent tree: its
/// extents are read again; those it shares are dropped, and the tree is
/// rebuilt from the rest after this pass (`salvage`).
fn release_from_tree(
    ctx: &mut Ctx,
    loser: u64,
    root: u64,
    shares: &dyn Fn(&Extent) -> bool,
) -> Result<Option<u64>, FsckError> {
    if ctx.inodes.get(&loser).is_none_or(|i| i.damaged || i.bad || i.freed || i.tree_damaged) {
        return Ok(None);
    }
    let Some(entries) = tree_extents(ctx, loser, root) else { return Ok(None) };
    let (mut kept, mut gone) = (Vec::new(), Vec::new());
    for (key, value) in entries {
        let e = Extent::decode_value(key, &value);
        if shares(&e) {
            gone.push(e);
        } else {
            kept.push((key, value));
        }
    }
    if gone.is_empty() {
        return Ok(None);
    }
    let blocks = give_up_claims(ctx, loser, &gone);
    let info = ctx.inodes.get_mut(&loser).expect("checked above");
    info.counted = info.counted.saturating_sub(blocks);
    info.tree_entries = kept;
    ctx.rebuilds.entry(loser).or_default();
    Ok(Some(loser))
}

/// The entries (logical block, extent value) of `ino`'s extent tree at
/// `root`, read again; `None` when the walk cannot read it all.
pub(crate) fn tree_extents(ctx: &mut Ctx, ino: u64, root: u64) -> Option<Vec<(u64, Vec<u8>)>> {
    let label = format!("inode {ino}'s extent tree");
    // Read once already (pass 1, which reported what it found): quietly.
    let mut quiet = crate::report::Report::default();
    let (geo, seed) = (ctx.geo, ctx.seed);
    let w = crate::btree::walk(&mut ctx.img, &mut quiet, &geo, seed, KIND_EXTENTS, ino, root, &label, Pass::Inodes);
    w.complete.then(|| w.entries.into_iter().map(|(_, k, v)| (k, v)).collect())
}

/// True when the claim's owner still exists after repairs (freed inodes'
/// blocks are released; an xattr block lives while any live inode points
/// at it).
pub fn claim_live(ctx: &Ctx, c: &Claim) -> bool {
    match c.owner {
        Owner::Data(i) | Owner::ExtentNode(i) | Owner::DirNode(i) => !ctx.inodes.get(&i).is_some_and(|x| x.freed),
        Owner::Xattr(b) | Owner::XattrValue(b) => {
            ctx.xattrs.get(&b).is_none_or(|x| x.inodes.iter().any(|i| !ctx.inodes.get(i).is_some_and(|y| y.freed)))
        }
        Owner::Orphans => true,
    }
}
