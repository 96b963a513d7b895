//! The engine under pressure: a buffer cache far smaller than the metadata
//! with a slow flush (reproduction 1 of the transaction-core issue: fsync'd
//! creates lost without a crash), and single operations far larger than the
//! log (reproduction 2: deleting a file of tens of thousands of extents).

use crate::common::{stat, unmount_clean};
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::testdev::FaultDevice;
use cairn_core::{Ctx, Fs, MountOptions, SetAttr};
use std::sync::Arc;
use std::time::Duration;

const ROOT: u64 = 1;

fn image(mib: u64, opts: &MkfsOptions) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(mib << 20));
    format(dev.as_ref(), opts, &mut |_, _| {}).expect("mkfs");
    dev
}

fn mount_on(dev: Arc<dyn BlockDevice>, cache_blocks: usize) -> Arc<Fs> {
    // Deletes on the caller's thread (`sync_delete`): the stepped delete
    // under a tiny log is what these reproductions exercise.
    let opts = MountOptions {
        cache_blocks,
        commit_interval: Duration::from_secs(3600),
        sync_delete: true,
        ..Default::default()
    };
    Fs::mount(dev, opts).expect("mount")
}

/// Reproduction 1, in process: one thread creates and fsyncs files while
/// another fills a directory, over a 64-block cache and a flush that takes
/// a millisecond (so commits stay in flight while the other thread evicts).
/// Every create whose fsync returned must be there after a clean unmount,
/// and fsck must find nothing.
#[test]
fn fsynced_creates_survive_a_tiny_cache_and_a_slow_flush() {
    let mem = image(64, &MkfsOptions::default());
    let fault = Arc::new(FaultDevice::new(mem.clone()));
    fault.set_flush_delay(Duration::from_millis(1));
    let fs = mount_on(fault.clone(), 64);
    let c = Ctx::root();
    let synced_dir = fs.names().mkdir(&c, ROOT, b"synced", 0o755).unwrap().ino;
    let many = fs.names().mkdir(&c, ROOT, b"many", 0o755).unwrap().ino;
    let synced = std::thread::scope(|s| {
        let filler = s.spawn(|| {
            for i in 0..6000u32 {
                fs.names().mknod(&c, many, format!("{i:05}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
                if i % 500 == 0 {
                    fs.debug_check_consistency();
                }
            }
        });
        let mut synced = Vec::new();
        for i in 0..400u32 {
            let name = format!("fsync-{i}");
            let a = fs.names().mknod(&c, synced_dir, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
            fs.files().write(a.ino, 0, name.as_bytes()).unwrap();
            fs.files().fsync(a.ino, false).unwrap();
            synced.push(name);
        }
        filler.join().unwrap();
        synced
    });
    let st = stat(&fs, "cache.evictions");
    assert!(st > 100, "the cache should have evicted under pressure, evicted {st}");
    assert_eq!(stat(&fs, "tx.credit_overruns"), 0);
    fs.debug_check_consistency();
    unmount_clean(&fs, mem.as_ref(), "after the tiny-cache workload");
    let fs = mount_on(mem.clone(), 64);
    for name in &synced {
        let a =
            fs.lookup(synced_dir, name.as_bytes()).unwrap_or_else(|e| panic!("{name} was fsync'd and is gone: {e}"));
        assert_eq!(fs.files().read(a.ino, 0, 100).unwrap(), name.as_bytes());
    }
    let mut n = 0;
    fs.readdir(many, 0, &mut |_| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 6000 + 2);
    fs.unmount().unwrap();
}

/// A file of `extents` one-block extents (every other block written).
fn fragmented_file(fs: &Fs, name: &[u8], extents: u64, bs: u64) -> u64 {
    let c = Ctx::root();
    let f = fs.names().mknod(&c, ROOT, name, libc::S_IFREG | 0o644, 0).unwrap().ino;
    let block = vec![0xA5u8; bs as usize];
    for i in 0..extents {
        fs.files().write(f, 2 * i * bs, &block).unwrap();
    }
    f
}

fn check_big_delete(mkfs: MkfsOptions, mib: u64, extents: u64) {
    let bs = u64::from(mkfs.block_size);
    let mem = image(mib, &mkfs);
    // A slow flush keeps the backend's commits in flight while the delete's
    // steps go on, so the log fills and handles wait for room.
    let slow = Arc::new(FaultDevice::new(mem.clone()));
    let fs = mount_on(slow.clone(), 1024);
    let free_before = stat(&fs, "alloc.free_blocks");
    let f = fragmented_file(&fs, b"big", extents, bs);
    fs.files().sync_fs().unwrap();
    let used = free_before - stat(&fs, "alloc.free_blocks");
    assert!(used >= extents, "the file holds {extents} blocks, {used} used");
    slow.set_flush_delay(Duration::from_micros(300));
    fs.names().unlink(ROOT, b"big").expect("unlink of a file larger than the log");
    fs.files().sync_fs().expect("sync after the big unlink");
    // Still open (the create's lookup reference): freed at the last forget.
    fs.inodes().forget(f, 1);
    fs.files().sync_fs().expect("sync after the big delete");
    assert_eq!(stat(&fs, "tx.credit_overruns"), 0);
    assert!(stat(&fs, "tx.steps") > 1, "the delete should have run in steps");
    if mkfs.journal_blocks.is_some() {
        assert!(stat(&fs, "tx.reserve_waits") > 0, "the small log filled and handles waited for room");
    }
    fs.files().sync_fs().unwrap();
    fs.debug_check_consistency();
    assert_eq!(stat(&fs, "alloc.free_blocks"), free_before, "every block of the file is free again");
    unmount_clean(&fs, mem.as_ref(), "after the big delete");
}

/// Reproduction 2: 1 KiB blocks, the default journal, a file of 60,000
/// extents: the unlink and the next sync work, and nothing shuts down.
#[test]
fn deleting_60000_extents_with_1k_blocks() {
    check_big_delete(MkfsOptions { block_size: 1024, ..Default::default() }, 256, 60_000);
}

/// Reproduction 2 with a 256-block journal and 20,000 extents at 4 KiB.
#[test]
fn deleting_20000_extents_with_a_256_block_journal() {
    check_big_delete(MkfsOptions { journal_blocks: Some(256), ..Default::default() }, 256, 20_000);
}

/// A truncate of a file far larger than the log runs in steps too; the size
/// is right at once and every block past it is freed.
#[test]
fn truncating_a_file_larger_than_the_log() {
    let mkfs = MkfsOptions { journal_blocks: Some(256), ..Default::default() };
    let mem = image(256, &mkfs);
    let fs = mount_on(mem.clone(), 256);
    let f = fragmented_file(&fs, b"big", 20_000, 4096);
    fs.files().sync_fs().unwrap();
    let free_before = stat(&fs, "alloc.free_blocks");
    let a = fs.files().setattr(&Ctx::root(), f, &SetAttr { size: Some(100 * 4096), ..Default::default() }).unwrap();
    assert_eq!(a.size, 100 * 4096);
    fs.files().sync_fs().unwrap();
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "tx.credit_overruns"), 0);
    let freed = stat(&fs, "alloc.free_blocks") - free_before;
    assert!(freed >= 20_000 - 50, "truncate freed {freed} blocks");
    // A write over the log's size in one request goes in steps as well.
    let big = vec![7u8; 8 << 20];
    assert_eq!(fs.files().write(f, 0, &big).unwrap() as usize, big.len());
    assert_eq!(fs.files().read(f, (8 << 20) - 4, 4).unwrap(), vec![7u8; 4]);
    unmount_clean(&fs, mem.as_ref(), "after the big truncate");
}

/// fallocate of more than the free space fails with ENOSPC after mapping
/// what fit: what it allocated is recorded in the inode (fsck clean after a
/// remount), not leaked.
#[test]
fn fallocate_past_the_free_space_leaves_a_consistent_file() {
    let mem = image(32, &MkfsOptions::default());
    let fs = mount_on(mem.clone(), 1024);
    let c = Ctx::root();
    let f = fs.names().mknod(&c, ROOT, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    // Fragment the free space so the allocation takes many extents.
    let g = fs.names().mknod(&c, ROOT, b"g", libc::S_IFREG | 0o644, 0).unwrap().ino;
    for i in 0..2000u64 {
        fs.files().write(g, 2 * i * 4096, &[1u8; 4096]).unwrap();
    }
    fs.files().setattr(&c, g, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
    for i in 0..1000u64 {
        fs.files().write(g, 2 * i * 4096, &[1u8; 4096]).unwrap();
    }
    let e = fs.files().fallocate(f, 0, 64 << 20, 0).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC);
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "tx.credit_overruns"), 0);
    unmount_clean(&fs, mem.as_ref(), "after a fallocate that ran out of space");
}

