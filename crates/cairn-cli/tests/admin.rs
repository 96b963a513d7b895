//! An administrator's commands against a live mount: `cairn mkfs --force`
//! of the mounted image is refused before anything changes, and
//! `mount -o remount,ro|rw` (which mount(8)'s helper hands to
//! `cairn mount ... -o remount,...`) does what it says or refuses with a
//! reason (xfstests generic/294, 306 remount their scratch file system).

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The per-mount options of the mount at `mp` (mountinfo's sixth field).
fn mount_flags(mp: &Path) -> String {
    let want = std::fs::canonicalize(mp).unwrap();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = table.lines().rev().find(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap())).expect("mounted");
    line.split(' ').nth(5).unwrap().to_string()
}

/// What mount(8) passes the helper for `mount -o remount,OPT MP`: the
/// mount table's options with the new one first.
fn remount(img: &Path, mp: &Path, opt: &str) -> std::process::Output {
    let merged = format!("{opt},nosuid,nodev,relatime,remount,user_id=0,group_id=0,default_permissions");
    run(&["mount", p(img), p(mp), "-o", &merged])
}

#[test]
fn mkfs_of_a_mounted_image_is_refused_before_anything_changes() {
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("m.img", "256M");
    let (img, mp) = (dir.path().join("m.img"), dir.path().join("mnt"));
    write_synced(&mp.join("f"), &vec![7u8; 1 << 20]);
    for size in ["512M", "128M"] {
        let o = run(&["mkfs", p(&img), "--force", "--size", size, "--quiet"]);
        assert_eq!(o.status.code(), Some(1), "mkfs --size {size} of a mounted image: {}", stderr(&o));
        assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
        assert_eq!(std::fs::metadata(&img).unwrap().len(), 256 << 20, "a refused mkfs --size {size} resized the image");
    }
    assert_eq!(std::fs::read(mp.join("f")).unwrap(), vec![7u8; 1 << 20]);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck after the refused mkfs");
}

