//! # cairn-format: the on-disk format, and nothing else
//!
//! Every structure cairn stores lives here as a pure encode/decode pair: no
//! I/O, no caching, no policy. The engine (`cairn-core`), `mkfs`, the
//! independent checker (`cairn-fsck`) and fuzzers all share this crate, the way
//! `libxfs` is shared by the XFS kernel code, `mkfs.xfs` and `xfs_repair`.
//!
//! ## Image layout
//!
//! All integers are little-endian. The image is an array of blocks of
//! `block_size` bytes (1 KiB .. 64 KiB, default 4 KiB), numbered from 0 with
//! 64-bit block numbers, and divided into *groups* of `blocks_per_group`
//! blocks (at most `8 * block_size`, so one bitmap block covers a group).
//!
//! ```text
//! block 0              superblock (512 bytes used, crc32c)      [superblock.rs]
//! 1 .. 1+gdt_blocks    group descriptor table, 64 B per group   [group_desc.rs]
//! journal_start ..     write-ahead journal region               [journal.rs]
//! then, in every group (after the above in the groups they cover):
//!   block bitmap (1 block) | inode bitmap (1 block) | inode table | data ...
//! ```
//!
//! Inodes are 256 bytes ([`inode`]), numbered from 1 (the root); inode `n`
//! lives in group `(n-1) / inodes_per_group` at index `(n-1) % inodes_per_group`.
//! File extents and directory entries live in one generic B+tree format
//! ([`btree`]) keyed by `u64`: extents by logical block ([`extent`]), directory
//! entries by seeded name hash ([`dirent`]). Small extent maps and short
//! symlinks are stored inline in the inode. Extended attributes live in one
//! refcounted xattr block per inode ([`xattr`]), laid out so identical blocks can
//! be shared (the mbcache design).
//!
//! ## Invariants
//! * Every metadata block and every inode carries a crc32c seeded with the
//!   file-system UUID ([`checksum`]); decoders verify it and every bound before
//!   returning, so nothing read from disk is trusted unchecked.
//! * Decoders never panic on any input: they return [`FormatError`], which
//!   names the structure and where it was found (block or inode number).
//! * Encoders panic on a value the format cannot hold (a field written out
//!   of its buffer, too many entries for a block): that is a bug in the
//!   caller, never something to write silently wrong.
//! * Every fixed size and offset is checked at compile time, and a golden
//!   test per structure pins its bytes (`golden.rs`): a format change shows
//!   up as a failing test, not as images that older builds misread.
//! * Group bitmaps and inode tables may be *uninitialised* (flags in the group
//!   descriptor) so that `mkfs` of a 16 TiB sparse image writes only megabytes;
//!   their implied content is defined once, in [`bitmap`].
//!
//! ## Rules shared by the engine and the checker
//! Beyond the encodings, the rules that say *where* things are and *how* a
//! sequence of blocks is read live here too, so that `cairn-fsck` stays
//! independent of the engine in policy without copying the format:
//! group-descriptor location ([`group_desc::gd_loc`]), the implied bitmaps of
//! uninitialised groups ([`bitmap::synth_block_bitmap`],
//! [`bitmap::synth_inode_bitmap`]), journal ring arithmetic
//! ([`journal::ring_next`], [`journal::ring_used`]), the journal record
//! walk ([`journal::read_record`]) and the test that tells a torn end of the
//! log from damage in its middle ([`journal_damage`]).

pub mod backup;
pub mod bitmap;
pub mod btree;
pub mod checksum;
pub mod codec;
pub mod crypt_header;
pub mod dirent;
pub mod error;
pub mod extent;
pub mod foreign;
pub mod group_desc;
pub mod inode;
pub mod journal;
pub mod journal_damage;
pub mod layout;
pub mod leaf_edit;
pub mod sparse;
pub mod superblock;
pub mod xattr;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod test_rng;

pub use error::FormatError;

/// Inode number of the root directory (the same number FUSE uses for its root).
pub const ROOT_INO: u64 = 1;
/// First inode number handed out to ordinary files; 2..FIRST_INO are reserved.
pub const FIRST_INO: u64 = 8;
/// Longest name of a directory entry, in bytes.
pub const NAME_MAX: usize = 255;
/// Longest symlink target, in bytes.
pub const SYMLINK_MAX: usize = 4095;
/// Smallest and largest supported block sizes.
pub const MIN_BLOCK_SIZE: u32 = 1024;
/// Largest supported block size.
pub const MAX_BLOCK_SIZE: u32 = 65536;
