//! Worst-case log credits: how many buffers an operation may newly dirty.
//!
//! A credit is one metadata block in the running checkpoint. The figures
//! follow the structures' code, not measurements, and are upper bounds:
//! * inserting into a B+tree of `d` levels modifies the `d` nodes of its
//!   path, may split each (a new sibling per level and a new root), and each
//!   new node is an allocation (block bitmap and group descriptor):
//!   `4d + 3` (an empty tree: one node and its allocation, 3);
//! * removing modifies the path and may free every node on it: `3d + 1`;
//! * an allocation of one run, or an inode number: bitmap + descriptor, 2;
//!   freeing one extent may touch two groups (an extent merged across a
//!   group boundary): 4;
//! * an inode change: its inode-table block, 1.
//!
//! The superblock, which every commit rewrites, is outside the handles: the
//! manager keeps a margin for it (`tx::manager::MARGIN`). The depths the
//! figures take are read by the trees' own modules (`btree::levels`,
//! `extent_map::levels`, `dir::levels`).

/// One inode-table block.
pub const INODE: u64 = 1;
/// One allocation (or inode number): bitmap and group descriptor.
pub const ALLOC: u64 = 2;
/// Freeing one extent or one node.
pub const FREE: u64 = 4;
/// What an operation reserves before it knows its tree depths. Operations
/// state their real need with `Tx::require` once they hold their locks.
pub const DEFAULT: u64 = 24;

/// Insert into a tree of `levels` levels (0 = empty).
pub fn tree_insert(levels: u64) -> u64 {
    4 * levels + 3
}

/// Remove from a tree of `levels` levels.
pub fn tree_remove(levels: u64) -> u64 {
    3 * levels + 1
}

/// Mapping one new extent (allocation + insert, or the conversion of an
/// unwritten piece in the middle of an extent: remove + left, middle and
/// right inserts) in a map of `levels` levels.
pub fn map_extent(levels: u64) -> u64 {
    ALLOC + tree_remove(levels) + 3 * tree_insert(levels + 1)
}

/// Unmapping and freeing one extent, with the re-insert of a clipped piece
/// accounted once per step by the caller.
pub fn unmap_extent(levels: u64) -> u64 {
    tree_remove(levels) + FREE
}
