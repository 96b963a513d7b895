//! Delayed logging under concurrency: pushes (commits) run while operations
//! go on into the next checkpoint, so writers change buffers the push has not
//! captured yet (frozen copies). Every crash state must still hold whole
//! operations only, in each thread's order.

use crate::common::*;
use cairn_core::crashdev::RecordingDevice;
use cairn_core::dev::BlockDevice;
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const THREADS: u64 = 3;
const FILES: u64 = 1500;

/// What thread `t`'s directory may hold at a crash: `f0 .. f(k-1)`, and at
/// most `tmp(k)` (made, not yet renamed) — never a gap, never both names.
fn check_prefix(fs: &Fs, dir: u64, t: u64, what: &str) -> u64 {
    let has = |n: String| fs.lookup(dir, n.as_bytes()).is_ok();
    let k = (0..FILES).take_while(|i| has(format!("f{i}"))).count() as u64;
    for i in k..FILES {
        assert!(
            !has(format!("f{i}")),
            "{what}: thread {t} has f{i} but not f{k} (a later operation without an earlier one)"
        );
        let tmp = has(format!("tmp{i}"));
        assert!(!tmp || i == k, "{what}: thread {t} has tmp{i} beyond its first missing file f{k}");
    }
    for i in 0..k {
        assert!(!has(format!("tmp{i}")), "{what}: thread {t} has both f{i} and tmp{i} (half a rename)");
    }
    k
}

#[test]
fn pushes_racing_writers_leave_whole_operations_in_order() {
    let base = new_image(32);
    let rec = Arc::new(RecordingDevice::new(base.snapshot()));
    let d: Arc<dyn BlockDevice> = rec.clone();
    // A small cache: buffers are evicted and re-read (from the AIL or home)
    // while pushes and writers run.
    let fs = Fs::mount(d, MountOptions { cache_blocks: 64, ..Default::default() }).unwrap();
    // Captures slow enough that writers reach buffers not yet captured.
    fs.debug_slow_capture(std::time::Duration::from_micros(200));
    let c = Ctx::root();
    let dirs: Vec<u64> =
        (0..THREADS).map(|t| fs.names().mkdir(&c, 1, format!("t{t}").as_bytes(), 0o755).unwrap().ino).collect();
    fs.files().sync_fs().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let committer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                fs.files().sync_fs().unwrap();
            }
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fs, dir) = (fs.clone(), dirs[t as usize]);
            std::thread::spawn(move || {
                for i in 0..FILES {
                    let tmp = format!("tmp{i}");
                    fs.names().mknod(&c, dir, tmp.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
                    fs.names().rename(dir, tmp.as_bytes(), dir, format!("f{i}").as_bytes(), 0).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    committer.join().unwrap();
    let pushes = stat(&fs, "cil.pushes");
    let frozen = stat(&fs, "cil.frozen_copies");
    assert!(pushes > 3, "the committer pushed only {pushes} times");
    assert!(frozen > 0, "no writer met a buffer a push had not captured yet: the race was not exercised");
    fs.unmount().unwrap();
    drop(fs);

    let plan = rec.plan();
    let flushes = plan.flushes();
    let step = (flushes.len() / 40).max(1);
    let mut last = vec![0u64; THREADS as usize];
    for (n, &f) in flushes.iter().enumerate().step_by(step).chain(flushes.iter().enumerate().next_back()) {
        let what = format!("crash after flush {n} of {}", flushes.len());
        let img = Arc::new(plan.image(f + 1, &[], None));
        fsck_clean_mem(img.as_ref(), &what);
        let d: Arc<dyn BlockDevice> = img;
        let fs = Fs::mount(d, MountOptions::default()).unwrap_or_else(|e| panic!("{what}: mount: {e}"));
        for t in 0..THREADS {
            // Before the directories' own sync they may not exist yet.
            let k = match fs.lookup(1, format!("t{t}").as_bytes()) {
                Ok(dir) => check_prefix(&fs, dir.ino, t, &what),
                Err(_) => 0,
            };
            assert!(k >= last[t as usize], "{what}: thread {t} went back from {} files to {k}", last[t as usize]);
            last[t as usize] = k;
        }
        fs.unmount().unwrap();
    }
    assert_eq!(last, vec![FILES; THREADS as usize], "after the last flush every file is there");
}

/// Makes 1,500 files in `/d`, commits, and returns the device as a crash
/// right after the commit leaves it (journal full of records, nothing home
/// written by an unmount), with the journal counters
/// `(chunk_bytes, body_bytes)`.
fn crash_after_creates(dev: &std::sync::Arc<cairn_core::dev::MemDevice>, opts: MountOptions) -> (Vec<u8>, u64, u64) {
    let fs = mount_with(dev, opts);
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    for i in 0..1500 {
        fs.names()
            .mknod(&c, d, format!("file-{i:05}-with-a-longer-name").as_bytes(), libc::S_IFREG | 0o644, 0)
            .unwrap();
    }
    fs.files().sync_fs().unwrap();
    let crashed = dev.snapshot();
    let counters = (stat(&fs, "journal.chunk_bytes"), stat(&fs, "journal.body_bytes"));
    fs.unmount().unwrap();
    (crashed, counters.0, counters.1)
}

/// The crash image replays to all 1,500 files, and fsck (which replays the
/// journal in memory) finds it clean before and after.
fn replays_every_file(crashed: Vec<u8>, what: &str) {
    let dev = std::sync::Arc::new(cairn_core::dev::MemDevice::from_bytes(crashed));
    fsck_clean_mem(dev.as_ref(), what);
    let fs = mount(&dev);
    let d = fs.lookup(1, b"d").unwrap().ino;
    for i in [0, 749, 1499] {
        assert!(fs.lookup(d, format!("file-{i:05}-with-a-longer-name").as_bytes()).is_ok(), "{what}: file {i}");
    }
    unmount_clean(&fs, dev.as_ref(), what);
}

#[test]
fn records_are_compressed_on_images_with_the_feature_and_replay() {
    let dev = new_image(32);
    let (crashed, chunks, body) = crash_after_creates(&dev, MountOptions::default());
    assert!(chunks > 200_000 && body * 3 < chunks, "1,500 creates logged {chunks} bytes of chunks in {body}");
    replays_every_file(crashed, "compressed records");
}

#[test]
fn records_are_logged_as_they_are_without_the_feature_or_with_compression_off() {
    let off = new_image(32);
    let (crashed, chunks, body) =
        crash_after_creates(&off, MountOptions { journal_compress: false, ..Default::default() });
    assert!(chunks > 200_000 && body == chunks, "journal_compress=0: {chunks} bytes of chunks, {body} logged");
    replays_every_file(crashed, "journal_compress=0");
    // An image made before the feature: a build before it can replay its log.
    let old = new_image(32);
    edit_superblock(&old, |sb| sb.feature_incompat &= !cairn_format::superblock::INCOMPAT_JOURNAL_ZSTD);
    let (crashed, chunks, body) = crash_after_creates(&old, MountOptions::default());
    assert!(chunks > 200_000 && body == chunks, "no INCOMPAT_JOURNAL_ZSTD: {chunks} bytes of chunks, {body} logged");
    replays_every_file(crashed, "an image without the feature");
}
