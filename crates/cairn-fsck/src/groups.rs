//! Group descriptors: checksums, locations, flags, and access to the bitmaps.
//!
//! ## Purpose
//! Each group's 64-byte descriptor (table at `gdt_start`) says where its block
//! bitmap, inode bitmap and inode table are, whether those bitmaps were ever
//! written (`GD_BLOCK_UNINIT`, `GD_INODE_UNINIT`), the bitmaps' crc32c and the
//! group's free counters. This pass reads the whole table in large chunks
//! (one `pread` per MiB, so the 8 MiB table of a 16 TiB image costs a handful
//! of reads) and verifies each descriptor:
//!
//! * its checksum (seeded with `seed ^ group`);
//! * bitmap and inode-table locations equal the fixed layout
//!   (`cairn_format::layout::Geometry`) — the engine refuses anything else;
//! * only known flag bits; free counters within the group's size;
//! * group 0's inode bitmap is initialised (it holds the root).
//!
//! ## Uninitialised groups (as `alloc.rs` and `mkfs.rs` define them)
//! * `GD_BLOCK_UNINIT`: the block bitmap block was never written. Its
//!   content is *implied*: the group's fixed metadata in use — for group 0
//!   the superblock, descriptor table and journal too, i.e. bits
//!   `0 .. initially_used(g)` — plus the padding bits past the group's end;
//!   every other block free. The descriptor's `free_blocks` must then be
//!   `group_len - initially_used`.
//! * `GD_INODE_UNINIT`: the inode bitmap was never written and every inode
//!   of the group is free (padding bits past `inodes_per_group` set). The
//!   inode table may never have been written either, so it is not read.
//!
//! These rules are the format's, not fsck's: `cairn_format::bitmap`'s
//! `synth_block_bitmap` and `synth_inode_bitmap` build the implied bitmaps
//! (the engine materialises the same bytes), and pass 5 compares against
//! them. Descriptor locations come from `cairn_format::group_desc::gd_loc`.
//!
//! ## What it concludes
//! A [`Group`] (kept in `ctx`, the shared state) per group: the
//! descriptor as decoded (or, when its checksum fails, as reconstructed
//! from the layout and the surviving fields, marked for rewriting).

use crate::ctx::{Ctx, Group};
use crate::error::FsckError;
use crate::problems::Code;
use crate::report::Report;
use cairn_format::checksum::crc;
use cairn_format::codec::get_u32;
use cairn_format::group_desc::{gd_loc, GroupDesc, GD_BLOCK_UNINIT, GD_INODE_UNINIT, GD_SIZE};
use cairn_format::layout::Geometry;
use cairn_format::superblock::COMPAT_ITABLES_ZEROED;

/// Checks group `g`'s descriptor bytes `raw`; returns what pass 0 keeps of
/// it and whether it was damaged (rebuilt from the layout and its bytes).
fn check_one(geo: &Geometry, g: u64, raw: &[u8], seed: u32, repair: bool, report: &mut Report) -> (Group, bool) {
    let want = (geo.block_bitmap(g), geo.inode_bitmap(g), geo.inode_table(g));
    let mut grp = match GroupDesc::decode(seed, g, raw) {
        Ok(gd) => Group { gd, gd_dirty: false },
        Err(e) => {
            report.push(Code::GdDamaged, format!("group {g}: descriptor is damaged ({e})"), repair);
            // Keep what the damaged bytes still say; the layout fixes the rest.
            let flags = get_u32(raw, 36);
            let gd = GroupDesc {
                block_bitmap: want.0,
                inode_bitmap: want.1,
                inode_table: want.2,
                free_blocks: get_u32(raw, 24),
                free_inodes: get_u32(raw, 28),
                used_dirs: get_u32(raw, 32),
                flags: if flags & !(GD_BLOCK_UNINIT | GD_INODE_UNINIT) == 0 { flags } else { 0 },
                block_bitmap_csum: get_u32(raw, 40),
                inode_bitmap_csum: get_u32(raw, 44),
                itable_unused: 0,
            };
            return (Group { gd, gd_dirty: true }, true);
        }
    };
    let gd = &mut grp.gd;
    if (gd.block_bitmap, gd.inode_bitmap, gd.inode_table) != want {
        report.push(
            Code::GdLocations,
            format!(
                "group {g}: descriptor places the bitmaps and inode table at {}, {}, {} (the layout says {}, {}, {})",
                gd.block_bitmap, gd.inode_bitmap, gd.inode_table, want.0, want.1, want.2
            ),
            repair,
        );
        (gd.block_bitmap, gd.inode_bitmap, gd.inode_table) = want;
        grp.gd_dirty = true;
    }
    let unknown = gd.flags & !(GD_BLOCK_UNINIT | GD_INODE_UNINIT);
    if unknown != 0 {
        report.push(Code::GdUnknownFlags, format!("group {g}: descriptor has unknown flags {unknown:#x}"), repair);
        gd.flags &= GD_BLOCK_UNINIT | GD_INODE_UNINIT;
        grp.gd_dirty = true;
    }
    if g == 0 && gd.flags & GD_INODE_UNINIT != 0 {
        report.push(
            Code::GdGroup0Uninit,
            "group 0: inode bitmap marked uninitialised, but group 0 holds the root directory".into(),
            repair,
        );
        gd.flags &= !GD_INODE_UNINIT;
        grp.gd_dirty = true;
    }
    // Counters are compared with the bitmaps in pass 5; here only their range.
    if u64::from(gd.free_blocks) > geo.group_len(g) || u64::from(gd.free_inodes) > geo.inodes_per_group {
        report.push(Code::GdCountersRange, format!("group {g}: free counters exceed the group's size"), repair);
        grp.gd_dirty = true;
    }
    (grp, false)
}

