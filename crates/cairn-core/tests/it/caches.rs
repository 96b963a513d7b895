//! The inode and dentry caches under tiny budgets (`inode`, `dcache`,
//! `lru`): names always resolve to the right inode with the right
//! attributes, an open unlinked file survives reclaim and is freed at its
//! last forget, negative entries go when a name appears, a lookup never sees
//! a name a finished rename moved away, and the inode cache stays within its
//! budget while the kernel holds far more inodes than fit.

use crate::common::*;
use cairn_core::mkfs::MkfsOptions;
use cairn_core::{Ctx, FsError, MountOptions, SetAttr, RENAME_EXCHANGE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What the inode cache counts per in-core inode of an empty file
/// (`inode::INODE_BASE_BYTES`).
const INODE_BYTES: usize = 320;

/// Budget of the inode cache: room for about `n` inodes.
fn tiny(inodes: usize, dentries: usize) -> MountOptions {
    MountOptions {
        inode_cache_bytes: inodes * INODE_BYTES,
        dentry_cache_bytes: dentries * 200,
        cache_blocks: 4096,
        ..Default::default()
    }
}

fn enoent(r: cairn_core::Result<cairn_core::Attr>) -> bool {
    matches!(r, Err(FsError::Errno(libc::ENOENT)))
}

#[test]
fn a_tiny_budget_keeps_every_name_and_attribute_right() {
    let dev = new_image(256);
    let fs = mount_with(&dev, tiny(100, 100));
    let c = Ctx::root();
    let a = fs.names().mkdir(&c, 1, b"a", 0o755).unwrap().ino;
    let b = fs.names().mkdir(&c, 1, b"b", 0o755).unwrap().ino;
    const THREADS: u64 = 4;
    const PER: u64 = 5000;
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = Arc::clone(&fs);
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in 0..PER {
                    let name = format!("f{t}-{i}");
                    let n = name.as_bytes();
                    // Each create's negative lookup first, as the kernel does.
                    assert!(enoent(fs.lookup(a, n)), "{name} before create");
                    let f = fs.names().mknod(&c, a, n, libc::S_IFREG | 0o644, 0).unwrap().ino;
                    fs.files().write(f, 0, &vec![t as u8; (i % 97) as usize]).unwrap();
                    let set = SetAttr { mode: Some(0o600 | (i % 8) as u32), ..Default::default() };
                    fs.files().setattr(&c, f, &set).unwrap();
                    assert_eq!(fs.lookup(a, n).unwrap().ino, f, "{name} after create");
                    // The kernel forgets most of them (create + lookup).
                    if i % 4 != 0 {
                        fs.inodes().forget(f, 2);
                    }
                    let fate = i % 3;
                    match fate {
                        0 => fs.names().rename(a, n, b, n, 0).unwrap(),
                        1 => fs.names().unlink(a, n).unwrap(),
                        _ => {}
                    }
                    out.push((name, f, fate, i));
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().unwrap());
    }
    assert!(stat(&fs, "icache.reclaimed") > 10_000, "the inode cache did not reclaim");
    assert!(stat(&fs, "dcache.reclaimed") > 10_000, "the dentry cache did not reclaim");
    let check = |fs: &cairn_core::Fs| {
        for (name, f, fate, i) in &all {
            let n = name.as_bytes();
            let (here, gone) = match fate {
                0 => (b, a),
                1 => {
                    assert!(enoent(fs.lookup(a, n)), "{name} unlinked but found");
                    assert!(enoent(fs.lookup(b, n)), "{name} unlinked but found in b");
                    continue;
                }
                _ => (a, b),
            };
            assert!(enoent(fs.lookup(gone, n)), "{name} found where it is not");
            let at = fs.lookup(here, n).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(at.ino, *f, "{name}");
            assert_eq!(at.size, i % 97, "{name} size");
            assert_eq!(at.mode & 0o7777, 0o600 | (*i % 8) as u32, "{name} mode");
            assert_eq!(at.nlink, 1, "{name} nlink");
        }
    };
    check(&fs);
    // Twice: the second pass answers from what the first left cached.
    check(&fs);
    unmount_clean(&fs, dev.as_ref(), "after 20,000 files through a tiny cache");
    let fs = mount_with(&dev, tiny(100, 100));
    check(&fs);
    fs.unmount().unwrap();
}

