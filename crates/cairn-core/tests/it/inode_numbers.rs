//! Inode numbers from Tux3's "next inode number" counter (seed 003):
//! creates in a row take consecutive numbers without a search, the counter
//! survives a remount, and numbers freed earlier are found by a search once
//! the counter has run past the last inode.

use crate::common::*;
use cairn_core::{Ctx, Fs};

fn create(fs: &Fs, name: &str) -> cairn_core::Result<u64> {
    fs.mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).map(|a| a.ino)
}

#[test]
fn creates_in_a_row_take_consecutive_numbers_from_the_counter() {
    let dev = new_image(64);
    let fs = mount(&dev);
    let inos: Vec<u64> = (0..500).map(|i| create(&fs, &format!("f{i}")).unwrap()).collect();
    assert!(inos.windows(2).all(|w| w[1] == w[0] + 1), "numbers not consecutive: {:?}", &inos[..8]);
    assert_eq!(stat(&fs, "alloc.inodes_by_search"), 0);
    assert!(stat(&fs, "alloc.inodes_by_counter") >= 500);
    // Deleted numbers are not reused while the counter has room.
    for (i, &ino) in inos.iter().enumerate().take(250) {
        fs.unlink(1, format!("f{i}").as_bytes()).unwrap();
        fs.forget(ino, 1); // the kernel's FORGET: the number is free now
    }
    let next = create(&fs, "again").unwrap();
    assert_eq!(next, inos[499] + 1);
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(create(&fs, "after-remount").unwrap(), next + 1, "the counter did not survive a remount");
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after counter allocations");
}

#[test]
fn once_the_counter_wraps_freed_numbers_are_found_by_a_search() {
    let dev = new_image(16);
    let fs = mount(&dev);
    let mut inos = Vec::new();
    while let Ok(ino) = create(&fs, &format!("f{}", inos.len())) {
        inos.push(ino);
    }
    let n = inos.len();
    assert!(n > 100, "only {n} inodes in a 16 MiB image");
    for i in (0..n).step_by(2) {
        fs.unlink(1, format!("f{i}").as_bytes()).unwrap();
        fs.forget(inos[i], 1);
    }
    let before = stat(&fs, "alloc.inodes_by_search");
    let freed = n.div_ceil(2);
    for i in 0..freed {
        create(&fs, &format!("g{i}")).unwrap_or_else(|e| panic!("create {i} of {freed} after freeing: {e}"));
    }
    assert!(stat(&fs, "alloc.inode_counter_wraps") >= 1);
    assert!(stat(&fs, "alloc.inodes_by_search") > before);
    let sf = fs.statfs().unwrap();
    let extra = create(&fs, "one-too-many");
    assert!(extra.is_err(), "more inodes than the image holds: n {n}, {sf:?}, got {extra:?}");
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after the counter wrapped");
}

#[test]
fn an_inode_table_block_of_free_inodes_starts_as_zeros_and_a_block_with_live_ones_is_read() {
    let dev = new_image(16);
    let fs = mount(&dev);
    let mut inos = Vec::new();
    while let Ok(ino) = create(&fs, &format!("f{}", inos.len())) {
        inos.push(ino);
    }
    let n = inos.len();
    // A fresh image: every inode-table block but the root's started as zeros.
    let per_block = 16u64;
    let fresh = stat(&fs, "alloc.itable_blocks_unread");
    assert!(fresh + 2 >= n as u64 / per_block, "{fresh} blocks unread for {n} creates");
    // Free every inode of the first half, every other one of the second.
    let half = n / 2;
    let freed: Vec<usize> = (0..n).filter(|&i| i < half || i % 2 == 0).collect();
    for &i in &freed {
        fs.unlink(1, format!("f{i}").as_bytes()).unwrap();
        fs.forget(inos[i], 1);
    }
    // A new mount, so that no inode-table block is cached.
    fs.unmount().unwrap();
    let fs = mount(&dev);
    let before = stat(&fs, "alloc.itable_blocks_unread");
    for i in 0..freed.len() {
        create(&fs, &format!("g{i}")).unwrap_or_else(|e| panic!("create {i} of {} after freeing: {e}", freed.len()));
    }
    // The first half's blocks held free inodes only; the second half's keep
    // live ones, which must survive (they were read, not zeroed).
    let zeroed = stat(&fs, "alloc.itable_blocks_unread") - before;
    assert!(zeroed + 2 >= half as u64 / per_block, "{zeroed} blocks restarted as zeros");
    assert!(zeroed <= (half as u64).div_ceil(per_block) + 1, "{zeroed} blocks zeroed: some held live inodes");
    fs.unmount().unwrap();
    let fs = mount(&dev);
    for i in (half..n).filter(|i| i % 2 == 1) {
        let a = fs.lookup(1, format!("f{i}").as_bytes()).unwrap_or_else(|e| panic!("f{i} lost: {e}"));
        assert_eq!(a.ino, inos[i]);
        assert_eq!(a.nlink, 1);
    }
    for i in 0..freed.len() {
        fs.lookup(1, format!("g{i}").as_bytes()).unwrap_or_else(|e| panic!("g{i} lost: {e}"));
    }
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after creates into freed inode-table blocks");
}
