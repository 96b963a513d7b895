//! `cairn-bench-driver fsmark`: seed 001's three phases against the engine, without
//! FUSE.
//!
//! Through a mount every create, lookup and unlink is a FUSE round trip and
//! a kernel dentry/inode; this tool runs the same workload on `Fs` in this
//! process, so `bench/run fsmark-scale` can put engine time beside FUSE time
//! for the same file count:
//!
//! 1. **create**: `--threads` threads; thread `t` makes `/t` and `--dirs`
//!    subdirectories `/t/00`, `/t/01`, ... and creates its share of
//!    `--files` empty files in them, `--per-dir` files in one subdirectory
//!    before moving on to the next, round robin (fs_mark's `-d /t -D DIRS
//!    -N PER_DIR`), with fs_mark's 40-byte names (8 hex digits, 8 `~`, 24
//!    random characters). Each create is `Namespace::mknod` followed by `forget` of
//!    its lookup reference (a kernel would drop it when the inode leaves its
//!    cache). Then a commit (`sync_fs`), timed apart, and an unmount.
//! 2. **walk**, cold: the image is mounted again by a new `Fs` (nothing
//!    cached; the page cache is dropped first as root, or the image's pages
//!    advised away otherwise), and one thread walks the tree from the root as
//!    `find` does: `readdir` of each directory, and a `lookup` (which returns
//!    the attributes: the stat) of every entry.
//! 3. **unlink**: one thread per top directory removes it as `rm -rf` does
//!    (`readdir`, `unlink` of each file, `rmdir`), then a commit, timed apart,
//!    and an unmount. `--keep` leaves the files and skips this phase.
//!
//! Per phase it reports seconds, files (entries) per second, the process's
//! peak RSS during the phase (VmHWM, reset at the phase's start through
//! `/proc/self/clear_refs`), the journal's `journal.bytes_logged`, and the
//! bytes and calls the engine wrote to and read from the image (a counting
//! wrapper around the image file: the image-file equivalent of the loop
//! device's counters the FUSE runs read). The create phase also has a row
//! per `--rows`th of the files (files/s of each tenth, say), as fs_mark
//! prints one row per loop. Each phase also gives its start and end on
//! CLOCK_MONOTONIC (`monotonic`), to cut a `perf record -k CLOCK_MONOTONIC`
//! of the whole run by phase. The create and unlink phases also give every
//! `cairn stats` counter at their end (`stats`: write-backs, cache sizes,
//! ...; the unlink's count from the walk's mount).
//! Output: JSON on stdout, one line per phase on stderr.

use crate::dd::{mount_on, unmount_after, XorShift};
use cairn_core::dev::{BlockDevice, FileDevice};
use cairn_core::{Ctx, Fs, FsError};
use cairn_format::ROOT_INO;
use serde_json::{json, Value};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `cairn-bench-driver fsmark`.
pub struct FsmarkArgs<'a> {
    pub image: &'a Path,
    pub files: u64,
    pub threads: u32,
    pub dirs: u32,
    pub per_dir: Option<u64>,
    pub rows: u32,
    pub keep: bool,
    pub options: &'a [String],
}

/// The engine's I/O on the image, counted.
#[derive(Default)]
struct IoCount {
    writes: AtomicU64,
    write_bytes: AtomicU64,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    flushes: AtomicU64,
}

impl IoCount {
    fn json(&self) -> Value {
        json!({
            "writes": self.writes.load(Relaxed),
            "write_bytes": self.write_bytes.load(Relaxed),
            "reads": self.reads.load(Relaxed),
            "read_bytes": self.read_bytes.load(Relaxed),
            "flushes": self.flushes.load(Relaxed),
        })
    }
}

/// The image file, with every read, write and flush counted.
struct CountingDevice {
    inner: FileDevice,
    count: Arc<IoCount>,
}