/// A readdir whose callback looks up every entry, `.` and `..` included
/// (as FUSE readdirplus does), while other threads look the directory up
/// and rename inside it: no deadlock (the callback runs with no lock held).
#[test]
fn readdirplus_callbacks_do_not_deadlock_with_lookups_and_renames() {
    let mem = image(64, &MkfsOptions::default());
    let fs = mount_on(mem.clone(), 4096);
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, ROOT, b"d", 0o755).unwrap().ino;
    for i in 0..300 {
        fs.names().mknod(&c, d, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let worker = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            std::thread::scope(|s| {
                s.spawn(|| {
                    for _ in 0..200 {
                        fs.readdir(d, 0, &mut |e| {
                            let _ = fs.inodes().getattr(e.ino);
                            let _ = fs.add_lookup(e.ino);
                            true
                        })
                        .unwrap();
                    }
                });
                s.spawn(|| {
                    for _ in 0..4000 {
                        let _ = fs.lookup(ROOT, b"d");
                        let _ = fs.lookup(d, b"..");
                    }
                });
                s.spawn(|| {
                    for i in 0..2000 {
                        let (a, b) = if i % 2 == 0 {
                            (b"f1".as_slice(), b"g1".as_slice())
                        } else {
                            (b"g1".as_slice(), b"f1".as_slice())
                        };
                        fs.names().rename(d, a, d, b, 0).unwrap();
                    }
                });
            });
            done_tx.send(()).unwrap();
        })
    };
    done_rx.recv_timeout(Duration::from_secs(120)).expect("readdir, lookups and renames deadlocked");
    worker.join().unwrap();
    fs.unmount().unwrap();
}
