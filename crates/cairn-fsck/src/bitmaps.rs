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
use crate::ctx::{Claim, Ctx};
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

/// A live inode as pass 5 counts it.
#[derive(Debug, Clone, Copy)]
struct LiveInode {
    ino: u64,
    is_dir: bool,
    /// Could not be decoded: the group's directory count is not judged.
    bad: bool,
    /// Brought back by a repair in this run: not yet in the bitmap, and
    /// not reported as marked free.
    resurrected: bool,
}

/// What the groups add up to, for the superblock's totals.
#[derive(Debug, Default)]
struct Totals {
    free_blocks: u64,
    free_inodes: u64,
    /// Blocks marked used that nothing claims, kept because ownership is
    /// not fully known.
    unattributed: u64,
}

/// Compares and (with repair) rewrites every group's bitmaps and counters.
pub fn run(ctx: &mut Ctx) -> Result<(), FsckError> {
    let geo = ctx.geo;
    let ipg = geo.inodes_per_group;
    let mut claims = std::mem::take(&mut ctx.claims);
    // Sorted in pass 2, but repairs since (a /lost+found made again, a
    // salvaged tree) add claims at the end: the group slices below need
    // the order (a fuzzed image made pass 5 slice a claim from the group
    // before).
    claims.sort_unstable_by_key(|c| (c.start, c.len));
    // Only the claims of live owners count: a freed inode's blocks are free.
    let owned: Vec<&Claim> = claims.iter().filter(|c| claim_live(ctx, c)).collect();
    let mut live: Vec<LiveInode> = ctx
        .inodes
        .iter()
        .filter(|(_, i)| !i.freed)
        .map(|(k, i)| LiveInode { ino: *k, is_dir: i.is_dir(), bad: i.bad, resurrected: i.resurrected })
        .collect();
    live.sort_unstable_by_key(|x| x.ino);
    let mut li = 0usize;
    let mut totals = Totals::default();
    for g in 0..geo.group_count {
        ctx.progress("pass 5: bitmaps", g, geo.group_count);
        let gstart = geo.group_start(g);
        let gend = gstart + geo.group_len(g);
        let gclaims = &owned[owned.partition_point(|c| c.start < gstart)..owned.partition_point(|c| c.start < gend)];
        let free = block_bitmap(ctx, g, gclaims, &mut totals.unattributed)?;
        check_free_blocks(ctx, g, free);
        totals.free_blocks += free;

        let start = li;
        while li < live.len() && live[li].ino <= (g + 1) * ipg {
            li += 1;
        }
        let ginodes = &live[start..li];
        debug_assert!(ginodes.iter().all(|x| x.ino > g * ipg));
        let free_inodes = inode_bitmap(ctx, g, ginodes)?;
        check_inode_counts(ctx, g, free_inodes, ginodes);
        totals.free_inodes += free_inodes;
    }
    check_totals(ctx, &totals);
    ctx.claims = claims;
    if ctx.repair {
        groups::write_dirty(ctx)?;
    }
    Ok(())
}

