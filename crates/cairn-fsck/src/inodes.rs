//! Pass 1: every in-use inode, and every block it owns.
//!
//! ## Purpose
//! The inode bitmaps say which inode slots are live (a free slot may hold
//! anything, so nothing else is trusted for that), with one exception: a
//! slot of all zeroes holds no inode (a written inode has a type and a
//! checksum), so a bit set over one is the bitmap's error and the slot is
//! taken as free (a repair clears the bit). For every live inode this
//! pass verifies:
//!
//! * the inode's crc32c (seeded with `seed ^ ino`) and the decoder's checks:
//!   a known file type, sane nanoseconds, a directory always in tree form,
//!   inline data only for symlinks and at most 120 bytes;
//! * no unknown flag bits;
//! * extents (inline, or in an extent B+tree — see `btree`): length at least
//!   1 and at most `MAX_EXTENT_LEN`, physical range inside the data area (never
//!   over fixed metadata), logical ranges sorted and non-overlapping;
//! * the type's data form: directories walk their entry tree (entries are
//!   kept for pass 2), symlinks hold 1..=4095 bytes, device nodes, FIFOs and
//!   sockets own no blocks;
//! * the xattr block, if any: in range, decodes (magic, checksum, own block
//!   number, refcount range, sorted entries, content hash); each distinct
//!   block is read once and the inodes pointing at it are collected so that
//!   pass 4 can compare its refcount; each external value is read through
//!   its chain (every value block in the data area, its checksum, owner,
//!   index and length, then the value's crc) and its blocks are claimed; a
//!   damaged value is reported, and a repair drops its entry;
//! * `blocks` equals the blocks it owns: data (written or unwritten), tree
//!   nodes, and its xattr block with the block's value blocks (counted once
//!   per inode, shared or not).
//!
//! ## What it reads
//! Each initialised group's inode bitmap, and only the inode-table blocks that
//! hold live inodes, up to 1 MiB per read. Groups whose inode bitmap is
//! uninitialised hold no inodes and cost nothing.
//!
//! ## What it concludes
//! An [`InodeInfo`] per live inode, a [`Claim`](crate::ctx::Claim) for every
//! run of blocks an inode owns (pass 1b and pass 5 work from these), the
//! directory entries, and the xattr-block table. Inodes that cannot be
//! decoded are kept as `bad` (still in use — fsck does not clear inodes) and
//! make block ownership incomplete; a repair instead clears them (their
//! slot is zeroed, entries naming them are removed, and pass 5 frees what
//! only they could have owned). An inode whose only fault is its checksum
//! is checked as if the checksum were right, and a repair rewrites it.

use crate::btree;
use crate::ctx::{Ctx, DirentRec, InodeInfo, Owner, XattrInfo};
use crate::error::FsckError;
use crate::groups;
use crate::problems::{Code, Pass};
use crate::report::block_range;
use cairn_format::btree::{KIND_DIRENTS, KIND_EXTENTS};
use cairn_format::extent::{Extent, EXTENT_VALUE_SIZE, MAX_EXTENT_LEN};
use cairn_format::inode::*;
use cairn_format::xattr::XattrBlock;
use cairn_format::{FormatError, FIRST_INO, ROOT_INO, SYMLINK_MAX};

/// Inode-table blocks read at once.
const ITABLE_CHUNK: u64 = 256;

/// Human name of a file type.
pub fn type_name(mode: u32) -> &'static str {
    match mode & S_IFMT {
        S_IFDIR => "directory",
        S_IFREG => "regular file",
        S_IFLNK => "symlink",
        S_IFCHR => "character device",
        S_IFBLK => "block device",
        S_IFIFO => "FIFO",
        S_IFSOCK => "socket",
        _ => "inode of unknown type",
    }
}

/// Indices `< limit` whose bit is set.
fn set_bits(bm: &[u8], limit: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (byte_i, &byte) in bm.iter().enumerate() {
        if byte == 0 {
            continue;
        }
        for b in 0..8 {
            let i = byte_i as u64 * 8 + b;
            if i >= limit {
                return out;
            }
            if byte >> b & 1 == 1 {
                out.push(i);
            }
        }
    }
    out
}