#[test]
fn remount_read_only_commits_and_back_to_read_write() {
    if !can_mount() {
        return;
    }
    // A plain fuse mount: the kernel sends it no FUSE_SYNCFS, so only cairn's
    // own commit makes the file durable before the kill below.
    let (dir, _g, pid) = fresh_mount_with("r.img", "64M", &["-o", "nofuseblk"]);
    let (img, mp) = (dir.path().join("r.img"), dir.path().join("mnt"));
    std::fs::write(mp.join("before"), b"written before remount,ro").unwrap();
    let o = remount(&img, &mp, "ro");
    assert!(o.status.success(), "remount,ro: {}", stderr(&o));
    assert!(mount_flags(&mp).starts_with("ro,"), "{}", mount_flags(&mp));
    let e = std::fs::write(mp.join("after"), b"x").expect_err("a write to a read-only remount");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    // generic/294: creating what exists is EEXIST, not EROFS.
    let e = std::fs::create_dir(mp.join("before")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    // Back to read-write: writes work again.
    let o = remount(&img, &mp, "rw");
    assert!(o.status.success(), "remount,rw: {}", stderr(&o));
    assert!(mount_flags(&mp).starts_with("rw,"), "{}", mount_flags(&mp));
    std::fs::write(mp.join("after"), b"x").unwrap();
    let o = remount(&img, &mp, "ro");
    assert!(o.status.success(), "remount,ro: {}", stderr(&o));
    // The journal was committed by the remount: a killed daemon loses nothing.
    Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    wait_gone(pid, Duration::from_secs(30), "after SIGKILL");
    let _ = Command::new("umount").arg(&mp).status();
    let pid = mount(&img, &mp, &[], "mount after the kill");
    assert_eq!(std::fs::read(mp.join("before")).unwrap(), b"written before remount,ro");
    assert_eq!(std::fs::read(mp.join("after")).unwrap(), b"x");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");
}

#[test]
fn a_read_only_mount_turns_read_write_or_says_why_not() {
    if !can_mount() {
        return;
    }
    let Scratch { dir, img, mp } = scratch("o.img");
    mkfs(&img, "64M");
    let _g = Guard(mp.clone());
    let pid = mount(&img, &mp, &["-o", "ro"], "mount -o ro");
    // A bare mount(2) past the helper flips the kernel's flag and returns 0;
    // the daemon, still read-only, sets it back.
    let o = Command::new("mount").args(["-i", "-o", "remount,rw", p(&mp)]).output().unwrap();
    assert!(o.status.success(), "mount -i -o remount,rw: {}", stderr(&o));
    let t0 = std::time::Instant::now();
    while !mount_flags(&mp).starts_with("ro,") {
        assert!(t0.elapsed() < Duration::from_secs(10), "still {} after a bare remount,rw", mount_flags(&mp));
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = std::fs::write(mp.join("x"), b"x").expect_err("a write to an -o ro mount");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    // Unknown options and what is not a cairn mount are refused.
    let o = run(&["mount", p(&img), p(&mp), "-o", "remount,ro,bogus"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bogus"), "{}", stderr(&o));
    let o = run(&["mount", p(&img), p(dir.path()), "-o", "remount,ro"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not mounted") || stderr(&o).contains("not a cairn"), "{}", stderr(&o));
    // An image that cannot be opened for writing (immutable: even root's
    // open for writing fails) keeps the mount read-only, with the reason.
    if Command::new("chattr").args(["+i", p(&img)]).status().is_ok_and(|s| s.success()) {
        let o = remount(&img, &mp, "rw");
        let _ = Command::new("chattr").args(["-i", p(&img)]).status();
        assert_eq!(o.status.code(), Some(1), "remount,rw of an immutable image succeeded");
        assert!(stderr(&o).contains("stays read-only") && stderr(&o).contains("not permitted"), "{}", stderr(&o));
        assert!(mount_flags(&mp).starts_with("ro,"), "{}", mount_flags(&mp));
    }
    // Read-write, as asked (xfstests generic/417): writes work and last.
    let o = remount(&img, &mp, "rw");
    assert!(o.status.success(), "remount,rw of an -o ro mount: {}", stderr(&o));
    assert!(mount_flags(&mp).starts_with("rw,"), "{}", mount_flags(&mp));
    write_synced(&mp.join("x"), b"written after remount,rw");
    // The guard is gone: the flag stays rw.
    std::thread::sleep(Duration::from_millis(300));
    assert!(mount_flags(&mp).starts_with("rw,"), "{}", mount_flags(&mp));
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck after a read-only mount turned read-write");
    let pid = mount(&img, &mp, &["-o", "ro"], "mount -o ro");
    assert_eq!(std::fs::read(mp.join("x")).unwrap(), b"written after remount,rw");
    unmount(&mp, pid);
}

#[test]
fn mkfs_size_on_a_block_device_takes_only_that_much() {
    // xfstests' _scratch_mkfs_sized: `cairn mkfs --size 512M /dev/loopN`
    // of a 2 GiB device must make a 512 MiB file system, not a 2 GiB one.
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("dev.img");
    std::fs::File::create(&backing).unwrap().set_len(2 << 30).unwrap();
    let o = std::process::Command::new("losetup").args(["-f", "--show", p(&backing)]).output().unwrap();
    assert!(o.status.success(), "losetup: {}", stderr(&o));
    let dev = stdout(&o).trim().to_string();
    let o = run(&["mkfs", "--force", "-q", "--size", "512M", &dev]);
    let f = run(&["fsck", &dev]);
    let _ = std::process::Command::new("losetup").args(["-d", &dev]).status();
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    assert!(f.status.success(), "fsck: {}{}", stdout(&f), stderr(&f));
    assert!(stdout(&f).contains("blocks used of 131,072"), "a 512 MiB file system: {}", stdout(&f));
}

#[test]
fn the_log_file_is_plain_text_and_a_clean_unmount_logs_no_warning() {
    if !can_mount() {
        return;
    }
    let logdir = tempfile::tempdir().unwrap();
    let log = logdir.path().join("cairn.log");
    for transport in [&["--log", p(&log)][..], &["--log", p(&log), "-o", "nofuseblk"][..]] {
        let (dir, _g, pid) = fresh_mount_with("l.img", "64M", transport);
        let mp = dir.path().join("mnt");
        std::fs::write(mp.join("f"), b"x").unwrap();
        unmount(&mp, pid);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("unmounted; image is clean"), "{text}");
    assert!(!text.contains('\u{1b}'), "ANSI escapes in the log file:\n{text}");
    assert!(!text.contains("WARN"), "a warning in the log of two clean mounts:\n{text}");
}

/// `cairn tune`: a new label and UUID on an unmounted image (as tune2fs -L
/// / -U), the files intact and fsck clean afterwards (the checksum seed is
/// kept, no block is rewritten); a mounted image, an image a crash left
/// unclean, a bad UUID and a long label are refused and change nothing.
#[test]
fn tune_renames_an_unmounted_file_system_and_refuses_what_it_must() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("t.img", "256M");
    let (img, mp) = (dir.path().join("t.img"), g.0.clone());
    std::fs::write(mp.join("f"), b"kept").unwrap();
    let o = run(&["tune", p(&img), "--label", "busy"]);
    assert_eq!(o.status.code(), Some(1), "tune of a mounted image: {}", stdout(&o));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    unmount(&mp, pid);
    let before = stdout(&run(&["tune", p(&img)]));
    assert!(before.starts_with("label: \nuuid:  "), "{before}");

    let o = run(&["tune", p(&img), "-L", "data disk", "-U", "01234567-89ab-cdef-0123-456789abcdef"]);
    assert!(o.status.success(), "tune: {}", stderr(&o));
    assert!(
        stdout(&o).starts_with("label: data disk\nuuid:  01234567-89ab-cdef-0123-456789abcdef\n"),
        "{}",
        stdout(&o)
    );
    assert_fsck_clean(&img, "after a new label and UUID");
    let o = run(&["tune", p(&img), "--uuid", "random"]);
    assert!(o.status.success(), "tune: {}", stderr(&o));
    assert!(!stdout(&o).contains("01234567-89ab"), "{}", stdout(&o));
    assert_fsck_clean(&img, "after a second UUID");
    let named = stdout(&run(&["tune", p(&img)]));
    let long = format!("commit={}", "1".repeat(70));
    for bad in [
        &["-U", "0123"][..],
        &["-U", "not-a-uuid-at-all-not-a-uuid-at-all"],
        &["-L", &"x".repeat(33)],
        &["-o", "no_such_option"],
        &["-o", &long],
        &["-e", "explode"],
    ] {
        let o = run(&[&["tune", p(&img)], bad].concat());
        assert_eq!(o.status.code(), Some(1), "tune {bad:?} was accepted: {}", stdout(&o));
        assert_eq!(stdout(&run(&["tune", p(&img)])), named, "a refused tune {bad:?} changed the names");
    }

    // Default mount options: a mount starts from them, its own -o wins.
    let o = run(&["tune", p(&img), "-o", "ro,commit=10", "-e", "continue"]);
    assert!(o.status.success() && stdout(&o).contains("mount options: ro,commit=10"), "{}", stderr(&o));
    let pid = mount(&img, &mp, &[], "mount with default options");
    assert!(mount_flags(&mp).starts_with("ro"), "the default ro was not applied: {}", mount_flags(&mp));
    assert_eq!(std::fs::read(mp.join("f")).unwrap(), b"kept");
    unmount(&mp, pid);
    // Mounts with its new names, files as they were; then a crash.
    let pid = mount(&img, &mp, &["-o", "rw"], "mount after tune");
    assert!(mount_flags(&mp).starts_with("rw"), "-o rw did not win over the default: {}", mount_flags(&mp));
    std::fs::write(mp.join("g"), b"new").unwrap();
    Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    wait_gone(pid, Duration::from_secs(10), "after kill -9");
    let _ = Command::new("umount").arg("-l").arg(&mp).status();
    let o = run(&["tune", p(&img), "-L", "after crash"]);
    assert_eq!(o.status.code(), Some(1), "tune of an unclean image: {}", stdout(&o));
    assert!(stderr(&o).contains("not cleanly unmounted"), "{}", stderr(&o));
    let pid = mount(&img, &mp, &["-o", "rw"], "mount after the crash");
    unmount(&mp, pid);
    let o = run(&["tune", p(&img), "-L", "after crash"]);
    assert!(o.status.success(), "tune after replay: {}", stderr(&o));
    assert_fsck_clean(&img, "after the last tune");
}

/// `cairn inspect`: the superblock, groups, a directory, an inode and a
/// file's bytes of an unmounted image, read without changing it; after a
/// crash the journal's records are listed and reading files is refused
/// with the way out; a mounted image and a foreign file are refused.
#[test]
fn inspect_shows_an_unmounted_image_and_changes_nothing() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("i.img", "256M");
    let (img, mp) = (dir.path().join("i.img"), g.0.clone());
    std::fs::create_dir_all(mp.join("d/e")).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(mp.join("d/e/f"), &data).unwrap();
    let o = run(&["inspect", p(&img), "super"]);
    assert_eq!(o.status.code(), Some(1), "inspect of a mounted image: {}", stdout(&o));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    unmount(&mp, pid);
    let before = std::fs::read(&img).unwrap();
    let inspect = |args: &[&str]| {
        let o = run(&[&["inspect", p(&img)], args].concat());
        assert!(o.status.success(), "inspect {args:?}: {}", stderr(&o));
        o.stdout
    };
    let sup = String::from_utf8(inspect(&["super"])).unwrap();
    assert!(sup.contains("state                clean") && sup.contains("block size           4096"), "{sup}");
    let groups = String::from_utf8(inspect(&["groups"])).unwrap();
    assert_eq!(groups.lines().count(), 3, "a header and two groups of 128 MiB: {groups}");
    let ls = String::from_utf8(inspect(&["ls", "/d/e"])).unwrap();
    let f_line = ls.lines().find(|l| l.ends_with(" f")).unwrap_or_else(|| panic!("{ls}"));
    let ino: u64 = f_line.split_whitespace().next().unwrap().parse().unwrap();
    let stat = String::from_utf8(inspect(&["stat", &format!("#{ino}")])).unwrap();
    assert!(stat.contains(&format!("inode {ino} ")) && stat.contains("size 300000"), "{stat}");
    assert_eq!(inspect(&["cat", "/d/e/f"]), data);
    let journal = String::from_utf8(inspect(&["journal"])).unwrap();
    assert!(journal.contains("0 record(s) nothing to replay"), "{journal}");
    for bad in [&["stat", "/d/nope"][..], &["stat", "relative"], &["stat", "#99999999"], &["cat", "/d"]] {
        let o = run(&[&["inspect", p(&img)], bad].concat());
        assert_eq!(o.status.code(), Some(1), "inspect {bad:?} succeeded: {}", stdout(&o));
    }
    assert!(std::fs::read(&img).unwrap() == before, "inspect changed the image");

    // A crash leaves records to replay: listed, and files are not read.
    let pid = mount(&img, &mp, &[], "mount");
    std::fs::write(mp.join("late"), b"x").unwrap();
    assert!(sh(&format!("sync -f {}", p(&mp))).status.success());
    Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    wait_gone(pid, Duration::from_secs(10), "after kill -9");
    let _ = Command::new("umount").arg("-l").arg(&mp).status();
    let journal = String::from_utf8(inspect(&["journal"])).unwrap();
    assert!(journal.contains("the next mount replays them") && journal.contains("record "), "{journal}");
    let o = run(&["inspect", p(&img), "ls"]);
    assert_eq!(o.status.code(), Some(1), "ls of an image that needs replay: {}", stdout(&o));
    assert!(stderr(&o).contains("journal"), "{}", stderr(&o));
    let foreign = dir.path().join("foreign");
    std::fs::write(&foreign, vec![0u8; 1 << 20]).unwrap();
    let o = run(&["inspect", p(&foreign), "super"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!stderr(&o).is_empty());
}

/// Tests that bind /dev/log, or need it absent, take turns.
static DEV_LOG: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Without syslog (nothing on /dev/log) a background daemon logs to
/// /var/log/cairn/IMAGE.log (issue 51: its messages were dropped), and
/// `-o log=FILE` names a file as `--log` does (an fstab line can).
#[test]
fn without_syslog_the_daemon_logs_to_a_file_and_o_log_names_one() {
    if !can_mount() {
        return;
    }
    let _one = DEV_LOG.lock().unwrap_or_else(|e| e.into_inner());
    if Path::new("/dev/log").exists() {
        eprintln!("skipped: a syslog daemon owns /dev/log");
        return;
    }
    let name = format!("nosyslog-{}.img", std::process::id());
    let fallback = Path::new("/var/log/cairn").join(format!("{name}.log"));
    let _ = std::fs::remove_file(&fallback);
    let (dir, g, pid) = fresh_mount(&name, "64M");
    unmount(&g.0, pid);
    let text = std::fs::read_to_string(&fallback).unwrap_or_default();
    let _ = std::fs::remove_file(&fallback);
    assert!(text.contains("mounted") && text.contains("unmounted; image is clean"), "{}: {text:?}", fallback.display());
    drop(dir);
    let logdir = tempfile::tempdir().unwrap();
    let log = logdir.path().join("o.log");
    let opt = format!("log={}", log.display());
    let (_dir, g, pid) = fresh_mount_with("o.img", "64M", &["-o", &opt]);
    unmount(&g.0, pid);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("unmounted; image is clean"), "-o log=: {text:?}");
}

/// A background daemon started without `--log` logs to syslog: its mount
/// and unmount reach `/dev/log` as `<PRI>cairn[PID]: ...` datagrams
/// (facility daemon), plain text. Where a syslog daemon owns /dev/log the
/// test cannot listen there and says so.
#[test]
fn a_background_daemon_without_a_log_file_logs_to_syslog() {
    if !can_mount() {
        return;
    }
    let _one = DEV_LOG.lock().unwrap_or_else(|e| e.into_inner());
    let dev_log = Path::new("/dev/log");
    if dev_log.exists() {
        eprintln!("skipped: /dev/log belongs to the system's syslog daemon");
        return;
    }
    struct Unlink<'a>(&'a Path);
    impl Drop for Unlink<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    let sock = std::os::unix::net::UnixDatagram::bind(dev_log).unwrap();
    let _unlink = Unlink(dev_log);
    sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    // Read as a syslog daemon does, all along (the queue holds ten).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 8192];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                }
            }
            got
        })
    };
    let (dir, g, pid) = fresh_mount("s.img", "128M");
    unmount(&g.0, pid);
    let mp = std::fs::canonicalize(dir.path().join("mnt")).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let got = reader.join().unwrap();
    let ours: Vec<&String> = got.iter().filter(|m| m.contains(&format!("cairn[{pid}]: "))).collect();
    let mounted = ours.iter().find(|m| m.contains("mounted") && m.contains(mp.to_str().unwrap()));
    assert!(mounted.is_some_and(|m| m.starts_with("<30>")), "no info-level 'mounted' message from {pid}: {got:?}");
    assert!(ours.iter().any(|m| m.contains("unmounted")), "no 'unmounted' message: {ours:?}");
    assert!(ours.iter().all(|m| !m.contains('\x1b')), "colour codes in syslog: {ours:?}");
}

