//! Walking and verifying one B+tree (extent map, directory, orphan list).
//!
//! ## Purpose
//! All three trees cairn keeps share one node format (`cairn_format::btree`).
//! [`walk`] visits every node of one tree from its root and checks what the
//! format promises:
//!
//! * every node pointer lies in the data area (not fixed metadata, not past
//!   the end of the image);
//! * every node decodes: magic, crc32c, its own block number, slot and value
//!   bounds, keys strictly ascending (the format decoder checks these);
//! * the node belongs to this tree: the expected kind and owner inode;
//! * levels: the root may be at any level up to `MAX_LEVEL`; each child is
//!   exactly one level below its parent, so all leaves are at the same depth;
//! * key ranges: every key of child `i` (internal keys included) lies in
//!   `[key_i, key_{i+1})` of its parent, and within the parent's own range —
//!   key 0 of an internal node is a lower bound of its subtree;
//! * no node is empty (the engine frees empty nodes; an empty tree is root 0);
//! * no node is reached twice (a DAG or a loop in a damaged tree).
//!
//! ## Bounds on damaged input
//! Recursion depth is bounded by the level rule (levels strictly decrease
//! from at most `MAX_LEVEL`), and by an explicit depth cap as well; the
//! visited set stops loops and shared subtrees; every node read is one block.
//!
//! ## What it concludes
//! The blocks the tree occupies (to be claimed by its owner, including
//! pointed-at nodes that failed to decode — the block is still referenced),
//! its leaf entries in key order, and whether the walk was complete. Each
//! defect becomes a problem naming the tree ("inode 12's extent tree: node
//! 5000: ...").

use crate::image::Image;
use crate::problems::{Code, Pass};
use crate::report::Report;
use cairn_format::btree::KIND_DIRENTS;
use cairn_format::btree::{Node, NodeBody, MAX_LEVEL};
use cairn_format::layout::Geometry;
use std::collections::HashSet;

/// What a walk found.
#[derive(Debug, Default)]
pub struct TreeWalk {
    /// Node blocks referenced by the tree (in range), each once.
    pub nodes: Vec<u64>,
    /// Leaf entries in key order: (leaf block, key, value).
    pub entries: Vec<(u64, u64, Vec<u8>)>,
    /// Every node decoded and verified.
    pub complete: bool,
    /// Entries of leaves whose checksum fails but whose structure parses
    /// as a leaf of this tree (directory trees only): (leaf, key, value).
    /// Not trusted: a repair keeps only those that pass every entry check.
    pub salvageable: Vec<(u64, u64, Vec<u8>)>,
}

struct Walker<'a, 'i> {
    img: &'a mut Image<'i>,
    report: &'a mut Report,
    geo: &'a Geometry,
    seed: u32,
    kind: u8,
    owner: u64,
    label: &'a str,
    pass: Pass,
    seen: HashSet<u64>,
    out: TreeWalk,
}

impl Walker<'_, '_> {
    fn bad(&mut self, msg: String) {
        self.out.complete = false;
        self.report.push_in(self.pass, Code::TreeDamaged, format!("{}: {msg}", self.label), false);
    }

