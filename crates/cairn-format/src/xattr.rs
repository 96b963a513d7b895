//! Extended-attribute blocks: one block per inode, refcounted so that
//! identical blocks can be shared between inodes (the ext4/mbcache design),
//! and the *value blocks* that hold values too large to keep in it.
//!
//! ```text
//! header (32 bytes)
//!  0  4  magic "CXA1"      4 4 refcount (inodes pointing here, >= 1)
//!  8  4  hash (content hash of the entries; 0 = never share)
//! 12  2  nentries          14 2 reserved
//! 16  8  blocknr (this block)
//! 24  4  reserved          28 4 crc32c(seed, whole block with this field zero)
//! entries from byte 32, sorted by (namespace, name), each 4-byte aligned:
//!    namespace u8 | name_len u8 | value_len u16 | name | value | pad
//! ```
//! Namespaces: 1 `user.`, 2 `trusted.`, 3 `security.`, 4 `system.`; the name is
//! stored without its prefix.
//!
//! ## External values (feature `INCOMPAT_XATTR_EXTERNAL`)
//! A value longer than [`inline_max`] (a quarter of a block) is stored
//! *external*: the entry's namespace byte has bit 7 ([`NS_EXTERNAL`]) set and
//! its value field is a 16-byte descriptor ([`ExtValue`]):
//!
//! ```text
//!  0 8 first value block   8 4 length in bytes (1..=65536)
//! 12 4 crc32c(seed, value bytes)
//! ```
//! The value lives in a chain of [`value_blocks`] metadata blocks, each with
//! a 40-byte header:
//!
//! ```text
//!  0 4 magic "CXV1"        4 2 index in the chain (0-based)   6 2 reserved
//!  8 4 used (value bytes in this block)   12 4 crc32c(seed, block, this field 0)
//! 16 8 blocknr (this block)
//! 24 8 owner (the xattr block whose entry holds the value)
//! 32 8 next (the chain's next block; 0 in the last one)
//! 40 .. value bytes, then zeros
//! ```
//! A value block belongs to exactly one xattr block (its `owner`) and lives
//! and dies with it: shared with it when the block is shared, copied when the
//! block is copied, freed when the block is freed or the entry goes. The
//! descriptor is covered by the xattr block's checksum, every value block by
//! its own, and the whole value by the descriptor's crc; [`ExtValue::read`]
//! checks all three, plus owner, index, lengths and chain length, before it
//! returns a byte. The content hash covers an external entry's
//! (length, crc), so identical sets hash alike without reading their values;
//! the engine still compares the bytes before it shares a block.
//!
//! At most [`XATTR_EXTERNAL_MAX`] entries of one block are external: it
//! bounds the work (and journal room) of copying or freeing a block.

use crate::checksum::{crc, crc_skipping};
use crate::codec::*;
use crate::error::{FormatError, Result};

/// Magic of an xattr block.
pub const XATTR_MAGIC: u32 = 0x3141_5843;
/// Header size.
pub const XATTR_HEADER: usize = 32;
/// Most inodes that may share one block.
pub const XATTR_REFCOUNT_MAX: u32 = 1024;
/// Largest value (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;
/// Bit of an entry's namespace byte: the value is external.
pub const NS_EXTERNAL: u8 = 0x80;
/// Size of an external value's descriptor (the entry's value field).
pub const EXT_DESC: usize = 16;
/// Most external entries in one xattr block.
pub const XATTR_EXTERNAL_MAX: usize = 16;
/// Magic of a value block.
pub const XVAL_MAGIC: u32 = 0x3156_5843;
/// Header size of a value block.
pub const XVAL_HEADER: usize = 40;

/// Offset of the block's refcount.
const REFCOUNT_OFF: usize = 4;
/// Offset of the block's crc32c.
const CSUM_OFF: usize = 28;
/// Offset of a value block's crc32c.
const XVAL_CSUM_OFF: usize = 12;

