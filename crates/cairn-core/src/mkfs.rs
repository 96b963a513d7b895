//! Formatting an image (a library function; `cairn mkfs` wraps it).
//!
//! mkfs writes only what a new file system needs: the superblock, the group
//! descriptor table, the journal superblock, group 0's inode bitmap and the
//! root inode. Every other group starts *uninitialised* (descriptor flags):
//! its bitmaps are synthesised from the layout when first used, so a 16 TiB
//! sparse image formats in seconds and stays sparse. The superblock is
//! written last, after a flush, so an interrupted mkfs leaves no image that
//! looks valid.

use crate::dev::BlockDevice;
use crate::error::{FsError, Result};
use crate::fs::{Fs, MountOptions};
use crate::types::Ctx;
use cairn_format::checksum::crc;
use cairn_format::group_desc::*;
use cairn_format::inode::*;
use cairn_format::journal::{JournalSuper, MIN_JOURNAL_BLOCKS};
use std::sync::Arc;

/// Smallest journal mkfs makes: a record (a third of the ring) must hold
/// the worst case of any single operation's handle on realistic tree depths
/// (see `journal::credits`); 256 blocks give about 78 credits per checkpoint.
/// Images with smaller journals (down to the format's
/// [`MIN_JOURNAL_BLOCKS`]) still mount; operations that need more than a
/// record holds fail with ENOSPC and say so.
pub const MKFS_MIN_JOURNAL_BLOCKS: u64 = 256;
const _: () = assert!(MKFS_MIN_JOURNAL_BLOCKS >= MIN_JOURNAL_BLOCKS);

/// Free blocks a new file system keeps beyond the metadata reserve
/// ([`crate::alloc::metadata_reserve`], which file data may not take): the
/// root's and `/lost+found`'s directory blocks come out of them, and the
/// rest is room for files. The smallest image mkfs accepts leaves this much
/// (a default journal in a one-group image shrinks for it, down to
/// [`MKFS_MIN_JOURNAL_BLOCKS`]), so the size it states as the minimum is
/// one that formats, mounts and takes a file.
pub const MKFS_MIN_FILE_BLOCKS: u64 = 64;

/// Blocks group 0 keeps for data whatever its metadata and journal take.
const GROUP0_MIN_DATA: u64 = 16;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{max_gdt_reserve, Superblock, STATE_CLEAN, VERSION};
use cairn_format::{FIRST_INO, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, ROOT_INO};

/// The journal mkfs makes when none is asked for, in blocks: 1/64 of the
/// image from 1,024 to 32,768 blocks (4 to 128 MiB of 4 KiB blocks), and
/// from 32 GiB on what mke2fs 1.47 gives ext4
/// (256 MiB, 512 MiB from 64 GiB, 1 GiB from 128 GiB), which takes more
/// groups than group 0. A longer log lets a block changed all the time — a
/// directory leaf in a create storm — go home once per cycle of the log, and
/// a cycle then lasts longer.
pub fn default_journal_blocks(total: u64, block_size: u64) -> u64 {
    const GIB: u64 = 1 << 30;
    let small = (total / 64).clamp(1024, 32768);
    let big = match total.saturating_mul(block_size) {
        b if b >= 128 * GIB => GIB,
        b if b >= 64 * GIB => GIB / 2,
        b if b >= 32 * GIB => GIB / 4,
        _ => 0,
    };
    small.max(big / block_size)
}

/// Options for [`format`].
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Block size in bytes (power of two, 1024..=65536).
    pub block_size: u32,
    /// Blocks per group (multiple of 64, at most 8 * block_size); `None` = the maximum.
    pub blocks_per_group: Option<u32>,
    /// Bytes of data per inode (inode density).
    pub bytes_per_inode: u64,
    /// Journal size in blocks; `None` picks one from the image size.
    pub journal_blocks: Option<u64>,
    /// Volume label (up to 32 bytes).
    pub label: String,
    /// Owner of the root directory (and of `/lost+found`).
    pub root_uid: u32,
    /// Group of the root directory (and of `/lost+found`).
    pub root_gid: u32,
    /// Bytes of the device the file system takes (`None`: all of it; a
    /// block device may be larger than the file system, as with mke2fs's
    /// size argument).
    pub size: Option<u64>,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            block_size: 4096,
            blocks_per_group: None,
            bytes_per_inode: 16384,
            journal_blocks: None,
            label: String::new(),
            root_uid: 0,
            root_gid: 0,
            size: None,
        }
    }
}

