//! Damaged images: each must fail with a specific finding; the repairable
//! ones must repair (exit 1) and then check clean (exit 0).

use crate::common::*;
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_format::btree::{Node, NodeBody};
use cairn_format::checksum::crc;
use cairn_format::dirent::Dirent;
use cairn_format::extent::Extent;
use cairn_format::group_desc::{GroupDesc, GD_SIZE};
use cairn_format::inode::DataArea;
use std::sync::Arc;

/// Checks `bytes` expecting a failure whose output contains `want`; then,
/// if `repairable`, repairs (exit 1) and re-checks (exit 0).
fn expect(bytes: &[u8], want: &str, repairable: bool) -> String {
    let f = to_file(bytes);
    let (code, out) = fsck(f.path(), false);
    assert_eq!(code, 4, "expected errors:\n{out}");
    assert!(out.contains(want), "expected {want:?} in:\n{out}");
    assert_eq!(std::fs::read(f.path()).unwrap(), bytes, "a check without --repair wrote to the image");
    let (code, rout) = fsck(f.path(), true);
    if repairable {
        assert_eq!(code, 1, "repair should fix everything:\n{rout}");
        let (code2, out2) = fsck(f.path(), false);
        assert_eq!(code2, 0, "after repair:\n{out2}");
        // The repaired image mounts and unmounts.
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
        let fs = mount(dev);
        fs.unmount().unwrap();
    } else {
        assert_eq!(code, 4, "repair cannot fix this:\n{rout}");
    }
    out
}

pub(crate) fn bs(bytes: &[u8]) -> usize {
    sb_geo(bytes).1.block_size as usize
}

pub(crate) fn block(bytes: &mut [u8], blk: u64) -> &mut [u8] {
    let b = bs(bytes);
    &mut bytes[blk as usize * b..(blk as usize + 1) * b]
}

pub(crate) fn first_extent(bytes: &[u8], ino: u64) -> Extent {
    match read_inode(bytes, ino).data {
        DataArea::Extents(l) => l[0],
        other => panic!("inode {ino} has {other:?}"),
    }
}

/// Rewrites group `g`'s descriptor after `f` (valid checksum).
pub(crate) fn edit_gd(bytes: &mut [u8], g: u64, f: impl FnOnce(&mut GroupDesc)) {
    let (sb, _, seed) = sb_geo(bytes);
    let off = sb.gdt_start as usize * bs(bytes) + g as usize * GD_SIZE;
    let mut gd = GroupDesc::decode(seed, g, &bytes[off..off + GD_SIZE]).unwrap();
    f(&mut gd);
    gd.encode(seed, g, &mut bytes[off..off + GD_SIZE]);
}

#[test]
fn flipped_inode_byte() {
    // A flipped bit in the link count: the checksum is the only thing that
    // fails, so the inode is kept, its checksum rewritten, and the link
    // count set from its entries (e2fsck's "passes checks, but checksum
    // does not match").
    let (mut bytes, m) = populated_image();
    let r = inode_range(&bytes, m["f1"]);
    bytes[r.start + 17] ^= 0x40;
    let ino = m["f1"];
    let out =
        expect(&bytes, &format!("inode {ino}: checksum does not match, but the inode passes every other check"), true);
    assert!(out.contains(&format!("inode {ino} (regular file): link count is 16387")), "{out}");
}

#[test]
fn undecodable_inode_is_cleared() {
    // An unknown file type: nothing in the inode can be trusted. A repair
    // clears it, removes the entries naming it and frees its blocks.
    let (mut bytes, m) = populated_image();
    let ino = m["f1"];
    let r = inode_range(&bytes, ino);
    bytes[r.start + 1] |= 0xf0;
    expect(&bytes, &format!("inode {ino} is damaged"), true);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("inode {ino} is damaged")) && out.contains(": cleared"), "{out}");
    assert!(out.contains(&format!("points to inode {ino}, an inode that is not in use")), "{out}");
}

/// Names in directory `dir` of a mounted image.
fn names_in(fs: &cairn_core::Fs, dir: u64) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        names.push(e.name.clone());
        true
    })
    .unwrap();
    names.retain(|n| n.as_slice() != b"." && n.as_slice() != b"..");
    names.sort();
    names
}

