//! Crash-point test: a workload runs on a recording device; every crash
//! state (each flush prefix, plus random subsets and torn writes of the writes
//! in flight) must mount, replay, and show exactly the state of the last
//! durable commit or of the one in flight — never a mix, never less.

use cairn_core::crashdev::{CrashPlan, Op, RecordingDevice};
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Ctx, Fs, MountOptions};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

type Snapshot = BTreeMap<String, (u32, Vec<u8>, Vec<u8>)>;
/// One step of a workload.
type Step = Box<dyn Fn(&Fs)>;

fn opts() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), ..Default::default() }
}

/// The whole tree: path -> (mode, content or target, xattr list).
fn snapshot(fs: &Fs) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![(1u64, String::new())];
    while let Some((dir, path)) = stack.pop() {
        let mut ents = Vec::new();
        fs.readdir(dir, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                ents.push(e.clone());
            }
            true
        })
        .expect("readdir");
        for e in ents {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.lookup(dir, &e.name).expect("lookup of a listed name");
            let body = match a.mode & libc::S_IFMT {
                libc::S_IFREG => fs.read(a.ino, 0, a.size as u32).expect("read"),
                libc::S_IFLNK => fs.readlink(a.ino).expect("readlink"),
                libc::S_IFDIR => {
                    stack.push((a.ino, p.clone()));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            let xa = fs.listxattr(a.ino).expect("listxattr");
            out.insert(p, (a.mode, body, xa));
        }
    }
    out
}

/// Runs the workload, syncing after each step; returns the recorded plan, the
/// snapshot after each sync and the op-log length at each sync.
fn record(steps: &[Step]) -> (CrashPlan, Vec<Snapshot>, Vec<usize>) {
    let mem = MemDevice::new(16 << 20);
    format(&mem, &MkfsOptions { journal_blocks: Some(256), ..Default::default() }, &mut |_, _| {}).unwrap();
    let rec = Arc::new(RecordingDevice::new(mem.snapshot()));
    let d: Arc<dyn BlockDevice> = rec.clone();
    let fs = Fs::mount(d, opts()).unwrap();
    let mut snaps = vec![snapshot(&fs)];
    let mut marks = vec![rec.ops().len()];
    for step in steps {
        step(&fs);
        fs.sync_fs().unwrap();
        snaps.push(snapshot(&fs));
        marks.push(rec.ops().len());
    }
    fs.unmount().unwrap();
    (rec.plan(), snaps, marks)
}

fn check_all(
    plan: &CrashPlan,
    snaps: &[Snapshot],
    marks: &[usize],
    rng: &mut rand::rngs::StdRng,
    per_flush: usize,
) -> usize {
    let flushes = plan.flushes();
    let mut tried = 0;
    let mut points: Vec<usize> = flushes.iter().map(|f| f + 1).collect();
    points.insert(0, marks[0]);
    points.push(plan.ops.len());
    for (pi, &upto) in points.iter().enumerate() {
        if upto < marks[0] {
            continue;
        }
        let next_flush = points.get(pi + 1).map_or(plan.ops.len(), |n| n.saturating_sub(1));
        let inflight: Vec<usize> = (upto..next_flush).filter(|i| matches!(plan.ops[*i], Op::Write(..))).collect();
        let k = marks.iter().rposition(|m| *m <= upto).unwrap();
        for trial in 0..=per_flush {
            let (extra, torn) = if trial == 0 || inflight.is_empty() {
                (Vec::new(), None)
            } else {
                let ex: Vec<usize> = inflight.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
                let torn = if rng.gen_bool(0.3) && !ex.is_empty() {
                    let t = ex[rng.gen_range(0..ex.len())];
                    Some((t, 512 * rng.gen_range(0..8)))
                } else {
                    None
                };
                (ex, torn)
            };
            let img = Arc::new(plan.image(upto, &extra, torn));
            let d: Arc<dyn BlockDevice> = img.clone();
            let fs = Fs::mount(d, opts())
                .unwrap_or_else(|e| panic!("crash state at op {upto} (+{extra:?}, torn {torn:?}) does not mount: {e}"));
            let got = snapshot(&fs);
            let ok = got == snaps[k] || snaps.get(k + 1).is_some_and(|s| *s == got);
            assert!(ok, "crash state at op {upto} (+{extra:?}, torn {torn:?}) matches neither commit {k} nor {}:\n{got:#?}\nexpected\n{:#?}", k + 1, snaps[k]);
            fs.unmount().unwrap();
            tried += 1;
        }
    }
    tried
}

