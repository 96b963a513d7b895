//! The corruption catalogue: each kind of damage, applied to images of
//! several shapes, must be found with its problem code (`cairn_fsck::Code`);
//! one `--repair` must leave an image fsck then finds clean and the engine
//! mounts, on which every file the damage did not touch reads back
//! identical (hash of its contents, `tree_hashes`).
//!
//! Shapes: 4 KiB blocks in small groups, 1 KiB blocks, and 4 KiB blocks
//! with three open orphans (a crashed mount's files unlinked while open);
//! all populated by `populate` (tree directories, a 2,000-entry directory,
//! extent trees, hard links, symlinks, device nodes, shared and external
//! xattrs) on an image as `cairn mkfs` makes it, with `/lost+found`. The
//! images are golden (`golden`): committed, so that the whole output of the
//! repair and of the check after it is compared with the expected output
//! kept beside them, as e2fsprogs' tests do.

use crate::common::*;
use crate::corrupt::{block, edit_gd, first_extent};
use crate::golden::{self, Names};
use cairn_core::mkfs::MkfsOptions;
use cairn_format::checksum::crc;
use cairn_format::dirent::Dirent;
use cairn_format::inode::DataArea;
use cairn_fsck::Code;
use std::collections::BTreeMap;

/// One kind of damage: what it does to an image and which paths (prefixes)
/// may change because of it.
pub(crate) struct Kind {
    pub(crate) name: &'static str,
    pub(crate) code: Code,
    pub(crate) damage: fn(&mut Vec<u8>, &Names),
    pub(crate) touches: &'static [&'static str],
    /// `Some(why)`: found, but `--repair` does not fix it yet (the check
    /// then asserts that it still reports it, honestly, with exit 4).
    pub(crate) not_repaired: Option<&'static str>,
}

const F1: &[&str] = &["/a/f1", "/a/b/f1link", "/f1root"];

fn flip_inode_byte(bytes: &mut [u8], ino: u64, at: usize, bit: u8) {
    let r = inode_range(bytes, ino);
    bytes[r.start + at] ^= bit;
}

fn backup_block(bytes: &[u8]) -> usize {
    let (_, geo, _) = sb_geo(bytes);
    let g = geo.backup_groups().next().expect("a backup superblock");
    (geo.group_start(g) * u64::from(geo.block_size)) as usize
}

/// Every kind, in the catalogue's order (the order failures are listed in;
/// each kind's golden outputs are kept under its name).
pub(crate) fn kinds() -> Vec<Kind> {
    [
        superblock_kinds(),
        count_kinds(),
        inode_kinds(),
        block_claim_kinds(),
        inode_field_kinds(),
        tree_kinds(),
        bitmap_kinds(),
        journal_and_name_kinds(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The superblock, its backup and the group descriptors.
fn superblock_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "superblock checksum",
            code: Code::SbPrimaryDamaged,
            not_repaired: None,
            touches: &[],
            damage: |b, _| b[50] ^= 1,
        },
        Kind {
            name: "superblock magic",
            code: Code::SbPrimaryDamaged,
            not_repaired: None,
            touches: &[],
            damage: |b, _| b[0] = b'X',
        },
        Kind {
            name: "backup superblock",
            code: Code::SbBackupCopy,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let at = backup_block(b);
                b[at + 70] ^= 2;
            },
        },
        Kind {
            name: "group descriptor checksum",
            code: Code::GdDamaged,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let (sb, _, _) = sb_geo(b);
                let bs = sb.block_size() as usize;
                b[sb.gdt_start as usize * bs + 64 + 24] ^= 1;
            },
        },
        Kind {
            name: "group free block counter",
            code: Code::GdFreeBlocks,
            not_repaired: None,
            touches: &[],
            damage: |b, _| edit_gd(b, 0, |gd| gd.free_blocks -= 1),
        },
        Kind {
            name: "group descriptor locations",
            code: Code::GdLocations,
            not_repaired: None,
            touches: &[],
            damage: |b, _| edit_gd(b, 1, |gd| gd.inode_table += 1),
        },
        Kind {
            name: "group descriptor flags",
            code: Code::GdUnknownFlags,
            not_repaired: None,
            touches: &[],
            damage: |b, _| edit_gd(b, 1, |gd| gd.flags |= 0x80),
        },
    ]
}

