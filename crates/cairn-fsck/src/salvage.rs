//! Pass 3 (repair only): salvaging damaged directories and reconnecting
//! lost inodes to `/lost+found`.
//!
//! ## Purpose
//! e2fsck's promise: after a repair the file system is consistent, the
//! undamaged files are all still there, and what lost its name is in
//! `/lost+found`. Two repairs serve it here:
//!
//! * **A tree that is damaged** (a node that does not verify, a bad
//!   pointer, a wrong level) while its inode is sound is *rebuilt*: a
//!   directory's from every entry that could be read, a file's extent tree
//!   from every extent that could be read (the range the damaged nodes
//!   mapped reads as a hole, the file's size is kept). The new tree goes
//!   into blocks nobody claims and the bitmap calls free; the old readable
//!   nodes are released by pass 5, and so are the damaged ones and the
//!   data blocks only they mapped (nobody claims them once the inode's
//!   ownership is complete again). The entries of a damaged directory leaf
//!   are lost with it, so their inodes become lost and are reconnected
//!   below.
//! * What a damaged tree still holds is gathered first: a directory leaf
//!   whose checksum fails but that still parses as a leaf of this tree
//!   gives its entries, and pass 2 keeps each one only if its key matches
//!   its name, its name is not there twice, and it names a live inode of
//!   its type (one flipped byte then loses one entry, not a leaf); and
//!   leaves the damaged tree no longer reaches are found by their owner
//!   field ([`recover_leaves`]).
//! * A root inode that does not decode is recreated empty (pass 1), and
//!   everything it named is reconnected as below.
//! * **Lost inodes** — a file with links that no entry names, a directory
//!   no entry names — get an entry `#INO` in `/lost+found`, which is created
//!   (mode 0700, in the root) if it is missing. A directory's `..` then
//!   points at `/lost+found`, and directories below it become reachable
//!   again. This is done only when every directory could be read (no
//!   undecodable inode, no damaged tree left): otherwise an inode's entry
//!   may be in what could not be read, and a second name would be wrong.
//!
//! ## When things are written
//! Deciding happens here, before the link-count pass, so that pass counts
//! the new entries; the new `/lost+found` inode is written at once (its slot
//! was free). The trees are written by [`write_trees`] from `repair`,
//! before the inode fixes that point the directories at them. Each tree is
//! packed from the sorted entries, leaves first, then internal levels (the
//! node format is `cairn_format::btree`'s; keys and values are kept as they
//! were, so readdir cookies of surviving entries do not change).

use crate::ctx::{Ctx, DirentFix, DirentRec, InodeInfo, Owner};
use crate::error::FsckError;
use crate::groups;
use crate::inodes::type_name;
use crate::inodes::{check_extents, write_empty_dir};
use crate::problems::{Code, Pass};
use cairn_format::btree::{Node, NodeBody, INTERNAL_ENTRY, KIND_DIRENTS, KIND_EXTENTS, NODE_HEADER, NODE_MAGIC};
use cairn_format::codec::get_u32;
use cairn_format::dirent::{dtype_of_mode, hash_key_base, hash_key_end, name_hash, Dirent};
use cairn_format::extent::{Extent, EXTENT_VALUE_SIZE};
use cairn_format::{FIRST_INO, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};

/// Name of the directory lost inodes go to.
pub const LOST_FOUND: &[u8] = b"lost+found";