impl BlockDevice for CountingDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.count.reads.fetch_add(1, Relaxed);
        self.count.read_bytes.fetch_add(buf.len() as u64, Relaxed);
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.count.writes.fetch_add(1, Relaxed);
        self.count.write_bytes.fetch_add(buf.len() as u64, Relaxed);
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        self.count.flushes.fetch_add(1, Relaxed);
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// Mounts the image with a fresh I/O count.
fn mount_counted(a: &FsmarkArgs<'_>) -> Result<(Arc<Fs>, Arc<IoCount>), String> {
    let count = Arc::new(IoCount::default());
    let c = count.clone();
    let fs = mount_on(a.image, a.options, move |dev| Arc::new(CountingDevice { inner: dev, count: c }))?;
    Ok((fs, count))
}

fn err(what: &str, e: FsError) -> String {
    format!("{what}: {e}")
}

/// A field of /proc/self/status in KiB (VmHWM, VmRSS).
pub fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].split_whitespace().next()?.parse().ok()
}

/// Resets the peak RSS (VmHWM) to the current RSS (`clear_refs` 5, Linux ≥ 4.0).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Since when a phase's peak RSS counts: whether [`reset_peak_rss`] worked.
fn peak_rss_since(reset: bool) -> &'static str {
    if reset {
        "phase start"
    } else {
        "process start"
    }
}

/// Every counter of `fs`, as a phase's `stats`.
fn counters_json(fs: &Fs) -> serde_json::Map<String, Value> {
    fs.stats().into_iter().map(|(k, v)| (k, json!(v))).collect()
}

/// CLOCK_MONOTONIC in seconds: the clock `perf record -k CLOCK_MONOTONIC`
/// stamps samples with, so a profile of the whole run can be cut by phase
/// (`perf report --time START,END`).
fn mono() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec that we own.
    #[allow(unsafe_code)]
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn journal_bytes(fs: &Fs) -> u64 {
    fs.stats().into_iter().find(|(k, _)| k == "journal.bytes_logged").map_or(0, |(_, v)| v)
}

/// fs_mark's 40-byte name: 8 hex digits, 8 `~`, 24 random characters.
fn name(rng: &mut XorShift, stamp: u32) -> Vec<u8> {
    const CHARS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut r = [0u8; 24];
    rng.fill(&mut r);
    let mut n = format!("{stamp:08x}~~~~~~~~").into_bytes();
    n.extend(r.iter().map(|b| CHARS[*b as usize % CHARS.len()]));
    n
}

fn subdir_name(i: u32) -> Vec<u8> {
    format!("{i:02}").into_bytes()
}

/// One create thread: `/t`, its subdirectories, and `n` files in them.
fn create_tree(fs: &Fs, dirs: u32, t: u32, n: u64, per_dir: u64, done: &AtomicU64) -> Result<(), String> {
    let ctx = Ctx::root();
    let top = fs.names().mkdir(&ctx, ROOT_INO, t.to_string().as_bytes(), 0o755).map_err(|e| err("mkdir", e))?.ino;
    let mut subs = Vec::with_capacity(dirs as usize);
    for d in 0..dirs {
        let ino = fs.names().mkdir(&ctx, top, &subdir_name(d), 0o755).map_err(|e| err("mkdir", e))?.ino;
        fs.inodes().forget(ino, 1);
        subs.push(ino);
    }
    fs.inodes().forget(top, 1);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ (u64::from(t) + 1).wrapping_mul(0x1000_0000_01b3));
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as u32);
    for i in 0..n {
        let dir = subs[((i / per_dir) % subs.len() as u64) as usize];
        let attr = fs
            .names()
            .mknod(&ctx, dir, &name(&mut rng, stamp), libc::S_IFREG | 0o644, 0)
            .map_err(|e| err("create", e))?;
        fs.inodes().forget(attr.ino, 1);
        done.fetch_add(1, Relaxed);
    }
    Ok(())
}

