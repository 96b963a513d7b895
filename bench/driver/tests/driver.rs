//! The benchmark driver's tools as bench/ uses them. `fragment` and `dd` as
//! bench/mballoc does: the fragmented image has exactly the free space
//! the pattern predicts (checked group by group with the format crate, not
//! with the tool's own code), it stays mountable and writable, fsck sees the
//! marked blocks as leaked, and images that are in use, not clean, or whose
//! journal needs replay are refused untouched. `fsmark` makes, walks and
//! removes exactly what it reports. Images are made and checked with the
//! engine's mkfs and cairn-fsck, as libraries.

use cairn_format::bitmap::{bit, synth_block_bitmap};
use cairn_format::checksum::crc;
use cairn_format::group_desc::{gd_loc, GroupDesc, GD_BLOCK_UNINIT, GD_SIZE};
use cairn_format::journal::{body_crc_append, body_seed, encode_commit, encode_descriptor};
use cairn_format::journal::{JournalRegion, JournalSuper};
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_CLEAN};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn-bench-driver")).args(args).output().expect("run cairn-bench-driver")
}

/// `cairn mkfs IMAGE --size SIZE [--group-size GROUP]` (4 KiB blocks).
fn mkfs(img: &Path, size: u64, group: Option<u64>) {
    std::fs::File::create(img).unwrap();
    let mut dev = cairn_core::dev::FileDevice::open(img, false).unwrap();
    dev.set_len(size).unwrap();
    let opts =
        cairn_core::mkfs::MkfsOptions { blocks_per_group: group.map(|g| (g / 4096) as u32), ..Default::default() };
    cairn_core::mkfs::format(&dev, &opts, &mut |_, _| ()).unwrap();
    cairn_core::mkfs::create_lost_found(Arc::new(dev)).unwrap();
}

