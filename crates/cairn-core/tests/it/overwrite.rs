//! The overwrite fast path (seed 004): which writes take it, what they
//! leave (bytes, lazily logged times), what is durable after fdatasync and
//! fsync across a crash, and fast-path writers racing with truncate, punch
//! hole and journaled writes.

use crate::common::*;
use cairn_core::crashdev::RecordingDevice;
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions, MKFS_MIN_JOURNAL_BLOCKS};
use cairn_core::{Ctx, Fs, MountOptions, SetAttr, TimeSet, Timestamp};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

const FALLOC_FL_KEEP_SIZE: i32 = 1;
const FALLOC_FL_PUNCH_HOLE: i32 = 2;

fn opts(fast: bool) -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), overwrite_fastpath: fast, ..Default::default() }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

/// A regular file `name` in the root holding `data`, committed.
fn file_with(fs: &Fs, name: &str, data: &[u8]) -> u64 {
    let ino = fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
    assert_eq!(fs.files().write(ino, 0, data).unwrap() as usize, data.len());
    fs.files().sync_fs().unwrap();
    ino
}

#[test]
fn overwrites_of_written_blocks_take_no_transaction_and_keep_their_bytes() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts(true));
    let mut model = pattern(1, 512 << 10);
    let ino = file_with(&fs, "f", &model);
    let handles = stat(&fs, "tx.handles");
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for i in 0..200u64 {
        // Unaligned offsets and lengths, some crossing block boundaries.
        let len = rng.gen_range(1..20_000usize);
        let off = rng.gen_range(0..(model.len() - len) as u64);
        let d = pattern(100 + i, len);
        assert_eq!(fs.files().write(ino, off, &d).unwrap() as usize, len);
        model[off as usize..off as usize + len].copy_from_slice(&d);
    }
    assert_eq!(stat(&fs, "overwrite.fast_writes"), 200);
    assert_eq!(stat(&fs, "tx.handles"), handles, "a fast-path write opened a transaction handle");
    assert_eq!(fs.files().read(ino, 0, model.len() as u32).unwrap(), model);
    fs.unmount().unwrap();
    let fs = mount_with(&dev, opts(true));
    assert_eq!(fs.files().read(ino, 0, model.len() as u32).unwrap(), model);
    unmount_clean(&fs, dev.as_ref(), "after fast-path overwrites");
}

#[test]
fn writes_that_allocate_extend_or_convert_are_journaled() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts(true));
    let c = Ctx::root();
    let ino = file_with(&fs, "f", &[7u8; 8192]);
    let fast = |fs: &Fs| stat(fs, "overwrite.fast_writes");
    let journaled = |fs: &Fs| stat(fs, "overwrite.journaled_writes");

    // Crossing the end of the file.
    let j = journaled(&fs);
    fs.files().write(ino, 8000, &[1u8; 500]).unwrap();
    assert_eq!((fast(&fs), journaled(&fs)), (0, j + 1));
    assert_eq!(fs.inodes().getattr(ino).unwrap().size, 8500);

    // Into a hole inside the file.
    let sparse = fs.names().mknod(&c, 1, b"sparse", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(sparse, 1 << 20, b"end").unwrap();
    let j = journaled(&fs);
    fs.files().write(sparse, 4096, &[2u8; 4096]).unwrap();
    assert_eq!((fast(&fs), journaled(&fs)), (0, j + 1));
    assert_eq!(fs.files().read(sparse, 4096, 4096).unwrap(), vec![2u8; 4096]);

    // Into an unwritten (fallocated) extent inside the file.
    let pre = fs.names().mknod(&c, 1, b"pre", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().fallocate(pre, 0, 64 << 10, 0).unwrap();
    let j = journaled(&fs);
    fs.files().write(pre, 100, b"abc").unwrap();
    assert_eq!((fast(&fs), journaled(&fs)), (0, j + 1));
    let got = fs.files().read(pre, 0, 4096).unwrap();
    assert_eq!(&got[100..103], b"abc");
    assert!(got[..100].iter().chain(&got[103..]).all(|&b| b == 0));
    // ... and once written, the same block is an overwrite.
    fs.files().write(pre, 200, b"def").unwrap();
    assert_eq!(fast(&fs), 1);
    assert!(stat(&fs, "overwrite.fallbacks") >= 3);
    unmount_clean(&fs, dev.as_ref(), "after journaled writes");
}

#[test]
fn overwrite_fastpath_0_journals_every_write() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts(false));
    let ino = file_with(&fs, "f", &[1u8; 65536]);
    let handles = stat(&fs, "tx.handles");
    for i in 0..10 {
        fs.files().write(ino, i * 4096, &[9u8; 4096]).unwrap();
    }
    assert_eq!(stat(&fs, "overwrite.enabled"), 0);
    assert_eq!(stat(&fs, "overwrite.fast_writes"), 0);
    assert_eq!(stat(&fs, "tx.handles"), handles + 10);
    assert_eq!(fs.files().read(ino, 0, 40960).unwrap(), vec![9u8; 40960]);
    fs.unmount().unwrap();
}

