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
//! (`release`: it reads holes there), and the message says so. Other
//! duplicates are left alone and their owners marked damaged so no repair
//! trusts their block counts. The claims stay sorted for pass 5,
//! which finds each group's claims by binary search.

use crate::clone::Outcome;
use crate::ctx::{Claim, Ctx, Owner};
use crate::error::FsckError;
use crate::problems::Code;
use crate::report::num;
use std::collections::BTreeMap;

/// Sorts the claims and reports blocks claimed more than once (with
/// repair, clones or releases what it can: see `clone` and `release`).
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
            if let Some(loser) = crate::release::release(ctx, a, b)? {
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