/// `cairn fsck IMAGE`: its exit code and report.
fn fsck(img: &Path) -> (i32, String) {
    let mut out = Vec::new();
    let code = cairn_fsck::run(img, &cairn_fsck::Options::default(), &mut out);
    (code, String::from_utf8_lossy(&out).into_owned())
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A 64 MiB image of 4 MiB groups (16 groups, 1024 blocks each).
fn small_image(dir: &Path) -> std::path::PathBuf {
    let img = dir.join("f.img");
    mkfs(&img, 64 << 20, Some(4 << 20));
    img
}

fn superblock(img: &Path) -> Superblock {
    let b = std::fs::read(img).unwrap();
    Superblock::decode(&b[..SB_SIZE], b.len() as u64).unwrap()
}

fn write_superblock(img: &Path, sb: &Superblock) {
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    let mut head = vec![0u8; SB_SIZE];
    sb.encode(&mut head);
    f.write_all_at(&head, 0).unwrap();
}

/// Every group's (descriptor, block bitmap as the format defines it).
fn groups(img: &Path) -> (Geometry, Vec<(GroupDesc, Vec<u8>)>) {
    let b = std::fs::read(img).unwrap();
    let sb = Superblock::decode(&b[..SB_SIZE], b.len() as u64).unwrap();
    let geo = Geometry::new(&sb).unwrap();
    let seed = sb.csum_seed();
    let bs = geo.block_size as usize;
    let gs = (0..geo.group_count)
        .map(|g| {
            let (blk, off) = gd_loc(sb.gdt_start, geo.block_size, g);
            let at = blk as usize * bs + off;
            let gd = GroupDesc::decode(seed, g, &b[at..at + GD_SIZE]).expect("descriptor checksum");
            let map = if gd.flags & GD_BLOCK_UNINIT != 0 {
                synth_block_bitmap(&geo, g)
            } else {
                let m = b[gd.block_bitmap as usize * bs..][..bs].to_vec();
                assert_eq!(crc(seed, &m), gd.block_bitmap_csum, "group {g}: bitmap checksum");
                m
            };
            (gd, map)
        })
        .collect();
    (geo, gs)
}

/// Checks that every group holds `before`'s used blocks plus the pattern
/// (`used`/`period` in blocks), and nothing else; returns the free total.
fn check_pattern(img: &Path, before: &[(GroupDesc, Vec<u8>)], used: u64, period: u64) -> u64 {
    let (geo, after) = groups(img);
    let mut free_total = 0;
    for (g, ((_, old), (gd, new))) in before.iter().zip(&after).enumerate() {
        let g = g as u64;
        assert_eq!(gd.flags & GD_BLOCK_UNINIT, 0, "group {g} still uninit");
        let mut free = 0;
        let mut run = 0;
        for o in 0..geo.group_len(g) {
            let want = bit(old, o) || o % period >= period - used;
            assert_eq!(bit(new, o), want, "group {g} block {o}");
            if want {
                run = 0;
            } else {
                free += 1;
                run += 1;
                assert!(run < period, "group {g}: a free run of {run} blocks at {o}");
            }
        }
        assert_eq!(u64::from(gd.free_blocks), free, "group {g}: free count");
        free_total += free;
    }
    let sb = superblock(img);
    assert_eq!(sb.free_blocks, free_total, "superblock free count");
    assert_ne!(sb.state & STATE_CLEAN, 0, "the image is clean after fragmenting");
    free_total
}

/// Runs a driver tool that prints JSON, checks that it succeeded and
/// that its stderr holds each of `said`, and returns the JSON.
fn tool_json(args: &[&str], extra: &[&str], said: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = args.iter().chain(extra).copied().collect();
    let o = run(&args);
    assert!(o.status.success(), "{}: {}", args[0], text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(said.iter().all(|s| err.contains(s)), "{err}");
    serde_json::from_slice(&o.stdout).expect("the tool prints JSON")
}

fn dd(img: &Path, name: &str, count: &str, extra: &[&str]) -> serde_json::Value {
    let args = ["dd", p(img), "--path", name, "--bs", "2M", "--count", count];
    tool_json(&args, extra, &["run 1: ", "useless_loops"])
}

#[test]
fn fragment_leaves_exactly_the_pattern_free_and_the_image_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_image(dir.path());
    // Something in use first: the pattern adds to it.
    let v = dd(&img, "before", "3", &["--fsync"]);
    assert_eq!(v["runs"][0]["bytes"].as_u64(), Some(6 << 20), "{v}");
    let (_, before) = groups(&img);

    let o = run(&["fragment", p(&img)]);
    assert!(o.status.success(), "fragment: {}", text(&o));
    assert!(text(&o).contains(" groups fragmented"), "{}", text(&o));
    let free = check_pattern(&img, &before, 256, 512);
    assert!(free > 4000, "about half the space stays free: {free} blocks");

    // A second pass changes nothing: the pattern is already there.
    let o = run(&["fragment", p(&img)]);
    assert!(o.status.success(), "second fragment: {}", text(&o));
    assert!(text(&o).contains("0 groups fragmented"), "{}", text(&o));
    let before = groups(&img).1;
    assert_eq!(check_pattern(&img, &before, 256, 512), free);

    // fsck: the marked blocks are owned by nothing (that is the point).
    let (code, said) = fsck(&img);
    assert_eq!(code, 4, "{said}");
    assert!(said.contains("nothing owns"), "{said}");

    // The engine mounts it, writes 2 MiB writes into the 1 MiB holes, and
    // leaves it clean; both mount-option values are accepted.
    for opt in ["mb_optimize_scan=0", "mb_optimize_scan=1"] {
        let v = dd(&img, "file", "4", &["--fsync", "--repeat", "2", "-o", opt]);
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{v}");
        assert!(runs.iter().all(|r| r["bytes"].as_u64() == Some(8 << 20) && r["seconds"].as_f64().unwrap() > 0.0));
        assert!(v["alloc"]["alloc.blocks_allocated"].as_u64().unwrap() >= 2 * 2048, "{v}");
        assert!(v["mount_seconds"].as_f64().is_some() && v["unmount_seconds"].as_f64().is_some(), "{v}");
        assert_ne!(superblock(&img).state & STATE_CLEAN, 0, "clean after dd");
    }
}

#[test]
fn fragment_takes_other_patterns_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_image(dir.path());
    let (_, before) = groups(&img);
    let pristine = std::fs::read(&img).unwrap();
    for (used, period) in [("2M", "2M"), ("0", "1M"), ("6K", "64K"), ("1M", "x")] {
        let o = run(&["fragment", p(&img), "--used", used, "--period", period]);
        assert_eq!(o.status.code(), Some(1), "--used {used} --period {period}: {}", text(&o));
    }
    assert!(std::fs::read(&img).unwrap() == pristine, "a refused fragment changed the image");
    let o = run(&["fragment", p(&img), "--used", "12K", "--period", "64K"]);
    assert!(o.status.success(), "{}", text(&o));
    check_pattern(&img, &before, 3, 16);
}

