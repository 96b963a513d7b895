//! Crash-point test: a workload runs on a recording device; every crash
//! state (each flush prefix, plus random subsets and torn writes of the writes
//! in flight) must mount, replay, and show exactly the state of the last
//! durable commit or of the one in flight — never a mix, never less — except
//! that bytes of in-place overwrites in flight may already show (see
//! [`acceptable`]). Before it is mounted, every crash state must also pass the
//! independent checker (`cairn-fsck`, which replays the journal in memory
//! itself) with no problem.
//!
//! A configuration may make the image encrypted (`Config::encrypted`, see
//! `crash/encrypted.rs`): the recorder then sits beneath the encrypting
//! device, and each crash state is decrypted ([`Recording::state`]) before
//! fsck and mount see it.

use cairn_core::crashdev::{CrashPlan, Op, OverlayDevice, RecordingDevice};
use cairn_core::crypt::{self, CryptDevice, Discards};
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::fsck_source::DeviceSource;
use cairn_core::mkfs::MKFS_MIN_JOURNAL_BLOCKS;
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Ctx, Fs, MountOptions};
use cairn_format::journal::JournalRegion;
use cairn_format::superblock::{Superblock, SB_SIZE};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod damage;
mod encrypted;

type Snapshot = BTreeMap<String, (u32, Vec<u8>, Vec<u8>)>;
/// One operation of a workload.
type Action = Box<dyn Fn(&Fs)>;
/// One step of a workload: operations, then a sync.
type Step = Vec<Action>;

/// Runs fsck on the crash state `img` (not yet mounted); panics with the
/// problems found and `what` (the crash state) unless it is clean. Returns
/// whether fsck had to replay journal records first.
fn fsck_clean(img: &dyn BlockDevice, what: &str) -> bool {
    fsck_clean_but(img, what, &[])
}