const _: () = {
    // Header: blocknr (16..24) and 4 reserved bytes, then the checksum,
    // which ends the header.
    assert!(16 + 8 + 4 == CSUM_OFF && CSUM_OFF + 4 == XATTR_HEADER);
    // Entry lengths: name u8, value u16; a value never exceeds a block.
    assert!(crate::MAX_BLOCK_SIZE as usize - XATTR_HEADER - 4 <= u16::MAX as usize);
    // Value block header: used (8..12), crc (12..16), blocknr, owner, next.
    assert!(XVAL_CSUM_OFF + 4 + 8 + 8 + 8 == XVAL_HEADER);
    // An external value's length fits the descriptor's u32, and its chain
    // index (u16) even at the smallest block size.
    assert!(XATTR_SIZE_MAX.div_ceil(crate::MIN_BLOCK_SIZE as usize - XVAL_HEADER) <= u16::MAX as usize);
};

/// Longest value kept inside the xattr block (on images with external
/// values): a quarter of a block. Longer values are external.
pub fn inline_max(block_size: usize) -> usize {
    block_size / 4
}

/// Value bytes one value block holds.
pub fn value_capacity(block_size: usize) -> usize {
    block_size - XVAL_HEADER
}

/// Value blocks holding a value of `len` bytes.
pub fn value_blocks(len: usize, block_size: usize) -> usize {
    len.div_ceil(value_capacity(block_size))
}

/// crc32c of a value, as an external descriptor stores it.
pub fn value_crc(seed: u32, value: &[u8]) -> u32 {
    crc(seed, value)
}

/// Namespace prefixes, indexed by namespace number - 1.
pub const NAMESPACES: [&str; 4] = ["user.", "trusted.", "security.", "system."];

/// Splits a full attribute name into (namespace, suffix).
pub fn split_name(full: &[u8]) -> Option<(u8, &[u8])> {
    for (i, p) in NAMESPACES.iter().enumerate() {
        if let Some(rest) = full.strip_prefix(p.as_bytes()) {
            if rest.is_empty() || rest.len() > 255 {
                return None;
            }
            return Some((i as u8 + 1, rest));
        }
    }
    None
}

/// An external value's descriptor: where its chain starts, its length and
/// its crc (see the module essay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExtValue {
    pub first: u64,
    pub len: u32,
    pub crc: u32,
}

/// A value: in the entry, or external.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum XattrValue {
    Inline(Vec<u8>),
    External(ExtValue),
}

impl XattrValue {
    /// Length of the value in bytes.
    pub fn len(&self) -> usize {
        match self {
            XattrValue::Inline(v) => v.len(),
            XattrValue::External(x) => x.len as usize,
        }
    }

    /// An empty value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The external descriptor, if the value is external.
    pub fn external(&self) -> Option<&ExtValue> {
        match self {
            XattrValue::External(x) => Some(x),
            XattrValue::Inline(_) => None,
        }
    }
}

/// One attribute.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct XattrEntry {
    pub namespace: u8,
    pub name: Vec<u8>,
    pub value: XattrValue,
}

impl XattrEntry {
    /// An entry with an inline value.
    pub fn inline(namespace: u8, name: &[u8], value: &[u8]) -> XattrEntry {
        XattrEntry { namespace, name: name.to_vec(), value: XattrValue::Inline(value.to_vec()) }
    }

    /// Full name with its prefix.
    pub fn full_name(&self) -> Vec<u8> {
        let mut v = NAMESPACES[usize::from(self.namespace - 1)].as_bytes().to_vec();
        v.extend_from_slice(&self.name);
        v
    }

    fn value_field_len(&self) -> usize {
        match &self.value {
            XattrValue::Inline(v) => v.len(),
            XattrValue::External(_) => EXT_DESC,
        }
    }

    fn disk_len(&self) -> usize {
        (4 + self.name.len() + self.value_field_len()).next_multiple_of(4)
    }
}

/// The checks both block kinds of this module start with: at least 1 KiB,
/// `magic` at 0, the crc32c at `csum_off`, and the block's own number at
/// byte 16 (a misdirected write).
fn verify_block(what: &'static str, magic: u32, csum_off: usize, seed: u32, blocknr: u64, b: &[u8]) -> Result<()> {
    check_header(what, magic, blocknr, b)?;
    let stored = get_u32(b, csum_off);
    let computed = crc_skipping(seed, b, csum_off);
    if stored != computed {
        return Err(FormatError::Checksum { what, at: blocknr, stored, computed });
    }
    Ok(())
}