/// What [`format`] made.
#[derive(Debug, Clone)]
pub struct FormatSummary {
    pub block_size: u32,
    pub total_blocks: u64,
    pub group_count: u64,
    pub inodes: u64,
    pub journal_blocks: u64,
    pub uuid: [u8; 16],
}

fn invalid(msg: String) -> FsError {
    FsError::Geometry(msg)
}

/// Computes the superblock for a device of `size` bytes. A size outside
/// what these options can format is refused with the bound it missed: the
/// smallest size that works, or the largest.
pub fn plan(size: u64, opts: &MkfsOptions) -> Result<Superblock> {
    let err = match plan_exact(size, opts) {
        Ok(sb) => return Ok(sb),
        Err(e) => e,
    };
    // Every block size and option that formats anything formats 1 GiB.
    const PIVOT: u64 = 1 << 30;
    let bs = u64::from(opts.block_size);
    let fits = |blocks: u64| plan_exact(blocks * bs, opts).is_ok();
    if bs == 0 || !fits(PIVOT / bs) {
        return Err(err);
    }
    // Bisect between a size that fails and one that formats.
    let (mut fails, mut formats) = (size / bs, PIVOT / bs);
    while fails.abs_diff(formats) > 1 {
        let mid = fails.min(formats) + fails.abs_diff(formats) / 2;
        if fits(mid) {
            formats = mid;
        } else {
            fails = mid;
        }
    }
    let bound = formats * bs;
    Err(invalid(if size < PIVOT {
        format!(
            "too small: with {bs}-byte blocks and these options cairn needs at least {} ({bound} bytes)",
            crate::types::human_bytes(bound)
        )
    } else {
        let hint = if bs < u64::from(MAX_BLOCK_SIZE) { "; larger blocks (--block-size) reach further" } else { "" };
        format!(
            "too large: with {bs}-byte blocks cairn formats at most {} ({bound} bytes), as the group \
             descriptor table and the journal must fit the first group{hint}",
            crate::types::human_bytes(bound)
        )
    }))
}

/// Descriptor-table blocks mkfs reserves past what `groups` need, so that
/// `cairn resize` can add groups (the table cannot move): enough for 1,024
/// times as many groups (up to 2^48 blocks), as mke2fs reserves, at most
/// [`max_gdt_reserve`] blocks. They come out of group 0's room; a journal
/// that group 0 holds alone keeps the size asked for (a smaller reserve
/// then), a larger one gives up at most a quarter of that room, and a
/// group 0 too small for the journal asked gives none (the smallest image
/// stays as small).
fn gdt_reserve(groups: u64, bpg: u64, bs: u64, room: u64, journal: u64) -> u64 {
    let per_block = bs / GD_SIZE as u64;
    let most_groups = groups.saturating_mul(1024).min((1u64 << 48) / bpg).max(groups);
    let want = most_groups.div_ceil(per_block) - groups.div_ceil(per_block);
    let spare = match room.checked_sub(journal) {
        Some(left) => left,
        None if room >= 4 * MKFS_MIN_JOURNAL_BLOCKS => room / 4,
        None => 0,
    };
    want.min(max_gdt_reserve(bs)).min(spare)
}

