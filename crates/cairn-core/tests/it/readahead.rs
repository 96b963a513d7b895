//! Inode-table readahead (`buffer::readahead`, `-o inode_readahead_blks`):
//! a cold walk of files made in a row reads their inode-table blocks a
//! window at a time, every attribute comes back right, and the option's 0
//! reads one block at a time.

use crate::common::*;
use cairn_core::{Ctx, MountOptions};

fn counter(fs: &cairn_core::Fs, name: &str) -> u64 {
    fs.stats().into_iter().find(|(k, _)| k == name).map(|(_, v)| v).unwrap_or_else(|| panic!("no counter {name}"))
}

/// Makes `n` files of distinct sizes in a directory, remounts with
/// `blocks` of readahead and looks every one up; returns the device
/// reads that brought more than one block and the blocks used of them.
fn cold_walk(n: u64, blocks: u32) -> (u64, u64, u64) {
    let dev = new_image(64);
    let c = Ctx::root();
    let fs = mount(&dev);
    let d = fs.mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    for i in 0..n {
        let f = fs.mknod(&c, d, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.write(f, 0, &vec![7u8; (i % 50) as usize]).unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_with(&dev, MountOptions { inode_readahead_blks: blocks, ..Default::default() });
    let misses0 = counter(&fs, "cache.misses");
    for i in 0..n {
        let a = fs.lookup(d, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(a.size, i % 50, "f{i} has its own attributes");
    }
    let out = (
        counter(&fs, "cache.readahead_reads"),
        counter(&fs, "cache.readahead_used"),
        counter(&fs, "cache.misses") - misses0,
    );
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after the walk");
    out
}

#[test]
fn a_cold_walk_reads_the_inode_table_a_window_at_a_time() {
    // 2,000 inodes fill 125 table blocks of 4 KiB.
    let (reads, used, misses) = cold_walk(2000, 32);
    assert!(reads > 0 && reads <= 8, "{reads} readahead reads for 125 table blocks");
    assert!(used >= 115, "{used} blocks read ahead were used");
    let (reads0, used0, misses0) = cold_walk(2000, 0);
    assert_eq!((reads0, used0), (0, 0), "inode_readahead_blks=0 reads one block at a time");
    assert!(misses + 100 <= misses0, "{misses} misses with readahead, {misses0} without");
}