/// Reads and verifies every group descriptor.
pub fn load(ctx: &mut Ctx) -> Result<(), FsckError> {
    let geo = ctx.geo;
    let bs = geo.block_size as u64;
    let per_block = bs / GD_SIZE as u64;
    let chunk = ((1u64 << 20) / bs).max(1);
    let mut groups = Vec::with_capacity(geo.group_count as usize);
    let mut blk = 0u64;
    while blk < ctx.sb.gdt_blocks {
        let n = chunk.min(ctx.sb.gdt_blocks - blk);
        let buf = ctx.img.read_blocks(ctx.sb.gdt_start + blk, n)?;
        for (i, raw) in buf.chunks(GD_SIZE).enumerate() {
            let g = blk * per_block + i as u64;
            if g >= geo.group_count {
                break;
            }
            let (grp, damaged) = check_one(&geo, g, raw, ctx.seed, ctx.repair, &mut ctx.report);
            if damaged && grp.inode_uninit() && ctx.repair && ctx.sb.feature_compat & COMPAT_ITABLES_ZEROED != 0 {
                // The rebuilt descriptor keeps a flag the damaged bytes said:
                // its inode table may not be the zeros the flag promises the
                // engine (see `COMPAT_ITABLES_ZEROED`), so the promise goes.
                ctx.sb.feature_compat &= !COMPAT_ITABLES_ZEROED;
                ctx.sb_dirty = true;
            }
            if grp.block_uninit() && grp.inode_uninit() {
                ctx.report.uninit_groups += 1;
            }
            groups.push(grp);
        }
        blk += n;
    }
    ctx.groups = groups;
    Ok(())
}

/// Group `g`'s inode bitmap as stored (`None` when uninitialised), and
/// whether its checksum matches the descriptor.
pub fn read_inode_bitmap(ctx: &mut Ctx, g: u64) -> Result<Option<(Vec<u8>, bool)>, FsckError> {
    let grp = &ctx.groups[g as usize];
    let at = (!grp.inode_uninit()).then(|| (ctx.geo.inode_bitmap(g), grp.gd.inode_bitmap_csum));
    read_bitmap(ctx, at)
}

/// Group `g`'s block bitmap as stored (`None` when uninitialised), and
/// whether its checksum matches the descriptor.
pub fn read_block_bitmap(ctx: &mut Ctx, g: u64) -> Result<Option<(Vec<u8>, bool)>, FsckError> {
    let grp = &ctx.groups[g as usize];
    let at = (!grp.block_uninit()).then(|| (ctx.geo.block_bitmap(g), grp.gd.block_bitmap_csum));
    read_bitmap(ctx, at)
}

/// The bitmap block `at` names (its block and the checksum its descriptor
/// keeps for it; `None` when uninitialised), and whether the checksum
/// matches.
fn read_bitmap(ctx: &mut Ctx, at: Option<(u64, u32)>) -> Result<Option<(Vec<u8>, bool)>, FsckError> {
    let Some((blk, want)) = at else { return Ok(None) };
    let b = ctx.img.read_block(blk)?;
    let ok = crc(ctx.seed, &b) == want;
    Ok(Some((b, ok)))
}

/// Rewrites every descriptor marked dirty (repair), one table block at a time.
pub fn write_dirty(ctx: &mut Ctx) -> Result<u64, FsckError> {
    let mut blocks: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    for (g, grp) in ctx.groups.iter().enumerate() {
        if grp.gd_dirty {
            blocks.insert(gd_loc(ctx.sb.gdt_start, ctx.geo.block_size, g as u64).0);
        }
    }
    let per_block = ctx.geo.block_size as u64 / GD_SIZE as u64;
    let mut written = 0;
    for blk in blocks {
        let mut buf = ctx.img.read_block(blk)?;
        let first = (blk - ctx.sb.gdt_start) * per_block;
        for g in first..(first + per_block).min(ctx.geo.group_count) {
            let grp = &ctx.groups[g as usize];
            if grp.gd_dirty {
                let (b, off) = gd_loc(ctx.sb.gdt_start, ctx.geo.block_size, g);
                debug_assert_eq!(b, blk);
                grp.gd.encode(ctx.seed, g, &mut buf[off..off + GD_SIZE]);
            }
        }
        ctx.img.write_block(blk, &buf)?;
        written += 1;
    }
    for grp in &mut ctx.groups {
        grp.gd_dirty = false;
    }
    Ok(written)
}
