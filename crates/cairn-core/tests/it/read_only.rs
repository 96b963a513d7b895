//! A read-only mount refuses every change, and turns read-write in place
//! (`mount -o remount,rw`, xfstests generic/417): what it writes then is
//! journaled as on any read-write mount, survives a crash, and leaves an
//! image fsck finds clean.

use crate::common::*;
use cairn_core::dev::{BlockDevice, FileDevice, MemDevice};
use cairn_core::{Ctx, FsError, MountOptions};
use std::sync::Arc;

const ROOT: u64 = 1;

fn ro() -> MountOptions {
    MountOptions { read_only: true, ..Default::default() }
}

#[test]
fn a_read_only_mount_turns_read_write_and_its_changes_survive_a_crash() {
    let (dev, fs) = mounted_image(64);
    let c = Ctx::root();
    let old = fs.names().mknod(&c, ROOT, b"old", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(old, 0, b"before").unwrap();
    // The log keeps this mount's records on the ring behind its tail: the
    // mount turned writable must restart past them, as a writable one does.
    fs.unmount().unwrap();
    let before = dev.snapshot();

    let fs = mount_with(&dev, ro());
    assert!(fs.is_read_only());
    let refused = fs.names().mknod(&c, ROOT, b"new", libc::S_IFREG | 0o644, 0).unwrap_err();
    assert!(matches!(refused, FsError::Errno(libc::EROFS)), "{refused:?}");
    assert_eq!(dev.snapshot(), before, "a read-only mount wrote to the image");

    fs.make_writable().unwrap();
    assert!(!fs.is_read_only());
    fs.make_writable().unwrap();
    let new = fs.names().mknod(&c, ROOT, b"new", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(new, 0, b"after").unwrap();
    fs.files().fsync(new, false).unwrap();
    // A crash: the image as the device holds it now, no unmount.
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    drop(fs);

    let fs = mount(&crashed);
    assert_eq!(fs.files().read(new, 0, 100).unwrap(), b"after");
    assert_eq!(fs.files().read(old, 0, 100).unwrap(), b"before");
    unmount_clean(&fs, crashed.as_ref(), "after a crash of a mount turned read-write");
}

#[test]
fn an_image_file_opened_read_only_is_reopened_for_writing_and_keeps_its_lock() {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(64 << 20).unwrap();
    let dev = FileDevice::open(f.path(), false).unwrap();
    cairn_core::mkfs::format(&dev, &Default::default(), &mut |_, _| {}).unwrap();
    drop(dev);

    let dev = FileDevice::open(f.path(), true).unwrap();
    dev.lock_exclusive().unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    let fs = cairn_core::Fs::mount(dev, ro()).unwrap();
    fs.make_writable().unwrap();
    let c = Ctx::root();
    let ino = fs.names().mknod(&c, ROOT, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(ino, 0, &[5u8; 10_000]).unwrap();
    // The lock is still held: a second open cannot take it.
    let other = FileDevice::open(f.path(), true).unwrap();
    assert!(other.lock_exclusive().is_err(), "making the device writable dropped the image's lock");
    drop(other);
    fs.unmount().unwrap();
    drop(fs);

    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(f.path(), true).unwrap());
    let fs = cairn_core::Fs::mount(dev.clone(), ro()).unwrap();
    assert_eq!(fs.files().read(ino, 0, 20_000).unwrap(), vec![5u8; 10_000]);
    unmount_clean(&fs, dev.as_ref(), "after a mount turned read-write and unmounted");
}
