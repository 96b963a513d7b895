//! Inode numbers from Tux3's "next inode number" counter (seed 003):
//! creates in a row take consecutive numbers without a search, the counter
//! survives a remount, and numbers freed earlier are found by a search once
//! the counter has run past the last inode. Inode tables that mkfs zeroed
//! are not read while their group has taken no inode, and creates into them
//! survive a crash.

use crate::common::*;
use cairn_core::crashdev::RecordingDevice;
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::Arc;

fn create(fs: &Fs, name: &str) -> cairn_core::Result<u64> {
    fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).map(|a| a.ino)
}

#[test]
fn creates_in_a_row_take_consecutive_numbers_from_the_counter() {
    let (dev, fs) = mounted_image(64);
    let inos: Vec<u64> = (0..500).map(|i| create(&fs, &format!("f{i}")).unwrap()).collect();
    assert!(inos.windows(2).all(|w| w[1] == w[0] + 1), "numbers not consecutive: {:?}", &inos[..8]);
    assert_eq!(stat(&fs, "alloc.inodes_by_search"), 0);
    assert!(stat(&fs, "alloc.inodes_by_counter") >= 500);
    // Deleted numbers are not reused while the counter has room.
    for (i, &ino) in inos.iter().enumerate().take(250) {
        fs.names().unlink(1, format!("f{i}").as_bytes()).unwrap();
        fs.inodes().forget(ino, 1); // the kernel's FORGET: the number is free now
    }
    let next = create(&fs, "again").unwrap();
    assert_eq!(next, inos[499] + 1);
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(create(&fs, "after-remount").unwrap(), next + 1, "the counter did not survive a remount");
    unmount_clean(&fs, dev.as_ref(), "after counter allocations");
}

#[test]
fn once_the_counter_wraps_freed_numbers_are_found_by_a_search() {
    let (dev, fs) = mounted_image(16);
    let mut inos = Vec::new();
    while let Ok(ino) = create(&fs, &format!("f{}", inos.len())) {
        inos.push(ino);
    }
    let n = inos.len();
    assert!(n > 100, "only {n} inodes in a 16 MiB image");
    for i in (0..n).step_by(2) {
        fs.names().unlink(1, format!("f{i}").as_bytes()).unwrap();
        fs.inodes().forget(inos[i], 1);
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
    unmount_clean(&fs, dev.as_ref(), "after the counter wrapped");
}

/// 8 MiB groups of 512 inodes (32 inode-table blocks each).
fn small_groups() -> MkfsOptions {
    MkfsOptions { blocks_per_group: Some(2048), ..Default::default() }
}

#[test]
fn a_fresh_groups_inode_table_is_not_read_and_a_used_groups_is() {
    let dev = new_image_with(48, &small_groups());
    let fs = mount(&dev);
    // Group 0 holds the root: its table is read. Groups 1.. are fresh.
    for i in 0..900 {
        create(&fs, &format!("a{i}")).unwrap();
    }
    let unread = stat(&fs, "alloc.itable_blocks_unread");
    assert!((20..=26).contains(&unread), "{unread} table blocks unread for ~390 inodes in group 1");
    assert!(stat(&fs, "cache.misses") < 40, "table blocks were read: {} misses", stat(&fs, "cache.misses"));
    fs.unmount().unwrap();
    // Group 1 has taken inodes: in a new mount its table is read, even
    // the blocks no inode was taken from yet; group 2 is still fresh.
    let fs = mount(&dev);
    for i in 0..100 {
        create(&fs, &format!("b{i}")).unwrap();
    }
    assert_eq!(stat(&fs, "alloc.itable_blocks_unread"), 0, "group 1's table must be read after a remount");
    for i in 100..400 {
        create(&fs, &format!("b{i}")).unwrap();
    }
    assert!(stat(&fs, "alloc.itable_blocks_unread") > 0, "group 2 is fresh");
    unmount_clean(&fs, dev.as_ref(), "after creates into fresh tables");
}

#[test]
fn creates_into_zeroed_inode_tables_survive_a_crash_at_every_flush() {
    let mem = MemDevice::new(48 << 20);
    format(&mem, &small_groups(), &mut |_, _| {}).unwrap();
    let rec = Arc::new(RecordingDevice::new(mem.snapshot()));
    let d: Arc<dyn BlockDevice> = rec.clone();
    let fs = Fs::mount(d, MountOptions::default()).unwrap();
    let mut synced = Vec::new();
    for i in 0..1200 {
        create(&fs, &format!("f{i}")).unwrap();
        if i % 150 == 149 {
            fs.files().sync_fs().unwrap();
            synced.push((rec.ops().len(), i + 1));
        }
    }
    assert!(stat(&fs, "alloc.itable_blocks_unread") > 30);
    fs.unmount().unwrap();
    let plan = rec.plan();
    let flushes = plan.flushes();
    assert!(flushes.len() > 10);
    for &f in &flushes {
        let img = plan.image(f + 1, &[], None);
        let d: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(img.to_vec()));
        let fs = Fs::mount(d.clone(), MountOptions::default()).expect("crash state mounts");
        let durable = synced.iter().filter(|(at, _)| *at <= f + 1).map(|(_, n)| *n).max().unwrap_or(0);
        for i in 0..durable {
            let a = fs.lookup(1, format!("f{i}").as_bytes()).unwrap_or_else(|e| panic!("f{i} lost at op {f}: {e}"));
            fs.inodes().getattr(a.ino).unwrap_or_else(|e| panic!("f{i}'s inode unreadable at op {f}: {e}"));
        }
        unmount_clean(&fs, d.as_ref(), "crash state of creates into zeroed tables");
    }
}
