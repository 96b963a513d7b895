//! Inodes: 256 bytes each, in the per-group inode tables.
//!
//! ```text
//! off size field
//!   0  4  mode (S_IFMT type bits + permission bits, as Linux)
//!   4  4  flags (INODE_FLAG_*)
//!   8  4  uid          12 4 gid
//!  16  4  nlink        20 4 generation
//!  24  8  size (bytes)
//!  32  8  blocks (file-system blocks owned: data, extent-tree and xattr blocks)
//!  40  8  atime_sec    48 4 atime_nsec   52 4 mtime_nsec
//!  56  8  mtime_sec    64 8 ctime_sec    72 4 ctime_nsec   76 4 crtime_nsec
//!  80  8  crtime_sec
//!  88  8  rdev (device number of a block/char special file)
//!  96  8  xattr_block (0 = none)
//! 104  8  parent (directories: the parent directory, for "..")
//! 112  8  entries (directories: number of entries, excluding . and ..)
//! 120  4  crc32c(seed ^ ino, bytes 0..256 with this field zero)
//! 124  4  attr_flags (chattr's flags, ATTR_*: the values of Linux's FS_*_FL)
//! 128 120 data area: inline extents, an extent/dirent B+tree root, or an
//!         inline symlink target (see INODE_FLAG_*)
//! 248  8  reserved
//! ```
//! The checksum sits in the inode's core (its first 128 bytes), not at its
//! end (format version 1): a change that leaves the data area alone — times,
//! link count, size of an empty file, a create — then changes only the core,
//! and dirty-region logging logs the inode in two 64-byte chunks, not three
//! (XFS logs its inode core apart from the data fork for the same reason).
//! A free inode slot is all zero or garbage; only the inode bitmap says which
//! slots are live, so nothing reads a slot the bitmap marks free.
//!
//! Data-area encodings:
//! * `INODE_FLAG_INLINE_DATA`: symlink target bytes (length = `size`, <= 120).
//! * `INODE_FLAG_TREE`: bytes 0..8 hold the root block of a B+tree (extents
//!   for files and long symlinks, entries for directories); 0 = empty tree.
//! * otherwise, for files/long symlinks: inline extent list, `u16` count at 0,
//!   then up to [`INLINE_EXTENTS`] records of 24 bytes at offset 8.
//!   Directories always use the tree form (root 0 when empty).

use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::error::{FormatError, Result};
use crate::extent::{Extent, EXTENT_DISK_SIZE};

/// On-disk size of an inode.
pub const INODE_SIZE: usize = 256;
/// Bytes of the data area.
pub const DATA_AREA: usize = 120;
const DATA_OFF: usize = 128;
/// Offset of the inode's crc32c.
const CSUM_OFF: usize = 120;
/// Extents that fit inline in the data area.
pub const INLINE_EXTENTS: usize = (DATA_AREA - 8) / EXTENT_DISK_SIZE;
/// Data area holds an inline symlink target.
pub const INODE_FLAG_INLINE_DATA: u32 = 1;
/// Data area holds a B+tree root.
pub const INODE_FLAG_TREE: u32 = 2;
/// Inode is on the orphan list (unlinked while open, or being truncated).
pub const INODE_FLAG_ORPHAN: u32 = 4;

/// `attr_flags`: changes of the inode are synchronous (`chattr +S`, FS_SYNC_FL).
pub const ATTR_SYNC: u32 = 0x8;
/// `attr_flags`: nothing may change the inode, its data or its names (`+i`).
pub const ATTR_IMMUTABLE: u32 = 0x10;
/// `attr_flags`: data may only be appended; no name removed (`+a`).
pub const ATTR_APPEND: u32 = 0x20;
/// `attr_flags`: dump(8) skips the file (`+d`; stored only).
pub const ATTR_NODUMP: u32 = 0x40;
/// `attr_flags`: no atime updates (`+A`; cairn never updates atime on read).
pub const ATTR_NOATIME: u32 = 0x80;
/// `attr_flags`: directory changes are synchronous (`+D`).
pub const ATTR_DIRSYNC: u32 = 0x10000;
/// Every `attr_flags` bit this format knows; the rest are ignored.
pub const ATTR_KNOWN: u32 = ATTR_SYNC | ATTR_IMMUTABLE | ATTR_APPEND | ATTR_NODUMP | ATTR_NOATIME | ATTR_DIRSYNC;

const _: () = {
    // Fixed fields end at 120 (entries, 112..120), then the checksum and 4
    // reserved bytes; the data area follows, then 8 reserved bytes.
    assert!(112 + 8 == CSUM_OFF && CSUM_OFF + 8 == DATA_OFF && DATA_OFF + DATA_AREA + 8 == INODE_SIZE);
    // Inline extents: a u16 count padded to 8 bytes, then the records.
    assert!(INLINE_EXTENTS == 4 && 8 + INLINE_EXTENTS * EXTENT_DISK_SIZE <= DATA_AREA);
    // Inode tables hold whole inodes in the smallest block.
    assert!((crate::MIN_BLOCK_SIZE as usize).is_multiple_of(INODE_SIZE));
};

