//! Deferred deletes (seed 003's backend): a large file's delete returns at
//! once and the reaper frees it in steps; statfs counts the space as free
//! at once; a write that needs it waits instead of failing; a crash leaves
//! the inode on the orphan list for the next mount; `-o sync_delete`.

use crate::common::*;
use cairn_core::dev::MemDevice;
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::Arc;
use std::time::Duration;

fn opts(sync_delete: bool) -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), sync_delete, ..Default::default() }
}

/// A file of `n` separate 4 KiB extents (every other block written), so its
/// extents live in a tree and its delete runs in steps.
fn fragmented(fs: &Fs, name: &str, n: u64) -> u64 {
    let ino = fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
    for i in 0..n {
        fs.files().write(ino, i * 8192, &[7u8; 4096]).unwrap();
    }
    ino
}

/// A fresh `mib` MiB image mounted with `opts(sync_delete)`, holding
/// `name`: a [`fragmented`] file of `n` extents. (The image, the mount,
/// the file's inode.)
fn mount_fragmented(mib: u64, sync_delete: bool, name: &str, n: u64) -> (Arc<MemDevice>, Arc<Fs>, u64) {
    let dev = new_image(mib);
    let fs = mount_with(&dev, opts(sync_delete));
    let ino = fragmented(&fs, name, n);
    (dev, fs, ino)
}

/// Commits everything, then the free blocks statfs reports.
fn synced_free_blocks(fs: &Fs) -> u64 {
    fs.files().sync_fs().unwrap();
    fs.statfs().unwrap().blocks_free
}

#[test]
fn a_large_delete_is_queued_counted_free_and_done_by_the_reaper() {
    let (dev, fs, big) = mount_fragmented(256, false, "big", 20_000);
    let free_before = synced_free_blocks(&fs);
    fs.names().unlink(1, b"big").unwrap();
    fs.inodes().forget(big, 1); // the kernel's FORGET: the last reference goes
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
    unmount_clean(&fs, dev.as_ref(), "after a deferred delete");
}

