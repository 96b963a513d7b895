//! The error latch over a device that fails: corruption and I/O errors mark
//! the superblock `STATE_ERRORS` and then act as `-o errors=` says.

use crate::common::{fsck_clean_mem, stat, unmount_clean};
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::testdev::FaultDevice;
use cairn_core::{Ctx, ErrorPolicy, Fs, FsError, MountOptions};
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_ERRORS};
use std::sync::Arc;
use std::time::Duration;

const ROOT: u64 = 1;

fn setup(errors: ErrorPolicy) -> (Arc<MemDevice>, Arc<FaultDevice>, Arc<Fs>) {
    let mem = Arc::new(MemDevice::new(64 << 20));
    format(mem.as_ref(), &MkfsOptions::default(), &mut |_, _| {}).unwrap();
    let fault = Arc::new(FaultDevice::new(mem.clone()));
    let opts = MountOptions { errors, commit_interval: Duration::from_secs(3600), ..Default::default() };
    let fs = Fs::mount(fault.clone(), opts).unwrap();
    (mem, fault, fs)
}

fn on_disk_sb(mem: &MemDevice) -> Superblock {
    let mut head = vec![0u8; SB_SIZE];
    mem.read_at(&mut head, 0).unwrap();
    Superblock::decode(&head, mem.size()).unwrap()
}

fn journal_bytes(mem: &MemDevice) -> std::ops::Range<u64> {
    let sb = on_disk_sb(mem);
    let bs = u64::from(sb.block_size());
    sb.journal_start * bs..(sb.journal_start + sb.journal_blocks) * bs
}

/// A commit whose log write fails: fsync reports it, the journal is
/// aborted (the default errors=remount-ro), later changes get EROFS, reads
/// go on, and the superblock on disk says the file system had errors.
/// After a remount on a healed device, everything fsync'd before the
/// failure is there and fsck is clean apart from the recorded flag.
#[test]
fn failed_commit_aborts_the_journal_and_marks_the_superblock() {
    let (mem, fault, fs) = setup(ErrorPolicy::RemountRo);
    let c = Ctx::root();
    let kept = fs.names().mknod(&c, ROOT, b"kept", libc::S_IFREG | 0o644, 0).unwrap();
    fs.files().write(kept.ino, 0, b"durable").unwrap();
    fs.files().fsync(kept.ino, false).unwrap();
    fault.fail_writes(journal_bytes(&mem));
    let lost = fs.names().mknod(&c, ROOT, b"lost", libc::S_IFREG | 0o644, 0).unwrap();
    let e = fs.files().fsync(lost.ino, false).expect_err("the log write fails");
    assert!(matches!(e, FsError::Io(_)), "{e:?}");
    assert_eq!(stat(&fs, "errors.journal_aborted"), 1);
    assert_eq!(stat(&fs, "errors.latched"), 1);
    assert!(fs.first_error().unwrap().contains("injected write error"));
    let e = fs.names().mknod(&c, ROOT, b"after", libc::S_IFREG | 0o644, 0).unwrap_err();
    assert_eq!(e.errno(), libc::EROFS);
    assert!(fs.files().fsync(kept.ino, false).is_err(), "fsync after an abort must not claim durability");
    assert_eq!(fs.files().read(kept.ino, 0, 100).unwrap(), b"durable", "reads go on");
    assert!(on_disk_sb(&mem).state & STATE_ERRORS != 0, "STATE_ERRORS is on disk");
    fs.unmount().unwrap();
    drop(fs);
    fault.heal();
    let report = fsck_clean_mem(mem.as_ref(), "after an aborted journal");
    assert!(report.notes.iter().any(|n| n.contains("recorded an error")), "fsck reports the flag: {:?}", report.notes);
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    assert_eq!(stat(&fs, "errors.flagged"), 1);
    let k = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!(fs.files().read(k.ino, 0, 100).unwrap(), b"durable");
    assert!(fs.lookup(ROOT, b"lost").is_err(), "the aborted checkpoint was not committed");
    fs.unmount().unwrap();
}

/// A failing flush is an I/O error of the commit too.
#[test]
fn failed_flush_aborts_the_journal() {
    let (mem, fault, fs) = setup(ErrorPolicy::RemountRo);
    let c = Ctx::root();
    let a = fs.names().mknod(&c, ROOT, b"a", libc::S_IFREG | 0o644, 0).unwrap();
    fault.fail_flushes(true);
    assert!(fs.files().fsync(a.ino, false).is_err());
    assert_eq!(fs.names().mkdir(&c, ROOT, b"d", 0o755).unwrap_err().errno(), libc::EROFS);
    fault.heal();
    unmount_clean(&fs, mem.as_ref(), "after a failed flush");
}

