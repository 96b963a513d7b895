//! Growing a mounted file system (`cairn resize MOUNTPOINT SIZE`, ext4's
//! `EXT4_IOC_RESIZE_FS` as `resize2fs` sends it to a mounted ext4).
//!
//! ## What happens
//! The same growth as the offline `resize` (new groups that say "never
//! used", the short last group filled up), in steps of at most one
//! descriptor block's worth of groups, each a change of its own:
//! 1. The device is made long enough (an image file grows, sparse), and the
//!    new groups' inode tables are zeroed — past the old end, where nothing
//!    looks yet.
//! 2. Under the quiesced gate (no operation inside, no commit running), one
//!    handle writes the new descriptors and frees the old last group's new
//!    blocks (`alloc::grow`), and the in-memory superblock takes the new
//!    block and group counts; the allocator then serves the new groups.
//! 3. After the last step, a commit and a checkpoint put the grown
//!    superblock home; then the backup copies are rewritten (the new groups'
//!    and the old ones', which name the old size).
//!
//! ## Crash safety
//! Each step's descriptors, bitmaps and superblock are in one checkpoint of
//! the journal: a crash leaves the file system as it was before a step or
//! after it. Operations that use the new groups log into later checkpoints,
//! which replay only after the step's. A replay reads the superblock from
//! before the grow and finds records whose home is past its end: they are
//! accepted up to the device's end (`journal::recovery`), and the grown
//! superblock is among them. A crash before step 3's backups leaves copies
//! that name an older size: `cairn fsck` reports them, `--repair` rewrites
//! them.
//!
//! ## Limits
//! As offline: growth only, up to what the descriptor table (with the
//! reserve mkfs leaves, 1,024 times the groups) can describe; a file
//! system with recorded errors or mounted read-only is refused.

use super::Fs;
use crate::error::{ResizeError, Result};
use crate::resize::Grown;
use cairn_format::group_desc::GD_SIZE;
use cairn_format::layout::Geometry;
use cairn_format::superblock::COMPAT_ITABLES_ZEROED;

/// Log credits of one step: the descriptor blocks of one block's worth of
/// groups (two if they straddle), the old last group's descriptor block
/// and bitmap, and room to spare.
const STEP_CREDITS: u64 = 8;

impl Fs {
    /// Grows the mounted file system to about `new_bytes` (rounded down to a
    /// last group that holds its metadata); see the module essay.
    pub fn grow(&self, new_bytes: u64) -> Result<Grown> {
        let _remount = self.remount_lock.lock();
        self.engine.writable()?;
        let sb0 = self.engine.meta().sb().lock().clone();
        let bs = u64::from(sb0.block_size());
        // Already that size: nothing to do (as resize2fs), not a shrink.
        if new_bytes / bs == sb0.total_blocks {
            return Ok(crate::resize::unchanged(&sb0));
        }
        let (target, target_geo) = crate::resize::grown_superblock(&sb0, new_bytes)?;
        self.engine
            .meta()
            .dev()
            .grow_to(target.total_blocks * bs)
            .map_err(|source| ResizeError::DeviceGrow { bytes: target.total_blocks * bs, source })?;
        let old = self.engine.meta().geo();
        // (1) Inode tables, past the old end.
        let zeroed = sb0.feature_compat & COMPAT_ITABLES_ZEROED != 0
            && crate::resize::zero_inode_tables(
                self.engine.meta().dev().as_ref(),
                &target_geo,
                old.group_count..target_geo.group_count,
            )?;
        self.engine.meta().dev().flush()?;
        // (2) Steps of at most one descriptor block's worth of groups.
        let per_step = bs / GD_SIZE as u64;
        loop {
            let now = self.engine.meta().geo();
            if now.total_blocks >= target.total_blocks {
                break;
            }
            let groups = (now.group_count + per_step).min(target_geo.group_count);
            let total = if groups == target_geo.group_count {
                target.total_blocks
            } else {
                groups * target_geo.blocks_per_group
            };
            let step = Geometry { total_blocks: total, group_count: groups, ..target_geo };
            self.files.commit()?;
            let r = self.engine.txm().quiesced_change(self.engine.meta(), STEP_CREDITS, |tx| {
                self.engine.meta().alloc().grow(tx, &step, zeroed)?;
                let mut sb = self.engine.meta().sb().lock();
                sb.total_blocks = step.total_blocks;
                sb.group_count = step.group_count;
                if !zeroed {
                    sb.feature_compat &= !COMPAT_ITABLES_ZEROED;
                }
                Ok(())
            });
            if let Err(e) = &r {
                self.engine.txm().latch.note(self.engine.meta().dev(), e, true);
            }
            r?;
        }
        // (3) The grown superblock home, then its copies.
        self.files.commit_and_checkpoint()?;
        let sb = self.engine.meta().sb().lock().clone();
        crate::tune::write_backups(self.engine.meta().dev().as_ref(), &sb, &self.engine.meta().geo())?;
        tracing::info!(
            from_blocks = old.total_blocks,
            to_blocks = sb.total_blocks,
            groups = sb.group_count,
            "file system grown while mounted"
        );
        Ok(Grown {
            old_blocks: old.total_blocks,
            new_blocks: sb.total_blocks,
            old_groups: old.group_count,
            new_groups: sb.group_count,
            block_size: sb.block_size(),
        })
    }
}
