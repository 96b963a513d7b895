//! Editing an encoded B+tree leaf in place, as a slotted page.
//!
//! [`Node::encode`](crate::btree::Node::encode) packs the values from the
//! block's end in slot order, so a key inserted in the middle of a leaf moves
//! every value after it: most of the block changes, and the journal, which
//! logs only the 64-byte chunks that changed, logs most of the block. The
//! leaf format already lets a value sit anywhere past the slot array (see
//! [`NodeView::parse`](crate::btree::NodeView::parse)), which makes it a
//! slotted page: these edits keep every other value where it is.
//!
//! - **Put** writes the new value just below the lowest value in the block
//!   and shifts only the slots after the new key's by one slot; a value
//!   replaced by one no longer than itself is overwritten where it is.
//! - **Remove** shifts the slots after the key down by one and leaves the
//!   value's bytes where they were, unreferenced.
//!
//! An insert then changes the header's chunk (count, checksum), the chunks of
//! the slots it shifts, and one or two chunks of value, instead of most of
//! the block. Unreferenced value bytes are reclaimed when a put no longer
//! fits the gap between the slots and the lowest value: the caller then
//! decodes and re-encodes the node, which packs it again (or splits it).
//!
//! Both edits keep the node exactly as valid as `encode` makes it (keys
//! strictly ascending, every value inside the block past the slots) and
//! stamp the checksum; a node that does not decode is never edited (the
//! caller parses it first).

use crate::btree::{LEAF_SLOT, NODE_HEADER};
use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::journal::range_chunks;

/// Offset of the node's crc32c (see `btree`).
const CSUM_OFF: usize = 28;

fn slot(i: usize) -> usize {
    NODE_HEADER + i * LEAF_SLOT
}