/// Finds the leaves a damaged tree no longer reaches (repair, after pass 1,
/// before pass 2): every block marked used in a verified bitmap that nobody
/// claims and that holds a verified level-0 node of the tree's kind and
/// owner. Each node names its owner and its own block, so such a leaf is a
/// live part of that tree (a freed node's block is clear in the bitmap),
/// and its entries go into the rebuild: a directory's are checked by pass 2
/// like any others, a file's extents are checked and claimed here.
pub fn recover_leaves(ctx: &mut Ctx) -> Result<(), FsckError> {
    let targets: BTreeMap<u64, u8> = ctx
        .inodes
        .iter()
        .filter(|(_, i)| i.tree_damaged && !i.damaged && !i.bad)
        .map(|(k, i)| (*k, if i.is_dir() { KIND_DIRENTS } else { KIND_EXTENTS }))
        .collect();
    if targets.is_empty() {
        return Ok(());
    }
    let free = FreeBlocks::new(ctx);
    let bs = ctx.geo.block_size as usize;
    let mut found: Vec<(u64, Node)> = Vec::new();
    for g in 0..ctx.geo.group_count {
        let Some((bm, true)) = groups::read_block_bitmap(ctx, g)? else { continue };
        let start = ctx.geo.group_start(g);
        for i in 0..ctx.geo.group_len(g) {
            let b = start + i;
            if bm[(i / 8) as usize] >> (i % 8) & 1 == 0
                || !ctx.geo.valid_data_range(b, 1)
                || FreeBlocks::is_claimed(&free.claimed, b)
            {
                continue;
            }
            let data = ctx.img.read_block(b)?;
            if data.len() < bs || get_u32(&data, 0) != NODE_MAGIC {
                continue;
            }
            let Ok(node) = Node::decode(ctx.seed, b, &data) else { continue };
            if node.level == 0 && targets.get(&node.owner) == Some(&node.kind) {
                found.push((b, node));
            }
        }
    }
    for (blk, node) in found {
        let NodeBody::Leaf(entries) = node.body else { continue };
        let ino = node.owner;
        if node.kind == KIND_DIRENTS {
            let have: BTreeSet<u64> = ctx.dirents.iter().filter(|r| r.dir == ino).map(|r| r.key).collect();
            let new: Vec<(u64, Vec<u8>)> = entries.into_iter().filter(|(k, _)| !have.contains(k)).collect();
            if new.is_empty() {
                continue;
            }
            let n = new.len();
            for (key, value) in new {
                ctx.dirents.push(DirentRec { dir: ino, leaf: blk, key, value, salvaged: false });
            }
            ctx.claim(blk, 1, Owner::DirNode(ino));
            if let Some(i) = ctx.inodes.get_mut(&ino) {
                i.dirents_found += n as u64;
                i.counted += 1;
                i.tree_nodes += 1;
            }
            let msg = format!(
                "directory {ino}: {n} entries recovered from leaf {blk}, which its damaged tree no longer reaches"
            );
            ctx.report.push(Code::DirLeafRecovered, msg, true);
        } else {
            let Some(info) = ctx.inodes.get(&ino) else { continue };
            let mut taken: Vec<(u64, u64)> = info
                .tree_entries
                .iter()
                .filter(|(_, v)| v.len() == EXTENT_VALUE_SIZE)
                .map(|(k, v)| (*k, k + u64::from(Extent::decode_value(*k, v).len)))
                .collect();
            let mut list = Vec::new();
            let mut sound = true;
            for (k, v) in &entries {
                if v.len() != EXTENT_VALUE_SIZE {
                    sound = false;
                    break;
                }
                let e = Extent::decode_value(*k, v);
                let end = k.saturating_add(u64::from(e.len));
                if e.len == 0 || taken.iter().any(|&(s, t)| *k < t && s < end) {
                    sound = false;
                    break;
                }
                taken.push((*k, end));
                list.push(e);
            }
            if !sound || list.is_empty() {
                continue;
            }
            let (n, ok) = check_extents(ctx, ino, &list, "recovered");
            if !ok {
                // Reported by check_extents; the inode is damaged now and
                // is not rebuilt.
                if let Some(i) = ctx.inodes.get_mut(&ino) {
                    i.damaged = true;
                }
                continue;
            }
            ctx.claim(blk, 1, Owner::ExtentNode(ino));
            if let Some(i) = ctx.inodes.get_mut(&ino) {
                i.tree_entries.extend(entries);
                i.counted += n + 1;
                i.tree_nodes += 1;
            }
            let msg = format!(
                "inode {ino}: {} extents recovered from leaf {blk}, which its damaged tree no longer reaches",
                list.len()
            );
            ctx.report.push(Code::ExtentLeafRecovered, msg, true);
        }
    }
    Ok(())
}

