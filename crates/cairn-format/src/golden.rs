//! Golden bytes: every on-disk structure encoded from a fixed value and
//! compared with bytes written down here, then decoded back.
//!
//! These tests pin the format. If one fails, an encoder changed what it
//! writes: either that is a bug, or it is a format change, which needs a
//! new version or feature flag (and images written by older builds still
//! decoding) before the expected bytes here are updated.
//!
//! Each expectation lists `(offset, hex bytes)` parts; every byte outside
//! them must be zero. Hex may contain spaces.

use crate::btree::*;
use crate::dirent::Dirent;
use crate::extent::Extent;
use crate::group_desc::GroupDesc;
use crate::inode::*;
use crate::journal::*;
use crate::superblock::*;
use crate::xattr::*;

const SEED: u32 = 0xc0ff_ee11;

fn unhex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

/// `b` as a hex string literal, or a `concat!` of one per 32 bytes.
fn hex_literal(b: &[u8]) -> String {
    let words: Vec<String> = b.chunks(8).map(|w| w.iter().map(|x| format!("{x:02x}")).collect()).collect();
    let lines: Vec<String> = words.chunks(4).map(|l| format!("\"{}\"", l.join(" "))).collect();
    if lines.len() == 1 {
        lines[0].clone()
    } else {
        format!("concat!({})", lines.join(", "))
    }
}

/// The non-zero parts of `b` (runs closer than 16 zero bytes merged), in the
/// form the expectations are written in.
fn parts_of(b: &[u8]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, _) in b.iter().enumerate().filter(|(_, x)| **x != 0) {
        match runs.last_mut() {
            Some(r) if i - r.1 < 16 => r.1 = i + 1,
            _ => runs.push((i, i + 1)),
        }
    }
    runs.iter().map(|&(s, e)| format!("        ({s}, {}),\n", hex_literal(&b[s..e]))).collect()
}

/// Checks that `b` holds exactly `parts` (zero elsewhere).
#[track_caller]
fn assert_bytes(b: &[u8], parts: &[(usize, &str)]) {
    let mut want = vec![0u8; b.len()];
    for (off, h) in parts {
        let bytes = unhex(h);
        want[*off..off + bytes.len()].copy_from_slice(&bytes);
    }
    let line = std::panic::Location::caller().line();
    assert!(want == b, "encoding changed (golden.rs line {line}); it now is:\n{}@@end", parts_of(b));
}

/// A B+tree node written as block `blocknr` of 1 KiB holds exactly `parts`,
/// and decodes back to `node`.
#[track_caller]
fn assert_node(node: &Node, blocknr: u64, parts: &[(usize, &str)]) {
    let mut b = vec![0u8; 1024];
    node.encode(SEED, blocknr, &mut b);
    assert_bytes(&b, parts);
    assert_eq!(&Node::decode(SEED, blocknr, &b).unwrap(), node);
}

/// An xattr block written as block 31337 of 1 KiB holds exactly `hex` from
/// offset 0, and decodes back to `x`.
#[track_caller]
fn assert_xattr_block(x: &XattrBlock, hex: &str) {
    let mut b = vec![0u8; 1024];
    x.encode(SEED, 31337, &mut b);
    assert_bytes(&b, &[(0, hex)]);
    assert_eq!(&XattrBlock::decode(SEED, 31337, &b).unwrap(), x);
}

