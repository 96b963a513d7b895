//! Extended attributes, stored in one xattr block per inode, shared by every
//! inode with the same set (seed 000); values too large for the block live
//! in value blocks that belong to it.
//!
//! ## On disk
//! `cairn_format::xattr`: a block with a refcount (at most
//! `XATTR_REFCOUNT_MAX` = 1024, as ext4), sorted entries and a checksum. An
//! inode points at one block (`xattr_block`) and counts in its blocks the
//! block's *footprint*: the block and its value blocks.
//!
//! ## Large values (up to 64 KiB, Linux's `XATTR_SIZE_MAX`)
//! On images with `INCOMPAT_XATTR_EXTERNAL` (every image mkfs makes now), a
//! value longer than a quarter of a block is *external*: its entry holds
//! (first block, length, crc32c) and the bytes live in a chain of value
//! blocks, each with a verified header naming its xattr block as owner. This
//! is ext4's `ea_inode` idea without the inode: a value has no refcount of
//! its own, it belongs to the xattr block holding its entry, so
//! * it is shared exactly when that block is shared, and freed with it
//!   (refcount reaching 0) or when its entry is replaced or removed, in the
//!   same transaction, through the allocator's normal free path;
//! * copying a shared block (an inode changing its set) copies the external
//!   values too, into blocks owned by the copy. This costs writes, which is
//!   why at most `XATTR_EXTERNAL_MAX` (16) entries of a block may be
//!   external; the cost is stated up front with `Tx::require`.
//!
//! Value blocks are metadata: allocated from the metadata pool, written
//! through the buffer cache inside the caller's transaction (journaled and
//! crash-safe like the xattr block), verified on every read (each block's
//! header and checksum, then the whole value's crc) before a byte is used.
//! The rule "external iff longer than `inline_max`" depends only on the
//! value and the block size, so identical sets are laid out and hashed
//! alike and can still be shared; on older images (no feature flag) every
//! value stays inline, as before (E2BIG when it cannot fit a block).
//!
//! ## Sharing
//! Setting an xattr computes the inode's new set; if a block with exactly
//! that set is on disk (found through the dedup cache, `mbcache`, then read
//! and compared in full — external values byte for byte), the inode takes a
//! reference on it; else its own block is changed in place if nobody shares
//! it; else a new block is written and cached. Setting a value an attribute
//! already has changes nothing (the same-value shortcut). A block at the
//! refcount limit is not offered; it is offered again when a reference goes.
//!
//! ## Errors
//! A value over 64 KiB is `E2BIG`; a set that does not fit one block (or
//! has too many external values) is `ENOSPC`, and so is a full disk: every
//! block is allocated before anything is freed or rewritten, and blocks a
//! failed set had taken are given back, so a failure changes nothing.
//!
//! ## Invariants and locking
//! * A block with refcount > 1 is never changed in place, nor are its value
//!   blocks, which are written once and never changed.
//! * A block's refcount, its bytes and its cache entry change only under
//!   the block's lock (striped, [`crate::mbcache::XattrShare`]), inside the caller's
//!   transaction together with the inode's pointer; the lock is never held
//!   with another block's.
//! * A cache entry is alive only while its block is an xattr block with
//!   that content: a free or an in-place change removes (and marks dead) the
//!   entry under the block's lock, and a finder re-checks under that lock.
//! * The caller holds the inode's lock (shared for reads) and the
//!   transaction gate for changes. A reader's inode pins its block and so
//!   the block's value blocks.

use crate::error::{FsError, Result};
use crate::inode::InodeState;
use crate::journal::credits;
use crate::meta::Meta;
use crate::tx::Tx;
use crate::types::{XATTR_CREATE, XATTR_REPLACE};
use cairn_format::xattr::*;
use cairn_format::FormatError;
use std::sync::atomic::Ordering::Relaxed;

/// Xattr block `blk`, verified in full when the buffer cache reads it;
/// a cached copy, which only `write_block` changes, is parsed without its
/// checksum (see `XattrBlock::decode_verified`).
fn load(meta: &Meta, blk: u64) -> Result<XattrBlock> {
    let seed = meta.seed();
    let buf = meta.bufs().get(blk, |b, d| XattrBlock::decode(seed, b, d).map(|_| ()).map_err(Into::into))?;
    let d = buf.read();
    Ok(XattrBlock::decode_verified(blk, &d)?)
}