/// Walks every initialised group's live inodes.
pub fn run(ctx: &mut Ctx) -> Result<(), FsckError> {
    let geo = ctx.geo;
    let ipg = geo.inodes_per_group;
    let ipb = geo.inodes_per_block();
    for g in 0..geo.group_count {
        ctx.progress("pass 1: inodes", g, geo.group_count);
        let Some((bm, _)) = groups::read_inode_bitmap(ctx, g)? else { continue };
        let mut used = set_bits(&bm, ipg);
        if g == 0 {
            // Inodes 2..FIRST_INO are reserved and have no contents.
            used.retain(|&i| i == 0 || i + 1 >= FIRST_INO);
            if used.first() != Some(&0) {
                let msg = "the root directory (inode 1) is marked free in the inode bitmap".to_string();
                ctx.report.push(Code::RootMarkedFree, msg, ctx.repair);
                used.insert(0, 0);
                ctx.inodes.entry(ROOT_INO).or_default().resurrected = true;
            }
        }
        let mut i = 0;
        while i < used.len() {
            let first_blk = used[i] / ipb;
            let mut j = i;
            while j < used.len() && used[j] / ipb < first_blk + ITABLE_CHUNK {
                j += 1;
            }
            let last_blk = used[j - 1] / ipb;
            let buf = ctx.img.read_blocks(geo.inode_table(g) + first_blk, last_blk - first_blk + 1)?;
            for &idx in &used[i..j] {
                let off = ((idx - first_blk * ipb) as usize) * INODE_SIZE;
                let ino = g * ipg + idx + 1;
                let raw = &buf[off..off + INODE_SIZE];
                if ino != ROOT_INO && raw.iter().all(|&b| b == 0) {
                    // No inode was ever written here (or it was zeroed): the
                    // bit is wrong, not the slot. Left out of the live set,
                    // the bitmap pass rewrites the bit and the counts, and
                    // pass 2 drops any entry that names it.
                    let msg = format!(
                        "inode {ino} is marked in use in the inode bitmap, but its slot is empty{}",
                        crate::report::action(ctx.repair, "marked free", "mark it free")
                    );
                    ctx.report.push(Code::EmptySlotMarkedUsed, msg, ctx.repair);
                    continue;
                }
                let resurrected = ctx.inodes.get(&ino).is_some_and(|x| x.resurrected);
                let mut info = match DiskInode::decode(ctx.seed, ino, raw) {
                    Ok(_) => check_inode(ctx, ino, raw),
                    Err(FormatError::Checksum { .. })
                        if DiskInode::decode_ignoring_checksum(ctx.seed, ino, raw).is_ok() =>
                    {
                        // e2fsck: "inode passes checks, but checksum does
                        // not match inode". Checked as it would be with a
                        // right checksum; a repair rewrites the checksum.
                        let d = DiskInode::decode_ignoring_checksum(ctx.seed, ino, raw).expect("just decoded");
                        let mut fixed = vec![0u8; INODE_SIZE];
                        d.encode(ctx.seed, ino, &mut fixed);
                        let msg = format!(
                            "inode {ino}: checksum does not match, but the inode passes every other check{}",
                            crate::report::action(ctx.repair, "checksum rewritten", "rewrite the checksum")
                        );
                        ctx.report.push(Code::InodeChecksumOnly, msg, ctx.repair);
                        if ctx.repair {
                            ctx.checksum_fixes.push(ino);
                        }
                        check_inode(ctx, ino, &fixed)
                    }
                    Err(e) if ctx.repair && ino == ROOT_INO => {
                        // e2fsck recreates a root it cannot use; what the
                        // old one named is reconnected to /lost+found.
                        ctx.report.push(
                            Code::RootDamaged,
                            format!("the root directory (inode 1) is damaged ({e}): recreated empty"),
                            true,
                        );
                        write_empty_dir(ctx, ROOT_INO, 0o755)?;
                        InodeInfo { mode: S_IFDIR | 0o755, nlink: 2, parent: ROOT_INO, ..Default::default() }
                    }
                    Err(e) if ctx.repair => {
                        // Nothing in it can be trusted: cleared, as e2fsck
                        // clears such an inode. Entries naming it are
                        // removed (pass 2), its bit and whatever only it
                        // owned are freed (pass 5).
                        ctx.report.push(Code::InodeDamaged, format!("inode {ino} is damaged ({e}): cleared"), true);
                        ctx.cleared.push(ino);
                        continue;
                    }
                    Err(_) => check_inode(ctx, ino, raw),
                };
                if info.clear {
                    forget_claims(ctx, ino);
                    ctx.cleared.push(ino);
                    continue;
                }
                info.resurrected = resurrected;
                ctx.inodes.insert(ino, info);
            }
            i = j;
        }
    }
    if !ctx.inodes.get(&ROOT_INO).is_some_and(|r| r.is_dir()) {
        ctx.report.problem(Code::RootMissing, "the root directory (inode 1) is missing or not a directory");
    }
    Ok(())
}