/// [`verify_block`] but for the checksum.
fn check_header(what: &'static str, magic: u32, blocknr: u64, b: &[u8]) -> Result<()> {
    if b.len() < 1024 || get_u32(b, 0) != magic {
        return Err(FormatError::bad_magic(what, blocknr));
    }
    if get_u64(b, 16) != blocknr {
        return Err(FormatError::corrupt(what, blocknr, "block number mismatch"));
    }
    Ok(())
}

/// What errors call an xattr block.
const XATTR_BLOCK: &str = "xattr block";

/// A decoded xattr block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XattrBlock {
    pub refcount: u32,
    pub entries: Vec<XattrEntry>,
}

impl XattrBlock {
    /// Bytes needed for `entries`.
    pub fn bytes_needed(entries: &[XattrEntry]) -> usize {
        XATTR_HEADER + entries.iter().map(XattrEntry::disk_len).sum::<usize>()
    }

    /// External entries among `entries`.
    pub fn externals(entries: &[XattrEntry]) -> impl Iterator<Item = &ExtValue> {
        entries.iter().filter_map(|e| e.value.external())
    }

    /// Value blocks of all external entries of `entries`.
    pub fn value_block_count(entries: &[XattrEntry], block_size: usize) -> u64 {
        Self::externals(entries).map(|x| value_blocks(x.len as usize, block_size) as u64).sum()
    }

    /// Content hash of the entries (independent of refcount and location):
    /// an inline value by its bytes, an external one by (length, crc).
    pub fn content_hash(entries: &[XattrEntry]) -> u32 {
        let mut h = 0x5eed_u32;
        for e in entries {
            match &e.value {
                XattrValue::Inline(v) => {
                    h = crc32c::crc32c_append(h, &[e.namespace, e.name.len() as u8]);
                    h = crc32c::crc32c_append(h, &e.name);
                    h = crc32c::crc32c_append(h, &(v.len() as u32).to_le_bytes());
                    h = crc32c::crc32c_append(h, v);
                }
                XattrValue::External(x) => {
                    h = crc32c::crc32c_append(h, &[e.namespace | NS_EXTERNAL, e.name.len() as u8]);
                    h = crc32c::crc32c_append(h, &e.name);
                    h = crc32c::crc32c_append(h, &x.len.to_le_bytes());
                    h = crc32c::crc32c_append(h, &x.crc.to_le_bytes());
                }
            }
        }
        h.max(1)
    }

    /// Sets the refcount of the encoded block `out` in place: the field and
    /// the checksum, giving the bytes [`XattrBlock::encode`] writes for the
    /// same entries with that refcount (the content hash depends on the
    /// entries only), without encoding them again. Returns the bytes it may
    /// have changed (within the header).
    pub fn set_encoded_refcount(seed: u32, out: &mut [u8], refcount: u32) -> std::ops::Range<usize> {
        put_u32(out, REFCOUNT_OFF, refcount);
        let c = crc_skipping(seed, out, CSUM_OFF);
        put_u32(out, CSUM_OFF, c);
        0..XATTR_HEADER
    }