#[test]
fn fast_path_times_are_seen_at_once_and_logged_at_the_next_commit() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts(true));
    let ino = file_with(&fs, "f", &[1u8; 16384]);
    let before = fs.inodes().getattr(ino).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    fs.files().write(ino, 4096, &[2u8; 100]).unwrap();
    let after = fs.inodes().getattr(ino).unwrap();
    assert!(after.mtime > before.mtime && after.ctime > before.ctime, "{before:?} -> {after:?}");
    assert_eq!(stat(&fs, "overwrite.dirty_times_queued"), 1);
    // Many writes, one queued inode, one logged update.
    for i in 0..50 {
        fs.files().write(ino, i * 100, &[3u8; 50]).unwrap();
    }
    assert_eq!(stat(&fs, "overwrite.dirty_times_queued"), 1);
    let last = fs.inodes().getattr(ino).unwrap();
    fs.files().fsync(ino, false).unwrap();
    assert_eq!(stat(&fs, "overwrite.dirty_times_queued"), 0);
    assert_eq!(stat(&fs, "overwrite.lazy_times_logged"), 1);
    fs.unmount().unwrap();
    let fs = mount_with(&dev, opts(true));
    let again = fs.inodes().getattr(ino).unwrap();
    assert_eq!((again.mtime, again.ctime), (last.mtime, last.ctime));
    fs.unmount().unwrap();
}

#[test]
fn an_explicit_mtime_is_not_overridden_by_an_earlier_fast_path_write() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts(true));
    let ino = file_with(&fs, "f", &[1u8; 8192]);
    fs.files().write(ino, 0, b"xyz").unwrap();
    let past = Timestamp { sec: 1_000_000_000, nsec: 5 };
    let set = SetAttr { mtime: Some(TimeSet::At(past)), ..Default::default() };
    fs.files().setattr(&Ctx::root(), ino, &set).unwrap();
    assert_eq!(fs.inodes().getattr(ino).unwrap().mtime, past);
    fs.files().sync_fs().unwrap();
    assert_eq!(fs.inodes().getattr(ino).unwrap().mtime, past);
    fs.unmount().unwrap();
    let fs = mount_with(&dev, opts(true));
    assert_eq!(fs.inodes().getattr(ino).unwrap().mtime, past);
    fs.unmount().unwrap();
}