/// Counts: a reserved inode's bitmap bit, an xattr block's references, the
/// superblock's free counters.
fn count_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "reserved inode marked free",
            code: Code::ReservedInodeFree,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let (_, geo, seed) = sb_geo(b);
                let bm = block(b, geo.inode_bitmap(0));
                bm[0] &= !(1 << 2);
                let c = crc(seed, bm);
                edit_gd(b, 0, |gd| {
                    gd.inode_bitmap_csum = c;
                    gd.free_inodes += 1;
                });
            },
        },
        Kind {
            name: "xattr block refcount",
            code: Code::XattrRefcount,
            not_repaired: None,
            touches: &[],
            damage: |b, m| {
                let (_, _, seed) = sb_geo(b);
                let x = read_inode(b, m["f1"]).xattr_block;
                let blk = block(b, x);
                let mut xb = cairn_format::xattr::XattrBlock::decode(seed, x, blk).unwrap();
                xb.refcount += 2;
                xb.encode(seed, x, blk);
            },
        },
        Kind {
            name: "superblock free block counter",
            code: Code::SbFreeBlocks,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let (mut sb, _, _) = sb_geo(b);
                sb.free_blocks -= 7;
                sb.encode(&mut b[..512]);
            },
        },
        Kind {
            name: "superblock free inode counter",
            code: Code::SbFreeInodes,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let (mut sb, _, _) = sb_geo(b);
                sb.free_inodes += 3;
                sb.encode(&mut b[..512]);
            },
        },
    ]
}

/// Inode records: checksum, decoding, links and block count.
fn inode_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "inode checksum only",
            code: Code::InodeChecksumOnly,
            not_repaired: None,
            touches: &[],
            damage: |b, m| flip_inode_byte(b, m["frag"], 40, 1),
        },
        Kind {
            name: "undecodable inode",
            code: Code::InodeDamaged,
            not_repaired: None,
            touches: F1,
            damage: |b, m| flip_inode_byte(b, m["f1"], 1, 0xf0),
        },
        Kind {
            name: "link count",
            code: Code::LinkCount,
            not_repaired: None,
            touches: &[],
            damage: |b, m| edit_inode(b, m["f1"], |d| d.nlink += 2),
        },
        Kind {
            name: "block count",
            code: Code::BlockCount,
            not_repaired: None,
            touches: &[],
            damage: |b, m| edit_inode(b, m["big"], |d| d.blocks += 1),
        },
    ]
}

/// Blocks an inode claims: outside the data area, or claimed twice.
fn block_claim_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "inline extent outside the data area",
            code: Code::ExtentInvalid,
            not_repaired: None,
            touches: &["/big"],
            damage: |b, m| {
                let total = sb_geo(b).1.total_blocks;
                edit_inode(b, m["big"], |d| {
                    if let DataArea::Extents(l) = &mut d.data {
                        l[0].pblk = total + 10;
                    }
                })
            },
        },
        Kind {
            name: "blocks claimed twice",
            code: Code::BlockClaimedTwice,
            not_repaired: None,
            // big (the higher inode number) gets a copy of the shared
            // blocks (e2fsck's clone); f1 keeps its data.
            touches: &["/big"],
            damage: |b, m| {
                let target = first_extent(b, m["f1"]).pblk;
                edit_inode(b, m["big"], |d| {
                    if let DataArea::Extents(l) = &mut d.data {
                        l[0].pblk = target;
                    }
                })
            },
        },
        Kind {
            name: "blocks claimed twice by an extent tree",
            code: Code::BlockClaimedTwice,
            not_repaired: None,
            // frag (the higher inode number, an extent tree) gets a copy
            // of the shared blocks and its tree is rebuilt; big keeps its
            // data.
            touches: &["/frag"],
            damage: |b, m| {
                let target = first_extent(b, m["big"]).pblk;
                edit_first_tree_extent(b, m["frag"], |e| e.pblk = target);
            },
        },
    ]
}