#[test]
fn writing_right_after_deleting_a_large_file_does_not_fail_for_space() {
    let dev = new_image(128);
    let fs = mount_with(&dev, opts(false));
    // A fragmented file, and a filler up to the end of the space.
    let old = fragmented(&fs, "old", 8_000);
    fill_up(&fs, b"filler");
    fs.files().sync_fs().unwrap();
    // Delete it and at once write as much as it held.
    if let Err(e) = fs.names().unlink(1, b"old") {
        panic!(
            "unlink: {e}; {:?}",
            fs.stats()
                .into_iter()
                .filter(|(k, _)| k.contains("enospc") || k.contains("free") || k.starts_with("tx."))
                .collect::<Vec<_>>()
        );
    }
    fs.inodes().forget(old, 1);
    let new = fs.names().mknod(&Ctx::root(), 1, b"new", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let chunk = vec![1u8; 1 << 20];
    let want = 8_000 * 4096u64 - (2 << 20);
    let mut off = 0u64;
    while off < want {
        let n =
            fs.files().write(new, off, &chunk[..(want - off).min(chunk.len() as u64) as usize]).unwrap_or_else(|e| {
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
    assert_eq!(fs.inodes().getattr(new).unwrap().size, want);
    unmount_clean(&fs, dev.as_ref(), "after delete-then-write on a full disk");
}

/// A write that finds the disk full while the reaper holds a queued file
/// whose inode shares the writer's I/O-lock stripe (`ino % 256`): the writer
/// must not wait for the reaper while holding that stripe, which the
/// reaper needs to free the file. Before the fix both waited until the
/// writer's 300 s limit ran out (the stall `bench/run frag` hit).
#[test]
fn a_full_disk_write_never_waits_for_the_reaper_holding_its_io_lock() {
    let (dev, fs, old) = mount_fragmented(128, false, "old", 4_000);
    // The writer's inode in the same stripe as `old`'s.
    let mut n = 0;
    let new = loop {
        let ino =
            fs.names().mknod(&Ctx::root(), 1, format!("pad{n}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
        n += 1;
        if ino % 256 == old % 256 {
            break ino;
        }
    };
    fill_up(&fs, b"filler");
    fs.files().sync_fs().unwrap();
    fs.debug_hold_reaper(true);
    fs.names().unlink(1, b"old").unwrap();
    fs.inodes().forget(old, 1);
    assert_eq!(stat(&fs, "reaper.backlog_inodes"), 1);
    let (tx, rx) = std::sync::mpsc::channel();
    let fs2 = fs.clone();
    let writer = std::thread::spawn(move || {
        let r = fs2.files().write(new, 0, &vec![2u8; 8 << 20]);
        tx.send(()).unwrap();
        r
    });
    // Let the writer find the disk full and start waiting, then let the
    // reaper go.
    std::thread::sleep(Duration::from_millis(300));
    fs.debug_hold_reaper(false);
    assert!(rx.recv_timeout(Duration::from_secs(60)).is_ok(), "the writer and the reaper wait for each other");
    assert_eq!(writer.join().unwrap().unwrap(), 8 << 20);
    unmount_clean(&fs, dev.as_ref(), "after a full-disk write beside the reaper");
}

#[test]
fn sync_delete_frees_on_the_callers_thread() {
    let (dev, fs, big) = mount_fragmented(128, true, "big", 5_000);
    fs.names().unlink(1, b"big").unwrap();
    fs.inodes().forget(big, 1);
    assert_eq!(stat(&fs, "reaper.deferred"), 0);
    assert_eq!(stat(&fs, "reaper.backlog_inodes"), 0);
    assert_eq!(stat(&fs, "reaper.done"), 1);
    unmount_clean(&fs, dev.as_ref(), "after a sync delete");
}

#[test]
fn a_crash_before_the_reaper_finishes_is_finished_by_the_next_mount() {
    let (dev, fs, big) = mount_fragmented(256, false, "big", 20_000);
    let free_before = synced_free_blocks(&fs);
    fs.names().unlink(1, b"big").unwrap();
    fs.inodes().forget(big, 1);
    fs.files().sync_fs().unwrap();
    // The image as a power cut would leave it now (the reaper may be
    // anywhere in its steps; every step is its own transaction).
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    wait_reaped(&fs);
    unmount_clean(&fs, crashed.as_ref(), "crash state after the unlink");
    let fs = mount_with(&crashed, opts(false));
    assert!(fs.lookup(1, b"big").is_err());
    assert!(fs.statfs().unwrap().blocks_free >= free_before + 20_000);
    unmount_clean(&fs, crashed.as_ref(), "after the next mount finished the delete");
}

fn truncate(fs: &Fs, ino: u64, size: u64) {
    let set = cairn_core::SetAttr { size: Some(size), ..Default::default() };
    fs.files().setattr(&Ctx::root(), ino, &set).unwrap();
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.inodes().getattr(ino).unwrap().size;
    fs.files().read(ino, 0, size as u32).unwrap()
}

#[test]
fn a_large_truncate_returns_at_once_and_the_reaper_frees_the_rest() {
    let (dev, fs, f) = mount_fragmented(256, false, "f", 20_000);
    let free_before = synced_free_blocks(&fs);
    truncate(&fs, f, 10 * 8192);
    assert_eq!(stat(&fs, "reaper.truncates_queued"), 1, "a 20,000-extent truncate was not deferred");
    assert_eq!(fs.inodes().getattr(f).unwrap().size, 10 * 8192);
    assert!(fs.statfs().unwrap().blocks_free >= free_before + 19_000, "statfs did not count the queued blocks");
    wait_reaped(&fs);
    assert_eq!(stat(&fs, "reaper.backlog_blocks"), 0);
    assert!(fs.statfs().unwrap().blocks_free >= free_before + 19_990);
    let data = read_all(&fs, f);
    assert_eq!(data.len(), 10 * 8192);
    unmount_clean(&fs, dev.as_ref(), "after a deferred truncate");
}

#[test]
fn growing_a_file_while_its_truncate_is_queued_never_shows_the_old_bytes() {
    let (dev, fs, f) = mount_fragmented(256, false, "f", 20_000);
    let g = fragmented(&fs, "g", 20_000);
    fs.debug_hold_reaper(true);
    truncate(&fs, f, 0);
    truncate(&fs, g, 100);
    assert_eq!(stat(&fs, "reaper.truncates_queued"), 2);
    // Grown back by a size change, and by a write far past the end: every
    // byte but the written ones and g's first 100 must read as zero.
    truncate(&fs, f, 20_000 * 8192);
    fs.files().write(g, 30_000 * 8192, b"tail").unwrap();
    let a = read_all(&fs, f);
    assert!(a.iter().all(|&b| b == 0), "old bytes came back after a truncate and a size change");
    let b = read_all(&fs, g);
    assert!(b[..100].iter().all(|&x| x == 7));
    assert!(b[100..30_000 * 8192].iter().all(|&x| x == 0), "old bytes came back after a truncate and a write");
    assert_eq!(&b[30_000 * 8192..], b"tail");
    assert_eq!(stat(&fs, "reaper.truncates_settled"), 2, "the queued truncates were not finished first");
    fs.debug_hold_reaper(false);
    wait_reaped(&fs);
    assert_eq!(stat(&fs, "reaper.backlog_blocks"), 0);
    unmount_clean(&fs, dev.as_ref(), "after growing files with queued truncates");
}

#[test]
fn a_crash_with_a_truncate_queued_is_finished_by_the_next_mount() {
    let (dev, fs, f) = mount_fragmented(256, false, "f", 20_000);
    let free_before = synced_free_blocks(&fs);
    fs.debug_hold_reaper(true);
    truncate(&fs, f, 8192);
    fs.files().sync_fs().unwrap();
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    fs.debug_hold_reaper(false);
    unmount_clean(&fs, crashed.as_ref(), "crash state with a truncate queued");
    let fs = mount_with(&crashed, opts(false));
    let f = fs.lookup(1, b"f").unwrap().ino;
    assert_eq!(fs.inodes().getattr(f).unwrap().size, 8192);
    assert!(fs.statfs().unwrap().blocks_free >= free_before + 19_998);
    unmount_clean(&fs, crashed.as_ref(), "after the next mount finished the truncate");
}

#[test]
fn sync_delete_truncates_on_the_callers_thread() {
    let (dev, fs, f) = mount_fragmented(256, true, "f", 20_000);
    let before = fs.inodes().getattr(f).unwrap().blocks;
    truncate(&fs, f, 0);
    assert_eq!(stat(&fs, "reaper.truncates_queued"), 0);
    assert!(fs.inodes().getattr(f).unwrap().blocks < before / 1000, "the truncate left blocks behind");
    unmount_clean(&fs, dev.as_ref(), "after a sync truncate");
}

#[test]
fn forget_of_an_unlinked_small_file_only_queues_it() {
    for sync_delete in [false, true] {
        let dev = new_image(64);
        let fs = mount_with(&dev, opts(sync_delete));
        let ino = fs.names().mknod(&Ctx::root(), 1, b"small", libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.files().write(ino, 0, &[5u8; 10_000]).unwrap();
        let files_free = fs.statfs().unwrap().files_free;
        fs.names().unlink(1, b"small").unwrap(); // the kernel still holds it: orphan list
        let handles = stat(&fs, "tx.handles");
        fs.inodes().forget(ino, 1);
        if sync_delete {
            assert_eq!(stat(&fs, "reaper.queued"), 0);
            assert!(stat(&fs, "tx.handles") > handles, "sync_delete: FORGET did not free the file itself");
        } else {
            assert_eq!(stat(&fs, "reaper.queued"), 1, "FORGET did not queue the unlinked file");
            assert_eq!(stat(&fs, "tx.handles"), handles, "FORGET opened a transaction");
            wait_reaped(&fs);
        }
        assert_eq!(fs.statfs().unwrap().files_free, files_free + 1, "the inode was not freed");
        unmount_clean(&fs, dev.as_ref(), "after an unlinked file's FORGET");
    }
}

/// Small deletes wake the reaper once per batch, not once per file: 200
/// unlinked files whose FORGETs arrive together are freed in a few
/// wake-ups (each waits `BATCH_DELAY` for the batch to fill), and all of
/// them are freed. A batch of `BATCH_INODES` wakes it at once.
#[test]
fn small_deletes_are_reaped_in_batches() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts(false));
    let files_free = fs.statfs().unwrap().files_free;
    let mut inos = Vec::new();
    for i in 0..200 {
        let name = format!("f{i}");
        let ino = fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.files().write(ino, 0, &[1u8; 100]).unwrap();
        inos.push((name, ino));
    }
    let files_created = fs.statfs().unwrap().files_free;
    for (name, ino) in &inos {
        fs.names().unlink(1, name.as_bytes()).unwrap(); // the kernel still holds it
        fs.inodes().forget(*ino, 1);
    }
    wait_reaped(&fs);
    assert_eq!(stat(&fs, "reaper.done"), 200);
    let wakeups = stat(&fs, "reaper.wakeups");
    assert!((1..=10).contains(&wakeups), "200 queued deletes took {wakeups} reaper wake-ups");
    assert_eq!(fs.statfs().unwrap().files_free, files_free, "not every inode was freed ({files_created} free before)");

    // A full batch does not wait for the delay.
    let before = stat(&fs, "reaper.wakeups");
    let n = cairn_core::REAPER_BATCH_INODES;
    fs.debug_hold_reaper(true);
    for i in 0..n {
        let name = format!("g{i}");
        let ino = fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.names().unlink(1, name.as_bytes()).unwrap();
        fs.inodes().forget(ino, 1);
    }
    fs.debug_hold_reaper(false);
    wait_reaped(&fs);
    assert!(stat(&fs, "reaper.wakeups") > before);
    unmount_clean(&fs, dev.as_ref(), "after batched deletes");
}
