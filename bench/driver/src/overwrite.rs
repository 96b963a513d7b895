//! `cairn-bench-driver overwrite`: seed 004's fio job against the engine, without
//! FUSE.
//!
//! Through a mount, a 4 KiB write costs a FUSE round trip (tens of µs here)
//! whichever path the engine takes; this tool shows the engine alone, as
//! the seed showed ext4 alone on pmem. It opens the image as `cairn mount`
//! does (options parsed by cairn-fuse's `-o` parser, so
//! `-o overwrite_fastpath=0` measures the journaled path), creates `--files`
//! files of `--size` bytes in all in `/overwrite` and writes them in full
//! (so every later write is an overwrite), commits, then for each job count
//! of `--jobs` runs that many threads for `--seconds`: each picks a file at
//! random (fio's `file_service_type=random`) and a 4 KiB-aligned block at
//! random (`norandommap`) and writes `--bs` bytes there with `FileIo::write`.
//! A ramp of `--ramp` seconds runs first and is not counted.
//!
//! Output: JSON on stdout, `{options, files, size, bs, runs: [{jobs, writes,
//! seconds, iops, counters: {overwrite.*, tx.handles, journal.commits}}]}`
//! (counter values are differences over the whole run, ramp included), and
//! one line per job count on stderr.

use crate::dd::{mount, unmount_after, XorShift};
use cairn_core::{Ctx, Fs, FsError};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `cairn-bench-driver overwrite`.
pub struct OverwriteArgs<'a> {
    pub image: &'a Path,
    pub files: u32,
    pub size: u64,
    pub bs: u64,
    pub jobs: Vec<u32>,
    pub seconds: f64,
    pub ramp: f64,
    pub options: &'a [String],
}

fn counters(fs: &Fs) -> BTreeMap<String, u64> {
    fs.stats()
        .into_iter()
        .filter(|(k, _)| k.starts_with("overwrite.") || k == "tx.handles" || k == "journal.commits")
        .collect()
}

fn err(what: &str, e: FsError) -> String {
    format!("{what}: {e}")
}

/// Creates the directory and the files, each written in full; returns their inodes.
fn prepare(fs: &Fs, a: &OverwriteArgs<'_>) -> Result<Vec<u64>, String> {
    let ctx = Ctx::root();
    let root = cairn_format::ROOT_INO;
    let dir = match fs.lookup(root, b"overwrite") {
        Ok(d) => d.ino,
        Err(FsError::Errno(libc::ENOENT)) => {
            fs.names().mkdir(&ctx, root, b"overwrite", 0o755).map_err(|e| err("mkdir", e))?.ino
        }
        Err(e) => return Err(err("lookup /overwrite", e)),
    };
    let per_file = a.size / u64::from(a.files);
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut buf = vec![0u8; 1 << 20];
    let mut inos = Vec::new();
    for i in 0..a.files {
        let name = format!("f.{i}");
        let ino = match fs.lookup(dir, name.as_bytes()) {
            Ok(x) => x.ino,
            Err(_) => {
                fs.names()
                    .mknod(&ctx, dir, name.as_bytes(), libc::S_IFREG | 0o644, 0)
                    .map_err(|e| err("create", e))?
                    .ino
            }
        };
        let mut off = 0;
        while off < per_file {
            let n = (per_file - off).min(buf.len() as u64) as usize;
            rng.fill(&mut buf[..n]);
            let w = fs.files().write(ino, off, &buf[..n]).map_err(|e| err("write", e))?;
            if w == 0 {
                return Err("write: no progress (file system full?)".into());
            }
            off += u64::from(w);
        }
        inos.push(ino);
    }
    fs.files().sync_fs().map_err(|e| err("sync", e))?;
    Ok(inos)
}

/// Runs `jobs` writer threads until `stop`; counts writes while `counting`.
fn run_jobs(fs: &Arc<Fs>, inos: &Arc<Vec<u64>>, a: &OverwriteArgs<'_>, jobs: u32) -> Result<(u64, f64), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let blocks = (a.size / u64::from(a.files) / a.bs).max(1);
    let mut handles = Vec::new();
    for j in 0..jobs {
        let (fs, inos, stop, counting, writes) =
            (fs.clone(), inos.clone(), stop.clone(), counting.clone(), writes.clone());
        let bs = a.bs;
        handles.push(std::thread::spawn(move || -> Result<(), String> {
            let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ (u64::from(j) + 1).wrapping_mul(0x1000_0000_01b3));
            let mut buf = vec![0u8; bs as usize];
            rng.fill(&mut buf);
            let mut pick = [0u8; 16];
            while !stop.load(Ordering::Relaxed) {
                rng.fill(&mut pick);
                let f = u64::from_le_bytes(pick[..8].try_into().unwrap()) % inos.len() as u64;
                let b = u64::from_le_bytes(pick[8..].try_into().unwrap()) % blocks;
                fs.files().write(inos[f as usize], b * bs, &buf).map_err(|e| err("write", e))?;
                if counting.load(Ordering::Relaxed) {
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(a.ramp));
    counting.store(true, Ordering::Relaxed);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    counting.store(false, Ordering::Relaxed);
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().map_err(|_| "a writer thread panicked".to_string())??;
    }
    Ok((writes.load(Ordering::Relaxed), secs))
}

/// Runs `cairn-bench-driver overwrite`.
pub fn run(a: &OverwriteArgs<'_>) -> Result<(), String> {
    if a.files == 0 || a.bs == 0 || a.bs > 1 << 20 || a.size < u64::from(a.files) * a.bs {
        return Err("need --files >= 1, 1 <= --bs <= 1M and --size of at least one block per file".into());
    }
    if a.jobs.is_empty() || a.jobs.iter().any(|&j| j == 0 || j > 256) || a.seconds <= 0.0 || a.ramp < 0.0 {
        return Err("need --jobs between 1 and 256, --seconds > 0 and --ramp >= 0".into());
    }
    let fs = mount(a.image, a.options)?;
    let inos = match prepare(&fs, a) {
        Ok(v) => Arc::new(v),
        Err(e) => {
            let _ = fs.unmount();
            return Err(e);
        }
    };
    let mut runs = Vec::new();
    let mut failed = None;
    for &jobs in &a.jobs {
        let before = counters(&fs);
        match run_jobs(&fs, &inos, a, jobs) {
            Ok((n, secs)) => {
                let after = counters(&fs);
                let d: Map<String, Value> =
                    after.iter().map(|(k, v)| (k.clone(), json!(v.saturating_sub(before[k])))).collect();
                let iops = n as f64 / secs;
                eprintln!(
                    "{jobs} job(s): {iops:.0} IOPS ({n} writes in {secs:.2} s; fast-path writes {}, journaled {})",
                    d.get("overwrite.fast_writes").cloned().unwrap_or_default(),
                    d.get("overwrite.journaled_writes").cloned().unwrap_or_default()
                );
                runs.push(json!({"jobs": jobs, "writes": n, "seconds": secs, "iops": iops, "counters": d}));
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    unmount_after(&fs, failed.map_or(Ok(()), Err))?;
    let doc = json!({
        "image": a.image.display().to_string(),
        "options": a.options,
        "files": a.files,
        "size": a.size,
        "bs": a.bs,
        "ramp": a.ramp,
        "runs": runs,
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    Ok(())
}