/// As [`fsck_clean`], with the problems of codes `allowed` let through.
fn fsck_clean_but(img: &dyn BlockDevice, what: &str, allowed: &[cairn_fsck::Code]) -> bool {
    // The overlay's bytes, read in place (no copy of the whole image per state).
    let report = cairn_fsck::check_image(&DeviceSource(img), &cairn_fsck::Options::default())
        .unwrap_or_else(|e| panic!("{what}: fsck cannot check it: {e}"));
    if report.problems.iter().any(|p| !allowed.contains(&p.code)) {
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

/// A configuration of the harness: the image the workloads run on and how
/// it is mounted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    name: &'static str,
    block_size: u32,
    pub(crate) journal_blocks: u64,
    cache_blocks: usize,
    /// Snapshot after every operation, not only after each step's sync: with
    /// a journal this small, a handle that finds no room commits first (and
    /// the backend commits once dirty metadata passes half a record), so a
    /// commit may fall between two operations of a step and a crash state
    /// may show any whole operation of it.
    per_op: bool,
    /// Empty files created in `/bulk` before recording starts: enough
    /// inode-table and directory blocks that walking the tree (each
    /// snapshot) overflows a tiny cache, so the workload's buffers are
    /// evicted and read back between its commits.
    preload: usize,
    /// Each flush takes this long (µs): the backend's commits stay in
    /// flight while the workload goes on, so a small journal fills.
    slow_flush_us: u64,
    /// Delayed logging (`-o delaylog`): chunk logging and deferred home
    /// writes; off, whole blocks go to the log and home at every commit.
    delaylog: bool,
    /// mkfs's group size (`None`: the largest).
    blocks_per_group: Option<u32>,
    /// mkfs's size in MiB, on the 16 MiB device (`None`: all of it).
    fs_mib: Option<u64>,
    /// fsck problems a crash state may show (a grow's backup copies,
    /// rewritten after it commits, may still name the old size).
    fsck_allows: &'static [cairn_fsck::Code],
    /// The image is encrypted (`crypt::create`, as `cairn mkfs --encrypt`):
    /// the workload writes through a `CryptDevice` over the recorder, and
    /// each crash state is opened with the key from its own header.
    encrypted: bool,
}

/// The default configuration: mkfs's default journal (1024 blocks for these
/// small images), the default cache.
const NORMAL: Config = Config {
    name: "normal",
    block_size: 4096,
    journal_blocks: 1024,
    cache_blocks: 65536,
    per_op: false,
    preload: 0,
    slow_flush_us: 0,
    delaylog: true,
    blocks_per_group: None,
    fs_mib: None,
    fsck_allows: &[],
    encrypted: false,
};

/// Delayed logging off (`-o delaylog=0`): whole-block records, home writes
/// and a tail move at every commit.
const NO_DELAYLOG: Config = Config { name: "delaylog=0", delaylog: false, ..NORMAL };

/// A journal larger than group 0 (`INCOMPAT_JOURNAL_GROUPS`): 1 KiB blocks
/// and the smallest groups (256 blocks), so that the asked 300 blocks fill
/// group 0's room (229 blocks, less than mkfs's smallest journal) and one
/// more group past its metadata: 479 blocks. Operation by
/// operation, with slow flushes, as the tiny journal. The preload's records
/// move the log's head near the end of group 0's part, so the workload's
/// records cross into the next group's (the named workload asserts it).
const JOURNAL_GROUPS: Config = Config {
    name: "journal across groups",
    block_size: 1024,
    journal_blocks: 300,
    blocks_per_group: Some(256),
    per_op: true,
    slow_flush_us: 300,
    preload: 600,
    ..NORMAL
};

/// The smallest cache the engine allows (64 blocks): buffers are evicted
/// during every commit.
const TINY_CACHE: Config =
    Config { cache_blocks: 64, name: "tiny cache", block_size: 1024, journal_blocks: 1024, preload: 600, ..NORMAL };

/// The smallest journal mkfs makes ([`MKFS_MIN_JOURNAL_BLOCKS`], 256
/// blocks, about 78 credits per checkpoint): commits inside steps, restarts
/// and log-full waits. The normal configuration uses mkfs's default journal.
pub(crate) fn tiny_journal() -> Config {
    Config { name: "tiny journal", journal_blocks: MKFS_MIN_JOURNAL_BLOCKS, per_op: true, slow_flush_us: 300, ..NORMAL }
}

/// Whether a fresh image with a `journal_blocks`-block journal mounts and
/// takes the workloads' operations: files with data and xattrs, a rename
/// over (freeing) such a file, a hard link, a truncate, unlinks.
fn journal_usable(block_size: u32, journal_blocks: u64) -> bool {
    let mem = MemDevice::new(16 << 20);
    let mk = MkfsOptions { block_size, journal_blocks: Some(journal_blocks), ..Default::default() };
    if format(&mem, &mk, &mut |_, _| {}).is_err() {
        return false;
    }
    let d: Arc<dyn BlockDevice> = Arc::new(mem);
    let Ok(fs) = Fs::mount(d, opts(&NORMAL)) else { return false };
    let c = Ctx::root();
    let file = |name: &[u8]| -> cairn_core::Result<u64> {
        let a = fs.names().mknod(&c, 1, name, libc::S_IFREG | 0o644, 0)?;
        fs.files().write(a.ino, 0, &[1u8; 20_000])?;
        Ok(a.ino)
    };
    let ok = (|| -> cairn_core::Result<()> {
        let a = file(b"a")?;
        fs.setxattr(a, b"user.x", &[2u8; 200], 0)?;
        let b = file(b"b")?;
        fs.setxattr(b, b"user.y", &[3u8; 200], 0)?;
        fs.names().rename(1, b"b", 1, b"a", 0)?;
        fs.names().link(b, 1, b"c")?;
        fs.files().setattr(&c, b, &cairn_core::SetAttr { size: Some(100), ..Default::default() })?;
        fs.names().unlink(1, b"c")?;
        fs.names().unlink(1, b"a")
    })()
    .is_ok();
    fs.unmount().unwrap();
    ok
}

/// The smallest journal mkfs makes takes every operation of the workloads,
/// with 4 KiB and 1 KiB blocks; a smaller one is refused by mkfs.
#[test]
fn min_journal_is_usable() {
    assert!(journal_usable(4096, MKFS_MIN_JOURNAL_BLOCKS));
    assert!(journal_usable(1024, MKFS_MIN_JOURNAL_BLOCKS));
    let mem = MemDevice::new(16 << 20);
    let mk = MkfsOptions { journal_blocks: Some(MKFS_MIN_JOURNAL_BLOCKS - 1), ..Default::default() };
    assert!(format(&mem, &mk, &mut |_, _| {}).is_err(), "mkfs refuses a journal below the minimum");
}

/// Whether `got` is a state a crash may leave: snapshot `j` for some `j` in
/// `lo..=hi`, or such a snapshot with, in its regular files, some bytes of
/// later snapshots up to `hi_bytes`. Returns the smallest such `j`.
///
/// `lo` is the newest snapshot known durable (a sync that returned before
/// the crash point, or a crash state of an earlier flush). `hi` is the
/// newest snapshot whose commit block may be in the state: a commit's
/// record is written after the snapshot of its buffers and its commit block
/// after a barrier, so it covers only operations that started before the
/// state's last barrier. Overwrites of blocks already allocated and written
/// go home in place before the commit that records them (the overwrite path
/// of `file.rs`, as in ext4's data=ordered), so under commit `j`'s metadata
/// a file may show any part of an overwrite issued before the crash
/// (`hi_bytes`: operations that started before the last write of the state);
/// everything else — names, modes, sizes, xattrs, the data of newly mapped
/// blocks — must be exactly that of one snapshot, i.e. of a whole
/// operation (or step).
fn acceptable(got: &Snapshot, snaps: &[Snapshot], lo: usize, hi: usize, hi_bytes: usize) -> Option<usize> {
    (lo..=hi.min(snaps.len() - 1)).find(|&j| {
        got == &snaps[j] || early_overwrites(got, &snaps[j], &snaps[j + 1..=hi_bytes.min(snaps.len() - 1).max(j)])
    })
}

/// Whether `got` is `old` with, in its regular files, some bytes of the
/// same files (same path, same offset) in one of `newer`.
fn early_overwrites(got: &Snapshot, old: &Snapshot, newer: &[Snapshot]) -> bool {
    !newer.is_empty()
        && got.len() == old.len()
        && got.iter().zip(old).all(|((path, (mode, body, xattrs)), (old_path, (old_mode, old_body, old_xattrs)))| {
            let overwritten = || {
                let new_bodies: Vec<&[u8]> = newer.iter().map(|n| n.get(path).map_or(&[][..], |n| &n.1[..])).collect();
                mode & libc::S_IFMT == libc::S_IFREG
                    && body
                        .iter()
                        .enumerate()
                        .all(|(i, b)| old_body[i] == *b || new_bodies.iter().any(|n| n.get(i) == Some(b)))
            };
            path == old_path
                && mode == old_mode
                && xattrs == old_xattrs
                && body.len() == old_body.len()
                && (body == old_body || overwritten())
        })
}

/// Where `got` differs from `want`: paths missing or extra, and per file
/// its mode, xattrs, size and the byte ranges that differ (first ten).
fn describe_diff(got: &Snapshot, want: &Snapshot) -> String {
    let mut out = Vec::new();
    for p in want.keys().filter(|p| !got.contains_key(*p)) {
        out.push(format!("  {p}: missing"));
    }
    for (p, (mode, body, xattrs)) in got {
        let Some((wm, wb, wx)) = want.get(p) else {
            out.push(format!("  {p}: not expected"));
            continue;
        };
        if mode != wm || xattrs != wx || body.len() != wb.len() {
            out.push(format!(
                "  {p}: mode {mode:o} vs {wm:o}, xattrs {xattrs:?} vs {wx:?}, size {} vs {}",
                body.len(),
                wb.len()
            ));
        }
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < body.len().min(wb.len()) && ranges.len() < 10 {
            if body[i] != wb[i] {
                let s = i;
                while i < body.len().min(wb.len()) && body[i] != wb[i] {
                    i += 1;
                }
                ranges.push(format!("{s}..{i} (got {} want {})", body[s], wb[s]));
            }
            i += 1;
        }
        if !ranges.is_empty() {
            out.push(format!("  {p}: bytes differ at {}", ranges.join(", ")));
        }
    }
    if out.is_empty() {
        "  (identical)".into()
    } else {
        out.join("\n")
    }
}

/// What [`check_all`] did.
#[derive(Default)]
struct Checked {
    /// Crash states fsck'd clean, mounted and compared.
    states: usize,
    /// Of those, the ones in which fsck replayed journal records.
    replayed: usize,
}

/// The inode and dentry caches scale with the buffer cache: the tiny
/// cache's 64 blocks give room for about 64 inodes and 128 dentries, so
/// in-core inodes are dropped and read back between commits too.
fn opts(cfg: &Config) -> MountOptions {
    MountOptions {
        commit_interval: Duration::from_secs(3600),
        cache_blocks: cfg.cache_blocks,
        delaylog: cfg.delaylog,
        inode_cache_bytes: cfg.cache_blocks * 512,
        dentry_cache_bytes: cfg.cache_blocks * 256,
        ..Default::default()
    }
}

/// The engine's counters by name.
fn stats(fs: &Fs) -> BTreeMap<String, u64> {
    fs.stats().into_iter().collect()
}

/// The whole tree: path -> (mode, content or target, xattrs and values).
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
                libc::S_IFREG => fs.files().read(a.ino, 0, a.size as u32).expect("read"),
                libc::S_IFLNK => fs.readlink(a.ino).expect("readlink"),
                libc::S_IFDIR => {
                    stack.push((a.ino, p.clone()));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            // Names and values: "name\0" then the value, per attribute.
            let mut xa = Vec::new();
            for n in fs.listxattr(a.ino).expect("listxattr").split(|b| *b == 0).filter(|n| !n.is_empty()) {
                xa.extend_from_slice(n);
                xa.push(0);
                xa.extend(fs.getxattr(a.ino, n).expect("getxattr of a listed name"));
            }
            out.insert(p, (a.mode, body, xa));
        }
    }
    out
}

