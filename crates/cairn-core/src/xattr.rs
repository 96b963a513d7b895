//! Extended attributes, stored in one xattr block per inode, shared by every
//! inode with the same set (seed 000).
//!
//! ## On disk
//! `cairn_format::xattr`: a block with a refcount (at most
//! `XATTR_REFCOUNT_MAX` = 1024, as ext4), sorted entries and a checksum. An
//! inode points at one block (`xattr_block`) and counts it in its blocks.
//!
//! ## Sharing
//! Setting an xattr computes the inode's new set; if a block with exactly
//! that set is on disk (found through the dedup cache, `mbcache`, then read
//! and compared in full), the inode takes a reference on it; else its own
//! block is changed in place if nobody shares it; else a new block is
//! written and cached. Setting a value an attribute already has changes
//! nothing (the same-value shortcut). A block at the refcount limit is not
//! offered; it is offered again when a reference goes.
//!
//! ## Invariants and locking
//! * A block with refcount > 1 is never changed in place.
//! * A block's refcount, its bytes and its cache entry change only under
//!   the block's lock (striped, [`XattrShare`]), inside the caller's
//!   transaction together with the inode's pointer; the lock is never held
//!   with another block's.
//! * A cache entry is alive only while its block is an xattr block with
//!   that content: a free or an in-place change removes (and marks dead) the
//!   entry under the block's lock, and a finder re-checks under that lock.
//! * The caller holds the inode's lock (shared for reads) and the
//!   transaction gate for changes.

use crate::error::{FsError, Result};
use crate::inode::InodeState;
use crate::journal::Tx;
use crate::mbcache::MbCache;
use crate::meta::Meta;
use crate::types::{XATTR_CREATE, XATTR_REPLACE};
use cairn_format::xattr::*;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

fn load(meta: &Meta, blk: u64) -> Result<XattrBlock> {
    let seed = meta.seed;
    let buf = meta.bufs.get(blk, |b, d| XattrBlock::decode(seed, b, d).map(|_| ()).map_err(Into::into))?;
    let d = buf.read();
    Ok(XattrBlock::decode(seed, blk, &d)?)
}

fn entries(meta: &Meta, st: &InodeState) -> Result<Vec<XattrEntry>> {
    if st.d.xattr_block == 0 {
        return Ok(Vec::new());
    }
    let xb = load(meta, st.d.xattr_block)?;
    // Reads insert too (blocks written before this mount). Safe without the
    // block lock: the caller holds this inode, whose reference pins the
    // block, and only this inode's holder could free or change it.
    let cache = &meta.xattrs.cache;
    if cache.enabled() {
        let key = XattrBlock::content_hash(&xb.entries);
        if cache.get(key, st.d.xattr_block).is_none() {
            cache.insert(key, st.d.xattr_block, xb.refcount < XATTR_REFCOUNT_MAX);
        }
    }
    Ok(xb.entries)
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

/// The sharing side of xattr blocks: the dedup cache and the block locks.
pub struct XattrShare {
    pub cache: Arc<MbCache>,
    locks: Vec<Mutex<()>>,
}

/// Stripes of the xattr-block lock.
const BLOCK_LOCKS: usize = 256;

impl XattrShare {
    pub fn new(mbcache: bool) -> XattrShare {
        XattrShare { cache: Arc::new(MbCache::new(mbcache)), locks: (0..BLOCK_LOCKS).map(|_| Mutex::new(())).collect() }
    }

    /// The lock of xattr block `blk`: its refcount, its bytes and its cache
    /// entry change only under it.
    fn lock(&self, blk: u64) -> MutexGuard<'_, ()> {
        self.locks[(blk as usize) % BLOCK_LOCKS].lock()
    }
}

fn write_block(tx: &Tx<'_>, blk: u64, xb: &XattrBlock, new: bool) -> Result<()> {
    let buf = if new { tx.bufs.get_new(tx, blk) } else { tx.bufs.get(blk, |_, _| Ok(()))? };
    tx.modify(&buf, 0..tx.bs(), |d| xb.encode(tx.seed, blk, d));
    Ok(())
}

