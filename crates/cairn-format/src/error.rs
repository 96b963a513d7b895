//! Errors of the format layer: only "this is corrupt" or "this is not ours".
//!
//! Every corruption error names the structure (`what`) and where it was
//! found (`at`): the block number for block-sized structures (superblock 0,
//! tree nodes, xattr blocks, the journal superblock, bitmaps), the inode
//! number for inodes and for directory entries (the directory's), and the
//! group number for group descriptors.

use thiserror::Error;

/// What went wrong decoding an on-disk structure.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// The bytes do not start with the expected magic number.
    #[error("{what} at {at}: bad magic number (not a cairn structure)")]
    BadMagic {
        /// Which structure was being decoded.
        what: &'static str,
        /// Block number where the structure was expected (0 for the superblock).
        at: u64,
    },
    /// The stored checksum does not match the contents.
    #[error("{what} at {at}: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Which structure.
        what: &'static str,
        /// Block or inode number.
        at: u64,
        /// Checksum found on disk.
        stored: u32,
        /// Checksum computed over the contents.
        computed: u32,
    },
    /// A field is outside its allowed range.
    #[error("{what} at {at}: {detail}")]
    Corrupt {
        /// Which structure.
        what: &'static str,
        /// Block or inode number.
        at: u64,
        /// What is wrong, in words.
        detail: String,
    },
    /// The image uses a feature or version this build does not understand.
    #[error("incompatible image: {0}")]
    Incompatible(String),
}

impl FormatError {
    /// Shorthand for a [`FormatError::BadMagic`] at block `at`.
    pub fn bad_magic(what: &'static str, at: u64) -> Self {
        FormatError::BadMagic { what, at }
    }

    /// Shorthand for a [`FormatError::Corrupt`].
    pub fn corrupt(what: &'static str, at: u64, detail: impl Into<String>) -> Self {
        FormatError::Corrupt { what, at, detail: detail.into() }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, FormatError>;
