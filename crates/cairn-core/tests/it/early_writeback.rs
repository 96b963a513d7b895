//! The backend's early write-back (see "Early write-back" in
//! `journal::ail`): once the records since the tail fill 3/4 of the log, the
//! backend writes the deferred home images back and moves the tail outside
//! every commit. A crash right after it must replay to every file made
//! before and after it, and the checker must find the image clean; with
//! `early_writeback=0` only commits write back (at 7/8 of the log).

use crate::common::*;
use cairn_core::dev::MemDevice;
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn name(i: u64) -> Vec<u8> {
    format!("file-{i:05}").into_bytes()
}

/// Makes file `i` in `d` and commits, as a create followed by `fsync` does.
fn create_synced(fs: &Fs, d: u64, i: u64) {
    fs.names().mknod(&Ctx::root(), d, &name(i), libc::S_IFREG | 0o644, 0).unwrap();
    fs.files().sync_fs().unwrap();
}

/// Creates files, each committed, until the log is more than 3/4 full;
/// returns how many.
fn fill_three_quarters(fs: &Fs, d: u64) -> u64 {
    let size = stat(fs, "journal.log_size_blocks");
    let mut i = 0;
    while stat(fs, "journal.log_used_blocks") * 4 <= size * 3 {
        create_synced(fs, d, i);
        i += 1;
        assert!(i < 100_000, "the log never filled to 3/4");
    }
    i
}

#[test]
fn the_backend_writes_back_early_and_a_crash_right_after_replays_every_file() {
    let dev = new_image(32);
    let fs = mount_with(&dev, MountOptions::default());
    let d = fs.names().mkdir(&Ctx::root(), 1, b"d", 0o755).unwrap().ino;
    let mut made = fill_three_quarters(&fs, d);
    // The commit that crossed 3/4 asked the backend for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while stat(&fs, "ail.early_write_backs") == 0 {
        assert!(Instant::now() < deadline, "no early write-back after {made} commits");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(stat(&fs, "ail.blocks_written_home") > 0);
    // The next commit's barrier makes the moved tail durable: the log is
    // nearly empty again.
    create_synced(&fs, d, made);
    made += 1;
    let size = stat(&fs, "journal.log_size_blocks");
    let used = stat(&fs, "journal.log_used_blocks");
    assert!(used * 4 < size, "the tail moved past the records written back: {used} of {size} blocks in use");
    for _ in 0..20 {
        create_synced(&fs, d, made);
        made += 1;
    }
    let crashed = dev.snapshot();
    fs.unmount().unwrap();
    let dev = Arc::new(MemDevice::from_bytes(crashed));
    fsck_clean_mem(dev.as_ref(), "a crash after an early write-back");
    let fs = mount(&dev);
    let d = fs.lookup(1, b"d").unwrap().ino;
    for i in 0..made {
        assert!(fs.lookup(d, &name(i)).is_ok(), "file {i} of {made}");
    }
    unmount_clean(&fs, dev.as_ref(), "a crash after an early write-back");
}

#[test]
fn with_early_writeback_off_only_commits_write_back() {
    let dev = new_image(32);
    let fs = mount_with(&dev, MountOptions { early_writeback: false, ..Default::default() });
    let d = fs.names().mkdir(&Ctx::root(), 1, b"d", 0o755).unwrap().ino;
    let mut made = fill_three_quarters(&fs, d);
    while stat(&fs, "ail.write_backs") == 0 {
        create_synced(&fs, d, made);
        made += 1;
        assert!(made < 100_000, "no commit wrote back");
    }
    assert_eq!(stat(&fs, "ail.early_write_backs"), 0);
    fs.unmount().unwrap();
}