#[test]
fn writes_and_fallocates_after_a_setattr_of_the_times_leave_them_alone_when_asked() {
    // FUSE's writeback cache: the kernel sends the file's mtime in a SETATTR
    // and may send the dirty pages after it; those writes keep the times.
    for fast in [true, false] {
        let dev = new_image(64);
        let fs = mount_with(&dev, opts(fast));
        let ino = file_with(&fs, "f", &[1u8; 8192]);
        let past = Timestamp { sec: 1_000_000_000, nsec: 7 };
        let set = SetAttr { mtime: Some(TimeSet::At(past)), ctime: Some(past), ..Default::default() };
        fs.files().setattr(&Ctx::root(), ino, &set).unwrap();
        // An overwrite (fast path when on) and an extending write (journaled).
        fs.files().write_data(ino, 100, b"over", false).unwrap();
        fs.files().write_data(ino, 8192, &[2u8; 5000], false).unwrap();
        // So do a punch, a zero-range and a preallocation that keep the size.
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        fs.files().fallocate_data(ino, 4096, 4096, libc::FALLOC_FL_PUNCH_HOLE | KEEP, false).unwrap();
        fs.files().fallocate_data(ino, 0, 50, libc::FALLOC_FL_ZERO_RANGE | KEEP, false).unwrap();
        fs.files().fallocate_data(ino, 16384, 8192, KEEP, false).unwrap();
        let a = fs.inodes().getattr(ino).unwrap();
        assert_eq!((a.mtime, a.ctime, a.size), (past, past, 13192), "fast path {fast}");
        fs.files().sync_fs().unwrap();
        fs.unmount().unwrap();
        let fs = mount_with(&dev, opts(fast));
        let a = fs.inodes().getattr(ino).unwrap();
        assert_eq!((a.mtime, a.ctime, a.size), (past, past, 13192), "fast path {fast}, after remount");
        // An ordinary punch and write still set them.
        fs.files().fallocate(ino, 4096, 4096, libc::FALLOC_FL_PUNCH_HOLE | KEEP).unwrap();
        let a = fs.inodes().getattr(ino).unwrap();
        assert!(a.mtime > past && a.ctime > past, "fast path {fast}: a punch sets the times");
        fs.files().setattr(&Ctx::root(), ino, &set).unwrap();
        fs.files().write(ino, 0, b"now").unwrap();
        assert!(fs.inodes().getattr(ino).unwrap().mtime > past);
        fs.unmount().unwrap();
    }
}

/// Mounts the crash state made of every recorded operation up to `upto`
/// and returns the bytes of the file `f`.
fn crash_read(rec: &RecordingDevice, upto: usize, len: u32) -> (Vec<u8>, cairn_core::Attr) {
    let img = rec.plan().image(upto, &[], None);
    let d: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(img.to_vec()));
    let fs = Fs::mount(d.clone(), opts(true)).expect("crash state mounts");
    let a = fs.lookup(1, b"f").unwrap();
    let bytes = fs.files().read(a.ino, 0, len).unwrap();
    unmount_clean(&fs, d.as_ref(), "crash state");
    (bytes, a)
}

/// Issue 32, item 3: a commit (the backend's, or any `sync_fs`) takes the
/// whole list of dirty times and stores them in handles; an `fsync` that
/// started meanwhile found the list empty and committed without waiting for
/// those times, so a crash right after the `fsync` returned showed the old
/// mtime. Here another thread's `sync_fs` takes a list of 2,000 inodes with
/// `f` last, and the `fsync` of `f` starts as soon as the list is taken.
#[test]
fn fsync_waits_for_dirty_times_that_a_concurrent_commit_has_taken() {
    let mem = MemDevice::new(64 << 20);
    format(&mem, &MkfsOptions::default(), &mut |_, _| {}).unwrap();
    let rec = Arc::new(RecordingDevice::new(mem.snapshot()));
    let d: Arc<dyn BlockDevice> = rec.clone();
    let fs = Arc::new(Fs::mount(d, opts(true)).unwrap());
    let c = Ctx::root();
    let others: Vec<u64> = (0..2000)
        .map(|i| {
            let ino = fs.names().mknod(&c, 1, format!("o{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
            fs.files().write(ino, 0, &[1u8; 4096]).unwrap();
            ino
        })
        .collect();
    let ino = file_with(&fs, "f", &vec![1u8; 65536]);
    let mut stale = Vec::new();
    for round in 0..5u8 {
        std::thread::sleep(Duration::from_millis(2));
        for o in &others {
            fs.files().write(*o, 0, &[round + 2]).unwrap();
        }
        fs.files().write(ino, u64::from(round) * 100, &[round + 2]).unwrap();
        let want = fs.inodes().getattr(ino).unwrap().mtime;
        assert_eq!(stat(&fs, "overwrite.dirty_times_queued"), 2001, "every write took the fast path");
        let syncer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.files().sync_fs().unwrap())
        };
        while stat(&fs, "overwrite.dirty_times_queued") != 0 {
            std::hint::spin_loop();
        }
        fs.files().fsync(ino, false).unwrap();
        let (_, a) = crash_read(&rec, rec.ops().len(), 16);
        if a.mtime < want {
            stale.push(round);
        }
        syncer.join().unwrap();
    }
    assert!(stale.is_empty(), "rounds whose crash state after fsync had the old mtime: {stale:?}");
    fs.unmount().unwrap();
}