/// Decides the rebuilds and reconnections (see the module essay).
pub fn run(ctx: &mut Ctx) -> Result<(), FsckError> {
    rebuild_damaged_trees(ctx);
    let blind = ctx.inodes.values().any(|i| i.bad || (i.is_dir() && (i.damaged || i.tree_damaged)));
    if blind {
        return Ok(());
    }
    let lost = lost_inodes(ctx);
    if lost.is_empty() {
        return Ok(());
    }
    let lf = match find_lost_found(ctx) {
        Some(lf) => lf,
        None => match create_lost_found(ctx)? {
            Some(lf) => lf,
            None => return Ok(()),
        },
    };
    let mut keys = keys_of(ctx, lf);
    for ino in lost {
        let name = format!("#{ino}").into_bytes();
        let Some(key) = free_key(ctx, &keys, &name) else { continue };
        keys.insert(key);
        let Some(info) = ctx.inodes.get_mut(&ino) else { continue };
        let (mode, is_dir) = (info.mode, info.is_dir());
        info.refs += 1;
        info.reachable = true;
        if is_dir {
            info.parents = vec![lf];
            if info.parent != lf {
                ctx.fix(ino).parent = Some(lf);
            }
        }
        let value = Dirent { ino, dtype: dtype_of_mode(mode), name: name.clone() }.encode();
        ctx.rebuilds.entry(lf).or_default().push((key, value));
        let l = ctx.inodes.get_mut(&lf).expect("lost+found is in use");
        l.dirents_found += 1;
        if is_dir {
            l.subdirs += 1;
        }
        let msg = format!("inode {ino} ({}) is in no directory: reconnected as /lost+found/#{ino}", type_name(mode));
        ctx.report.push(Code::Reconnected, msg, true);
    }
    reach_through_reconnected(ctx);
    Ok(())
}

/// Marks every inode with a damaged tree (and an otherwise sound inode)
/// for a rebuild: a directory's from the entries that could be read, a
/// file's from the extents that could be read (what was mapped under the
/// damaged nodes then reads as a hole).
fn rebuild_damaged_trees(ctx: &mut Ctx) {
    let mut inos: Vec<u64> = ctx
        .inodes
        .iter()
        .filter(|(_, i)| i.tree_damaged && !i.damaged && !i.bad && !i.freed)
        .map(|(k, _)| *k)
        .collect();
    inos.sort_unstable();
    for ino in inos {
        let (is_dir, kept) = {
            let i = ctx.inodes.get_mut(&ino).expect("listed above");
            i.tree_damaged = false;
            (i.is_dir(), if i.is_dir() { i.dirents_found } else { i.tree_entries.len() as u64 })
        };
        ctx.incomplete_trees.remove(&ino);
        ctx.rebuilds.entry(ino).or_default();
        let (prefix, msg) = if is_dir {
            (
                format!("directory {ino}'s entry tree"),
                format!("directory {ino}: entry tree rebuilt from the {kept} entries that could be read"),
            )
        } else {
            (
                format!("inode {ino}'s extent tree"),
                format!("inode {ino}: extent tree rebuilt from the {kept} extents that could be read (the rest of the file reads as holes)"),
            )
        };
        ctx.report.mark_fixed(Pass::Inodes, |m| m.starts_with(&prefix));
        ctx.report.push(Code::TreeRebuilt, msg, true);
    }
}

/// In-use inodes that no entry names (and that are not orphans), in number
/// order.
fn lost_inodes(ctx: &Ctx) -> Vec<u64> {
    let mut v: Vec<u64> = ctx
        .inodes
        .iter()
        .filter(|(&ino, i)| {
            if ino == ROOT_INO || i.bad || i.freed || ctx.orphans.contains_key(&ino) {
                return false;
            }
            if i.is_dir() {
                i.parents.is_empty() && (i.nlink > 0 || i.dirents_found > 0)
            } else {
                i.refs == 0 && i.nlink > 0
            }
        })
        .map(|(k, _)| *k)
        .collect();
    v.sort_unstable();
    v
}

/// The decoded entries of `dir` as found in its tree, less those a repair
/// removes.
fn entries_of(ctx: &Ctx, dir: u64) -> Vec<(u64, Dirent)> {
    let removed: BTreeSet<u64> =
        ctx.dirent_fixes.iter().filter(|f| f.1 == dir && matches!(f.3, DirentFix::Remove)).map(|f| f.2).collect();
    ctx.dirents
        .iter()
        .filter(|r| r.dir == dir && !removed.contains(&r.key))
        .filter_map(|r| Dirent::decode(dir, &r.value).ok().map(|e| (r.key, e)))
        .collect()
}

