//! Pass 1b's repair of data blocks two files claim: a copy for each.
//!
//! ## Purpose
//! When two files claim the same data blocks, at most one of them can be
//! right about what those blocks hold, and fsck cannot tell which. As
//! e2fsck's passes 1B–1D do, the repair gives one of them — the file with
//! the higher inode number, usually the newer — its own copy: fresh blocks
//! that nobody claims get a copy of the shared extents' contents, and the
//! file's extents are pointed at them. Both files then keep their data
//! (whichever of them it belonged to), and neither reads holes.
//!
//! ## How
//! * The claimant's extents are read from where a repair already put them
//!   (an earlier pair's new list or tree entries), else from its inode
//!   (inline extents, or its extent tree, walked again). In every extent
//!   that overlaps the other file's claims, the span from the first shared
//!   block to the last is copied; the blocks before and after it stay, as
//!   extents of their own.
//! * All the blocks a pair needs are taken first (`salvage::FreeBlocks`:
//!   inside the data area, claimed by nobody, clear in a bitmap that
//!   verifies), and nothing is written when they run out: the caller then
//!   falls back to releasing the blocks (`blocks::release`, the file reads
//!   holes there) and says why.
//! * The copies are written at once: the blocks were free, so no later
//!   pass reads them except as this file's new claims. A copy that needs
//!   more runs than the inode holds inline ([`INLINE_EXTENTS`]) turns the
//!   inode's extents into a tree, built with the other rebuilt trees
//!   (`salvage::write_trees`); a file mapped by a tree has its tree rebuilt.
//! * The block count does not change (as many blocks as before); pass 5
//!   marks the new blocks used and recounts.
//!
//! ## What it concludes
//! Nothing: it only carries out the repair pass 1b decided.

use crate::ctx::{Ctx, Owner};
use crate::error::FsckError;
use crate::release::{give_up_claims, tree_extents};
use crate::salvage::FreeBlocks;
use cairn_format::extent::Extent;
use cairn_format::inode::{DataArea, INLINE_EXTENTS};

/// Blocks copied per read (bounds the buffer).
const CHUNK: u64 = 256;

/// What [`clone`] did with a pair of claimants.
pub enum Outcome {
    /// `loser` now has its own copy: `blocks` blocks were copied.
    Cloned { loser: u64, blocks: u64 },
    /// Not enough free blocks for the copy: nothing was changed.
    NoSpace,
    /// Not a pair this repair clones (not two files, or the file that would
    /// get the copy is damaged otherwise, or shares nothing any more).
    NotCloned,
}