/// A problem a repair fixes by clearing the inode: reported as fixed and
/// the inode marked to clear; without repair, reported and the inode
/// marked damaged.
fn clear_or_report(ctx: &mut Ctx, info: &mut InodeInfo, code: Code, msg: String) {
    if ctx.repair {
        ctx.report.push(code, format!("{msg}: cleared"), true);
        info.clear = true;
    } else {
        ctx.report.problem(code, msg);
        info.damaged = true;
    }
}

/// Drops what inode `ino` claimed in pass 1 (it is being cleared): its
/// blocks and tree nodes, and its place among an xattr block's inodes.
pub fn forget_claims(ctx: &mut Ctx, ino: u64) {
    ctx.claims.retain(|c| c.owner.ino() != Some(ino));
    for x in ctx.xattrs.values_mut() {
        x.inodes.retain(|&i| i != ino);
    }
}

/// Writes a fresh, empty directory (`perm` bits, parent the root) into
/// inode slot `ino` (repair: a recreated root, a new /lost+found).
pub fn write_empty_dir(ctx: &mut Ctx, ino: u64, perm: u32) -> Result<DiskInode, FsckError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let t = Timestamp { sec: now.as_secs() as i64, nsec: now.subsec_nanos() };
    let d = DiskInode {
        mode: S_IFDIR | perm,
        nlink: 2,
        parent: ROOT_INO,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        data: DataArea::Tree(0),
        ..Default::default()
    };
    let (blk, off) = ctx.geo.inode_location(ino);
    let mut b = ctx.img.read_block(blk)?;
    d.encode(ctx.seed, ino, &mut b[off..off + INODE_SIZE]);
    ctx.img.write_block(blk, &b)?;
    Ok(d)
}

/// Reads inode `ino`'s slot directly (pass 2, for inodes the bitmap calls
/// free): the decoded inode, if the slot holds a valid one.
pub fn read_slot(ctx: &mut Ctx, ino: u64) -> Result<Option<DiskInode>, FsckError> {
    if !ctx.geo.valid_ino(ino) {
        return Ok(None);
    }
    let (blk, off) = ctx.geo.inode_location(ino);
    let b = ctx.img.read_block(blk)?;
    let raw = &b[off..off + INODE_SIZE];
    // An inode whose checksum alone is wrong is checked (and repaired) as
    // if it were right: this repair rewrites the checksum first.
    if ctx.checksum_fixes.contains(&ino) {
        return Ok(DiskInode::decode_ignoring_checksum(ctx.seed, ino, raw).ok());
    }
    Ok(DiskInode::decode(ctx.seed, ino, raw).ok())
}

/// Checks extents of `ino`, claiming every one whose blocks lie in the data
/// area (an overlapping one too); returns blocks counted
/// and whether all were valid.
pub fn check_extents(ctx: &mut Ctx, ino: u64, list: &[Extent], what: &str) -> (u64, bool) {
    let (counted, kept) = check_extents_keeping(ctx, ino, list, what, BadExtents::Kept);
    (counted, kept.len() == list.len())
}

/// What a repair does with the extents [`check_extents_keeping`] finds bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BadExtents {
    /// Nothing here (the caller deals with the file).
    Kept,
    /// Drops them (the caller rewrites the list); their problems are
    /// reported as fixed.
    DroppedOnRepair,
}

/// As [`check_extents`]; returns the blocks counted and the extents that
/// pass every check; `bad` says what a repair does with the others.
fn check_extents_keeping(ctx: &mut Ctx, ino: u64, list: &[Extent], what: &str, bad: BadExtents) -> (u64, Vec<Extent>) {
    let mut counted = 0u64;
    let mut kept = Vec::with_capacity(list.len());
    let mut prev_end = 0u64;
    let fixed = bad == BadExtents::DroppedOnRepair && ctx.repair;
    for (n, e) in list.iter().enumerate() {
        let len = u64::from(e.len);
        let p = |m: String| {
            let fate = if fixed { ": dropped (the file reads zeros there)" } else { "" };
            format!("inode {ino}: {what} extent at logical block {}: {m}{fate}", e.lblk)
        };
        if e.len == 0 || e.len > MAX_EXTENT_LEN {
            ctx.report.push(Code::ExtentInvalid, p(format!("length {} out of range", e.len)), fixed);
            continue;
        }
        let Some(lend) = e.lblk.checked_add(len) else {
            ctx.report.push(Code::ExtentInvalid, p("logical range overflows".into()), fixed);
            continue;
        };
        let overlaps = n > 0 && e.lblk < prev_end;
        if overlaps {
            let m = format!("overlaps the previous extent (which ends at {prev_end})");
            ctx.report.push(Code::ExtentInvalid, p(m), fixed);
        }
        prev_end = prev_end.max(lend);
        if !ctx.geo.valid_data_range(e.pblk, len) {
            let m = format!("{} lie outside the data area", block_range(e.pblk, len));
            ctx.report.push(Code::ExtentInvalid, p(m), fixed);
            continue;
        }
        // An overlapping extent still owns its blocks, unless a repair
        // drops it.
        if overlaps && fixed {
            continue;
        }
        counted += len;
        ctx.claim(e.pblk, len, Owner::Data(ino));
        if !overlaps {
            kept.push(*e);
        }
    }
    (counted, kept)
}

