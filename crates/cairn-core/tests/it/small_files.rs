//! Small files take their blocks from locality-group runs (ext4's
//! locality-group preallocation, seed 002): written one after another they
//! lie side by side, the runs outlive commits, and a full file system and
//! unmount give them back.

use crate::common::*;
use cairn_core::{Ctx, Fs, MountOptions};

/// Creates `name` with `bytes` bytes written at once; its inode.
fn small(fs: &Fs, name: &str, bytes: usize) -> cairn_core::Result<u64> {
    let f = fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0)?.ino;
    let n = fs.files().write(f, 0, &vec![0x33; bytes])?;
    assert_eq!(n as usize, bytes, "short write to {name}");
    Ok(f)
}

/// Each file's first physical block (every file here is one extent).
fn starts(fs: &Fs, files: &[u64]) -> Vec<u64> {
    files
        .iter()
        .map(|&f| {
            let e = fs.files().extents(f).unwrap();
            assert_eq!(e.len(), 1, "a small file in {} extents", e.len());
            e[0].pblk
        })
        .collect()
}

/// A new image whose free space near the inodes is in 3-block holes
/// (every other 12 KiB file, written without locality groups, deleted; the
/// blocks released by a remount).
fn image_with_holes() -> std::sync::Arc<cairn_core::dev::MemDevice> {
    let dev = new_image(256);
    let opts = MountOptions { sync_delete: true, mb_group_prealloc: 0, ..Default::default() };
    let fs = mount_with(&dev, opts);
    let holes: Vec<u64> = (0..200).map(|i| small(&fs, &format!("h{i}"), 12288).unwrap()).collect();
    for i in (0..200).step_by(2) {
        fs.names().unlink(1, format!("h{i}").as_bytes()).unwrap();
        fs.inodes().forget(holes[i], 1);
    }
    fs.unmount().unwrap();
    dev
}

/// Writes 150 files of 8 KiB, commits, writes 50 more: each file's start.
fn write_in_a_row(fs: &Fs) -> Vec<u64> {
    let mut files: Vec<u64> = (0..150).map(|i| small(fs, &format!("a{i}"), 8192).unwrap()).collect();
    fs.files().sync_fs().unwrap();
    files.extend((0..50).map(|i| small(fs, &format!("b{i}"), 8192).unwrap()));
    starts(fs, &files)
}

/// Best fit drops each of the first 100 8 KiB files into a 3-block hole of
/// its own; from a locality group's run all follow each other, across a
/// commit.
#[test]
fn small_files_written_in_a_row_lie_side_by_side_and_the_run_outlives_commits() {
    let dev = image_with_holes();
    let fs = mount_with(&dev, MountOptions { mb_group_prealloc: 0, ..Default::default() });
    let s = write_in_a_row(&fs);
    let adjacent = s.windows(2).filter(|w| w[1] == w[0] + 2).count();
    // The first 100 fill the 100 holes; the rest follow each other.
    assert!(adjacent <= 110, "without locality groups {adjacent} of 199 files follow the one before");
    fs.unmount().unwrap();

    let dev = image_with_holes();
    let fs = mount(&dev);
    let s = write_in_a_row(&fs);
    let adjacent = s.windows(2).filter(|w| w[1] == w[0] + 2).count();
    assert!(adjacent >= 195, "only {adjacent} of 199 files follow the one written before them");
    assert!(stat(&fs, "alloc.mb.group_prealloc_held") > 0, "no run is held after the commit");
    let used = stat(&fs, "alloc.mb.group_prealloc_used");
    assert!(used >= 390, "{used} blocks taken from runs");
    assert_eq!(stat(&fs, "alloc.mb.group_prealloc"), 512);
    // Unmount gives the runs back: the free count on disk is the same
    // after a remount, and the checker finds the bitmaps right.
    let free = fs.statfs().unwrap().blocks_free;
    unmount_clean(&fs, dev.as_ref(), "after small files");
    let fs = mount(&dev);
    assert_eq!(fs.statfs().unwrap().blocks_free, free);
    assert_eq!(stat(&fs, "alloc.mb.group_prealloc_held"), 0);
    fs.unmount().unwrap();
}

#[test]
fn with_locality_groups_off_no_runs_are_made() {
    let dev = new_image(64);
    let fs = mount_with(&dev, MountOptions { mb_group_prealloc: 0, ..Default::default() });
    for i in 0..50 {
        small(&fs, &format!("f{i}"), 4096).unwrap();
    }
    assert_eq!(stat(&fs, "alloc.mb.group_prealloc"), 0);
    assert_eq!(stat(&fs, "alloc.mb.group_preallocated"), 0);
    assert_eq!(stat(&fs, "alloc.mb.group_prealloc_runs"), 0);
    unmount_clean(&fs, dev.as_ref(), "small files without locality groups");
}

/// Two threads writing small files at once: each file is whole and the
/// checker is clean (the debug build also checks every run against its
/// buddy at each commit).
#[test]
fn two_writers_of_small_files_at_once() {
    let (dev, fs) = mounted_image(128);
    std::thread::scope(|s| {
        for t in 0..2 {
            let fs = &fs;
            s.spawn(move || {
                for i in 0..300 {
                    small(fs, &format!("t{t}-{i}"), 4096 * (1 + i % 4)).unwrap();
                }
            });
        }
    });
    for t in 0..2 {
        for i in [0usize, 150, 299] {
            let a = fs.lookup(1, format!("t{t}-{i}").as_bytes()).unwrap();
            assert_eq!(fs.files().read(a.ino, 0, 4096).unwrap(), vec![0x33; 4096]);
        }
    }
    unmount_clean(&fs, dev.as_ref(), "two writers of small files");
}

/// Filling a file system with small files: the blocks held in runs are
/// given back before ENOSPC, so small files fill it as far as large ones.
#[test]
fn small_files_fill_a_file_system_to_the_end() {
    let (dev, fs) = mounted_image(48);
    let mut n = 0u64;
    let data = vec![0x44u8; 48 << 10];
    loop {
        let f = fs.names().mknod(&Ctx::root(), 1, format!("f{n}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
        n += 1;
        match fs.files().write(f, 0, &data) {
            Ok(w) if w as usize == data.len() => {}
            Ok(_) => break,
            Err(e) if e.errno() == libc::ENOSPC => break,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(stat(&fs, "alloc.mb.group_prealloc_held"), 0, "runs still held at ENOSPC");
    let st = fs.statfs().unwrap();
    // What is left is the metadata reserve (and less than one more file's
    // worth for data).
    eprintln!("full after {n} files: {} blocks available", st.blocks_avail);
    assert!(st.blocks_avail <= 64 + 12 + 16, "{} blocks still available after {n} files", st.blocks_avail);
    unmount_clean(&fs, dev.as_ref(), "a file system full of small files");
}