/// Inode fields that disagree with the inode's type or the orphan list.
fn inode_field_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "symlink length",
            code: Code::SymlinkLength,
            not_repaired: None,
            touches: &["/short"],
            damage: |b, m| edit_inode(b, m["short"], |d| d.size = 0),
        },
        Kind {
            name: "special file owning blocks",
            code: Code::SpecialOwnsBlocks,
            not_repaired: None,
            touches: &["/a/b/fifo", "/big"],
            damage: |b, m| {
                // The FIFO maps big's first extent: both claim it; the FIFO
                // is cleared, and big keeps its data.
                let e = first_extent(b, m["big"]);
                edit_inode(b, m["fifo"], |d| {
                    d.data = DataArea::Extents(vec![e]);
                    d.blocks = u64::from(e.len);
                })
            },
        },
        Kind {
            name: "unknown inode flags",
            code: Code::InodeUnknownFlags,
            not_repaired: None,
            touches: &[],
            damage: |b, m| {
                // Flags live at bytes 4..8; the checksum (at 120, seeded
                // with the inode number) is restamped so only the flags are wrong.
                let ino = m["frag"];
                flip_inode_byte(b, ino, 7, 0x40);
                let (_, _, seed) = sb_geo(b);
                let r = inode_range(b, ino);
                let c =
                    cairn_format::checksum::crc_skipping(seed ^ ino as u32 ^ (ino >> 32) as u32, &b[r.clone()], 120);
                b[r.start + 120..r.start + 124].copy_from_slice(&c.to_le_bytes());
            },
        },
        Kind {
            name: "orphan flag without the list",
            code: Code::OrphanFlagStray,
            not_repaired: None,
            touches: &[],
            damage: |b, m| edit_inode(b, m["frag"], |d| d.flags |= cairn_format::inode::INODE_FLAG_ORPHAN),
        },
    ]
}

/// Directories, extent trees, xattr blocks and the root inode.
fn tree_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "directory entry count",
            code: Code::DirEntryCount,
            not_repaired: None,
            touches: &[],
            damage: |b, m| edit_inode(b, m["a"], |d| d.entries += 3),
        },
        Kind {
            name: "parent pointer",
            code: Code::DirParentPointer,
            not_repaired: None,
            touches: &[],
            damage: |b, m| edit_inode(b, m["c"], |d| d.parent = m["a"]),
        },
        Kind {
            name: "directory leaf checksum",
            code: Code::TreeDamaged,
            not_repaired: None,
            touches: &["/a"],
            damage: |b, m| {
                let DataArea::Tree(root) = read_inode(b, m["a"]).data else { panic!("a is a tree") };
                block(b, root)[100] ^= 1;
            },
        },
        Kind {
            name: "extent tree node",
            code: Code::TreeDamaged,
            not_repaired: None,
            touches: &["/frag"],
            damage: |b, m| {
                let DataArea::Tree(root) = read_inode(b, m["frag"]).data else { panic!("frag is a tree") };
                block(b, root)[40] ^= 0x10;
            },
        },
        Kind {
            name: "xattr block",
            code: Code::XattrBlockDamaged,
            not_repaired: None,
            touches: &[],
            damage: |b, m| {
                let x = read_inode(b, m["f1"]).xattr_block;
                block(b, x)[60] ^= 4;
            },
        },
        Kind {
            name: "root inode",
            code: Code::RootDamaged,
            not_repaired: None,
            touches: &["/"],
            damage: |b, _| flip_inode_byte(b, 1, 1, 0xf0),
        },
    ]
}

