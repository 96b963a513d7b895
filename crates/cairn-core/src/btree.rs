//! The generic B+tree over the buffer cache (format in
//! `cairn_format::btree`): one implementation for extent maps, directories
//! and the orphan list.
//!
//! Insert splits full nodes bottom-up (a split root grows the tree by one
//! level); remove frees nodes that become empty and collapses a root with a
//! single child, but does not merge half-empty siblings (as many production
//! trees choose: simpler, and space is reclaimed when nodes empty out).
//! Internal key 0 is kept a lower bound of its subtree: inserting a new
//! minimum lowers it on the way down.
//!
//! A split needs new nodes — one for the leaf, one for each full ancestor
//! the split climbs through, one for a new root — and all of them are
//! allocated before the first node changes: an allocation that fails (a
//! full file system) then leaves the tree exactly as it was. (Allocated one
//! by one, a failure above a split leaf left its right half, with its
//! entries, pointed to by no parent.)
//!
//! A leaf takes an insert or a remove in place when it can (a slotted page,
//! `cairn_format::leaf_edit`): the other values stay where they are, so the
//! journal logs a few chunks of the leaf, not most of it. Only a put that no
//! longer fits the leaf's free gap decodes and re-encodes it (packing it, or
//! splitting it).
//!
//! Locking: a tree belongs to one inode (or to the orphan list) and is only
//! touched under that owner's lock; callers hold the transaction gate.

use crate::error::Result;
use crate::meta::Meta;
use crate::tx::Tx;
use cairn_format::btree::{Node, NodeBody, NodeView, MAX_LEVEL};
use cairn_format::leaf_edit;
use cairn_format::FormatError;

/// What an insert does with a key the tree already holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Existing {
    /// Its value is replaced.
    Replace,
    /// The insert fails with `EEXIST`, nothing changed.
    Refuse,
}

/// The full internal nodes directly above a subtree an insert descends
/// into: each splits if the node below does.
#[derive(Clone, Copy, Debug)]
struct FullAbove {
    /// How many.
    nodes: usize,
    /// Whether they reach the root (whose split makes a new root).
    to_root: bool,
}

/// A handle on one tree: which kind, whose, and where new nodes go.
pub struct Tree<'a> {
    pub meta: &'a Meta,
    pub kind: u8,
    pub owner: u64,
    /// Allocation goal for new nodes.
    pub goal: u64,
    /// Nodes allocated minus nodes freed (the owner's block count changes by it).
    pub nodes_delta: i64,
    /// Nodes allocated for the splits of the insert under way.
    spare: Vec<std::sync::Arc<crate::buffer::Buf>>,
}

/// A child must sit exactly one level below its parent.
fn check_level(blk: u64, want: Option<u8>, got: u8) -> Result<()> {
    if want.is_some_and(|l| l != got) {
        return Err(FormatError::corrupt("tree node", blk, "child level does not match its parent").into());
    }
    Ok(())
}

fn child_index(children: &[(u64, u64)], key: u64) -> usize {
    children.partition_point(|(k, _)| *k <= key).saturating_sub(1)
}