/// Reads external value `x` of xattr block `owner`, verified; returns it
/// and its blocks.
fn read_value(meta: &Meta, owner: u64, x: &ExtValue) -> Result<(Vec<u8>, Vec<u64>)> {
    let seed = meta.seed();
    x.read(seed, owner, meta.bs(), |blk| -> Result<Vec<u8>> {
        if !meta.geo().valid_data_range(blk, 1) {
            return Err(FormatError::corrupt("xattr value", owner, format!("block {blk} outside the data area")).into());
        }
        let buf = meta.bufs().get(blk, |b, d| ValueBlock::decode(seed, b, d).map(|_| ()).map_err(Into::into))?;
        let d = buf.read();
        Ok(d.to_vec())
    })
}

/// Blocks an inode counts for a block holding `entries`: the block and its
/// value blocks.
fn footprint(meta: &Meta, entries: &[XattrEntry]) -> u64 {
    1 + XattrBlock::value_block_count(entries, meta.bs())
}

fn entries(meta: &Meta, st: &InodeState) -> Result<Vec<XattrEntry>> {
    if st.d.xattr_block == 0 {
        return Ok(Vec::new());
    }
    let xb = load(meta, st.d.xattr_block)?;
    // Reads insert too (blocks written before this mount). Safe without the
    // block lock: the caller holds this inode, whose reference pins the
    // block, and only this inode's holder could free or change it.
    let cache = &meta.xattrs().cache;
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
    let e = entries(meta, st)?
        .into_iter()
        .find(|e| e.namespace == ns && e.name == n)
        .ok_or(FsError::Errno(libc::ENODATA))?;
    match e.value {
        XattrValue::Inline(v) => Ok(v),
        XattrValue::External(x) => Ok(read_value(meta, st.d.xattr_block, &x)?.0),
    }
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

/// Writes block `blk` (`new`: freshly allocated, not read first, logged
/// whole) by `fill` in the running transaction: with [`write_refcount`],
/// the only places this module changes buffer bytes.
fn write_buf(tx: &Tx<'_>, blk: u64, new: bool, fill: impl FnOnce(&mut [u8])) -> Result<()> {
    let buf = if new { tx.meta().bufs().get_new(tx, blk) } else { tx.meta().bufs().get(blk, |_, _| Ok(()))? };
    tx.modify(&buf, 0..tx.meta().bs(), fill);
    Ok(())
}

fn write_block(tx: &Tx<'_>, blk: u64, xb: &XattrBlock, new: bool) -> Result<()> {
    write_buf(tx, blk, new, |d| xb.encode(tx.meta().seed(), blk, d))
}

/// Writes `refcount` into block `blk` (cached: just loaded) in place, the
/// field and the checksum, logged as the header's chunk: a reference taken
/// or dropped re-encodes no entry and compares no copy of the block.
fn write_refcount(tx: &Tx<'_>, blk: u64, refcount: u32) -> Result<()> {
    let buf = tx.meta().bufs().get(blk, |_, _| Ok(()))?;
    let (seed, bs) = (tx.meta().seed(), tx.meta().bs());
    tx.modify_mapped(&buf, |d| {
        let changed = XattrBlock::set_encoded_refcount(seed, d, refcount);
        ((), cairn_format::journal::range_chunks(bs, changed.start, changed.len()))
    });
    Ok(())
}

/// Frees `blocks` (any order), a run at a time.
fn free_blocks(tx: &Tx<'_>, mut blocks: Vec<u64>) -> Result<()> {
    blocks.sort_unstable();
    let mut i = 0;
    while i < blocks.len() {
        let mut n = 1;
        while i + n < blocks.len() && blocks[i + n] == blocks[i] + n as u64 {
            n += 1;
        }
        tx.free(blocks[i], n as u64)?;
        i += n;
    }
    Ok(())
}

/// Writes `value` as a new chain of value blocks owned by xattr block
/// `owner`, allocated near `goal`; adds the blocks to `taken` as they are
/// allocated (so a caller can give them back if a later step fails).
fn write_value(tx: &Tx<'_>, owner: u64, value: &[u8], goal: u64, taken: &mut Vec<u64>) -> Result<ExtValue> {
    let bs = tx.meta().bs();
    let from = taken.len();
    let mut next_goal = goal;
    for _ in 0..value_blocks(value.len(), bs) {
        let b = tx.meta().alloc().alloc_meta_block(tx, next_goal, false)?;
        taken.push(b);
        next_goal = b + 1;
    }
    let blocks = &taken[from..];
    for (i, chunk) in value.chunks(value_capacity(bs)).enumerate() {
        let h =
            ValueBlock { index: i as u16, used: chunk.len() as u32, owner, next: blocks.get(i + 1).map_or(0, |b| *b) };
        write_buf(tx, blocks[i], true, |d| h.encode(tx.meta().seed(), blocks[i], chunk, d))?;
    }
    Ok(ExtValue::of(tx.meta().seed(), blocks[0], value))
}

/// One entry of the set a change wants, and where an external value's
/// bytes come from.
struct Want {
    /// As it will be stored (an external value's `first` is filled in when
    /// it is written).
    entry: XattrEntry,
    src: Src,
}

enum Src {
    /// The value is inline: `entry` holds it.
    Inline,
    /// A new external value.
    Bytes(Vec<u8>),
    /// An external value already on disk, owned by this xattr block.
    Kept(u64),
}

impl Want {
    fn new(tx: &Tx<'_>, namespace: u8, name: &[u8], value: &[u8]) -> Want {
        if tx.meta().xattrs().external && value.len() > inline_max(tx.meta().bs()) {
            let value_ = XattrValue::External(ExtValue::of(tx.meta().seed(), 0, value));
            Want {
                entry: XattrEntry { namespace, name: name.to_vec(), value: value_ },
                src: Src::Bytes(value.to_vec()),
            }
        } else {
            Want { entry: XattrEntry::inline(namespace, name, value), src: Src::Inline }
        }
    }

    fn kept(entry: XattrEntry, owner: u64) -> Want {
        let src = if entry.value.external().is_some() { Src::Kept(owner) } else { Src::Inline };
        Want { entry, src }
    }

    /// The value's bytes (read and verified if it is kept external).
    fn bytes(&self, meta: &Meta) -> Result<Vec<u8>> {
        match (&self.src, &self.entry.value) {
            (Src::Bytes(v), _) | (Src::Inline, XattrValue::Inline(v)) => Ok(v.clone()),
            (Src::Kept(owner), XattrValue::External(x)) => Ok(read_value(meta, *owner, x)?.0),
            _ => unreachable!("a kept entry is external, an inline one inline"),
        }
    }

    /// Whether `e`, stored in xattr block `blk`, is this entry: same name,
    /// same value byte for byte (external values are read and compared).
    fn same_as(&self, meta: &Meta, blk: u64, e: &XattrEntry) -> Result<bool> {
        if (e.namespace, &e.name) != (self.entry.namespace, &self.entry.name) {
            return Ok(false);
        }
        match (&e.value, &self.entry.value) {
            (XattrValue::Inline(a), XattrValue::Inline(b)) => Ok(a == b),
            (XattrValue::External(a), XattrValue::External(b)) if (a.len, a.crc) == (b.len, b.crc) => {
                if matches!(self.src, Src::Kept(o) if o == blk) && a.first == b.first {
                    return Ok(true);
                }
                Ok(read_value(meta, blk, a)?.0 == self.bytes(meta)?)
            }
            _ => Ok(false),
        }
    }
}

fn entries_of(wants: &[Want]) -> Vec<XattrEntry> {
    wants.iter().map(|w| w.entry.clone()).collect()
}

/// Whether block `blk` (decoded as `xb`) holds exactly the set `wants`.
fn same_set(meta: &Meta, blk: u64, xb: &XattrBlock, wants: &[Want]) -> Result<bool> {
    if xb.entries.len() != wants.len() {
        return Ok(false);
    }
    for (e, w) in xb.entries.iter().zip(wants) {
        if !w.same_as(meta, blk, e)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Takes one more reference on a cached block holding exactly `wants`, if
/// there is one below the refcount limit; returns it.
fn share_existing(tx: &Tx<'_>, key: u32, wants: &[Want], old: u64) -> Result<Option<u64>> {
    let share = &tx.meta().xattrs();
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
        let mut xb = load(tx.meta(), cand.block)?;
        if !same_set(tx.meta(), cand.block, &xb, wants)? {
            stats.false_matches.fetch_add(1, Relaxed);
            continue;
        }
        if xb.refcount >= XATTR_REFCOUNT_MAX {
            cand.set_reusable(false);
            stats.refcount_limit.fetch_add(1, Relaxed);
            continue;
        }
        xb.refcount += 1;
        write_refcount(tx, cand.block, xb.refcount)?;
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

/// Bitmap and descriptor blocks of allocating or freeing `blocks` blocks:
/// two per group touched, and there are only so many groups.
fn bitmap_credits(meta: &Meta, blocks: u64) -> u64 {
    credits::ALLOC * blocks.min(meta.geo().group_count)
}

/// Worst-case credits of giving an inode whose block is `old` the set
/// `wants`, whichever way `store` goes: a new (or shared) block and every
/// external value written (copies included), and the old block rewritten
/// or freed with all its values.
fn store_credits(meta: &Meta, wants: &[Want], old: Option<&XattrBlock>) -> u64 {
    let bs = meta.bs();
    let values: u64 =
        wants.iter().filter_map(|w| w.entry.value.external()).map(|x| value_blocks(x.len as usize, bs) as u64).sum();
    let (rewrite, freed) = old.map_or((0, 0), |xb| (1, footprint(meta, &xb.entries)));
    1 + values + rewrite + bitmap_credits(meta, 1 + values + freed) + credits::INODE
}

/// Credits of dropping the inode's reference to its block ([`release`]).
pub fn release_credits(meta: &Meta, st: &InodeState) -> Result<u64> {
    if st.d.xattr_block == 0 {
        return Ok(0);
    }
    let xb = load(meta, st.d.xattr_block)?;
    Ok(1 + bitmap_credits(meta, footprint(meta, &xb.entries)) + credits::INODE)
}

/// Gives the inode the xattr set `wants` (sorted): an identical block
/// already on disk (shared, found through the cache), its own block changed
/// in place if nobody shares it, or a new block. A failure (ENOSPC) leaves
/// everything as it was.
fn store(tx: &Tx<'_>, st: &mut InodeState, mut wants: Vec<Want>) -> Result<()> {
    if wants.is_empty() {
        tx.require(tx.used() + release_credits(tx.meta(), st)?)?;
        return release(tx, st);
    }
    let list = entries_of(&wants);
    if XattrBlock::bytes_needed(&list) > tx.meta().bs() || XattrBlock::externals(&list).count() > XATTR_EXTERNAL_MAX {
        return Err(FsError::Errno(libc::ENOSPC));
    }
    let old = st.d.xattr_block;
    let old_xb = if old != 0 { Some(load(tx.meta(), old)?) } else { None };
    tx.require(tx.used() + store_credits(tx.meta(), &wants, old_xb.as_ref()))?;
    let share = &tx.meta().xattrs();
    let key = XattrBlock::content_hash(&list);
    let fp = footprint(tx.meta(), &list);
    if share.cache.enabled() {
        if let Some(blk) = share_existing(tx, key, &wants, old)? {
            release(tx, st)?;
            st.d.xattr_block = blk;
            st.d.blocks += fp;
            return Ok(());
        }
    }
    if old != 0 {
        let _l = share.lock(old);
        let xb = load(tx.meta(), old)?;
        if xb.refcount == 1 {
            // Ours alone: change it in place, out of the cache meanwhile.
            // New values first (the only step that can fail), then the
            // values no entry keeps are freed.
            let mut dropped = Vec::new();
            for x in XattrBlock::externals(&xb.entries) {
                let kept = wants.iter().any(|w| matches!(w.src, Src::Kept(_)) && w.entry.value.external() == Some(x));
                if !kept {
                    dropped.extend(read_value(tx.meta(), old, x)?.1);
                }
            }
            let list = write_values(tx, old, &mut wants, false)?;
            free_blocks(tx, dropped)?;
            share.cache.remove(XattrBlock::content_hash(&xb.entries), old);
            write_block(tx, old, &XattrBlock { refcount: 1, entries: list }, false)?;
            share.cache.insert(key, old, true);
            st.d.blocks = st.d.blocks.saturating_sub(footprint(tx.meta(), &xb.entries)) + fp;
            return Ok(());
        }
    }
    // A new block and its values first (the only steps that can fail), then
    // the old block's reference goes.
    let goal = tx.meta().geo().group_start(tx.meta().geo().group_of_ino(st.ino));
    let blk = tx.meta().alloc().alloc_meta_block(tx, goal, false)?;
    let list = match write_values(tx, blk, &mut wants, true) {
        Ok(list) => list,
        Err(e) => {
            free_blocks(tx, vec![blk])?;
            return Err(e);
        }
    };
    {
        let _l = share.lock(blk);
        write_block(tx, blk, &XattrBlock { refcount: 1, entries: list }, true)?;
        share.cache.insert(key, blk, true);
    }
    release(tx, st)?;
    st.d.xattr_block = blk;
    st.d.blocks += fp;
    Ok(())
}

/// Writes the external values of `wants` that block `owner` does not hold
/// yet: new ones, and (`copy`) kept ones of another block. Returns the
/// entries to store. On failure every block it took is freed again.
fn write_values(tx: &Tx<'_>, owner: u64, wants: &mut [Want], copy: bool) -> Result<Vec<XattrEntry>> {
    let mut taken = Vec::new();
    let r = (|| -> Result<()> {
        for w in wants.iter_mut() {
            let bytes = match &w.src {
                Src::Bytes(v) => v.clone(),
                Src::Kept(_) if copy => w.bytes(tx.meta())?,
                _ => continue,
            };
            let x = write_value(tx, owner, &bytes, owner + 1, &mut taken)?;
            w.entry.value = XattrValue::External(x);
        }
        Ok(())
    })();
    if let Err(e) = r {
        free_blocks(tx, taken)?;
        return Err(e);
    }
    Ok(entries_of(wants))
}

/// The inode's current set, as wants that keep every value where it is.
fn current(tx: &Tx<'_>, st: &InodeState) -> Result<Vec<Want>> {
    let owner = st.d.xattr_block;
    Ok(entries(tx.meta(), st)?.into_iter().map(|e| Want::kept(e, owner)).collect())
}

/// Sets attribute `name` (`flags`: XATTR_CREATE / XATTR_REPLACE).
pub fn set(tx: &Tx<'_>, st: &mut InodeState, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    let (ns, n) = parse_name(name)?;
    let too_big = if tx.meta().xattrs().external {
        value.len() > XATTR_SIZE_MAX
    } else {
        value.len() > usize::from(u16::MAX) || value.len() + n.len() + XATTR_HEADER + 4 > tx.meta().bs()
    };
    if too_big {
        return Err(FsError::Errno(libc::E2BIG));
    }
    let mut wants = current(tx, st)?;
    let pos = wants.iter().position(|w| w.entry.namespace == ns && w.entry.name == n);
    match (pos, flags & (XATTR_CREATE | XATTR_REPLACE)) {
        (Some(_), XATTR_CREATE) => return Err(FsError::Errno(libc::EEXIST)),
        (None, XATTR_REPLACE) => return Err(FsError::Errno(libc::ENODATA)),
        _ => {}
    }
    let new = Want::new(tx, ns, n, value);
    match pos {
        // Same value: nothing to change (the same-value shortcut).
        Some(i) if new.same_as(tx.meta(), st.d.xattr_block, &wants[i].entry)? => return Ok(()),
        Some(i) => wants[i] = new,
        None => {
            wants.push(new);
            wants.sort_by(|a, b| (a.entry.namespace, &a.entry.name).cmp(&(b.entry.namespace, &b.entry.name)));
        }
    }
    store(tx, st, wants)
}

/// Removes attribute `name`.
pub fn remove(tx: &Tx<'_>, st: &mut InodeState, name: &[u8]) -> Result<()> {
    let (ns, n) = parse_name(name)?;
    let mut wants = current(tx, st)?;
    let before = wants.len();
    wants.retain(|w| !(w.entry.namespace == ns && w.entry.name == n));
    if wants.len() == before {
        return Err(FsError::Errno(libc::ENODATA));
    }
    store(tx, st, wants)
}

/// Drops the inode's reference to its xattr block (freeing it and its
/// value blocks at zero).
pub fn release(tx: &Tx<'_>, st: &mut InodeState) -> Result<()> {
    let blk = st.d.xattr_block;
    if blk == 0 {
        return Ok(());
    }
    let share = &tx.meta().xattrs();
    let fp;
    {
        let _l = share.lock(blk);
        let mut xb = load(tx.meta(), blk)?;
        fp = footprint(tx.meta(), &xb.entries);
        let key = XattrBlock::content_hash(&xb.entries);
        if xb.refcount <= 1 {
            // Read every chain before freeing anything: a damaged one fails
            // the release with nothing changed.
            let mut blocks = vec![blk];
            for x in XattrBlock::externals(&xb.entries) {
                blocks.extend(read_value(tx.meta(), blk, x)?.1);
            }
            share.cache.remove(key, blk);
            free_blocks(tx, blocks)?;
        } else {
            xb.refcount -= 1;
            write_refcount(tx, blk, xb.refcount)?;
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
    st.d.blocks = st.d.blocks.saturating_sub(fp);
    Ok(())
}
