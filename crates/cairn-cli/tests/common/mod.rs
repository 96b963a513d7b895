//! Helpers shared by the CLI test binaries: running `cairn`, making and
//! mounting fresh images, counters, fsck. Each binary uses only some.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

pub fn run(args: &[&str]) -> Output {
    cairn().args(args).output().expect("run cairn")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

pub fn mkfs(img: &Path, size: &str) {
    let o = run(&["mkfs", p(img), "--size", size, "--quiet"]);
    assert!(o.status.success(), "mkfs failed: {}", stderr(&o));
}

pub fn can_mount() -> bool {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: mounting needs root and /dev/fuse");
        return false;
    }
    true
}

pub fn is_mounted(mp: &Path) -> bool {
    let want = std::fs::canonicalize(mp).unwrap_or_else(|_| mp.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
}

/// Unmounts and waits until the daemon has exited (the image is clean then).
///
/// "target is busy" is retried for up to 10 s: tests run in parallel threads
/// of one process, and a child another test is spawning holds a copy of this
/// test's open descriptors from its fork until its exec (they are
/// close-on-exec), which under load outlasts this test's own close. Any
/// other failure, or a mount still busy after 10 s, fails the test.
pub fn unmount(mp: &Path, pid: u64) {
    let t0 = Instant::now();
    loop {
        let o = Command::new("umount").arg(mp).output().unwrap();
        if o.status.success() {
            break;
        }
        let busy = stderr(&o).contains("busy");
        assert!(busy && t0.elapsed() < Duration::from_secs(10), "umount: {}", stderr(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_gone(pid, Duration::from_secs(60), "after unmount");
}

/// Waits until process `pid` has exited; fails the test after `limit`.
pub fn wait_gone(pid: u64, limit: Duration, what: &str) {
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t0.elapsed() < limit, "daemon {pid} still running {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A new temporary directory holding the path of an image `name` (not
/// made yet) and an empty mount point `mnt`.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub img: PathBuf,
    pub mp: PathBuf,
}

pub fn scratch(name: &str) -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join(name);
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    Scratch { dir, img, mp }
}

/// `cairn mount IMG MP ARGS...`, which must succeed (`what` names the step
/// in the failure): the daemon's pid.
pub fn mount(img: &Path, mp: &Path, args: &[&str], what: &str) -> u64 {
    let o = run(&[&["mount", p(img), p(mp)], args].concat());
    assert!(o.status.success(), "{what}: {}", stderr(&o));
    daemon_pid(mp)
}

/// `cairn umount MP`, which must succeed.
pub fn cairn_umount(mp: &Path) {
    let o = run(&["umount", p(mp)]);
    assert!(o.status.success(), "cairn umount: {}{}", stdout(&o), stderr(&o));
}

/// `cairn stats PATH --json` (an image or a mount point), which must
/// succeed, parsed.
pub fn stats_json(path: &Path) -> serde_json::Value {
    let o = run(&["stats", p(path), "--json"]);
    assert!(o.status.success(), "stats: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// A fresh image `name` of `size` in a new temporary directory, mounted at
/// its `mnt`: (the directory, the unmount guard, the daemon's pid).
pub fn fresh_mount(name: &str, size: &str) -> (tempfile::TempDir, Guard, u64) {
    fresh_mount_with(name, size, &[])
}

/// [`fresh_mount`] with extra `cairn mount` arguments (`["-o", "..."]`).
pub fn fresh_mount_with(name: &str, size: &str, args: &[&str]) -> (tempfile::TempDir, Guard, u64) {
    let Scratch { dir, img, mp } = scratch(name);
    mkfs(&img, size);
    let guard = Guard(mp.clone());
    let pid = mount(&img, &mp, args, "mount");
    (dir, guard, pid)
}

/// Runs `cairn fsck` on `img` and fails the test (`what`) unless it is clean.
pub fn assert_fsck_clean(img: &Path, what: &str) {
    let o = run(&["fsck", p(img)]);
    assert_eq!(o.status.code(), Some(0), "{what}: {}{}", stdout(&o), stderr(&o));
}

pub fn daemon_pid(mp: &Path) -> u64 {
    let v = stats_json(mp);
    assert!(v["counters"]["journal.commits"].as_u64().is_some(), "{v}");
    v["pid"].as_u64().unwrap()
}

pub struct Guard(pub PathBuf);
impl Drop for Guard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

pub fn counters(mp: &Path) -> std::collections::BTreeMap<String, u64> {
    let v = stats_json(mp);
    v["counters"].as_object().unwrap().iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect()
}

/// Runs `f` and returns the FUSE requests it caused, per opcode (only
/// opcodes that grew), plus the total under "requests".
pub fn fuse_requests(mp: &Path, f: impl FnOnce()) -> std::collections::BTreeMap<String, u64> {
    let before = counters(mp);
    f();
    let after = counters(mp);
    after
        .iter()
        .filter(|(k, _)| k.starts_with("fuse.") && (k.ends_with(".requests") || *k == "fuse.requests"))
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.trim_start_matches("fuse.").trim_end_matches(".requests").to_string(), d))
        })
        .collect()
}

pub fn per_op(what: &str, n: u64, d: &std::collections::BTreeMap<String, u64>) {
    let total = d.get("requests").copied().unwrap_or(0);
    let parts: Vec<String> =
        d.iter().filter(|(k, _)| *k != "requests").map(|(k, v)| format!("{k} {:.2}", *v as f64 / n as f64)).collect();
    println!("requests per {what}: {:.2} ({})", total as f64 / n as f64, parts.join(", "));
}

pub fn sh(cmd: &str) -> Output {
    Command::new("sh").arg("-c").arg(cmd).output().expect("run sh")
}

/// Writes `data` to the file at `path` (made or truncated) and fsyncs it.
pub fn write_synced(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
    std::fs::File::open(path).unwrap().sync_all().unwrap();
}

/// Byte `i` of the test pattern (a multiplicative hash of `i`: not zeros,
/// and no block of it the same as the next).
pub fn pattern(i: usize) -> u8 {
    ((i as u64 * 2_654_435_761) >> 13) as u8
}

/// The first `len` bytes of the test [`pattern`].
pub fn patterned(len: usize) -> Vec<u8> {
    (0..len).map(pattern).collect()
}
