//! Group geometry: where each group's bitmaps and inode table are, derived
//! from the superblock alone (nothing here is stored).
//!
//! Group `g` covers blocks `[g * bpg, min((g+1) * bpg, total_blocks))`. Its
//! metadata — block bitmap, inode bitmap, inode table — starts at the group's
//! first block, except in group 0, where the superblock, the group descriptor
//! table and the journal come first. A journal larger than group 0's room
//! (`INCOMPAT_JOURNAL_GROUPS`) continues through groups `1 ..= journal_groups`,
//! filling each past its own metadata: those groups are all fixed metadata,
//! their inodes still usable, their blocks never data. mkfs guarantees that
//! all of group 0's fixed metadata fits inside group 0, and that the last
//! group has room for its metadata plus data.
//!
//! With `INCOMPAT_BACKUP_SUPERBLOCKS`, the groups of ext4's sparse_super set
//! (1 and the powers of 3, 5 and 7) that the journal does not fill begin
//! with a backup copy of the superblock, one block, and their metadata
//! follows it (see [`crate::sparse`]; the copies themselves are
//! `crate::backup`'s).

use crate::error::{FormatError, Result};
use crate::group_desc::{GroupDesc, GD_BLOCK_UNINIT, GD_INODE_UNINIT};
use crate::inode::INODE_SIZE;
use crate::superblock::Superblock;

/// Geometry derived from a superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub block_size: u32,
    pub total_blocks: u64,
    pub blocks_per_group: u64,
    pub inodes_per_group: u64,
    pub group_count: u64,
    /// Blocks of one group's inode table.
    pub itable_blocks: u64,
    /// First block after superblock, descriptor table and group 0's part
    /// of the journal.
    pub reserved_end: u64,
    /// Groups after group 0 that the journal fills (see the module essay).
    pub journal_groups: u64,
    /// Sparse groups begin with a backup superblock.
    pub backup_superblocks: bool,
}

impl Geometry {
    /// Derives and checks the geometry of `sb`.
    pub fn new(sb: &Superblock) -> Result<Geometry> {
        let bs = u64::from(sb.block_size());
        let g = Geometry {
            block_size: sb.block_size(),
            total_blocks: sb.total_blocks,
            blocks_per_group: u64::from(sb.blocks_per_group),
            inodes_per_group: u64::from(sb.inodes_per_group),
            group_count: sb.group_count,
            itable_blocks: u64::from(sb.inodes_per_group) * INODE_SIZE as u64 / bs,
            reserved_end: sb.journal_start + sb.journal_blocks_in_group0(),
            journal_groups: u64::from(sb.journal_groups),
            backup_superblocks: sb.feature_incompat & crate::superblock::INCOMPAT_BACKUP_SUPERBLOCKS != 0,
        };
        if g.meta_start(0) + g.meta_blocks() > g.blocks_per_group.min(g.total_blocks) {
            return Err(FormatError::corrupt("superblock", 0, "group 0 cannot hold its metadata"));
        }
        let last = g.group_count - 1;
        if g.group_len(last) < g.meta_start(last) - g.group_start(last) + g.meta_blocks() + 1 {
            return Err(FormatError::corrupt("superblock", 0, "last group too small for its metadata"));
        }
        Ok(g)
    }

    /// Inodes per inode-table block.
    pub fn inodes_per_block(&self) -> u64 {
        u64::from(self.block_size) / INODE_SIZE as u64
    }

    /// First block of group `g`.
    pub fn group_start(&self, g: u64) -> u64 {
        g * self.blocks_per_group
    }

    /// Number of blocks in group `g` (the last one may be short).
    pub fn group_len(&self, g: u64) -> u64 {
        (self.total_blocks - self.group_start(g)).min(self.blocks_per_group)
    }

    /// Blocks of per-group metadata (2 bitmaps + inode table).
    pub fn meta_blocks(&self) -> u64 {
        2 + self.itable_blocks
    }

    /// First block of group `g`'s own metadata.
    pub fn meta_start(&self, g: u64) -> u64 {
        if g == 0 {
            self.reserved_end
        } else {
            self.group_start(g) + u64::from(self.has_backup_superblock(g))
        }
    }

    /// True if group `g` begins with a backup copy of the superblock.
    pub fn has_backup_superblock(&self, g: u64) -> bool {
        self.backup_superblocks
            && g < self.group_count
            && !self.is_journal_group(g)
            && crate::sparse::is_sparse_group(g)
    }