/// A recorded workload.
struct Recording {
    plan: CrashPlan,
    /// The tree after each unit (the start, then each step, or each
    /// operation if the configuration says `per_op`).
    snaps: Vec<Snapshot>,
    /// The op-log length when each unit was done (and snapshotted): the next
    /// unit's writes come after it.
    marks: Vec<usize>,
    /// Whether the unit ended with a sync (its state was durable at its mark).
    synced: Vec<bool>,
    /// The engine's counters before unmount.
    stats: BTreeMap<String, u64>,
    /// Whether the image is encrypted (its crash states are opened with
    /// [`encrypted::secret`]).
    encrypted: bool,
}

impl Recording {
    /// The crash state `img` (raw bytes) as the file system sees it: the
    /// overlay itself, or on an encrypted image the decrypting device over
    /// it, unlocked with the key from the state's own header.
    fn state(&self, img: OverlayDevice) -> Arc<dyn BlockDevice> {
        if self.encrypted {
            Arc::new(encrypted::open(img))
        } else {
            Arc::new(img)
        }
    }
}

/// The recorder under the device the file system runs on.
enum Recorder {
    Plain(Arc<RecordingDevice>),
    Encrypted(Arc<CryptDevice<RecordingDevice>>),
}

impl Recorder {
    fn rec(&self) -> &RecordingDevice {
        match self {
            Recorder::Plain(r) => r,
            Recorder::Encrypted(c) => c.inner(),
        }
    }
    /// The device the file system runs on.
    fn device(&self) -> Arc<dyn BlockDevice> {
        match self {
            Recorder::Plain(r) => r.clone(),
            Recorder::Encrypted(c) => c.clone(),
        }
    }
}

