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