#[test]
fn superblock() {
    let sb = Superblock {
        version: VERSION,
        block_size_log2: 12,
        state: STATE_CLEAN,
        feature_compat: 0x11,
        feature_incompat: 0,
        feature_ro_compat: 0x22,
        uuid: *b"0123456789abcdef",
        total_blocks: 65536,
        blocks_per_group: 32768,
        inodes_per_group: 8192,
        group_count: 2,
        gdt_start: 1,
        gdt_blocks: 1,
        journal_start: 2,
        journal_blocks: 1024,
        free_blocks: 60000,
        free_inodes: 16000,
        next_ino: 9,
        orphan_root: 4242,
        mkfs_time: 1_700_000_000,
        last_mount_time: 1_700_000_100,
        last_write_time: 1_700_000_200,
        mount_count: 3,
        hash_seed: *b"fedcba9876543210",
        label: *b"golden label\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        journal_groups: 0,
        backup_group: 0,
        csum_seed: 0,
        default_errors: 0,
        mount_opts: [0; 64],
    };
    let mut b = vec![0u8; SB_SIZE];
    sb.encode(&mut b);
    assert_bytes(
        &b,
        &[
            (
                0,
                concat!(
                    "434149524e465300 020000000c000000 0100000011000000 0000000022000000",
                    "3031323334353637 3839616263646566 0000010000000000 0080000000200000",
                    "0200000000000000 0100000000000000 0100000000000000 0200000000000000",
                    "0004000000000000 60ea000000000000 803e000000000000 0900000000000000",
                    "9210000000000000 00f1536500000000 64f1536500000000 c8f1536500000000",
                    "0300000000000000 6665646362613938 3736353433323130 676f6c64656e206c",
                    "6162656c"
                ),
            ),
            (508, "89ee62de"),
        ],
    );
    assert_eq!(Superblock::decode(&b, 65536 * 4096).unwrap(), sb);
}

#[test]
fn group_descriptor() {
    let gd = GroupDesc {
        block_bitmap: 0x0102_0304_0506,
        inode_bitmap: 0x0102_0304_0507,
        inode_table: 0x0102_0304_0508,
        free_blocks: 30000,
        free_inodes: 8000,
        used_dirs: 12,
        flags: crate::group_desc::GD_BLOCK_UNINIT,
        block_bitmap_csum: 0xdead_beef,
        inode_bitmap_csum: 0xcafe_f00d,
        itable_unused: 4096,
    };
    let mut b = vec![0u8; crate::group_desc::GD_SIZE];
    gd.encode(SEED, 7, &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "0605040302010000 0705040302010000 0805040302010000 30750000401f0000",
                "0c00000001000000 efbeadde0df0feca 0010000000000000 0000000020600834"
            ),
        )],
    );
    assert_eq!(GroupDesc::decode(SEED, 7, &b).unwrap(), gd);
}

fn inode_base(mode: u32, data: DataArea) -> DiskInode {
    DiskInode {
        mode,
        flags: 0,
        uid: 1000,
        gid: 100,
        nlink: 2,
        generation: 0x5eed,
        size: 12345,
        blocks: 4,
        atime: Timestamp { sec: 1_700_000_001, nsec: 1 },
        mtime: Timestamp { sec: 1_700_000_002, nsec: 2 },
        ctime: Timestamp { sec: 1_700_000_003, nsec: 3 },
        crtime: Timestamp { sec: -1, nsec: 999_999_999 },
        rdev: 0,
        xattr_block: 777,
        parent: 1,
        entries: 0,
        attr_flags: 0,
        data,
    }
}

#[test]
fn inode_with_inline_extents() {
    let ino = inode_base(
        S_IFREG | 0o644,
        DataArea::Extents(vec![
            Extent { lblk: 0, pblk: 5000, len: 3, unwritten: false },
            Extent { lblk: 10, pblk: 6000, len: 1, unwritten: true },
        ]),
    );
    let mut b = vec![0u8; INODE_SIZE];
    ino.encode(SEED, 42, &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "a481000000000000 e803000064000000 02000000ed5e0000 3930000000000000",
                "0400000000000000 01f1536500000000 0100000002000000 02f1536500000000",
                "03f1536500000000 03000000ffc99a3b ffffffffffffffff 0000000000000000",
                "0903000000000000 0100000000000000 0000000000000000 15fc7ce700000000",
                "0200000000000000 0000000000000000 8813000000000000 0300000000000000",
                "0a00000000000000 7017000000000000 0100000001"
            ),
        )],
    );
    assert_eq!(DiskInode::decode(SEED, 42, &b).unwrap(), ino);
}

