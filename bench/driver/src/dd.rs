//! `cairn-bench-driver dd`: `dd` against the engine, without FUSE.
//!
//! The allocator experiment times `dd bs=2M count=10` on a fragmented file
//! system. Through a mount that time includes the kernel, FUSE round trips
//! (1 MiB per WRITE) and `/dev/urandom`; this tool takes all three away so
//! what is left is the engine: it opens the image as `cairn mount` does
//! (`FileDevice` with the exclusive lock, `Fs::mount` with the options
//! parsed by cairn-fuse's `-o` parser), and for each of `--repeat` runs
//! creates or truncates `/NAME` (as dd's `O_TRUNC`), writes `count` blocks of
//! `bs` bytes at consecutive offsets, and commits if `--fsync`.
//!
//! The data comes from a xorshift64 generator filled *outside* the timed
//! region: a run's `seconds` is the sum of the file-system calls only
//! (create/truncate, writes, fsync). Mount and unmount are timed apart.
//!
//! Output: one JSON document on stdout —
//! `{image, name, bs, count, fsync, options, mount_seconds, unmount_seconds,
//! seconds, alloc_at_mount: {..}, runs: [{seconds, write_seconds,
//! fsync_seconds, bytes, mib_per_s, alloc: {..}}], alloc: {..}}` where every
//! `alloc` map holds every `alloc.*` counter of `Fs::stats()` at that moment
//! (absolute values; consumers take differences) — and one line per run on
//! stderr. Counters that the build does not publish (the buddy allocator's
//! `alloc.mb.*` before it exists) are absent from the JSON and shown as `-`
//! on stderr.

use cairn_core::dev::{BlockDevice, FileDevice};
use cairn_core::{Ctx, Fs, FsError, SetAttr};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `cairn-bench-driver dd`.
pub struct DdArgs<'a> {
    pub image: &'a Path,
    pub name: &'a str,
    pub bs: u64,
    pub count: u64,
    pub fsync: bool,
    pub repeat: u32,
    pub options: &'a [String],
}

/// A xorshift64 stream: fast, and enough to keep data from being all zeros
/// or all the same block.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut x = self.0;
        for c in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            c.copy_from_slice(&b[..c.len()]);
        }
        self.0 = x;
    }
}

fn alloc_counters(fs: &Fs) -> BTreeMap<String, u64> {
    fs.stats().into_iter().filter(|(k, _)| k.starts_with("alloc.")).collect()
}

fn as_json(c: &BTreeMap<String, u64>) -> Value {
    Value::Object(c.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<Map<_, _>>())
}

/// `after - before` of counter `k`, or `-` when the build does not have it.
fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, k: &str) -> String {
    match (before.get(k), after.get(k)) {
        (Some(a), Some(b)) => b.saturating_sub(*a).to_string(),
        _ => "-".into(),
    }
}