    /// Encodes into a whole block.
    ///
    /// # Panics
    /// If the entries do not fit the block ([`XattrBlock::bytes_needed`]), or
    /// one has a namespace outside 1..=4, an empty name or one longer than
    /// 255 bytes, or more than [`XATTR_EXTERNAL_MAX`] are external: callers
    /// check all of these first (a name or value the format cannot hold is an
    /// `ERANGE`/`ENOSPC` for the user, not something to write truncated).
    pub fn encode(&self, seed: u32, blocknr: u64, out: &mut [u8]) {
        let need = Self::bytes_needed(&self.entries);
        assert!(need <= out.len(), "encoder bug: xattr block of {need} bytes in a {}-byte block", out.len());
        assert!(Self::externals(&self.entries).count() <= XATTR_EXTERNAL_MAX, "encoder bug: too many external values");
        for e in &self.entries {
            assert!(
                (1..=4).contains(&e.namespace) && (1..=255).contains(&e.name.len()),
                "encoder bug: xattr entry namespace {} name of {} bytes",
                e.namespace,
                e.name.len()
            );
        }
        out.fill(0);
        put_u32(out, 0, XATTR_MAGIC);
        put_u32(out, REFCOUNT_OFF, self.refcount);
        put_u32(out, 8, Self::content_hash(&self.entries));
        put_u16(out, 12, self.entries.len() as u16);
        put_u64(out, 16, blocknr);
        let mut p = XATTR_HEADER;
        for e in &self.entries {
            out[p + 1] = e.name.len() as u8;
            put_u16(out, p + 2, e.value_field_len() as u16);
            out[p + 4..p + 4 + e.name.len()].copy_from_slice(&e.name);
            let v = p + 4 + e.name.len();
            match &e.value {
                XattrValue::Inline(bytes) => {
                    out[p] = e.namespace;
                    out[v..v + bytes.len()].copy_from_slice(bytes);
                }
                XattrValue::External(x) => {
                    out[p] = e.namespace | NS_EXTERNAL;
                    put_u64(out, v, x.first);
                    put_u32(out, v + 8, x.len);
                    put_u32(out, v + 12, x.crc);
                }
            }
            p += e.disk_len();
        }
        let c = crc_skipping(seed, out, CSUM_OFF);
        put_u32(out, CSUM_OFF, c);
    }

    /// Decodes and validates the xattr block at `blocknr`.
    pub fn decode(seed: u32, blocknr: u64, b: &[u8]) -> Result<XattrBlock> {
        verify_block(XATTR_BLOCK, XATTR_MAGIC, CSUM_OFF, seed, blocknr, b)?;
        Self::decode_verified(blocknr, b)
    }

    /// [`XattrBlock::decode`] of bytes whose checksum was verified already
    /// and that only [`XattrBlock::encode`] has written since: the engine's
    /// cached copy of a block, verified when it was read from the image.
    /// Every other check stays, the content hash (a crc32c of the entries)
    /// among them. Saves the block's crc32c, the larger part of a setxattr's
    /// own work, where a set loads the inode's block and the block it moves
    /// to several times.
    pub fn decode_verified(blocknr: u64, b: &[u8]) -> Result<XattrBlock> {
        const W: &str = XATTR_BLOCK;
        let bad = |d: &str| Err(FormatError::corrupt(W, blocknr, d));
        check_header(W, XATTR_MAGIC, blocknr, b)?;
        let refcount = get_u32(b, REFCOUNT_OFF);
        if refcount == 0 || refcount > XATTR_REFCOUNT_MAX {
            return bad("refcount out of range");
        }
        let n = usize::from(get_u16(b, 12));
        let mut p = XATTR_HEADER;
        let mut entries: Vec<XattrEntry> = Vec::with_capacity(n);
        for _ in 0..n {
            if p + 4 > b.len() {
                return bad("entry header past end of block");
            }
            let ns = b[p] & !NS_EXTERNAL;
            let external = b[p] & NS_EXTERNAL != 0;
            let nl = usize::from(b[p + 1]);
            let vl = usize::from(get_u16(b, p + 2));
            if !(1..=4).contains(&ns) || nl == 0 || p + 4 + nl + vl > b.len() {
                return bad("entry out of bounds");
            }
            let v = p + 4 + nl;
            let value = if external {
                let x = ExtValue { first: get_u64(b, v), len: get_u32(b, v + 8), crc: get_u32(b, v + 12) };
                if vl != EXT_DESC || x.first == 0 || x.len == 0 || x.len as usize > XATTR_SIZE_MAX {
                    return bad("external value descriptor out of range");
                }
                XattrValue::External(x)
            } else {
                XattrValue::Inline(b[v..v + vl].to_vec())
            };
            let e = XattrEntry { namespace: ns, name: b[p + 4..v].to_vec(), value };
            if entries.last().is_some_and(|l| (l.namespace, &l.name) >= (e.namespace, &e.name)) {
                return bad("entries not sorted");
            }
            p += e.disk_len();
            entries.push(e);
        }
        if Self::externals(&entries).count() > XATTR_EXTERNAL_MAX {
            return bad("too many external values");
        }
        if get_u32(b, 8) != Self::content_hash(&entries) {
            return bad("content hash mismatch");
        }
        Ok(XattrBlock { refcount, entries })
    }
}

