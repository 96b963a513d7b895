//! Backup superblocks: where they are, what they hold, how to find one
//! when the primary is gone.
//!
//! ## Purpose
//! Every other structure is found from the superblock, so a damaged block 0
//! would lose the whole file system. As ext4's `sparse_super`, an image with
//! `INCOMPAT_BACKUP_SUPERBLOCKS` keeps a copy of the superblock in the first
//! block of groups 1, 3, 5, 7, 9, 25, 27, 49, ... (1 and the powers of 3, 5
//! and 7: a handful of copies however large the image, spread across it),
//! less the groups the journal fills. fsck falls back to a copy when the
//! primary does not verify and writes the primary back from it.
//!
//! ## On disk
//! A copy is the primary's 512 bytes, encoded the same way, with
//! `backup_group` set to the group it sits in (so a copy found by searching
//! proves its own location) and the fields that change while mounted reset
//! to the values of a fresh, empty orphan list: `orphan_root` 0, `state`
//! clean. Free counts, `next_ino` and the times are what they were when the
//! copy was written; fsck recomputes the counts from the bitmaps, and
//! `next_ino` is only a hint. The rest of the block is zero. A group with a
//! copy has its bitmaps and inode table one block later ([`crate::layout`]).
//!
//! ## When copies are written
//! As ext4's rules: mkfs writes them, and so does fsck each time it writes
//! the primary (a repair); the engine changes no field a copy keeps (the
//! geometry, the features, the UUID, the hash seed, the label; the one
//! feature bit it may set, `COMPAT_INODE_FLAGS`, is a hint the copies need
//! not share), so it never has to. fsck reports a copy that no longer [matches](static_fields) the
//! primary.

use crate::superblock::{Superblock, SB_SIZE, STATE_CLEAN};

/// The copy of `primary` to store in group `g`.
pub fn copy_for_group(primary: &Superblock, g: u64) -> Superblock {
    Superblock { backup_group: g as u32, orphan_root: 0, state: STATE_CLEAN, ..primary.clone() }
}

/// The fields a copy must share with its primary: everything but what
/// changes while mounted (counts, hints, times, state, the orphan list, the
/// `COMPAT_INODE_FLAGS` hint a mount may set) and the copy's own location. Two superblocks of one file system have equal
/// static fields.
pub fn static_fields(sb: &Superblock) -> Superblock {
    Superblock {
        backup_group: 0,
        state: 0,
        free_blocks: 0,
        free_inodes: 0,
        next_ino: 0,
        orphan_root: 0,
        last_mount_time: 0,
        last_write_time: 0,
        mount_count: 0,
        feature_compat: sb.feature_compat & !crate::superblock::COMPAT_INODE_FLAGS,
        ..sb.clone()
    }
}

/// Where to look for a copy when the primary is unreadable: byte offsets of
/// the first block of the sparse groups 1, 3, 5, 7 and 9, for every block
/// size, under the group size `hint` (block size, blocks per group — read
/// from the damaged primary, which is often right) first, then under mkfs's
/// default (8 × block size blocks a group), then under every group size mkfs
/// accepts. Only offsets inside an image of `image_bytes` are given, each
/// once (a copy found there says its own group: [`decode_copy`]).
pub fn search_offsets(hint: Option<(u32, u32)>, image_bytes: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut push = |bs: u64, bpg: u64, out: &mut Vec<u64>| {
        for g in [1u64, 3, 5, 7, 9] {
            let Some(off) = g.checked_mul(bpg).and_then(|b| b.checked_mul(bs)) else { continue };
            if off.saturating_add(SB_SIZE as u64) <= image_bytes && seen.insert(off) {
                out.push(off);
            }
        }
    };
    let sizes = || (crate::MIN_BLOCK_SIZE.trailing_zeros()..=crate::MAX_BLOCK_SIZE.trailing_zeros()).map(|l| 1u64 << l);
    if let Some((bs, bpg)) = hint {
        let (bs, bpg) = (u64::from(bs), u64::from(bpg));
        if bs.is_power_of_two() && (u64::from(crate::MIN_BLOCK_SIZE)..=u64::from(crate::MAX_BLOCK_SIZE)).contains(&bs) {
            if (64..=bs * 8).contains(&bpg) && bpg % 64 == 0 {
                push(bs, bpg, &mut out);
            }
            push(bs, bs * 8, &mut out);
        }
    }
    for bs in sizes() {
        push(bs, bs * 8, &mut out);
    }
    for bs in sizes() {
        for bpg in (64..=bs * 8).step_by(64) {
            push(bs, bpg, &mut out);
        }
    }
    out
}

/// Decodes a copy read at byte `offset` (`buf`: at least [`SB_SIZE`] bytes)
/// and checks that it is one: it verifies, it carries the feature, and its
/// `backup_group` and geometry place it exactly at `offset`.
pub fn decode_copy(buf: &[u8], offset: u64, image_bytes: u64) -> Option<Superblock> {
    let sb = Superblock::decode(buf, image_bytes).ok()?;
    let g = u64::from(sb.backup_group);
    let at = g.checked_mul(u64::from(sb.blocks_per_group))?.checked_mul(u64::from(sb.block_size()))?;
    let geo = crate::layout::Geometry::new(&sb).ok()?;
    (g != 0 && at == offset && geo.has_backup_superblock(g)).then_some(sb)
}