/// `cairn resize`: an unmounted image grows (the file lengthened, data
/// intact, fsck clean, df shows the new size); a mounted image, shrinking,
/// a size past the descriptor table and a bad size are refused and leave
/// the image file as it was.
#[test]
fn resize_grows_an_unmounted_image_and_refuses_what_it_cannot() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("r.img", "300M");
    let (img, mp) = (dir.path().join("r.img"), g.0.clone());
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(mp.join("data"), &data).unwrap();
    let o = run(&["resize", p(&img), "1G"]);
    assert_eq!(o.status.code(), Some(1), "resize of a mounted image: {}", stdout(&o));
    assert!(stderr(&o).contains("in use") && stderr(&o).contains("mount point"), "{}", stderr(&o));
    unmount(&mp, pid);
    let len = |img: &Path| std::fs::metadata(img).unwrap().len();
    // mkfs reserved descriptor blocks for 1,024 times the groups: 384 GiB.
    for (size, why) in [("100M", "only grows"), ("1T", "at most 384.0 GiB"), ("lots", "")] {
        let o = run(&["resize", p(&img), size]);
        assert_eq!(o.status.code(), Some(1), "resize to {size}: {}", stdout(&o));
        assert!(stderr(&o).contains(why), "resize to {size}: {}", stderr(&o));
        assert_eq!(len(&img), 300 << 20, "a refused resize to {size} changed the image's length");
    }
    let o = run(&["resize", p(&img), "2G"]);
    assert!(o.status.success(), "resize: {}", stderr(&o));
    assert!(stdout(&o).contains("to 2.0 GiB"), "{}", stdout(&o));
    assert_eq!(len(&img), 2 << 30);
    assert_fsck_clean(&img, "after the resize");
    let pid = mount(&img, &mp, &[], "mount");
    assert_eq!(std::fs::read(mp.join("data")).unwrap(), data);
    let df = String::from_utf8_lossy(&sh(&format!("df -B1 --output=size {}", p(&mp))).stdout).into_owned();
    assert!(df.contains(&(2u64 << 30).to_string()), "df after the resize: {df}");
    // Mounted: through the daemon, refusals first, then a grow while a
    // writer runs; df shows it at once.
    for (size, why) in [("1G", "only grows"), ("1T", "at most")] {
        let o = run(&["resize", p(&mp), size]);
        assert_eq!(o.status.code(), Some(1), "mounted resize to {size}: {}", stdout(&o));
        assert!(stderr(&o).contains(why), "mounted resize to {size}: {}", stderr(&o));
    }
    let o = run(&["resize", p(&mp), "2G"]);
    assert!(o.status.success(), "mounted resize to its size: {}", stderr(&o));
    assert!(stdout(&o).contains("already 2.0 GiB; nothing to do"), "{}", stdout(&o));
    let writer = {
        let mp = mp.clone();
        std::thread::spawn(move || {
            for i in 0..50 {
                std::fs::write(mp.join(format!("w{i}")), vec![i as u8; 1 << 20]).unwrap();
            }
        })
    };
    let o = run(&["resize", p(&mp), "3G"]);
    assert!(o.status.success(), "mounted resize: {}", stderr(&o));
    assert!(stdout(&o).contains("to 3.0 GiB") && stdout(&o).contains("while mounted"), "{}", stdout(&o));
    writer.join().unwrap();
    assert_eq!(len(&img), 3 << 30);
    let df = String::from_utf8_lossy(&sh(&format!("df -B1 --output=size {}", p(&mp))).stdout).into_owned();
    assert!(df.contains(&(3u64 << 30).to_string()), "df after the mounted resize: {df}");
    assert_eq!(std::fs::read(mp.join("data")).unwrap(), data);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the mounted resize");
    let pid = mount(&img, &mp, &[], "mount after the mounted resize");
    for i in [0u8, 49] {
        assert_eq!(std::fs::read(mp.join(format!("w{i}"))).unwrap(), vec![i; 1 << 20], "w{i}");
    }
    unmount(&mp, pid);
}
