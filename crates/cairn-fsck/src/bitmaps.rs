//! Pass 5: bitmaps and summary counters against what the passes found.
//!
//! ## Purpose
//! The earlier passes computed, from the structures themselves, which blocks
//! are owned (the sorted claims, plus each group's fixed metadata) and which
//! inodes are in use. This pass compares that with what the allocator will
//! trust at the next mount:
//!
//! * each group's block bitmap: every owned block marked used, nothing else
//!   marked used, the group's own metadata (and, in group 0, the superblock,
//!   descriptor table and journal) marked used, padding bits past the group's
//!   end set; its crc32c equal to the descriptor's `block_bitmap_csum`;
//! * each group's inode bitmap likewise (the reserved inodes `1..FIRST_INO`
//!   of group 0 marked used, padding past `inodes_per_group` set);
//! * uninitialised groups (`GD_*_UNINIT`): the implied bitmap (see
//!   `groups`) must describe the group — an owned block or live inode in such
//!   a group is a mismatch;
//! * each descriptor's `free_blocks`, `free_inodes` and `used_dirs`;
//! * the superblock's `free_blocks` and `free_inodes`: the sums.
//!
//! ## What the engine guarantees about counters
//! The engine changes bitmaps, descriptor counters and the in-memory totals
//! in the same transaction, and every commit rewrites the superblock from the
//! in-memory totals in the same checkpoint (`write_sb_buffer` under the
//! closed gate). So every committed state — after a clean unmount or not,
//! after journal replay — has exact counters, and fsck checks them exactly.
//!
//! ## Speed
//! A group is read only if it is initialised or something claims a block or
//! inode in it: the groups of a 16 TiB sparse image cost a few comparisons
//! each. Claims are walked in block order with one cursor.
//!
//! ## Repairs
//! With `--repair` the bitmaps are rewritten from the computed state (clearing
//! the `UNINIT` flag when a group now needs a real bitmap), checksums and
//! counters are rewritten in the descriptors, and the superblock totals
//! updated. When some owner's blocks could not all be enumerated (a damaged
//! inode or tree), blocks marked used that nobody claims are *kept* used:
//! they may belong to the damaged object.

use crate::blocks::claim_live;
use crate::ctx::Ctx;
use crate::error::FsckError;
use crate::groups;
use crate::problems::Code;
use crate::report::{block_range, num};
use cairn_format::bitmap::{bit, set_bit, set_range, synth_block_bitmap, synth_inode_bitmap};
use cairn_format::checksum::crc;
use cairn_format::group_desc::{GD_BLOCK_UNINIT, GD_INODE_UNINIT};
use cairn_format::FIRST_INO;

/// Reports of one kind per group kept before summarising the rest.
const PER_GROUP_REPORTS: usize = 16;

fn popcount_upto(b: &[u8], limit: u64) -> u64 {
    let full = (limit / 8) as usize;
    let mut n: u64 = b[..full.min(b.len())].iter().map(|x| u64::from(x.count_ones())).sum();
    for i in (full as u64 * 8)..limit {
        n += u64::from(bit(b, i));
    }
    n
}

/// Runs of set bits in `b` below `limit`: (first, length).
fn runs(b: &[u8], limit: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0u64;
    while i < limit {
        if i.is_multiple_of(8) && b[(i / 8) as usize] == 0 {
            i += 8;
            continue;
        }
        if bit(b, i) {
            let s = i;
            while i < limit && bit(b, i) {
                i += 1;
            }
            out.push((s, i - s));
        } else {
            i += 1;
        }
    }
    out
}