/// Runs `threads` workers, `f(t)` each; the first error wins.
fn in_threads<F>(threads: u32, f: F) -> std::thread::JoinHandle<Result<(), String>>
where
    F: Fn(u32) -> Result<(), String> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    std::thread::spawn(move || {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || f(t))
            })
            .collect();
        let mut first = Ok(());
        for h in hs {
            let r = h.join().unwrap_or_else(|_| Err("a worker thread panicked".into()));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Waits for a phase's workers; returns the phase's seconds (since `t0`)
/// and, if they succeeded, the seconds of the commit that follows.
fn join_and_commit(
    fs: &Fs,
    worker: std::thread::JoinHandle<Result<(), String>>,
    t0: Instant,
) -> (f64, Result<f64, String>) {
    let res = worker.join().unwrap_or_else(|_| Err("the worker threads panicked".into()));
    let seconds = t0.elapsed().as_secs_f64();
    let r = res.and_then(|()| {
        let t = Instant::now();
        fs.files().sync_fs().map_err(|e| err("commit", e))?;
        Ok(t.elapsed().as_secs_f64())
    });
    (seconds, r)
}

/// Phase 1: returns its JSON.
fn create_phase(a: &FsmarkArgs<'_>) -> Result<Value, String> {
    let (fs, io) = mount_counted(a)?;
    let per_thread = a.files / u64::from(a.threads);
    let per_dir = a.per_dir.unwrap_or_else(|| per_thread.div_ceil(u64::from(a.dirs))).max(1);
    let done = Arc::new(AtomicU64::new(0));
    let rss_reset = reset_peak_rss();
    let t0 = Instant::now();
    let m0 = mono();
    let worker = {
        let (fs, done) = (fs.clone(), done.clone());
        let (dirs, extra) = (a.dirs, a.files % u64::from(a.threads));
        in_threads(a.threads, move |t| {
            let n = per_thread + u64::from(u64::from(t) < extra);
            create_tree(&fs, dirs, t, n, per_dir, &done)
        })
    };
    // One row per `rows`th of the files, as fs_mark prints one per loop.
    let step = (a.files / u64::from(a.rows.max(1))).max(1);
    let mut rows = Vec::new();
    let (mut next, mut last_t, mut last_n) = (step, 0.0f64, 0u64);
    loop {
        let finished = worker.is_finished();
        let n = done.load(Relaxed);
        let el = t0.elapsed().as_secs_f64();
        while n >= next && next <= a.files {
            rows.push(json!({"files": next, "seconds": el - last_t, "files_per_s": (next - last_n) as f64 / (el - last_t).max(1e-9)}));
            (last_t, last_n) = (el, next);
            next += step;
        }
        if finished {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (seconds, r) = join_and_commit(&fs, worker, t0);
    let journal = journal_bytes(&fs);
    let peak = status_kib("VmHWM");
    let counters = counters_json(&fs);
    let t = Instant::now();
    let commit_seconds = unmount_after(&fs, r)?;
    drop(fs);
    let files = done.load(Relaxed);
    Ok(json!({
        "files": files,
        "per_dir": per_dir,
        "seconds": seconds,
        "monotonic": [m0, m0 + seconds],
        "files_per_s": files as f64 / seconds.max(1e-9),
        "commit_seconds": commit_seconds,
        "unmount_seconds": t.elapsed().as_secs_f64(),
        "peak_rss_kib": peak,
        "peak_rss_since": peak_rss_since(rss_reset),
        "journal_bytes": journal,
        "io": io.json(),
        "rows": rows,
        "stats": counters,
    }))
}

/// Empties the page cache before a cold mount: all of it as root
/// (`drop_caches`, after a `sync`), else the image's own pages. Says which.
fn drop_caches(image: &Path) -> &'static str {
    // SAFETY: sync(2) takes no arguments and touches no memory of ours.
    #[allow(unsafe_code)]
    unsafe {
        libc::sync();
    }
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok() {
        return "drop_caches";
    }
    if let Ok(f) = std::fs::File::open(image) {
        use std::os::unix::io::AsRawFd;
        // SAFETY: fadvise on a valid, owned descriptor has no memory effects.
        #[allow(unsafe_code)]
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r == 0 {
            return "fadvise(DONTNEED) of the image";
        }
    }
    "none"
}

/// All entries of directory `dir` but `.` and `..`: (name, inode).
fn entries(fs: &Fs, dir: u64) -> Result<Vec<(Vec<u8>, u64)>, String> {
    let mut out = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        if e.name != b"." && e.name != b".." {
            out.push((e.name.clone(), e.ino));
        }
        true
    })
    .map_err(|e| err("readdir", e))?;
    Ok(out)
}