/// The header of one value block (see the module essay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueBlock {
    /// Position in the chain, from 0.
    pub index: u16,
    /// Value bytes in this block.
    pub used: u32,
    /// The xattr block whose entry holds the value.
    pub owner: u64,
    /// The next block of the chain (0: this is the last).
    pub next: u64,
}

impl ValueBlock {
    /// Encodes the header and `chunk` (at most [`value_capacity`] bytes;
    /// `used` is taken from it) into a whole block.
    ///
    /// # Panics
    /// If `chunk` does not fit the block.
    pub fn encode(&self, seed: u32, blocknr: u64, chunk: &[u8], out: &mut [u8]) {
        assert!(chunk.len() <= value_capacity(out.len()), "encoder bug: {}-byte value chunk", chunk.len());
        out.fill(0);
        put_u32(out, 0, XVAL_MAGIC);
        put_u16(out, 4, self.index);
        put_u32(out, 8, chunk.len() as u32);
        put_u64(out, 16, blocknr);
        put_u64(out, 24, self.owner);
        put_u64(out, 32, self.next);
        out[XVAL_HEADER..XVAL_HEADER + chunk.len()].copy_from_slice(chunk);
        let c = crc_skipping(seed, out, XVAL_CSUM_OFF);
        put_u32(out, XVAL_CSUM_OFF, c);
    }

    /// Decodes and verifies the value block at `blocknr` (magic, checksum,
    /// block number, `used` within the block); returns the header and the
    /// value bytes it holds.
    pub fn decode(seed: u32, blocknr: u64, b: &[u8]) -> Result<(ValueBlock, &[u8])> {
        const W: &str = "xattr value block";
        verify_block(W, XVAL_MAGIC, XVAL_CSUM_OFF, seed, blocknr, b)?;
        let used = get_u32(b, 8);
        if used as usize > value_capacity(b.len()) {
            return Err(FormatError::corrupt(W, blocknr, "used length past the end of the block"));
        }
        let h = ValueBlock { index: get_u16(b, 4), used, owner: get_u64(b, 24), next: get_u64(b, 32) };
        Ok((h, &b[XVAL_HEADER..XVAL_HEADER + used as usize]))
    }
}

impl ExtValue {
    /// The descriptor of `value`, stored from block `first`.
    pub fn of(seed: u32, first: u64, value: &[u8]) -> ExtValue {
        ExtValue { first, len: value.len() as u32, crc: value_crc(seed, value) }
    }

