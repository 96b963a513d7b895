//! `Meta`: the metadata context every subsystem works through — the buffer
//! cache, the allocator, the geometry, the running checkpoint number and
//! the in-memory superblock that every commit rewrites.

use crate::alloc::Allocator;
use crate::buffer::{Buf, BufferCache, Change};
use crate::dev::BlockDevice;
use crate::error::Result;
use cairn_format::btree::Node;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, STATE_ERRORS};
use cairn_format::FormatError;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The mount options the metadata context reads (see `mount_options`).
pub(crate) struct MetaOptions {
    /// `-o inode_readahead_blks`.
    pub inode_readahead: u64,
    /// `-o node_readahead`.
    pub node_readahead: bool,
    /// Share identical xattr blocks (`-o mbcache`).
    pub mbcache: bool,
}

/// Shared metadata context.
pub struct Meta {
    dev: Arc<dyn BlockDevice>,
    bufs: BufferCache,
    alloc: Allocator,
    seed: u32,
    hash_seed: [u8; 16],
    /// Sequence number of the checkpoint that operations now add to.
    running_seq: AtomicU64,
    /// Shared xattr blocks: the dedup cache and the block locks.
    xattrs: crate::mbcache::XattrShare,
    /// The superblock as the next commit writes it (its counters are
    /// refreshed then, see [`Meta::write_sb_buffer`]).
    sb: Mutex<Superblock>,
    /// The first block of the orphan list (0: empty; see `inode_store`).
    orphan_root: Mutex<u64>,
    /// Orphan-list inserts the next swap makes (see `deferred_orphans`).
    orphans: crate::deferred_orphans::DeferredOrphans,
    /// Inode-table blocks one read brings on a miss (`-o
    /// inode_readahead_blks`; 0 or 1: only the block asked for; see
    /// `buffer::readahead`).
    inode_readahead: u64,
    /// Read a scan's next tree leaves ahead, a run at a time (`-o
    /// node_readahead=0|1`; see [`Meta::prefetch_nodes`]).
    node_readahead: bool,
}

/// Most blocks one read of tree leaves ahead of a scan spans.
pub const NODE_READAHEAD: u64 = 32;
/// The largest gap between two leaves that one read ahead still spans.
pub const NODE_GAP: u64 = 4;
/// The largest gap between two inode-table blocks that one read ahead of a
/// listing's inodes still spans (the blocks between are the table's too,
/// and usually wanted soon).
pub const INODE_GAP: u64 = 8;

/// Calls `read(start, end)` for each run of `blocks` (`(area, block)`
/// pairs, sorted and without duplicates) that one device read brings:
/// blocks of one area, each at most `gap` after the one before and less
/// than `span` after the run's first. Only runs of two blocks or more are
/// read (a single block is read when it is asked for). Shared by
/// [`Meta::prefetch_nodes`] and [`Meta::prefetch_inodes`].
fn for_each_run(blocks: &[(u64, u64)], gap: u64, span: u64, mut read: impl FnMut(u64, u64)) {
    debug_assert!(blocks.windows(2).all(|w| w[0] < w[1]));
    let mut i = 0;
    while i < blocks.len() {
        let (area, start) = blocks[i];
        let mut j = i + 1;
        while j < blocks.len()
            && blocks[j].0 == area
            && blocks[j].1 - blocks[j - 1].1 <= gap
            && blocks[j].1 - start < span
        {
            j += 1;
        }
        if j - i >= 2 {
            read(start, blocks[j - 1].1.saturating_add(1));
        }
        i = j;
    }
}

impl Meta {
    /// The metadata context of a mount: `sb` as the image holds it (after
    /// replay), the journal's next sequence number, and the mount's
    /// readahead and xattr-sharing options.
    pub(crate) fn new(
        dev: Arc<dyn BlockDevice>,
        bufs: BufferCache,
        alloc: Allocator,
        sb: &Superblock,
        next_seq: u64,
        opts: MetaOptions,
    ) -> Meta {
        Meta {
            dev,
            bufs,
            alloc,
            seed: sb.csum_seed(),
            hash_seed: sb.hash_seed,
            running_seq: next_seq.into(),
            orphan_root: Mutex::new(sb.orphan_root),
            orphans: crate::deferred_orphans::DeferredOrphans::new(),
            inode_readahead: opts.inode_readahead,
            node_readahead: opts.node_readahead,
            sb: Mutex::new(sb.clone()),
            xattrs: crate::mbcache::XattrShare::new(
                opts.mbcache,
                sb.feature_incompat & cairn_format::superblock::INCOMPAT_XATTR_EXTERNAL != 0,
            ),
        }
    }

    /// The block device.
    pub fn dev(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// The buffer cache.
    pub fn bufs(&self) -> &BufferCache {
        &self.bufs
    }

    /// The block and inode allocator.
    pub fn alloc(&self) -> &Allocator {
        &self.alloc
    }

    /// The checksum seed.
    pub fn seed(&self) -> u32 {
        self.seed
    }

    /// The directory-hash seed.
    pub fn hash_seed(&self) -> [u8; 16] {
        self.hash_seed
    }

    /// Sequence number of the checkpoint that operations now add to.
    pub fn running_seq(&self) -> &AtomicU64 {
        &self.running_seq
    }

    /// Shared xattr blocks: the dedup cache and the block locks.
    pub fn xattrs(&self) -> &crate::mbcache::XattrShare {
        &self.xattrs
    }

    /// The superblock as the next commit writes it.
    pub fn sb(&self) -> &Mutex<Superblock> {
        &self.sb
    }

    /// The first block of the orphan list (0: empty).
    pub fn orphan_root(&self) -> &Mutex<u64> {
        &self.orphan_root
    }

    /// Orphan-list inserts the next swap makes.
    pub fn orphans(&self) -> &crate::deferred_orphans::DeferredOrphans {
        &self.orphans
    }

    /// Inode-table blocks one read brings on a miss.
    pub fn inode_readahead(&self) -> u64 {
        self.inode_readahead
    }
}

impl Meta {
    /// The geometry as of now (`cairn resize` may grow it while mounted).
    pub fn geo(&self) -> Geometry {
        self.alloc.geo()
    }