#[test]
fn named_workloads_survive_every_crash_point() {
    let c = Ctx::root();
    let steps: Vec<Step> = vec![
        Box::new(move |fs: &Fs| {
            let f = fs.mknod(&c, 1, b"a", libc::S_IFREG | 0o644, 0).unwrap();
            fs.write(f.ino, 0, &[1u8; 5000]).unwrap();
        }),
        Box::new(move |fs: &Fs| {
            // rename over: replace "a" atomically with a new file
            let t = fs.mknod(&c, 1, b"a.tmp", libc::S_IFREG | 0o644, 0).unwrap();
            fs.write(t.ino, 0, &[2u8; 7000]).unwrap();
            fs.rename(1, b"a.tmp", 1, b"a", 0).unwrap();
        }),
        Box::new(move |fs: &Fs| {
            let a = fs.lookup(1, b"a").unwrap();
            fs.write(a.ino, 7000, &[3u8; 3000]).unwrap();
            fs.link(a.ino, 1, b"a-link").unwrap();
            fs.setxattr(a.ino, b"user.x", b"value", 0).unwrap();
        }),
        Box::new(move |fs: &Fs| {
            let d = fs.mkdir(&c, 1, b"d", 0o755).unwrap();
            for i in 0..300 {
                fs.mknod(&c, d.ino, format!("entry-{i}").as_bytes(), libc::S_IFREG | 0o600, 0).unwrap();
            }
            fs.symlink(&c, d.ino, b"s", b"../a").unwrap();
        }),
        Box::new(move |fs: &Fs| {
            let a = fs.lookup(1, b"a").unwrap();
            fs.setattr(&c, a.ino, &cairn_core::SetAttr { size: Some(100), ..Default::default() }).unwrap();
            fs.unlink(1, b"a-link").unwrap();
            let d = fs.lookup(1, b"d").unwrap();
            for i in (0..300).step_by(2) {
                fs.unlink(d.ino, format!("entry-{i}").as_bytes()).unwrap();
            }
        }),
    ];
    let (plan, snaps, marks) = record(&steps);
    if std::env::var("CRASH_DUMP").is_ok() {
        for (i, o) in plan.ops.iter().enumerate() {
            match o {
                Op::Write(off, d) => eprintln!("{i}: write blk {} +{} len {}", off / 4096, off % 4096, d.len()),
                Op::Flush => eprintln!("{i}: flush"),
            }
        }
        eprintln!("marks {marks:?}");
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let n = check_all(&plan, &snaps, &marks, &mut rng, 12);
    eprintln!("crash harness: {n} crash states checked");
    assert!(n > 50);
}

/// One random step of the model workloads.
fn random_step(rng: &mut rand::rngs::StdRng) -> Step {
    let c = Ctx::root();
    let n: u8 = rng.gen_range(0..12);
    let m: u8 = rng.gen_range(0..12);
    let off: u64 = rng.gen_range(0..40_000);
    let len: usize = rng.gen_range(1..20_000);
    let v: u8 = rng.gen();
    let kind: u8 = rng.gen_range(0..9);
    let name = move |x: u8| format!("f{x}").into_bytes();
    Box::new(move |fs: &Fs| match kind {
        0 | 1 => {
            let _ = fs.mknod(&c, 1, &name(n), libc::S_IFREG | 0o644, 0);
        }
        2 | 3 => {
            if let Ok(a) = fs.lookup(1, &name(n)) {
                if a.mode & libc::S_IFMT == libc::S_IFREG {
                    fs.write(a.ino, off, &vec![v; len]).unwrap();
                }
            }
        }
        4 => {
            let _ = fs.unlink(1, &name(n));
        }
        5 => {
            let _ = fs.rename(1, &name(n), 1, &name(m), 0);
        }
        6 => {
            if let Ok(a) = fs.lookup(1, &name(n)) {
                if a.mode & libc::S_IFMT == libc::S_IFREG {
                    fs.setattr(&c, a.ino, &cairn_core::SetAttr { size: Some(off / 2), ..Default::default() }).unwrap();
                }
            }
        }
        7 => {
            if let Ok(a) = fs.lookup(1, &name(n)) {
                let _ = fs.setxattr(a.ino, format!("user.k{m}").as_bytes(), &vec![v; len % 300], 0);
            }
        }
        _ => {
            if let Ok(a) = fs.lookup(1, &name(n)) {
                if a.mode & libc::S_IFMT == libc::S_IFREG {
                    let _ = fs.link(a.ino, 1, &name(m));
                }
            }
        }
    })
}

/// Random workloads (the model's operation mix), each step followed by a
/// sync: at least `CAIRN_CRASH_STATES` (default 10,000) crash states in all.
#[test]
fn random_workloads_survive_every_crash_point() {
    let want: usize = std::env::var("CAIRN_CRASH_STATES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let mut total = 0;
    let mut seed = 0u64;
    while total < want {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let steps: Vec<Step> = (0..rng.gen_range(4..16)).map(|_| random_step(&mut rng)).collect();
        let (plan, snaps, marks) = record(&steps);
        total += check_all(&plan, &snaps, &marks, &mut rng, 8);
        seed += 1;
    }
    eprintln!("crash harness: {total} crash states from {seed} random workloads, none inconsistent");
}