/// mkfs's options for `cfg`'s image.
fn mkfs_options(cfg: &Config) -> MkfsOptions {
    MkfsOptions {
        block_size: cfg.block_size,
        journal_blocks: Some(cfg.journal_blocks),
        blocks_per_group: cfg.blocks_per_group,
        size: cfg.fs_mib.map(|m| m << 20),
        ..Default::default()
    }
}

/// The groups whose part of the journal region the recording wrote (group
/// 0's part and, with `INCOMPAT_JOURNAL_GROUPS`, the next groups').
fn journal_groups_written(cfg: &Config, r: &Recording) -> std::collections::BTreeSet<u64> {
    let mem = MemDevice::new(16 << 20);
    format(&mem, &mkfs_options(cfg), &mut |_, _| {}).unwrap();
    let mut b = vec![0u8; SB_SIZE];
    mem.read_at(&mut b, 0).unwrap();
    let sb = Superblock::decode(&b, 16 << 20).unwrap();
    let region = JournalRegion::of(&sb);
    let bs = u64::from(cfg.block_size);
    let base = if cfg.encrypted { cairn_format::crypt_header::DATA_OFFSET } else { 0 };
    let mut groups = std::collections::BTreeSet::new();
    for op in &r.plan.ops {
        if let Op::Write(off, d) = op {
            let off = off - base;
            for blk in off / bs..(off + d.len() as u64).div_ceil(bs) {
                if region.contains(blk) {
                    groups.insert(blk / u64::from(sb.blocks_per_group));
                }
            }
        }
    }
    groups
}

/// The journal region of the unmounted image `mem` and its log's head (the
/// tail, which a clean unmount leaves there).
fn log_head(mem: &dyn BlockDevice) -> (JournalRegion, u64) {
    let mut b = vec![0u8; SB_SIZE];
    mem.read_at(&mut b, 0).unwrap();
    let sb = Superblock::decode(&b, mem.size()).unwrap();
    let region = JournalRegion::of(&sb);
    let bs = sb.block_size() as usize;
    let mut j = vec![0u8; bs];
    mem.read_at(&mut j, region.start * bs as u64).unwrap();
    let seed = sb.csum_seed();
    let jsb = cairn_format::journal::JournalSuper::decode(seed, region.start, &j, region.blocks).unwrap();
    (region, jsb.tail_off)
}

/// The raw bytes of an image, beneath any decrypting device.
type RawBytes = Box<dyn Fn() -> Vec<u8>>;

