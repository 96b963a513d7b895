//! The block allocator keeps ordinary files contiguous: one file written
//! sequentially, and sixteen written at once, end in few extents (counted
//! as filefrag counts them: physically contiguous runs merged).

use crate::common::{stat, unmount_clean};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::testdev::SparseDevice;
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::Arc;
use std::time::Duration;

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;

fn mount(size: u64, optimize: bool) -> (Arc<SparseDevice>, Arc<Fs>) {
    let dev = Arc::new(SparseDevice::new(size));
    format(dev.as_ref(), &MkfsOptions::default(), &mut |_, _| {}).unwrap();
    let opts =
        MountOptions { commit_interval: Duration::from_secs(3600), mb_optimize_scan: optimize, ..Default::default() };
    let fs = Fs::mount(dev.clone(), opts).unwrap();
    (dev, fs)
}

/// Extents of `ino` as filefrag counts them.
fn fragments(fs: &Fs, ino: u64) -> usize {
    let ext = fs.files().extents(ino).unwrap();
    1 + ext.windows(2).filter(|w| w[0].pblk + u64::from(w[0].len) != w[1].pblk).count()
}

fn write_file(fs: &Fs, ino: u64, size: u64, chunk: &[u8]) {
    let mut off = 0;
    while off < size {
        assert_eq!(fs.files().write(ino, off, chunk).unwrap() as usize, chunk.len());
        off += chunk.len() as u64;
    }
}

#[test]
fn a_file_written_sequentially_is_one_extent_per_group_it_crosses() {
    for optimize in [true, false] {
        let (dev, fs) = mount(3 << 30, optimize);
        let f = fs.names().mknod(&Ctx::root(), ROOT, b"seq", libc::S_IFREG | 0o644, 0).unwrap().ino;
        let chunk = vec![0x5au8; MIB as usize];
        write_file(&fs, f, 1 << 30, &chunk);
        let n = fragments(&fs, f);
        // 1 GiB crosses 8 or 9 groups of 128 MiB, each starting with its
        // own bitmaps and inode table.
        eprintln!("1 GiB sequential (mb_optimize_scan={}): {n} extents", u8::from(optimize));
        assert!(n <= 10, "1 GiB written sequentially is in {n} extents");
        unmount_clean(&fs, dev.as_ref(), "after the sequential write");
    }
}

#[test]
fn sixteen_files_written_at_once_stay_in_few_extents() {
    let (dev, fs) = mount(2 << 30, true);
    let files: Vec<u64> = (0..16)
        .map(|i| {
            fs.names().mknod(&Ctx::root(), ROOT, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino
        })
        .collect();
    std::thread::scope(|s| {
        for &f in &files {
            let fs = &fs;
            s.spawn(move || write_file(fs, f, 64 * MIB, &vec![f as u8; MIB as usize]));
        }
    });
    let counts: Vec<usize> = files.iter().map(|&f| fragments(&fs, f)).collect();
    let total: usize = counts.iter().sum();
    eprintln!(
        "16 parallel writers of 64 MiB: extents per file {counts:?}, goal hits {} of {} requests",
        stat(&fs, "alloc.mb.goal_hits"),
        stat(&fs, "alloc.mb.reqs")
    );
    // Without any locality each 1 MiB write would be its own extent (64
    // per file); the goal and the size classes keep files in runs.
    assert!(total <= 16 * 16, "16 files of 64 MiB are in {total} extents ({counts:?})");
    for (&f, _) in files.iter().zip(&counts) {
        assert_eq!(fs.files().read(f, 63 * MIB, 1).unwrap(), vec![f as u8]);
    }
    // The streams were served from their preallocations, and what was left
    // of them goes back when the kernel forgets the files.
    assert!(stat(&fs, "alloc.mb.prealloc_used") > 0, "no preallocation was used");
    assert!(stat(&fs, "alloc.mb.prealloc_held") > 0, "no preallocation is held while the files are open");
    for &f in &files {
        fs.inodes().forget(f, 1);
    }
    assert_eq!(stat(&fs, "alloc.mb.prealloc_held"), 0, "preallocations outlive their files");
    fs.debug_check_consistency();
    unmount_clean(&fs, dev.as_ref(), "after the parallel writes");
}
