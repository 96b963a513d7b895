//! A file's extent map: logical block -> physical block runs.
//!
//! Up to [`INLINE_EXTENTS`] extents live in the inode itself (most files
//! need one); beyond that the map moves into a B+tree keyed by logical block
//! whose root the inode holds (it moves back inline when the tree empties).
//! Extents never overlap; adjacent extents that continue each other on disk
//! are merged on insert.
//!
//! Locking: the caller holds the inode's lock exclusively for changes, shared
//! for lookups, and the transaction gate for changes.

use crate::btree::Tree;
use crate::error::Result;
use crate::inode::InodeState;
use crate::meta::Meta;
use crate::tx::Tx;
use cairn_format::btree::KIND_EXTENTS;
use cairn_format::extent::{Extent, MAX_EXTENT_LEN};
use cairn_format::inode::{DataArea, INLINE_EXTENTS};
use cairn_format::FormatError;

/// What a logical block maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Not allocated, for `len` blocks (u64::MAX - lblk if no extent follows).
    Hole { len: u64 },
    /// Allocated: physical block of the asked logical block, blocks left in the extent.
    Mapped { pblk: u64, len: u64, unwritten: bool },
}

fn tree<'a>(meta: &'a Meta, st: &InodeState) -> Tree<'a> {
    let goal = meta.geo().group_start(meta.geo().group_of_ino(st.ino));
    Tree::new(meta, KIND_EXTENTS, st.ino, goal)
}

fn check(meta: &Meta, ino: u64, e: &Extent) -> Result<Extent> {
    if e.len == 0 || !meta.geo().valid_data_range(e.pblk, u64::from(e.len)) {
        return Err(FormatError::corrupt("extent", ino, format!("{e:?} out of range")).into());
    }
    Ok(*e)
}

/// Maps logical block `lblk`.
pub fn lookup(meta: &Meta, st: &InodeState, lblk: u64) -> Result<Mapping> {
    let hole_to = |next: Option<u64>| Mapping::Hole { len: next.map_or(u64::MAX - lblk, |n| n - lblk) };
    match &st.d.data {
        DataArea::Extents(list) => {
            for e in list {
                if e.lblk <= lblk && lblk < e.lend() {
                    return Ok(Mapping::Mapped {
                        pblk: e.pblk + (lblk - e.lblk),
                        len: e.lend() - lblk,
                        unwritten: e.unwritten,
                    });
                }
                if e.lblk > lblk {
                    return Ok(hole_to(Some(e.lblk)));
                }
            }
            Ok(hole_to(None))
        }
        DataArea::Tree(root) => {
            let t = tree(meta, st);
            if let Some((k, v)) = t.floor(*root, lblk)? {
                let e = check(meta, st.ino, &Extent::decode_value(k, &v))?;
                if lblk < e.lend() {
                    return Ok(Mapping::Mapped {
                        pblk: e.pblk + (lblk - e.lblk),
                        len: e.lend() - lblk,
                        unwritten: e.unwritten,
                    });
                }
            }
            let mut next = None;
            t.scan(*root, lblk + 1, &mut |k, _| {
                next = Some(k);
                false
            })?;
            Ok(hole_to(next))
        }
        DataArea::Inline(_) => Ok(hole_to(None)),
    }
}

/// Every extent overlapping `[start, end)`, unclipped, in order.
pub fn overlapping(meta: &Meta, st: &InodeState, start: u64, end: u64) -> Result<Vec<Extent>> {
    match &st.d.data {
        DataArea::Extents(list) => Ok(list.iter().filter(|e| e.lblk < end && e.lend() > start).copied().collect()),
        DataArea::Tree(root) => {
            let t = tree(meta, st);
            let mut out = Vec::new();
            if let Some((k, v)) = t.floor(*root, start)? {
                let e = check(meta, st.ino, &Extent::decode_value(k, &v))?;
                if e.lend() > start && k < start {
                    out.push(e);
                }
            }
            let mut err = None;
            t.scan(*root, start, &mut |k, v| {
                if k >= end {
                    return false;
                }
                match check(meta, st.ino, &Extent::decode_value(k, v)) {
                    Ok(e) => out.push(e),
                    Err(e) => err = Some(e),
                }
                err.is_none()
            })?;
            match err {
                Some(e) => Err(e),
                None => Ok(out),
            }
        }
        DataArea::Inline(_) => Ok(Vec::new()),
    }
}