/// Compares and (with repair) rewrites every group's bitmaps and counters.
pub fn run(ctx: &mut Ctx) -> Result<(), FsckError> {
    let geo = ctx.geo;
    let bs = geo.block_size as usize;
    let ipg = geo.inodes_per_group;
    let mut claims = std::mem::take(&mut ctx.claims);
    // Sorted in pass 2, but repairs since (a /lost+found made again, a
    // salvaged tree) add claims at the end: the group slices below need
    // the order (a fuzzed image made pass 5 slice a claim from the group
    // before).
    claims.sort_unstable_by_key(|c| (c.start, c.len));
    let live_claims: Vec<bool> = claims.iter().map(|c| claim_live(ctx, c)).collect();
    // Live inodes in number order: (ino, is_dir, bad, resurrected).
    let mut live: Vec<(u64, bool, bool, bool)> =
        ctx.inodes.iter().filter(|(_, i)| !i.freed).map(|(k, i)| (*k, i.is_dir(), i.bad, i.resurrected)).collect();
    live.sort_unstable();
    let mut li = 0usize;
    let (mut free_blocks_sum, mut free_inodes_sum) = (0u64, 0u64);
    let mut unattributed = 0u64;
    for g in 0..geo.group_count {
        ctx.progress("pass 5: bitmaps", g, geo.group_count);
        let gstart = geo.group_start(g);
        let glen = geo.group_len(g);
        // ---- block bitmap
        let a = claims.partition_point(|c| c.start < gstart);
        let b = claims.partition_point(|c| c.start < gstart + glen);
        let gclaims = &claims[a..b];
        let glive = &live_claims[a..b];
        let any_live = glive.iter().any(|x| *x);
        let block_uninit = ctx.groups[g as usize].block_uninit();
        let free = if block_uninit && !any_live {
            glen - geo.initially_used(g)
        } else {
            let synth = synth_block_bitmap(&geo, g);
            let mut expected = synth.clone();
            for (k, c) in gclaims.iter().enumerate() {
                if glive[k] {
                    set_range(&mut expected, c.start - gstart, c.start + c.len - gstart);
                }
            }
            let (actual, csum_ok) = groups::read_block_bitmap(ctx, g)?.unwrap_or_else(|| (synth.clone(), true));
            let mut fixed_any = !csum_ok;
            if !csum_ok {
                ctx.report.push(
                    Code::BlockBitmapChecksum,
                    format!("group {g}: block bitmap checksum does not match its group descriptor"),
                    ctx.repair,
                );
            }
            let where_ = if block_uninit { " (the group is marked uninitialised)" } else { "" };
            let mut shown = 0;
            for (k, c) in gclaims.iter().enumerate() {
                if !glive[k] {
                    continue;
                }
                let rel = c.start - gstart;
                let missing = (rel..rel + c.len).filter(|&i| !bit(&actual, i)).count() as u64;
                if missing > 0 {
                    fixed_any = true;
                    if shown < PER_GROUP_REPORTS {
                        let r = block_range(c.start, c.len);
                        let verb = if c.len == 1 { "is" } else { "are" };
                        let how = if missing == c.len { String::new() } else { format!("{missing} of them ") };
                        let msg =
                            format!("{r} {verb} in use by {}, but {how}marked free in the bitmap{where_}", c.owner);
                        ctx.report.push(Code::BlocksUsedMarkedFree, msg, ctx.repair);
                    }
                    shown += 1;
                }
            }
            if shown > PER_GROUP_REPORTS {
                ctx.report.push(
                    Code::BlocksUsedMarkedFree,
                    format!("group {g}: {} more runs of used blocks marked free", shown - PER_GROUP_REPORTS),
                    ctx.repair,
                );
            }
            let meta_missing =
                (0..geo.initially_used(g)).chain(glen..bs as u64 * 8).filter(|&i| !bit(&actual, i)).count();
            if meta_missing > 0 {
                fixed_any = true;
                ctx.report.push(
                    Code::BlockBitmapMetadata,
                    format!("group {g}: block bitmap leaves {meta_missing} bit(s) of the group's fixed metadata or padding clear"),
                    ctx.repair,
                );
            }
            // Marked used, owned by nothing.
            let extra: Vec<u8> = actual.iter().zip(&expected).map(|(a, e)| a & !e).collect();
            let extra_runs = runs(&extra, glen);
            let mut final_bm = expected.clone();
            if !extra_runs.is_empty() {
                if ctx.ownership_incomplete() {
                    unattributed += extra_runs.iter().map(|r| r.1).sum::<u64>();
                    for (f, a) in final_bm.iter_mut().zip(&actual) {
                        *f |= a;
                    }
                } else {
                    fixed_any = true;
                    for (n, (s, l)) in extra_runs.iter().enumerate() {
                        if n == PER_GROUP_REPORTS {
                            let more = extra_runs.len() - n;
                            ctx.report.push(
                                Code::BlocksMarkedUsedUnowned,
                                format!("group {g}: {more} more runs of blocks marked used but owned by nothing"),
                                ctx.repair,
                            );
                            break;
                        }
                        let r = block_range(gstart + s, *l);
                        let verb = if *l == 1 { "is" } else { "are" };
                        ctx.report.push(
                            Code::BlocksMarkedUsedUnowned,
                            format!(
                                "{r} {verb} marked used in the bitmap, but nothing owns {}",
                                if *l == 1 { "it" } else { "them" }
                            ),
                            ctx.repair,
                        );
                    }
                }
            }
            if ctx.repair && (fixed_any || final_bm != actual) {
                let blk = geo.block_bitmap(g);
                ctx.img.write_block(blk, &final_bm)?;
                let grp = &mut ctx.groups[g as usize];
                grp.gd.block_bitmap_csum = crc(ctx.seed, &final_bm);
                grp.gd.flags &= !GD_BLOCK_UNINIT;
                grp.gd_dirty = true;
            }
            glen - popcount_upto(&final_bm, glen)
        };
        let gd_free = ctx.groups[g as usize].gd.free_blocks;
        if u64::from(gd_free) != free {
            ctx.report.push(
                Code::GdFreeBlocks,
                format!(
                    "group {g}: descriptor counts {} free blocks, but the bitmap has {}",
                    num(u64::from(gd_free)),
                    num(free)
                ),
                ctx.repair,
            );
            if ctx.repair {
                let grp = &mut ctx.groups[g as usize];
                grp.gd.free_blocks = free as u32;
                grp.gd_dirty = true;
            }
        }
        free_blocks_sum += free;

        // ---- inode bitmap
        let (lo, hi) = (g * ipg + 1, (g + 1) * ipg);
        let start = li;
        while li < live.len() && live[li].0 <= hi {
            li += 1;
        }
        let ginodes = &live[start..li];
        debug_assert!(ginodes.iter().all(|x| x.0 >= lo));
        let inode_uninit = ctx.groups[g as usize].inode_uninit();
        let dirs = ginodes.iter().filter(|x| x.1).count() as u64;
        let any_bad = ginodes.iter().any(|x| x.2);
        let free_inodes = if inode_uninit && ginodes.is_empty() && g != 0 {
            ipg
        } else {
            let synth = synth_inode_bitmap(&geo);
            let mut expected = synth.clone();
            if g == 0 {
                set_range(&mut expected, 0, FIRST_INO - 1);
            }
            for x in ginodes {
                set_bit(&mut expected, x.0 - lo);
            }
            let (actual, csum_ok) = groups::read_inode_bitmap(ctx, g)?.unwrap_or_else(|| (synth.clone(), true));
            if !csum_ok {
                ctx.report.push(
                    Code::InodeBitmapChecksum,
                    format!("group {g}: inode bitmap checksum does not match its group descriptor"),
                    ctx.repair,
                );
            }
            for x in ginodes {
                if !bit(&actual, x.0 - lo) && !x.3 {
                    ctx.report.push(
                        Code::InodeUsedMarkedFree,
                        format!("inode {} is in use but marked free in the inode bitmap", x.0),
                        ctx.repair,
                    );
                }
            }
            if g == 0 {
                for i in 1..FIRST_INO - 1 {
                    if !bit(&actual, i) {
                        ctx.report.push(
                            Code::ReservedInodeFree,
                            format!("reserved inode {} is not marked in use", i + 1),
                            ctx.repair,
                        );
                    }
                }
            }
            if (ipg..bs as u64 * 8).any(|i| !bit(&actual, i)) {
                ctx.report.push(
                    Code::InodeBitmapPadding,
                    format!("group {g}: inode bitmap padding bits are not set"),
                    ctx.repair,
                );
            }
            if ctx.repair && (expected != actual || !csum_ok) {
                ctx.img.write_block(geo.inode_bitmap(g), &expected)?;
                let grp = &mut ctx.groups[g as usize];
                grp.gd.inode_bitmap_csum = crc(ctx.seed, &expected);
                grp.gd.flags &= !GD_INODE_UNINIT;
                grp.gd_dirty = true;
            }
            ipg - popcount_upto(&expected, ipg)
        };
        let gd = ctx.groups[g as usize].gd;
        if u64::from(gd.free_inodes) != free_inodes {
            ctx.report.push(
                Code::GdFreeInodes,
                format!(
                    "group {g}: descriptor counts {} free inodes, but the bitmap has {}",
                    num(u64::from(gd.free_inodes)),
                    num(free_inodes)
                ),
                ctx.repair,
            );
            if ctx.repair {
                ctx.groups[g as usize].gd.free_inodes = free_inodes as u32;
                ctx.groups[g as usize].gd_dirty = true;
            }
        }
        if !any_bad && u64::from(gd.used_dirs) != dirs {
            ctx.report.push(
                Code::GdUsedDirs,
                format!("group {g}: descriptor counts {} directories, but the group holds {dirs}", gd.used_dirs),
                ctx.repair,
            );
            if ctx.repair {
                ctx.groups[g as usize].gd.used_dirs = dirs as u32;
                ctx.groups[g as usize].gd_dirty = true;
            }
        }
        free_inodes_sum += free_inodes;
    }
    if unattributed > 0 {
        ctx.report.note(format!(
            "{} block(s) are marked used but no readable structure claims them; they are left allocated because some metadata could not be read",
            num(unattributed)
        ));
    }
    if ctx.sb.free_blocks != free_blocks_sum {
        ctx.report.push(
            Code::SbFreeBlocks,
            format!(
                "superblock: free block count is {}, but the bitmaps have {} free blocks",
                num(ctx.sb.free_blocks),
                num(free_blocks_sum)
            ),
            ctx.repair,
        );
        ctx.sb.free_blocks = free_blocks_sum;
        ctx.sb_dirty = true;
    }
    if ctx.sb.free_inodes != free_inodes_sum {
        ctx.report.push(
            Code::SbFreeInodes,
            format!(
                "superblock: free inode count is {}, but the bitmaps have {} free inodes",
                num(ctx.sb.free_inodes),
                num(free_inodes_sum)
            ),
            ctx.repair,
        );
        ctx.sb.free_inodes = free_inodes_sum;
        ctx.sb_dirty = true;
    }
    ctx.report.blocks_used = geo.total_blocks - free_blocks_sum.min(geo.total_blocks);
    ctx.report.inodes_used = geo.total_inodes() - free_inodes_sum.min(geo.total_inodes());
    ctx.claims = claims;
    if ctx.repair {
        groups::write_dirty(ctx)?;
    }
    Ok(())
}
