//! Group bitmaps: bit order, and the implied content of uninitialised ones.
//!
//! A group's block bitmap and inode bitmap are one block each. Bit `i` is bit
//! `i % 8` of byte `i / 8` (least significant first); 1 = in use. Bits past
//! the group's end (the last group may be short, and a group may have fewer
//! than `8 * block_size` inodes) are always set, so a search for a clear bit
//! never runs past the group.
//!
//! A bitmap whose group descriptor carries `GD_BLOCK_UNINIT` or
//! `GD_INODE_UNINIT` was never written: its block on disk is garbage and its
//! content is *implied* by the layout, as built by [`synth_block_bitmap`] and
//! [`synth_inode_bitmap`]. The engine materialises exactly these bytes the
//! first time it changes such a group; the checker compares against them.

use crate::layout::Geometry;

/// Bit `i` of a bitmap (false past its end).
pub fn bit(b: &[u8], i: u64) -> bool {
    usize::try_from(i / 8).ok().and_then(|x| b.get(x)).is_some_and(|x| x >> (i % 8) & 1 == 1)
}

/// Sets bit `i` of a bitmap.
///
/// # Panics
/// If `i` is past the end of `b` (a caller bug).
#[track_caller]
pub fn set_bit(b: &mut [u8], i: u64) {
    b[(i / 8) as usize] |= 1 << (i % 8);
}

/// Clears bit `i` of a bitmap.
///
/// # Panics
/// If `i` is past the end of `b` (a caller bug).
#[track_caller]
pub fn clear_bit(b: &mut [u8], i: u64) {
    b[(i / 8) as usize] &= !(1 << (i % 8));
}

/// Sets bits `[from, to)`, a byte at a time where possible.
///
/// # Panics
/// If `to` is past the end of `b` (a caller bug).
#[track_caller]
pub fn set_range(b: &mut [u8], from: u64, to: u64) {
    assert!(to <= b.len() as u64 * 8, "bit range {from}..{to} past a {}-byte bitmap", b.len());
    let mut i = from;
    while i < to {
        if i.is_multiple_of(8) && i + 8 <= to {
            b[(i / 8) as usize] = 0xff;
            i += 8;
        } else {
            set_bit(b, i);
            i += 1;
        }
    }
}

/// The implied block bitmap of group `g` while its descriptor says
/// `GD_BLOCK_UNINIT`: the group's fixed metadata in use — bits
/// `0 .. geo.initially_used(g)`, which in group 0 also covers the
/// superblock, the descriptor table and the journal — and the padding bits
/// from `geo.group_len(g)` to the end of the block; every other block free.
/// The descriptor's `free_blocks` is then `group_len - initially_used`.
pub fn synth_block_bitmap(geo: &Geometry, g: u64) -> Vec<u8> {
    let bs = geo.block_size as usize;
    let mut b = vec![0u8; bs];
    set_range(&mut b, 0, geo.initially_used(g));
    set_range(&mut b, geo.group_len(g), bs as u64 * 8);
    b
}

/// The implied inode bitmap of a group whose descriptor says
/// `GD_INODE_UNINIT`: every inode free, the padding bits from
/// `geo.inodes_per_group` to the end of the block set. (The same for every
/// group; the inode table of such a group may never have been written.)
pub fn synth_inode_bitmap(geo: &Geometry) -> Vec<u8> {
    let bs = geo.block_size as usize;
    let mut b = vec![0u8; bs];
    set_range(&mut b, geo.inodes_per_group, bs as u64 * 8);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        // 1 KiB blocks, 2 groups of 8192 blocks (the last 1000 short),
        // 64 inodes per group (16 table blocks), journal ends at block 70.
        Geometry {
            block_size: 1024,
            total_blocks: 8192 + 1000,
            blocks_per_group: 8192,
            inodes_per_group: 64,
            group_count: 2,
            itable_blocks: 16,
            reserved_end: 70,
            journal_groups: 0,
            backup_superblocks: false,
        }
    }

    #[test]
    fn bit_order_is_lsb_first() {
        let mut b = [0u8; 4];
        set_bit(&mut b, 0);
        set_bit(&mut b, 9);
        assert_eq!(b, [0x01, 0x02, 0, 0]);
        set_range(&mut b, 13, 27);
        assert_eq!(b, [0x01, 0xe2, 0xff, 0x07]);
        assert!(bit(&b, 9) && !bit(&b, 10) && bit(&b, 26) && !bit(&b, 27) && !bit(&b, 1 << 40));
        clear_bit(&mut b, 9);
        assert!(!bit(&b, 9));
    }

    #[test]
    fn implied_bitmaps() {
        let g = geo();
        let b0 = synth_block_bitmap(&g, 0);
        // group 0: superblock, table, journal, 2 bitmaps, 16 itable blocks
        assert_eq!(g.initially_used(0), 88);
        assert!((0..88).all(|i| bit(&b0, i)) && (88..8192).all(|i| !bit(&b0, i)));
        let b1 = synth_block_bitmap(&g, 1);
        assert!((0..18).all(|i| bit(&b1, i)) && (18..1000).all(|i| !bit(&b1, i)));
        assert!((1000..8192).all(|i| bit(&b1, i)), "padding past the short last group");
        let ib = synth_inode_bitmap(&g);
        assert!((0..64).all(|i| !bit(&ib, i)) && (64..8192).all(|i| bit(&ib, i)));
        assert_eq!((b0.len(), b1.len(), ib.len()), (1024, 1024, 1024));
    }
}
