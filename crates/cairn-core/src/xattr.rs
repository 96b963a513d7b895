//! Extended attributes, stored in one xattr block per inode.
//!
//! Format in `cairn_format::xattr`: a refcounted block, so identical blocks
//! can be shared by many inodes. This stage never shares (every block it
//! writes has refcount 1) but already honours the sharing rules when it meets
//! a shared block: a block with refcount > 1 is never changed in place — the
//! inode gets a private copy and the shared block's refcount drops (the
//! mbcache-style dedup cache comes with the shared-xattr stage).
//!
//! Locking: the caller holds the inode's lock and the transaction gate.

use crate::error::{FsError, Result};
use crate::inode::InodeState;
use crate::journal::Tx;
use crate::meta::Meta;
use crate::types::{XATTR_CREATE, XATTR_REPLACE};
use cairn_format::xattr::*;

fn load(meta: &Meta, blk: u64) -> Result<XattrBlock> {
    let seed = meta.seed;
    let buf = meta.bufs.get(blk, |b, d| XattrBlock::decode(seed, b, d).map(|_| ()).map_err(Into::into))?;
    let d = buf.data.read();
    Ok(XattrBlock::decode(seed, blk, &d)?)
}

fn entries(meta: &Meta, st: &InodeState) -> Result<Vec<XattrEntry>> {
    if st.d.xattr_block == 0 {
        return Ok(Vec::new());
    }
    Ok(load(meta, st.d.xattr_block)?.entries)
}

fn parse_name(name: &[u8]) -> Result<(u8, &[u8])> {
    if name.len() > 255 {
        return Err(FsError::Errno(libc::ERANGE));
    }
    split_name(name).ok_or(FsError::Errno(libc::EOPNOTSUPP))
}

/// Value of attribute `name`.
pub fn get(meta: &Meta, st: &InodeState, name: &[u8]) -> Result<Vec<u8>> {
    let (ns, n) = parse_name(name)?;
    entries(meta, st)?
        .into_iter()
        .find(|e| e.namespace == ns && e.name == n)
        .map(|e| e.value)
        .ok_or(FsError::Errno(libc::ENODATA))
}

/// All names, NUL-terminated.
pub fn list(meta: &Meta, st: &InodeState) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for e in entries(meta, st)? {
        out.extend_from_slice(&e.full_name());
        out.push(0);
    }
    Ok(out)
}

fn store(tx: &Tx<'_>, st: &mut InodeState, list: Vec<XattrEntry>) -> Result<()> {
    let old = st.d.xattr_block;
    let old_ref = if old != 0 { load(tx, old)?.refcount } else { 0 };
    if list.is_empty() {
        release(tx, st)?;
        return Ok(());
    }
    if XattrBlock::bytes_needed(&list) > tx.bs() {
        return Err(FsError::Errno(libc::ENOSPC));
    }
    let blk = if old != 0 && old_ref == 1 {
        old
    } else {
        if old != 0 {
            release(tx, st)?;
        }
        let goal = tx.geo.group_start(tx.geo.group_of_ino(st.ino));
        let b = tx.alloc.alloc_meta_block(tx, goal)?;
        st.d.blocks += 1;
        b
    };
    let buf = if blk == old { tx.bufs.get(blk, |_, _| Ok(()))? } else { tx.bufs.get_new(blk) };
    XattrBlock { refcount: 1, entries: list }.encode(tx.seed, blk, &mut buf.data.write());
    tx.dirty(&buf);
    st.d.xattr_block = blk;
    Ok(())
}

/// Sets attribute `name` (`flags`: XATTR_CREATE / XATTR_REPLACE).
pub fn set(tx: &Tx<'_>, st: &mut InodeState, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    let (ns, n) = parse_name(name)?;
    if value.len() > usize::from(u16::MAX) || value.len() + n.len() + XATTR_HEADER + 4 > tx.bs() {
        return Err(FsError::Errno(libc::E2BIG));
    }
    let mut list = entries(tx, st)?;
    let pos = list.iter().position(|e| e.namespace == ns && e.name == n);
    match (pos, flags & (XATTR_CREATE | XATTR_REPLACE)) {
        (Some(_), XATTR_CREATE) => return Err(FsError::Errno(libc::EEXIST)),
        (None, XATTR_REPLACE) => return Err(FsError::Errno(libc::ENODATA)),
        _ => {}
    }
    match pos {
        // Same value: nothing to change (the same-value shortcut).
        Some(i) if list[i].value == value => return Ok(()),
        Some(i) => list[i].value = value.to_vec(),
        None => {
            list.push(XattrEntry { namespace: ns, name: n.to_vec(), value: value.to_vec() });
            list.sort();
        }
    }
    store(tx, st, list)
}

/// Removes attribute `name`.
pub fn remove(tx: &Tx<'_>, st: &mut InodeState, name: &[u8]) -> Result<()> {
    let (ns, n) = parse_name(name)?;
    let mut list = entries(tx, st)?;
    let before = list.len();
    list.retain(|e| !(e.namespace == ns && e.name == n));
    if list.len() == before {
        return Err(FsError::Errno(libc::ENODATA));
    }
    store(tx, st, list)
}

/// Drops the inode's reference to its xattr block (freeing it at zero).
pub fn release(tx: &Tx<'_>, st: &mut InodeState) -> Result<()> {
    let blk = st.d.xattr_block;
    if blk == 0 {
        return Ok(());
    }
    let mut xb = load(tx, blk)?;
    if xb.refcount <= 1 {
        tx.free(blk, 1)?;
    } else {
        xb.refcount -= 1;
        let buf = tx.bufs.get(blk, |_, _| Ok(()))?;
        xb.encode(tx.seed, blk, &mut buf.data.write());
        tx.dirty(&buf);
    }
    st.d.xattr_block = 0;
    st.d.blocks = st.d.blocks.saturating_sub(1);
    Ok(())
}
