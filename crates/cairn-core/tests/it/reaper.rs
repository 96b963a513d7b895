//! Deferred deletes (seed 003's backend): a large file's delete returns at
//! once and the reaper frees it in steps; statfs counts the space as free
//! at once; a write that needs it waits instead of failing; a crash leaves
//! the inode on the orphan list for the next mount; `-o sync_delete`.

use crate::common::*;
use cairn_core::dev::MemDevice;
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn opts(sync_delete: bool) -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), sync_delete, ..Default::default() }
}

/// A file of `n` separate 4 KiB extents (every other block written), so its
/// extents live in a tree and its delete runs in steps.
fn fragmented(fs: &Fs, name: &str, n: u64) -> u64 {
    let ino = fs.mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
    for i in 0..n {
        fs.write(ino, i * 8192, &[7u8; 4096]).unwrap();
    }
    ino
}

fn wait_reaped(fs: &Fs) {
    let t0 = Instant::now();
    while stat(fs, "reaper.backlog_inodes") > 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the reaper did not finish");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_large_delete_is_queued_counted_free_and_done_by_the_reaper() {
    let dev = new_image(256);
    let fs = mount_with(&dev, opts(false));
    let big = fragmented(&fs, "big", 20_000);
    fs.sync_fs().unwrap();
    let free_before = fs.statfs().unwrap().blocks_free;
    fs.unlink(1, b"big").unwrap();
    fs.forget(big, 1); // the kernel's FORGET: the last reference goes
    assert_eq!(stat(&fs, "reaper.queued"), 1);
    let free_at_once = fs.statfs().unwrap().blocks_free;
    assert!(
        free_at_once >= free_before + 20_000,
        "statfs did not count the queued blocks: {free_before} -> {free_at_once}"
    );
    wait_reaped(&fs);
    assert_eq!(stat(&fs, "reaper.done"), 1);
    assert!(stat(&fs, "reaper.steps") > 1, "a 20,000-extent file freed in one step");
    assert_eq!(stat(&fs, "reaper.backlog_blocks"), 0);
    let free_after = fs.statfs().unwrap().blocks_free;
    assert!(free_after >= free_before + 20_000);
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after a deferred delete");
}

#[test]
fn writing_right_after_deleting_a_large_file_does_not_fail_for_space() {
    let dev = new_image(128);
    let fs = mount_with(&dev, opts(false));
    // A fragmented file, and a filler up to the end of the space.
    let old = fragmented(&fs, "old", 8_000);
    let filler = fs.mknod(&Ctx::root(), 1, b"filler", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let chunk = vec![1u8; 1 << 20];
    let mut off = 0u64;
    loop {
        match fs.write(filler, off, &chunk) {
            Ok(n) if n as usize == chunk.len() => off += u64::from(n),
            Ok(_) | Err(_) => break,
        }
    }
    fs.sync_fs().unwrap();
    // Delete it and at once write as much as it held.
    if let Err(e) = fs.unlink(1, b"old") {
        panic!(
            "unlink: {e}; {:?}",
            fs.stats()
                .into_iter()
                .filter(|(k, _)| k.contains("enospc") || k.contains("free") || k.starts_with("tx."))
                .collect::<Vec<_>>()
        );
    }
    fs.forget(old, 1);
    let new = fs.mknod(&Ctx::root(), 1, b"new", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let want = 8_000 * 4096u64 - (2 << 20);
    let mut off = 0u64;
    while off < want {
        let n = fs.write(new, off, &chunk[..(want - off).min(chunk.len() as u64) as usize]).unwrap_or_else(|e| {
            panic!(
                "write at {off} of {want}: {e}; statfs free {}, reaper {:?}",
                fs.statfs().unwrap().blocks_free,
                fs.stats()
                    .into_iter()
                    .filter(|(k, _)| k.starts_with("reaper") || k.contains("pending"))
                    .collect::<Vec<_>>()
            )
        });
        assert!(n > 0);
        off += u64::from(n);
    }
    assert_eq!(fs.getattr(new).unwrap().size, want);
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after delete-then-write on a full disk");
}

#[test]
fn sync_delete_frees_on_the_callers_thread() {
    let dev = new_image(128);
    let fs = mount_with(&dev, opts(true));
    let big = fragmented(&fs, "big", 5_000);
    fs.unlink(1, b"big").unwrap();
    fs.forget(big, 1);
    assert_eq!(stat(&fs, "reaper.deferred"), 0);
    assert_eq!(stat(&fs, "reaper.backlog_inodes"), 0);
    assert_eq!(stat(&fs, "reaper.done"), 1);
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after a sync delete");
}

#[test]
fn a_crash_before_the_reaper_finishes_is_finished_by_the_next_mount() {
    let dev = new_image(256);
    let fs = mount_with(&dev, opts(false));
    let big = fragmented(&fs, "big", 20_000);
    fs.sync_fs().unwrap();
    let free_before = fs.statfs().unwrap().blocks_free;
    fs.unlink(1, b"big").unwrap();
    fs.forget(big, 1);
    fs.sync_fs().unwrap();
    // The image as a power cut would leave it now (the reaper may be
    // anywhere in its steps; every step is its own transaction).
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    wait_reaped(&fs);
    fs.unmount().unwrap();
    fsck_clean_mem(crashed.as_ref(), "crash state after the unlink");
    let fs = mount_with(&crashed, opts(false));
    assert!(fs.lookup(1, b"big").is_err());
    assert!(fs.statfs().unwrap().blocks_free >= free_before + 20_000);
    fs.unmount().unwrap();
    fsck_clean_mem(crashed.as_ref(), "after the next mount finished the delete");
}