impl<'a> Tree<'a> {
    /// A handle on a tree.
    pub fn new(meta: &'a Meta, kind: u8, owner: u64, goal: u64) -> Tree<'a> {
        Tree { meta, kind, owner, goal, nodes_delta: 0, spare: Vec::new() }
    }

    fn load(&self, blk: u64, want_level: Option<u8>) -> Result<(std::sync::Arc<crate::buffer::Buf>, Node)> {
        let buf = self.meta.read_node(blk, self.kind, self.owner)?;
        let node = self.meta.decode_node(&buf)?;
        check_level(blk, want_level, node.level)?;
        Ok((buf, node))
    }

    fn new_node(&mut self, tx: &Tx<'_>) -> Result<std::sync::Arc<crate::buffer::Buf>> {
        // The orphan list must grow even on a full file system: a delete
        // needs it.
        let b = tx.alloc_meta(self.goal, self.kind == cairn_format::btree::KIND_ORPHANS)?;
        self.nodes_delta += 1;
        self.goal = b.blk + 1;
        Ok(b)
    }

    fn free_node(&mut self, tx: &Tx<'_>, blk: u64) -> Result<()> {
        self.nodes_delta -= 1;
        tx.free(blk, 1)
    }

    /// Allocates `n` nodes for the splits ahead, all or none.
    fn reserve_nodes(&mut self, tx: &Tx<'_>, n: usize) -> Result<()> {
        while self.spare.len() < n {
            match self.new_node(tx) {
                Ok(b) => self.spare.push(b),
                Err(e) => {
                    self.release_spare(tx)?;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A node reserved for a split (or a new one).
    fn take_node(&mut self, tx: &Tx<'_>) -> Result<std::sync::Arc<crate::buffer::Buf>> {
        match self.spare.pop() {
            Some(b) => Ok(b),
            None => self.new_node(tx),
        }
    }

    /// Frees the reserved nodes no split took.
    fn release_spare(&mut self, tx: &Tx<'_>) -> Result<()> {
        while let Some(b) = self.spare.pop() {
            self.free_node(tx, b.blk)?;
        }
        Ok(())
    }

    /// The entry with the greatest key `<= key`.
    pub fn floor(&self, root: u64, key: u64) -> Result<Option<(u64, Vec<u8>)>> {
        if root == 0 {
            return Ok(None);
        }
        self.floor_in(root, key, None)
    }

    fn floor_in(&self, blk: u64, key: u64, level: Option<u8>) -> Result<Option<(u64, Vec<u8>)>> {
        let buf = self.meta.read_node(blk, self.kind, self.owner)?;
        let (children, child_level) = {
            let data = buf.read();
            let v = self.view(blk, &data, level)?;
            let i = v.count_le(key);
            if v.level() == 0 {
                return Ok(if i == 0 { None } else { Some((v.key(i - 1), v.value(i - 1).to_vec())) });
            }
            ((0..i.max(1)).rev().map(|j| v.child(j)).collect::<Vec<u64>>(), v.level() - 1)
        };
        for c in children {
            if let Some(r) = self.floor_in(c, key, Some(child_level))? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// The number of entries of `buf` if it is a leaf, `None` if it is an
    /// internal node (checked, at level `want_level` if known).
    fn leaf_len(&self, buf: &crate::buffer::Buf, want_level: Option<u8>) -> Result<Option<usize>> {
        let data = buf.read();
        let v = self.view(buf.blk, &data, want_level)?;
        Ok((v.level() == 0).then(|| v.len()))
    }

    /// A checked view of a cached node (no copy of its entries).
    fn view<'d>(&self, blk: u64, data: &'d [u8], want_level: Option<u8>) -> Result<NodeView<'d>> {
        let v = NodeView::parse(blk, data)?;
        check_level(blk, want_level, v.level())?;
        Ok(v)
    }

    /// Calls `f(key, value)` for every entry with key `>= from`, in order,
    /// until `f` returns false. Returns false if stopped early.
    pub fn scan(&self, root: u64, from: u64, f: &mut dyn FnMut(u64, &[u8]) -> bool) -> Result<bool> {
        if root == 0 {
            return Ok(true);
        }
        self.scan_in(root, from, None, f)
    }

    fn scan_in(&self, blk: u64, from: u64, level: Option<u8>, f: &mut dyn FnMut(u64, &[u8]) -> bool) -> Result<bool> {
        let buf = self.meta.read_node(blk, self.kind, self.owner)?;
        let (children, child_level) = {
            let data = buf.read();
            let v = self.view(blk, &data, level)?;
            if v.level() == 0 {
                // The callback runs under this leaf's read lock: the tree's
                // owner is locked by the caller, so no writer can be waiting.
                for i in v.count_lt(from)..v.len() {
                    if !f(v.key(i), v.value(i)) {
                        return Ok(false);
                    }
                }
                return Ok(true);
            }
            let first = v.count_le(from).saturating_sub(1);
            ((first..v.len()).map(|i| v.child(i)).collect::<Vec<u64>>(), v.level() - 1)
        };
        if child_level == 0 {
            // The leaves come next, in order: read them ahead.
            self.meta.prefetch_nodes(&children);
        }
        for child in children {
            if !self.scan_in(child, from, Some(child_level), f)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Inserts (or replaces) `key`; `root` is updated when the tree grows.
    pub fn insert(&mut self, tx: &Tx<'_>, root: &mut u64, key: u64, value: &[u8]) -> Result<()> {
        self.put(tx, root, key, value, Existing::Replace)
    }

    /// Inserts `key` if the tree does not hold it: one descent where a
    /// lookup then an insert take two. `EEXIST`, with nothing changed, if
    /// it does.
    pub fn insert_new(&mut self, tx: &Tx<'_>, root: &mut u64, key: u64, value: &[u8]) -> Result<()> {
        self.put(tx, root, key, value, Existing::Refuse)
    }

    fn put(&mut self, tx: &Tx<'_>, root: &mut u64, key: u64, value: &[u8], existing: Existing) -> Result<()> {
        if *root == 0 {
            let b = self.new_node(tx)?;
            let node = Node {
                kind: self.kind,
                level: 0,
                owner: self.owner,
                body: NodeBody::Leaf(vec![(key, value.to_vec())]),
            };
            tx.write_node(&b, &node);
            *root = b.blk;
            return Ok(());
        }
        let split = self.insert_in(tx, *root, key, value, existing, None, FullAbove { nodes: 0, to_root: true });
        let split = match split {
            Ok(s) => s,
            Err(e) => {
                self.release_spare(tx)?;
                return Err(e);
            }
        };
        if let Some((sep, right)) = split {
            let (_, old) = self.load(*root, None)?;
            let left_min = match &old.body {
                NodeBody::Leaf(e) => e[0].0,
                NodeBody::Internal(c) => c[0].0,
            };
            if old.level >= MAX_LEVEL {
                return Err(FormatError::corrupt("tree", self.owner, "would exceed the maximum depth").into());
            }
            let b = self.take_node(tx)?;
            let node = Node {
                kind: self.kind,
                level: old.level + 1,
                owner: self.owner,
                body: NodeBody::Internal(vec![(left_min.min(key), *root), (sep, right)]),
            };
            tx.write_node(&b, &node);
            *root = b.blk;
        }
        self.release_spare(tx)
    }

    /// Inserts into the subtree at `blk`, below the full nodes `full_above`
    /// (each splits if this node does). A split returns (separator, new
    /// right node). With [`Existing::Refuse`], a key already there is
    /// `EEXIST`: found in the leaf before anything changed (nodes above
    /// change only for a key below all of theirs, which no leaf holds).
    #[allow(clippy::too_many_arguments)]
    fn insert_in(
        &mut self,
        tx: &Tx<'_>,
        blk: u64,
        key: u64,
        value: &[u8],
        existing: Existing,
        level: Option<u8>,
        full_above: FullAbove,
    ) -> Result<Option<(u64, u64)>> {
        let bs = self.meta.bs();
        let buf = self.meta.read_node(blk, self.kind, self.owner)?;
        if self.leaf_len(&buf, level)?.is_some() {
            if existing == Existing::Refuse && leaf_edit::leaf_contains(&buf.read(), key) {
                return Err(crate::error::FsError::Errno(libc::EEXIST));
            }
            let seed = self.meta.seed();
            let put = |d: &mut [u8]| leaf_edit::leaf_put_logged(seed, d, key, value).map_or((false, 0), |m| (true, m));
            if tx.modify_mapped(&buf, put) {
                return Ok(None);
            }
        } else {
            // An internal node changes only when its first key drops or its
            // child splits: descend reading it in place, decode only then.
            let (child, child_level, n, first) = {
                let data = buf.read();
                let v = self.view(blk, &data, level)?;
                (v.child(v.count_le(key).saturating_sub(1)), v.level() - 1, v.len(), v.key(0))
            };
            let full = Node::internal_bytes(n + 1) > bs;
            let above = if full {
                FullAbove { nodes: full_above.nodes + 1, ..full_above }
            } else {
                FullAbove { nodes: 0, to_root: false }
            };
            let split = self.insert_in(tx, child, key, value, existing, Some(child_level), above)?;
            if split.is_none() && key >= first {
                return Ok(None);
            }
            return self.change_internal(tx, &buf, key, split);
        }
        // A leaf the entry does not fit in: it splits.
        let mut node = self.meta.decode_node(&buf)?;
        match &mut node.body {
            NodeBody::Leaf(e) => {
                match e.binary_search_by_key(&key, |x| x.0) {
                    Ok(_) if existing == Existing::Refuse => return Err(crate::error::FsError::Errno(libc::EEXIST)),
                    Ok(i) => e[i].1 = value.to_vec(),
                    Err(i) => e.insert(i, (key, value.to_vec())),
                }
                if Node::leaf_bytes(e) <= bs {
                    tx.write_node(&buf, &node);
                    return Ok(None);
                }
                let half = Node::leaf_bytes(e) / 2;
                let mut acc = 0;
                let mut mid = 1;
                for (i, (_, v)) in e.iter().enumerate() {
                    acc += 12 + v.len();
                    if acc >= half {
                        mid = (i + 1).clamp(1, e.len() - 1);
                        break;
                    }
                }
                // Every node this split needs, before anything changes.
                self.reserve_nodes(tx, 1 + full_above.nodes + usize::from(full_above.to_root))?;
                let nb = self.take_node(tx)?;
                let right: Vec<_> = e.split_off(mid);
                let sep = right[0].0;
                tx.write_node(&buf, &node);
                tx.write_node(&nb, &Node { kind: self.kind, level: 0, owner: self.owner, body: NodeBody::Leaf(right) });
                Ok(Some((sep, nb.blk)))
            }
            NodeBody::Internal(_) => {
                Err(FormatError::corrupt("tree node", blk, "changed level under its owner's lock").into())
            }
        }
    }

    /// Writes into internal node `buf` what an insert of `key` below it
    /// changed: a first key lowered to `key`, and the split of the child
    /// it went into (separator, new node); the node splits in turn when it
    /// overflows (its caller reserved the node: `full_above`).
    fn change_internal(
        &mut self,
        tx: &Tx<'_>,
        buf: &std::sync::Arc<crate::buffer::Buf>,
        key: u64,
        split: Option<(u64, u64)>,
    ) -> Result<Option<(u64, u64)>> {
        let mut node = self.meta.decode_node(buf)?;
        let lvl = node.level;
        let NodeBody::Internal(c) = &mut node.body else {
            return Err(FormatError::corrupt("tree node", buf.blk, "changed level under its owner's lock").into());
        };
        let i = child_index(c, key);
        if key < c[0].0 {
            c[0].0 = key;
        }
        if let Some((sep, nb)) = split {
            c.insert(i + 1, (sep, nb));
        }
        if Node::internal_bytes(c.len()) <= self.meta.bs() {
            tx.write_node(buf, &node);
            return Ok(None);
        }
        let nb = self.take_node(tx)?;
        let right: Vec<_> = c.split_off(c.len() / 2);
        let sep = right[0].0;
        tx.write_node(buf, &node);
        tx.write_node(&nb, &Node { kind: self.kind, level: lvl, owner: self.owner, body: NodeBody::Internal(right) });
        Ok(Some((sep, nb.blk)))
    }

    /// Removes `key`, returning its value; `root` becomes 0 when the tree empties.
    pub fn remove(&mut self, tx: &Tx<'_>, root: &mut u64, key: u64) -> Result<Option<Vec<u8>>> {
        if *root == 0 {
            return Ok(None);
        }
        let (v, empty) = self.remove_in(tx, *root, key, None)?;
        if empty {
            *root = 0;
            return Ok(v);
        }
        // Collapse a root that has a single child (read in place: the root
        // is nearly always a leaf or has several children).
        loop {
            let buf = self.meta.read_node(*root, self.kind, self.owner)?;
            let only_child = {
                let data = buf.read();
                let v = self.view(*root, &data, None)?;
                (v.level() > 0 && v.len() == 1).then(|| v.child(0))
            };
            let Some(child) = only_child else { break };
            let old = *root;
            *root = child;
            self.free_node(tx, old)?;
        }
        Ok(v)
    }

    fn remove_in(&mut self, tx: &Tx<'_>, blk: u64, key: u64, level: Option<u8>) -> Result<(Option<Vec<u8>>, bool)> {
        let buf = self.meta.read_node(blk, self.kind, self.owner)?;
        // Read in place where the key goes: an internal node changes only
        // when the child it descends into empties, and a leaf that keeps an
        // entry loses this one in place; only those rare changes decode.
        let (leaf_len, descend) = {
            let data = buf.read();
            let v = self.view(blk, &data, level)?;
            if v.level() == 0 {
                (v.len(), None)
            } else {
                (0, Some((v.child(v.count_le(key).saturating_sub(1)), v.level() - 1)))
            }
        };
        if let Some((child, child_level)) = descend {
            let (v, empty) = self.remove_in(tx, child, key, Some(child_level))?;
            if !empty {
                return Ok((v, false));
            }
            let mut node = self.meta.decode_node(&buf)?;
            let NodeBody::Internal(c) = &mut node.body else {
                return Err(FormatError::corrupt("tree node", blk, "changed level under its owner's lock").into());
            };
            c.remove(child_index(c, key));
            if c.is_empty() {
                self.free_node(tx, blk)?;
                return Ok((v, true));
            }
            tx.write_node(&buf, &node);
            return Ok((v, false));
        }
        if leaf_len > 1 {
            let seed = self.meta.seed();
            let remove =
                |d: &mut [u8]| leaf_edit::leaf_remove_logged(seed, d, key).map_or((None, 0), |(v, m)| (Some(v), m));
            return Ok((tx.modify_mapped(&buf, remove), false));
        }
        // A leaf of one entry: freed when it is the key.
        let (found, value) = {
            let data = buf.read();
            let v = self.view(blk, &data, level)?;
            let found = v.len() == 1 && v.key(0) == key;
            (found, if found { v.value(0).to_vec() } else { Vec::new() })
        };
        if !found {
            return Ok((None, false));
        }
        self.free_node(tx, blk)?;
        Ok((Some(value), true))
    }

    /// Frees every node of the tree (its entries must already be released).
    pub fn destroy(&mut self, tx: &Tx<'_>, root: u64) -> Result<()> {
        if root == 0 {
            return Ok(());
        }
        let (_, node) = self.load(root, None)?;
        if let NodeBody::Internal(c) = &node.body {
            for &(_, child) in c {
                self.destroy(tx, child)?;
            }
        }
        self.free_node(tx, root)
    }
}

/// Levels of the tree rooted at `root` (0 = empty): the root's level + 1
/// (what `journal::credits` takes).
pub fn levels(meta: &Meta, root: u64, kind: u8, owner: u64) -> Result<u64> {
    if root == 0 {
        return Ok(0);
    }
    let buf = meta.read_node(root, kind, owner)?;
    let level = buf.read()[5];
    Ok(u64::from(level) + 1)
}