#[test]
fn inode_with_tree_root_and_orphan_flag() {
    let mut ino = inode_base(S_IFDIR | 0o755, DataArea::Tree(0x0a0b_0c0d));
    ino.flags = INODE_FLAG_ORPHAN;
    ino.entries = 17;
    let mut b = vec![0u8; INODE_SIZE];
    ino.encode(SEED, (1 << 32) + 5, &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "ed41000006000000 e803000064000000 02000000ed5e0000 3930000000000000",
                "0400000000000000 01f1536500000000 0100000002000000 02f1536500000000",
                "03f1536500000000 03000000ffc99a3b ffffffffffffffff 0000000000000000",
                "0903000000000000 0100000000000000 1100000000000000 797af38800000000",
                "0d0c0b0a"
            ),
        )],
    );
    ino.flags |= INODE_FLAG_TREE;
    assert_eq!(DiskInode::decode(SEED, (1 << 32) + 5, &b).unwrap(), ino);
}

#[test]
fn inode_with_inline_symlink() {
    let mut ino = inode_base(S_IFLNK | 0o777, DataArea::Inline(b"../target".to_vec()));
    ino.size = 9;
    ino.blocks = 0;
    let mut b = vec![0u8; INODE_SIZE];
    ino.encode(SEED, 9, &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "ffa1000001000000 e803000064000000 02000000ed5e0000 0900000000000000",
                "0000000000000000 01f1536500000000 0100000002000000 02f1536500000000",
                "03f1536500000000 03000000ffc99a3b ffffffffffffffff 0000000000000000",
                "0903000000000000 0100000000000000 0000000000000000 bbbcad1500000000",
                "2e2e2f7461726765 74"
            ),
        )],
    );
    ino.flags = INODE_FLAG_INLINE_DATA;
    assert_eq!(DiskInode::decode(SEED, 9, &b).unwrap(), ino);
}

#[test]
fn extent() {
    let e = Extent { lblk: 0x1122_3344, pblk: 0x0055_6677_8899, len: 0x100, unwritten: true };
    let mut b = vec![0u8; crate::extent::EXTENT_DISK_SIZE];
    e.encode(&mut b);
    assert_bytes(&b, &[(0, "4433221100000000 9988776655000000 0001000001000000")]);
    assert_eq!(Extent::decode(&b), e);
    let v = e.value_bytes();
    assert_bytes(&v, &[(0, "9988776655000000 0001000001000000")]);
    assert_eq!(Extent::decode_value(e.lblk, &v), e);
}

#[test]
fn dirent() {
    let d = Dirent {
        ino: 0x0102_0304_0506_0708,
        dtype: crate::dirent::dtype_of_mode(S_IFREG),
        name: b"hello.txt".to_vec(),
    };
    let v = d.encode();
    assert_bytes(&v, &[(0, "0807060504030201 0809 68656c6c6f2e747874")]);
    assert_eq!(Dirent::decode(5, &v).unwrap(), d);
}

#[test]
fn btree_leaf() {
    let leaf = Node {
        kind: KIND_DIRENTS,
        level: 0,
        owner: 99,
        body: NodeBody::Leaf(vec![(0x10, b"abc".to_vec()), (0x20, vec![]), (0x8000_0000_0000_0010, vec![0xee; 5])]),
    };
    assert_node(
        &leaf,
        1234,
        &[
            (
                0,
                concat!(
                    "4342543102000300 6300000000000000 d204000000000000 000000000d102e48",
                    "1000000000000000 fd03030020000000 00000000fd030000 1000000000000080",
                    "f80305"
                ),
            ),
            (1016, "eeeeeeeeee616263"),
        ],
    );
}

#[test]
fn btree_internal() {
    let node = Node {
        kind: KIND_EXTENTS,
        level: 2,
        owner: 42,
        body: NodeBody::Internal(vec![(0, 500), (0x1000, 501), (0xffff_ffff, 502)]),
    };
    assert_node(
        &node,
        77,
        &[(
            0,
            concat!(
                "4342543101020300 2a00000000000000 4d00000000000000 00000000c3b2a3c4",
                "0000000000000000 f401000000000000 0010000000000000 f501000000000000",
                "ffffffff00000000 f601"
            ),
        )],
    );
}

#[test]
fn xattr_block() {
    let x = XattrBlock {
        refcount: 3,
        entries: vec![XattrEntry::inline(1, b"mime", b"text/plain"), XattrEntry::inline(3, b"selinux", b"u:r")],
    };
    assert_xattr_block(
        &x,
        concat!(
            "4358413103000000 e8a7dc5f02000000 697a000000000000 000000006a12c611",
            "01040a006d696d65 746578742f706c61 696e000003070300 73656c696e757875",
            "3a72"
        ),
    );
}

