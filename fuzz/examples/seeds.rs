//! Writes the starting corpus of every fuzz target into `corpus/<target>/`
//! from real structures: the golden image's superblock, descriptors,
//! inodes, tree nodes and xattr blocks, and journal records (plain and
//! zstd) that the engine wrote. Run by tests/external/fuzz.sh when a
//! corpus directory is empty; the files it wrote are kept in the repo.

use cairn_core::dev::MemDevice;
use cairn_core::{Ctx, Fs, MountOptions};
use cairn_format::btree::NODE_MAGIC;
use cairn_format::codec::get_u32;
use cairn_format::journal::{JournalRegion, JournalSuper};
use cairn_format::layout::Geometry;
use cairn_format::superblock::Superblock;
use cairn_format::xattr::{XATTR_MAGIC, XVAL_MAGIC};
use std::path::Path;
use std::sync::Arc;

fn put(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), bytes).unwrap();
}

fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| "corpus".into());
    let out = Path::new(&out);
    let g = cairn_fuzz::golden();
    let bs = g.block_size;
    let block = |b: u64| &g.bytes[b as usize * bs..(b as usize + 1) * bs];
    let sb = Superblock::decode(&g.bytes, g.bytes.len() as u64).unwrap();
    let geo = Geometry::new(&sb).unwrap();

    let mut s = block(0)[..512].to_vec();
    s.extend_from_slice(&(g.bytes.len() as u64).to_le_bytes());
    put(out, "superblock", "primary", &s);
    let b1 = geo.backup_groups().next().unwrap();
    put(out, "superblock", "backup", &block(geo.group_start(b1))[..512]);

    for grp in 0..geo.group_count.min(3) {
        let mut d = vec![grp as u8];
        d.extend_from_slice(&block(sb.gdt_start)[grp as usize * 64..grp as usize * 64 + 64]);
        put(out, "group_desc", &format!("group{grp}"), &d);
    }
    for ino in [1u64, 8, 9, 10, 12] {
        let (blk, off) = geo.inode_location(ino);
        let mut d = vec![ino as u8];
        d.extend_from_slice(&block(blk)[off..off + 256]);
        put(out, "inode", &format!("ino{ino}"), &d);
    }
    for &b in &g.meta {
        let data = block(b);
        let target = match get_u32(data, 0) {
            NODE_MAGIC => "tree_node",
            XATTR_MAGIC | XVAL_MAGIC => "xattr_block",
            _ => continue,
        };
        let mut d = vec![0u8];
        d.extend_from_slice(data);
        put(out, target, &format!("block{b}"), &d);
    }

    // Journal records as the engine writes them, with and without zstd.
    for (name, compress) in [("plain", false), ("zstd", true)] {
        let dev = Arc::new(MemDevice::from_bytes(g.bytes.clone()));
        let opts = MountOptions { journal_compress: compress, ..cairn_fuzz::quiet() };
        let fs = Fs::mount(dev.clone(), opts).unwrap();
        let c = Ctx::root();
        let f = fs.names().mknod(&c, 1, b"journaled", libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.files().write(f, 0, &[5u8; 3000]).unwrap();
        fs.setxattr(f, b"user.x", b"y", 0).unwrap();
        fs.files().sync_fs().unwrap();
        let img = dev.snapshot();
        drop(fs);
        let jsb_block = &img[sb.journal_start as usize * bs..(sb.journal_start as usize + 1) * bs];
        let seed = cairn_format::checksum::seed_from_uuid(&sb.uuid);
        let jsb = JournalSuper::decode(seed, sb.journal_start, jsb_block, sb.journal_blocks).unwrap();
        let region = JournalRegion::of(&sb);
        let mut d = vec![1u8];
        d.extend_from_slice(&jsb.tail_seq.to_le_bytes());
        let mut off = jsb.tail_off;
        for _ in 0..16 {
            let b = region.block_of(off) as usize;
            d.extend_from_slice(&img[b * bs..(b + 1) * bs]);
            off = region.next(off, 1);
        }
        put(out, "journal_record", name, &d);
    }

    // Whole images: no edit, and a few single edits of the first blocks.
    for (name, d) in [
        ("none", vec![]),
        ("sb", vec![0, 0, 40, 0, 1]),
        ("gd", vec![1, 0, 8, 0, 0x80]),
        ("itable", vec![9, 0, 100, 0, 4]),
    ] {
        put(out, "mount_image", name, &d);
        put(out, "fsck_image", name, &d);
    }
    println!("seeds written to {}", out.display());
}
