//! Directories: a B+tree of entries keyed by seeded name hash.
//!
//! Format in `cairn_format::dirent`. Lookup hashes the name and scans the
//! (almost always single) key run of that hash, so it is O(log n) in the
//! directory size. `.` and `..` are not stored: `..` is the inode's `parent`
//! field. An empty directory owns no blocks (root 0).
//!
//! readdir cookies are `key + 1`: a key never changes while its entry exists,
//! so offsets stay valid across concurrent creates and unlinks (entries added
//! behind the cursor are simply not returned, as POSIX allows).
//!
//! Locking: the caller holds the directory's inode lock (shared for lookup and
//! listing, exclusive for changes) and the transaction gate.

use crate::btree::Tree;
use crate::error::{FsError, Result};
use crate::inode::InodeState;
use crate::meta::Meta;
use crate::tx::Tx;
use cairn_format::btree::KIND_DIRENTS;
use cairn_format::dirent::*;
use cairn_format::inode::DataArea;
use cairn_format::FormatError;

fn root_of(dir: &InodeState) -> Result<u64> {
    match dir.d.data {
        DataArea::Tree(r) => Ok(r),
        _ => Err(FormatError::corrupt("inode", dir.ino, "directory without a tree").into()),
    }
}

fn tree<'a>(meta: &'a Meta, dir: &InodeState) -> Tree<'a> {
    let goal = meta.geo().group_start(meta.geo().group_of_ino(dir.ino));
    Tree::new(meta, KIND_DIRENTS, dir.ino, goal)
}

/// Finds `name`: its key and entry.
pub fn lookup(meta: &Meta, dir: &InodeState, name: &[u8]) -> Result<Option<(u64, Dirent)>> {
    let h = name_hash(&meta.hash_seed(), name);
    let end = hash_key_end(h);
    let mut found = None;
    let mut bad = None;
    tree(meta, dir).scan(root_of(dir)?, hash_key_base(h), &mut |k, v| {
        if k >= end {
            return false;
        }
        match Dirent::decode(dir.ino, v) {
            Ok(e) if e.name == name => {
                found = Some((k, e));
                false
            }
            Ok(_) => true,
            Err(e) => {
                bad = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = bad {
        return Err(e.into());
    }
    Ok(found)
}

/// Adds an entry (the name must not exist). Updates the directory's root,
/// entry count and block count in `dir.d`; the caller stores the inode.
pub fn add(tx: &Tx<'_>, dir: &mut InodeState, name: &[u8], ino: u64, dtype: u8) -> Result<()> {
    dir.entry_changes = dir.entry_changes.wrapping_add(1);
    let h = name_hash(&tx.meta().hash_seed(), name);
    let (base, end) = (hash_key_base(h), hash_key_end(h));
    let mut root = root_of(dir)?;
    let mut t = tree(tx.meta(), dir);
    let value = Dirent { ino, dtype, name: name.to_vec() }.encode();
    // The hash's own key, nearly always free (one descent); else the first
    // free key in this hash's run.
    match t.insert_new(tx, &mut root, base, &value) {
        Err(FsError::Errno(libc::EEXIST)) => {
            let mut key = base;
            t.scan(root, base, &mut |k, _| {
                if k >= end || k != key {
                    return false;
                }
                key += 1;
                true
            })?;
            if key >= end {
                return Err(FsError::Errno(libc::ENOSPC));
            }
            t.insert(tx, &mut root, key, &value)?;
        }
        r => r?,
    }
    let delta = t.nodes_delta;
    dir.d.data = DataArea::Tree(root);
    dir.d.entries += 1;
    dir.d.blocks = dir.d.blocks.saturating_add_signed(delta);
    Ok(())
}

/// Removes the entry at `key`.
pub fn remove(tx: &Tx<'_>, dir: &mut InodeState, key: u64) -> Result<()> {
    dir.entry_changes = dir.entry_changes.wrapping_add(1);
    let mut root = root_of(dir)?;
    let mut t = tree(tx.meta(), dir);
    if t.remove(tx, &mut root, key)?.is_none() {
        return Err(FormatError::corrupt("directory", dir.ino, "entry vanished during removal").into());
    }
    let delta = t.nodes_delta;
    dir.d.data = DataArea::Tree(root);
    dir.d.entries = dir.d.entries.saturating_sub(1);
    dir.d.blocks = dir.d.blocks.saturating_add_signed(delta);
    Ok(())
}

/// Replaces the inode an entry at `key` points to (rename over an existing name).
pub fn retarget(tx: &Tx<'_>, dir: &mut InodeState, key: u64, name: &[u8], ino: u64, dtype: u8) -> Result<()> {
    dir.entry_changes = dir.entry_changes.wrapping_add(1);
    let mut root = root_of(dir)?;
    let mut t = tree(tx.meta(), dir);
    t.insert(tx, &mut root, key, &Dirent { ino, dtype, name: name.to_vec() }.encode())?;
    let delta = t.nodes_delta;
    dir.d.data = DataArea::Tree(root);
    dir.d.blocks = dir.d.blocks.saturating_add_signed(delta);
    Ok(())
}

/// Lists entries with key `>= from` until `f` returns false.
pub fn list(meta: &Meta, dir: &InodeState, from: u64, f: &mut dyn FnMut(u64, Dirent) -> bool) -> Result<()> {
    let mut bad = None;
    tree(meta, dir).scan(root_of(dir)?, from, &mut |k, v| match Dirent::decode(dir.ino, v) {
        Ok(e) => f(k, e),
        Err(e) => {
            bad = Some(e);
            false
        }
    })?;
    match bad {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Levels of a directory's entry tree.
pub fn levels(meta: &Meta, st: &InodeState) -> Result<u64> {
    match st.d.data {
        DataArea::Tree(root) => crate::btree::levels(meta, root, KIND_DIRENTS, st.ino),
        _ => Ok(0),
    }
}
