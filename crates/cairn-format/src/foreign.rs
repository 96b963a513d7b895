//! What an image holds when it is not cairn's: another file system, a
//! partition table, an encrypted volume, zeros.
//!
//! ## Purpose
//! `cairn mount`, `fsck`, `inspect`, `tune`, `resize`, `stats` and `trim`
//! name what they found in an image that is not cairn's ("it holds an ext4
//! file system") instead of a bare "bad magic number", and do not send the
//! user to `cairn fsck` for an image that was never cairn's; `cairn mkfs`
//! refuses to format over any of these without `--force`.
//!
//! ## How
//! [`identify`] reads the signatures blkid and file(1) read, at their fixed
//! offsets in the first [`HEAD_BYTES`] of the image (btrfs's superblock at
//! 64 KiB is the furthest): pure byte tests, no I/O. cairn's own magic at
//! byte 0 wins over everything else (a damaged cairn superblock is still
//! cairn's: fsck is the tool for it). The few signatures of two bytes (ext's
//! 0xEF53, the MBR's 0x55AA) are checked with more of their structure, so
//! random bytes are rarely taken for them.

use crate::codec::{get_u16 as le16, get_u32 as le32};

/// Bytes from the start of an image that [`identify`] looks at.
pub const HEAD_BYTES: usize = 128 * 1024;

/// What the head of an image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// cairn's magic number at byte 0 (its superblock may still be damaged).
    Cairn,
    /// An encrypted cairn image's header (`crypt_header`) at byte 0.
    Encrypted,
    /// A format cairn knows by name.
    Foreign(Foreign),
    /// Nothing at all: a file of length 0.
    Empty,
    /// Only zero bytes.
    Zeros,
    /// Bytes with no signature cairn knows (random data, or a damaged image).
    Unknown,
}

/// Formats recognised by their signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    Ext2,
    Ext3,
    Ext4,
    Xfs,
    Btrfs,
    F2fs,
    Luks,
    Lvm,
    Squashfs,
    Iso9660,
    Ntfs,
    Exfat,
    Fat,
    Swap,
    Gpt,
    Mbr,
    Qcow2,
}

impl Foreign {
    /// What it is, as an object of "it holds ...".
    pub fn name(self) -> &'static str {
        match self {
            Foreign::Ext2 => "an ext2 file system",
            Foreign::Ext3 => "an ext3 file system",
            Foreign::Ext4 => "an ext4 file system",
            Foreign::Xfs => "an XFS file system",
            Foreign::Btrfs => "a btrfs file system",
            Foreign::F2fs => "an F2FS file system",
            Foreign::Luks => "a LUKS encrypted volume",
            Foreign::Lvm => "an LVM physical volume",
            Foreign::Squashfs => "a squashfs image",
            Foreign::Iso9660 => "an ISO 9660 (CD/DVD) image",
            Foreign::Ntfs => "an NTFS file system",
            Foreign::Exfat => "an exFAT file system",
            Foreign::Fat => "a FAT file system",
            Foreign::Swap => "Linux swap space",
            Foreign::Gpt => "a GPT partition table",
            Foreign::Mbr => "an MBR (DOS) partition table",
            Foreign::Qcow2 => "a QEMU qcow2 disk image",
        }
    }

    /// How to use it instead, when there is one obvious way.
    pub fn hint(self) -> Option<&'static str> {
        Some(match self {
            Foreign::Ext2 | Foreign::Ext3 | Foreign::Ext4 => "mount(8) or fuse2fs mount it; e2fsck checks it",
            Foreign::Xfs => "mount(8) mounts it; xfs_repair checks it",
            Foreign::Btrfs => "mount(8) mounts it; btrfs check checks it",
            Foreign::Luks => "`cryptsetup open` unlocks it; the file system is inside",
            Foreign::Gpt | Foreign::Mbr => "`losetup -P` shows its partitions as devices",
            Foreign::Qcow2 => "`qemu-nbd` serves its contents as a device",
            _ => return None,
        })
    }
}

fn at(head: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    head.get(off..off + len)
}

fn magic(head: &[u8], off: usize, m: &[u8]) -> bool {
    at(head, off, m.len()) == Some(m)
}

/// ext2/3/4: the superblock at byte 1024, told apart by its features as
/// blkid does (ext4: anything ext3 does not support; ext3: a journal).
fn ext(head: &[u8]) -> Option<Foreign> {
    let sb = at(head, 1024, 1024)?;
    let log_block = le32(sb, 24);
    if le16(sb, 56) != 0xef53 || log_block > 6 {
        return None;
    }
    let (compat, incompat, ro_compat) = (le32(sb, 92), le32(sb, 96), le32(sb, 100));
    const EXT3_INCOMPAT: u32 = 0x2 | 0x4 | 0x10; // filetype, recover, meta_bg
    const EXT3_RO_COMPAT: u32 = 0x1 | 0x2 | 0x4; // sparse_super, large_file, btree_dir
    Some(if incompat & !EXT3_INCOMPAT != 0 || ro_compat & !EXT3_RO_COMPAT != 0 {
        Foreign::Ext4
    } else if compat & 0x4 != 0 {
        Foreign::Ext3
    } else {
        Foreign::Ext2
    })
}