/// File type bits (as in `<sys/stat.h>`).
pub const S_IFMT: u32 = 0o170000;
pub const S_IFSOCK: u32 = 0o140000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFBLK: u32 = 0o060000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFCHR: u32 = 0o020000;
pub const S_IFIFO: u32 = 0o010000;

/// A timestamp with nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Timestamp {
    pub sec: i64,
    pub nsec: u32,
}

/// What the data area holds, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataArea {
    /// Up to [`INLINE_EXTENTS`] extents, sorted by logical block.
    Extents(Vec<Extent>),
    /// Root block of a B+tree (0 = empty).
    Tree(u64),
    /// Inline symlink target.
    Inline(Vec<u8>),
}

impl Default for DataArea {
    fn default() -> Self {
        DataArea::Extents(Vec::new())
    }
}

/// A decoded inode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiskInode {
    pub mode: u32,
    pub flags: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub generation: u32,
    pub size: u64,
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    pub rdev: u64,
    pub xattr_block: u64,
    pub parent: u64,
    pub entries: u64,
    /// chattr's flags (`ATTR_*`).
    pub attr_flags: u32,
    pub data: DataArea,
}

impl DiskInode {
    /// The `S_IFMT` bits.
    pub fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }

    /// True for directories.
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }

    /// Encodes into `out[..256]` with the checksum for `ino`.
    ///
    /// # Panics
    /// If the data area holds more than [`INLINE_EXTENTS`] extents or an
    /// inline target longer than [`DATA_AREA`] (the caller must move them to
    /// a tree or a block first).
    pub fn encode(&self, seed: u32, ino: u64, out: &mut [u8]) {
        let b = &mut out[..INODE_SIZE];
        b.fill(0);
        let mut flags = self.flags & INODE_FLAG_ORPHAN;
        let area = &mut b[DATA_OFF..DATA_OFF + DATA_AREA];
        match &self.data {
            DataArea::Extents(list) => {
                assert!(list.len() <= INLINE_EXTENTS, "encoder bug: {} inline extents in inode {ino}", list.len());
                put_u16(area, 0, list.len() as u16);
                for (i, e) in list.iter().enumerate() {
                    e.encode(&mut area[8 + i * EXTENT_DISK_SIZE..8 + (i + 1) * EXTENT_DISK_SIZE]);
                }
            }
            DataArea::Tree(root) => {
                flags |= INODE_FLAG_TREE;
                put_u64(area, 0, *root);
            }
            DataArea::Inline(bytes) => {
                flags |= INODE_FLAG_INLINE_DATA;
                assert!(bytes.len() <= DATA_AREA, "encoder bug: {}-byte inline data in inode {ino}", bytes.len());
                area[..bytes.len()].copy_from_slice(bytes);
            }
        }
        put_u32(b, 0, self.mode);
        put_u32(b, 4, flags);
        put_u32(b, 8, self.uid);
        put_u32(b, 12, self.gid);
        put_u32(b, 16, self.nlink);
        put_u32(b, 20, self.generation);
        put_u64(b, 24, self.size);
        put_u64(b, 32, self.blocks);
        put_i64(b, 40, self.atime.sec);
        put_u32(b, 48, self.atime.nsec);
        put_u32(b, 52, self.mtime.nsec);
        put_i64(b, 56, self.mtime.sec);
        put_i64(b, 64, self.ctime.sec);
        put_u32(b, 72, self.ctime.nsec);
        put_u32(b, 76, self.crtime.nsec);
        put_i64(b, 80, self.crtime.sec);
        put_u64(b, 88, self.rdev);
        put_u64(b, 96, self.xattr_block);
        put_u64(b, 104, self.parent);
        put_u64(b, 112, self.entries);
        put_u32(b, 124, self.attr_flags);
        let c = crc_skipping(seed ^ ino as u32 ^ (ino >> 32) as u32, b, CSUM_OFF);
        put_u32(b, CSUM_OFF, c);
    }

    /// Decodes inode `ino` like [`DiskInode::decode`] but with its checksum
    /// taken as right: fsck's view of an inode whose only fault may be the
    /// checksum (every other check still applies).
    pub fn decode_ignoring_checksum(seed: u32, ino: u64, buf: &[u8]) -> Result<DiskInode> {
        if buf.len() < INODE_SIZE {
            return Err(FormatError::corrupt("inode", ino, "short buffer"));
        }
        let mut b = buf[..INODE_SIZE].to_vec();
        let c = crc_skipping(seed ^ ino as u32 ^ (ino >> 32) as u32, &b, CSUM_OFF);
        put_u32(&mut b, CSUM_OFF, c);
        DiskInode::decode(seed, ino, &b)
    }

    /// Decodes and verifies inode `ino` from `buf[..256]`. Checks the
    /// checksum and the internal consistency of the data area; block numbers
    /// are checked against the geometry by the caller.
    pub fn decode(seed: u32, ino: u64, buf: &[u8]) -> Result<DiskInode> {
        const W: &str = "inode";
        if buf.len() < INODE_SIZE {
            return Err(FormatError::corrupt(W, ino, "short buffer"));
        }
        let b = &buf[..INODE_SIZE];
        let stored = get_u32(b, CSUM_OFF);
        let computed = crc_skipping(seed ^ ino as u32 ^ (ino >> 32) as u32, b, CSUM_OFF);
        if stored != computed {
            return Err(FormatError::Checksum { what: W, at: ino, stored, computed });
        }
        let flags = get_u32(b, 4);
        let mode = get_u32(b, 0);
        let size = get_u64(b, 24);
        let area = &b[DATA_OFF..DATA_OFF + DATA_AREA];
        let data = if flags & INODE_FLAG_TREE != 0 {
            DataArea::Tree(get_u64(area, 0))
        } else if flags & INODE_FLAG_INLINE_DATA != 0 {
            if size > DATA_AREA as u64 || mode & S_IFMT != S_IFLNK {
                return Err(FormatError::corrupt(W, ino, "bad inline data"));
            }
            DataArea::Inline(area[..size as usize].to_vec())
        } else {
            let n = usize::from(get_u16(area, 0));
            if n > INLINE_EXTENTS {
                return Err(FormatError::corrupt(W, ino, format!("{n} inline extents")));
            }
            let mut list = Vec::with_capacity(n);
            for i in 0..n {
                list.push(Extent::decode(&area[8 + i * EXTENT_DISK_SIZE..8 + (i + 1) * EXTENT_DISK_SIZE]));
            }
            DataArea::Extents(list)
        };
        let ts = |s: usize, n: usize| Timestamp { sec: get_i64(b, s), nsec: get_u32(b, n) };
        let inode = DiskInode {
            mode,
            flags,
            uid: get_u32(b, 8),
            gid: get_u32(b, 12),
            nlink: get_u32(b, 16),
            generation: get_u32(b, 20),
            size,
            blocks: get_u64(b, 32),
            atime: ts(40, 48),
            mtime: ts(56, 52),
            ctime: ts(64, 72),
            crtime: ts(80, 76),
            rdev: get_u64(b, 88),
            xattr_block: get_u64(b, 96),
            parent: get_u64(b, 104),
            entries: get_u64(b, 112),
            attr_flags: get_u32(b, 124) & ATTR_KNOWN,
            data,
        };
        for t in [inode.atime, inode.mtime, inode.ctime, inode.crtime] {
            if t.nsec >= 1_000_000_000 {
                return Err(FormatError::corrupt(W, ino, "timestamp nanoseconds out of range"));
            }
        }
        if !matches!(mode & S_IFMT, S_IFSOCK | S_IFLNK | S_IFREG | S_IFBLK | S_IFDIR | S_IFCHR | S_IFIFO) {
            return Err(FormatError::corrupt(W, ino, format!("unknown file type in mode {mode:o}")));
        }
        if inode.is_dir() && !matches!(inode.data, DataArea::Tree(_)) {
            return Err(FormatError::corrupt(W, ino, "directory without a tree root"));
        }
        Ok(inode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// chattr's flags sit at byte 124 under the checksum; unknown bits
    /// read as absent.
    #[test]
    fn attr_flags_round_trip_and_unknown_bits_are_dropped() {
        let d = DiskInode {
            mode: S_IFREG | 0o644,
            nlink: 1,
            attr_flags: ATTR_IMMUTABLE | ATTR_NODUMP,
            ..Default::default()
        };
        let mut b = vec![0u8; INODE_SIZE];
        d.encode(7, 42, &mut b);
        assert_eq!(get_u32(&b, 124), 0x50);
        assert_eq!(DiskInode::decode(7, 42, &b).unwrap(), d);
        put_u32(&mut b, 124, 0x8000_0050);
        let back = DiskInode::decode_ignoring_checksum(7, 42, &b).unwrap();
        assert_eq!(back.attr_flags, ATTR_IMMUTABLE | ATTR_NODUMP);
    }

    #[test]
    fn roundtrip_all_data_forms() {
        for data in [
            DataArea::Extents(vec![Extent { lblk: 0, pblk: 100, len: 3, unwritten: false }]),
            DataArea::Tree(12345),
            DataArea::Inline(b"target".to_vec()),
        ] {
            let mode = if matches!(data, DataArea::Inline(_)) { S_IFLNK | 0o777 } else { S_IFREG | 0o644 };
            let size = if let DataArea::Inline(t) = &data { t.len() as u64 } else { 4096 };
            let ino = DiskInode {
                mode,
                nlink: 1,
                size,
                mtime: Timestamp { sec: -5, nsec: 999_999_999 },
                data,
                ..Default::default()
            };
            let mut b = [0u8; 256];
            ino.encode(9, 42, &mut b);
            let mut want = ino.clone();
            want.flags = DiskInode::decode(9, 42, &b).unwrap().flags;
            assert_eq!(DiskInode::decode(9, 42, &b).unwrap(), want);
            assert!(DiskInode::decode(9, 43, &b).is_err(), "inode accepted under another number");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut b = [0xabu8; 256];
        for i in 0..256 {
            b[i] = (i * 7) as u8;
            let _ = DiskInode::decode(1, 1, &b);
        }
    }
}