/// Every key in use in `dir`: found in its tree or about to be added.
fn keys_of(ctx: &Ctx, dir: u64) -> BTreeSet<u64> {
    let mut keys: BTreeSet<u64> = ctx.dirents.iter().filter(|r| r.dir == dir).map(|r| r.key).collect();
    if let Some(add) = ctx.rebuilds.get(&dir) {
        keys.extend(add.iter().map(|(k, _)| *k));
    }
    keys
}

/// The lowest key free for `name` among `keys` (the engine's rule: the
/// name's hash, then the next free collision index).
fn free_key(ctx: &Ctx, keys: &BTreeSet<u64>, name: &[u8]) -> Option<u64> {
    let h = name_hash(&ctx.sb.hash_seed, name);
    (hash_key_base(h)..hash_key_end(h)).find(|k| !keys.contains(k))
}

/// `/lost+found`, if the root names a sound directory by that name.
fn find_lost_found(ctx: &Ctx) -> Option<u64> {
    entries_of(ctx, ROOT_INO)
        .into_iter()
        .find(|(_, e)| e.name == LOST_FOUND)
        .map(|(_, e)| e.ino)
        .filter(|i| ctx.inodes.get(i).is_some_and(|x| x.is_dir() && !x.damaged && !x.freed))
}

/// Creates `/lost+found` in a free inode slot of an initialised group;
/// `None` (reported) when there is no free slot.
fn create_lost_found(ctx: &mut Ctx) -> Result<Option<u64>, FsckError> {
    let Some(ino) = free_inode(ctx)? else {
        ctx.report.problem(Code::LostFoundNoInode, "/lost+found is missing and no free inode is left to create it");
        return Ok(None);
    };
    let d = write_empty_dir(ctx, ino, 0o700)?;
    ctx.inodes.insert(
        ino,
        InodeInfo {
            mode: d.mode,
            nlink: 2,
            parent: ROOT_INO,
            parents: vec![ROOT_INO],
            refs: 1,
            reachable: true,
            // Its bitmap bit is set by pass 5, without a finding.
            resurrected: true,
            ..Default::default()
        },
    );
    let mut keys = keys_of(ctx, ROOT_INO);
    let key = free_key(ctx, &keys, LOST_FOUND).expect("a fresh name has a free key");
    keys.insert(key);
    let value = Dirent { ino, dtype: dtype_of_mode(d.mode), name: LOST_FOUND.to_vec() }.encode();
    ctx.rebuilds.entry(ROOT_INO).or_default().push((key, value));
    if let Some(r) = ctx.inodes.get_mut(&ROOT_INO) {
        r.subdirs += 1;
        r.dirents_found += 1;
    }
    ctx.report.push(Code::LostFoundCreated, format!("/lost+found is missing: created (inode {ino})"), true);
    Ok(Some(ino))
}

/// A free inode number: clear in an initialised, verified inode bitmap and
/// not known to be in use.
fn free_inode(ctx: &mut Ctx) -> Result<Option<u64>, FsckError> {
    let ipg = ctx.geo.inodes_per_group;
    for g in 0..ctx.geo.group_count {
        let Some((bm, true)) = groups::read_inode_bitmap(ctx, g)? else { continue };
        for i in 0..ipg {
            let ino = g * ipg + i + 1;
            if ino >= FIRST_INO && bm[(i / 8) as usize] >> (i % 8) & 1 == 0 && !ctx.inodes.contains_key(&ino) {
                return Ok(Some(ino));
            }
        }
    }
    Ok(None)
}