/// Index of the first slot whose key is `>= key` in the `n`-slot leaf `b`.
fn lower_bound(b: &[u8], n: usize, key: u64) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if get_u64(b, slot(mid)) < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The lowest value offset of the leaf (the block's end, as a u16 can hold
/// it, when there are no values): new values go just below it.
fn lowest_value(b: &[u8], n: usize) -> usize {
    (0..n).map(|i| usize::from(get_u16(b, slot(i) + 8))).min().unwrap_or(b.len().min(usize::from(u16::MAX)))
}

fn stamp(seed: u32, b: &mut [u8]) {
    let c = crc_skipping(seed, b, CSUM_OFF);
    put_u32(b, CSUM_OFF, c);
}

/// The journal chunks (see [`crate::journal::range_chunks`]) of a leaf's
/// header, where its count and checksum are, and of `range`.
fn written(b: &[u8], range: std::ops::Range<usize>) -> u64 {
    range_chunks(b.len(), 0, NODE_HEADER) | range_chunks(b.len(), range.start, range.len())
}

/// Puts `key` → `value` into the valid leaf `b` in place (see the module
/// essay). Returns false, with `b` untouched, when it does not fit without
/// moving other values.
pub fn leaf_put(seed: u32, b: &mut [u8], key: u64, value: &[u8]) -> bool {
    leaf_put_logged(seed, b, key, value).is_some()
}

/// As [`leaf_put`], returning the journal chunks of every byte it wrote
/// (the header, the slots from the key's on, the value), or `None` with
/// `b` untouched: the caller logs those without comparing the block with
/// a copy of itself.
pub fn leaf_put_logged(seed: u32, b: &mut [u8], key: u64, value: &[u8]) -> Option<u64> {
    let n = usize::from(get_u16(b, 6));
    let i = lower_bound(b, n, key);
    let found = i < n && get_u64(b, slot(i)) == key;
    let low = lowest_value(b, n);
    let slots_end = slot(n + usize::from(!found));
    let s = slot(i);
    let map = if found {
        let (off, len) = (usize::from(get_u16(b, s + 8)), usize::from(get_u16(b, s + 10)));
        let map = if value.len() <= len {
            b[off..off + value.len()].copy_from_slice(value);
            written(b, off..off + value.len())
        } else if low >= slots_end + value.len() {
            let at = low - value.len();
            b[at..low].copy_from_slice(value);
            put_u16(b, s + 8, at as u16);
            written(b, at..low)
        } else {
            return None;
        };
        put_u16(b, s + 10, value.len() as u16);
        map | written(b, s..s + LEAF_SLOT)
    } else {
        if n == usize::from(u16::MAX) || low < slots_end + value.len() {
            return None;
        }
        let at = low - value.len();
        b[at..low].copy_from_slice(value);
        b.copy_within(s..slot(n), s + LEAF_SLOT);
        put_u64(b, s, key);
        put_u16(b, s + 8, at as u16);
        put_u16(b, s + 10, value.len() as u16);
        put_u16(b, 6, (n + 1) as u16);
        written(b, at..low) | written(b, s..slots_end)
    };
    stamp(seed, b);
    Some(map)
}

/// Whether the valid leaf `b` holds `key`.
pub fn leaf_contains(b: &[u8], key: u64) -> bool {
    let n = usize::from(get_u16(b, 6));
    let i = lower_bound(b, n, key);
    i < n && get_u64(b, slot(i)) == key
}

/// Removes `key` from the valid leaf `b` in place, returning its value
/// (`None`, with `b` untouched, if the leaf has no such key).
pub fn leaf_remove(seed: u32, b: &mut [u8], key: u64) -> Option<Vec<u8>> {
    leaf_remove_logged(seed, b, key).map(|(v, _)| v)
}

/// As [`leaf_remove`], also returning the journal chunks of every byte it
/// wrote (the header and the slots from the key's on).
pub fn leaf_remove_logged(seed: u32, b: &mut [u8], key: u64) -> Option<(Vec<u8>, u64)> {
    let n = usize::from(get_u16(b, 6));
    let i = lower_bound(b, n, key);
    if i == n || get_u64(b, slot(i)) != key {
        return None;
    }
    let s = slot(i);
    let (off, len) = (usize::from(get_u16(b, s + 8)), usize::from(get_u16(b, s + 10)));
    let value = b[off..off + len].to_vec();
    b.copy_within(s + LEAF_SLOT..slot(n), s);
    b[slot(n - 1)..slot(n)].fill(0);
    put_u16(b, 6, (n - 1) as u16);
    stamp(seed, b);
    Some((value, written(b, s..slot(n))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::{Node, NodeBody, KIND_DIRENTS};
    use crate::test_rng::Rng;
    use std::collections::BTreeMap;

    fn encode(seed: u32, blk: u64, size: usize, model: &BTreeMap<u64, Vec<u8>>) -> Vec<u8> {
        let node = Node {
            kind: KIND_DIRENTS,
            level: 0,
            owner: 9,
            body: NodeBody::Leaf(model.iter().map(|(k, v)| (*k, v.clone())).collect()),
        };
        let mut b = vec![0u8; size];
        node.encode(seed, blk, &mut b);
        b
    }

    /// Random puts and removes, in place where they fit and re-encoded
    /// where they do not, always decode to the model; in place, an insert
    /// changes far fewer bytes than a re-encode.
    #[test]
    fn in_place_edits_agree_with_a_model() {
        for (size, rounds) in [(1024usize, 3000), (4096, 6000), (65536, 3000)] {
            let (seed, blk) = (7u32, 42u64);
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ size as u64);
            let mut model = BTreeMap::new();
            let mut b = encode(seed, blk, size, &model);
            let (mut in_place, mut repacked) = (0, 0);
            for _ in 0..rounds {
                let key = rng.next() % 300;
                let before = b.clone();
                // Every byte an edit changes lies in the chunks it reports.
                let covered = |map: u64, after: &[u8]| {
                    let changed = crate::journal::changed_chunks(size, 0, &before, after);
                    assert_eq!(changed & !map, 0, "changed chunks {changed:#x} outside the reported {map:#x}");
                };
                if rng.next().is_multiple_of(3) {
                    let want = model.remove(&key);
                    let got = leaf_remove_logged(seed, &mut b, key);
                    if let Some((_, map)) = &got {
                        covered(*map, &b);
                    }
                    assert_eq!(got.map(|(v, _)| v), want, "remove {key}");
                } else {
                    let v: Vec<u8> = (0..rng.next() % 60).map(|_| rng.next() as u8).collect();
                    let mut next = model.clone();
                    next.insert(key, v.clone());
                    if Node::leaf_bytes(&next.iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>()) > size {
                        continue; // would need a split: not a leaf edit
                    }
                    if let Some(map) = leaf_put_logged(seed, &mut b, key, &v) {
                        covered(map, &b);
                        in_place += 1;
                    } else {
                        b = encode(seed, blk, size, &next);
                        repacked += 1;
                    }
                    model = next;
                }
                let node = Node::decode(seed, blk, &b).expect("an edited leaf decodes");
                let NodeBody::Leaf(entries) = node.body else { panic!("not a leaf") };
                assert!(entries.iter().map(|(k, v)| (k, v)).eq(model.iter()), "leaf differs from the model");
            }
            assert!(in_place > repacked, "{size}: {in_place} puts in place, {repacked} re-encoded");
        }
    }

    #[test]
    fn an_insert_in_place_changes_few_bytes() {
        let model: BTreeMap<u64, Vec<u8>> = (0..60u64).map(|k| (k * 10, vec![k as u8; 40])).collect();
        let old = encode(1, 5, 4096, &model);
        let mut b = old.clone();
        assert!(leaf_put(1, &mut b, 15, &[0xaa; 40]));
        let changed = old.iter().zip(&b).filter(|(x, y)| x != y).count();
        let mut next = model.clone();
        next.insert(15, vec![0xaa; 40]);
        let repacked = encode(1, 5, 4096, &next);
        let changed_by_encode = old.iter().zip(&repacked).filter(|(x, y)| x != y).count();
        assert!(changed * 4 < changed_by_encode, "in place {changed} bytes, re-encoded {changed_by_encode}");
        assert_eq!(Node::decode(1, 5, &b).unwrap(), Node::decode(1, 5, &repacked).unwrap());
    }

    #[test]
    fn a_put_that_does_not_fit_leaves_the_block_alone() {
        let model: BTreeMap<u64, Vec<u8>> = (0..20u64).map(|k| (k, vec![1; 36])).collect();
        let old = encode(1, 5, 1024, &model);
        let mut b = old.clone();
        assert!(!leaf_put(1, &mut b, 100, &[2; 200]));
        assert_eq!(b, old);
        assert_eq!(leaf_remove(1, &mut b, 1000), None);
        assert_eq!(b, old);
    }
}