/// A read error with errors=continue: the request fails with EIO, the flag
/// is set on disk, and the file system stays writable.
#[test]
fn read_error_with_errors_continue_keeps_going() {
    let (mem, fault, fs) = setup(ErrorPolicy::Continue);
    let c = Ctx::root();
    let a = fs.names().mknod(&c, ROOT, b"a", libc::S_IFREG | 0o644, 0).unwrap();
    fs.files().write(a.ino, 0, &[1u8; 8192]).unwrap();
    fs.files().fsync(a.ino, false).unwrap();
    fault.fail_reads(0..mem.size());
    let e = fs.files().read(a.ino, 0, 4096).unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    fault.heal();
    assert_eq!(stat(&fs, "errors.latched"), 1);
    assert_eq!(stat(&fs, "errors.journal_aborted"), 0);
    fs.names().mknod(&c, ROOT, b"b", libc::S_IFREG | 0o644, 0).expect("errors=continue keeps the file system writable");
    fs.files().sync_fs().unwrap();
    assert!(on_disk_sb(&mem).state & STATE_ERRORS != 0);
    fs.unmount().unwrap();
    assert!(on_disk_sb(&mem).state & STATE_ERRORS != 0, "a clean unmount keeps the flag for fsck");
}

/// errors=shutdown: after the first error every request fails with EIO.
#[test]
fn errors_shutdown_fails_every_later_request() {
    let (mem, fault, fs) = setup(ErrorPolicy::Shutdown);
    let c = Ctx::root();
    let a = fs.names().mknod(&c, ROOT, b"a", libc::S_IFREG | 0o644, 0).unwrap();
    fs.files().write(a.ino, 0, &[1u8; 4096]).unwrap();
    fs.files().fsync(a.ino, false).unwrap();
    fault.fail_reads(0..mem.size());
    assert!(fs.files().read(a.ino, 0, 4096).is_err());
    fault.heal();
    assert_eq!(fs.inodes().getattr(ROOT).unwrap_err().errno(), libc::EIO);
    assert_eq!(fs.lookup(ROOT, b"a").unwrap_err().errno(), libc::EIO);
    fs.unmount().unwrap();
}

/// A corrupt block read from disk: the operation fails with EUCLEAN and the
/// latch records it.
#[test]
fn corruption_is_latched() {
    let (mem, _fault, fs) = setup(ErrorPolicy::RemountRo);
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, ROOT, b"d", 0o755).unwrap();
    for i in 0..200 {
        fs.names().mknod(&c, d.ino, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    // Flip bytes in every B+tree node of the image (magic "CBT1").
    let mut img = mem.snapshot();
    let bs = 4096;
    for blk in img.chunks_mut(bs) {
        if &blk[..4] == b"CBT1" {
            blk[100] ^= 0xFF;
        }
    }
    let mem = Arc::new(MemDevice::from_bytes(img));
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    let e = fs.lookup(d.ino, b"f1").unwrap_err();
    assert_eq!(e.errno(), libc::EUCLEAN);
    assert_eq!(stat(&fs, "errors.latched"), 1);
    assert_eq!(fs.names().mknod(&c, ROOT, b"x", libc::S_IFREG, 0).unwrap_err().errno(), libc::EROFS);
    fs.unmount().unwrap();
    assert!(on_disk_sb(&mem).state & STATE_ERRORS != 0);
}

/// An operation that unwinds half-way (a panic after its first allocation)
/// aborts the journal before its handle leaves the gate: later changes get
/// EROFS, and after a remount nothing of it is there and fsck finds the
/// image consistent.
#[test]
fn an_operation_that_panics_half_way_aborts_the_journal() {
    let (mem, _fault, fs) = setup(ErrorPolicy::Continue);
    let c = Ctx::root();
    let kept = fs.names().mknod(&c, ROOT, b"kept", libc::S_IFREG | 0o644, 0).unwrap();
    fs.files().write(kept.ino, 0, b"durable").unwrap();
    fs.files().fsync(kept.ino, false).unwrap();
    // A long symlink takes an inode, then a block: panic at the block.
    let target = vec![b't'; 300];
    fs.panic_at_allocation(2);
    let half = || fs.names().symlink(&c, ROOT, b"half", &target);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(half));
    assert!(unwound.is_err(), "the injected panic unwinds the operation");
    fs.fail_allocation(0);
    assert_eq!(stat(&fs, "errors.journal_aborted"), 1, "even under errors=continue");
    let e = fs.names().mknod(&c, ROOT, b"after", libc::S_IFREG | 0o644, 0).unwrap_err();
    assert_eq!(e.errno(), libc::EROFS);
    let _ = fs.unmount();
    drop(fs);
    fsck_clean_mem(mem.as_ref(), "after an operation panicked half-way");
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    let k = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!(fs.files().read(k.ino, 0, 100).unwrap(), b"durable");
    assert!(fs.lookup(ROOT, b"half").is_err(), "nothing of the half-done mkdir was committed");
    fs.unmount().unwrap();
}