/// Phase 2: `find`'s walk, every entry stat'ed (looked up).
fn walk(fs: &Fs) -> Result<(u64, u64), String> {
    let (mut files, mut dirs) = (0u64, 0u64);
    let mut stack = vec![ROOT_INO];
    while let Some(d) = stack.pop() {
        for (name, _) in entries(fs, d)? {
            let a = fs.lookup(d, &name).map_err(|e| err("lookup", e))?;
            if a.mode & libc::S_IFMT == libc::S_IFDIR {
                dirs += 1;
                stack.push(a.ino);
            } else {
                files += 1;
            }
            fs.inodes().forget(a.ino, 1);
        }
    }
    Ok((files, dirs))
}

/// Phase 3 for one top directory: `rm -rf /t`.
fn remove_tree(fs: &Fs, t: u32, removed: &AtomicU64) -> Result<(), String> {
    let top_name = t.to_string();
    let top = fs.lookup(ROOT_INO, top_name.as_bytes()).map_err(|e| err("lookup", e))?.ino;
    let r = (|| {
        for (sub_name, _) in entries(fs, top)? {
            let sub = fs.lookup(top, &sub_name).map_err(|e| err("lookup", e))?.ino;
            let r = (|| {
                for (name, _) in entries(fs, sub)? {
                    fs.names().unlink(sub, &name).map_err(|e| err("unlink", e))?;
                    removed.fetch_add(1, Relaxed);
                }
                Ok::<(), String>(())
            })();
            fs.inodes().forget(sub, 1);
            r?;
            fs.names().rmdir(top, &sub_name).map_err(|e| err("rmdir", e))?;
        }
        Ok::<(), String>(())
    })();
    fs.inodes().forget(top, 1);
    r?;
    fs.names().rmdir(ROOT_INO, top_name.as_bytes()).map_err(|e| err("rmdir", e))
}

/// Phases 2 and 3 in one cold mount.
fn walk_and_unlink(a: &FsmarkArgs<'_>) -> Result<(Value, Option<Value>), String> {
    let cache = drop_caches(a.image);
    let rss_reset = reset_peak_rss();
    let t = Instant::now();
    let (fs, io) = mount_counted(a)?;
    let mount_seconds = t.elapsed().as_secs_f64();
    let j0 = journal_bytes(&fs);
    let t0 = Instant::now();
    let m0 = mono();
    let walked = walk(&fs);
    let walk_seconds = t0.elapsed().as_secs_f64();
    let walk_io = io.json();
    let walk_peak = status_kib("VmHWM");
    let (files, dirs) = match walked {
        Ok(x) => x,
        Err(e) => {
            let _ = fs.unmount();
            return Err(e);
        }
    };
    let entries = files + dirs;
    let walk = json!({
        "entries": entries,
        "files": files,
        "dirs": dirs,
        "seconds": walk_seconds,
        "monotonic": [m0, m0 + walk_seconds],
        "entries_per_s": entries as f64 / walk_seconds.max(1e-9),
        "mount_seconds": mount_seconds,
        "caches_dropped": cache,
        "peak_rss_kib": walk_peak,
        "peak_rss_since": peak_rss_since(rss_reset),
        "journal_bytes": journal_bytes(&fs) - j0,
        "io": walk_io,
    });
    if a.keep {
        fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        return Ok((walk, None));
    }
    let before = io.json();
    let j1 = journal_bytes(&fs);
    let rss_reset = reset_peak_rss();
    let removed = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let m0 = mono();
    let worker = {
        let (fs, removed) = (fs.clone(), removed.clone());
        in_threads(a.threads, move |t| remove_tree(&fs, t, &removed))
    };
    let (seconds, r) = join_and_commit(&fs, worker, t0);
    let journal = journal_bytes(&fs) - j1;
    let peak = status_kib("VmHWM");
    let counters = counters_json(&fs);
    let commit_seconds = unmount_after(&fs, r)?;
    let n = removed.load(Relaxed);
    let sub = |k: &str| io.json()[k].as_u64().unwrap_or(0) - before[k].as_u64().unwrap_or(0);
    let unlink = json!({
        "files": n,
        "seconds": seconds,
        "monotonic": [m0, m0 + seconds],
        "files_per_s": n as f64 / seconds.max(1e-9),
        "commit_seconds": commit_seconds,
        "peak_rss_kib": peak,
        "peak_rss_since": peak_rss_since(rss_reset),
        "journal_bytes": journal,
        "io": {
            "writes": sub("writes"), "write_bytes": sub("write_bytes"),
            "reads": sub("reads"), "read_bytes": sub("read_bytes"), "flushes": sub("flushes"),
        },
        "stats": counters,
    });
    Ok((walk, Some(unlink)))
}