#[test]
fn flipped_dirent_block_byte() {
    // One flipped byte in the directory's only leaf: its checksum fails,
    // but every entry still passes every check, so a repair rebuilds the
    // tree with all of them and nothing is lost.
    let (mut bytes, m) = populated_image();
    let before = names_of_dir(&bytes, m["a"]);
    let DataArea::Tree(root) = read_inode(&bytes, m["a"]).data else { panic!() };
    block(&mut bytes, root)[100] ^= 1;
    expect(&bytes, &format!("directory {}'s entry tree: node {root} is damaged", m["a"]), true);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("directory {}: entry tree rebuilt from the {} entries", m["a"], before.len())),
        "{out}"
    );
    assert!(!out.contains("lost+found"), "{out}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev);
    assert_eq!(names_in(&fs, m["a"]), before);
    fs.unmount().unwrap();
}

/// The names directory `dir` holds in the image `bytes`.
fn names_of_dir(bytes: &[u8], dir: u64) -> Vec<Vec<u8>> {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(bytes.to_vec()));
    let fs = mount(dev);
    let names = names_in(&fs, dir);
    fs.unmount().unwrap();
    names
}

#[test]
fn unreadable_dirent_leaf_sends_its_inodes_to_lost_found() {
    // The leaf's magic is gone: nothing of it can be read. A repair
    // rebuilds the directory empty and reconnects the inodes that lost
    // their names to a new /lost+found, where the repaired image has them.
    let (mut bytes, m) = populated_image();
    let DataArea::Tree(root) = read_inode(&bytes, m["a"]).data else { panic!() };
    block(&mut bytes, root)[..4].fill(0);
    expect(&bytes, &format!("directory {}'s entry tree: node {root} is damaged", m["a"]), true);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("/lost+found is missing: created"), "{out}");
    let reconnected = out.matches("reconnected as /lost+found/#").count();
    assert!(reconnected >= 3, "{out}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev);
    let lf = fs.lookup(1, b"lost+found").expect("/lost+found exists");
    assert_eq!(names_in(&fs, lf.ino).len(), reconnected);
    fs.unmount().unwrap();
}

#[test]
fn damaged_root_inode_is_recreated() {
    // The root inode is garbage: a repair writes an empty root and
    // reconnects everything it named to /lost+found.
    let (mut bytes, _) = populated_image();
    let r = inode_range(&bytes, 1);
    bytes[r.start + 1] |= 0xf0;
    expect(&bytes, "inode 1 is damaged", true);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the root directory (inode 1) is damaged") && out.contains("recreated empty"), "{out}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev);
    assert_eq!(names_in(&fs, 1), vec![b"lost+found".to_vec()]);
    let lf = fs.lookup(1, b"lost+found").unwrap();
    assert!(names_in(&fs, lf.ino).len() >= 4, "a, big, frag, short, ... are in /lost+found");
    fs.unmount().unwrap();
}

#[test]
fn cleared_bitmap_bit_raw() {
    let (mut bytes, m) = populated_image();
    let (_, geo, _) = sb_geo(&bytes);
    let e = first_extent(&bytes, m["f1"]);
    let g = geo.group_of_block(e.pblk);
    let bit = e.pblk - geo.group_start(g);
    block(&mut bytes, geo.block_bitmap(g))[(bit / 8) as usize] &= !(1 << (bit % 8));
    let out = expect(&bytes, "block bitmap checksum does not match", true);
    assert!(out.contains(&format!("in use by inode {} (file data), but 1 of them marked free", m["f1"])), "{out}");
}

