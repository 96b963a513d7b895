//! Shutting the file system down on request: XFS's `XFS_IOC_GOINGDOWN`,
//! ext4's `EXT4_IOC_SHUTDOWN` (one ioctl number), `xfs_io -x -c shutdown`.
//!
//! ## What it does
//! With `flush` (the ioctl's default and its LOGFLUSH flag) everything
//! changed so far is committed first; without it (NOLOGFLUSH) nothing is,
//! and the changes since the last commit are lost as in a crash. Then the
//! journal is aborted and every later request fails with EIO (the error
//! latch's `shutdown` state). Nothing is written to the image after that:
//! the superblock is not marked clean at unmount, so the next mount replays
//! the journal, exactly as after a crash at that moment. This is what
//! xfstests' shutdown-based recovery tests rely on.
//!
//! Data the kernel still holds in its page cache (the writeback cache) is
//! not written first: a shutdown loses it, as an unflushed page cache is
//! lost in a crash; what `fsync` covered is durable either way.

use super::Fs;
use crate::error::Result;

impl Fs {
    /// Shuts the file system down (see the module essay). A second shutdown
    /// does nothing.
    pub fn shutdown(&self, flush: bool) -> Result<()> {
        if self.engine.txm().latch.check_alive().is_err() {
            return Ok(());
        }
        if flush {
            if let Err(e) = self.files().sync_fs() {
                tracing::warn!(error = %e, "shutdown: the commit before it failed");
            }
        }
        self.engine.txm().latch.shut_down();
        tracing::warn!(
            flush,
            "shut down on request: every request now fails with EIO; the next mount replays the journal"
        );
        Ok(())
    }
}