    /// Reads the value through its chain, checking every block (checksum,
    /// block number, owner `owner`, index, `used`, chain length) and then
    /// the whole value's crc. `block(n)` returns block `n`'s bytes (the
    /// caller checks that `n` is a block a value may use); it is called at
    /// most [`value_blocks`] times. Returns the value and its blocks, in
    /// chain order.
    pub fn read<E: From<FormatError>>(
        &self,
        seed: u32,
        owner: u64,
        block_size: usize,
        mut block: impl FnMut(u64) -> std::result::Result<Vec<u8>, E>,
    ) -> std::result::Result<(Vec<u8>, Vec<u64>), E> {
        const W: &str = "xattr value";
        let len = self.len as usize;
        let n = value_blocks(len, block_size);
        let cap = value_capacity(block_size);
        let mut value = Vec::with_capacity(len);
        let mut blocks = Vec::with_capacity(n);
        let mut blk = self.first;
        for i in 0..n {
            if blk == 0 {
                return Err(FormatError::corrupt(
                    W,
                    owner,
                    format!("chain from {} ends after {i} block(s)", self.first),
                )
                .into());
            }
            let b = block(blk)?;
            let (h, chunk) = ValueBlock::decode(seed, blk, &b)?;
            let want_used = cap.min(len - value.len());
            let want_next_zero = i + 1 == n;
            if h.owner != owner
                || usize::from(h.index) != i
                || h.used as usize != want_used
                || (h.next == 0) != want_next_zero
            {
                return Err(FormatError::corrupt(
                    "xattr value block",
                    blk,
                    format!(
                        "owner {} index {} used {} next {}, expected owner {owner} index {i} used {want_used}{}",
                        h.owner,
                        h.index,
                        h.used,
                        h.next,
                        if want_next_zero { " and the chain's end" } else { "" }
                    ),
                )
                .into());
            }
            value.extend_from_slice(chunk);
            blocks.push(blk);
            blk = h.next;
        }
        let c = value_crc(seed, &value);
        if c != self.crc {
            return Err(FormatError::Checksum { what: W, at: self.first, stored: self.crc, computed: c }.into());
        }
        Ok((value, blocks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const SEED: u32 = 3;
    const BS: usize = 1024;

    fn ext_entry(name: &[u8], x: ExtValue) -> XattrEntry {
        XattrEntry { namespace: 1, name: name.to_vec(), value: XattrValue::External(x) }
    }

    #[test]
    fn roundtrip() {
        let blk = XattrBlock {
            refcount: 2,
            entries: vec![
                XattrEntry::inline(1, b"a", b"xyz"),
                ext_entry(b"big", ExtValue { first: 77, len: 65536, crc: 0xdead_beef }),
                XattrEntry::inline(1, b"c", b""),
                XattrEntry::inline(3, b"selinux", &[1; 100]),
            ],
        };
        let mut b = vec![0u8; 4096];
        blk.encode(3, 10, &mut b);
        assert_eq!(b[XATTR_HEADER], 1, "inline entry: plain namespace");
        assert_eq!(b[XATTR_HEADER + 8], 1 | NS_EXTERNAL, "external entry: flagged");
        assert_eq!(XattrBlock::decode(3, 10, &b).unwrap(), blk);
        assert_eq!(XattrBlock::value_block_count(&blk.entries, 4096), 17);
        assert_eq!(split_name(b"user.foo"), Some((1, &b"foo"[..])));
        assert_eq!(split_name(b"user."), None);
        assert_eq!(split_name(b"bogus.x"), None);
    }

    /// `decode_verified` skips only the block's crc: magic, block number
    /// and content hash are still checked.
    #[test]
    fn decode_verified_skips_only_the_checksum() {
        let blk = XattrBlock { refcount: 1, entries: vec![XattrEntry::inline(1, b"k", b"value")] };
        let mut b = vec![0u8; BS];
        blk.encode(SEED, 10, &mut b);
        b[CSUM_OFF] ^= 1;
        assert!(matches!(XattrBlock::decode(SEED, 10, &b), Err(FormatError::Checksum { .. })));
        assert_eq!(XattrBlock::decode_verified(10, &b).unwrap(), blk);
        assert!(XattrBlock::decode_verified(11, &b).is_err(), "another block's number");
        let mut value = b.clone();
        let at = value.windows(5).position(|w| w == b"value").unwrap();
        value[at] = b'V';
        assert!(XattrBlock::decode_verified(10, &value).is_err(), "content hash");
        b[0] ^= 1;
        assert!(XattrBlock::decode_verified(10, &b).is_err(), "magic");
    }

    /// A refcount set in place gives the very bytes of a block encoded with
    /// it, which decode (checksum included) to that refcount.
    #[test]
    fn a_refcount_set_in_place_is_the_encoded_block() {
        let mut blk = XattrBlock {
            refcount: 5,
            entries: vec![XattrEntry::inline(1, b"k", &[7; 200]), XattrEntry::inline(2, b"t", b"v")],
        };
        let mut b = vec![0u8; BS];
        blk.encode(SEED, 10, &mut b);
        for refcount in [6, 1, XATTR_REFCOUNT_MAX] {
            let changed = XattrBlock::set_encoded_refcount(SEED, &mut b, refcount);
            assert!(changed.end <= XATTR_HEADER);
            blk.refcount = refcount;
            let mut want = vec![0u8; BS];
            blk.encode(SEED, 10, &mut want);
            assert_eq!(b, want, "refcount {refcount}");
            assert_eq!(XattrBlock::decode(SEED, 10, &b).unwrap(), blk);
        }
    }

    #[test]
    fn external_and_inline_hash_differently() {
        let v = vec![9u8; 300];
        let inline = [XattrEntry::inline(1, b"v", &v)];
        let ext = [ext_entry(b"v", ExtValue::of(SEED, 5, &v))];
        let ext_elsewhere = [ext_entry(b"v", ExtValue::of(SEED, 99, &v))];
        assert_ne!(XattrBlock::content_hash(&inline), XattrBlock::content_hash(&ext));
        // Where a value lives is not content.
        assert_eq!(XattrBlock::content_hash(&ext), XattrBlock::content_hash(&ext_elsewhere));
    }

    /// Encodes `blk` with one damaged byte of the external descriptor
    /// (`patch` gets the descriptor's offset), re-stamping the checksums.
    fn damaged_descriptor(patch: impl Fn(&mut [u8], usize)) -> Result<XattrBlock> {
        let blk = XattrBlock { refcount: 1, entries: vec![ext_entry(b"x", ExtValue { first: 7, len: 2000, crc: 1 })] };
        let mut b = vec![0u8; BS];
        blk.encode(SEED, 10, &mut b);
        let desc = XATTR_HEADER + 4 + 1;
        patch(&mut b, desc);
        let hash = XattrBlock::content_hash(&[ext_entry(
            b"x",
            ExtValue { first: get_u64(&b, desc), len: get_u32(&b, desc + 8), crc: get_u32(&b, desc + 12) },
        )]);
        put_u32(&mut b, 8, hash);
        let c = crc_skipping(SEED, &b, CSUM_OFF);
        put_u32(&mut b, CSUM_OFF, c);
        XattrBlock::decode(SEED, 10, &b)
    }

    #[test]
    fn damaged_descriptors_are_refused() {
        assert!(damaged_descriptor(|_, _| {}).is_ok());
        type Patch<'a> = &'a dyn Fn(&mut [u8], usize);
        let cases: [(&str, Patch); 4] = [
            ("length 0", &|b, d| put_u32(b, d + 8, 0)),
            ("length past 64 KiB", &|b, d| put_u32(b, d + 8, 65537)),
            ("first block 0", &|b, d| put_u64(b, d, 0)),
            ("descriptor of 12 bytes", &|b, d| put_u16(b, d - 3, 12)),
        ];
        for (what, f) in cases {
            let e = damaged_descriptor(f).expect_err(what);
            assert!(matches!(e, FormatError::Corrupt { at: 10, .. }), "{what}: {e}");
        }
        // A flipped byte without re-stamping: the block's checksum.
        let blk = XattrBlock { refcount: 1, entries: vec![ext_entry(b"x", ExtValue { first: 7, len: 2000, crc: 1 })] };
        let mut b = vec![0u8; BS];
        blk.encode(SEED, 10, &mut b);
        b[XATTR_HEADER + 5] ^= 1;
        assert!(matches!(XattrBlock::decode(SEED, 10, &b), Err(FormatError::Checksum { .. })));
    }

    #[test]
    fn too_many_externals_are_refused() {
        let entries: Vec<XattrEntry> = (0..=XATTR_EXTERNAL_MAX)
            .map(|i| ext_entry(format!("n{i:02}").as_bytes(), ExtValue { first: 100 + i as u64, len: 9000, crc: 0 }))
            .collect();
        let mut b = vec![0u8; 4096];
        let ok = XattrBlock { refcount: 1, entries: entries[..XATTR_EXTERNAL_MAX].to_vec() };
        ok.encode(SEED, 10, &mut b);
        assert_eq!(XattrBlock::decode(SEED, 10, &b).unwrap(), ok);
        // Written by hand: one more external entry than allowed.
        let n = XattrBlock::bytes_needed(&ok.entries);
        let e = &entries[XATTR_EXTERNAL_MAX];
        b[n] = 1 | NS_EXTERNAL;
        b[n + 1] = e.name.len() as u8;
        put_u16(&mut b, n + 2, EXT_DESC as u16);
        b[n + 4..n + 7].copy_from_slice(&e.name);
        put_u64(&mut b, n + 7, 116);
        put_u32(&mut b, n + 15, 9000);
        put_u16(&mut b, 12, entries.len() as u16);
        put_u32(&mut b, 8, XattrBlock::content_hash(&entries));
        let c = crc_skipping(SEED, &b, CSUM_OFF);
        put_u32(&mut b, CSUM_OFF, c);
        let err = XattrBlock::decode(SEED, 10, &b).unwrap_err();
        assert!(err.to_string().contains("too many external"), "{err}");
    }

    /// Writes `value` as a chain owned by `owner` over `blocks`.
    fn write_chain(value: &[u8], owner: u64, blocks: &[u64]) -> HashMap<u64, Vec<u8>> {
        let cap = value_capacity(BS);
        let mut disk = HashMap::new();
        for (i, chunk) in value.chunks(cap).enumerate() {
            let next = blocks.get(i + 1).copied().unwrap_or(0);
            let mut b = vec![0u8; BS];
            ValueBlock { index: i as u16, used: 0, owner, next }.encode(SEED, blocks[i], chunk, &mut b);
            disk.insert(blocks[i], b);
        }
        disk
    }

    fn read(x: &ExtValue, owner: u64, disk: &HashMap<u64, Vec<u8>>) -> Result<(Vec<u8>, Vec<u64>)> {
        x.read(SEED, owner, BS, |b| disk.get(&b).cloned().ok_or(FormatError::corrupt("test", b, "no such block")))
    }

    #[test]
    fn value_chains() {
        let value: Vec<u8> = (0..XATTR_SIZE_MAX).map(|i| (i * 7 % 251) as u8).collect();
        let n = value_blocks(value.len(), BS);
        assert_eq!(n, 67);
        let blocks: Vec<u64> = (0..n as u64).map(|i| 1000 + 3 * i).collect();
        let disk = write_chain(&value, 50, &blocks);
        let x = ExtValue::of(SEED, blocks[0], &value);
        assert_eq!(read(&x, 50, &disk).unwrap(), (value.clone(), blocks.clone()));
        // One byte and one full block.
        for len in [1, value_capacity(BS)] {
            let d = write_chain(&value[..len], 50, &blocks[..1]);
            assert_eq!(read(&ExtValue::of(SEED, blocks[0], &value[..len]), 50, &d).unwrap().0, &value[..len]);
        }

        let err = |disk: &HashMap<u64, Vec<u8>>, x: &ExtValue| read(x, 50, disk).unwrap_err().to_string();
        // Another owner's value.
        assert!(read(&x, 51, &disk).unwrap_err().to_string().contains("expected owner 51"));
        // A flipped value byte: that block's checksum.
        let mut d = disk.clone();
        d.get_mut(&blocks[5]).unwrap()[XVAL_HEADER + 3] ^= 1;
        assert!(matches!(read(&x, 50, &d), Err(FormatError::Checksum { at, .. }) if at == blocks[5]));
        // The whole value's crc (a block re-stamped with other bytes).
        let mut other = value.clone();
        other[100] ^= 1;
        let d = write_chain(&other, 50, &blocks);
        assert!(matches!(read(&x, 50, &d), Err(FormatError::Checksum { what: "xattr value", .. })));
        // A chain too short, too long, out of order, looping.
        let d = write_chain(&value[..value.len() - 2000], 50, &blocks);
        assert!(err(&d, &x).contains("used"), "{}", err(&d, &x));
        let long = ExtValue::of(SEED, blocks[0], &value[..value.len() - 2000]);
        assert!(err(&disk, &long).contains("chain's end"));
        let mut d = disk.clone();
        let (b1, b2) = (d[&blocks[1]].clone(), d[&blocks[2]].clone());
        d.insert(blocks[1], b2);
        d.insert(blocks[2], b1);
        assert!(read(&x, 50, &d).is_err(), "swapped blocks");
        let mut looped = blocks.clone();
        looped[3] = blocks[1];
        let d = write_chain(&value, 50, &looped);
        assert!(err(&d, &x).contains("index"), "{}", err(&d, &x));
        // Damaged headers.
        let mut b = disk[&blocks[0]].clone();
        put_u32(&mut b, 8, (value_capacity(BS) + 1) as u32);
        let c = crc_skipping(SEED, &b, XVAL_CSUM_OFF);
        put_u32(&mut b, XVAL_CSUM_OFF, c);
        assert!(ValueBlock::decode(SEED, blocks[0], &b).is_err(), "used past the block");
        assert!(ValueBlock::decode(SEED, blocks[0] + 1, &disk[&blocks[0]]).is_err(), "misdirected");
        assert!(matches!(ValueBlock::decode(SEED, 1, &[0u8; BS]), Err(FormatError::BadMagic { .. })));
    }
}
