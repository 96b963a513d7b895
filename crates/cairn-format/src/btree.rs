//! B+tree nodes: one block each, keyed by `u64`.
//!
//! The same node format serves every tree cairn keeps: file extent maps
//! (key = logical block), directories (key = seeded name hash + collision
//! index) and the orphan list (key = inode number).
//!
//! ```text
//! header (32 bytes)
//!  0  4  magic "CBT1"
//!  4  1  kind (KIND_*)          5 1 level (0 = leaf)     6 2 nkeys
//!  8  8  owner (inode number; 0 for the orphan tree)
//! 16  8  blocknr (this block; catches misdirected writes)
//! 24  4  reserved
//! 28  4  crc32c(seed, whole block with this field zero)
//! leaf:     nkeys slots of {key u64, value_off u16, value_len u16} from byte 32,
//!           values packed from the end of the block downwards
//! internal: nkeys entries of {key u64, child u64} from byte 32; entry i
//!           covers keys in [key_i, key_{i+1}); key_0 is a lower bound of the
//!           subtree (it may be below the smallest key left after removals)
//! ```
//! Invariants: keys strictly ascending within a node; every key in child i is
//! in `[key_i, key_{i+1})`; all leaves at level 0 and the same depth; nodes
//! are never empty except an empty root leaf, which is freed instead.

use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::error::{FormatError, Result};

/// Header size.
pub const NODE_HEADER: usize = 32;
/// Magic of a B+tree node.
pub const NODE_MAGIC: u32 = 0x3154_4243;
/// Leaf slot size.
pub const LEAF_SLOT: usize = 12;
/// Internal entry size.
pub const INTERNAL_ENTRY: usize = 16;
/// Deepest tree accepted (bounds recursion on corrupt images).
pub const MAX_LEVEL: u8 = 8;

/// Offset of the node's crc32c.
const CSUM_OFF: usize = 28;

const _: () = {
    // Header: blocknr (16..24) and 4 reserved bytes, then the checksum,
    // which ends the header.
    assert!(16 + 8 + 4 == CSUM_OFF && CSUM_OFF + 4 == NODE_HEADER);
    // Leaf slot: key u64 + value offset u16 + value length u16.
    assert!(LEAF_SLOT == 8 + 2 + 2);
    // Internal entry: key u64 + child u64.
    assert!(INTERNAL_ENTRY == 8 + 8);
    // Value offsets are u16: every offset inside the largest block fits,
    // except the block's end itself (see `Node::encode`).
    assert!(crate::MAX_BLOCK_SIZE as usize - 1 == u16::MAX as usize);
    // An internal node of the smallest block holds enough children to be a tree.
    assert!((crate::MIN_BLOCK_SIZE as usize - NODE_HEADER) / INTERNAL_ENTRY >= 3);
};

/// Tree of file extents.
pub const KIND_EXTENTS: u8 = 1;
/// Tree of directory entries.
pub const KIND_DIRENTS: u8 = 2;
/// Tree of orphan inodes.
pub const KIND_ORPHANS: u8 = 3;

/// The payload of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeBody {
    /// Leaf: (key, value) pairs.
    Leaf(Vec<(u64, Vec<u8>)>),
    /// Internal: (key, child block) pairs.
    Internal(Vec<(u64, u64)>),
}

/// A decoded node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: u8,
    pub level: u8,
    pub owner: u64,
    pub body: NodeBody,
}

impl Node {
    /// Bytes a leaf with these entries needs.
    pub fn leaf_bytes(entries: &[(u64, Vec<u8>)]) -> usize {
        NODE_HEADER + entries.iter().map(|(_, v)| LEAF_SLOT + v.len()).sum::<usize>()
    }

    /// Bytes an internal node with `n` entries needs.
    pub fn internal_bytes(n: usize) -> usize {
        NODE_HEADER + n * INTERNAL_ENTRY
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        match &self.body {
            NodeBody::Leaf(e) => e.len(),
            NodeBody::Internal(e) => e.len(),
        }
    }

    /// True when the node has no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Encodes into a whole block `out`, stamping `blocknr` and the checksum.
    ///
    /// # Panics
    /// If the entries do not fit the block (see [`Node::leaf_bytes`],
    /// [`Node::internal_bytes`]): the caller must split first.
    pub fn encode(&self, seed: u32, blocknr: u64, out: &mut [u8]) {
        let need = match &self.body {
            NodeBody::Leaf(e) => Node::leaf_bytes(e),
            NodeBody::Internal(e) => Node::internal_bytes(e.len()),
        };
        assert!(need <= out.len(), "encoder bug: node of {need} bytes in a {}-byte block", out.len());
        out.fill(0);
        put_u32(out, 0, NODE_MAGIC);
        out[4] = self.kind;
        out[5] = self.level;
        put_u16(out, 6, self.len() as u16);
        put_u64(out, 8, self.owner);
        put_u64(out, 16, blocknr);
        match &self.body {
            NodeBody::Leaf(entries) => {
                let mut vend = out.len();
                for (i, (k, v)) in entries.iter().enumerate() {
                    vend -= v.len();
                    out[vend..vend + v.len()].copy_from_slice(v);
                    let s = NODE_HEADER + i * LEAF_SLOT;
                    put_u64(out, s, *k);
                    // Only an empty value can start at the end of a 64 KiB
                    // block, and offset 65536 does not fit a u16: any offset
                    // past the slots is valid for an empty value, so store
                    // the last byte's.
                    put_u16(out, s + 8, vend.min(usize::from(u16::MAX)) as u16);
                    put_u16(out, s + 10, v.len() as u16);
                }
            }
            NodeBody::Internal(entries) => {
                for (i, (k, c)) in entries.iter().enumerate() {
                    let s = NODE_HEADER + i * INTERNAL_ENTRY;
                    put_u64(out, s, *k);
                    put_u64(out, s + 8, *c);
                }
            }
        }
        let c = crc_skipping(seed, out, CSUM_OFF);
        put_u32(out, CSUM_OFF, c);
    }