#[test]
fn cleared_bitmap_bit_with_valid_checksum() {
    let (mut bytes, m) = populated_image();
    let (_, geo, seed) = sb_geo(&bytes);
    let e = first_extent(&bytes, m["big"]);
    let g = geo.group_of_block(e.pblk);
    let bit = e.pblk + 3 - geo.group_start(g);
    let bm = block(&mut bytes, geo.block_bitmap(g));
    bm[(bit / 8) as usize] &= !(1 << (bit % 8));
    let c = crc(seed, bm);
    edit_gd(&mut bytes, g, |gd| {
        gd.block_bitmap_csum = c;
        gd.free_blocks += 1;
    });
    expect(&bytes, &format!("in use by inode {} (file data), but 1 of them marked free in the bitmap", m["big"]), true);
}

#[test]
fn set_bitmap_bit_owned_by_nothing() {
    let (mut bytes, _) = populated_image();
    let (_, geo, seed) = sb_geo(&bytes);
    let g = geo.group_count - 1;
    let rel = geo.group_len(g) - 5;
    let bm = block(&mut bytes, geo.block_bitmap(g));
    bm[(rel / 8) as usize] |= 1 << (rel % 8);
    let c = crc(seed, bm);
    edit_gd(&mut bytes, g, |gd| {
        gd.block_bitmap_csum = c;
        gd.flags &= !1;
    });
    expect(
        &bytes,
        &format!("block {} is marked used in the bitmap, but nothing owns it", geo.group_start(g) + rel),
        true,
    );
}

#[test]
fn wrong_nlink() {
    let (mut bytes, m) = populated_image();
    edit_inode(&mut bytes, m["f1"], |d| d.nlink += 1);
    expect(
        &bytes,
        &format!("inode {} (regular file): link count is 4, but 3 directory entries point to it", m["f1"]),
        true,
    );
}

#[test]
fn wrong_directory_nlink() {
    let (mut bytes, m) = populated_image();
    edit_inode(&mut bytes, m["b"], |d| d.nlink = 7);
    expect(&bytes, &format!("directory {}: link count is 7, but it should be 4 (2 + 2 subdirectories)", m["b"]), true);
}

#[test]
fn wrong_block_count() {
    let (mut bytes, m) = populated_image();
    edit_inode(&mut bytes, m["frag"], |d| d.blocks += 2);
    expect(&bytes, &format!("inode {}: block count is", m["frag"]), true);
}

#[test]
fn wrong_parent_and_entry_count() {
    let (mut bytes, m) = populated_image();
    edit_inode(&mut bytes, m["c"], |d| d.parent = m["a"]);
    edit_inode(&mut bytes, m["a"], |d| d.entries += 5);
    let out = expect(&bytes, &format!("directory {}: '..' points to {}", m["c"], m["a"]), true);
    assert!(out.contains(&format!("directory {}: entry count is", m["a"])), "{out}");
}

#[test]
fn wrong_superblock_free_counter() {
    let (mut bytes, _) = populated_image();
    let (mut sb, _, _) = sb_geo(&bytes);
    sb.free_blocks -= 1;
    sb.encode(&mut bytes[..4096]);
    expect(&bytes, "superblock: free block count is", true);
}

#[test]
fn wrong_group_counters() {
    let (mut bytes, _) = populated_image();
    edit_gd(&mut bytes, 0, |gd| {
        gd.free_inodes -= 3;
        gd.used_dirs += 1;
    });
    let out = expect(&bytes, "group 0: descriptor counts", true);
    assert!(out.contains("directories, but the group holds"), "{out}");
}

#[test]
fn damaged_group_descriptor() {
    let (mut bytes, _) = populated_image();
    let (sb, _, _) = sb_geo(&bytes);
    let off = sb.gdt_start as usize * bs(&bytes) + GD_SIZE + 50;
    bytes[off] ^= 0xff;
    expect(&bytes, "group 1: descriptor is damaged", true);
}