#[test]
fn an_open_unlinked_file_survives_reclaim_and_is_freed_at_its_last_forget() {
    let dev = new_image(64);
    let fs = mount_with(&dev, tiny(50, 50));
    let c = Ctx::root();
    let f = fs.names().mknod(&c, 1, b"open", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    fs.files().write(f, 0, &data).unwrap();
    fs.names().unlink(1, b"open").unwrap();
    let free_before = fs.statfs().unwrap().files_free;
    // Far more inodes than fit go through the cache, before and after the
    // file is used again (the last forget must find it in core too).
    let pressure = |from: u64| {
        for i in from..from + 3000 {
            let n = format!("x{i}");
            let x = fs.names().mknod(&c, 1, n.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
            fs.inodes().forget(x, 1);
        }
    };
    pressure(0);
    assert!(stat(&fs, "icache.reclaimed") > 2000);
    let at = fs.inodes().getattr(f).unwrap();
    assert_eq!((at.nlink, at.size), (0, 20_000));
    assert_eq!(fs.files().read(f, 0, 30_000).unwrap(), data);
    pressure(3000);
    assert_eq!(fs.statfs().unwrap().files_free, free_before - 6000, "the unlinked file was freed while open");
    fs.inodes().forget(f, 1); // queues it on the reaper (see `reaper`)
    let t0 = std::time::Instant::now();
    while stat(&fs, "reaper.backlog_inodes") > 0 && t0.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(fs.statfs().unwrap().files_free, free_before - 6000 + 1, "not freed after its last forget");
    assert!(fs.inodes().getattr(f).is_err());
    unmount_clean(&fs, dev.as_ref(), "after the open unlinked file");
}

#[test]
fn negative_entries_go_when_the_name_appears() {
    let (_dev, fs) = mounted_image(64);
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    let other = fs.names().mknod(&c, 1, b"other", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let src = fs.names().mknod(&c, 1, b"src", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let names: [&[u8]; 5] = [b"file", b"dir", b"sym", b"link", b"moved"];
    for n in names {
        assert!(enoent(fs.lookup(d, n)));
        assert!(enoent(fs.lookup(d, n)));
    }
    assert!(stat(&fs, "dcache.negative_hits") >= 5, "negative entries are not cached");
    let file = fs.names().mknod(&c, d, b"file", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let dir = fs.names().mkdir(&c, d, b"dir", 0o755).unwrap().ino;
    let sym = fs.names().symlink(&c, d, b"sym", b"/x").unwrap().ino;
    fs.names().link(other, d, b"link").unwrap();
    fs.names().rename(1, b"src", d, b"moved", 0).unwrap();
    for (n, ino) in names.iter().zip([file, dir, sym, other, src]) {
        assert_eq!(fs.lookup(d, n).unwrap().ino, ino, "{}", String::from_utf8_lossy(n));
    }
    // And the other way: gone names are gone, created again are the new ones.
    fs.names().unlink(d, b"file").unwrap();
    fs.names().rmdir(d, b"dir").unwrap();
    fs.names().rename(d, b"moved", 1, b"src", 0).unwrap();
    for n in [&b"file"[..], b"dir", b"moved"] {
        assert!(enoent(fs.lookup(d, n)));
    }
    assert_eq!(fs.lookup(1, b"src").unwrap().ino, src);
    let file2 = fs.names().mknod(&c, d, b"file", libc::S_IFREG | 0o644, 0).unwrap().ino;
    assert_eq!(fs.lookup(d, b"file").unwrap().ino, file2);
    fs.unmount().unwrap();
}

/// Lookup threads against a renamer, checked through a sequence lock: odd
/// while a rename runs, even between; a lookup that starts and ends at the
/// same even value saw one settled state and must report exactly it.
#[test]
fn a_lookup_never_finds_a_name_a_finished_rename_moved_away() {
    let dev = new_image(128);
    let fs = mount_with(&dev, tiny(64, 64));
    let c = Ctx::root();
    let d1 = fs.names().mkdir(&c, 1, b"d1", 0o755).unwrap().ino;
    let d2 = fs.names().mkdir(&c, 1, b"d2", 0o755).unwrap().ino;
    let x = fs.names().mknod(&c, d1, b"a", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let y = fs.names().mknod(&c, d1, b"y", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let seq = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // State k (seq = 2k), cycling through 4:
    //   0: d1/a = x, d1/y = y      -> rename d1/a to d1/b
    //   1: d1/b = x, d1/y = y      -> exchange d1/b and d1/y
    //   2: d1/b = y, d1/y = x      -> exchange back, then move d1/b to d2/a
    //   3: d2/a = x, d1/y = y      -> move back to d1/a
    let expect = move |k: u64, dir: u64, name: &[u8]| -> Option<u64> {
        match (k % 4, dir, name) {
            (0, _, b"a") if dir == d1 => Some(x),
            (1, _, b"b") if dir == d1 => Some(x),
            (2, _, b"b") if dir == d1 => Some(y),
            (2, _, b"y") if dir == d1 => Some(x),
            (3, _, b"a") if dir == d2 => Some(x),
            (k, _, b"y") if dir == d1 && k != 2 => Some(y),
            _ => None,
        }
    };
    let lookers: Vec<_> = (0..3)
        .map(|t| {
            let (fs, seq, stop) = (fs.clone(), seq.clone(), stop.clone());
            std::thread::spawn(move || {
                let probes: [(u64, &[u8]); 5] = [(d1, b"a"), (d1, b"b"), (d1, b"y"), (d2, b"a"), (d2, b"b")];
                let mut checked = 0u64;
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let (dir, name) = probes[i % probes.len()];
                    i += 1;
                    let s1 = seq.load(Ordering::SeqCst);
                    let r = fs.lookup(dir, name);
                    let s2 = seq.load(Ordering::SeqCst);
                    if let Ok(a) = &r {
                        fs.inodes().forget(a.ino, 1);
                    }
                    if s1 != s2 || s1 % 2 == 1 {
                        continue;
                    }
                    let got = r.ok().map(|a| a.ino);
                    assert_eq!(
                        got,
                        expect(s1 / 2, dir, name),
                        "state {} lookup {dir}/{}",
                        s1 / 2 % 4,
                        String::from_utf8_lossy(name)
                    );
                    checked += 1;
                }
                checked
            })
        })
        .collect();
    // Churn: other names in the same directories keep the tiny caches busy.
    let churn = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = format!("c{}", i % 500);
                let dir = if i.is_multiple_of(2) { d1 } else { d2 };
                match fs.names().mknod(&c, dir, n.as_bytes(), libc::S_IFREG | 0o644, 0) {
                    Ok(a) => fs.inodes().forget(a.ino, 1),
                    Err(_) => fs.names().unlink(dir, n.as_bytes()).unwrap(),
                }
                i += 1;
            }
        })
    };
    let probes: [(u64, &[u8]); 5] = [(d1, b"a"), (d1, b"b"), (d1, b"y"), (d2, b"a"), (d2, b"b")];
    let step = |f: &dyn Fn()| {
        seq.fetch_add(1, Ordering::SeqCst);
        f();
        let s = seq.fetch_add(1, Ordering::SeqCst) + 1;
        // The renamer's own lookups, right after the rename returned.
        for (dir, name) in probes {
            let got = fs.lookup(dir, name).ok().map(|a| a.ino);
            if let Some(ino) = got {
                fs.inodes().forget(ino, 1);
            }
            assert_eq!(
                got,
                expect(s / 2, dir, name),
                "after rename: state {} {dir}/{}",
                s / 2 % 4,
                String::from_utf8_lossy(name)
            );
        }
        // A settled moment for the other lookups.
        std::thread::sleep(std::time::Duration::from_micros(100));
    };
    for _ in 0..1500 {
        step(&|| fs.names().rename(d1, b"a", d1, b"b", 0).unwrap());
        step(&|| fs.names().rename(d1, b"b", d1, b"y", RENAME_EXCHANGE).unwrap());
        step(&|| {
            fs.names().rename(d1, b"b", d1, b"y", RENAME_EXCHANGE).unwrap();
            fs.names().rename(d1, b"b", d2, b"a", 0).unwrap();
        });
        step(&|| fs.names().rename(d2, b"a", d1, b"a", 0).unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    let checked: u64 = lookers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(checked > 1000, "only {checked} lookups saw a settled state");
    assert!(stat(&fs, "dcache.hits") > 0);
    unmount_clean(&fs, dev.as_ref(), "after renames under lookups");
}

fn hold_many(opts: MountOptions, n: u64) -> (u64, u64, u64) {
    let dev = new_image_with(256, &MkfsOptions { bytes_per_inode: 4096, ..Default::default() });
    let fs = mount_with(&dev, opts);
    let c = Ctx::root();
    let dirs: Vec<u64> =
        (0..10).map(|i| fs.names().mkdir(&c, 1, format!("d{i}").as_bytes(), 0o755).unwrap().ino).collect();
    let mut most = 0;
    let mut inos = Vec::new();
    for i in 0..n {
        // The create's lookup reference is kept: the kernel holds them all.
        let f = fs
            .names()
            .mknod(&c, dirs[(i % 10) as usize], format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0)
            .unwrap();
        inos.push(f.ino);
        if i % 1000 == 0 {
            most = most.max(stat(&fs, "icache.entries"));
        }
    }
    let refs = stat(&fs, "icache.lookup_refs");
    for (i, f) in inos.iter().enumerate() {
        let a = fs.lookup(dirs[i % 10], format!("f{i}").as_bytes()).unwrap();
        assert_eq!(a.ino, *f);
        assert_eq!(fs.inodes().getattr(*f).unwrap().mode, libc::S_IFREG | 0o644);
        if i % 1000 == 0 {
            most = most.max(stat(&fs, "icache.entries"));
        }
    }
    let bytes = stat(&fs, "icache.bytes");
    for f in &inos {
        fs.inodes().forget(*f, 2);
    }
    assert_eq!(stat(&fs, "icache.lookup_refs"), 10, "the directories' references are left");
    unmount_clean(&fs, dev.as_ref(), "after holding many inodes");
    (most, refs, bytes)
}

#[test]
fn the_inode_cache_stays_within_its_budget_while_the_kernel_holds_50000_inodes() {
    // Room for about 1,000 inodes.
    let budget = 1000 * INODE_BYTES;
    let opts = MountOptions { inode_cache_bytes: budget, ..Default::default() };
    let (most, refs, bytes) = hold_many(opts, 50_000);
    assert_eq!(refs, 50_010);
    // Only inodes in flight are pinned beyond the budget.
    assert!(most <= 1000 + 16, "{most} in-core inodes for a budget of 1,000");
    assert!(bytes <= (budget + 16 * INODE_BYTES) as u64, "{bytes} bytes for a budget of {budget}");
}

#[test]
fn lru_caches_0_keeps_every_inode_the_kernel_holds() {
    let opts = MountOptions { inode_cache_bytes: 1000 * INODE_BYTES, lru_caches: false, ..Default::default() };
    let (most, refs, _) = hold_many(opts, 5000);
    assert_eq!(refs, 5010);
    assert!(most >= 5000, "{most} in-core inodes: lru_caches=0 must keep them all");
}

/// An inode dropped from the cache after a change that is not committed yet
/// and read back must still make `fdatasync` commit (its `stored_seq` is not
/// in its buffer: the cache carries it over).
#[test]
fn fdatasync_of_an_inode_read_back_before_its_commit_still_commits() {
    let dev = new_image(64);
    let opts = MountOptions { commit_interval: std::time::Duration::from_secs(3600), ..tiny(50, 50) };
    let fs = mount_with(&dev, opts);
    let c = Ctx::root();
    let f = fs.names().mknod(&c, 1, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.inodes().forget(f, 1);
    fs.files().sync_fs().unwrap();
    let set = SetAttr { mode: Some(0o600), ..Default::default() };
    fs.files().setattr(&c, f, &set).unwrap();
    // Far more inodes than fit: it is dropped from the cache.
    let before = stat(&fs, "icache.reclaimed");
    for i in 0..2000 {
        let x = fs.names().mknod(&c, 1, format!("x{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.inodes().forget(x, 1);
    }
    assert!(stat(&fs, "icache.reclaimed") > before + 1000);
    let commits = stat(&fs, "journal.commits");
    let flush_only = stat(&fs, "overwrite.datasync_flush_only");
    fs.files().fsync(f, true).unwrap();
    assert_eq!(stat(&fs, "overwrite.datasync_flush_only"), flush_only, "fdatasync only flushed");
    assert!(stat(&fs, "journal.commits") > commits, "fdatasync did not commit the mode change");
    fs.unmount().unwrap();
}

/// A measurement, not a check: the RSS an in-core inode costs, for
/// `INODE_BASE_BYTES`. Run once per mode, each in its own process (freed
/// memory is reused within one):
/// `CAIRN_RSS_LRU=0 cargo test -p cairn-core --test it rss_per -- --ignored --nocapture`,
/// then with `CAIRN_RSS_LRU=1`; the difference of the two per-file figures
/// is what a cached inode costs beyond its lookup reference.
#[test]
#[ignore = "measurement: run by hand"]
fn rss_per_in_core_inode() {
    fn rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let l = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        l.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
    let lru = std::env::var("CAIRN_RSS_LRU").map_or(true, |v| v == "1");
    let dev = new_image_with(1024, &MkfsOptions { bytes_per_inode: 4096, ..Default::default() });
    let opts = MountOptions { lru_caches: lru, ..tiny(100, 100) };
    let fs = mount_with(&dev, opts);
    let c = Ctx::root();
    let dirs: Vec<u64> =
        (0..10).map(|i| fs.names().mkdir(&c, 1, format!("d{i}").as_bytes(), 0o755).unwrap().ino).collect();
    let n = 200_000u64;
    let before = rss_kib();
    for i in 0..n {
        fs.names().mknod(&c, dirs[(i % 10) as usize], format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    let after = rss_kib();
    println!(
        "lru_caches={}: {} files, RSS +{} KiB = {} bytes per file; icache.entries {}, icache.bytes {}",
        u8::from(lru),
        n,
        after - before,
        (after - before) * 1024 / n,
        stat(&fs, "icache.entries"),
        stat(&fs, "icache.bytes")
    );
    fs.unmount().unwrap();
}