/// Where a step that frees at most `k` extents of `[start, end)` should
/// begin so that it takes the last ones: `None` when `k` or fewer overlap
/// the range (free it all), else the first logical block of the `k`-th
/// extent from the end. Walks backwards from `end`, so a step reads
/// O(k log n) of a map however large.
pub fn tail_cut(meta: &Meta, st: &InodeState, start: u64, end: u64, k: usize) -> Result<Option<u64>> {
    let k = k.max(1);
    match &st.d.data {
        DataArea::Extents(list) => {
            let over: Vec<&Extent> = list.iter().filter(|e| e.lblk < end && e.lend() > start).collect();
            Ok((over.len() > k).then(|| over[over.len() - k].lblk.max(start)))
        }
        DataArea::Tree(root) => {
            let t = tree(meta, st);
            let mut key = end.saturating_sub(1);
            let mut seen = 0;
            while let Some((kk, v)) = t.floor(*root, key)? {
                let e = check(meta, st.ino, &Extent::decode_value(kk, &v))?;
                if e.lend() <= start {
                    return Ok(None);
                }
                seen += 1;
                if seen == k {
                    if kk <= start {
                        return Ok(None);
                    }
                    // More extents below? Only then is a cut useful.
                    return Ok(t.floor(*root, kk - 1)?.map(|_| kk));
                }
                if kk == 0 {
                    break;
                }
                key = kk - 1;
            }
            Ok(None)
        }
        DataArea::Inline(_) => Ok(None),
    }
}

/// Moves the inline `list` into a new tree. On failure the inode gets
/// `before` back (its map before this change), so that a later store
/// cannot lose the file's map.
fn to_tree(tx: &Tx<'_>, st: &mut InodeState, list: Vec<Extent>, before: Vec<Extent>) -> Result<()> {
    let mut root = 0;
    let mut t = tree(tx.meta(), st);
    for e in &list {
        if let Err(err) = t.insert(tx, &mut root, e.lblk, &e.value_bytes()) {
            st.d.data = DataArea::Extents(before);
            return Err(err);
        }
    }
    let delta = t.nodes_delta;
    st.d.blocks = st.d.blocks.saturating_add_signed(delta);
    st.d.data = DataArea::Tree(root);
    Ok(())
}