/// Checks one live inode from its 256 raw bytes.
pub fn check_inode(ctx: &mut Ctx, ino: u64, raw: &[u8]) -> InodeInfo {
    let d = match DiskInode::decode(ctx.seed, ino, raw) {
        Ok(d) => d,
        Err(e) => {
            let code = if ino == ROOT_INO { Code::RootDamaged } else { Code::InodeDamaged };
            ctx.report.problem(code, format!("inode {ino} is damaged ({e})"));
            ctx.incomplete = true;
            return InodeInfo { bad: true, damaged: true, ..Default::default() };
        }
    };
    let mut info = InodeInfo {
        mode: d.mode,
        nlink: d.nlink,
        flags: d.flags,
        parent: d.parent,
        entries: d.entries,
        xattr_block: d.xattr_block,
        ..Default::default()
    };
    check_flags(ctx, ino, &d, &mut info);
    let mut counted = match &d.data {
        DataArea::Extents(list) => check_inline_extents(ctx, ino, list, &mut info),
        DataArea::Tree(0) | DataArea::Inline(_) => 0,
        DataArea::Tree(root) if d.file_type() == S_IFDIR => check_dirent_tree(ctx, ino, *root, &mut info),
        DataArea::Tree(root) => check_extent_tree(ctx, ino, *root, &mut info),
    };
    check_kind(ctx, ino, &d, counted, &mut info);
    counted += check_xattr_pointer(ctx, ino, &d, &mut info);
    info.counted = counted;
    if !info.damaged && !info.tree_damaged && d.blocks != counted {
        let msg = format!("inode {ino}: block count is {}, but it owns {counted} blocks", d.blocks);
        ctx.report.push(Code::BlockCount, msg, ctx.repair);
        if ctx.repair {
            ctx.fix(ino).blocks = Some(counted);
        }
    }
    info
}

/// Flag bits no build sets: a repair drops them (the rest of the inode is
/// judged on its own).
fn check_flags(ctx: &mut Ctx, ino: u64, d: &DiskInode, info: &mut InodeInfo) {
    let known = INODE_FLAG_INLINE_DATA | INODE_FLAG_TREE | INODE_FLAG_ORPHAN;
    if d.flags & !known != 0 {
        let msg = format!("inode {ino}: unknown flags {:#x}", d.flags & !known);
        if ctx.repair {
            ctx.report.push(Code::InodeUnknownFlags, format!("{msg}: cleared"), true);
            ctx.fix(ino).clear_flags |= d.flags & !known;
        } else {
            ctx.report.problem(Code::InodeUnknownFlags, msg);
            info.damaged = true;
        }
    }
}

/// The extents kept in the inode itself; returns the blocks they count.
/// A bad inline extent is dropped by a repair, as e2fsck clears an invalid
/// extent: the rest of the file stays.
fn check_inline_extents(ctx: &mut Ctx, ino: u64, list: &[Extent], info: &mut InodeInfo) -> u64 {
    let (n, kept) = check_extents_keeping(ctx, ino, list, "inline", BadExtents::DroppedOnRepair);
    if kept.len() != list.len() {
        if ctx.repair {
            ctx.fix(ino).inline_extents = Some(kept);
        } else {
            info.damaged = true;
        }
    }
    n
}

