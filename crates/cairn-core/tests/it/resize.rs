//! `resize::grow`: an unmounted file system grows into a larger device —
//! its short last group filled, new groups added — with every file intact,
//! fsck clean, and the new space usable; shrinking, a size the descriptor
//! table cannot describe and an unclean image are refused unchanged.

use crate::common::*;
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::resize::grow;
use cairn_core::Ctx;
use std::sync::Arc;

/// A 256 MiB device holding a file system of `fs_mib` in groups of 4 MiB.
fn small_fs_on_big_device(fs_mib: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(256 << 20));
    let opts = MkfsOptions { size: Some(fs_mib << 20), blocks_per_group: Some(1024), ..MkfsOptions::default() };
    format(dev.as_ref(), &opts, &mut |_, _| {}).expect("mkfs");
    dev
}

#[test]
fn growing_keeps_every_file_and_the_new_space_is_usable() {
    // 10 MiB: two whole groups and a short third one.
    let dev = small_fs_on_big_device(10);
    let fs = mount(&dev);
    let root = Ctx::root();
    let mut files = Vec::new();
    for i in 0..20u32 {
        let name = format!("f{i}");
        let a = fs.mknod(&root, 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|j| (j.wrapping_mul(31) ^ i) as u8).collect();
        fs.write(a.ino, 0, &data).unwrap();
        files.push((name, data));
    }
    let before = fs.statfs().unwrap();
    fs.unmount().unwrap();

    let g = grow(dev.as_ref(), 100 << 20).expect("grow to 100 MiB");
    assert_eq!((g.old_blocks, g.new_blocks, g.old_groups, g.new_groups), (2560, 25600, 3, 25));
    fsck_clean_mem(dev.as_ref(), "after the grow");

    let fs = mount(&dev);
    let after = fs.statfs().unwrap();
    assert_eq!(after.blocks, 25600);
    assert!(after.blocks_free > before.blocks_free + 20_000, "{before:?} -> {after:?}");
    assert!(after.files > before.files);
    for (name, data) in &files {
        let a = fs.lookup(1, name.as_bytes()).unwrap();
        assert_eq!(&fs.read(a.ino, 0, data.len() as u32).unwrap(), data, "{name} changed");
    }
    // The new space takes a file larger than the old file system.
    let big = fs.mknod(&root, 1, b"big", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let chunk = vec![5u8; 1 << 20];
    for i in 0..60u64 {
        assert_eq!(fs.write(big, i << 20, &chunk).unwrap() as usize, chunk.len(), "write {i} in the grown space");
    }
    for i in 0..3000u32 {
        fs.mknod(&root, 1, format!("n{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after using the new space");
}

#[test]
fn shrinking_an_unclean_image_and_sizes_past_the_table_are_refused_unchanged() {
    let dev = small_fs_on_big_device(12);
    let image = |d: &MemDevice| {
        let mut v = vec![0u8; 16 << 20];
        d.read_at(&mut v, 0).unwrap();
        v
    };
    let untouched = image(&dev);
    for (bytes, why) in [(8u64 << 20, "only grows"), (12 << 20, "only grows")] {
        let e = grow(dev.as_ref(), bytes).unwrap_err();
        assert!(e.to_string().contains(why), "{bytes}: {e}");
    }
    // 4 KiB blocks, 64 descriptors a block, 4 MiB groups: 256 MiB at most,
    // which the device is; the table allows exactly that.
    let e = grow(dev.as_ref(), 300 << 20).unwrap_err();
    assert!(e.to_string().contains("less than") || e.to_string().contains("at most"), "{e}");
    assert!(image(&dev) == untouched, "a refused grow changed the image");
    // A mount that did not unmount (the superblock says not clean).
    let fs = mount(&dev);
    fs.mknod(&Ctx::root(), 1, b"x", libc::S_IFREG | 0o644, 0).unwrap();
    std::mem::forget(fs);
    let e = grow(dev.as_ref(), 64 << 20).unwrap_err();
    assert!(e.to_string().contains("not cleanly unmounted"), "{e}");
}

/// A full file system (so its short last group's bitmap has been written,
/// not synthesized) grows: the group's new blocks become free.
#[test]
fn a_full_file_system_grows_and_its_last_group_fills_up() {
    let dev = small_fs_on_big_device(10);
    let fs = mount(&dev);
    let filled = fill_up(&fs, b"full");
    fs.unmount().unwrap();
    grow(dev.as_ref(), 40 << 20).expect("grow a full file system");
    fsck_clean_mem(dev.as_ref(), "after growing a full file system");
    let fs = mount(&dev);
    let more = fill_up(&fs, b"more");
    assert!(more > 28 << 20, "only {more} bytes fit after growing from 10 to 40 MiB ({filled} before)");
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after filling the grown file system");
}
