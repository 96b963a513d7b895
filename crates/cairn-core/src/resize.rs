//! `cairn resize`: growing an unmounted file system, as `resize2fs` grows
//! an unmounted ext4.
//!
//! ## What grows
//! The image (or the device, which must already be larger) gains blocks at
//! its end. A short last group is first filled up to a whole group; then
//! whole new groups follow, each with its descriptor saying "never used"
//! (`GD_BLOCK_UNINIT | GD_INODE_UNINIT`, as mkfs leaves a fresh group), a
//! zeroed inode table, and in ext4's sparse groups a backup superblock.
//! Nothing else moves: no data block, no inode number, no journal block.
//!
//! ## Limits
//! * The group descriptor table does not move, so the file system can grow
//!   up to as many groups as its table's blocks hold: mkfs reserves blocks
//!   for 1,024 times its groups (as ext4's reserved GDT blocks; at most a
//!   quarter of the block size in blocks, and none where group 0 has no
//!   room beside the journal): an image made at 1 GiB with 128 MiB groups
//!   can reach 1 TiB. A larger size is refused, naming the largest.
//! * A last group too small for its own bitmaps and inode table is left
//!   out: the size is rounded down to the last whole group that fits.
//! * Shrinking is refused: it would move data and inodes out of the groups
//!   that go (resize2fs's hardest part), which cairn does not do.
//! * Here offline, and an image that was not cleanly unmounted is refused;
//!   a mounted file system grows through its daemon (`online_resize`).
//!
//! ## Crash safety
//! The writes are ordered so that a crash at any point leaves either the old
//! file system or the new one, never a mix that loses data: (1) the new
//! groups' descriptors and inode tables, past the old end where the old
//! geometry never looks; (2) the backup superblocks; (3) the primary
//! superblock, the switch; (4) the old last group's new blocks marked free
//! in its bitmap and descriptor. A crash between (3) and (4) leaves those
//! blocks marked used and owned by nothing: `cairn fsck --repair` gives
//! them back. Each step is flushed before the next.

use crate::dev::BlockDevice;
use crate::error::{ResizeError, Result};
use cairn_format::checksum::crc;
use cairn_format::group_desc::{gd_loc, GroupDesc, GD_BLOCK_UNINIT, GD_SIZE};
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, COMPAT_ITABLES_ZEROED, STATE_CLEAN, STATE_ERRORS};

/// What a grow did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grown {
    pub old_blocks: u64,
    pub new_blocks: u64,
    pub old_groups: u64,
    pub new_groups: u64,
    pub block_size: u32,
}

/// What a grow to the size `sb` already has reports: nothing changed.
pub fn unchanged(sb: &Superblock) -> Grown {
    Grown {
        old_blocks: sb.total_blocks,
        new_blocks: sb.total_blocks,
        old_groups: sb.group_count,
        new_groups: sb.group_count,
        block_size: sb.block_size(),
    }
}

/// The largest size in bytes `sb`'s descriptor table allows.
pub fn max_bytes(sb: &Superblock) -> u64 {
    let per_block = u64::from(sb.block_size()) / GD_SIZE as u64;
    sb.gdt_blocks * per_block * u64::from(sb.blocks_per_group) * u64::from(sb.block_size())
}

/// The superblock of the grown file system of about `new_bytes`, rounded
/// down to whole blocks and to a last group that holds its metadata.
pub(crate) fn grown_superblock(sb: &Superblock, new_bytes: u64) -> Result<(Superblock, Geometry)> {
    let bs = u64::from(sb.block_size());
    let bpg = u64::from(sb.blocks_per_group);
    let shown = |b: u64| crate::human_bytes(b * bs);
    let mut total = new_bytes / bs;
    if total <= sb.total_blocks {
        return Err(ResizeError::NotLarger { has: shown(sb.total_blocks) }.into());
    }
    let cap = max_bytes(sb) / bs;
    if total > cap {
        return Err(ResizeError::BeyondDescriptors { asked: shown(total), cap: shown(cap), groups: cap / bpg }.into());
    }
    loop {
        let groups = total.div_ceil(bpg);
        let new = Superblock { total_blocks: total, group_count: groups, ..sb.clone() };
        match Geometry::new(&new) {
            Ok(geo) => return Ok((new, geo)),
            // The last group cannot hold its metadata: leave it out.
            Err(_) if groups > sb.group_count && (groups - 1) * bpg > sb.total_blocks => total = (groups - 1) * bpg,
            Err(_) => return Err(ResizeError::LastGroupTooSmall { asked: shown(total) }.into()),
        }
    }
}

/// The size in bytes the file system would have after growing to about
/// `new_bytes` (what [`grow`] would do), or why it cannot.
pub fn plan(sb: &Superblock, new_bytes: u64) -> Result<u64> {
    let (new, _) = grown_superblock(sb, new_bytes)?;
    Ok(new.total_blocks * u64::from(new.block_size()))
}