/// Group `g`'s block bitmap against the blocks its live owners claim
/// (`gclaims`, in block order): reports the differences, rewrites it with
/// repair, and returns the group's free blocks.
fn block_bitmap(ctx: &mut Ctx, g: u64, gclaims: &[&Claim], unattributed: &mut u64) -> Result<u64, FsckError> {
    let geo = ctx.geo;
    let gstart = geo.group_start(g);
    let glen = geo.group_len(g);
    let block_uninit = ctx.groups[g as usize].block_uninit();
    if block_uninit && gclaims.is_empty() {
        return Ok(glen - geo.initially_used(g));
    }
    let synth = synth_block_bitmap(&geo, g);
    let mut expected = synth.clone();
    for c in gclaims {
        set_range(&mut expected, c.start - gstart, c.start + c.len - gstart);
    }
    let (actual, csum_ok) = groups::read_block_bitmap(ctx, g)?.unwrap_or((synth, true));
    let mut fixed_any = !csum_ok;
    if !csum_ok {
        ctx.report.push(
            Code::BlockBitmapChecksum,
            format!("group {g}: block bitmap checksum does not match its group descriptor"),
            ctx.repair,
        );
    }
    fixed_any |= report_used_marked_free(ctx, g, gclaims, &actual, block_uninit);
    let meta_missing =
        (0..geo.initially_used(g)).chain(glen..u64::from(geo.block_size) * 8).filter(|&i| !bit(&actual, i)).count();
    if meta_missing > 0 {
        fixed_any = true;
        ctx.report.push(
            Code::BlockBitmapMetadata,
            format!(
                "group {g}: block bitmap leaves {meta_missing} bit(s) of the group's fixed metadata or padding clear"
            ),
            ctx.repair,
        );
    }
    let (final_bm, freed) = unowned_blocks(ctx, g, &actual, expected, unattributed);
    fixed_any |= freed;
    if ctx.repair && (fixed_any || final_bm != actual) {
        ctx.img.write_block(geo.block_bitmap(g), &final_bm)?;
        let grp = &mut ctx.groups[g as usize];
        grp.gd.block_bitmap_csum = crc(ctx.seed, &final_bm);
        grp.gd.flags &= !GD_BLOCK_UNINIT;
        grp.gd_dirty = true;
    }
    Ok(glen - popcount_upto(&final_bm, glen))
}