/// Gives the higher-numbered of two files claiming the same data blocks a
/// copy of the extents it shares with the other (see the module essay).
pub fn clone(ctx: &mut Ctx, free: &mut FreeBlocks, a: Owner, b: Owner) -> Result<Outcome, FsckError> {
    let (Owner::Data(x), Owner::Data(y)) = (a, b) else { return Ok(Outcome::NotCloned) };
    if x == y {
        return Ok(Outcome::NotCloned);
    }
    let (winner, loser) = (x.min(y), x.max(y));
    if ctx.inodes.get(&loser).is_none_or(|i| i.damaged || i.bad || i.freed || i.tree_damaged) {
        return Ok(Outcome::NotCloned);
    }
    let Some((list, tree)) = extents_of(ctx, loser)? else { return Ok(Outcome::NotCloned) };
    let theirs: Vec<(u64, u64)> =
        ctx.claims.iter().filter(|c| c.owner == Owner::Data(winner)).map(|c| (c.start, c.start + c.len)).collect();
    // Per extent, the span of its blocks the other file claims (offsets).
    let span = |e: &Extent| {
        let end = e.pblk + u64::from(e.len);
        let over = theirs.iter().filter(|&&(s, t)| e.pblk < t && s < end);
        let lo = over.clone().map(|&(s, _)| s.max(e.pblk)).min()?;
        let hi = over.map(|&(_, t)| t.min(end)).max()?;
        Some((lo - e.pblk, hi - e.pblk))
    };
    let shared: Vec<(Extent, (u64, u64))> = list.iter().filter_map(|e| Some((*e, span(e)?))).collect();
    if shared.is_empty() {
        return Ok(Outcome::NotCloned);
    }
    // Every block first: running out must change nothing.
    let mut runs = Vec::with_capacity(shared.len());
    for (_, (lo, hi)) in &shared {
        let Some(r) = take_runs(ctx, free, hi - lo)? else { return Ok(Outcome::NoSpace) };
        runs.push(r);
    }
    let mut copied = 0;
    let mut new_list = Vec::with_capacity(list.len() + 3 * runs.len());
    let mut new_claims = Vec::new();
    for e in &list {
        let Some(i) = shared.iter().position(|(s, _)| s == e) else {
            new_list.push(*e);
            continue;
        };
        let (lo, hi) = shared[i].1;
        let piece = |off: u64, pblk: u64, n: u64| Extent {
            lblk: e.lblk + off,
            pblk,
            len: u32::try_from(n).expect("a piece is no longer than its extent"),
            unwritten: e.unwritten,
        };
        // The blocks before and after the shared span stay where they are.
        if lo > 0 {
            new_list.push(piece(0, e.pblk, lo));
            new_claims.push((e.pblk, lo));
        }
        let mut off = lo;
        for &(to, n) in &runs[i] {
            copy(ctx, e.pblk + off, to, n)?;
            new_list.push(piece(off, to, n));
            new_claims.push((to, n));
            off += n;
        }
        if hi < u64::from(e.len) {
            new_list.push(piece(hi, e.pblk + hi, u64::from(e.len) - hi));
            new_claims.push((e.pblk + hi, u64::from(e.len) - hi));
        }
        copied += hi - lo;
    }
    let old: Vec<Extent> = shared.iter().map(|(e, _)| *e).collect();
    give_up_claims(ctx, loser, &old);
    for (start, n) in new_claims {
        ctx.claim(start, n, Owner::Data(loser));
    }
    if !tree && new_list.len() <= INLINE_EXTENTS {
        ctx.fix(loser).inline_extents = Some(new_list);
    } else {
        if let Some(f) = ctx.inode_fixes.get_mut(&loser) {
            f.inline_extents = None;
        }
        let info = ctx.inodes.get_mut(&loser).expect("checked above");
        info.tree_entries = new_list.iter().map(|e| (e.lblk, e.value_bytes())).collect();
        ctx.rebuilds.entry(loser).or_default();
    }
    Ok(Outcome::Cloned { loser, blocks: copied })
}

/// The extents of `ino` as the repair stands, and whether a tree maps them;
/// `None` when they cannot all be read.
fn extents_of(ctx: &mut Ctx, ino: u64) -> Result<Option<(Vec<Extent>, bool)>, FsckError> {
    if let Some(list) = ctx.inode_fixes.get(&ino).and_then(|f| f.inline_extents.clone()) {
        return Ok(Some((list, false)));
    }
    if ctx.rebuilds.contains_key(&ino) {
        let entries = &ctx.inodes[&ino].tree_entries;
        return Ok(Some((entries.iter().map(|(k, v)| Extent::decode_value(*k, v)).collect(), true)));
    }
    let Some(d) = crate::inodes::read_slot(ctx, ino)? else { return Ok(None) };
    Ok(match d.data {
        DataArea::Extents(list) => Some((list, false)),
        DataArea::Tree(root) if root != 0 => tree_extents(ctx, ino, root)
            .map(|entries| (entries.iter().map(|(k, v)| Extent::decode_value(*k, v)).collect(), true)),
        _ => None,
    })
}

/// `n` free blocks as runs `(first, length)`; `None` when they run out.
fn take_runs(ctx: &mut Ctx, free: &mut FreeBlocks, n: u64) -> Result<Option<Vec<(u64, u64)>>, FsckError> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for _ in 0..n {
        let Some(b) = free.take(ctx)? else { return Ok(None) };
        match runs.last_mut() {
            Some((s, l)) if *s + *l == b => *l += 1,
            _ => runs.push((b, 1)),
        }
    }
    Ok(Some(runs))
}

/// Copies `n` blocks from `from` to `to`.
fn copy(ctx: &mut Ctx, from: u64, to: u64, n: u64) -> Result<(), FsckError> {
    let bs = ctx.img.block_size();
    let mut done = 0;
    while done < n {
        let k = (n - done).min(CHUNK);
        let buf = ctx.img.read_blocks(from + done, k)?;
        for (j, block) in buf.chunks_exact(bs).enumerate() {
            ctx.img.write_block(to + done + j as u64, block)?;
        }
        done += k;
    }
    Ok(())
}
