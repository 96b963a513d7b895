//! Extended-attribute blocks: one block per inode, refcounted so that
//! identical blocks can be shared between inodes (the ext4/mbcache design).
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

use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::error::{FormatError, Result};

/// Magic of an xattr block.
pub const XATTR_MAGIC: u32 = 0x3141_5843;
/// Header size.
pub const XATTR_HEADER: usize = 32;
/// Most inodes that may share one block.
pub const XATTR_REFCOUNT_MAX: u32 = 1024;

/// Offset of the block's crc32c.
const CSUM_OFF: usize = 28;

const _: () = {
    // Header: blocknr (16..24) and 4 reserved bytes, then the checksum,
    // which ends the header.
    assert!(16 + 8 + 4 == CSUM_OFF && CSUM_OFF + 4 == XATTR_HEADER);
    // Entry lengths: name u8, value u16; a value never exceeds a block.
    assert!(crate::MAX_BLOCK_SIZE as usize - XATTR_HEADER - 4 <= u16::MAX as usize);
};

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

/// One attribute.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct XattrEntry {
    pub namespace: u8,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

impl XattrEntry {
    /// Full name with its prefix.
    pub fn full_name(&self) -> Vec<u8> {
        let mut v = NAMESPACES[usize::from(self.namespace - 1)].as_bytes().to_vec();
        v.extend_from_slice(&self.name);
        v
    }

    fn disk_len(&self) -> usize {
        (4 + self.name.len() + self.value.len()).next_multiple_of(4)
    }
}

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

    /// Content hash of the entries (independent of refcount and location).
    pub fn content_hash(entries: &[XattrEntry]) -> u32 {
        let mut h = 0x5eed_u32;
        for e in entries {
            h = crc32c::crc32c_append(h, &[e.namespace, e.name.len() as u8]);
            h = crc32c::crc32c_append(h, &e.name);
            h = crc32c::crc32c_append(h, &(e.value.len() as u32).to_le_bytes());
            h = crc32c::crc32c_append(h, &e.value);
        }
        h.max(1)
    }

    /// Encodes into a whole block.
    ///
    /// # Panics
    /// If the entries do not fit the block ([`XattrBlock::bytes_needed`]), or
    /// one has a namespace outside 1..=4, an empty name or one longer than
    /// 255 bytes: callers check all of these first (a name or value the format
    /// cannot hold is an `ERANGE`/`ENOSPC` for the user, not something to
    /// write truncated).
    pub fn encode(&self, seed: u32, blocknr: u64, out: &mut [u8]) {
        let need = Self::bytes_needed(&self.entries);
        assert!(need <= out.len(), "encoder bug: xattr block of {need} bytes in a {}-byte block", out.len());
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
        put_u32(out, 4, self.refcount);
        put_u32(out, 8, Self::content_hash(&self.entries));
        put_u16(out, 12, self.entries.len() as u16);
        put_u64(out, 16, blocknr);
        let mut p = XATTR_HEADER;
        for e in &self.entries {
            out[p] = e.namespace;
            out[p + 1] = e.name.len() as u8;
            put_u16(out, p + 2, e.value.len() as u16);
            out[p + 4..p + 4 + e.name.len()].copy_from_slice(&e.name);
            let v = p + 4 + e.name.len();
            out[v..v + e.value.len()].copy_from_slice(&e.value);
            p += e.disk_len();
        }
        let c = crc_skipping(seed, out, CSUM_OFF);
        put_u32(out, CSUM_OFF, c);
    }

    /// Decodes and validates the xattr block at `blocknr`.
    pub fn decode(seed: u32, blocknr: u64, b: &[u8]) -> Result<XattrBlock> {
        const W: &str = "xattr block";
        let bad = |d: &str| Err(FormatError::corrupt(W, blocknr, d));
        if b.len() < 1024 || get_u32(b, 0) != XATTR_MAGIC {
            return Err(FormatError::bad_magic(W, blocknr));
        }
        let stored = get_u32(b, CSUM_OFF);
        let computed = crc_skipping(seed, b, CSUM_OFF);
        if stored != computed {
            return Err(FormatError::Checksum { what: W, at: blocknr, stored, computed });
        }
        if get_u64(b, 16) != blocknr {
            return bad("block number mismatch");
        }
        let refcount = get_u32(b, 4);
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
            let ns = b[p];
            let nl = usize::from(b[p + 1]);
            let vl = usize::from(get_u16(b, p + 2));
            if !(1..=4).contains(&ns) || nl == 0 || p + 4 + nl + vl > b.len() {
                return bad("entry out of bounds");
            }
            let e = XattrEntry {
                namespace: ns,
                name: b[p + 4..p + 4 + nl].to_vec(),
                value: b[p + 4 + nl..p + 4 + nl + vl].to_vec(),
            };
            if entries.last().is_some_and(|l| (l.namespace, &l.name) >= (e.namespace, &e.name)) {
                return bad("entries not sorted");
            }
            p += e.disk_len();
            entries.push(e);
        }
        if get_u32(b, 8) != Self::content_hash(&entries) {
            return bad("content hash mismatch");
        }
        Ok(XattrBlock { refcount, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let blk = XattrBlock {
            refcount: 2,
            entries: vec![
                XattrEntry { namespace: 1, name: b"a".to_vec(), value: b"xyz".to_vec() },
                XattrEntry { namespace: 1, name: b"b".to_vec(), value: vec![] },
                XattrEntry { namespace: 3, name: b"selinux".to_vec(), value: vec![1; 100] },
            ],
        };
        let mut b = vec![0u8; 4096];
        blk.encode(3, 10, &mut b);
        assert_eq!(XattrBlock::decode(3, 10, &b).unwrap(), blk);
        assert_eq!(split_name(b"user.foo"), Some((1, &b"foo"[..])));
        assert_eq!(split_name(b"user."), None);
        assert_eq!(split_name(b"bogus.x"), None);
    }
}
