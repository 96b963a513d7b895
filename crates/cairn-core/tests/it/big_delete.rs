//! Deleting a file far larger than the log, and crashing in the middle.
//!
//! The figures: a 10 GiB file mapped in every other 4 KiB block
//! (1.3 million extents) on a file system with a 1 MiB journal is deleted
//! without error. The file's blocks are mapped with fallocate (unwritten
//! extents): the extent map, the bitmaps and the frees are exactly those of
//! a written file, without 5 GiB of data to hold in memory.

use crate::common::{fsck_clean_mem, stat, unmount_clean};
use cairn_core::crashdev::RecordingDevice;
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::testdev::SparseDevice;
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROOT: u64 = 1;

fn opts() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), cache_blocks: 4096, ..Default::default() }
}

/// The delete's steps on the caller's thread (`-o sync_delete`), so that
/// they run, and are recorded, between the unlink and the next sync.
fn opts_sync_delete() -> MountOptions {
    MountOptions { sync_delete: true, ..opts() }
}

/// Maps every other block of `blocks` blocks of a new file `name`.
fn map_every_other_block(fs: &Fs, name: &[u8], blocks: u64, bs: u64) -> u64 {
    let f = fs.names().mknod(&Ctx::root(), ROOT, name, libc::S_IFREG | 0o644, 0).unwrap().ino;
    for i in (0..blocks).step_by(2) {
        fs.files().fallocate(f, i * bs, bs, 0).unwrap();
    }
    f
}

/// The case: 10 GiB, 1.3 M extents, a 1 MiB (256-block) journal.
/// Heavy (about a minute): run by the CI's unit suite with `--ignored`.
#[test]
#[ignore = "heavy: 1.3 million extents (run with --ignored; CI does)"]
fn deleting_a_10_gib_file_of_1_3_million_extents_with_a_1_mib_journal() {
    let size = 11u64 << 30;
    let dev = Arc::new(SparseDevice::new(size));
    format(dev.as_ref(), &MkfsOptions { journal_blocks: Some(256), ..Default::default() }, &mut |_, _| {}).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let free0 = stat(&fs, "alloc.free_blocks");
    let t0 = Instant::now();
    let blocks = (10u64 << 30) / 4096;
    let f = map_every_other_block(&fs, b"huge", blocks, 4096);
    fs.files().sync_fs().unwrap();
    let mapped = t0.elapsed();
    assert!(free0 - stat(&fs, "alloc.free_blocks") >= blocks / 2);
    // The unlink and the last FORGET return at once (the reaper frees the
    // file in steps), and statfs counts the space as free meanwhile.
    let t1 = Instant::now();
    fs.names().unlink(ROOT, b"huge").unwrap();
    fs.inodes().forget(f, 1);
    let returned = t1.elapsed();
    assert!(fs.statfs().unwrap().blocks_free >= free0 - 16, "statfs does not count the queued file as free");
    while stat(&fs, "reaper.backlog_inodes") > 0 {
        assert!(t1.elapsed() < Duration::from_secs(600), "the reaper did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    let freed = t1.elapsed();
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "tx.credit_overruns"), 0);
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "alloc.free_blocks"), free0);
    eprintln!(
        "10 GiB / {} extents / 1 MiB journal: mapped in {mapped:?}; unlink + last forget returned in {returned:?}, \
         the reaper freed it all in {freed:?} ({} steps, {} commits)",
        blocks / 2,
        stat(&fs, "reaper.steps"),
        stat(&fs, "journal.commits")
    );
    unmount_clean(&fs, dev.as_ref(), "after deleting 1.3 M extents");
}

/// A crash at any point of a large delete leaves an image that fsck finds
/// consistent, and whose next mount finishes the delete: the file is either
/// still there, whole (the unlink was not durable), or gone with every
/// block free again.
#[test]
fn a_crash_anywhere_in_a_large_delete_is_finished_at_mount() {
    let mem = MemDevice::new(96 << 20);
    format(&mem, &MkfsOptions { journal_blocks: Some(256), ..Default::default() }, &mut |_, _| {}).unwrap();
    let (free_with_file, free_without) = {
        let d: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(mem.snapshot()));
        let fs = Fs::mount(d.clone(), opts()).unwrap();
        let free0 = stat(&fs, "alloc.free_blocks");
        map_every_other_block(&fs, b"big", 12_000, 4096);
        fs.files().sync_fs().unwrap();
        let with = stat(&fs, "alloc.free_blocks");
        fs.unmount().unwrap();
        let bytes = {
            let mut v = vec![0u8; d.size() as usize];
            d.read_at(&mut v, 0).unwrap();
            v
        };
        (with, (free0, bytes))
    };
    let (free0, base) = free_without;
    let rec = Arc::new(RecordingDevice::new(base));
    let fs = Fs::mount(rec.clone(), opts_sync_delete()).unwrap();
    let f = fs.lookup(ROOT, b"big").unwrap();
    let start = rec.ops().len();
    fs.names().unlink(ROOT, b"big").unwrap();
    fs.inodes().forget(f.ino, 2);
    fs.files().sync_fs().unwrap();
    assert!(stat(&fs, "tx.steps") > 5, "the delete ran in {} steps", stat(&fs, "tx.steps"));
    assert_eq!(stat(&fs, "tx.credit_overruns"), 0);
    fs.unmount().unwrap();
    let plan = rec.plan();
    // Every flush prefix, and prefixes of the writes between flushes (up to
    // about 300 states), each also with a torn write of the op after it.
    let mut points: Vec<usize> = plan.flushes().into_iter().filter(|&p| p >= start).map(|p| p + 1).collect();
    let every = ((plan.ops.len() - start) / 150).max(1);
    points.extend((start..plan.ops.len()).step_by(every));
    points.push(plan.ops.len());
    points.sort_unstable();
    points.dedup();
    let mut states = 0;
    let (mut present, mut gone) = (0, 0);
    for &upto in &points {
        for torn in [None, Some((upto, 1024))] {
            if torn.is_some_and(|(t, _)| t >= plan.ops.len()) {
                continue;
            }
            let extra: Vec<usize> = torn.map(|(t, _)| vec![t]).unwrap_or_default();
            let img = Arc::new(plan.image(upto, &extra, torn));
            let what = format!("crash state at op {upto} (torn {torn:?})");
            fsck_clean_mem(img.as_ref(), &what);
            let fs = Fs::mount(img.clone(), opts()).unwrap_or_else(|e| panic!("{what} does not mount: {e}"));
            match fs.lookup(ROOT, b"big") {
                Ok(a) => {
                    assert_eq!(a.size, 12_000 * 4096 - 4096, "{what}: the file is whole");
                    assert_eq!(stat(&fs, "alloc.free_blocks"), free_with_file, "{what}");
                    present += 1;
                }
                Err(_) => {
                    fs.files().sync_fs().unwrap();
                    assert_eq!(stat(&fs, "alloc.free_blocks"), free0, "{what}: mount finished the delete");
                    gone += 1;
                }
            }
            unmount_clean(&fs, img.as_ref(), &format!("{what}, after the mount that finished it"));
            states += 1;
        }
    }
    eprintln!("large delete: {states} crash states ({present} before the unlink was durable, {gone} after), each fsck'd clean and finished at mount");
    assert!(gone > 5 && present > 0 && states > 100, "{states} states, {present} present, {gone} gone");
}