/// Runs the workload in `cfg`, syncing after each step, snapshotting after
/// each unit and checking the engine's invariants at each unit boundary.
fn record(cfg: &Config, label: &str, steps: &[Step]) -> Recording {
    // The file system's device (decrypting, on an encrypted image) and the
    // raw bytes beneath it.
    let (mem, raw): (Arc<dyn BlockDevice>, RawBytes) = if cfg.encrypted {
        let dev = Arc::new(encrypted::create(cfg.block_size));
        format(&*dev, &mkfs_options(cfg), &mut |_, _| {}).unwrap();
        (dev.clone(), Box::new(move || dev.inner().snapshot()))
    } else {
        let mem = Arc::new(MemDevice::new(16 << 20));
        format(&*mem, &mkfs_options(cfg), &mut |_, _| {}).unwrap();
        (mem.clone(), Box::new(move || mem.snapshot()))
    };
    if cfg.preload > 0 {
        let d: Arc<dyn BlockDevice> = mem.clone();
        // Uncompressed, the preload's records fill the log as far as the
        // configurations above say.
        let fs = Fs::mount(d, MountOptions { journal_compress: false, ..opts(&NORMAL) }).unwrap();
        let c = Ctx::root();
        let bulk = fs.names().mkdir(&c, 1, b"bulk", 0o755).unwrap().ino;
        for i in 0..cfg.preload {
            fs.names().mknod(&c, bulk, format!("b{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
        }
        fs.unmount().unwrap();
        if cfg.blocks_per_group.is_some() {
            // On until the log's head is a few blocks before the end of group
            // 0's part, so that even the workload's compressed records cross.
            let (region, mut head) = log_head(&*mem);
            let mut i = cfg.preload;
            while head + 8 < region.first {
                let d: Arc<dyn BlockDevice> = mem.clone();
                let fs = Fs::mount(d, MountOptions { journal_compress: false, ..opts(&NORMAL) }).unwrap();
                fs.names().mknod(&c, bulk, format!("b{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
                fs.unmount().unwrap();
                i += 1;
                head = log_head(&*mem).1;
            }
        }
    }
    let recorder = if cfg.encrypted {
        Recorder::Encrypted(Arc::new(encrypted::open(RecordingDevice::new(raw()))))
    } else {
        Recorder::Plain(Arc::new(RecordingDevice::new(raw())))
    };
    let rec = recorder.rec();
    let d: Arc<dyn BlockDevice> = if cfg.slow_flush_us > 0 {
        let slow = cairn_core::testdev::FaultDevice::new(recorder.device());
        slow.set_flush_delay(Duration::from_micros(cfg.slow_flush_us));
        Arc::new(slow)
    } else {
        recorder.device()
    };
    let fs = Fs::mount(d, opts(cfg)).unwrap();
    let mut r = Recording {
        plan: rec.plan(),
        snaps: vec![snapshot(&fs)],
        marks: vec![rec.ops().len()],
        synced: vec![true],
        stats: BTreeMap::new(),
        encrypted: cfg.encrypted,
    };
    for step in steps {
        for (i, action) in step.iter().enumerate() {
            action(&fs);
            if cfg.per_op && i + 1 < step.len() {
                fs.debug_check_consistency();
                r.snaps.push(snapshot(&fs));
                r.marks.push(rec.ops().len());
                r.synced.push(false);
            }
        }
        fs.files().sync_fs().unwrap();
        fs.debug_check_consistency();
        r.snaps.push(snapshot(&fs));
        r.marks.push(rec.ops().len());
        r.synced.push(true);
    }
    r.stats = stats(&fs);
    assert_eq!(r.stats["tx.credit_overruns"], 0, "{label} ({}): handles dirtied more than their credits", cfg.name);
    fs.unmount().unwrap();
    r.plan = rec.plan();
    if cfg.encrypted {
        encrypted::check_recording(cfg, &r.plan);
    }
    r
}

/// Checks the crash states of one recorded workload (named `label` in
/// failures): each is fsck'd, mounted and compared (see [`acceptable`]).
fn check_all(label: &str, r: &Recording, cfg: &Config, rng: &mut rand::rngs::StdRng, per_flush: usize) -> Checked {
    let plan = &r.plan;
    let marks = &r.marks;
    // Decryption in a debug build (cairn's XTS layer is not optimised
    // there) makes each encrypted state cost about 20 times a plain one:
    // fewer random subsets per barrier (every barrier is still visited).
    let per_flush = if cfg.encrypted { per_flush.min(ENCRYPTED_PER_FLUSH) } else { per_flush };
    let flushes = plan.flushes();
    let mut done = Checked::default();
    let mut points: Vec<usize> = flushes.iter().map(|f| f + 1).collect();
    points.insert(0, marks[0]);
    points.push(plan.ops.len());
    // Snapshots that a crash state of an earlier barrier showed durable: the
    // state never goes back before them.
    let mut floor = 0usize;
    for (pi, &upto) in points.iter().enumerate() {
        if upto < marks[0] {
            continue;
        }
        let next_flush = points.get(pi + 1).map_or(plan.ops.len(), |n| n.saturating_sub(1));
        let inflight: Vec<usize> = (upto..next_flush).filter(|i| matches!(plan.ops[*i], Op::Write(..))).collect();
        // Synced before the crash point.
        let lo = (0..marks.len()).rev().find(|&u| r.synced[u] && marks[u] <= upto).unwrap().max(floor);
        // Units that started before the last barrier / the last write.
        let started_before = |end: usize| marks.iter().rposition(|m| *m < end).map_or(0, |u| u + 1);
        let hi = started_before(upto).max(lo);
        let mut prefix_min = None;
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
            let last_write = extra.last().map_or(upto, |e| e + 1);
            let hi_bytes = started_before(last_write).max(hi);
            let img = r.state(plan.image(upto, &extra, torn));
            let what = format!("{label} ({}): crash state at op {upto} (+{extra:?}, torn {torn:?})", cfg.name);
            done.replayed += usize::from(fsck_clean_but(&*img, &what, cfg.fsck_allows));
            let fs = Fs::mount(img, opts(cfg)).unwrap_or_else(|e| panic!("{what} does not mount: {e}"));
            fs.debug_check_consistency();
            let got = snapshot(&fs);
            let from = prefix_min.unwrap_or(lo);
            let Some(j) = acceptable(&got, &r.snaps, from, hi, hi_bytes) else {
                let diffs: Vec<String> = (from..=hi_bytes.min(r.snaps.len() - 1))
                    .map(|u| format!("against unit {u}:\n{}", describe_diff(&got, &r.snaps[u])))
                    .collect();
                panic!(
                    "{what} matches no state from unit {from} to {hi} (bytes up to {hi_bytes}):\n{}",
                    diffs.join("\n")
                );
            };
            if trial == 0 {
                prefix_min = Some(j);
                floor = floor.max(j);
            }
            fs.unmount().unwrap();
            done.states += 1;
        }
    }
    done
}

/// Random subsets (and torn writes) per barrier on an encrypted image.
const ENCRYPTED_PER_FLUSH: usize = 2;

/// Builds a step of operations.
macro_rules! step {
    ($($op:expr),+ $(,)?) => { vec![$(Box::new($op) as Action),+] };
}

// After the macro, which it uses.
mod grow;

/// The named workload: rename over, hard links, xattrs, a directory of 300
/// entries, truncate, half of the entries unlinked.
fn named_steps() -> Vec<Step> {
    let c = Ctx::root();
    let a = |fs: &Fs| fs.lookup(1, b"a").unwrap().ino;
    let d = |fs: &Fs| fs.lookup(1, b"d").unwrap().ino;
    let mut mkdir_fill: Step = step![move |fs: &Fs| {
        fs.names().mkdir(&c, 1, b"d", 0o755).unwrap();
    }];
    for i in 0..300 {
        mkdir_fill.push(Box::new(move |fs: &Fs| {
            fs.names().mknod(&c, d(fs), format!("entry-{i}").as_bytes(), libc::S_IFREG | 0o600, 0).unwrap();
        }));
    }
    mkdir_fill.push(Box::new(move |fs: &Fs| {
        fs.names().symlink(&c, d(fs), b"s", b"../a").unwrap();
    }));
    let mut shrink: Step = step![
        move |fs: &Fs| {
            fs.files().setattr(&c, a(fs), &cairn_core::SetAttr { size: Some(100), ..Default::default() }).unwrap();
        },
        |fs: &Fs| fs.names().unlink(1, b"a-link").unwrap(),
    ];
    for i in (0..300).step_by(2) {
        shrink.push(Box::new(move |fs: &Fs| fs.names().unlink(d(fs), format!("entry-{i}").as_bytes()).unwrap()));
    }
    vec![
        step![
            move |fs: &Fs| {
                fs.names().mknod(&c, 1, b"a", libc::S_IFREG | 0o644, 0).unwrap();
            },
            move |fs: &Fs| {
                fs.files().write(a(fs), 0, &[1u8; 5000]).unwrap();
            },
        ],
        // rename over: replace "a" atomically with a new file
        step![
            move |fs: &Fs| {
                fs.names().mknod(&c, 1, b"a.tmp", libc::S_IFREG | 0o644, 0).unwrap();
            },
            |fs: &Fs| {
                let t = fs.lookup(1, b"a.tmp").unwrap().ino;
                fs.files().write(t, 0, &[2u8; 7000]).unwrap();
            },
            |fs: &Fs| fs.names().rename(1, b"a.tmp", 1, b"a", 0).unwrap(),
        ],
        step![
            move |fs: &Fs| {
                fs.files().write(a(fs), 7000, &[3u8; 3000]).unwrap();
            },
            move |fs: &Fs| {
                fs.names().link(a(fs), 1, b"a-link").unwrap();
            },
            move |fs: &Fs| fs.setxattr(a(fs), b"user.x", b"value", 0).unwrap(),
        ],
        mkdir_fill,
        shrink,
    ]
}

fn named_workload(cfg: &Config) -> Checked {
    let r = record(cfg, "named workload", &named_steps());
    if std::env::var("CRASH_DUMP").is_ok() {
        for (i, o) in r.plan.ops.iter().enumerate() {
            match o {
                Op::Write(off, d) => eprintln!("{i}: write blk {} +{} len {}", off / 4096, off % 4096, d.len()),
                Op::Flush => eprintln!("{i}: flush"),
            }
        }
        eprintln!("marks {:?}", r.marks);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let n = check_all("named workload", &r, cfg, &mut rng, 12);
    eprintln!(
        "crash harness ({}): {} crash states of the named workload ({} commits), each fsck'd clean ({} after fsck replayed the journal) and mounted consistent",
        cfg.name, n.states, r.stats["journal.commits"], n.replayed
    );
    assert!(n.states > 50);
    assert!(n.replayed > 0, "no crash state left the journal to replay");
    if cfg.per_op && cfg.blocks_per_group.is_none() {
        // Log-full waits and stepped operations are asserted where they are
        // certain (`big_delete`, `pressure`); here the record is small.
        assert!(r.stats["tx.record_limit_blocks"] < 100, "the tiny journal is not tiny");
    }
    if cfg.blocks_per_group.is_some() {
        // The preload moved the log's head near the end of group 0's part:
        // the workload's records go on into group 1's.
        let written = journal_groups_written(cfg, &r);
        assert_eq!(written.into_iter().collect::<Vec<_>>(), [0, 1], "the records stayed in one part of the region");
    }
    if cfg.cache_blocks == TINY_CACHE.cache_blocks {
        assert!(r.stats["cache.evictions"] > 0, "the tiny cache never evicted");
        assert!(
            r.stats["ail.shrinks"] > 0,
            "the AIL never went home in part (its budget follows the cache) {:?}",
            r.stats
                .iter()
                .filter(|(k, _)| k.starts_with("ail") || k.starts_with("cache") || k.starts_with("images"))
                .collect::<Vec<_>>()
        );
    }
    n
}

#[test]
fn named_workload_survives_every_crash_point() {
    named_workload(&NORMAL);
}

#[test]
fn named_workload_survives_every_crash_point_tiny_cache() {
    named_workload(&TINY_CACHE);
}

#[test]
fn named_workload_survives_every_crash_point_tiny_journal() {
    named_workload(&tiny_journal());
}

#[test]
fn named_workload_survives_every_crash_point_with_a_journal_across_groups() {
    named_workload(&JOURNAL_GROUPS);
}

/// `len` bytes of a pattern that differs per `seed`.
fn xvalue(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 13 + u32::from(seed) * 29 + i as u32 / 255) as u8).collect()
}

/// Large xattr values (value-block chains): set, shared by a second inode,
/// copied when one sharer changes its set, replaced in place, removed,
/// freed with the last inode.
fn xattr_steps() -> Vec<Step> {
    let c = Ctx::root();
    let ino = |fs: &Fs, n: &[u8]| fs.lookup(1, n).unwrap().ino;
    vec![
        step![
            move |fs: &Fs| {
                fs.names().mknod(&c, 1, b"a", libc::S_IFREG | 0o644, 0).unwrap();
            },
            move |fs: &Fs| fs.setxattr(ino(fs, b"a"), b"user.big", &xvalue(65_536, 1), 0).unwrap(),
            move |fs: &Fs| fs.setxattr(ino(fs, b"a"), b"user.s", b"x", 0).unwrap(),
        ],
        step![
            move |fs: &Fs| {
                fs.names().mknod(&c, 1, b"b", libc::S_IFREG | 0o644, 0).unwrap();
            },
            move |fs: &Fs| fs.setxattr(ino(fs, b"b"), b"user.big", &xvalue(65_536, 1), 0).unwrap(),
            move |fs: &Fs| fs.setxattr(ino(fs, b"b"), b"user.s", b"x", 0).unwrap(),
        ],
        step![move |fs: &Fs| fs.setxattr(ino(fs, b"a"), b"user.mid", &xvalue(9_000, 2), 0).unwrap(), move |fs: &Fs| fs
            .setxattr(ino(fs, b"b"), b"user.big", &xvalue(40_000, 3), 0)
            .unwrap(),],
        step![move |fs: &Fs| fs.removexattr(ino(fs, b"a"), b"user.big").unwrap(), move |fs: &Fs| fs
            .setxattr(ino(fs, b"a"), b"user.mid", &xvalue(20_000, 4), 0)
            .unwrap(),],
        step![|fs: &Fs| fs.names().unlink(1, b"b").unwrap(), |fs: &Fs| fs.names().unlink(1, b"a").unwrap()],
    ]
}

fn xattr_workload(cfg: &Config) {
    let r = record(cfg, "xattr workload", &xattr_steps());
    let mut rng = rand::rngs::StdRng::seed_from_u64(64);
    let n = check_all("xattr workload", &r, cfg, &mut rng, 12);
    eprintln!(
        "crash harness ({}): {} crash states of the large-xattr workload ({} commits), each fsck'd clean and mounted consistent",
        cfg.name, n.states, r.stats["journal.commits"]
    );
    assert!(n.states > 30);
    assert!(n.replayed > 0, "no crash state left the journal to replay");
}

#[test]
fn xattr_workload_survives_every_crash_point() {
    xattr_workload(&NORMAL);
}

#[test]
fn xattr_workload_survives_every_crash_point_tiny_journal() {
    xattr_workload(&tiny_journal());
}

/// One random operation of the model workloads.
fn random_op(rng: &mut rand::rngs::StdRng) -> Action {
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
            let _ = fs.names().mknod(&c, 1, &name(n), libc::S_IFREG | 0o644, 0);
        }
        2 | 3 => {
            if let Ok(a) = fs.lookup(1, &name(n)) {
                if a.mode & libc::S_IFMT == libc::S_IFREG {
                    fs.files().write(a.ino, off, &vec![v; len]).unwrap();
                }
            }
        }
        4 => {
            let _ = fs.names().unlink(1, &name(n));
        }
        5 => {
            let _ = fs.names().rename(1, &name(n), 1, &name(m), 0);
        }
        6 => {
            if let Ok(a) = fs.lookup(1, &name(n)) {
                if a.mode & libc::S_IFMT == libc::S_IFREG {
                    fs.files()
                        .setattr(&c, a.ino, &cairn_core::SetAttr { size: Some(off / 2), ..Default::default() })
                        .unwrap();
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
                    let _ = fs.names().link(a.ino, 1, &name(m));
                }
            }
        }
    })
}