#[test]
fn fdatasync_after_overwrites_flushes_only_and_the_bytes_survive_a_crash() {
    let mem = MemDevice::new(32 << 20);
    format(&mem, &MkfsOptions::default(), &mut |_, _| {}).unwrap();
    let rec = Arc::new(RecordingDevice::new(mem.snapshot()));
    let d: Arc<dyn BlockDevice> = rec.clone();
    let fs = Fs::mount(d, opts(true)).unwrap();
    let old = vec![1u8; 65536];
    let ino = file_with(&fs, "f", &old);
    let commits = stat(&fs, "journal.commits");
    let mut new = old.clone();
    new[5000..9000].fill(2);
    fs.files().write(ino, 5000, &new[5000..9000]).unwrap();
    fs.files().fsync(ino, true).unwrap();
    assert_eq!(stat(&fs, "overwrite.datasync_flush_only"), 1);
    assert_eq!(stat(&fs, "journal.commits"), commits, "fdatasync of an overwrite committed the journal");
    let after_datasync = rec.ops().len();
    let mtime = fs.inodes().getattr(ino).unwrap().mtime;

    // A crash right after the fdatasync: the bytes are there.
    let (bytes, _) = crash_read(&rec, after_datasync, 65536);
    assert_eq!(bytes, new);

    // fsync also logs the times.
    std::thread::sleep(Duration::from_millis(20));
    new[100] = 3;
    fs.files().write(ino, 100, &[3]).unwrap();
    let mtime2 = fs.inodes().getattr(ino).unwrap().mtime;
    assert!(mtime2 > mtime);
    fs.files().fsync(ino, false).unwrap();
    let (bytes, a) = crash_read(&rec, rec.ops().len(), 65536);
    assert_eq!(bytes, new);
    assert_eq!(a.mtime, mtime2);

    // fdatasync after a write that allocated commits the journal.
    let commits = stat(&fs, "journal.commits");
    fs.files().write(ino, 65536, &[4u8; 4096]).unwrap();
    fs.files().fsync(ino, true).unwrap();
    assert_eq!(stat(&fs, "journal.commits"), commits + 1);
    assert_eq!(stat(&fs, "overwrite.datasync_flush_only"), 1);
    let (bytes, a) = crash_read(&rec, rec.ops().len(), 70000);
    assert_eq!(a.size, 65536 + 4096);
    assert_eq!(&bytes[65536..], &[4u8; 4096][..]);
    fs.unmount().unwrap();
}