/// Unmaps `[start, end)` and returns the removed pieces (clipped); the
/// caller frees or reuses their blocks.
pub fn remove(tx: &Tx<'_>, st: &mut InodeState, start: u64, end: u64) -> Result<Vec<Extent>> {
    let over = overlapping(tx.meta(), st, start, end)?;
    if over.is_empty() {
        return Ok(over);
    }
    let mut removed = Vec::new();
    let mut keep = Vec::new();
    for e in &over {
        let s = e.lblk.max(start);
        let t = e.lend().min(end);
        removed.push(Extent { lblk: s, pblk: e.pblk + (s - e.lblk), len: (t - s) as u32, unwritten: e.unwritten });
        if e.lblk < start {
            keep.push(Extent { len: (start - e.lblk) as u32, ..*e });
        }
        if e.lend() > end {
            keep.push(Extent {
                lblk: end,
                pblk: e.pblk + (end - e.lblk),
                len: (e.lend() - end) as u32,
                unwritten: e.unwritten,
            });
        }
    }
    match &mut st.d.data {
        DataArea::Extents(list) => {
            let before = list.clone();
            list.retain(|e| !(e.lblk < end && e.lend() > start));
            list.extend(keep);
            list.sort_by_key(|e| e.lblk);
            if list.len() > INLINE_EXTENTS {
                let l = std::mem::take(list);
                to_tree(tx, st, l, before)?;
            }
        }
        DataArea::Tree(root) => {
            let mut r = *root;
            let mut t = tree(tx.meta(), st);
            // The one step that may need a new node comes first: the tail of
            // an extent split in two, under a key no extent has yet (a tree
            // insert is all or nothing). If it fails, nothing has changed;
            // after it, only shortenings in place and removals follow, which
            // need no space. (Removing first lost the tail when its insert
            // then found the file system full.)
            let res = (|| -> Result<()> {
                for k in keep.iter().filter(|k| !over.iter().any(|o| o.lblk == k.lblk)) {
                    t.insert(tx, &mut r, k.lblk, &k.value_bytes())?;
                }
                for e in &over {
                    match keep.iter().find(|k| k.lblk == e.lblk) {
                        Some(k) => t.insert(tx, &mut r, k.lblk, &k.value_bytes())?,
                        None => {
                            t.remove(tx, &mut r, e.lblk)?;
                        }
                    }
                }
                Ok(())
            })();
            // Whatever happened, the inode names the tree as it now is.
            let delta = t.nodes_delta;
            st.d.blocks = st.d.blocks.saturating_add_signed(delta);
            st.d.data = if r == 0 { DataArea::Extents(Vec::new()) } else { DataArea::Tree(r) };
            res?;
        }
        DataArea::Inline(_) => {}
    }
    Ok(removed)
}

/// Maps `e` (its logical range must be unmapped), merging with the extent
/// before it when they continue each other.
pub fn insert(tx: &Tx<'_>, st: &mut InodeState, e: Extent) -> Result<()> {
    let mergeable = |l: &Extent| {
        l.lend() == e.lblk
            && l.pblk + u64::from(l.len) == e.pblk
            && l.unwritten == e.unwritten
            && l.len + e.len <= MAX_EXTENT_LEN
    };
    match &mut st.d.data {
        DataArea::Extents(list) => {
            if let Some(l) = list.iter_mut().find(|l| mergeable(l)) {
                l.len += e.len;
                return Ok(());
            }
            let before = list.clone();
            list.push(e);
            list.sort_by_key(|x| x.lblk);
            if list.len() > INLINE_EXTENTS {
                let l = std::mem::take(list);
                to_tree(tx, st, l, before)?;
            }
            Ok(())
        }
        DataArea::Tree(root) => {
            let mut r = *root;
            let mut t = tree(tx.meta(), st);
            let left = if e.lblk > 0 { t.floor(r, e.lblk - 1)? } else { None };
            let merged = match left {
                Some((k, v)) => {
                    let l = Extent::decode_value(k, &v);
                    if mergeable(&l) {
                        t.insert(tx, &mut r, l.lblk, &Extent { len: l.len + e.len, ..l }.value_bytes())?;
                        true
                    } else {
                        false
                    }
                }
                None => false,
            };
            if !merged {
                // All or nothing: on ENOSPC the tree is as it was.
                t.insert(tx, &mut r, e.lblk, &e.value_bytes())?;
            }
            let delta = t.nodes_delta;
            st.d.blocks = st.d.blocks.saturating_add_signed(delta);
            st.d.data = DataArea::Tree(r);
            Ok(())
        }
        DataArea::Inline(_) => Err(FormatError::corrupt("inode", st.ino, "extent insert into inline data").into()),
    }
}

/// Levels of a file's extent tree; inline maps count as one level (an
/// insert may move them into a new tree).
pub fn levels(meta: &Meta, st: &InodeState) -> Result<u64> {
    match st.d.data {
        DataArea::Tree(root) => crate::btree::levels(meta, root, KIND_EXTENTS, st.ino),
        _ => Ok(1),
    }
}
