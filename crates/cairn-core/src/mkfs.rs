//! Formatting an image (a library function; `cairn mkfs` wraps it).

use crate::dev::BlockDevice;
use crate::error::{err, Result};

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
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions { block_size: 4096, blocks_per_group: None, bytes_per_inode: 16384, journal_blocks: None, label: String::new() }
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

/// Formats `dev` (its whole size). `progress(done, total)` is called as
/// groups are written.
#[allow(unused_variables)]
pub fn format(dev: &dyn BlockDevice, opts: &MkfsOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<FormatSummary> {
    err(libc::ENOSYS)
}