/// Walks an inode's tree rooted at `root`, claiming its nodes as `owner`'s;
/// an incomplete walk marks the tree damaged (a repair may rebuild it from
/// what could be read).
fn walk_tree(
    ctx: &mut Ctx,
    ino: u64,
    root: u64,
    kind: u8,
    label: &str,
    owner: Owner,
    info: &mut InodeInfo,
) -> btree::TreeWalk {
    let w = btree::walk(&mut ctx.img, &mut ctx.report, &ctx.geo, ctx.seed, kind, ino, root, label, Pass::Inodes);
    for &b in &w.nodes {
        ctx.claim(b, 1, owner);
    }
    info.tree_nodes = w.nodes.len() as u64;
    if !w.complete {
        info.tree_damaged = true;
        ctx.incomplete_trees.insert(ino);
    }
    w
}

/// A directory's entry tree: its nodes are claimed and its entries kept
/// for pass 2; returns the blocks it counts (its nodes).
fn check_dirent_tree(ctx: &mut Ctx, ino: u64, root: u64, info: &mut InodeInfo) -> u64 {
    let label = format!("directory {ino}'s entry tree");
    let w = walk_tree(ctx, ino, root, KIND_DIRENTS, &label, Owner::DirNode(ino), info);
    info.dirents_found = w.entries.len() as u64;
    for (leaf, key, value) in w.entries {
        ctx.dirents.push(DirentRec { dir: ino, leaf, key, value, salvaged: false });
    }
    if ctx.repair {
        // A damaged leaf's entries, for the rebuild: pass 2 keeps those
        // that pass every check.
        let have: std::collections::HashSet<u64> = ctx.dirents.iter().filter(|r| r.dir == ino).map(|r| r.key).collect();
        for (leaf, key, value) in w.salvageable {
            if !have.contains(&key) {
                info.dirents_found += 1;
                ctx.dirents.push(DirentRec { dir: ino, leaf, key, value, salvaged: true });
            }
        }
    }
    info.tree_nodes
}

/// A file's extent tree: its nodes are claimed and its extents checked;
/// returns the blocks it counts (nodes and data).
fn check_extent_tree(ctx: &mut Ctx, ino: u64, root: u64, info: &mut InodeInfo) -> u64 {
    let label = format!("inode {ino}'s extent tree");
    let w = walk_tree(ctx, ino, root, KIND_EXTENTS, &label, Owner::ExtentNode(ino), info);
    if !w.complete {
        info.tree_entries = w.entries.iter().map(|(_, k, v)| (*k, v.clone())).collect();
    }
    let mut list = Vec::with_capacity(w.entries.len());
    for (leaf, key, value) in &w.entries {
        if value.len() != EXTENT_VALUE_SIZE {
            ctx.report.problem(
                Code::ExtentValueSize,
                format!("{label}: leaf {leaf}: extent at key {key} has a {}-byte value", value.len()),
            );
            info.damaged = true;
            continue;
        }
        list.push(Extent::decode_value(*key, value));
    }
    let (n, ok) = check_extents(ctx, ino, &list, "tree");
    info.damaged |= !ok;
    info.tree_nodes + n
}

/// As e2fsck: a symlink that cannot be read and a special file that owns
/// blocks (`counted` of them) are cleared by a repair (entries naming them
/// go in pass 2, their blocks in pass 5).
fn check_kind(ctx: &mut Ctx, ino: u64, d: &DiskInode, counted: u64, info: &mut InodeInfo) {
    match d.file_type() {
        S_IFLNK if d.size == 0 || d.size > SYMLINK_MAX as u64 => {
            let msg = format!("inode {ino}: symlink target length {} is invalid", d.size);
            clear_or_report(ctx, info, Code::SymlinkLength, msg);
        }
        S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK if counted > 0 => {
            let msg = format!("inode {ino}: {} owns data blocks", type_name(d.mode));
            clear_or_report(ctx, info, Code::SpecialOwnsBlocks, msg);
        }
        _ => {}
    }
}

/// The inode's xattr block, if it has one: in range, and sound (see
/// [`check_xattr_block`]); returns the blocks the inode counts for it.
fn check_xattr_pointer(ctx: &mut Ctx, ino: u64, d: &DiskInode, info: &mut InodeInfo) -> u64 {
    if d.xattr_block == 0 {
        return 0;
    }
    if !ctx.geo.valid_data_range(d.xattr_block, 1) {
        let msg = format!("inode {ino}: xattr block {} lies outside the data area", d.xattr_block);
        if ctx.repair {
            ctx.report.push(Code::XattrPointerRange, format!("{msg}: dropped"), true);
            ctx.fix(ino).xattr_block = Some(0);
        } else {
            ctx.report.problem(Code::XattrPointerRange, msg);
            info.damaged = true;
        }
        info.xattr_block = 0;
        return 0;
    }
    match check_xattr_block(ctx, ino, d.xattr_block) {
        XattrOutcome::Counted(Some(n)) => n,
        XattrOutcome::Counted(None) => {
            info.damaged = true;
            0
        }
        XattrOutcome::Dropped => {
            ctx.fix(ino).xattr_block = Some(0);
            info.xattr_block = 0;
            0
        }
    }
}