/// Random workloads (the model's operation mix), each step followed by a
/// sync: at least `CAIRN_CRASH_STATES` (default 10,000) crash states in all
/// over the three configurations, a third in each. Steps are single
/// operations, except with the tiny journal, where a step is one to eight
/// (commits inside steps; the oracle snapshots after every operation).
fn random_workloads(cfg: &Config) {
    random_workloads_share(cfg, 3);
}

/// [`random_workloads`], at least a `share`th of `CAIRN_CRASH_STATES`.
fn random_workloads_share(cfg: &Config, share: usize) -> Checked {
    let want: usize = std::env::var("CAIRN_CRASH_STATES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let want = want.div_ceil(share);
    let mut total = Checked::default();
    let mut seed = 0u64;
    let mut sum: BTreeMap<String, u64> = BTreeMap::new();
    while total.states < want {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let steps: Vec<Step> = (0..rng.gen_range(4..16))
            .map(|_| {
                let ops = if cfg.per_op { rng.gen_range(1..=8) } else { 1 };
                (0..ops).map(|_| random_op(&mut rng)).collect()
            })
            .collect();
        let label = format!("random workload seed {seed}");
        let r = record(cfg, &label, &steps);
        let n = check_all(&label, &r, cfg, &mut rng, 8);
        total.states += n.states;
        total.replayed += n.replayed;
        for (k, v) in r.stats {
            *sum.entry(k).or_default() += v;
        }
        seed += 1;
    }
    eprintln!(
        "crash harness ({}): {} crash states from {seed} random workloads ({} commits, {} reserve waits, {} steps, {} evictions), each fsck'd clean ({} after fsck replayed the journal) and mounted consistent",
        cfg.name,
        total.states,
        sum["journal.commits"],
        sum["tx.reserve_waits"],
        sum["tx.steps"],
        sum["cache.evictions"],
        total.replayed
    );
    if cfg.per_op {
        assert!(sum["tx.steps"] + sum["journal.commits"] > 0);
    }
    if cfg.cache_blocks == TINY_CACHE.cache_blocks {
        assert!(sum["cache.evictions"] > 0, "the tiny cache never evicted");
    }
    total
}

#[test]
fn random_workloads_survive_every_crash_point() {
    random_workloads(&NORMAL);
}

#[test]
fn random_workloads_survive_every_crash_point_tiny_cache() {
    random_workloads(&TINY_CACHE);
}

#[test]
fn random_workloads_survive_every_crash_point_tiny_journal() {
    random_workloads(&tiny_journal());
}

#[test]
fn random_workloads_survive_every_crash_point_with_a_journal_across_groups() {
    random_workloads(&JOURNAL_GROUPS);
}

#[test]
fn random_workloads_survive_every_crash_point_without_delaylog() {
    random_workloads(&NO_DELAYLOG);
}

/// The overwrite workload (seed 004's fast path): files written once, then
/// steps of in-place overwrites (no transaction) mixed with the journaled
/// writes that extend, fill a punched hole or land in fallocated space, and
/// a truncate; fdatasync inside steps.
fn overwrite_steps() -> Vec<Step> {
    let c = Ctx::root();
    let ino = |fs: &Fs, n: &[u8]| fs.lookup(1, n).unwrap().ino;
    let overwrites = |v: u8, n: u64| -> Step {
        (0..n)
            .map(|i| {
                Box::new(move |fs: &Fs| {
                    let off = (i * 7919 + u64::from(v) * 104_729) % 60_000;
                    fs.files().write(ino(fs, b"o"), off, &vec![v; 1 + (i as usize * 1237) % 5000]).unwrap();
                }) as Action
            })
            .collect()
    };
    let mut s2 = overwrites(2, 12);
    s2.push(Box::new(move |fs: &Fs| {
        fs.files().write(ino(fs, b"p"), 100, &[9u8; 3000]).unwrap();
        fs.files().fsync(ino(fs, b"p"), true).unwrap();
    }));
    let mut s3 = overwrites(3, 6);
    s3.push(Box::new(move |fs: &Fs| {
        fs.files().write(ino(fs, b"o"), 65536, &[4u8; 10_000]).unwrap();
    }));
    s3.extend(overwrites(5, 6));
    let mut s4: Step = step![move |fs: &Fs| {
        fs.files().fallocate(ino(fs, b"o"), 8192, 16384, 2 | 1).unwrap();
    }];
    s4.extend(overwrites(6, 8));
    s4.push(Box::new(move |fs: &Fs| {
        fs.files().fsync(ino(fs, b"o"), true).unwrap();
    }));
    let mut s5: Step = step![move |fs: &Fs| {
        fs.files()
            .setattr(&c, ino(fs, b"o"), &cairn_core::SetAttr { size: Some(30_000), ..Default::default() })
            .unwrap();
    }];
    s5.extend((0..6).map(|i| {
        Box::new(move |fs: &Fs| {
            fs.files().write(ino(fs, b"o"), i * 4000, &[7u8; 2000]).unwrap();
        }) as Action
    }));
    vec![
        step![
            move |fs: &Fs| {
                let o = fs.names().mknod(&c, 1, b"o", libc::S_IFREG | 0o644, 0).unwrap().ino;
                fs.files().write(o, 0, &[1u8; 65536]).unwrap();
            },
            move |fs: &Fs| {
                let p = fs.names().mknod(&c, 1, b"p", libc::S_IFREG | 0o644, 0).unwrap().ino;
                fs.files().write(p, 0, &[1u8; 32768]).unwrap();
            },
        ],
        s2,
        s3,
        s4,
        s5,
    ]
}

fn overwrite_workload(cfg: &Config) -> Checked {
    // A snapshot after every operation: a crash state may show a byte that a
    // later write of the same step overwrote again (each write goes home in
    // place at once), which only a per-operation oracle knows.
    let cfg = &Config { per_op: true, ..*cfg };
    let r = record(cfg, "overwrite workload", &overwrite_steps());
    assert!(r.stats["overwrite.fast_writes"] > 30, "the workload hardly used the fast path: {:?}", r.stats);
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let n = check_all("overwrite workload", &r, cfg, &mut rng, 12);
    eprintln!(
        "crash harness ({}): {} crash states of the overwrite workload ({} fast-path writes, {} commits), each fsck'd clean and mounted consistent",
        cfg.name, n.states, r.stats["overwrite.fast_writes"], r.stats["journal.commits"]
    );
    assert!(n.states > 30);
    n
}

#[test]
fn overwrite_workload_survives_every_crash_point() {
    overwrite_workload(&NORMAL);
}

#[test]
fn overwrite_workload_survives_every_crash_point_tiny_cache() {
    overwrite_workload(&TINY_CACHE);
}

#[test]
fn overwrite_workload_survives_every_crash_point_tiny_journal() {
    overwrite_workload(&tiny_journal());
}