/// Runs `cairn-bench-driver fsmark`.
pub fn run(a: &FsmarkArgs<'_>) -> Result<(), String> {
    if a.files == 0 || a.threads == 0 || a.threads > 256 || a.dirs == 0 || a.rows == 0 {
        return Err("need --files >= 1, --threads between 1 and 256, --dirs >= 1 and --rows >= 1".into());
    }
    let create = create_phase(a)?;
    let files = create["files"].as_u64().unwrap_or(0);
    eprintln!(
        "create: {files} files in {:.2} s ({:.0} files/s), commit {:.2} s; journal {:.0} B/file, image writes {:.0} \
         B/file; peak RSS {} MiB",
        create["seconds"].as_f64().unwrap_or(0.0),
        create["files_per_s"].as_f64().unwrap_or(0.0),
        create["commit_seconds"].as_f64().unwrap_or(0.0),
        create["journal_bytes"].as_u64().unwrap_or(0) as f64 / files.max(1) as f64,
        create["io"]["write_bytes"].as_u64().unwrap_or(0) as f64 / files.max(1) as f64,
        create["peak_rss_kib"].as_u64().unwrap_or(0) / 1024,
    );
    let (walk, unlink) = walk_and_unlink(a)?;
    eprintln!(
        "walk: {} entries ({} files) in {:.2} s ({:.0} entries/s), caches: {}; peak RSS {} MiB",
        walk["entries"],
        walk["files"],
        walk["seconds"].as_f64().unwrap_or(0.0),
        walk["entries_per_s"].as_f64().unwrap_or(0.0),
        walk["caches_dropped"].as_str().unwrap_or("-"),
        walk["peak_rss_kib"].as_u64().unwrap_or(0) / 1024,
    );
    if let Some(u) = &unlink {
        eprintln!(
            "unlink: {} files in {:.2} s ({:.0} files/s), commit {:.2} s; peak RSS {} MiB",
            u["files"],
            u["seconds"].as_f64().unwrap_or(0.0),
            u["files_per_s"].as_f64().unwrap_or(0.0),
            u["commit_seconds"].as_f64().unwrap_or(0.0),
            u["peak_rss_kib"].as_u64().unwrap_or(0) / 1024,
        );
    }
    let per_file = |x: &Value| x.as_u64().map(|b| b as f64 / files.max(1) as f64);
    let doc = json!({
        "image": a.image.display().to_string(),
        "files": a.files,
        "threads": a.threads,
        "dirs": a.dirs,
        "options": a.options,
        "journal_bytes_per_file": per_file(&create["journal_bytes"]),
        "image_bytes_per_file": per_file(&create["io"]["write_bytes"]),
        "create": create,
        "walk": walk,
        "unlink": unlink,
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_forty_bytes_as_fs_marks() {
        let mut r = XorShift(7);
        let a = name(&mut r, 0x6b04_8452);
        let b = name(&mut r, 0x6b04_8452);
        assert_eq!(a.len(), 40);
        assert!(a.starts_with(b"6b048452~~~~~~~~"), "{}", String::from_utf8_lossy(&a));
        assert!(a[16..].iter().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()));
        assert_ne!(a, b);
    }

    #[test]
    fn peak_rss_is_read_from_proc() {
        assert!(status_kib("VmHWM").is_some_and(|k| k > 0));
        assert!(status_kib("NoSuchField").is_none());
    }
}