/// Takes one more reference on a cached block holding exactly `list`, if
/// there is one below the refcount limit; returns it.
fn share_existing(tx: &Tx<'_>, key: u32, list: &[XattrEntry], old: u64) -> Result<Option<u64>> {
    let share = &tx.xattrs;
    let stats = &share.cache.stats;
    for cand in share.cache.find(key) {
        if cand.block == old {
            continue;
        }
        let _l = share.lock(cand.block);
        if cand.is_dead() {
            stats.false_matches.fetch_add(1, Relaxed);
            continue;
        }
        // Alive in the cache: still an xattr block with a reference (frees
        // and in-place changes remove the entry under this lock first).
        let mut xb = load(tx, cand.block)?;
        if xb.entries != list {
            stats.false_matches.fetch_add(1, Relaxed);
            continue;
        }
        if xb.refcount >= XATTR_REFCOUNT_MAX {
            cand.set_reusable(false);
            stats.refcount_limit.fetch_add(1, Relaxed);
            continue;
        }
        xb.refcount += 1;
        write_block(tx, cand.block, &xb, false)?;
        stats.refs_shared.fetch_add(1, Relaxed);
        if xb.refcount == 2 {
            stats.became_shared.fetch_add(1, Relaxed);
        }
        if xb.refcount >= XATTR_REFCOUNT_MAX {
            cand.set_reusable(false);
            stats.refcount_limit.fetch_add(1, Relaxed);
        }
        cand.touch();
        stats.hits.fetch_add(1, Relaxed);
        return Ok(Some(cand.block));
    }
    stats.misses.fetch_add(1, Relaxed);
    Ok(None)
}

/// Gives the inode the xattr set `list`: an identical block already on disk
/// (shared, found through the cache), its own block changed in place if
/// nobody shares it, or a new block. A failure (ENOSPC) leaves everything as
/// it was.
fn store(tx: &Tx<'_>, st: &mut InodeState, list: Vec<XattrEntry>) -> Result<()> {
    if list.is_empty() {
        return release(tx, st);
    }
    if XattrBlock::bytes_needed(&list) > tx.bs() {
        return Err(FsError::Errno(libc::ENOSPC));
    }
    let share = &tx.xattrs;
    let key = XattrBlock::content_hash(&list);
    let old = st.d.xattr_block;
    if share.cache.enabled() {
        if let Some(blk) = share_existing(tx, key, &list, old)? {
            release(tx, st)?;
            st.d.xattr_block = blk;
            st.d.blocks += 1;
            return Ok(());
        }
    }
    if old != 0 {
        let _l = share.lock(old);
        let xb = load(tx, old)?;
        if xb.refcount == 1 {
            // Ours alone: change it in place, out of the cache meanwhile.
            share.cache.remove(XattrBlock::content_hash(&xb.entries), old);
            write_block(tx, old, &XattrBlock { refcount: 1, entries: list }, false)?;
            share.cache.insert(key, old, true);
            return Ok(());
        }
    }
    // A new block first (the only step that can fail), then the old one's
    // reference goes.
    let goal = tx.geo.group_start(tx.geo.group_of_ino(st.ino));
    let blk = tx.alloc.alloc_meta_block(tx, goal, false)?;
    {
        let _l = share.lock(blk);
        write_block(tx, blk, &XattrBlock { refcount: 1, entries: list }, true)?;
        share.cache.insert(key, blk, true);
    }
    release(tx, st)?;
    st.d.xattr_block = blk;
    st.d.blocks += 1;
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
    let share = &tx.xattrs;
    {
        let _l = share.lock(blk);
        let mut xb = load(tx, blk)?;
        let key = XattrBlock::content_hash(&xb.entries);
        if xb.refcount <= 1 {
            share.cache.remove(key, blk);
            tx.free(blk, 1)?;
        } else {
            xb.refcount -= 1;
            write_block(tx, blk, &xb, false)?;
            let stats = &share.cache.stats;
            stats.refs_unshared.fetch_add(1, Relaxed);
            if xb.refcount == 1 {
                stats.became_private.fetch_add(1, Relaxed);
            }
            if xb.refcount == XATTR_REFCOUNT_MAX - 1 {
                if let Some(e) = share.cache.get(key, blk) {
                    e.set_reusable(true);
                }
            }
        }
    }
    st.d.xattr_block = 0;
    st.d.blocks = st.d.blocks.saturating_sub(1);
    Ok(())
}