fn read_block(dev: &dyn BlockDevice, bs: usize, b: u64) -> Result<Vec<u8>> {
    let mut v = vec![0u8; bs];
    dev.read_at(&mut v, b * bs as u64)?;
    Ok(v)
}

/// Makes the inode tables of `groups` read as zeros without writing them,
/// if the device can (holes in an image file, see
/// [`BlockDevice::zero_range`]); stops at the first it cannot and returns
/// false. A file system whose every table reads as zeros says so
/// (`COMPAT_ITABLES_ZEROED`), so the engine need not read a table block
/// before it takes the block's first inode: mkfs and both resizes keep that
/// true for the groups they make.
pub(crate) fn zero_inode_tables(dev: &dyn BlockDevice, geo: &Geometry, groups: std::ops::Range<u64>) -> Result<bool> {
    let bs = u64::from(geo.block_size);
    for g in groups {
        if !dev.zero_range(geo.inode_table(g) * bs, geo.itable_blocks * bs)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Grows the unmounted file system on `dev` (already at least `new_bytes`
/// long) to about `new_bytes`; see the module essay. The caller holds the
/// image's exclusive lock.
pub fn grow(dev: &dyn BlockDevice, new_bytes: u64) -> Result<Grown> {
    let sb = crate::dev::read_superblock(dev)?;
    if sb.state & STATE_CLEAN == 0 || sb.state & STATE_ERRORS != 0 {
        return Err(ResizeError::NotClean.into());
    }
    if new_bytes > dev.size() {
        return Err(ResizeError::DeviceTooSmall {
            holds: crate::human_bytes(dev.size()),
            asked: crate::human_bytes(new_bytes),
        }
        .into());
    }
    let old_geo = Geometry::new(&sb)?;
    let (mut new_sb, geo) = grown_superblock(&sb, new_bytes)?;
    let bs = sb.block_size() as usize;
    let seed = sb.csum_seed();
    let last = sb.group_count - 1;
    let added_to_last = geo.group_len(last) - old_geo.group_len(last);

    // (1) The new groups: descriptors and zeroed inode tables.
    let mut new_free = 0u64;
    let mut gdt: Option<(u64, Vec<u8>)> = None;
    let flush_gdt = |gdt: &mut Option<(u64, Vec<u8>)>| -> Result<()> {
        if let Some((b, buf)) = gdt.take() {
            dev.write_at(&buf, b * bs as u64)?;
        }
        Ok(())
    };
    for g in sb.group_count..new_sb.group_count {
        let (blk, off) = gd_loc(sb.gdt_start, sb.block_size(), g);
        if gdt.as_ref().is_none_or(|(b, _)| *b != blk) {
            flush_gdt(&mut gdt)?;
            gdt = Some((blk, read_block(dev, bs, blk)?));
        }
        let gd = geo.unused_group_desc(g);
        new_free += u64::from(gd.free_blocks);
        gd.encode(seed, g, &mut gdt.as_mut().expect("read above").1[off..off + GD_SIZE]);
    }
    flush_gdt(&mut gdt)?;
    if !zero_inode_tables(dev, &geo, sb.group_count..new_sb.group_count)? {
        // A device that cannot zero: the engine reads new tables first.
        new_sb.feature_compat &= !COMPAT_ITABLES_ZEROED;
    }
    dev.flush()?;

    // (2) Backups, (3) the primary.
    let new_inodes = (new_sb.group_count - sb.group_count) * u64::from(sb.inodes_per_group);
    new_sb.free_blocks = sb.free_blocks + new_free + added_to_last;
    new_sb.free_inodes = sb.free_inodes + new_inodes;
    crate::tune::write_superblocks(dev, &new_sb, &geo)?;

    // (4) The old last group's new blocks.
    if added_to_last > 0 {
        let (blk, off) = gd_loc(sb.gdt_start, sb.block_size(), last);
        let mut buf = read_block(dev, bs, blk)?;
        let mut gd = GroupDesc::decode(seed, last, &buf[off..off + GD_SIZE])?;
        if gd.flags & GD_BLOCK_UNINIT == 0 {
            let mut bm = read_block(dev, bs, gd.block_bitmap)?;
            if crc(seed, &bm) != gd.block_bitmap_csum {
                return Err(ResizeError::LastBitmapChecksum { group: last, blocks: added_to_last }.into());
            }
            for b in old_geo.group_len(last)..geo.group_len(last) {
                bm[(b / 8) as usize] &= !(1 << (b % 8));
            }
            dev.write_at(&bm, gd.block_bitmap * bs as u64)?;
            gd.block_bitmap_csum = crc(seed, &bm);
        }
        gd.free_blocks += added_to_last as u32;
        gd.encode(seed, last, &mut buf[off..off + GD_SIZE]);
        dev.write_at(&buf, blk * bs as u64)?;
        dev.flush()?;
    }
    Ok(Grown {
        old_blocks: sb.total_blocks,
        new_blocks: new_sb.total_blocks,
        old_groups: sb.group_count,
        new_groups: new_sb.group_count,
        block_size: sb.block_size(),
    })
}
