//! Consistent images — clean unmount, orphans, unreplayed journals, crash
//! states, other block sizes, huge sparse images — must check clean.

use crate::common::*;
use cairn_core::crashdev::RecordingDevice;
use cairn_core::dev::{BlockDevice, FileDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::Ctx;
use cairn_format::inode::S_IFREG;
use std::sync::Arc;
use std::time::Instant;

#[test]
fn populated_image_is_clean() {
    let (bytes, _) = populated_image();
    let f = to_file(&bytes);
    let out = assert_clean(f.path());
    assert!(out.contains("; clean."), "{out}");
    let r = cairn_fsck::check(f.path(), &cairn_fsck::Options::default()).unwrap();
    assert!(r.directories >= 5 && r.symlinks == 2 && r.special_files == 2, "{r:?}");
    assert!(r.regular_files >= 2000, "{r:?}");
    // A repair of a clean image changes nothing and says so.
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(std::fs::read(f.path()).unwrap(), bytes, "a clean image must not be written");
}

#[test]
fn fresh_image_is_clean() {
    for bs in [1024u32, 4096, 65536] {
        let opts = MkfsOptions { block_size: bs, ..Default::default() };
        let dev = new_image(if bs == 65536 { 256 } else { 16 }, &opts);
        let f = to_file(&dev.snapshot());
        assert_clean(f.path());
    }
}

#[test]
fn small_blocks_populated_is_clean() {
    let opts =
        MkfsOptions { block_size: 1024, bytes_per_inode: 2048, journal_blocks: Some(2048), ..Default::default() };
    let dev = new_image(64, &opts);
    let fs = mount(dev.clone());
    populate(&fs);
    fs.unmount().unwrap();
    let f = to_file(&dev.snapshot());
    assert_clean(f.path());
}

#[test]
fn unreplayed_journal_with_orphans_is_clean() {
    let bytes = unreplayed_image();
    let f = to_file(&bytes);
    let r = cairn_fsck::check(f.path(), &cairn_fsck::Options::default()).unwrap();
    assert!(r.is_clean(), "{r:#?}");
    assert!(r.journal_records_replayed >= 1, "{r:?}");
    // 3 here, plus what populate() removed while still looked up (the
    // engine's lookup counts are never forgotten in these tests): 1,000
    // files and one directory.
    assert_eq!(r.orphans, 1004, "{r:?}");
    assert_eq!(std::fs::read(f.path()).unwrap(), bytes, "a check must not write");
    // Repair replays into the image; the result is clean and mounts.
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("replayed"), "{out}");
    let r = cairn_fsck::check(f.path(), &cairn_fsck::Options::default()).unwrap();
    assert_eq!(r.journal_records_replayed, 0);
    assert!(r.is_clean(), "{r:#?}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
    let fs = mount(dev.clone());
    fs.unmount().unwrap();
}

#[test]
fn in_memory_check_equals_file_check() {
    let opts = cairn_fsck::Options::default();
    for bytes in [populated_image().0, unreplayed_image()] {
        let f = to_file(&bytes);
        let from_file = cairn_fsck::check(f.path(), &opts).unwrap();
        assert!(from_file.is_clean(), "{from_file:#?}");
        let from_vec = cairn_fsck::check_image(&bytes, &opts).unwrap();
        let from_slice = cairn_fsck::check_image(&bytes.as_slice(), &opts).unwrap();
        let opened = cairn_fsck::ImageFile::open(f.path(), false).unwrap();
        let from_image_file = cairn_fsck::check_image(&opened, &opts).unwrap();
        for r in [from_vec, from_slice, from_image_file] {
            assert_eq!(format!("{r:?}"), format!("{from_file:?}"));
        }
    }
    // Memory is read-only: no repair there (and nothing is read).
    let repair = cairn_fsck::Options { repair: true, ..Default::default() };
    let e = cairn_fsck::check_image(&unreplayed_image(), &repair).unwrap_err();
    assert!(matches!(&e, cairn_fsck::FsckError::Io(io) if io.kind() == std::io::ErrorKind::PermissionDenied), "{e:?}");
}

#[test]
fn crash_states_are_clean() {
    let base = new_image(32, &small_groups()).snapshot();
    let rec = Arc::new(RecordingDevice::new(base));
    {
        let c = Ctx::root();
        let fs = mount(rec.clone());
        let d = fs.names().mkdir(&c, ROOT, b"d", 0o755).unwrap().ino;
        for i in 0..60u32 {
            let f = fs.names().mknod(&c, d, format!("f{i}").as_bytes(), S_IFREG | 0o644, 0).unwrap().ino;
            fs.files().write(f, 0, &vec![i as u8; 5000 + i as usize * 300]).unwrap();
            if i % 4 == 0 {
                fs.setxattr(f, b"user.i", &i.to_le_bytes(), 0).unwrap();
            }
            if i % 5 == 4 {
                fs.names().unlink(d, format!("f{}", i - 2).as_bytes()).unwrap();
            }
            if i % 7 == 0 {
                fs.files().sync_fs().unwrap();
            }
        }
        let keep = fs.names().mknod(&c, ROOT, b"held", S_IFREG | 0o644, 0).unwrap().ino;
        fs.files().write(keep, 0, &[3u8; 9000]).unwrap();
        fs.names().unlink(ROOT, b"held").unwrap();
        fs.files().sync_fs().unwrap();
        fs.names().rename(d, b"f1", ROOT, b"f1-moved", 0).unwrap();
        fs.unmount().unwrap();
    }
    let plan = rec.plan();
    let flushes = plan.flushes();
    assert!(flushes.len() > 10);
    let step = (flushes.len() / 40).max(1);
    let mut checked = 0;
    for (n, &fl) in flushes.iter().enumerate() {
        if n % step != 0 && n + 1 != flushes.len() {
            continue;
        }
        let img = plan.image(fl, &[], None).to_vec();
        let f = to_file(&img);
        let (code, out) = fsck(f.path(), false);
        assert_eq!(code, 0, "crash state at op {fl} (flush {n} of {}):\n{out}", flushes.len());
        checked += 1;
    }
    assert!(checked >= 10);
}

#[test]
fn huge_sparse_image_checks_fast() {
    let f = tempfile::NamedTempFile::new().unwrap();
    // 16 TiB where the host file system allows a file that large (ext4's
    // limit is just below), else 4 TiB.
    let ok = [16u64 << 40, (16 << 40) - (1 << 20), 4 << 40].iter().any(|&n| f.as_file().set_len(n).is_ok());
    assert!(ok);
    let dev = Arc::new(FileDevice::open(f.path(), false).unwrap());
    format(dev.as_ref(), &MkfsOptions::default(), &mut |_, _| {}).unwrap();
    {
        let c = Ctx::root();
        let fs = mount(dev.clone());
        let d = fs.names().mkdir(&c, ROOT, b"d", 0o755).unwrap().ino;
        let x = fs.names().mknod(&c, d, b"x", S_IFREG | 0o644, 0).unwrap().ino;
        fs.files().write(x, 0, &[5u8; 100_000]).unwrap();
        fs.unmount().unwrap();
    }
    drop(dev);
    let t = Instant::now();
    let r = cairn_fsck::check(f.path(), &cairn_fsck::Options::default()).unwrap();
    let took = t.elapsed();
    eprintln!("fsck of a {} GiB sparse image: {took:?}, {} bytes read", r.total_blocks * 4 / (1 << 20), r.bytes_read);
    assert!(r.is_clean(), "{r:#?}");
    assert!(r.uninit_groups > 30_000, "{}", r.uninit_groups);
    assert!(took.as_secs() < 10, "fsck of a 4 TiB sparse image took {took:?}");
}

#[test]
fn many_files_check_fast() {
    let opts = MkfsOptions { bytes_per_inode: 4096, ..Default::default() };
    let dev = new_image(256, &opts);
    let c = Ctx::root();
    let fs = mount(dev.clone());
    for d in 0..20u32 {
        let dir = fs.names().mkdir(&c, ROOT, format!("d{d}").as_bytes(), 0o755).unwrap().ino;
        for i in 0..1000u32 {
            let f = fs.names().mknod(&c, dir, format!("file-{i}").as_bytes(), S_IFREG | 0o644, 0).unwrap().ino;
            if i % 10 == 0 {
                fs.files().write(f, 0, b"some data").unwrap();
            }
        }
    }
    fs.unmount().unwrap();
    let f = to_file(&dev.snapshot());
    let t = Instant::now();
    let r = cairn_fsck::check(f.path(), &cairn_fsck::Options::default()).unwrap();
    assert!(r.is_clean(), "{r:#?}");
    assert_eq!(r.regular_files, 20_000);
    eprintln!("fsck of 20,000 files: {:?}", t.elapsed());
    assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
}

/// 100,000 files: run with `--ignored` (building the image takes a while).
#[test]
#[ignore]
fn hundred_thousand_files() {
    let opts = MkfsOptions { bytes_per_inode: 4096, ..Default::default() };
    let dev = new_image(1024, &opts);
    let c = Ctx::root();
    let fs = mount(dev.clone());
    for d in 0..100u32 {
        let dir = fs.names().mkdir(&c, ROOT, format!("d{d}").as_bytes(), 0o755).unwrap().ino;
        for i in 0..1000u32 {
            let f = fs.names().mknod(&c, dir, format!("file-{i}").as_bytes(), S_IFREG | 0o644, 0).unwrap().ino;
            fs.files().write(f, 0, b"x").unwrap();
        }
    }
    fs.unmount().unwrap();
    let f = to_file(&dev.snapshot());
    let t = Instant::now();
    let r = cairn_fsck::check(f.path(), &cairn_fsck::Options::default()).unwrap();
    eprintln!("fsck of 100,000 files: {:?}", t.elapsed());
    assert!(r.is_clean(), "{r:#?}");
    assert_eq!(r.regular_files, 100_000);
}

/// `Options::progress` hears each long pass group by group, in order, and
/// a last call with `total == 0` when the check ends.
#[test]
fn progress_reports_every_group_of_the_inode_and_bitmap_passes_then_the_end() {
    let (bytes, _) = populated_image();
    let calls = Arc::new(std::sync::Mutex::new(Vec::<(String, u64, u64)>::new()));
    let seen = calls.clone();
    let hook = cairn_fsck::ProgressHook(Arc::new(move |what: &str, done, total| {
        seen.lock().unwrap().push((what.to_string(), done, total));
    }));
    let opts = cairn_fsck::Options { progress: Some(hook), ..Default::default() };
    let r = cairn_fsck::check_image(&bytes, &opts).unwrap();
    assert!(r.is_clean());
    let calls = calls.lock().unwrap();
    let groups = calls[0].2;
    assert!(groups > 1, "{calls:?}");
    for pass in ["pass 1: inodes", "pass 5: bitmaps"] {
        let done: Vec<u64> = calls.iter().filter(|c| c.0 == pass).map(|c| c.1).collect();
        assert_eq!(done, (0..groups).collect::<Vec<_>>(), "{pass}");
    }
    assert_eq!(calls.last().unwrap().2, 0, "the end is told last");
}
