//! Crash-point test: a workload runs on a recording device; every crash
//! state (each flush prefix, plus random subsets and torn writes of the writes
//! in flight) must mount, replay, and show exactly the state of the last
//! durable commit or of the one in flight — never a mix, never less — except
//! that bytes of in-place overwrites in flight may already show (see
//! [`acceptable`]). Before it is mounted, every crash state must also pass the
//! independent checker (`cairn-fsck`, which replays the journal in memory
//! itself) with no problem.

use cairn_core::crashdev::{CrashPlan, Op, OverlayDevice, RecordingDevice};
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

/// A crash state as fsck sees it: the overlay's bytes, read in place (no
/// copy of the whole image per state).
struct FsckView<'a>(&'a OverlayDevice);

impl cairn_fsck::ImageSource for FsckView<'_> {
    fn size(&self) -> u64 {
        self.0.size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.0.read_at(buf, off)
    }
}

/// Runs fsck on the crash state `img` (not yet mounted); panics with the
/// problems found and `what` (the crash state) unless it is clean. Returns
/// whether fsck had to replay journal records first.
fn fsck_clean(img: &OverlayDevice, what: &str) -> bool {
    let report = cairn_fsck::check_image(&FsckView(img), &cairn_fsck::Options::default())
        .unwrap_or_else(|e| panic!("{what}: fsck cannot check it: {e}"));
    if !report.is_clean() {
        let problems: Vec<String> = report.problems.iter().map(|p| format!("  [{}] {}", p.pass, p.message)).collect();
        panic!(
            "{what}: fsck finds {} problem(s):\n{}{}",
            report.errors_left(),
            problems.join("\n"),
            if report.problems_dropped > 0 {
                format!("\n  ... and {} more", report.problems_dropped)
            } else {
                String::new()
            }
        );
    }
    report.journal_records_replayed > 0
}

/// Whether `got` is a state a crash may leave when commit `k` is the last
/// one known durable: exactly commit `k` or `k + 1`, or either of them with
/// some bytes of the commit after it in their regular files (`k + 1` too: it
/// is durable from its commit block's barrier on, before the sync that makes
/// it returns, so the next step's overwrites can follow it). Overwrites of
/// blocks already allocated and written go home in place before the commit
/// that records them (the overwrite path of `file.rs`, as in ext4's
/// data=ordered), so under commit `j`'s metadata a file may show any part of
/// an overwrite in flight for `j + 1`; everything else — names, modes, sizes,
/// xattrs, the data of newly mapped blocks — must be all of one commit.
fn acceptable(got: &Snapshot, snaps: &[Snapshot], k: usize) -> bool {
    got == &snaps[k]
        || snaps.get(k + 1) == Some(got)
        || (k..=k + 1).any(|j| snaps.get(j).is_some_and(|old| early_overwrites(got, old, snaps.get(j + 1))))
}

/// Whether `got` is `old` with, in its regular files, some bytes of the
/// same files (same path, same offset) in `new`.
fn early_overwrites(got: &Snapshot, old: &Snapshot, new: Option<&Snapshot>) -> bool {
    let Some(new) = new else { return false };
    got.len() == old.len()
        && got.iter().zip(old).all(|((path, (mode, body, xattrs)), (old_path, (old_mode, old_body, old_xattrs)))| {
            let overwritten = || {
                let new_body = new.get(path).map_or(&[][..], |n| &n.1[..]);
                mode & libc::S_IFMT == libc::S_IFREG
                    && body.iter().enumerate().all(|(i, b)| old_body[i] == *b || new_body.get(i) == Some(b))
            };
            path == old_path
                && mode == old_mode
                && xattrs == old_xattrs
                && body.len() == old_body.len()
                && (body == old_body || overwritten())
        })
}

/// What [`check_all`] did.
#[derive(Default)]
struct Checked {
    /// Crash states fsck'd clean, mounted and compared.
    states: usize,
    /// Of those, the ones in which fsck replayed journal records.
    replayed: usize,
}

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

/// Checks the crash states of one recorded workload (named `label` in
/// failures): each is fsck'd, mounted and compared.
fn check_all(
    label: &str,
    plan: &CrashPlan,
    snaps: &[Snapshot],
    marks: &[usize],
    rng: &mut rand::rngs::StdRng,
    per_flush: usize,
) -> Checked {
    let flushes = plan.flushes();
    let mut done = Checked::default();
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
            let what = format!("{label}: crash state at op {upto} (+{extra:?}, torn {torn:?})");
            done.replayed += usize::from(fsck_clean(&img, &what));
            let d: Arc<dyn BlockDevice> = img.clone();
            let fs = Fs::mount(d, opts()).unwrap_or_else(|e| panic!("{what} does not mount: {e}"));
            let got = snapshot(&fs);
            let ok = acceptable(&got, snaps, k);
            assert!(ok, "{what} matches neither commit {k} nor {}:\n{got:#?}\nexpected\n{:#?}", k + 1, snaps[k]);
            fs.unmount().unwrap();
            done.states += 1;
        }
    }
    done
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
    let n = check_all("named workload", &plan, &snaps, &marks, &mut rng, 12);
    eprintln!(
        "crash harness: {} crash states of the named workload, each fsck'd clean ({} after fsck replayed the journal) and mounted consistent",
        n.states, n.replayed
    );
    assert!(n.states > 50);
    assert!(n.replayed > 0, "no crash state left the journal to replay");
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
    let mut total = Checked::default();
    let mut seed = 0u64;
    while total.states < want {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let steps: Vec<Step> = (0..rng.gen_range(4..16)).map(|_| random_step(&mut rng)).collect();
        let (plan, snaps, marks) = record(&steps);
        let n = check_all(&format!("random workload seed {seed}"), &plan, &snaps, &marks, &mut rng, 8);
        total.states += n.states;
        total.replayed += n.replayed;
        seed += 1;
    }
    eprintln!(
        "crash harness: {} crash states from {seed} random workloads, each fsck'd clean ({} after fsck replayed the journal) and mounted consistent",
        total.states, total.replayed
    );
}
