//! The `cairn` command as a user runs it: exit codes and messages for good
//! and bad input, and (as root, with /dev/fuse) a real mount used with
//! ordinary file operations, a refused second mount, unmount, fsck and
//! remount.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

fn run(args: &[&str]) -> Output {
    cairn().args(args).output().expect("run cairn")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn mkfs(img: &Path, size: &str) {
    let o = run(&["mkfs", p(img), "--size", size, "--quiet"]);
    assert!(o.status.success(), "mkfs failed: {}", stderr(&o));
}

#[test]
fn mkfs_makes_a_sparse_image_and_refuses_to_overwrite_one() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.img");
    let o = run(&["mkfs", p(&img), "--size", "64M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("blocks of 4096 bytes"), "{}", stdout(&o));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 << 20);
    let o = run(&["mkfs", p(&img), "--size", "64M"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already holds a cairn file system"), "{}", stderr(&o));
    let o = run(&["mkfs", p(&img), "--size", "64M", "--force", "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn mkfs_refuses_a_foreign_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ext4.img");
    let mut bytes = vec![0u8; 4 << 20];
    bytes[1080] = 0x53;
    bytes[1081] = 0xef;
    std::fs::write(&img, &bytes).unwrap();
    let o = run(&["mkfs", p(&img)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("ext2/ext3/ext4"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&img).unwrap(), bytes, "a refused mkfs changed the file");
}

#[test]
fn mkfs_rejects_bad_sizes_without_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("b.img");
    for bad in ["12Q", "abc", "", "-1G"] {
        let size_arg = format!("--size={bad}");
        let o = run(&["mkfs", p(&img), &size_arg]);
        assert_eq!(o.status.code(), Some(1), "size {bad:?}");
        assert!(stderr(&o).contains("--size"), "{}", stderr(&o));
    }
    let o = run(&["mkfs", p(&img), "--size", "4K"]);
    assert_eq!(o.status.code(), Some(1), "a 4 KiB file system cannot exist");
    assert!(!img.exists(), "a failed mkfs left a file behind");
    let o = run(&["mkfs", p(&img)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--size"), "{}", stderr(&o));
}

#[test]
fn mkfs_of_16_tib_stays_sparse() {
    // ext4 (a usual /tmp) caps files just below 16 TiB; tmpfs does not.
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let img = dir.path().join("big.img");
    mkfs(&img, "16T");
    let m = std::fs::metadata(&img).unwrap();
    assert_eq!(m.len(), 16 << 40);
    assert!(m.blocks() * 512 < 256 << 20, "16 TiB image uses {} bytes on disk", m.blocks() * 512);
    let o = run(&["stats", p(&img), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["figures"]["size_bytes"].as_u64(), Some(16 << 40));
    assert_eq!(v["state"], "clean");
}

#[test]
fn stats_and_mount_refuse_what_is_not_a_cairn_image() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0x5au8; 1 << 20]).unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let o = run(&["stats", p(&junk)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a cairn file system"), "{}", stderr(&o));
    let o = run(&["mount", p(&junk), p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a usable cairn file system"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&junk).unwrap(), vec![0x5au8; 1 << 20], "a refused mount changed the file");
}

#[test]
fn mount_refuses_damaged_images_and_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("c.img");
    mkfs(&img, "64M");
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    // A missing mount point.
    let o = run(&["mount", p(&img), p(&dir.path().join("nowhere"))]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    // A misspelt option.
    let o = run(&["mount", p(&img), p(&mp), "-o", "allow_otter"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unknown mount option 'allow_otter'"), "{}", stderr(&o));
    // A corrupted superblock (one flipped byte inside its checksummed part).
    let good = std::fs::read(&img).unwrap();
    let mut bad = good.clone();
    bad[40] ^= 0xff;
    std::fs::write(&img, &bad).unwrap();
    let o = run(&["mount", p(&img), p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a usable cairn file system"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&img).unwrap(), bad, "a refused mount changed the image");
    // A truncated image.
    std::fs::write(&img, &good[..(8 << 20)]).unwrap();
    let o = run(&["mount", p(&img), p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a usable cairn file system"), "{}", stderr(&o));
}

// ------------------------------------------------------------- real mounts

fn can_mount() -> bool {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: mounting needs root and /dev/fuse");
        return false;
    }
    true
}

fn is_mounted(mp: &Path) -> bool {
    let want = std::fs::canonicalize(mp).unwrap_or_else(|_| mp.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
}

/// Unmounts and waits until the daemon has exited (the image is clean then).
fn unmount(mp: &Path, pid: u64) {
    let o = Command::new("umount").arg(mp).output().unwrap();
    assert!(o.status.success(), "umount: {}", stderr(&o));
    wait_gone(pid, Duration::from_secs(60), "after unmount");
}

/// Waits until process `pid` has exited; fails the test after `limit`.
fn wait_gone(pid: u64, limit: Duration, what: &str) {
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t0.elapsed() < limit, "daemon {pid} still running {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn daemon_pid(mp: &Path) -> u64 {
    let o = run(&["stats", p(mp), "--json"]);
    assert!(o.status.success(), "stats: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["counters"]["journal.commits"].as_u64().is_some(), "{v}");
    v["pid"].as_u64().unwrap()
}

struct Guard(PathBuf);
impl Drop for Guard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

#[test]
fn a_real_mount_keeps_data_across_unmount_and_refuses_a_second_mount() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("m.img");
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    mkfs(&img, "256M");
    let o = run(&["mount", p(&img), p(&mp)]);
    assert!(o.status.success(), "mount: {}", stderr(&o));
    let _g = Guard(mp.clone());
    assert!(is_mounted(&mp), "cairn mount returned before the mount appeared");
    let pid = daemon_pid(&mp);

    // Ordinary use.
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::create_dir_all(mp.join("a/b/c")).unwrap();
    std::fs::write(mp.join("a/b/c/big"), &data).unwrap();
    std::fs::write(mp.join("small"), b"hello").unwrap();
    std::os::unix::fs::symlink("a/b/c/big", mp.join("link")).unwrap();
    std::fs::hard_link(mp.join("small"), mp.join("small2")).unwrap();
    std::fs::rename(mp.join("small2"), mp.join("a/moved")).unwrap();
    assert_eq!(std::fs::read(mp.join("link")).unwrap(), data);
    assert_eq!(std::fs::metadata(mp.join("small")).unwrap().nlink(), 2);
    let long = "n".repeat(255);
    std::fs::write(mp.join(&long), b"x").unwrap();
    let too_long = "n".repeat(256);
    let e = std::fs::write(mp.join(&too_long), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let mut names: Vec<String> =
        std::fs::read_dir(&mp).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, vec!["a".to_string(), "link".into(), long.clone(), "small".into()]);

    // A second mount of the same image is refused.
    let mp2 = dir.path().join("mnt2");
    std::fs::create_dir(&mp2).unwrap();
    let o = run(&["mount", p(&img), p(&mp2)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already in use"), "{}", stderr(&o));
    assert!(!is_mounted(&mp2));

    unmount(&mp, pid);
    let o = run(&["fsck", p(&img)]);
    assert_eq!(o.status.code(), Some(0), "fsck after unmount: {}{}", stdout(&o), stderr(&o));
    let o = run(&["stats", p(&img), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["state"], "clean");

    // Remount: everything is still there.
    let o = run(&["mount", p(&img), p(&mp)]);
    assert!(o.status.success(), "remount: {}", stderr(&o));
    let pid = daemon_pid(&mp);
    assert_eq!(std::fs::read(mp.join("a/b/c/big")).unwrap(), data);
    assert_eq!(std::fs::read(mp.join("a/moved")).unwrap(), b"hello");
    assert_eq!(std::fs::read_link(mp.join("link")).unwrap(), Path::new("a/b/c/big"));
    assert_eq!(std::fs::metadata(mp.join("small")).unwrap().nlink(), 2);
    unmount(&mp, pid);
    let o = run(&["fsck", p(&img)]);
    assert_eq!(o.status.code(), Some(0), "fsck after remount: {}{}", stdout(&o), stderr(&o));
}

#[test]
fn a_killed_daemon_leaves_a_journal_that_the_next_mount_replays() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("k.img");
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    mkfs(&img, "128M");
    let o = run(&["mount", p(&img), p(&mp)]);
    assert!(o.status.success(), "mount: {}", stderr(&o));
    let _g = Guard(mp.clone());
    let pid = daemon_pid(&mp);
    std::fs::write(mp.join("kept"), b"fsync'd before the kill").unwrap();
    let f = std::fs::File::open(mp.join("kept")).unwrap();
    f.sync_all().unwrap();
    drop(f);
    Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    wait_gone(pid, Duration::from_secs(30), "after SIGKILL");
    let _ = Command::new("umount").arg(&mp).status();
    // fsck checks it as if replayed: not corrupt.
    let o = run(&["fsck", p(&img)]);
    assert_eq!(o.status.code(), Some(0), "fsck of an unreplayed image: {}{}", stdout(&o), stderr(&o));
    // A read-only mount cannot replay: refused with the reason.
    let o = run(&["mount", p(&img), p(&mp), "-o", "ro"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("need replay"), "{}", stderr(&o));
    // A read-write mount replays, and the fsync'd file is there.
    let o = run(&["mount", p(&img), p(&mp)]);
    assert!(o.status.success(), "remount: {}", stderr(&o));
    let pid = daemon_pid(&mp);
    assert_eq!(std::fs::read(mp.join("kept")).unwrap(), b"fsync'd before the kill");
    let o = run(&["stats", p(&mp), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["counters"]["journal.replays_at_mount"].as_u64(), Some(1), "{v}");
    unmount(&mp, pid);
    let o = run(&["fsck", p(&img)]);
    assert_eq!(o.status.code(), Some(0), "fsck after replay: {}{}", stdout(&o), stderr(&o));
}