    /// The groups that hold a backup superblock, in increasing order.
    pub fn backup_groups(&self) -> impl Iterator<Item = u64> + '_ {
        crate::sparse::sparse_groups(self.group_count).filter(|&g| self.has_backup_superblock(g))
    }

    /// Block bitmap location.
    pub fn block_bitmap(&self, g: u64) -> u64 {
        self.meta_start(g)
    }

    /// Inode bitmap location.
    pub fn inode_bitmap(&self, g: u64) -> u64 {
        self.meta_start(g) + 1
    }

    /// First inode-table block.
    pub fn inode_table(&self, g: u64) -> u64 {
        self.meta_start(g) + 2
    }

    /// Number of blocks at the start of group `g` that are used when the
    /// group is fresh (fixed metadata): the "uninit" bitmap. All of a group
    /// the journal fills.
    pub fn initially_used(&self, g: u64) -> u64 {
        if self.is_journal_group(g) {
            return self.group_len(g);
        }
        self.meta_start(g) + self.meta_blocks() - self.group_start(g)
    }

    /// The descriptor of group `g` as it is before anything is allocated
    /// in it: both bitmaps uninitialised (`GD_*_UNINIT`: implied by this
    /// layout, see the `bitmap` module), every block past the group's fixed
    /// metadata and every inode free, no directory, no checksums (an
    /// uninitialised bitmap has none). mkfs writes it for every group but
    /// the first, a resize for every group it adds.
    pub fn unused_group_desc(&self, g: u64) -> GroupDesc {
        GroupDesc {
            block_bitmap: self.block_bitmap(g),
            inode_bitmap: self.inode_bitmap(g),
            inode_table: self.inode_table(g),
            free_blocks: (self.group_len(g) - self.initially_used(g)) as u32,
            free_inodes: self.inodes_per_group as u32,
            flags: GD_BLOCK_UNINIT | GD_INODE_UNINIT,
            ..Default::default()
        }
    }

    /// True if the journal fills group `g` past its metadata.
    pub fn is_journal_group(&self, g: u64) -> bool {
        g >= 1 && g <= self.journal_groups
    }

    /// Group that holds block `b`.
    pub fn group_of_block(&self, b: u64) -> u64 {
        b / self.blocks_per_group
    }

    /// Group of inode `ino` (which must be >= 1).
    pub fn group_of_ino(&self, ino: u64) -> u64 {
        (ino - 1) / self.inodes_per_group
    }

    /// Index of `ino` within its group.
    pub fn index_in_group(&self, ino: u64) -> u64 {
        (ino - 1) % self.inodes_per_group
    }

    /// Block holding inode `ino` and the byte offset inside it.
    pub fn inode_location(&self, ino: u64) -> (u64, usize) {
        let g = self.group_of_ino(ino);
        let idx = self.index_in_group(ino);
        let blk = self.inode_table(g) + idx / self.inodes_per_block();
        let off = (idx % self.inodes_per_block()) as usize * INODE_SIZE;
        (blk, off)
    }

    /// Total inodes.
    pub fn total_inodes(&self) -> u64 {
        self.group_count * self.inodes_per_group
    }

    /// True if `ino` is a valid inode number for this file system.
    pub fn valid_ino(&self, ino: u64) -> bool {
        ino >= 1 && ino <= self.total_inodes()
    }

    /// True if `[start, start+len)` lies in the data area (not fixed metadata,
    /// not past the end). Used to bounds-check every block pointer read from disk.
    pub fn valid_data_range(&self, start: u64, len: u64) -> bool {
        if len == 0 || start < self.reserved_end {
            return false;
        }
        let Some(end) = start.checked_add(len) else { return false };
        if end > self.total_blocks {
            return false;
        }
        // Must not overlap any group's fixed metadata, nor a group the
        // journal fills.
        let g0 = self.group_of_block(start);
        let g1 = self.group_of_block(end - 1);
        if self.journal_groups > 0 && g0 <= self.journal_groups && g1 >= 1 {
            return false;
        }
        for g in g0..=g1 {
            // A group's fixed blocks: its backup superblock, if any, then
            // its bitmaps and inode table.
            let ms = if g == 0 { self.meta_start(0) } else { self.group_start(g) };
            let me = self.meta_start(g) + self.meta_blocks();
            if start < me && end > ms {
                return false;
            }
        }
        true
    }
}
