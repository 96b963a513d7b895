//! The staged journaled write (`file_io::staged`, `-o staged_writes`): a
//! write into holes copies its data with no handle open, so a commit does
//! not wait for the copy; and it leaves exactly what the one-handle write
//! leaves.

use crate::common::*;
use cairn_core::dev::BlockDevice;
use cairn_core::testdev::FaultDevice;
use cairn_core::{Ctx, Fs, MountOptions, SetAttr};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A write of 200 blocks: no metadata write is this long.
const COPY: usize = 200 * 4096;

fn mount_fault(opts: MountOptions) -> (Arc<FaultDevice>, Arc<Fs>) {
    let fault = Arc::new(FaultDevice::new(new_image(64)));
    let d: Arc<dyn BlockDevice> = fault.clone();
    (fault.clone(), Fs::mount(d, opts).expect("mount"))
}

fn create(fs: &Fs, name: &str) -> u64 {
    fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino
}

/// Starts a write of `COPY` bytes into a hole of `ino`, held in its copy;
/// then an fsync of another file whose mode changed. Returns whether that
/// fsync's commit finished while the copy was held, and the write's count.
fn commit_during_copy(staged: bool) -> (bool, u32) {
    let opts = MountOptions { staged_writes: staged, ..MountOptions::default() };
    let (fault, fs) = mount_fault(opts);
    let (a, b) = (create(&fs, "a"), create(&fs, "b"));
    fault.hold_writes_of(COPY);
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.files().write(a, 0, &vec![5u8; COPY]).unwrap())
    };
    let start = Instant::now();
    while fault.held_writes() == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "the write's copy never reached the device");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (done_tx, done_rx) = mpsc::channel();
    let syncer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            fs.files().setattr(&Ctx::root(), b, &SetAttr { mode: Some(0o600), ..SetAttr::default() }).unwrap();
            fs.files().fsync(b, false).unwrap();
            let _ = done_tx.send(());
        })
    };
    // Under the one-handle write this cannot finish while the copy is held
    // (the commit waits for the handle), so the bound only decides how long
    // the test takes to see it.
    let wait = if staged { Duration::from_secs(20) } else { Duration::from_millis(300) };
    let committed = done_rx.recv_timeout(wait).is_ok();
    fault.release_held_writes();
    let n = writer.join().unwrap();
    syncer.join().unwrap();
    assert_eq!(fs.files().read(a, 0, COPY as u32).unwrap(), vec![5u8; COPY]);
    unmount_clean(&fs, fault.as_ref(), "after the held copy");
    (committed, n)
}

#[test]
fn a_commit_does_not_wait_for_a_staged_writes_copy() {
    let (committed, n) = commit_during_copy(true);
    assert_eq!(n as usize, COPY);
    assert!(committed, "the fsync's commit waited for the staged write's copy");
}

/// The test above can fail: with the write in one handle the commit waits.
#[test]
fn a_commit_waits_for_the_one_handle_writes_copy() {
    let (committed, n) = commit_during_copy(false);
    assert_eq!(n as usize, COPY);
    assert!(!committed, "the commit finished while the one-handle write's copy was held");
}

/// Writes into holes, past the size, over fallocated (unwritten) blocks, in
/// and across partial blocks, and over written blocks: the staged and the
/// one-handle write leave the same bytes, sizes and block counts, clean.
#[test]
fn staged_and_one_handle_writes_leave_the_same_files() {
    let run = |staged: bool| {
        let dev = new_image(64);
        let fs = mount_with(&dev, MountOptions { staged_writes: staged, ..MountOptions::default() });
        let f = create(&fs, "f");
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for i in 0..300u64 {
            match next(10) {
                0 => {
                    let (off, len) = (next(6 << 20), 1 + next(1 << 20));
                    fs.files().fallocate(f, off, len, libc::FALLOC_FL_KEEP_SIZE).unwrap();
                }
                1 => {
                    let size = fs.inodes().getattr(f).unwrap().size;
                    let set = SetAttr { size: Some(next(size + 1)), ..SetAttr::default() };
                    fs.files().setattr(&Ctx::root(), f, &set).unwrap();
                }
                _ => {
                    let off = next(6 << 20);
                    let data = vec![(i % 251) as u8 + 1; 1 + next(300_000) as usize];
                    assert_eq!(fs.files().write(f, off, &data).unwrap() as usize, data.len());
                }
            }
        }
        let attr = fs.inodes().getattr(f).unwrap();
        let bytes = fs.files().read(f, 0, attr.size as u32).unwrap();
        unmount_clean(&fs, dev.as_ref(), if staged { "staged" } else { "one handle" });
        let fs = mount(&dev);
        assert_eq!(fs.files().read(f, 0, attr.size as u32).unwrap(), bytes, "bytes after a remount");
        fs.unmount().unwrap();
        (attr.size, attr.blocks, bytes)
    };
    let (staged, one) = (run(true), run(false));
    assert_eq!((staged.0, staged.1), (one.0, one.1), "size and blocks");
    assert!(staged.2 == one.2, "the files' bytes differ");
}

/// A staged write on a nearly full file system: the count says what was
/// stored, the bytes counted read back after a remount, fsck is clean.
#[test]
fn a_staged_write_that_runs_out_of_space_counts_what_it_stored() {
    let dev = new_image(48);
    let fs = mount_with(&dev, MountOptions { staged_writes: true, ..MountOptions::default() });
    let f = create(&fs, "f");
    let chunk = vec![3u8; 1 << 20];
    let mut size = 0u64;
    let stopped = loop {
        match fs.files().write(f, size, &chunk) {
            Ok(n) if n as usize == chunk.len() => size += u64::from(n),
            Ok(n) => break size + u64::from(n),
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                break size;
            }
        }
    };
    assert!(stopped > 20 << 20, "only {stopped} bytes fit");
    assert_eq!(fs.inodes().getattr(f).unwrap().size, stopped);
    unmount_clean(&fs, dev.as_ref(), "after the full write");
    let fs = mount(&dev);
    let back = fs.files().read(f, 0, stopped as u32).unwrap();
    assert!(back.len() as u64 == stopped && back.iter().all(|&x| x == 3), "bytes lost after a remount");
    fs.unmount().unwrap();
}