/// The stderr line of one run: time, rate, and the buddy allocator's counters.
fn summary(i: u32, bytes: u64, secs: f64, before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> String {
    let d = |k: &str| delta(before, after, k);
    let per_cr = |what: &str| (0..4).map(|c| d(&format!("alloc.mb.cr{c}.{what}"))).collect::<Vec<_>>().join("/");
    format!(
        "run {i}: {} in {secs:.3} s ({:.1} MiB/s); alloc.calls {} groups_scanned {}; mb reqs {} goal_hits {} \
         useless_loops cr0..3 {} groups_considered cr0..3 {}",
        cairn_core::human_bytes(bytes),
        bytes as f64 / (1 << 20) as f64 / secs.max(1e-9),
        d("alloc.calls"),
        d("alloc.groups_scanned"),
        d("alloc.mb.reqs"),
        d("alloc.mb.goal_hits"),
        per_cr("useless_loops"),
        per_cr("groups_considered"),
    )
}

pub fn mount(image: &Path, options: &[String]) -> Result<Arc<Fs>, String> {
    mount_on(image, options, |dev| Arc::new(dev))
}

/// Unmounts `fs` whatever `run` (the phase on it) came to, then `run`'s
/// outcome: its own error first, else the unmount's, else its value.
pub fn unmount_after<T>(fs: &Fs, run: Result<T, String>) -> Result<T, String> {
    let unmounted = fs.unmount();
    let value = run?;
    unmounted.map_err(|e| format!("unmount: {e}"))?;
    Ok(value)
}

/// As [`mount`], with the locked image file wrapped by `wrap` first (a
/// device that counts the engine's I/O, say).
pub fn mount_on(
    image: &Path,
    options: &[String],
    wrap: impl FnOnce(FileDevice) -> Arc<dyn BlockDevice>,
) -> Result<Arc<Fs>, String> {
    let settings = cairn_fuse::parse_options(options)?;
    let dev = FileDevice::open(image, settings.engine.read_only)
        .map_err(|e| format!("cannot open image {}: {e}", image.display()))?;
    dev.lock_exclusive()
        .map_err(|_| format!("{} is already in use: mounted (or being checked) by another process", image.display()))?;
    Fs::mount(wrap(dev), settings.engine).map_err(|e| format!("cannot mount {}: {e}", image.display()))
}

/// Creates `/name`, or truncates it to 0 if it exists; returns its inode
/// (holding one lookup reference).
fn create_or_truncate(fs: &Fs, name: &[u8]) -> Result<u64, FsError> {
    let ctx = Ctx::root();
    match fs.lookup(cairn_format::ROOT_INO, name) {
        Ok(a) => {
            fs.files().setattr(&ctx, a.ino, &SetAttr { size: Some(0), ..Default::default() })?;
            Ok(a.ino)
        }
        Err(FsError::Errno(libc::ENOENT)) => {
            Ok(fs.names().mknod(&ctx, cairn_format::ROOT_INO, name, libc::S_IFREG | 0o644, 0)?.ino)
        }
        Err(e) => Err(e),
    }
}

struct RunResult {
    write: Duration,
    fsync: Duration,
    bytes: u64,
}

/// One dd: truncate/create, `count` writes of `bs` bytes, optional fsync.
fn one_run(fs: &Fs, a: &DdArgs<'_>, rng: &mut XorShift, buf: &mut [u8]) -> Result<RunResult, String> {
    let err = |what: &str, e: FsError| format!("{what} /{}: {e}", a.name);
    let t = Instant::now();
    let ino = create_or_truncate(fs, a.name.as_bytes()).map_err(|e| err("create", e))?;
    let mut write = t.elapsed();
    let mut bytes = 0u64;
    for i in 0..a.count {
        rng.fill(buf);
        let t = Instant::now();
        let mut done = 0usize;
        while done < buf.len() {
            let n = fs.files().write(ino, i * a.bs + done as u64, &buf[done..]).map_err(|e| err("write", e))?;
            if n == 0 {
                return Err(format!("write /{}: no progress (file system full?)", a.name));
            }
            done += n as usize;
        }
        write += t.elapsed();
        bytes += done as u64;
    }
    let t = Instant::now();
    if a.fsync {
        fs.files().fsync(ino, false).map_err(|e| err("fsync", e))?;
    }
    let fsync = t.elapsed();
    fs.inodes().forget(ino, 1);
    Ok(RunResult { write, fsync, bytes })
}

/// Runs `cairn-bench-driver dd`.
pub fn run(a: &DdArgs<'_>) -> Result<(), String> {
    if a.bs == 0 || a.bs > 1 << 30 {
        return Err("--bs must be between 1 byte and 1 GiB".into());
    }
    if a.name.is_empty() || a.name.contains('/') {
        return Err(format!("--path {:?}: a name in the root directory, without '/'", a.name));
    }
    let t = Instant::now();
    let fs = mount(a.image, a.options)?;
    let mount_seconds = t.elapsed().as_secs_f64();
    let at_mount = alloc_counters(&fs);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut buf = vec![0u8; a.bs as usize];
    let mut runs = Vec::new();
    let mut before = at_mount.clone();
    let mut total = 0.0;
    let mut failed = None;
    for i in 1..=a.repeat.max(1) {
        match one_run(&fs, a, &mut rng, &mut buf) {
            Ok(r) => {
                let after = alloc_counters(&fs);
                let secs = (r.write + r.fsync).as_secs_f64();
                total += secs;
                eprintln!("{}", summary(i, r.bytes, secs, &before, &after));
                runs.push(json!({
                    "seconds": secs,
                    "write_seconds": r.write.as_secs_f64(),
                    "fsync_seconds": r.fsync.as_secs_f64(),
                    "bytes": r.bytes,
                    "mib_per_s": r.bytes as f64 / (1 << 20) as f64 / secs.max(1e-9),
                    "alloc": as_json(&after),
                }));
                before = after;
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let end = alloc_counters(&fs);
    let t = Instant::now();
    let done = unmount_after(&fs, failed.map_or(Ok(()), Err));
    let unmount_seconds = t.elapsed().as_secs_f64();
    done?;
    let doc = json!({
        "image": a.image.display().to_string(),
        "name": a.name,
        "bs": a.bs,
        "count": a.count,
        "fsync": a.fsync,
        "options": a.options,
        "mount_seconds": mount_seconds,
        "unmount_seconds": unmount_seconds,
        "seconds": total,
        "alloc_at_mount": as_json(&at_mount),
        "runs": runs,
        "alloc": as_json(&end),
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_fills_every_byte_and_moves_on() {
        let mut r = XorShift(1);
        let mut a = vec![0u8; 4099];
        r.fill(&mut a);
        let mut b = vec![0u8; 4099];
        r.fill(&mut b);
        assert_ne!(a, b);
        assert!(a[4090..].iter().any(|&x| x != 0), "the tail of an odd-sized buffer is filled");
    }

    #[test]
    fn missing_counters_print_as_a_dash() {
        let before: BTreeMap<String, u64> = [("alloc.calls".to_string(), 3)].into();
        let after: BTreeMap<String, u64> = [("alloc.calls".to_string(), 10)].into();
        let s = summary(1, 2 << 20, 0.5, &before, &after);
        assert!(s.contains("alloc.calls 7"), "{s}");
        assert!(s.contains("mb reqs - goal_hits -"), "{s}");
        assert!(s.contains("useless_loops cr0..3 -/-/-/-"), "{s}");
    }
}
