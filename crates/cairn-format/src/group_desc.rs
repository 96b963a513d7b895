//! Group descriptors: 64 bytes each, packed in the table at `gdt_start`.
//!
//! ```text
//! off size field
//!  0   8  block_bitmap (block number)
//!  8   8  inode_bitmap
//! 16   8  inode_table (first block; inodes_per_group*256/block_size blocks)
//! 24   4  free_blocks   28 4 free_inodes   32 4 used_dirs
//! 36   4  flags (GD_BLOCK_UNINIT, GD_INODE_UNINIT)
//! 40   4  block_bitmap_csum (crc32c of the bitmap block)
//! 44   4  inode_bitmap_csum
//! 48   4  itable_unused (inodes at the end of the table never written)
//! 52   8  reserved
//! 60   4  crc32c(seed ^ group, bytes 0..64 with this field zero)
//! ```
//! A group's bitmap checksums live in its descriptor (ext4's design), so
//! bitmap blocks stay pure bit arrays and the buddy can be built from them
//! directly. `GD_BLOCK_UNINIT` means the bitmap block was never written: the
//! group's only used blocks are its own metadata (see [`crate::layout`]).

use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::error::{FormatError, Result};

/// Size of one descriptor.
pub const GD_SIZE: usize = 64;
/// The block bitmap has never been written; derive it from the layout.
pub const GD_BLOCK_UNINIT: u32 = 1;
/// The inode bitmap has never been written; it is all zero.
pub const GD_INODE_UNINIT: u32 = 2;

/// Offset of the descriptor's crc32c.
const CSUM_OFF: usize = 60;

const _: () = {
    // itable_unused (48..52) and 8 reserved bytes, then the checksum, which
    // ends the descriptor.
    assert!(48 + 4 + 8 == CSUM_OFF && CSUM_OFF + 4 == GD_SIZE);
    // Descriptors never straddle a table block.
    assert!((crate::MIN_BLOCK_SIZE as usize).is_multiple_of(GD_SIZE));
};

/// Where group `group`'s descriptor lives: (block, byte offset in it), for a
/// table starting at block `gdt_start` on a file system with `block_size`-byte
/// blocks. Descriptors are packed [`GD_SIZE`] bytes apart, never straddling a
/// block.
pub fn gd_loc(gdt_start: u64, block_size: u32, group: u64) -> (u64, usize) {
    let per_block = u64::from(block_size) / GD_SIZE as u64;
    (gdt_start + group / per_block, (group % per_block) as usize * GD_SIZE)
}

/// One decoded group descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupDesc {
    pub block_bitmap: u64,
    pub inode_bitmap: u64,
    pub inode_table: u64,
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub used_dirs: u32,
    pub flags: u32,
    pub block_bitmap_csum: u32,
    pub inode_bitmap_csum: u32,
    pub itable_unused: u32,
}

impl GroupDesc {
    /// Encodes into `out[..64]`.
    pub fn encode(&self, seed: u32, group: u64, out: &mut [u8]) {
        let b = &mut out[..GD_SIZE];
        b.fill(0);
        put_u64(b, 0, self.block_bitmap);
        put_u64(b, 8, self.inode_bitmap);
        put_u64(b, 16, self.inode_table);
        put_u32(b, 24, self.free_blocks);
        put_u32(b, 28, self.free_inodes);
        put_u32(b, 32, self.used_dirs);
        put_u32(b, 36, self.flags);
        put_u32(b, 40, self.block_bitmap_csum);
        put_u32(b, 44, self.inode_bitmap_csum);
        put_u32(b, 48, self.itable_unused);
        let c = crc_skipping(seed ^ group as u32, b, CSUM_OFF);
        put_u32(b, CSUM_OFF, c);
    }

    /// Decodes and verifies the descriptor of `group` from `buf[..64]`.
    pub fn decode(seed: u32, group: u64, buf: &[u8]) -> Result<GroupDesc> {
        if buf.len() < GD_SIZE {
            return Err(FormatError::corrupt("group descriptor", group, "short buffer"));
        }
        let b = &buf[..GD_SIZE];
        let stored = get_u32(b, CSUM_OFF);
        let computed = crc_skipping(seed ^ group as u32, b, CSUM_OFF);
        if stored != computed {
            return Err(FormatError::Checksum { what: "group descriptor", at: group, stored, computed });
        }
        Ok(GroupDesc {
            block_bitmap: get_u64(b, 0),
            inode_bitmap: get_u64(b, 8),
            inode_table: get_u64(b, 16),
            free_blocks: get_u32(b, 24),
            free_inodes: get_u32(b, 28),
            used_dirs: get_u32(b, 32),
            flags: get_u32(b, 36),
            block_bitmap_csum: get_u32(b, 40),
            inode_bitmap_csum: get_u32(b, 44),
            itable_unused: get_u32(b, 48),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_location() {
        assert_eq!(gd_loc(1, 1024, 0), (1, 0));
        assert_eq!(gd_loc(1, 1024, 15), (1, 960));
        assert_eq!(gd_loc(1, 1024, 16), (2, 0));
        assert_eq!(gd_loc(1, 4096, 100), (2, 36 * 64));
        assert_eq!(gd_loc(1, 65536, (1 << 32) + 3), (1 + (1 << 22), 192));
    }

    #[test]
    fn roundtrip_and_group_binding() {
        let gd = GroupDesc { block_bitmap: 9, inode_bitmap: 10, inode_table: 11, free_blocks: 5, ..Default::default() };
        let mut b = [0u8; 64];
        gd.encode(77, 3, &mut b);
        assert_eq!(GroupDesc::decode(77, 3, &b).unwrap(), gd);
        assert!(GroupDesc::decode(77, 4, &b).is_err(), "descriptor accepted for the wrong group");
    }
}