#[test]
fn a_rebuilt_descriptor_that_keeps_inode_uninit_drops_the_zeroed_tables_feature() {
    use cairn_format::superblock::COMPAT_ITABLES_ZEROED;
    let (mut bytes, _) = populated_image();
    let (sb, _, seed) = sb_geo(&bytes);
    assert!(sb.feature_compat & COMPAT_ITABLES_ZEROED != 0, "mkfs on a MemDevice zeroes the tables");
    // A group that has taken no inode (the per-block packing of descriptors
    // is GD_SIZE apart in one table here).
    let at = |g: u64| sb.gdt_start as usize * bs(&bytes) + g as usize * GD_SIZE;
    let g = (1..sb.group_count)
        .find(|&g| {
            let gd = GroupDesc::decode(seed, g, &bytes[at(g)..at(g) + GD_SIZE]).unwrap();
            gd.flags & cairn_format::group_desc::GD_INODE_UNINIT != 0
        })
        .expect("a group that has taken no inode");
    let off = at(g);
    bytes[off + 50] ^= 0xff;
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    let (sb, _, _) = sb_geo(&std::fs::read(f.path()).unwrap());
    assert_eq!(sb.feature_compat & COMPAT_ITABLES_ZEROED, 0, "the promise of zeroed tables stayed");
    assert_eq!(fsck(f.path(), false).0, 0);
}

#[test]
fn wrong_dirent_type() {
    let (mut bytes, m) = populated_image();
    let (_, _, seed) = sb_geo(&bytes);
    let DataArea::Tree(root) = read_inode(&bytes, m["b"]).data else { panic!() };
    let blk = block(&mut bytes, root);
    let mut node = Node::decode(seed, root, blk).unwrap();
    let NodeBody::Leaf(entries) = &mut node.body else { panic!("b's tree should be one leaf") };
    let (_, v) = entries.iter_mut().find(|(_, v)| Dirent::decode(0, v).unwrap().name == b"fifo").unwrap();
    let mut e = Dirent::decode(0, v).unwrap();
    e.dtype = 8; // regular file
    *v = e.encode();
    node.encode(seed, root, blk);
    expect(&bytes, &format!("entry 'fifo' says file type 8, but inode {} is a FIFO", m["fifo"]), true);
}