#[test]
fn fragment_refuses_images_in_use_unclean_or_needing_replay() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_image(dir.path());
    let pristine = std::fs::read(&img).unwrap();
    let unchanged = |what: &str| assert!(std::fs::read(&img).unwrap() == pristine, "{what}: image changed");

    // In use: someone holds the lock a mount holds.
    let f = std::fs::File::open(&img).unwrap();
    // SAFETY: flock on a valid, owned descriptor has no memory effects.
    #[allow(unsafe_code)]
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(r, 0);
    let o = run(&["fragment", p(&img)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("in use"), "{}", text(&o));
    let o = run(&["dd", p(&img), "--path", "x", "--bs", "4K", "--count", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("in use"), "{}", text(&o));
    drop(f);
    unchanged("in use");

    // Not cleanly unmounted.
    let mut sb = superblock(&img);
    sb.state &= !STATE_CLEAN;
    write_superblock(&img, &sb);
    let dirty = std::fs::read(&img).unwrap();
    let o = run(&["fragment", p(&img)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("not cleanly unmounted"), "{}", text(&o));
    assert!(std::fs::read(&img).unwrap() == dirty, "unclean: image changed");
    sb.state |= STATE_CLEAN;
    write_superblock(&img, &sb);
    unchanged("restored");

    // Marked clean, but the journal holds a committed record (descriptor,
    // one image of block 0, commit) at its tail.
    let seed = sb.csum_seed();
    let region = JournalRegion::of(&sb);
    let bs = sb.block_size() as usize;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    let mut jb = vec![0u8; bs];
    file.read_exact_at(&mut jb, region.start * bs as u64).unwrap();
    let jsb = JournalSuper::decode(seed, region.start, &jb, region.blocks).unwrap();
    let mut desc = vec![0u8; bs];
    encode_descriptor(seed, jsb.tail_seq, &[0], &mut desc);
    let image0 = pristine[..bs].to_vec();
    let body = body_crc_append(body_crc_append(body_seed(seed, jsb.tail_seq), &desc), &image0);
    let mut commit = vec![0u8; bs];
    encode_commit(seed, jsb.tail_seq, 3, body, &mut commit);
    let mut off = jsb.tail_off;
    for b in [&desc, &image0, &commit] {
        file.write_all_at(b, region.block_of(off) * bs as u64).unwrap();
        off = region.next(off, 1);
    }
    let with_log = std::fs::read(&img).unwrap();
    let o = run(&["fragment", p(&img)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("need replay"), "{}", text(&o));
    assert!(std::fs::read(&img).unwrap() == with_log, "needs replay: image changed");
    // fsck agrees that it merely needs replay (the record is well formed).
    let (code, said) = fsck(&img);
    assert_eq!(code, 0, "{said}");

    // Not a cairn image at all.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 1 << 20]).unwrap();
    let o = run(&["fragment", p(&junk)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("not a cairn file system"), "{}", text(&o));
    assert_eq!(std::fs::metadata(&junk).unwrap().size(), 1 << 20);
}

fn fsmark(img: &Path, extra: &[&str]) -> serde_json::Value {
    let args = ["fsmark", p(img), "--files", "3001", "--threads", "3", "--dirs", "7"];
    tool_json(&args, extra, &["create: 3001 files", "walk: "])
}

/// `fsmark` (seed 001 through the engine): what it says it
/// created is what an independent fsck finds on the image, the cold walk
/// sees every file and directory, and the unlink phase leaves an empty,
/// clean file system.
#[test]
fn fsmark_creates_walks_and_removes_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("m.img");
    mkfs(&img, 256 << 20, None);

    let v = fsmark(&img, &["--keep", "--rows", "5"]);
    assert_eq!(v["create"]["files"].as_u64(), Some(3001), "{v}");
    let rows = v["create"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{v}");
    assert_eq!(rows.last().unwrap()["files"].as_u64(), Some(3000), "{v}");
    assert_eq!(v["walk"]["files"].as_u64(), Some(3001), "{v}");
    // The tree fsmark made, and mkfs's /lost+found.
    assert_eq!(v["walk"]["dirs"].as_u64(), Some(3 + 3 * 7 + 1), "{v}");
    assert!(v["unlink"].is_null(), "--keep skips the unlink phase: {v}");
    assert!(v["journal_bytes_per_file"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["image_bytes_per_file"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["walk"]["io"]["reads"].as_u64().unwrap() > 0, "a cold walk reads the image: {v}");
    assert!(v["create"]["peak_rss_kib"].as_u64().unwrap() > 0, "{v}");
    let (code, said) = fsck(&img);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("(26 directories, 3,001 files,"), "{said}");

    // Again from scratch, unlink phase included: everything goes.
    mkfs(&img, 256 << 20, None);
    let v = fsmark(&img, &["--per-dir", "10"]);
    assert_eq!(v["walk"]["files"].as_u64(), Some(3001), "{v}");
    assert_eq!(v["unlink"]["files"].as_u64(), Some(3001), "{v}");
    assert!(v["unlink"]["journal_bytes"].as_u64().unwrap() > 0, "{v}");
    let (code, said) = fsck(&img);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("(2 directories, 0 files,"), "{said}");
    assert_ne!(superblock(&img).state & STATE_CLEAN, 0, "clean after fsmark");
}

/// `nullfs`, the FUSE floor, through a real mount: files and directories
/// come and go as in a file system (create, write, read of zeros up to the
/// size, rename, symlink, rm -rf), a refused operation says why, extended
/// attributes are kept as given, the request counters are readable while
/// mounted (the root's `user.nullfs.counters`) and written at unmount.
#[test]
fn nullfs_serves_a_tree_and_counts_its_requests() {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: mounting needs root and /dev/fuse");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let counters = dir.path().join("counters.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn-bench-driver"))
        .args(["nullfs", p(&mp), "--counters", p(&counters)])
        .spawn()
        .unwrap();
    let mounted = || std::fs::read_to_string("/proc/self/mounts").unwrap().contains(&format!(" {} ", mp.display()));
    for _ in 0..100 {
        if mounted() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(mounted(), "nullfs did not mount");
    let body = || -> std::io::Result<()> {
        std::fs::create_dir_all(mp.join("a/b"))?;
        for i in 0..50 {
            std::fs::write(mp.join(format!("a/b/f{i}")), b"hello")?;
        }
        assert_eq!(std::fs::read_dir(mp.join("a/b"))?.count(), 50);
        // Bytes written stay in the kernel's page cache; a size set
        // without writing is read from the server: zeros.
        std::fs::File::create(mp.join("sized"))?.set_len(10_000)?;
        assert_eq!(std::fs::read(mp.join("sized"))?, vec![0u8; 10_000], "reads answer zeros up to the size");
        std::fs::remove_file(mp.join("sized"))?;
        // Extended attributes are kept, in memory, as given.
        let f0 = mp.join("a/b/f0");
        set_xattr(&f0, "user.a", &[7u8; 200]);
        set_xattr(&f0, "user.b", b"x");
        assert_eq!(xattr_of(&f0, "user.a"), vec![7u8; 200]);
        set_xattr(&f0, "user.a", b"again");
        assert_eq!(xattr_of(&f0, "user.a"), b"again");
        assert_eq!(xattr_of(&f0, "user.b"), b"x");
        std::fs::rename(mp.join("a/b/f1"), mp.join("a/moved"))?;
        assert!(mp.join("a/moved").exists() && !mp.join("a/b/f1").exists());
        std::os::unix::fs::symlink("target", mp.join("s"))?;
        assert_eq!(std::fs::read_link(mp.join("s"))?, Path::new("target"));
        let e = std::fs::remove_dir(mp.join("a")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
        let live: serde_json::Value =
            serde_json::from_slice(&xattr_of(&mp, "user.nullfs.counters")).expect("counters as JSON");
        // Files are made with MKNOD (`mknod_create`, cairn's default): CREATE
        // is answered ENOSYS once.
        let made = |op: &str| live[format!("fuse.{op}.requests")].as_u64().unwrap_or(0);
        assert!(made("create") + made("mknod") >= 50, "{live}");
        assert!(made("mknod") >= 49, "files were not made with MKNOD: {live}");
        std::fs::remove_dir_all(mp.join("a"))?;
        assert_eq!(std::fs::read_dir(&mp)?.count(), 1);
        Ok(())
    };
    // Unmounted whatever the checks found (a panic included), so that no
    // server is left behind.
    let r = std::panic::catch_unwind(body);
    let _ = Command::new("umount").arg(&mp).status();
    let status = child.wait().unwrap();
    match r {
        Ok(r) => r.unwrap(),
        Err(p) => std::panic::resume_unwind(p),
    }
    assert!(status.success(), "nullfs exited {status}");
    let done: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&counters).unwrap()).unwrap();
    assert!(done["fuse.unlink.requests"].as_u64().unwrap() >= 49, "{done}");
}

/// Sets extended attribute `name` of `path` to `value`.
fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let c_name = std::ffi::CString::new(name).unwrap();
    // SAFETY: both strings are NUL-terminated and live; the value is as long as said.
    #[allow(unsafe_code)]
    let r = unsafe { libc::setxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {name}: {}", std::io::Error::last_os_error());
}

/// The value of extended attribute `name` of `path`.
fn xattr_of(path: &Path, name: &str) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let c_name = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: both strings are NUL-terminated and live; the buffer is as long as said.
    #[allow(unsafe_code)]
    let n = unsafe { libc::getxattr(c_path.as_ptr(), c_name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "getxattr {name}: {}", std::io::Error::last_os_error());
    buf.truncate(n as usize);
    buf
}