    /// Block size in bytes.
    pub fn bs(&self) -> usize {
        self.geo().block_size as usize
    }

    /// Reads a B+tree node, verifying it (checksum, bounds, block number) and
    /// that it belongs to tree `kind` of `owner`.
    pub fn read_node(&self, blk: u64, kind: u8, owner: u64) -> Result<Arc<Buf>> {
        if !self.geo().valid_data_range(blk, 1) {
            return Err(
                FormatError::corrupt("tree pointer", owner, format!("block {blk} outside the data area")).into()
            );
        }
        let seed = self.seed;
        let buf = self.bufs.get(blk, |b, d| Node::decode(seed, b, d).map(|_| ()).map_err(Into::into))?;
        {
            let d = buf.read();
            let own = cairn_format::codec::get_u64(&d, 8);
            if d[4] != kind || own != owner {
                return Err(FormatError::corrupt(
                    "tree node",
                    blk,
                    format!("belongs to kind {} owner {own}, expected kind {kind} owner {owner}", d[4]),
                )
                .into());
            }
        }
        Ok(buf)
    }

    /// Reads ahead the tree nodes `blocks` (a scan's next leaves, in key
    /// order): each run of them that lies close together on the device
    /// (gaps of at most [`NODE_GAP`] blocks, [`NODE_READAHEAD`] blocks in
    /// all) comes in one device read (`buffer::readahead`). Blocks of a run
    /// that are not valid nodes are not cached; a bad pointer is left for
    /// the read that follows it to report.
    pub fn prefetch_nodes(&self, blocks: &[u64]) {
        if !self.node_readahead || blocks.len() < 2 {
            return;
        }
        let mut wanted: Vec<(u64, u64)> = blocks.iter().map(|&b| (0, b)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        wanted.retain(|&(_, b)| !self.bufs.is_cached(b));
        let seed = self.seed;
        let verify = |b: u64, d: &[u8]| Node::decode(seed, b, d).map(|_| ()).map_err(Into::into);
        for_each_run(&wanted, NODE_GAP, NODE_READAHEAD, |start, end| {
            // A damaged pointer may be anything: `valid_data_range` refuses
            // a run past the device.
            if self.geo().valid_data_range(start, end - start) {
                self.bufs.prefetch(start, end, verify);
            }
        });
    }

    /// Reads ahead the inode-table blocks of `inos` (the entries of a
    /// READDIRPLUS batch, whose inodes are about to be loaded, in hash
    /// order): the blocks not cached, sorted, each run of them at most
    /// [`INODE_GAP`] blocks apart and [`Meta::inode_readahead`] blocks long
    /// within one group's table comes in one device read. Without this,
    /// the batch's first inode (anywhere in the directory's part of the
    /// table) reads the window after it, and the ones before it each miss
    /// again. A number out of range is left for its load to report.
    pub fn prefetch_inodes(&self, inos: impl Iterator<Item = u64>) {
        if self.inode_readahead < 2 {
            return;
        }
        let geo = self.geo();
        // (group, block) of each inode: a run stays in one group's table.
        let mut wanted: Vec<(u64, u64)> =
            inos.filter(|&i| geo.valid_ino(i)).map(|i| (geo.group_of_ino(i), geo.inode_location(i).0)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        wanted.retain(|&(_, b)| !self.bufs.is_cached(b));
        for_each_run(&wanted, INODE_GAP, self.inode_readahead, |start, end| {
            self.bufs.prefetch(start, end, |_, _| Ok(()));
        });
    }

    /// Logs the superblock with the counters as they are now: run by each
    /// swap under the closed gate, so they match the checkpoint.
    /// `errors`: the error latch has flagged the image.
    pub fn write_sb_buffer(&self, tx: &dyn Change, errors: bool) -> Result<()> {
        let mut sb = self.sb.lock();
        sb.free_blocks = self.alloc.disk_free_blocks.load(Ordering::Relaxed);
        sb.free_inodes = self.alloc.free_inodes.load(Ordering::Relaxed);
        sb.next_ino = self.alloc.next_ino.load(Ordering::Relaxed);
        sb.orphan_root = *self.orphan_root.lock();
        sb.last_write_time = crate::types::now().sec as u64;
        if errors {
            sb.state |= STATE_ERRORS;
        }
        let buf = self.bufs.get(0, |_, _| Ok(()))?;
        // Logged whole: the error latch also writes the superblock in place,
        // outside the journal, so replay must not patch chunks over it.
        self.bufs.modify_whole(tx, &buf, |d| sb.encode(d));
        Ok(())
    }

    /// Decodes the node in `buf`. Its checksum was verified when the block
    /// was read (see [`Meta::read_node`]) and every encode re-stamps it, so
    /// only the bounds are checked here.
    pub fn decode_node(&self, buf: &Buf) -> Result<Node> {
        Ok(Node::parse(buf.blk, &buf.read())?)
    }
}