#[test]
fn unlisted_orphan_is_freed() {
    // An image with orphans, replayed by a repair run first.
    let dev = new_image(32, &small_groups());
    let c = cairn_core::Ctx::root();
    let fs = mount(dev.clone());
    let o = fs.names().mknod(&c, ROOT, b"o", cairn_format::inode::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(o, 0, &[1u8; 30_000]).unwrap();
    fs.names().unlink(ROOT, b"o").unwrap();
    fs.files().sync_fs().unwrap();
    let f = to_file(&dev.snapshot());
    drop(fs);
    assert_eq!(fsck(f.path(), true).0, 0);
    let mut bytes = std::fs::read(f.path()).unwrap();
    let (mut sb, _, _) = sb_geo(&bytes);
    assert_ne!(sb.orphan_root, 0);
    sb.orphan_root = 0;
    sb.encode(&mut bytes[..4096]);
    let out = expect(&bytes, &format!("inode {o} (regular file) has no links and is not on the orphan list"), true);
    assert!(out.contains("is marked used in the bitmap, but nothing owns it"), "the orphan list's leaf: {out}");
}

#[test]
fn dangling_entry_is_removed() {
    let (mut bytes, m) = populated_image();
    // Free the fifo's inode behind the directory's back (bitmap + counters).
    let (_, geo, seed) = sb_geo(&bytes);
    let ino = m["fifo"];
    edit_inode(&mut bytes, ino, |d| d.nlink = 0);
    let g = geo.group_of_ino(ino);
    let idx = geo.index_in_group(ino);
    let bm = block(&mut bytes, geo.inode_bitmap(g));
    bm[(idx / 8) as usize] &= !(1 << (idx % 8));
    let c = crc(seed, bm);
    edit_gd(&mut bytes, g, |gd| {
        gd.inode_bitmap_csum = c;
        gd.free_inodes += 1;
    });
    let (mut sb, _, _) = sb_geo(&bytes);
    sb.free_inodes += 1;
    sb.encode(&mut bytes[..4096]);
    expect(&bytes, &format!("entry 'fifo' points to inode {ino}, an inode that is not in use"), true);
}

#[test]
fn cleared_inode_bitmap_bit_is_restored() {
    let (mut bytes, m) = populated_image();
    let (_, geo, seed) = sb_geo(&bytes);
    let ino = m["short"];
    let g = geo.group_of_ino(ino);
    let idx = geo.index_in_group(ino);
    let bm = block(&mut bytes, geo.inode_bitmap(g));
    bm[(idx / 8) as usize] &= !(1 << (idx % 8));
    let c = crc(seed, bm);
    edit_gd(&mut bytes, g, |gd| gd.inode_bitmap_csum = c);
    expect(&bytes, &format!("inode {ino} (symlink) is named by entry 'short' in directory 1 but is marked free"), true);
}

#[test]
fn inode_bitmap_bits_set_over_empty_slots_are_cleared() {
    // A flipped bitmap byte marks free, zeroed slots as in use (raw: the
    // bitmap's checksum no longer matches). Before, the repair rewrote the
    // free counts to agree with the corrupt bitmap and called the slots
    // damaged, exit 4 for ever.
    let (mut bytes, m) = populated_image();
    let (_, geo, _) = sb_geo(&bytes);
    let last = *m.values().max().unwrap();
    let g = geo.group_of_ino(last);
    let byte = (geo.index_in_group(last) / 8 + 2) as usize;
    let free_before = sb_geo(&bytes).0.free_inodes;
    let bm = block(&mut bytes, geo.inode_bitmap(g));
    assert_eq!(bm[byte], 0, "slots past the last inode are free");
    bm[byte] = 0x0f;
    let first = g * geo.inodes_per_group + byte as u64 * 8 + 1;
    let out =
        expect(&bytes, &format!("inode {first} is marked in use in the inode bitmap, but its slot is empty"), true);
    assert!(!out.contains("damaged"), "{out}");
    let f = to_file(&bytes);
    let (code, rout) = fsck(f.path(), true);
    assert_eq!(code, 1, "{rout}");
    let repaired = std::fs::read(f.path()).unwrap();
    assert_eq!(sb_geo(&repaired).0.free_inodes, free_before, "the four slots are free again");
    let bm = &repaired[geo.inode_bitmap(g) as usize * bs(&repaired)..];
    assert_eq!(bm[byte], 0, "the bits are cleared");
}

/// The external values of `ino`'s xattr block: (block, descriptors).
fn externals(bytes: &[u8], ino: u64) -> (u64, Vec<cairn_format::xattr::ExtValue>) {
    let (_, _, seed) = sb_geo(bytes);
    let xblk = read_inode(bytes, ino).xattr_block;
    let b = &bytes[xblk as usize * bs(bytes)..(xblk as usize + 1) * bs(bytes)];
    let x = cairn_format::xattr::XattrBlock::decode(seed, xblk, b).unwrap();
    (xblk, cairn_format::xattr::XattrBlock::externals(&x.entries).copied().collect())
}

#[test]
fn damaged_external_xattr_value_is_dropped_by_repair() {
    let (mut bytes, m) = populated_image();
    let (xblk, ext) = externals(&bytes, m["xbig"]);
    let big = ext.iter().find(|x| x.len == 50_000).unwrap();
    block(&mut bytes, big.first)[cairn_format::xattr::XVAL_HEADER + 5] ^= 1;
    let out = expect(&bytes, &format!("xattr block {xblk}: the 50000-byte value of user.big is damaged"), true);
    assert!(out.contains("checksum"), "{out}");
    // After the repair the entry is gone, the other value is intact.
    let f = to_file(&bytes);
    fsck(f.path(), true);
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev);
    assert_eq!(fs.listxattr(m["xbig"]).unwrap(), b"user.mid\0");
    assert_eq!(fs.getxattr(m["xbig"], b"user.mid").unwrap().len(), 3000);
    fs.unmount().unwrap();
}

#[test]
fn value_block_also_claimed_as_file_data() {
    let (mut bytes, m) = populated_image();
    let (xblk, ext) = externals(&bytes, m["xbig"]);
    let mid = ext.iter().find(|x| x.len == 3000).unwrap();
    // f1's first extent, one block long, moved over the value block.
    edit_inode(&mut bytes, m["f1"], |d| {
        let DataArea::Extents(list) = &mut d.data else { panic!("f1 maps inline") };
        list[0].pblk = mid.first;
        list[0].len = 1;
    });
    let out = expect(&bytes, &format!("xattr block {xblk} (external values)"), false);
    assert!(out.contains("both claim 1 block(s)"), "{out}");
}

