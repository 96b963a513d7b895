//! [`MountOptions`]: what a mount of the engine is told, and the split of
//! its memory budget between the caches.

use crate::buffer::BUF_OVERHEAD;
use crate::journal::ErrorPolicy;
use std::time::Duration;

/// Options for [`crate::fs::Fs::mount`].
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Refuse every change; the journal is not replayed into the image.
    pub read_only: bool,
    /// Commit interval of the backend thread (`-o commit=SECONDS`).
    pub commit_interval: Duration,
    /// The memory the engine may keep in proportion to its caches
    /// (`-o cache_mb`): when set, the mount splits it
    /// ([`MountOptions::split_budget`], once the block size is known) and
    /// it replaces the three sizes below.
    pub memory_budget: Option<u64>,
    /// Metadata buffer cache size, in blocks.
    pub cache_blocks: usize,
    /// Byte budget of the in-core inode cache (`-o cache_mb` gives it an
    /// eighth; see `inode`). Inodes that are busy or dirty are never
    /// dropped, so the cache may exceed it by them.
    pub inode_cache_bytes: usize,
    /// Byte budget of the dentry cache (`-o cache_mb` gives it an eighth;
    /// see `dcache`).
    pub dentry_cache_bytes: usize,
    /// Bound the inode cache and keep a dentry cache (`-o lru_caches=0|1`);
    /// off: in-core inodes stay until the kernel forgets them, every LOOKUP
    /// reads the directory (the behaviour before both caches).
    pub lru_caches: bool,
    /// What corruption or an I/O error does (`-o errors=`).
    pub errors: ErrorPolicy,
    /// Find groups for power-of-two and goal-length requests through the
    /// allocator's order lists and fragment buckets instead of walking every
    /// group (`-o mb_optimize_scan=0|1`, see `alloc`).
    pub mb_optimize_scan: bool,
    /// Blocks a locality group's new run for small files searches for
    /// (`-o mb_group_prealloc=N`, ext4's knob; 0 turns them off: see
    /// `alloc::group_prealloc`).
    pub mb_group_prealloc: u32,
    /// Discard blocks as soon as their free is durable (`-o discard`: holes
    /// punched in the image file as deletes commit; see `alloc::trim`).
    pub discard: bool,
    /// Write over allocated, written blocks with no transaction and shared
    /// locks (`-o overwrite_fastpath=0|1`, see `overwrite`).
    pub overwrite_fastpath: bool,
    /// A journaled write maps its new blocks unwritten, copies its data with
    /// no handle open and then maps them written (`-o staged_writes=0|1`,
    /// see `file_io::staged`); off: all in one handle.
    pub staged_writes: bool,
    /// Share identical xattr blocks through the dedup cache (`-o nombcache`
    /// turns it off, see `mbcache`).
    pub mbcache: bool,
    /// Free deleted files on the caller's thread instead of the reaper's
    /// (`-o sync_delete`, see `reaper`).
    pub sync_delete: bool,
    /// Delayed logging: log only the changed chunks of each block and defer
    /// home writes until the log needs the room (`-o delaylog=0`: whole
    /// blocks, home at every commit; see `buffer::cil` and `journal::ail`).
    pub delaylog: bool,
    /// Compress each checkpoint's logged chunks (zstd) on images with
    /// `INCOMPAT_JOURNAL_ZSTD` (`-o journal_compress=0` logs them as they
    /// are; see `journal::log`).
    pub journal_compress: bool,
    /// How long a push's close of the transaction gate waits for the
    /// operations inside before it reopens and tries again
    /// (`-o push_drain_us=N`; 0: never, the close waits however long; see
    /// `tx::gate`).
    pub push_drain: Option<Duration>,
    /// How long a push waits for a moment with no operation inside the
    /// transaction gate (then nobody waits for its swap but for the swap
    /// itself) before it closes the gate on the operations inside
    /// (`-o push_patience_us=N`; 0: it closes at once; see `tx::gate`).
    pub push_patience: Option<Duration>,
    /// Inode-table blocks read in one device read when an inode's block is
    /// not cached: it and the ones after it in the group's table (`-o
    /// inode_readahead_blks=N`, ext4's knob and default; 0 reads only the
    /// block, and no READDIRPLUS batch is read ahead either; see
    /// `buffer::readahead`).
    pub inode_readahead_blks: u32,
    /// Read a tree scan's next leaves ahead, a run of nearby blocks in one
    /// read (`-o node_readahead=0|1`; see `Meta::prefetch_nodes`).
    pub node_readahead: bool,
    /// Count the changes that would meet another running handle's changes
    /// if handles kept them private until their end (`-o
    /// debug.conflict_probe`; step S0 of `docs/gate-plan.md`, see
    /// `buffer::probe`).
    pub conflict_probe: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            commit_interval: Duration::from_secs(5),
            memory_budget: None,
            cache_blocks: 65536,
            inode_cache_bytes: 32 << 20,
            dentry_cache_bytes: 32 << 20,
            lru_caches: true,
            errors: ErrorPolicy::default(),
            mb_optimize_scan: true,
            mb_group_prealloc: crate::alloc::DEFAULT_GROUP_PREALLOC,
            discard: false,
            overwrite_fastpath: true,
            staged_writes: false,
            mbcache: true,
            sync_delete: false,
            delaylog: true,
            journal_compress: true,
            push_drain: Some(crate::tx::gate::DRAIN),
            push_patience: Some(crate::tx::gate::PATIENCE),
            inode_readahead_blks: crate::buffer::DEFAULT_INODE_READAHEAD,
            node_readahead: true,
            conflict_probe: false,
        }
    }
}

impl MountOptions {
    /// Splits `bytes` so that everything the engine keeps in memory in
    /// proportion to it fits within it (`-o cache_mb`): 15/32 to the buffer
    /// cache, each block of `block_size` bytes counted with its bookkeeping
    /// ([`BUF_OVERHEAD`]); the engine sizes three things from the buffer
    /// cache's size: the committed images waiting for their home write (the
    /// AIL, a quarter of its bytes), loaded buddies (a sixteenth of its
    /// blocks as buddies of about three blocks each) and one checkpoint's
    /// captured copies (an eighth); 1/8 each to the inode and the dentry
    /// cache. Without the LRU caches (`lru_caches=0`) the buffer cache also
    /// gets their share.
    pub fn split_budget(&mut self, bytes: u64, block_size: u32) {
        let bytes = bytes as usize;
        let per_block = block_size as usize + BUF_OVERHEAD;
        if self.lru_caches {
            self.cache_blocks = bytes / 32 * 15 / per_block;
            self.inode_cache_bytes = bytes / 8;
            self.dentry_cache_bytes = bytes / 8;
        } else {
            self.cache_blocks = bytes / 32 * 23 / per_block;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_split_between_the_caches_by_block_size() {
        let mut o = MountOptions::default();
        o.split_budget(64 << 20, 4096);
        assert_eq!(o.cache_blocks, (30 << 20) / (4096 + BUF_OVERHEAD));
        assert_eq!(o.inode_cache_bytes, 8 << 20);
        assert_eq!(o.dentry_cache_bytes, 8 << 20);
        o.split_budget(64 << 20, 1024);
        assert_eq!(o.cache_blocks, (30 << 20) / (1024 + BUF_OVERHEAD));
        let mut o = MountOptions { lru_caches: false, ..MountOptions::default() };
        o.split_budget(64 << 20, 4096);
        assert_eq!(o.cache_blocks, (46 << 20) / (4096 + BUF_OVERHEAD));
    }
}
