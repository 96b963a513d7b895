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
//! manager keeps a margin for it (`manager::MARGIN`).

use crate::error::Result;
use crate::inode::InodeState;
use crate::meta::Meta;
use cairn_format::inode::DataArea;

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

/// Levels of the tree rooted at `root` (0 = empty): the root's level + 1.
pub fn tree_levels(meta: &Meta, root: u64, kind: u8, owner: u64) -> Result<u64> {
    if root == 0 {
        return Ok(0);
    }
    let buf = meta.read_node(root, kind, owner)?;
    let level = buf.read()[5];
    Ok(u64::from(level) + 1)
}

/// Levels of a file's extent tree; inline maps count as one level (an
/// insert may move them into a new tree).
pub fn extent_levels(meta: &Meta, st: &InodeState) -> Result<u64> {
    match st.d.data {
        DataArea::Tree(root) => tree_levels(meta, root, cairn_format::btree::KIND_EXTENTS, st.ino),
        _ => Ok(1),
    }
}

/// Levels of a directory's entry tree.
pub fn dir_levels(meta: &Meta, st: &InodeState) -> Result<u64> {
    match st.d.data {
        DataArea::Tree(root) => tree_levels(meta, root, cairn_format::btree::KIND_DIRENTS, st.ino),
        _ => Ok(0),
    }
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
