//! Pass 1b's other repair: a file gives up the data blocks it shares.
//!
//! ## Purpose
//! When two files claim the same data blocks and `clone` cannot give the
//! higher-numbered one a copy (no free space for it, or not a pair it
//! clones), that file gives up every extent that overlaps the other's
//! blocks: it reads as holes there, and the other keeps its data. Inline
//! extents are rewritten in the inode (`repair`); an extent tree is rebuilt
//! from the extents it keeps after pass 1b (`salvage`, as a damaged tree
//! is).
//!
//! ## Layout
//! [`release`] decides and records a pair's release; [`give_up_claims`]
//! and [`tree_extents`] are shared with `clone`, which also drops the
//! loser's old claims and reads its tree again. The module sits below both
//! `blocks` (which chooses between a copy and a release) and `clone`, so
//! neither imports the other back.
//!
//! ## What it concludes
//! Nothing: the report's message is written by `blocks`, which knows why
//! a copy was not made.

use crate::ctx::{Ctx, Owner};
use crate::error::FsckError;
use crate::problems::Pass;
use crate::report::Report;
use crate::{btree, inodes};
use cairn_format::btree::KIND_EXTENTS;
use cairn_format::extent::Extent;
use cairn_format::inode::DataArea;

/// Repair of data blocks two files claim when they cannot be cloned (no
/// free space for a copy, see `clone`): the file with the higher inode number — usually
/// the newer one — gives up every extent that overlaps the other's blocks,
/// and reads as holes there; the other keeps its data. Inline extents are
/// rewritten in the inode; an extent tree is rebuilt from the extents it
/// keeps (`salvage`, as a damaged tree is). Returns the inode that gave
/// them up, or `None` when this pair is not released (not two files, or the
/// loser is damaged otherwise: reported and left alone).
pub fn release(ctx: &mut Ctx, a: Owner, b: Owner) -> Result<Option<u64>, FsckError> {
    let (Owner::Data(x), Owner::Data(y)) = (a, b) else { return Ok(None) };
    if x == y {
        return Ok(None);
    }
    let (winner, loser) = (x.min(y), x.max(y));
    let Some(d) = inodes::read_slot(ctx, loser)? else { return Ok(None) };
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
pub fn give_up_claims(ctx: &mut Ctx, loser: u64, dropped: &[Extent]) -> u64 {
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
pub fn tree_extents(ctx: &mut Ctx, ino: u64, root: u64) -> Option<Vec<(u64, Vec<u8>)>> {
    let label = format!("inode {ino}'s extent tree");
    // Read once already (pass 1, which reported what it found): quietly.
    let mut quiet = Report::default();
    let (geo, seed) = (ctx.geo, ctx.seed);
    let w = btree::walk(&mut ctx.img, &mut quiet, &geo, seed, KIND_EXTENTS, ino, root, &label, Pass::Inodes);
    w.complete.then(|| w.entries.into_iter().map(|(_, k, v)| (k, v)).collect())
}