    /// Visits node `blk`, expected at `level` (None for the root), whose keys
    /// must lie in `[lo, hi)` (`hi` None = unbounded).
    fn visit(&mut self, blk: u64, level: Option<u8>, lo: u64, hi: Option<u64>, depth: u32) {
        if depth > u32::from(MAX_LEVEL) + 1 {
            return self.bad(format!("tree deeper than {} levels at node {blk}", MAX_LEVEL + 1));
        }
        if !self.geo.valid_data_range(blk, 1) {
            return self.bad(format!("node pointer {blk} lies outside the data area"));
        }
        if !self.seen.insert(blk) {
            return self.bad(format!("node {blk} is reached twice (the tree has a loop or a shared subtree)"));
        }
        self.out.nodes.push(blk);
        let data = match self.img.read_block(blk) {
            Ok(d) => d,
            Err(e) => return self.bad(format!("node {blk} cannot be read: {e}")),
        };
        let node = match Node::decode(self.seed, blk, &data) {
            Ok(n) => n,
            Err(e) => {
                if self.kind == KIND_DIRENTS && level.is_none_or(|l| l == 0) {
                    if let Ok(n) = Node::parse(blk, &data) {
                        if let (NodeBody::Leaf(entries), true) = (n.body, n.kind == self.kind && n.owner == self.owner)
                        {
                            self.out.salvageable.extend(entries.into_iter().map(|(k, v)| (blk, k, v)));
                        }
                    }
                }
                return self.bad(format!("node {blk} is damaged ({e})"));
            }
        };
        if node.kind != self.kind || node.owner != self.owner {
            return self.bad(format!(
                "node {blk} belongs to another tree (kind {}, owner {}; expected kind {}, owner {})",
                node.kind, node.owner, self.kind, self.owner
            ));
        }
        if let Some(l) = level {
            if node.level != l {
                return self.bad(format!("node {blk} is at level {}, but its parent expects level {l}", node.level));
            }
        }
        if node.is_empty() {
            self.bad(format!("node {blk} is empty"));
            return;
        }
        let keys: Vec<u64> = match &node.body {
            NodeBody::Leaf(e) => e.iter().map(|x| x.0).collect(),
            NodeBody::Internal(c) => c.iter().map(|x| x.0).collect(),
        };
        let first = keys[0];
        let last = keys[keys.len() - 1];
        if first < lo || hi.is_some_and(|h| last >= h) {
            let hi_s = hi.map_or("end".to_string(), |h| h.to_string());
            self.bad(format!("node {blk} holds keys {first}..={last}, outside its parent's range [{lo}, {hi_s})"));
        }
        match node.body {
            NodeBody::Leaf(e) => {
                for (k, v) in e {
                    self.out.entries.push((blk, k, v));
                }
            }
            NodeBody::Internal(c) => {
                if node.level == 0 {
                    return;
                }
                for (i, &(k, child)) in c.iter().enumerate() {
                    let next = c.get(i + 1).map(|x| x.0).or(hi);
                    self.visit(child, Some(node.level - 1), k.max(lo), next, depth + 1);
                }
            }
        }
    }
}

/// Walks the tree of `kind` owned by `owner` from `root` (non-zero).
/// `label` names the tree in messages ("inode 12's extent tree").
#[allow(clippy::too_many_arguments)]
pub fn walk(
    img: &mut Image,
    report: &mut Report,
    geo: &Geometry,
    seed: u32,
    kind: u8,
    owner: u64,
    root: u64,
    label: &str,
    pass: Pass,
) -> TreeWalk {
    let mut w = Walker {
        img,
        report,
        geo,
        seed,
        kind,
        owner,
        label,
        pass,
        seen: HashSet::new(),
        out: TreeWalk { complete: true, ..Default::default() },
    };
    w.visit(root, None, 0, None, 0);
    w.out
}

/// Rewrites the leaf `blk` with `f` applied to its entries (repair). Fails
/// (returns false) if the leaf no longer decodes, would become empty, or
/// would not fit.
pub fn rewrite_leaf(
    img: &mut Image,
    seed: u32,
    blk: u64,
    f: impl FnOnce(&mut Vec<(u64, Vec<u8>)>),
) -> std::io::Result<bool> {
    let data = img.read_block(blk)?;
    let Ok(mut node) = Node::decode(seed, blk, &data) else { return Ok(false) };
    let NodeBody::Leaf(entries) = &mut node.body else { return Ok(false) };
    f(entries);
    if entries.is_empty() || Node::leaf_bytes(entries) > data.len() || entries.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Ok(false);
    }
    let mut out = vec![0u8; data.len()];
    node.encode(seed, blk, &mut out);
    img.write_block(blk, &out)?;
    Ok(true)
}