/// Directories that were unreachable only because an ancestor was lost are
/// reachable through `/lost+found` now: their findings are fixed.
fn reach_through_reconnected(ctx: &mut Ctx) {
    let mut dirs: Vec<u64> = ctx.inodes.iter().filter(|(_, i)| i.is_dir() && !i.reachable).map(|(k, _)| *k).collect();
    dirs.sort_unstable();
    for d in dirs {
        let mut chain = vec![d];
        let mut at = d;
        let reached = loop {
            let Some(i) = ctx.inodes.get(&at) else { break false };
            if i.reachable {
                break true;
            }
            if i.parents.len() != 1 || chain.len() > 4096 {
                break false;
            }
            at = i.parents[0];
            if chain.contains(&at) {
                break false;
            }
            chain.push(at);
        };
        if reached {
            for x in chain {
                if let Some(i) = ctx.inodes.get_mut(&x) {
                    if !i.reachable {
                        i.reachable = true;
                        let prefix = format!("directory {x} is not reachable from the root");
                        ctx.report.mark_fixed(Pass::Directories, |m| m.starts_with(&prefix));
                    }
                }
            }
        }
    }
}

/// Finds blocks for new tree nodes: inside the data area, claimed by
/// nobody, and clear in their group's bitmap when that bitmap verifies. A
/// group whose bitmap is damaged or uninitialised is used only when every
/// owner's blocks are known (then an unclaimed block is free: pass 5 would
/// free it anyway).
pub(crate) struct FreeBlocks {
    claimed: Vec<(u64, u64)>,
    /// Every owner's blocks are known.
    complete: bool,
    group: u64,
    /// The current group's bitmap (`None`: judged by the claims alone).
    bitmap: Option<Vec<u8>>,
    loaded: bool,
    next: u64,
    taken: BTreeSet<u64>,
}

impl FreeBlocks {
    pub(crate) fn new(ctx: &Ctx) -> FreeBlocks {
        let mut runs: Vec<(u64, u64)> = ctx.claims.iter().map(|c| (c.start, c.start + c.len)).collect();
        runs.sort_unstable();
        // Merged into disjoint runs (doubly claimed blocks overlap).
        let mut claimed: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
        for (s, e) in runs {
            match claimed.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => claimed.push((s, e)),
            }
        }
        let complete = !ctx.ownership_incomplete();
        FreeBlocks { claimed, complete, group: 0, bitmap: None, loaded: false, next: 0, taken: BTreeSet::new() }
    }

    fn is_claimed(claimed: &[(u64, u64)], b: u64) -> bool {
        let i = claimed.partition_point(|r| r.0 <= b);
        i > 0 && b < claimed[i - 1].1
    }

    pub(crate) fn take(&mut self, ctx: &mut Ctx) -> Result<Option<u64>, FsckError> {
        while self.group < ctx.geo.group_count {
            if !self.loaded {
                self.loaded = true;
                self.next = 0;
                self.bitmap = match groups::read_block_bitmap(ctx, self.group)? {
                    Some((bm, true)) => Some(bm),
                    _ if self.complete => None,
                    _ => {
                        self.group += 1;
                        self.loaded = false;
                        continue;
                    }
                };
            }
            let len = ctx.geo.group_len(self.group);
            let start = ctx.geo.group_start(self.group);
            while self.next < len {
                let i = self.next;
                self.next += 1;
                let b = start + i;
                let clear = self.bitmap.as_ref().is_none_or(|bm| bm[(i / 8) as usize] >> (i % 8) & 1 == 0);
                if clear
                    && ctx.geo.valid_data_range(b, 1)
                    && !Self::is_claimed(&self.claimed, b)
                    && self.taken.insert(b)
                {
                    return Ok(Some(b));
                }
            }
            self.group += 1;
            self.loaded = false;
        }
        Ok(None)
    }
}