    /// Decodes and validates the node stored in block `blocknr`.
    pub fn decode(seed: u32, blocknr: u64, b: &[u8]) -> Result<Node> {
        verify_checksum(seed, blocknr, b)?;
        Node::parse(blocknr, b)
    }

    /// Decodes a node whose checksum was already verified (a block in the
    /// engine's buffer cache, checked when it was read and re-stamped by every
    /// encode); every bound is still checked.
    pub fn parse(blocknr: u64, b: &[u8]) -> Result<Node> {
        let v = NodeView::parse(blocknr, b)?;
        let body = if v.level() == 0 {
            NodeBody::Leaf((0..v.len()).map(|i| (v.key(i), v.value(i).to_vec())).collect())
        } else {
            NodeBody::Internal((0..v.len()).map(|i| (v.key(i), v.child(i))).collect())
        };
        Ok(Node { kind: b[4], level: v.level(), owner: get_u64(b, 8), body })
    }
}

/// Checks the crc32c of the node in block `blocknr`.
pub fn verify_checksum(seed: u32, blocknr: u64, b: &[u8]) -> Result<()> {
    const W: &str = "tree node";
    if b.len() < 1024 || get_u32(b, 0) != NODE_MAGIC {
        return Err(FormatError::bad_magic(W, blocknr));
    }
    let stored = get_u32(b, CSUM_OFF);
    let computed = crc_skipping(seed, b, CSUM_OFF);
    if stored != computed {
        return Err(FormatError::Checksum { what: W, at: blocknr, stored, computed });
    }
    Ok(())
}

/// A read-only view of an encoded node, for searches that should not copy
/// every entry out of the block (lookups, scans). Built by [`NodeView::parse`],
/// which checks the same bounds and key order as [`Node::parse`] (not the
/// checksum: use it on blocks already verified).
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    b: &'a [u8],
    level: u8,
    n: usize,
}