/// What an inode's xattr block comes to.
enum XattrOutcome {
    /// The blocks the inode counts for it, if known.
    Counted(Option<u64>),
    /// The block is damaged and a repair drops it from the inode.
    Dropped,
}

/// Records that `ino` points at xattr block `blk`, reading the block (and
/// its external values) the first time it is seen. A block that does not
/// decode is, with a repair, dropped from every inode that points at it:
/// unclaimed, it and its value blocks are freed by pass 5 (e2fsck clears
/// such an EA block reference the same way).
fn check_xattr_block(ctx: &mut Ctx, ino: u64, blk: u64) -> XattrOutcome {
    if ctx.dropped_xattrs.contains(&blk) {
        return XattrOutcome::Dropped;
    }
    if let Some(x) = ctx.xattrs.get_mut(&blk) {
        x.inodes.push(ino);
        return XattrOutcome::Counted(x.footprint);
    }
    let mut info = XattrInfo { inodes: vec![ino], ..Default::default() };
    let decoded = match ctx.img.read_block(blk) {
        Ok(data) => XattrBlock::decode(ctx.seed, blk, &data).map_err(|e| format!("is damaged ({e})")),
        Err(e) => Err(format!("cannot be read: {e}")),
    };
    match decoded {
        Ok(x) => {
            ctx.claim(blk, 1, Owner::Xattr(blk));
            info.ok = true;
            info.refcount = x.refcount;
            info.footprint = check_values(ctx, blk, &x).map(|n| 1 + n);
        }
        Err(e) if ctx.repair => {
            let msg = format!("xattr block {blk} (of inode {ino}) {e}: dropped from the inodes that point at it");
            ctx.report.push(Code::XattrBlockDamaged, msg, true);
            ctx.dropped_xattrs.insert(blk);
            return XattrOutcome::Dropped;
        }
        Err(e) => {
            ctx.claim(blk, 1, Owner::Xattr(blk));
            ctx.report.problem(Code::XattrBlockDamaged, format!("xattr block {blk} (of inode {ino}) {e}"));
            // Its external values, if any, are unknown.
            ctx.incomplete = true;
        }
    }
    let fp = info.footprint;
    ctx.xattrs.insert(blk, info);
    XattrOutcome::Counted(fp)
}

/// Reads and verifies every external value of xattr block `blk` (each
/// value block in the data area, checksum, owner, index, lengths, then the
/// value's crc) and claims their blocks. A damaged value is reported; a
/// repair drops its entry (its blocks, unclaimed, are freed by pass 5).
/// Returns the value blocks the block's inodes count, if known.
fn check_values(ctx: &mut Ctx, blk: u64, x: &XattrBlock) -> Option<u64> {
    let bs = ctx.geo.block_size as usize;
    let mut total = Some(0u64);
    for e in &x.entries {
        let Some(v) = e.value.external() else { continue };
        let (img, geo) = (&mut ctx.img, &ctx.geo);
        let r = v.read(ctx.seed, blk, bs, |b| {
            if !geo.valid_data_range(b, 1) {
                return Err(FormatError::corrupt("xattr value", blk, format!("block {b} outside the data area")));
            }
            img.read_block(b)
                .map_err(|io| FormatError::corrupt("xattr value block", b, format!("cannot be read: {io}")))
        });
        match r {
            Ok((_, blocks)) => {
                for &b in &blocks {
                    ctx.claim(b, 1, Owner::XattrValue(blk));
                }
                total = total.map(|t| t + blocks.len() as u64);
            }
            Err(err) => {
                let name = String::from_utf8_lossy(&e.full_name()).into_owned();
                let msg = format!("xattr block {blk}: the {}-byte value of {name} is damaged ({err})", v.len);
                ctx.report.push(Code::XattrValueDamaged, msg, ctx.repair);
                if ctx.repair {
                    ctx.xattr_drops.entry(blk).or_default().push((e.namespace, e.name.clone()));
                } else {
                    // Which blocks it owns is unknown.
                    ctx.incomplete = true;
                    total = None;
                }
            }
        }
    }
    total
}