#[test]
fn xattr_block_with_an_external_value() {
    let x = XattrBlock {
        refcount: 1,
        entries: vec![XattrEntry {
            namespace: 1,
            name: b"big".to_vec(),
            value: XattrValue::External(ExtValue { first: 0x1234_5678, len: 65536, crc: 0xcafe_f00d }),
        }],
    };
    assert_xattr_block(
        &x,
        concat!(
            "4358413101000000 684aee3a01000000 697a000000000000 000000005ccdbf0b",
            "8103100062696778 5634120000000000 0001000df0feca"
        ),
    );
}

#[test]
fn xattr_value_block() {
    let h = ValueBlock { index: 2, used: 5, owner: 31337, next: 0x0102_0304_0506 };
    let mut b = vec![0u8; 1024];
    h.encode(SEED, 4242, b"hello", &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "4358563102000000 05000000bcc211fe 9210000000000000 697a000000000000",
                "0605040302010000 68656c6c6f"
            ),
        )],
    );
    assert_eq!(ValueBlock::decode(SEED, 4242, &b).unwrap(), (h, &b"hello"[..]));
}

#[test]
fn journal_superblock() {
    let j = JournalSuper { tail_seq: 0x0123_4567_89ab, tail_off: 17 };
    let mut b = vec![0u8; 1024];
    j.encode(SEED, &mut b);
    assert_bytes(&b, &[(0, "434a534201000000 ab89674523010000 1100000000000000 000000003098e0b0")]);
    assert_eq!(JournalSuper::decode(SEED, 2, &b, 64).unwrap(), j);
}

#[test]
fn journal_descriptor() {
    let homes = [0, 1, 0x0102_0304_0506];
    let mut b = vec![0u8; 1024];
    encode_descriptor(SEED, 0x0123_4567_89ab, &homes, &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "434a445303000000 ab89674523010000 0000000000000000 0000000075ce4938",
                "0000000000000000 0100000000000000 060504030201"
            ),
        )],
    );
    assert_eq!(decode_descriptor(SEED, 0x0123_4567_89ab, &b).unwrap(), homes.map(|h| (h, WHOLE)));
}

#[test]
fn journal_region_descriptor() {
    let entries = [(0, WHOLE), (0x0102_0304_0506, 0b101 | 1 << 63)];
    let mut b = vec![0u8; 1024];
    encode_region_descriptor(SEED, 0x0123_4567_89ab, &entries, &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "434a445202000000 ab89674523010000 0000000000000000 0000000089649e70",
                "0000000000000000 ffffffffffffffff 0605040302010000 0500000000000080"
            ),
        )],
    );
    assert_eq!(decode_descriptor(SEED, 0x0123_4567_89ab, &b).unwrap(), entries);
}

#[test]
fn journal_compressed_region_descriptor() {
    // The descriptor only: the zstd frame that follows is zstd's format.
    let entries = [(0, WHOLE), (0x0102_0304_0506, 0b101 | 1 << 63)];
    let mut b = vec![0u8; 1024];
    encode_compressed_region_descriptor(SEED, 0x0123_4567_89ab, &entries, 0x0304, &mut b);
    assert_bytes(
        &b,
        &[(
            0,
            concat!(
                "434a445a02000000 ab89674523010000 0403000000000000 00000000396e59c7",
                "0000000000000000 ffffffffffffffff 0605040302010000 0500000000000080"
            ),
        )],
    );
    assert_eq!(decode_descriptor(SEED, 0x0123_4567_89ab, &b).unwrap(), entries);
}

#[test]
fn journal_commit() {
    let mut b = vec![0u8; 1024];
    encode_commit(SEED, 0x0123_4567_89ab, 7, 0xfeed_face, &mut b);
    assert_bytes(&b, &[(0, "434a434d07000000 ab89674523010000 cefaedfe00000000 00000000e3544af2")]);
    assert_eq!(decode_commit(SEED, 0x0123_4567_89ab, &b).unwrap(), (7, 0xfeed_face));
    assert_eq!(body_seed(SEED, 0x0123_4567_89ab), SEED ^ 0x4567_89ab ^ 0x0123);
}