fn plan_exact(size: u64, opts: &MkfsOptions) -> Result<Superblock> {
    let bs = opts.block_size;
    if !bs.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
        return Err(invalid(format!("block size {bs} must be a power of two from 1024 to 65536")));
    }
    let bs64 = u64::from(bs);
    let mut total = size / bs64;
    let max_bpg = bs64 * 8;
    let bpg = u64::from(opts.blocks_per_group.unwrap_or(max_bpg as u32));
    if bpg < 256 || bpg > max_bpg || bpg % 64 != 0 {
        return Err(invalid(format!("group size {bpg} blocks must be a multiple of 64 from 256 to {max_bpg}")));
    }
    let ipb = bs64 / INODE_SIZE as u64;
    let bpi = opts.bytes_per_inode.max(1024);
    let ipg = ((bpg * bs64 / bpi).div_ceil(ipb) * ipb).clamp(ipb, max_bpg.min(bpg * ipb / 4).max(ipb));
    let meta_blocks = 2 + ipg / ipb;
    let mut groups = total.div_ceil(bpg);
    // The last group holds its metadata (after a backup superblock, if it
    // has one) and some data, or it is dropped.
    if groups > 1 && total - (groups - 1) * bpg < 1 + meta_blocks + 16 {
        groups -= 1;
        total = groups * bpg;
    }
    if total > (1u64 << 48) {
        return Err(invalid("image too large (more than 2^48 blocks)".into()));
    }
    let gdt_need = (groups * GD_SIZE as u64).div_ceil(bs64);
    let g0_len = bpg.min(total);
    let room0 = g0_len.saturating_sub(1 + gdt_need + meta_blocks + GROUP0_MIN_DATA);
    let need_free = crate::alloc::metadata_reserve(total) + MKFS_MIN_FILE_BLOCKS;
    let want = opts.journal_blocks.unwrap_or_else(|| default_journal_blocks(total, bs64));
    let gdt_blocks = gdt_need + gdt_reserve(groups, bpg, bs64, room0, want);
    let room = room0 - (gdt_blocks - gdt_need);
    // A journal larger than group 0's room fills it and goes on through
    // whole groups (past their metadata), as many as come nearest to the
    // size asked; none (group 0's room) when that is nearer and enough.
    let segment = bpg - meta_blocks;
    let mut extra_groups = want.saturating_sub(room).saturating_add(segment / 2) / segment;
    if extra_groups == 0 && want > room && room < MKFS_MIN_JOURNAL_BLOCKS {
        // Group 0's room alone is too small a journal: one group more.
        extra_groups = 1;
    }
    let (journal, journal_groups) = if extra_groups == 0 || groups < 2 {
        let mut journal = want.min(room);
        if groups == 1 && opts.journal_blocks.is_none() {
            // Group 0 is all there is: a default journal leaves the free
            // blocks the file system needs, if it can stay large enough.
            let leave = need_free.saturating_sub(GROUP0_MIN_DATA);
            journal = journal.min(room.saturating_sub(leave)).max(MKFS_MIN_JOURNAL_BLOCKS.min(journal));
        }
        (journal, 0)
    } else {
        let k = extra_groups;
        // At most half of the groups after group 0, and never the last.
        if k > (groups - 1) / 2 || k + 1 >= groups {
            return Err(invalid(format!(
                "a journal of {want} blocks would fill {k} of the image's {groups} groups: at most {} can hold it",
                ((groups - 1) / 2).min(groups - 2)
            )));
        }
        (room + k * segment, k)
    };
    if opts.journal_blocks.is_some_and(|j| j < MKFS_MIN_JOURNAL_BLOCKS) {
        return Err(invalid(format!(
            "a journal of {journal} blocks is too small: cairn needs at least {MKFS_MIN_JOURNAL_BLOCKS} (one record \
             must hold the worst case of one operation)"
        )));
    }
    if journal < MKFS_MIN_JOURNAL_BLOCKS || total < 64 {
        return Err(invalid(format!(
            "image too small: {size} bytes leave room for a {journal}-block journal (at least {MKFS_MIN_JOURNAL_BLOCKS} needed)"
        )));
    }
    let mut label = [0u8; 32];
    let lb = opts.label.as_bytes();
    label[..lb.len().min(32)].copy_from_slice(&lb[..lb.len().min(32)]);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let mut sb = Superblock {
        version: VERSION,
        block_size_log2: bs.trailing_zeros(),
        state: STATE_CLEAN,
        feature_incompat: cairn_format::superblock::INCOMPAT_XATTR_EXTERNAL
            | cairn_format::superblock::INCOMPAT_JOURNAL_ZSTD
            | cairn_format::superblock::INCOMPAT_BACKUP_SUPERBLOCKS
            | if journal_groups > 0 { cairn_format::superblock::INCOMPAT_JOURNAL_GROUPS } else { 0 },
        uuid: rand::random(),
        total_blocks: total,
        blocks_per_group: bpg as u32,
        inodes_per_group: ipg as u32,
        group_count: groups,
        gdt_start: 1,
        gdt_blocks,
        journal_start: 1 + gdt_blocks,
        journal_blocks: journal,
        journal_groups: journal_groups as u32,
        next_ino: FIRST_INO,
        mkfs_time: t,
        last_write_time: t,
        hash_seed: rand::random(),
        label,
        ..Default::default()
    };
    let geo = Geometry::new(&sb)?;
    sb.free_blocks = (0..groups).map(|g| geo.group_len(g) - geo.initially_used(g)).sum();
    sb.free_inodes = geo.total_inodes() - (FIRST_INO - 1);
    if sb.free_blocks < need_free {
        return Err(invalid(format!(
            "image too small: {size} bytes leave {} free blocks; cairn needs {need_free} (the metadata reserve, the \
             root's and /lost+found's directory blocks, room for files)",
            sb.free_blocks
        )));
    }
    Ok(sb)
}

