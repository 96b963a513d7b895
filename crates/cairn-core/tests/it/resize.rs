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

/// Writes a new file `big` of `mib` MiB of `fill` into the grown space,
/// each 1 MiB write whole; its inode.
fn write_big(fs: &cairn_core::Fs, mib: u64, fill: u8) -> u64 {
    let big = fs.names().mknod(&Ctx::root(), 1, b"big", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let chunk = vec![fill; 1 << 20];
    for i in 0..mib {
        assert_eq!(
            fs.files().write(big, i << 20, &chunk).unwrap() as usize,
            chunk.len(),
            "write {i} in the grown space"
        );
    }
    big
}

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
        let a = fs.names().mknod(&root, 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|j| (j.wrapping_mul(31) ^ i) as u8).collect();
        fs.files().write(a.ino, 0, &data).unwrap();
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
        assert_eq!(&fs.files().read(a.ino, 0, data.len() as u32).unwrap(), data, "{name} changed");
    }
    // The new space takes a file larger than the old file system.
    write_big(&fs, 60, 5);
    for i in 0..3000u32 {
        fs.names().mknod(&root, 1, format!("n{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    unmount_clean(&fs, dev.as_ref(), "after using the new space");
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
    fs.names().mknod(&Ctx::root(), 1, b"x", libc::S_IFREG | 0o644, 0).unwrap();
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
    unmount_clean(&fs, dev.as_ref(), "after filling the grown file system");
}

/// `Fs::grow`: a mounted file system grows while other threads create and
/// write files; the new space is used at once, and after unmount fsck finds
/// it clean (backup copies included) and every file intact.
#[test]
fn a_mounted_file_system_grows_under_concurrent_writers() {
    let dev = small_fs_on_big_device(10);
    let fs = mount(&dev);
    let root = Ctx::root();
    let before = fs.statfs().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Files of one block each, as many as the old file system has inodes
    // for (and 400 at most): it holds them whether the grow comes early or
    // late (2,560 blocks; a writer faster than the grow found ENOSPC).
    let cap = ((before.files_free / 2).saturating_sub(2)).min(400) as u32;
    let writers: Vec<_> = (0..2u8)
        .map(|t| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let dir = fs.names().mkdir(&root, 1, format!("w{t}").as_bytes(), 0o755).unwrap().ino;
                let mut n = 0u32;
                while n < cap && (n < cap / 2 || !stop.load(std::sync::atomic::Ordering::Relaxed)) {
                    let a = fs.names().mknod(&root, dir, format!("f{n}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
                    fs.files().write(a.ino, 0, &[t ^ n as u8; 3000]).unwrap();
                    n += 1;
                }
                (dir, n)
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let g = fs.grow(100 << 20).expect("grow while mounted");
    assert_eq!((g.old_blocks, g.new_blocks, g.old_groups, g.new_groups), (2560, 25600, 3, 25));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let made: Vec<(u64, u32)> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    fs.debug_check_consistency();
    let after = fs.statfs().unwrap();
    assert_eq!(after.blocks, 25600);
    assert!(after.files > before.files && after.blocks_free > before.blocks_free + 20_000, "{after:?}");
    // More than the old file system held, written at once.
    let big = write_big(&fs, 40, 7);
    // A second grow, to the most the descriptor table allows.
    let g2 = fs.grow(256 << 20).expect("grow again");
    assert_eq!(g2.new_groups, 64);
    let e = fs.grow(512 << 20).unwrap_err();
    assert!(e.to_string().contains("at most"), "{e}");
    unmount_clean(&fs, dev.as_ref(), "after growing while mounted");
    let fs = mount(&dev);
    assert_eq!(fs.statfs().unwrap().blocks, 65536);
    for (t, (dir, n)) in made.into_iter().enumerate() {
        for i in 0..n {
            let a = fs.lookup(dir, format!("f{i}").as_bytes()).unwrap();
            assert_eq!(fs.files().read(a.ino, 0, 3000).unwrap(), vec![t as u8 ^ i as u8; 3000], "w{t}/f{i}");
        }
    }
    assert_eq!(fs.files().read(big, 39 << 20, 4096).unwrap(), vec![7u8; 4096]);
    fs.unmount().unwrap();
}

/// A read-only mount and a shrink are refused, changing nothing.
#[test]
fn a_mounted_grow_refuses_shrinking_and_read_only() {
    let dev = small_fs_on_big_device(12);
    let fs = mount(&dev);
    let e = fs.grow(8 << 20).unwrap_err();
    assert!(e.to_string().contains("only grows"), "{e}");
    assert_eq!(fs.statfs().unwrap().blocks, 3072);
    fs.unmount().unwrap();
    let d: Arc<dyn BlockDevice> = dev.clone();
    let fs = cairn_core::Fs::mount(d, cairn_core::MountOptions { read_only: true, ..Default::default() }).unwrap();
    let e = fs.grow(64 << 20).unwrap_err();
    assert!(e.to_string().to_lowercase().contains("read-only"), "{e}");
    unmount_clean(&fs, dev.as_ref(), "after refused grows");
}

/// mkfs reserves descriptor blocks for growth: a 1 GiB image of 128 MiB
/// groups can grow to 1,024 times as many groups (1 TiB).
#[test]
fn mkfs_reserves_descriptor_blocks_for_growth() {
    let sb = cairn_core::mkfs::plan(1 << 30, &MkfsOptions::default()).unwrap();
    assert_eq!((sb.group_count, sb.gdt_blocks), (8, 128));
    assert_eq!(cairn_core::resize::max_bytes(&sb), 1 << 40);
    // A small image whose group 0 barely holds the journal reserves nothing.
    let sb =
        cairn_core::mkfs::plan(12 << 20, &MkfsOptions { blocks_per_group: Some(1024), ..Default::default() }).unwrap();
    assert_eq!(sb.gdt_blocks, 1);
}
