//! Why a check could not be carried out.
//!
//! ## Purpose
//! A [`FsckError`] is not a finding: findings are [`Problem`](crate::Problem)s
//! in the [`Report`](crate::Report), and a check that ends with them still
//! ends. An error means fsck could not check at all, or not past the
//! superblock: the image cannot be opened, is locked by a mount, is no
//! cairn image, is shorter than its file system, or a read failed.
//!
//! ## Layout
//! Every pass returns `Result<_, FsckError>` and so imports this module;
//! it imports nothing of the crate but the words of [`crate::report`]
//! (sizes in a message), so that no pass reaches up to the crate root.
//!
//! ## Exit codes
//! [`FsckError::exit_code`] is fsck(8)'s: 4 for a superblock that fails its
//! checks (an error left uncorrected), 8 for everything else (operational).

use crate::report::{bytes, num};
use std::path::PathBuf;

/// Why a check could not be carried out (or could not get past the superblock).
#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    /// The image could not be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The image.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another process holds the image's lock.
    #[error("{0} is in use (it appears to be mounted, or another fsck is running); unmount it first")]
    Mounted(PathBuf),
    /// No cairn superblock.
    #[error("not a cairn file system: {0}")]
    NotCairn(String),
    /// The path names a directory (or another file that holds no image).
    #[error("{} is {what}, not an image file or block device", path.display())]
    NotAnImage {
        /// The path.
        path: PathBuf,
        /// What it is ("a directory").
        what: &'static str,
    },
    /// The image is shorter than the superblock says.
    #[error("image is truncated: {0}")]
    Truncated(String),
    /// The image file or device is shorter than the file system it holds
    /// (whose superblock is otherwise sound).
    #[error("{}", short_message(*fs_bytes, *image_bytes, *block_device))]
    Short {
        /// The file system's size (from the superblock).
        fs_bytes: u64,
        /// The image's size.
        image_bytes: u64,
        /// A block device (which fsck cannot grow), not an image file.
        block_device: bool,
    },
    /// A version or feature this build does not know.
    #[error("incompatible image: {0}")]
    Incompatible(String),
    /// A cairn superblock that fails its checks.
    #[error("superblock is corrupt: {0}")]
    CorruptSuperblock(String),
    /// `-b` named a block that holds no backup superblock.
    #[error("{0}")]
    NoBackup(String),
    /// Geometry beyond fsck's limits.
    #[error("file system too large for this fsck: {0}")]
    TooLarge(String),
    /// Reading or writing the image failed.
    #[error("I/O error on the image: {0}")]
    Io(#[from] std::io::Error),
}

impl FsckError {
    /// The fsck(8) exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            FsckError::CorruptSuperblock(_) => 4,
            _ => 8,
        }
    }
}

/// [`FsckError::Short`]'s message.
fn short_message(fs_bytes: u64, image_bytes: u64, block_device: bool) -> String {
    let short = bytes(fs_bytes.saturating_sub(image_bytes));
    if block_device {
        format!(
            "image is truncated: the block device holds {}, {short} less than the file system on it needs ({} \
             bytes); fsck cannot grow a device: copy it (dd) to an image file or a device of at least that size \
             and check the copy",
            bytes(image_bytes),
            num(fs_bytes)
        )
    } else {
        format!(
            "image is truncated: the file is {}, {short} shorter than the file system it holds ({} bytes); \
             `cairn fsck --repair` extends it to the file system's size and checks it",
            bytes(image_bytes),
            num(fs_bytes)
        )
    }
}