/// A DOS partition table: the boot signature and four plausible entries
/// (boot flag 0 or 0x80), at least one in use.
fn mbr(head: &[u8]) -> bool {
    if !magic(head, 510, &[0x55, 0xaa]) {
        return false;
    }
    let entries: Vec<&[u8]> = (0..4).filter_map(|i| at(head, 446 + 16 * i, 16)).collect();
    entries.len() == 4 && entries.iter().all(|e| e[0] & 0x7f == 0) && entries.iter().any(|e| e[4] != 0)
}

/// What the first bytes of an image (up to [`HEAD_BYTES`], fewer for a
/// shorter image) hold.
pub fn identify(head: &[u8]) -> Content {
    if head.is_empty() {
        return Content::Empty;
    }
    if crate::superblock::Superblock::has_magic(head) {
        return Content::Cairn;
    }
    if crate::crypt_header::has_magic(head) {
        return Content::Encrypted;
    }
    let known: [(Foreign, bool); 14] = [
        (Foreign::Xfs, magic(head, 0, b"XFSB")),
        (Foreign::Btrfs, magic(head, 0x10040, b"_BHRfS_M")),
        (Foreign::F2fs, magic(head, 1024, &0xf2f5_2010u32.to_le_bytes())),
        (Foreign::Luks, magic(head, 0, b"LUKS\xba\xbe")),
        (Foreign::Lvm, magic(head, 512, b"LABELONE") && magic(head, 536, b"LVM2 001")),
        (Foreign::Squashfs, magic(head, 0, b"hsqs")),
        (Foreign::Iso9660, magic(head, 0x8001, b"CD001")),
        (Foreign::Ntfs, magic(head, 3, b"NTFS    ")),
        (Foreign::Exfat, magic(head, 3, b"EXFAT   ")),
        (Foreign::Fat, magic(head, 82, b"FAT32   ") || magic(head, 54, b"FAT16   ") || magic(head, 54, b"FAT12   ")),
        (Foreign::Swap, magic(head, 4086, b"SWAPSPACE2") || magic(head, 4086, b"SWAP-SPACE")),
        (Foreign::Qcow2, magic(head, 0, b"QFI\xfb")),
        (Foreign::Gpt, magic(head, 512, b"EFI PART")),
        (Foreign::Mbr, mbr(head)),
    ];
    if let Some((f, _)) = known.iter().find(|(_, hit)| *hit) {
        return Content::Foreign(*f);
    }
    if let Some(f) = ext(head) {
        return Content::Foreign(f);
    }
    if head.iter().all(|&b| b == 0) {
        Content::Zeros
    } else {
        Content::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(off: usize, bytes: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; HEAD_BYTES];
        h[off..off + bytes.len()].copy_from_slice(bytes);
        h
    }

    #[test]
    fn signatures_are_named() {
        assert_eq!(identify(&[]), Content::Empty);
        assert_eq!(identify(&vec![0u8; HEAD_BYTES]), Content::Zeros);
        assert_eq!(identify(&with(0, b"CAIRNFS\0")), Content::Cairn);
        assert_eq!(identify(&with(0, b"XFSB")), Content::Foreign(Foreign::Xfs));
        assert_eq!(identify(&with(0x10040, b"_BHRfS_M")), Content::Foreign(Foreign::Btrfs));
        assert_eq!(identify(&with(512, b"EFI PART")), Content::Foreign(Foreign::Gpt));
        assert_eq!(identify(&with(0, b"LUKS\xba\xbe")), Content::Foreign(Foreign::Luks));
        // A short image is looked at as far as it goes.
        assert_eq!(identify(&[1, 2, 3]), Content::Unknown);
        assert_eq!(identify(b"XFSB"), Content::Foreign(Foreign::Xfs));
    }

    #[test]
    fn ext_versions_by_features_and_two_byte_magics_need_more() {
        let mut h = with(1080, &[0x53, 0xef]);
        assert_eq!(identify(&h), Content::Foreign(Foreign::Ext2));
        h[1024 + 92] = 0x4; // has_journal
        assert_eq!(identify(&h), Content::Foreign(Foreign::Ext3));
        h[1024 + 96] = 0x40; // extents
        assert_eq!(identify(&h), Content::Foreign(Foreign::Ext4));
        h[1024 + 24] = 9; // no block size is 2^19 KiB
        assert_eq!(identify(&h), Content::Unknown);
        // The boot signature alone is no partition table.
        let mut m = with(510, &[0x55, 0xaa]);
        assert_eq!(identify(&m), Content::Unknown);
        m[446] = 0x80;
        m[446 + 4] = 0x83; // a Linux partition
        assert_eq!(identify(&m), Content::Foreign(Foreign::Mbr));
        m[446 + 16] = 0x12; // not a boot flag
        assert_eq!(identify(&m), Content::Unknown);
    }
}