/// The primary a copy stands for: the copy with `backup_group` 0.
pub fn primary_from_copy(copy: &Superblock) -> Superblock {
    Superblock { backup_group: 0, ..copy.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_tries_the_hint_first_and_stays_inside_the_image() {
        let offs = search_offsets(Some((4096, 2048)), 1 << 30);
        assert_eq!(offs[0], 2048 * 4096, "group 1 under the hint first");
        assert!(offs.iter().all(|&o| o + 512 <= 1 << 30));
        let mut sorted = offs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), offs.len(), "each offset once");
        // The default group size of every block size is tried before the odd ones.
        let default_4k = offs.iter().position(|&o| o == 32768 * 4096).unwrap();
        let odd = offs.iter().position(|&o| o == 256 * 1024).unwrap();
        assert!(default_4k < odd);
        // A nonsense hint is ignored: group 1 of 1 KiB blocks comes first.
        assert_eq!(search_offsets(Some((3000, 7)), 1 << 30)[0], 8192 * 1024);
    }

    #[test]
    fn static_fields_ignore_what_changes_while_mounted() {
        let sb =
            Superblock { free_blocks: 5, next_ino: 9, orphan_root: 77, state: 2, uuid: [1; 16], ..Default::default() };
        let copy = copy_for_group(&sb, 3);
        assert_eq!((copy.backup_group, copy.orphan_root, copy.state), (3, 0, STATE_CLEAN));
        assert_eq!(static_fields(&copy), static_fields(&sb));
        assert_ne!(static_fields(&Superblock { label: [b'x'; 32], ..sb.clone() }), static_fields(&sb));
        assert_eq!(primary_from_copy(&copy).backup_group, 0);
    }
}

#[cfg(test)]
mod layout_tests {
    use crate::layout::Geometry;
    use crate::superblock::{Superblock, INCOMPAT_BACKUP_SUPERBLOCKS, INCOMPAT_JOURNAL_GROUPS, VERSION};

    /// 1 KiB blocks, 10 groups of 1,024 blocks, 64 inodes (16 table blocks) a group.
    fn sb(features: u32, journal_groups: u32) -> Superblock {
        let journal_blocks = 900 + u64::from(journal_groups) * (1024 - 18);
        Superblock {
            version: VERSION,
            block_size_log2: 10,
            blocks_per_group: 1024,
            inodes_per_group: 64,
            total_blocks: 10 * 1024,
            group_count: 10,
            gdt_start: 1,
            gdt_blocks: 1,
            journal_start: 2,
            journal_blocks,
            journal_groups,
            feature_incompat: features,
            ..Default::default()
        }
    }

    #[test]
    fn a_backup_moves_its_groups_metadata_one_block_on_and_is_never_data() {
        let geo = Geometry::new(&sb(INCOMPAT_BACKUP_SUPERBLOCKS, 0)).unwrap();
        assert_eq!(geo.backup_groups().collect::<Vec<_>>(), [1, 3, 5, 7, 9]);
        assert_eq!((geo.block_bitmap(1), geo.inode_table(1)), (1025, 1027));
        assert_eq!((geo.block_bitmap(2), geo.initially_used(2)), (2048, 18));
        assert_eq!(geo.initially_used(3), 19);
        assert!(!geo.valid_data_range(3 * 1024, 1), "the backup block");
        assert!(!geo.valid_data_range(3 * 1024 - 1, 2), "a range ending on it");
        assert!(geo.valid_data_range(3 * 1024 + 19, 1) && !geo.valid_data_range(3 * 1024 + 18, 1));
        // Without the feature nothing moves.
        let plain = Geometry::new(&sb(0, 0)).unwrap();
        assert_eq!((plain.backup_groups().count(), plain.block_bitmap(1)), (0, 1024));
    }

    #[test]
    fn a_never_used_groups_descriptor_is_its_layout() {
        use crate::group_desc::{GD_BLOCK_UNINIT, GD_INODE_UNINIT};
        let geo = Geometry::new(&sb(INCOMPAT_BACKUP_SUPERBLOCKS, 0)).unwrap();
        for g in [2, 3] {
            let gd = geo.unused_group_desc(g);
            assert_eq!(
                (gd.block_bitmap, gd.inode_bitmap, gd.inode_table),
                (geo.block_bitmap(g), geo.inode_bitmap(g), geo.inode_table(g))
            );
            assert_eq!(u64::from(gd.free_blocks), 1024 - geo.initially_used(g));
            assert_eq!((gd.free_inodes, gd.used_dirs, gd.flags), (64, 0, GD_BLOCK_UNINIT | GD_INODE_UNINIT));
            assert_eq!((gd.block_bitmap_csum, gd.inode_bitmap_csum, gd.itable_unused), (0, 0, 0));
        }
    }

    #[test]
    fn the_journals_groups_hold_no_backup() {
        let geo = Geometry::new(&sb(INCOMPAT_BACKUP_SUPERBLOCKS | INCOMPAT_JOURNAL_GROUPS, 3)).unwrap();
        assert_eq!(geo.backup_groups().collect::<Vec<_>>(), [5, 7, 9]);
        assert_eq!(geo.block_bitmap(3), 3 * 1024);
    }
}