/// The block and inode bitmaps.
fn bitmap_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "block bitmap bit cleared",
            code: Code::BlocksUsedMarkedFree,
            not_repaired: None,
            touches: &[],
            damage: |b, m| {
                let (_, geo, seed) = sb_geo(b);
                let e = first_extent(b, m["big"]);
                let g = geo.group_of_block(e.pblk);
                let bit = e.pblk + 1 - geo.group_start(g);
                let bm = block(b, geo.block_bitmap(g));
                bm[(bit / 8) as usize] &= !(1 << (bit % 8));
                let c = crc(seed, bm);
                edit_gd(b, g, |gd| {
                    gd.block_bitmap_csum = c;
                    gd.free_blocks += 1;
                });
            },
        },
        Kind {
            name: "block bitmap bit set",
            code: Code::BlocksMarkedUsedUnowned,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let (_, geo, seed) = sb_geo(b);
                let g = geo.group_count - 1;
                let rel = geo.group_len(g) - 5;
                let bm = block(b, geo.block_bitmap(g));
                bm[(rel / 8) as usize] |= 1 << (rel % 8);
                let c = crc(seed, bm);
                edit_gd(b, g, |gd| {
                    gd.block_bitmap_csum = c;
                    gd.flags &= !1;
                });
            },
        },
        Kind {
            name: "inode bitmap checksum",
            code: Code::InodeBitmapChecksum,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let (_, geo, _) = sb_geo(b);
                // A padding bit of group 0's inode bitmap (past the group's inodes).
                let bit = geo.inodes_per_group + 3;
                block(b, geo.inode_bitmap(0))[(bit / 8) as usize] ^= 1 << (bit % 8);
            },
        },
    ]
}

/// The journal superblock, `/lost+found`, and directory entry types.
fn journal_and_name_kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "journal superblock",
            code: Code::JournalSuperDamaged,
            not_repaired: None,
            touches: &[],
            damage: |b, _| {
                let (sb, _, _) = sb_geo(b);
                block(b, sb.journal_start)[20] ^= 1;
            },
        },
        Kind {
            // Found as the dangling entry; the repair creates /lost+found
            // again (L12, in the expected output) to reconnect what /a held.
            name: "lost+found missing when a file is lost",
            code: Code::DirentBadTarget,
            not_repaired: None,
            touches: &["/a", "/lost+found"],
            damage: |b, m| {
                // The slot of /lost+found zeroed (its entry in / then names
                // nothing), and /a's one leaf zeroed: what it named is lost.
                let r = inode_range(b, m["lost+found"]);
                b[r].fill(0);
                let DataArea::Tree(root) = read_inode(b, m["a"]).data else { panic!("a is a tree") };
                block(b, root).fill(0);
            },
        },
        Kind {
            name: "directory entry type",
            code: Code::DirentType,
            not_repaired: None,
            touches: &[],
            damage: |b, m| retype_entry(b, m["a"], b"moved", 4),
        },
    ]
}

/// Rewrites the file type of entry `name` in directory `dir`'s (single-leaf
/// or root) tree, with a valid checksum.
fn retype_entry(bytes: &mut [u8], dir: u64, name: &[u8], dtype: u8) {
    use cairn_format::btree::{Node, NodeBody};
    let (_, _, seed) = sb_geo(bytes);
    let DataArea::Tree(root) = read_inode(bytes, dir).data else { panic!("a tree directory") };
    let blk = block(bytes, root);
    let mut node = Node::decode(seed, root, blk).unwrap();
    let NodeBody::Leaf(entries) = &mut node.body else { panic!("a one-leaf directory") };
    let v = entries.iter_mut().find(|(_, v)| Dirent::decode(dir, v).is_ok_and(|d| d.name == name)).expect("entry");
    let mut d = Dirent::decode(dir, &v.1).unwrap();
    d.dtype = dtype;
    v.1 = d.encode();
    node.encode(seed, root, blk);
}

pub(crate) type Build = fn() -> (Vec<u8>, Names);

/// Rewrites the first extent of inode `ino`'s extent tree (its leftmost
/// leaf), with a valid checksum.
fn edit_first_tree_extent(bytes: &mut [u8], ino: u64, f: impl FnOnce(&mut cairn_format::extent::Extent)) {
    use cairn_format::btree::{Node, NodeBody};
    use cairn_format::extent::Extent;
    let (_, _, seed) = sb_geo(bytes);
    let DataArea::Tree(mut at) = read_inode(bytes, ino).data else { panic!("an extent tree") };
    loop {
        let mut node = Node::decode(seed, at, block(bytes, at)).unwrap();
        match &mut node.body {
            NodeBody::Internal(children) => at = children[0].1,
            NodeBody::Leaf(entries) => {
                let (key, value) = &mut entries[0];
                let mut e = Extent::decode_value(*key, value);
                f(&mut e);
                *value = e.value_bytes();
                node.encode(seed, at, block(bytes, at));
                return;
            }
        }
    }
}

