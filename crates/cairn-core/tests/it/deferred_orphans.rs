//! Deferred orphan-list inserts (`deferred_orphans`): a file unlinked while
//! the kernel holds it goes on the orphan list at the commit, so one freed
//! before the commit never touches the list; every durable checkpoint still
//! lists every unlinked-but-allocated inode (a crash frees them at mount);
//! unmount frees those still waiting; a SETATTR of
//! times on an unlinked file takes no transaction.

use crate::common::*;
use cairn_core::dev::MemDevice;
use cairn_core::{Ctx, Fs, MountOptions, SetAttr};
use std::sync::Arc;
use std::time::Duration;

/// An image whose journal leaves room for a few hundred waiting inserts
/// (the set takes at most a quarter of a checkpoint's limit).
fn image() -> Arc<MemDevice> {
    new_image_with(128, &cairn_core::mkfs::MkfsOptions { journal_blocks: Some(16384), ..Default::default() })
}

fn opts() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), ..Default::default() }
}

/// `n` empty files in the root, each held by the kernel (one lookup).
fn held_files(fs: &Fs, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| fs.names().mknod(&Ctx::root(), 1, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino)
        .collect()
}

fn unlink_all(fs: &Fs, n: usize) {
    for i in 0..n {
        fs.names().unlink(1, format!("f{i}").as_bytes()).unwrap();
    }
}

#[test]
fn a_held_file_reaches_the_orphan_list_in_the_commit_of_its_unlink_and_a_crash_then_frees_it() {
    let dev = image();
    let fs = mount_with(&dev, opts());
    let free0 = fs.statfs().unwrap().files_free;
    held_files(&fs, 40);
    fs.files().sync_fs().unwrap();
    unlink_all(&fs, 40);
    assert_eq!(stat(&fs, "orphans.deferred"), 40);
    assert_eq!(stat(&fs, "orphans.waiting"), 40);
    assert_eq!(stat(&fs, "orphans.direct"), 0);
    assert!(stat(&fs, "orphans.credits_aside") > 0);
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "orphans.flushed"), 40, "the commit did not insert the waiting orphans");
    assert_eq!(stat(&fs, "orphans.waiting"), 0);
    assert_eq!(stat(&fs, "orphans.credits_aside"), 0);
    assert_eq!(stat(&fs, "tx.reserved_credits"), 0, "credits set aside were not given back");
    // A power cut now: the files are unlinked and still allocated, so the
    // checkpoint must name every one on its orphan list.
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    fsck_clean_mem(crashed.as_ref(), "crash after the commit of the unlinks");
    let fs2 = mount_with(&crashed, opts());
    assert_eq!(fs2.statfs().unwrap().files_free, free0, "the next mount did not free the orphans");
    fs2.unmount().unwrap();
    fsck_clean_mem(crashed.as_ref(), "after the next mount freed them");
    drop(fs);
}

#[test]
fn a_file_freed_before_the_commit_never_touches_the_orphan_tree() {
    let dev = image();
    let fs = mount_with(&dev, opts());
    let free0 = fs.statfs().unwrap().files_free;
    let inos = held_files(&fs, 30);
    fs.files().sync_fs().unwrap();
    unlink_all(&fs, 30);
    for ino in inos {
        fs.inodes().forget(ino, 1); // the kernel lets go: the reaper frees it
    }
    wait_reaped(&fs);
    assert_eq!(stat(&fs, "orphans.cancelled"), 30);
    assert_eq!(stat(&fs, "orphans.waiting"), 0);
    assert_eq!(stat(&fs, "tx.reserved_credits"), 0);
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "orphans.flushed"), 0);
    assert_eq!(stat(&fs, "orphans.direct"), 0);
    assert_eq!(fs.statfs().unwrap().files_free, free0);
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    let report = fsck_clean_mem(crashed.as_ref(), "crash after the commit of unlinks and frees");
    drop(report);
    unmount_clean(&fs, dev.as_ref(), "after unmount");
}

