//! FITRIM (`fstrim` on the mount point): free space goes back to the host.
//!
//! Deleted files are freed by the reaper thread after the unlink returns
//! (one the kernel held, after its FORGET), and freed blocks wait for the
//! journal before they are allocatable (see `reaper`, `alloc`); a trim first
//! waits a moment for such a FORGET, lets the reaper finish, then commits and
//! checkpoints, so that what was deleted before `fstrim` is discarded by it. It then discards
//! every allocatable free extent in the range, group by group under each
//! group's lock (`alloc::trim`). On an image file that punches holes, and
//! the image's size on the host shrinks to what is in use.

use super::Fs;
use crate::error::{FsError, Result};

impl Fs {
    /// Discards the free space in bytes `[start, start + len)` in extents of
    /// at least `min_len` bytes; returns the bytes discarded (FITRIM's
    /// `fstrim_range`, as ext4 answers it: EINVAL for a start past the end, a
    /// length under a block or a minimum longer than a group, EROFS on a read-only mount).
    pub fn trim(&self, start: u64, len: u64, min_len: u64) -> Result<u64> {
        self.engine.writable()?;
        let geo = self.engine.meta().geo();
        let bs = u64::from(geo.block_size);
        if start >= geo.total_blocks * bs || len < bs || min_len > geo.blocks_per_group * bs {
            return Err(FsError::Errno(libc::EINVAL));
        }
        // Deleted files are freed by the reaper thread, after the unlink,
        // and one the kernel still held is queued only at its FORGET, which
        // may come a moment after `unlink` returned: wait for it first, as a
        // full file system's writers do (`Engine::wait_for_reaper`).
        self.engine.reaper().wait_for_forget(crate::reaper::FORGET_WAIT);
        self.engine.reaper().drain(std::time::Duration::from_secs(300));
        self.files.commit_and_checkpoint()?;
        let first = start / bs;
        let end = start.saturating_add(len) / bs;
        let blocks = self.engine.read_op(|| {
            self.engine.meta().alloc().trim(
                self.engine.meta().bufs(),
                self.engine.meta().dev().as_ref(),
                first,
                end,
                min_len.div_ceil(bs),
            )
        })?;
        Ok(blocks * bs)
    }
}