#[test]
fn an_inline_extent_outside_the_data_area_is_dropped_and_the_rest_kept() {
    let (mut bytes, m) = populated_image();
    let ino = m["f1"];
    let total = sb_geo(&bytes).1.total_blocks;
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 13 % 251) as u8).collect();
    edit_inode(&mut bytes, ino, |d| {
        let DataArea::Extents(list) = &mut d.data else { panic!("f1 has inline extents") };
        list.push(Extent { lblk: 100, len: 3, pblk: total + 5, ..list[0] });
    });
    expect(&bytes, &format!("inode {ino}: inline extent at logical block 100: blocks {}", total + 5), true);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("dropped (the file reads zeros there)"), "{out}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev);
    assert_eq!(fs.files().read(ino, 0, 40_000).unwrap(), data, "the valid extent is kept");
    fs.unmount().unwrap();
}

#[test]
fn damaged_extent_tree_is_rebuilt_from_what_can_be_read() {
    // frag's extent tree is one leaf: damaged, nothing of it can be read.
    // A repair gives the file an empty tree (it reads as a hole, its size
    // kept) and pass 5 frees the blocks only that leaf mapped.
    let (mut bytes, m) = populated_image();
    let ino = m["frag"];
    let DataArea::Tree(root) = read_inode(&bytes, ino).data else { panic!("frag has an extent tree") };
    let size = read_inode(&bytes, ino).size;
    block(&mut bytes, root)[40] ^= 0x10;
    expect(&bytes, &format!("inode {ino}'s extent tree: node {root} is damaged"), true);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("inode {ino}: extent tree rebuilt from the 0 extents")), "{out}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev);
    assert_eq!(fs.inodes().getattr(ino).unwrap().size, size, "the size is kept");
    assert!(fs.files().read(ino, 0, 8192).unwrap().iter().all(|&b| b == 0), "what was mapped reads as a hole");
    assert_eq!(fs.files().read(m["big"], 0, 4096).unwrap(), vec![7u8; 4096], "other files are untouched");
    fs.unmount().unwrap();
}

#[test]
fn damaged_xattr_block_is_dropped_from_its_inode() {
    let (mut bytes, m) = populated_image();
    let ino = m["f1"];
    let xblk = read_inode(&bytes, ino).xattr_block;
    assert_ne!(xblk, 0);
    block(&mut bytes, xblk)[60] ^= 0x01;
    expect(&bytes, &format!("xattr block {xblk} (of inode {ino}) is damaged"), true);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("dropped from the inodes that point at it"), "{out}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev);
    assert!(fs.getxattr(ino, b"user.colour").is_err(), "the damaged block's attributes are gone");
    assert_eq!(fs.files().read(ino, 0, 4).unwrap().len(), 4, "the file itself is kept");
    fs.unmount().unwrap();
}

#[test]
fn a_check_without_repair_claims_no_fix() {
    // Findings whose message says what the repair does ("checksum
    // rewritten", "marked free") said it in a check that changes nothing.
    let (mut bytes, m) = populated_image();
    let r = inode_range(&bytes, m["f1"]);
    bytes[r.start + 17] ^= 0x40;
    let (_, geo, _) = sb_geo(&bytes);
    let last = *m.values().max().unwrap();
    let g = geo.group_of_ino(last);
    let byte = (geo.index_in_group(last) / 8 + 2) as usize;
    block(&mut bytes, geo.inode_bitmap(g))[byte] = 0x01;
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), false);
    assert_eq!(code, 4, "{out}");
    for claim in ["checksum rewritten", ": marked free", "[fixed]"] {
        assert!(!out.contains(claim), "a check without --repair claims {claim:?}:\n{out}");
    }
    assert!(out.contains("(not fixed: checked only; --repair would rewrite the checksum)"), "{out}");
    assert!(out.contains("(not fixed: checked only; --repair would mark it free)"), "{out}");
    let (code, rout) = fsck(f.path(), true);
    assert_eq!(code, 1, "{rout}");
    assert!(rout.contains("checksum rewritten [fixed]") && rout.contains(": marked free [fixed]"), "{rout}");
}