/// Formats `dev` (its whole size, or `opts.size`). `progress(done, total)` is called as
/// the group descriptor table is written.
pub fn format(dev: &dyn BlockDevice, opts: &MkfsOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<FormatSummary> {
    let size = opts.size.map_or(dev.size(), |s| s.min(dev.size()));
    let mut sb = plan(size, opts)?;
    let geo = Geometry::new(&sb)?;
    let bs = sb.block_size() as usize;
    let seed = sb.csum_seed();
    // Wipe old signatures (ours at 0, ext4 at 1080, btrfs at 64 KiB, ...).
    let wipe = (128 * 1024).min(size) as usize;
    dev.write_at(&vec![0u8; wipe], 0)?;
    // Group 0's inode bitmap: inodes 1..FIRST_INO-1 reserved (1 = root).
    let mut ibm = vec![0u8; bs];
    for i in (0..FIRST_INO - 1).chain(geo.inodes_per_group..bs as u64 * 8) {
        ibm[(i / 8) as usize] |= 1 << (i % 8);
    }
    dev.write_at(&ibm, geo.inode_bitmap(0) * bs as u64)?;
    // Group descriptors.
    let per_block = (bs / GD_SIZE) as u64;
    let mut block = vec![0u8; bs];
    let mut chunk: Vec<u8> = Vec::with_capacity(bs * 256);
    let mut chunk_start = sb.gdt_start;
    for gb in 0..sb.gdt_blocks {
        block.fill(0);
        for i in 0..per_block {
            let g = gb * per_block + i;
            if g >= sb.group_count {
                break;
            }
            let mut gd = geo.unused_group_desc(g);
            if g == 0 {
                gd.flags = GD_BLOCK_UNINIT;
                gd.free_inodes -= (FIRST_INO - 1) as u32;
                gd.used_dirs = 1;
                gd.inode_bitmap_csum = crc(seed, &ibm);
            }
            let off = (i as usize) * GD_SIZE;
            gd.encode(seed, g, &mut block[off..off + GD_SIZE]);
        }
        chunk.extend_from_slice(&block);
        if chunk.len() >= bs * 256 || gb + 1 == sb.gdt_blocks {
            dev.write_at(&chunk, chunk_start * bs as u64)?;
            chunk_start += (chunk.len() / bs) as u64;
            chunk.clear();
            progress(gb + 1, sb.gdt_blocks);
        }
    }
    // Journal superblock.
    let mut jb = vec![0u8; bs];
    JournalSuper { tail_seq: 1, tail_off: 1 }.encode(seed, &mut jb);
    dev.write_at(&jb, sb.journal_start * bs as u64)?;
    // Root directory.
    let t = crate::types::now();
    let root = DiskInode {
        mode: S_IFDIR | 0o755,
        uid: opts.root_uid,
        gid: opts.root_gid,
        nlink: 2,
        generation: rand::random(),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        parent: ROOT_INO,
        data: DataArea::Tree(0),
        ..Default::default()
    };
    let (iblk, ioff) = geo.inode_location(ROOT_INO);
    let mut itb = vec![0u8; bs];
    root.encode(seed, ROOT_INO, &mut itb[ioff..ioff + INODE_SIZE]);
    dev.write_at(&itb, iblk * bs as u64)?;
    // Every other group's inode table reads as zeros if the device can make
    // it so without writing it (holes in an image file): then the engine
    // need not read a table block before it takes the block's first inode.
    if crate::resize::zero_inode_tables(dev, &geo, 1..sb.group_count)? {
        sb.feature_compat |= cairn_format::superblock::COMPAT_ITABLES_ZEROED;
    }
    // The backup superblocks, then the primary last.
    let mut b0 = vec![0u8; bs];
    for g in geo.backup_groups() {
        cairn_format::backup::copy_for_group(&sb, g).encode(&mut b0);
        dev.write_at(&b0, geo.group_start(g) * bs as u64)?;
    }
    dev.flush()?;
    b0.fill(0);
    sb.encode(&mut b0);
    dev.write_at(&b0, 0)?;
    dev.flush()?;
    Ok(FormatSummary {
        block_size: sb.block_size(),
        total_blocks: sb.total_blocks,
        group_count: sb.group_count,
        inodes: geo.total_inodes(),
        journal_blocks: sb.journal_blocks,
        uuid: sb.uuid,
    })
}

/// The directory e2fsck-style repair reconnects lost files to.
pub const LOST_FOUND: &[u8] = b"lost+found";

/// Creates `/lost+found` (mode 0700, owned by the root directory's owner,
/// [`MkfsOptions::root_uid`]) on a freshly formatted image, as mke2fs does,
/// so that a repair finds it in place instead of having to create it on a
/// damaged image. It is an ordinary directory made through the engine (one
/// transaction); the mount this takes is not counted in the superblock: the
/// image still reads as never mounted.
pub fn create_lost_found(dev: Arc<dyn BlockDevice>) -> Result<u64> {
    let fs = Fs::mount(dev, MountOptions::default())?;
    let made = fs.inodes().getattr(ROOT_INO).and_then(|root| {
        let owner = Ctx { uid: root.uid, gid: root.gid, ..Ctx::root() };
        fs.names().mkdir(&owner, ROOT_INO, LOST_FOUND, S_IFDIR | 0o700)
    });
    let unmounted = fs.unmount_unrecorded();
    let attr = made?;
    unmounted?;
    Ok(attr.ino)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_format::superblock::INCOMPAT_JOURNAL_GROUPS;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_default_journal_follows_mke2fs_past_32_gib() {
        let mib = |size: u64| (default_journal_blocks(size / 4096, 4096) * 4096) >> 20;
        assert_eq!([1, 16, 40, 120, 200].map(|g| mib(g * GIB)), [16, 128, 256, 512, 1024]);
    }

    #[test]
    fn a_size_out_of_reach_is_refused_with_the_bound_it_missed() {
        let opts = MkfsOptions::default();
        let small = plan(1 << 20, &opts).unwrap_err().to_string();
        assert!(small.contains("too small") && small.contains("3686400 bytes"), "{small}");
        assert!(plan(3_686_400, &opts).is_ok() && plan(3_686_400 - 4096, &opts).is_err(), "the bound is exact");
        // It leaves the metadata reserve and room for files free.
        let sb = plan(3_686_400, &opts).unwrap();
        assert_eq!(sb.free_blocks, crate::alloc::metadata_reserve(900) + MKFS_MIN_FILE_BLOCKS);
        assert_eq!(sb.journal_blocks, MKFS_MIN_JOURNAL_BLOCKS);
        let large = plan(1 << 50, &opts).unwrap_err().to_string();
        assert!(large.contains("too large") && large.contains("277051162566656 bytes"), "{large}");
        assert!(plan(277_051_162_566_656, &opts).is_ok() && plan(277_051_162_566_656 + 4096, &opts).is_err());
        // Other errors are what they were.
        let bad = plan(1 << 20, &MkfsOptions { block_size: 3000, ..opts.clone() }).unwrap_err().to_string();
        assert!(bad.contains("power of two"), "{bad}");
    }

    #[test]
    fn a_journal_larger_than_group_0_fills_whole_groups_after_it() {
        let sb = plan(120 * GIB, &MkfsOptions::default()).unwrap();
        let geo = Geometry::new(&sb).unwrap();
        assert_ne!(sb.feature_incompat & INCOMPAT_JOURNAL_GROUPS, 0);
        // 512 MiB asked: group 0's room and three groups (whole groups below).
        assert_eq!(sb.journal_groups, 3);
        assert_eq!(sb.journal_blocks, geo.reserved_end - sb.journal_start + 3 * sb.journal_segment_blocks());
        for g in 1..=3 {
            assert_eq!(geo.initially_used(g), geo.group_len(g), "group {g} is all journal");
        }
        assert!(geo.initially_used(4) < geo.group_len(4));
        assert!(!geo.valid_data_range(geo.group_start(2) + 1000, 1), "a block of the journal is not data");
        assert!(geo.valid_data_range(geo.group_start(4) + 1000, 1));
        let free: u64 = (0..sb.group_count).map(|g| geo.group_len(g) - geo.initially_used(g)).sum();
        assert_eq!(sb.free_blocks, free);
        // A small image keeps its journal in group 0.
        let small = plan(GIB, &MkfsOptions::default()).unwrap();
        assert_eq!((small.journal_groups, small.feature_incompat & INCOMPAT_JOURNAL_GROUPS), (0, 0));
        // Group 0's room is nearer to 150M, 252 MiB (one group more) to 200M.
        let mib = |asked_mib: u64| {
            let o = MkfsOptions { journal_blocks: Some(asked_mib * 256), ..Default::default() };
            (plan(GIB, &o).unwrap().journal_blocks * 4096) >> 20
        };
        assert_eq!((mib(150), mib(200)), (125, 251));
        // Asking for more than half the groups is refused with the reason.
        let err = plan(GIB, &MkfsOptions { journal_blocks: Some(200_000), ..Default::default() }).unwrap_err();
        assert!(err.to_string().contains("groups"), "{err}");
    }
}