impl<'a> NodeView<'a> {
    /// Validates the node in `b` (block `blocknr`) and returns a view of it.
    pub fn parse(blocknr: u64, b: &'a [u8]) -> Result<NodeView<'a>> {
        const W: &str = "tree node";
        let bad = |d: String| Err(FormatError::corrupt(W, blocknr, d));
        if b.len() < 1024 || get_u32(b, 0) != NODE_MAGIC {
            return Err(FormatError::bad_magic(W, blocknr));
        }
        if get_u64(b, 16) != blocknr {
            return bad(format!("node claims to be block {}", get_u64(b, 16)));
        }
        let (kind, level, n) = (b[4], b[5], usize::from(get_u16(b, 6)));
        if !(KIND_EXTENTS..=KIND_ORPHANS).contains(&kind) || level > MAX_LEVEL {
            return bad(format!("kind {kind} level {level} invalid"));
        }
        let v = NodeView { b, level, n };
        if level == 0 {
            let slots_end = NODE_HEADER + n * LEAF_SLOT;
            if slots_end > b.len() {
                return bad(format!("{n} leaf slots overflow the block"));
            }
            for i in 0..n {
                let s = NODE_HEADER + i * LEAF_SLOT;
                let (off, len) = (usize::from(get_u16(b, s + 8)), usize::from(get_u16(b, s + 10)));
                if off < slots_end || off + len > b.len() {
                    return bad(format!("value {i} at {off}+{len} out of bounds"));
                }
            }
        } else if n == 0 || NODE_HEADER + n * INTERNAL_ENTRY > b.len() {
            return bad(format!("internal node with {n} entries"));
        }
        if (1..n).any(|i| v.key(i - 1) >= v.key(i)) {
            return bad("keys not strictly ascending".into());
        }
        Ok(v)
    }

    /// Level (0 = leaf).
    pub fn level(&self) -> u8 {
        self.level
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when the node has no keys.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Key `i` (`i < len()`).
    pub fn key(&self, i: usize) -> u64 {
        let size = if self.level == 0 { LEAF_SLOT } else { INTERNAL_ENTRY };
        get_u64(self.b, NODE_HEADER + i * size)
    }

    /// Value `i` of a leaf.
    pub fn value(&self, i: usize) -> &'a [u8] {
        let s = NODE_HEADER + i * LEAF_SLOT;
        let (off, len) = (usize::from(get_u16(self.b, s + 8)), usize::from(get_u16(self.b, s + 10)));
        &self.b[off..off + len]
    }

    /// Child block `i` of an internal node.
    pub fn child(&self, i: usize) -> u64 {
        get_u64(self.b, NODE_HEADER + i * INTERNAL_ENTRY + 8)
    }

    /// Number of keys `<= key` (leaf or internal), by binary search.
    pub fn count_le(&self, key: u64) -> usize {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Number of keys `< key`, by binary search.
    pub fn count_lt(&self, key: u64) -> usize {
        if key == 0 {
            0
        } else {
            self.count_le(key - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_and_internal_roundtrip() {
        let leaf = Node {
            kind: KIND_DIRENTS,
            level: 0,
            owner: 5,
            body: NodeBody::Leaf(vec![(1, b"abc".to_vec()), (9, vec![]), (10, vec![7; 300])]),
        };
        let mut blk = vec![0u8; 4096];
        leaf.encode(11, 77, &mut blk);
        assert_eq!(Node::decode(11, 77, &blk).unwrap(), leaf);
        assert!(Node::decode(11, 78, &blk).is_err(), "misdirected node accepted");
        let int = Node { kind: KIND_EXTENTS, level: 2, owner: 5, body: NodeBody::Internal(vec![(0, 4), (100, 5)]) };
        int.encode(11, 3, &mut blk);
        assert_eq!(Node::decode(11, 3, &blk).unwrap(), int);
    }

    #[test]
    fn view_agrees_with_decode() {
        let entries: Vec<(u64, Vec<u8>)> = (0..50u64).map(|i| (i * 3 + 1, vec![i as u8; (i % 7) as usize])).collect();
        let leaf = Node { kind: KIND_DIRENTS, level: 0, owner: 5, body: NodeBody::Leaf(entries.clone()) };
        let mut blk = vec![0u8; 4096];
        leaf.encode(11, 77, &mut blk);
        let v = NodeView::parse(77, &blk).unwrap();
        assert_eq!(v.len(), 50);
        for (i, (k, val)) in entries.iter().enumerate() {
            assert_eq!((v.key(i), v.value(i)), (*k, &val[..]));
        }
        for key in 0..160u64 {
            assert_eq!(v.count_le(key), entries.partition_point(|e| e.0 <= key), "count_le {key}");
            assert_eq!(v.count_lt(key), entries.partition_point(|e| e.0 < key), "count_lt {key}");
        }
        let int = Node { kind: KIND_EXTENTS, level: 1, owner: 5, body: NodeBody::Internal(vec![(0, 4), (100, 5)]) };
        int.encode(11, 3, &mut blk);
        let v = NodeView::parse(3, &blk).unwrap();
        assert_eq!((v.level(), v.key(1), v.child(1), v.count_le(99)), (1, 100, 5, 1));
        put_u64(&mut blk, NODE_HEADER, 200);
        assert!(NodeView::parse(3, &blk).is_err(), "descending keys accepted");
    }

    #[test]
    fn empty_values_in_the_largest_block() {
        // The orphan tree stores empty values; in a 64 KiB block the first
        // one starts at offset 65536, which a u16 cannot hold.
        let leaf =
            Node { kind: KIND_ORPHANS, level: 0, owner: 0, body: NodeBody::Leaf(vec![(9, vec![]), (12, vec![])]) };
        let mut blk = vec![0u8; 65536];
        leaf.encode(1, 5, &mut blk);
        assert_eq!(Node::decode(1, 5, &blk).unwrap(), leaf);
        let leaf = Node { body: NodeBody::Leaf(vec![(9, vec![]), (12, vec![1, 2])]), ..leaf };
        leaf.encode(1, 5, &mut blk);
        assert_eq!(Node::decode(1, 5, &blk).unwrap(), leaf);
    }

    #[test]
    fn bad_magic_names_the_block() {
        let blk = vec![0u8; 1024];
        assert_eq!(Node::decode(1, 42, &blk), Err(FormatError::BadMagic { what: "tree node", at: 42 }));
        assert_eq!(NodeView::parse(42, &blk).unwrap_err(), FormatError::BadMagic { what: "tree node", at: 42 });
    }

    #[test]
    #[should_panic(expected = "encoder bug: node of")]
    fn overfull_node_is_a_bug() {
        let int = Node { kind: KIND_EXTENTS, level: 1, owner: 5, body: NodeBody::Internal(vec![(0, 1); 63]) };
        int.encode(1, 1, &mut [0u8; 1024]);
    }

    #[test]
    fn corrupt_offsets_rejected_not_panicking() {
        let leaf = Node { kind: KIND_DIRENTS, level: 0, owner: 5, body: NodeBody::Leaf(vec![(1, b"abc".to_vec())]) };
        let mut blk = vec![0u8; 1024];
        leaf.encode(1, 1, &mut blk);
        put_u16(&mut blk, NODE_HEADER + 8, 1023);
        let c = crc_skipping(1, &blk, 28);
        put_u32(&mut blk, 28, c);
        assert!(Node::decode(1, 1, &blk).is_err());
    }
}