#[test]
fn one_repair_releases_blocks_of_an_inode_whose_checksum_is_also_wrong() {
    // big (the higher inode) maps f1's blocks, and its checksum is wrong too
    // (fsck-rc4.img): the release read big through its checksum, failed,
    // and left the pair for a second round, "1 left uncorrected" (exit 4).
    let (mut bytes, m) = populated_image();
    let target = first_extent(&bytes, m["f1"]).pblk;
    edit_inode(&mut bytes, m["big"], |d| {
        if let DataArea::Extents(l) = &mut d.data {
            l[0].pblk = target;
        }
    });
    let r = inode_range(&bytes, m["big"]);
    bytes[r.start + 17] ^= 0x40;
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "one repair should fix it all:\n{out}");
    assert!(!out.contains("repair round 2"), "{out}");
    assert!(out.contains(&format!("inode {}: checksum does not match", m["big"])), "{out}");
    assert!(out.contains("both claim"), "{out}");
    assert_clean(f.path());
}

/// Damage for the clone tests: big's first extent is pointed at f1's
/// blocks; returns the bytes big's first extent then maps (its view).
fn big_over_f1(bytes: &mut [u8], m: &std::collections::HashMap<&'static str, u64>) -> (Extent, Vec<u8>) {
    let target = first_extent(bytes, m["f1"]).pblk;
    edit_inode(bytes, m["big"], |d| {
        if let DataArea::Extents(l) = &mut d.data {
            l[0].pblk = target;
        }
    });
    let e = first_extent(bytes, m["big"]);
    let b = bs(bytes);
    (e, bytes[e.pblk as usize * b..(e.pblk + u64::from(e.len)) as usize * b].to_vec())
}

#[test]
fn blocks_claimed_twice_are_cloned_so_both_files_keep_their_data() {
    // e2fsck's passes 1B-1D: the second claimant gets a copy. Before, big
    // gave its extent up and read holes where f1's blocks were.
    let (mut bytes, m) = populated_image();
    let (e, view) = big_over_f1(&mut bytes, &m);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("inode {} gets its own copy of them", m["big"])), "{out}");
    assert!(!out.contains("gives up") && !out.contains("repair round 2"), "{out}");
    assert_clean(f.path());
    let repaired = std::fs::read(f.path()).unwrap();
    let now = first_extent(&repaired, m["big"]);
    assert_ne!(now.pblk, e.pblk, "big's shared blocks moved to its copy");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(repaired));
    let fs = mount(dev);
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 13 % 251) as u8).collect();
    assert_eq!(fs.files().read(m["f1"], 0, 40_000).unwrap(), data, "f1 keeps its data");
    let b = bs(&bytes) as u64;
    let got = fs.files().read(m["big"], e.lblk * b, view.len() as u32).unwrap();
    assert!(got == view, "big reads what its extent mapped, not holes");
    fs.unmount().unwrap();
}

#[test]
fn without_free_space_for_a_copy_the_blocks_are_released() {
    let (mut bytes, m) = populated_image();
    // No free block left: every bitmap bit set (with its checksum), as a
    // full file system's would be; pass 5 then frees what nobody owns.
    let (_, geo, seed) = sb_geo(&bytes);
    for g in 0..geo.group_count {
        let bm = block(&mut bytes, geo.block_bitmap(g));
        bm.fill(0xff);
        let c = crc(seed, bm);
        edit_gd(&mut bytes, g, |gd| {
            gd.block_bitmap_csum = c;
            gd.free_blocks = 0;
            gd.flags &= !cairn_format::group_desc::GD_BLOCK_UNINIT;
        });
    }
    big_over_f1(&mut bytes, &m);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    let want = format!("no free space is left to copy them: inode {} gives up the extents it shares", m["big"]);
    assert!(out.contains(&want), "{out}");
    assert_clean(f.path());
}