pub(crate) fn shapes() -> Vec<(&'static str, Build)> {
    vec![
        ("4 KiB blocks, small groups", || golden::populated(48, &small_groups())),
        ("1 KiB blocks", || golden::populated(48, &one_kib_blocks())),
        ("open orphans", || golden::with_open_orphans(&small_groups())),
    ]
}

fn one_kib_blocks() -> MkfsOptions {
    MkfsOptions {
        block_size: 1024,
        blocks_per_group: Some(4096),
        bytes_per_inode: 4096,
        journal_blocks: Some(1024),
        ..Default::default()
    }
}

#[test]
fn every_kind_is_found_with_its_code_and_repaired_on_every_shape() {
    let mut failures = Vec::new();
    for (shape, build) in shapes() {
        let (image, names) = golden::image(shape, build);
        let (before, errors) = tree_hashes(&image).unwrap();
        assert_eq!(errors, 0);
        assert!(before.contains_key(&b"/lost+found"[..]), "{shape}: made as `cairn mkfs` makes it");
        let (code, out) = fsck(to_file(&image).path(), false);
        assert_eq!(code, 0, "{shape}: the golden image is clean:\n{out}");
        for k in kinds() {
            let mut bytes = image.clone();
            (k.damage)(&mut bytes, &names);
            let compared = check_kind(&k, &bytes, &before).and_then(|outs| {
                outs.iter().enumerate().try_for_each(|(i, o)| golden::compare(shape, k.name, i as u32 + 1, o))
            });
            if let Err(why) = compared {
                failures.push(format!("{shape} / {}: {why}", k.name));
            }
        }
    }
    assert!(failures.is_empty(), "{} of the catalogue failed:\n{}", failures.len(), failures.join("\n"));
}

/// Checks one kind on one damaged image; returns the output of the repair
/// run and of the check after it (path normalised), to compare.
fn check_kind(k: &Kind, bytes: &[u8], before: &BTreeMap<Vec<u8>, u32>) -> Result<Vec<String>, String> {
    let report = cairn_fsck::check_image(&bytes.to_vec(), &Default::default()).map_err(|e| e.to_string())?;
    if !report.codes().contains(&k.code) {
        return Err(format!(
            "expected {} ({:?}), found {:?}",
            k.code.id(),
            k.code,
            report.problems.iter().map(|p| format!("{} {}", p.code.id(), p.message)).collect::<Vec<_>>()
        ));
    }
    let f = to_file(bytes);
    let (code, out) = fsck(f.path(), true);
    let repaired = golden::normalise(&out, f.path());
    if let Some(why) = k.not_repaired {
        // Not repaired yet: the repair must still say so, and not crash.
        return match (code, out.contains("still wrong after repair: ") || out.contains(k.code.id())) {
            (4, true) => Ok(vec![repaired]),
            _ => Err(format!("({why}) expected exit 4 still naming {}, got {code}:\n{out}", k.code.id())),
        };
    }
    if code != 1 {
        return Err(format!("repair exited {code}:\n{out}"));
    }
    let (code, out) = fsck(f.path(), false);
    if code != 0 {
        return Err(format!("not clean after the repair:\n{out}"));
    }
    let checked = golden::normalise(&out, f.path());
    let (after, errors) = tree_hashes(&std::fs::read(f.path()).unwrap()).map_err(|e| format!("does not mount: {e}"))?;
    if errors > 0 {
        return Err(format!("{errors} read errors after the repair"));
    }
    let touched = |p: &[u8]| {
        k.touches
            .iter()
            .any(|t| *t == "/" || p.starts_with(t.as_bytes()) && matches!(p.get(t.len()), None | Some(b'/')))
    };
    let changed: Vec<String> = before
        .iter()
        .filter(|(p, h)| !touched(p) && after.get(*p) != Some(h))
        .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
        .take(5)
        .collect();
    if !changed.is_empty() {
        return Err(format!("untouched files changed or lost: {changed:?}"));
    }
    Ok(vec![repaired, checked])
}