/// Reports the claimed blocks of group `g` that `actual` marks free (the
/// first [`PER_GROUP_REPORTS`] runs, then a count); true if there were any.
fn report_used_marked_free(ctx: &mut Ctx, g: u64, gclaims: &[&Claim], actual: &[u8], block_uninit: bool) -> bool {
    let gstart = ctx.geo.group_start(g);
    let where_ = if block_uninit { " (the group is marked uninitialised)" } else { "" };
    let mut shown = 0;
    for c in gclaims {
        let rel = c.start - gstart;
        let missing = (rel..rel + c.len).filter(|&i| !bit(actual, i)).count() as u64;
        if missing > 0 {
            if shown < PER_GROUP_REPORTS {
                let r = block_range(c.start, c.len);
                let verb = if c.len == 1 { "is" } else { "are" };
                let how = if missing == c.len { String::new() } else { format!("{missing} of them ") };
                let msg = format!("{r} {verb} in use by {}, but {how}marked free in the bitmap{where_}", c.owner);
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
    shown > 0
}

/// The blocks `actual` marks used that nothing owns (not in `expected`):
/// kept used and counted in `unattributed` while ownership is incomplete,
/// else reported. Returns the bitmap to keep, and whether it frees any.
fn unowned_blocks(ctx: &mut Ctx, g: u64, actual: &[u8], expected: Vec<u8>, unattributed: &mut u64) -> (Vec<u8>, bool) {
    let extra: Vec<u8> = actual.iter().zip(&expected).map(|(a, e)| a & !e).collect();
    let extra_runs = runs(&extra, ctx.geo.group_len(g));
    let mut final_bm = expected;
    if extra_runs.is_empty() {
        return (final_bm, false);
    }
    if ctx.ownership_incomplete() {
        *unattributed += extra_runs.iter().map(|r| r.1).sum::<u64>();
        for (f, a) in final_bm.iter_mut().zip(actual) {
            *f |= a;
        }
        return (final_bm, false);
    }
    let gstart = ctx.geo.group_start(g);
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
        let (verb, them) = if *l == 1 { ("is", "it") } else { ("are", "them") };
        ctx.report.push(
            Code::BlocksMarkedUsedUnowned,
            format!("{r} {verb} marked used in the bitmap, but nothing owns {them}"),
            ctx.repair,
        );
    }
    (final_bm, true)
}

/// The descriptor's free block count against the bitmap's.
fn check_free_blocks(ctx: &mut Ctx, g: u64, free: u64) {
    let stored = ctx.groups[g as usize].gd.free_blocks;
    let says = |d, b| format!("group {g}: descriptor counts {d} free blocks, but the bitmap has {b}");
    if counter_differs(ctx, Code::GdFreeBlocks, stored.into(), free, says) && ctx.repair {
        let grp = &mut ctx.groups[g as usize];
        grp.gd.free_blocks = free as u32;
        grp.gd_dirty = true;
    }
}

/// Group `g`'s inode bitmap against its live inodes (`ginodes`, in number
/// order): reports the differences, rewrites it with repair, and returns
/// the group's free inodes.
fn inode_bitmap(ctx: &mut Ctx, g: u64, ginodes: &[LiveInode]) -> Result<u64, FsckError> {
    let geo = ctx.geo;
    let ipg = geo.inodes_per_group;
    let lo = g * ipg + 1;
    if ctx.groups[g as usize].inode_uninit() && ginodes.is_empty() && g != 0 {
        return Ok(ipg);
    }
    let synth = synth_inode_bitmap(&geo);
    let mut expected = synth.clone();
    if g == 0 {
        set_range(&mut expected, 0, FIRST_INO - 1);
    }
    for x in ginodes {
        set_bit(&mut expected, x.ino - lo);
    }
    let (actual, csum_ok) = groups::read_inode_bitmap(ctx, g)?.unwrap_or((synth, true));
    if !csum_ok {
        ctx.report.push(
            Code::InodeBitmapChecksum,
            format!("group {g}: inode bitmap checksum does not match its group descriptor"),
            ctx.repair,
        );
    }
    for x in ginodes {
        if !bit(&actual, x.ino - lo) && !x.resurrected {
            ctx.report.push(
                Code::InodeUsedMarkedFree,
                format!("inode {} is in use but marked free in the inode bitmap", x.ino),
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
    if (ipg..u64::from(geo.block_size) * 8).any(|i| !bit(&actual, i)) {
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
    Ok(ipg - popcount_upto(&expected, ipg))
}

/// The descriptor's free inode and directory counts against the group's
/// (directories only when every inode of the group could be decoded).
fn check_inode_counts(ctx: &mut Ctx, g: u64, free_inodes: u64, ginodes: &[LiveInode]) {
    let gd = ctx.groups[g as usize].gd;
    let says = |d, b| format!("group {g}: descriptor counts {d} free inodes, but the bitmap has {b}");
    if counter_differs(ctx, Code::GdFreeInodes, gd.free_inodes.into(), free_inodes, says) && ctx.repair {
        ctx.groups[g as usize].gd.free_inodes = free_inodes as u32;
        ctx.groups[g as usize].gd_dirty = true;
    }
    let dirs = ginodes.iter().filter(|x| x.is_dir).count() as u64;
    let any_bad = ginodes.iter().any(|x| x.bad);
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
}

/// The superblock's totals against the groups' sums, and the figures the
/// report shows.
fn check_totals(ctx: &mut Ctx, totals: &Totals) {
    let geo = ctx.geo;
    if totals.unattributed > 0 {
        ctx.report.note(format!(
            "{} block(s) are marked used but no readable structure claims them; they are left allocated because some metadata could not be read",
            num(totals.unattributed)
        ));
    }
    let says = |s, b| format!("superblock: free block count is {s}, but the bitmaps have {b} free blocks");
    if counter_differs(ctx, Code::SbFreeBlocks, ctx.sb.free_blocks, totals.free_blocks, says) {
        ctx.sb.free_blocks = totals.free_blocks;
        ctx.sb_dirty = true;
    }
    let says = |s, b| format!("superblock: free inode count is {s}, but the bitmaps have {b} free inodes");
    if counter_differs(ctx, Code::SbFreeInodes, ctx.sb.free_inodes, totals.free_inodes, says) {
        ctx.sb.free_inodes = totals.free_inodes;
        ctx.sb_dirty = true;
    }
    ctx.report.blocks_used = geo.total_blocks - totals.free_blocks.min(geo.total_blocks);
    ctx.report.inodes_used = geo.total_inodes() - totals.free_inodes.min(geo.total_inodes());
}

/// Reports a counter kept on disk (`stored`) that differs from what this
/// pass `counted`; `says(stored, counted)` words it, both written with
/// thousands separators. True if they differ: the caller rewrites it.
fn counter_differs(
    ctx: &mut Ctx,
    code: Code,
    stored: u64,
    counted: u64,
    says: impl FnOnce(String, String) -> String,
) -> bool {
    if stored == counted {
        return false;
    }
    ctx.report.push(code, says(num(stored), num(counted)), ctx.repair);
    true
}