#[test]
fn fast_path_writers_race_with_truncate_punch_hole_and_journaled_writes() {
    let dev = new_image(128);
    let fs = mount_with(&dev, opts(true));
    let c = Ctx::root();
    // One shared file: four writers own a 256 KiB region each; a fifth
    // thread punches holes in, rewrites and truncates a sixth region
    // (shrinking, then extending the file) the whole time.
    const REGION: u64 = 256 << 10;
    let shared = file_with(&fs, "shared", &vec![0u8; (6 * REGION) as usize]);
    let others: Vec<u64> = (0..4).map(|i| file_with(&fs, &format!("own{i}"), &vec![0u8; 65536])).collect();
    let mut threads = Vec::new();
    for w in 0..4u64 {
        let fs = fs.clone();
        let own = others[w as usize];
        threads.push(std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(w);
            let mut model = vec![0u8; REGION as usize];
            let mut own_model = vec![0u8; 65536];
            for i in 0..3000u64 {
                let len = rng.gen_range(1..8192usize);
                let off = rng.gen_range(0..REGION - len as u64);
                let v = (i % 250 + 1) as u8;
                fs.files().write(shared, w * REGION + off, &vec![v; len]).unwrap();
                model[off as usize..off as usize + len].fill(v);
                let o2 = rng.gen_range(0..65536 - 512u64);
                fs.files().write(own, o2, &[v; 512]).unwrap();
                own_model[o2 as usize..o2 as usize + 512].fill(v);
            }
            (model, own_model)
        }));
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let base = 4 * REGION;
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                fs.files().fallocate(shared, base + 8192, 65536, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).unwrap();
                fs.files().write(shared, base, &vec![5u8; REGION as usize]).unwrap();
                fs.files().setattr(&c, shared, &SetAttr { size: Some(5 * REGION), ..Default::default() }).unwrap();
                fs.files().write(shared, 5 * REGION, &vec![6u8; REGION as usize]).unwrap();
                if n.is_multiple_of(8) {
                    fs.files().sync_fs().unwrap();
                }
                n += 1;
            }
            n
        })
    };
    let results: Vec<(Vec<u8>, Vec<u8>)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = churn.join().unwrap();
    assert!(rounds > 0);
    for (w, (model, own_model)) in results.iter().enumerate() {
        assert_eq!(&fs.files().read(shared, w as u64 * REGION, REGION as u32).unwrap(), model, "region {w}");
        assert_eq!(&fs.files().read(others[w], 0, 65536).unwrap(), own_model, "file own{w}");
    }
    assert_eq!(fs.files().read(shared, 4 * REGION, REGION as u32).unwrap(), vec![5u8; REGION as usize]);
    assert_eq!(fs.files().read(shared, 5 * REGION, REGION as u32).unwrap(), vec![6u8; REGION as usize]);
    assert!(stat(&fs, "overwrite.fast_writes") >= 4 * 3000);
    fs.debug_check_consistency();
    unmount_clean(&fs, dev.as_ref(), "after racing writers");
}

#[test]
fn dirty_times_of_many_files_are_logged_through_a_tiny_cache_and_journal() {
    // 2,000 inodes fill 125 inode-table blocks, about twice the cache.
    let mk = MkfsOptions { journal_blocks: Some(MKFS_MIN_JOURNAL_BLOCKS), ..Default::default() };
    let dev = new_image_with(64, &mk);
    let o = MountOptions { cache_blocks: 64, ..opts(true) };
    let fs = mount_with(&dev, o.clone());
    let inos: Vec<u64> = (0..2000).map(|i| file_with(&fs, &format!("f{i}"), &[1u8; 4096])).collect();
    for (i, &ino) in inos.iter().enumerate() {
        fs.files().write(ino, 10, &[(i % 200) as u8 + 2; 10]).unwrap();
    }
    assert_eq!(stat(&fs, "overwrite.dirty_times_queued"), 2000);
    let want: Vec<_> = inos.iter().map(|&i| fs.inodes().getattr(i).unwrap().mtime).collect();
    fs.files().sync_fs().unwrap();
    assert_eq!(stat(&fs, "overwrite.dirty_times_queued"), 0);
    assert_eq!(stat(&fs, "overwrite.lazy_times_logged"), 2000);
    assert!(stat(&fs, "cache.evictions") > 0, "the tiny cache never evicted");
    unmount_clean(&fs, dev.as_ref(), "after logging 2000 dirty times");
    let fs = mount_with(&dev, o);
    for (k, &ino) in inos.iter().enumerate() {
        assert_eq!(fs.inodes().getattr(ino).unwrap().mtime, want[k], "file f{k}");
        assert_eq!(fs.files().read(ino, 10, 10).unwrap(), vec![(k % 200) as u8 + 2; 10]);
    }
    fs.unmount().unwrap();
}