/// Writes every decided rebuild (from `repair`, before the inode fixes).
pub fn write_trees(ctx: &mut Ctx) -> Result<(), FsckError> {
    let rebuilds = std::mem::take(&mut ctx.rebuilds);
    if rebuilds.is_empty() {
        return Ok(());
    }
    let mut free = FreeBlocks::new(ctx);
    for (ino, extra) in rebuilds {
        let is_dir = ctx.inodes.get(&ino).is_some_and(|i| i.is_dir());
        let (kind, owner) =
            if is_dir { (KIND_DIRENTS, Owner::DirNode(ino)) } else { (KIND_EXTENTS, Owner::ExtentNode(ino)) };
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
        if is_dir {
            for (key, mut e) in entries_of(ctx, ino) {
                if let Some(t) = ctx.dirent_fixes.iter().find_map(|f| match f.3 {
                    DirentFix::Dtype(t) if f.1 == ino && f.2 == key => Some(t),
                    _ => None,
                }) {
                    e.dtype = t;
                }
                entries.push((key, e.encode()));
            }
            ctx.dirent_fixes.retain(|f| f.1 != ino);
        } else if let Some(i) = ctx.inodes.get_mut(&ino) {
            entries = std::mem::take(&mut i.tree_entries);
        }
        entries.extend(extra);
        entries.sort_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        let Some((root, nodes)) = build(ctx, &mut free, kind, ino, &entries)? else {
            let msg = format!("inode {ino}: no free block is left for its rebuilt tree");
            ctx.report.problem(Code::RebuildNoSpace, msg);
            continue;
        };
        ctx.claims.retain(|c| c.owner != owner);
        for &b in &nodes {
            ctx.claim(b, 1, owner);
        }
        let (counted, old_nodes) = ctx.inodes.get(&ino).map_or((0, 0), |i| (i.counted, i.tree_nodes));
        let f = ctx.fix(ino);
        f.tree_root = Some(root);
        if is_dir {
            f.entries = Some(entries.len() as u64);
        }
        f.blocks = Some(counted - old_nodes.min(counted) + nodes.len() as u64);
    }
    Ok(())
}

/// Writes a tree of `kind` holding `entries` (sorted, unique keys) owned by
/// inode `owner`; returns
/// its root (0 when empty) and its nodes, or `None` when blocks run out.
fn build(
    ctx: &mut Ctx,
    free: &mut FreeBlocks,
    kind: u8,
    owner: u64,
    entries: &[(u64, Vec<u8>)],
) -> Result<Option<(u64, Vec<u64>)>, FsckError> {
    if entries.is_empty() {
        return Ok(Some((0, Vec::new())));
    }
    let bs = ctx.geo.block_size as usize;
    let mut nodes = Vec::new();
    // Level 0: leaves packed full, in key order.
    let mut level: Vec<(u64, u64)> = Vec::new();
    let mut leaf: Vec<(u64, Vec<u8>)> = Vec::new();
    for e in entries {
        leaf.push(e.clone());
        if Node::leaf_bytes(&leaf) > bs {
            let last = leaf.pop().expect("just pushed");
            let Some(b) = write_node(ctx, free, kind, owner, 0, NodeBody::Leaf(std::mem::take(&mut leaf)))? else {
                return Ok(None);
            };
            nodes.push(b.1);
            level.push(b);
            leaf.push(last);
        }
    }
    let Some(b) = write_node(ctx, free, kind, owner, 0, NodeBody::Leaf(leaf))? else { return Ok(None) };
    nodes.push(b.1);
    level.push(b);
    // Internal levels until one node is left.
    let fan = (bs - NODE_HEADER) / INTERNAL_ENTRY;
    let mut height = 0u8;
    while level.len() > 1 {
        height += 1;
        let mut up = Vec::new();
        for chunk in level.chunks(fan) {
            let Some(b) = write_node(ctx, free, kind, owner, height, NodeBody::Internal(chunk.to_vec()))? else {
                return Ok(None);
            };
            nodes.push(b.1);
            up.push(b);
        }
        level = up;
    }
    Ok(Some((level[0].1, nodes)))
}

/// Encodes and writes one node into a free block: (its first key, block).
fn write_node(
    ctx: &mut Ctx,
    free: &mut FreeBlocks,
    kind: u8,
    owner: u64,
    level: u8,
    body: NodeBody,
) -> Result<Option<(u64, u64)>, FsckError> {
    let first = match &body {
        NodeBody::Leaf(e) => e[0].0,
        NodeBody::Internal(e) => e[0].0,
    };
    let Some(blk) = free.take(ctx)? else { return Ok(None) };
    let node = Node { kind, level, owner, body };
    let mut buf = vec![0u8; ctx.geo.block_size as usize];
    node.encode(ctx.seed, blk, &mut buf);
    ctx.img.write_block(blk, &buf)?;
    Ok(Some((first, blk)))
}
