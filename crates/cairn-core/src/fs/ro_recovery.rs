//! Recovery before a read-only mount, as ext4 does it.
//!
//! A read-only mount must not write, but an image whose journal holds
//! committed changes is only consistent once they are replayed. ext4
//! replays anyway when the device is writable ("recovery required on
//! readonly filesystem ... write access will be enabled during recovery")
//! and refuses when it is not. cairn does the same: `cairn mount -o ro`
//! first asks [`Fs::pending_replay`] on the image opened read-only; if
//! records are pending it opens the image for writing, replays with
//! [`Fs::replay_journal`] (the home blocks and the journal superblock are
//! the only writes, flushed before it returns), and then mounts read-only
//! as usual. Where the image cannot be opened for writing, the mount is
//! refused with the reason, as before. The superblock is left as the crash
//! left it (not marked clean), and the orphan list is kept for the next
//! read-write mount.
//!
//! ## Becoming writable (`mount -o remount,rw`)
//! A read-only mount replayed what it had to, so its journal is empty; it
//! kept in memory the restart point a read-write mount would have written
//! (`Journal::open`). [`Fs::make_writable`] reopens the device for writing
//! (`BlockDevice::make_writable`), writes that restart point to the journal
//! superblock before anything else, and then does what a read-write mount
//! does after it has loaded: marks the superblock mounted, finishes the
//! orphan list, commits, starts the backend. Until it returns, every change
//! is refused with EROFS, as before; an engine that latched an error stays
//! read-only.

use super::Fs;
use crate::dev::BlockDevice;
use crate::error::Result;
use crate::journal::Journal;
use cairn_format::superblock::Superblock;
use std::sync::Arc;

fn superblock(dev: &dyn BlockDevice) -> Result<(Superblock, u32)> {
    let sb = crate::dev::read_superblock(dev)?;
    let seed = sb.csum_seed();
    Ok((sb, seed))
}

impl Fs {
    /// Committed journal records a mount of the image on `dev` would
    /// replay (0: a read-only mount needs no recovery). Writes nothing.
    pub fn pending_replay(dev: Arc<dyn BlockDevice>) -> Result<u64> {
        let (sb, seed) = superblock(dev.as_ref())?;
        Journal::pending(dev, &sb, seed)
    }

    /// Replays the journal of the image on `dev` (opened for writing) and
    /// does nothing else; returns the records replayed.
    pub fn replay_journal(dev: Arc<dyn BlockDevice>) -> Result<u64> {
        let (sb, seed) = superblock(dev.as_ref())?;
        let (_journal, report) = Journal::open(dev, &sb, seed, true)?;
        Ok(report.records)
    }

    /// Turns a read-only mount read-write (see the module essay). Fails,
    /// and stays read-only, when the device cannot be opened for writing or
    /// the engine has latched an error. An image marked as having errors
    /// becomes writable with the warning a read-write mount of it gives.
    pub fn make_writable(self: &Arc<Self>) -> Result<()> {
        let _one = self.remount_lock.lock();
        if !self.engine.mounted_read_only() {
            return Ok(());
        }
        self.engine.alive()?;
        self.engine.txm().latch.check_writable()?;
        self.engine.meta().dev().make_writable()?;
        self.engine.txm().log.begin_writing()?;
        self.engine.set_writable();
        tracing::info!("read-only mount turned read-write");
        self.start_writing()
    }
}