#[test]
fn a_crash_before_the_commit_keeps_the_files_and_a_later_one_finds_them_listed() {
    let dev = image();
    let fs = mount_with(&dev, opts());
    held_files(&fs, 10);
    fs.files().sync_fs().unwrap();
    unlink_all(&fs, 10);
    // Nothing committed since the creates: the crash image has the files.
    let early = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    fsck_clean_mem(early.as_ref(), "crash before the commit of the unlinks");
    let fs2 = mount_with(&early, opts());
    for i in 0..10 {
        fs2.lookup(1, format!("f{i}").as_bytes()).unwrap();
    }
    fs2.unmount().unwrap();
    // Another file unlinked after a commit that flushed the first ten: one
    // listed in the tree, one waiting, both freed by the next mount.
    fs.files().sync_fs().unwrap();
    let late = fs.names().mknod(&Ctx::root(), 1, b"late", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().sync_fs().unwrap();
    fs.names().unlink(1, b"late").unwrap();
    assert_eq!(stat(&fs, "orphans.waiting"), 1);
    fs.files().sync_fs().unwrap();
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    fsck_clean_mem(crashed.as_ref(), "crash with eleven orphans listed");
    let fs3 = mount_with(&crashed, opts());
    assert!(fs3.inodes().getattr(late).is_err(), "the orphan {late} survived the next mount");
    fs3.unmount().unwrap();
    fsck_clean_mem(crashed.as_ref(), "after the next mount");
    drop(fs);
}

#[test]
fn unmount_frees_the_orphans_still_waiting_for_a_commit() {
    let dev = image();
    let fs = mount_with(&dev, opts());
    let free0 = fs.statfs().unwrap().files_free;
    held_files(&fs, 20);
    unlink_all(&fs, 20);
    assert_eq!(stat(&fs, "orphans.waiting"), 20);
    unmount_clean(&fs, dev.as_ref(), "after unmount with orphans waiting");
    let fs = mount_with(&dev, opts());
    assert_eq!(fs.statfs().unwrap().files_free, free0);
    fs.unmount().unwrap();
}

#[test]
fn the_set_stops_at_its_share_of_the_log_and_inserts_the_rest_at_once() {
    let dev = image();
    let fs = mount_with(&dev, opts());
    held_files(&fs, 600);
    fs.files().sync_fs().unwrap();
    unlink_all(&fs, 600);
    let (deferred, direct) = (stat(&fs, "orphans.deferred"), stat(&fs, "orphans.direct"));
    assert_eq!(deferred + direct, 600);
    assert!(deferred <= cairn_core::MAX_DEFERRED_ORPHANS as u64, "{deferred} deferred");
    assert!(direct > 0, "600 held files all deferred");
    let limit = stat(&fs, "tx.record_limit_blocks");
    assert!(stat(&fs, "orphans.credits_aside") <= limit / 4);
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "orphans.flushed"), deferred);
    assert_eq!(stat(&fs, "orphans.flush_overruns"), 0, "the inserts outgrew the credits set aside");
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    fsck_clean_mem(crashed.as_ref(), "crash with 600 orphans, some deferred");
    let fs2 = mount_with(&crashed, opts());
    assert_eq!(stat(&fs2, "orphans.waiting"), 0);
    for i in 0..600 {
        assert!(fs2.lookup(1, format!("f{i}").as_bytes()).is_err());
    }
    fs2.unmount().unwrap();
    fsck_clean_mem(crashed.as_ref(), "after the next mount freed the 600");
    drop(fs);
}

#[test]
fn times_set_on_an_unlinked_file_take_no_transaction() {
    let dev = image();
    let fs = mount_with(&dev, opts());
    let ino = held_files(&fs, 1)[0];
    unlink_all(&fs, 1);
    let handles = stat(&fs, "tx.handles");
    let when = cairn_core::Timestamp { sec: 1_000_000, nsec: 7 };
    let set = SetAttr { ctime: Some(when), ..Default::default() };
    let a = fs.files().setattr(&Ctx::root(), ino, &set).unwrap();
    assert_eq!(a.ctime, when);
    assert_eq!(fs.inodes().getattr(ino).unwrap().ctime, when);
    assert_eq!(stat(&fs, "tx.handles"), handles, "a SETATTR of times on an unlinked file began a handle");
    assert_eq!(stat(&fs, "orphans.times_in_core"), 1);
    // A linked file's times still go through a transaction.
    let linked = fs.names().mknod(&Ctx::root(), 1, b"linked", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let handles = stat(&fs, "tx.handles");
    fs.files().setattr(&Ctx::root(), linked, &set).unwrap();
    assert!(stat(&fs, "tx.handles") > handles);
    fs.inodes().forget(ino, 1);
    wait_reaped(&fs);
    unmount_clean(&fs, dev.as_ref(), "after unmount");
}
