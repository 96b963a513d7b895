//! `-o` mount options: cairn's own and the FUSE ones, parsed into the
//! settings of the engine, the adapter and the FUSE session.
//!
//! cairn's own options (all optional):
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `commit=SECONDS` | journal commit interval | 5 |
//! | `cache_mb=N` | memory for caches, MiB: the metadata buffer cache gets 15/32 (and sizes from it the committed images awaiting their home write, 1/8 of `cache_mb`; loaded buddies, under 1/10; a checkpoint's copies, 1/16), the in-core inode cache and the dentry cache 1/8 each (see below) | 1/16 of RAM, 64..1024 |
//! | `lru_caches=0\|1` | bound the inode cache and keep a dentry cache (1), or keep every inode the kernel holds in core and read the directory on every LOOKUP, the buffer cache getting all of `cache_mb` (0, for comparison) | 1 |
//! | `errors=continue\|remount-ro\|shutdown` | what corruption or an I/O error does (ext4's names) | remount-ro |
//! | `threads=N` | FUSE worker threads reading `/dev/fuse` (1..64) | 2 |
//! | `io_uring=0\|1` | serve requests through FUSE over io_uring: one queue per CPU, each served by `ring_threads` threads pinned to that CPU, so a request and its reply never cross CPUs; the `/dev/fuse` threads still take FORGET and INTERRUPT. As root cairn turns on the kernel's switch (`/sys/module/fuse/parameters/enable_uring`); where the kernel does not offer it, `/dev/fuse` serves everything and one line of the log says so | 1 |
//! | `parallel_dio=0\|1` | answer OPEN, so a file opened with O_DIRECT gets FOPEN_DIRECT_IO and FOPEN_PARALLEL_DIRECT_WRITES: O_DIRECT writes inside the file take the kernel's inode lock shared and writers to one file overlap (1); or answer OPEN with ENOSYS once, so opens cost no request but the kernel serialises O_DIRECT writes to one file under its exclusive inode lock (0). 1 costs an OPEN and a RELEASE per open: dbench 16% slower at 1 client, 10% at 2 and 4 | 0 |
//! | `dio_coherence=0\|1` | after each O_DIRECT write, drop the kernel's cached pages of the written range before replying, so buffered readers never keep stale bytes after an asynchronous direct write (1); or leave it to the kernel, which misses them for AIO and io_uring writes (0, for measuring). Exact with two or more serving threads per queue; with one, best effort (see `coherence`) | 1 |
//! | `ring_threads=N` | threads per CPU queue with `io_uring=1` (1..16) | 2 |
//! | `ring_idle=0\|1` | run the queue threads as SCHED_IDLE, so the scheduler leaves a single busy caller on its CPU instead of moving it to an idle one at every reply (a lone O_DIRECT writer: 2.7× the IOPS); but a CPU-bound task on the same CPU then starves that CPU's queue | 0 |
//! | `entry_timeout=S`, `attr_timeout=S`, `negative_timeout=S` | kernel cache lifetimes (seconds, fractions allowed) | 60 |
//! | `writeback_cache=0\|1` (`no_writeback_cache` = 0) | kernel writeback cache (see below) | 1 |
//! | `max_write=BYTES` | largest write request | 1048576 |
//! | `dirty_limit_mb=N` | the kernel's dirty page cache for this mount, bounded through its bdi (root only); the space guard keeps 4× that free for it and makes buffered writes say ENOSPC when the disk is full (see `space`); 0 leaves the kernel's limit and turns the guard off | 1/16 of the file system, 8–64 |
//! | `readahead_kb=N` | the connection's readahead window, set after mounting (root only; 0 keeps the kernel's 128) | 1024 |
//! | `mb_optimize_scan=0\|1` | find block groups through the allocator's order lists and fragment buckets (1) or by walking every group (0), as ext4's option | 1 |
//! | `mb_group_prealloc=N` | blocks a locality group's run for small files searches for (ext4's knob); 0 turns locality groups off, small files then search near their inode for what they want | 512 |
//! | `overwrite_fastpath=0\|1` | write over allocated, written blocks with no journal transaction and shared locks (1), or journal every write (0) | 1 |
//! | `nombcache` (or `no_mbcache`) / `mbcache` | share identical xattr blocks through the dedup cache, or give every inode its own block (ext4's option) | on |
//! | `acl` / `noacl` | POSIX ACLs (`setfacl`/`getfacl`, enforced by the kernel, inherited from default ACLs) | on |
//! | `sync_delete` | free deleted files on the calling thread instead of the reaper thread | off |
//! | `delaylog=0\|1` | delayed logging: log only the changed chunks of each metadata block and defer home writes until the log needs the room (1), or log whole blocks and write them home at every commit (0) | 1 |
//! | `journal_compress=0\|1` | log each checkpoint's changed chunks as one zstd frame per descriptor (1, on images with `INCOMPAT_JOURNAL_ZSTD`, which mkfs sets) or as they are (0) | 1 |
//! | `backend_nice=N` | nice value (0–19) of the thread that commits in the background; 0 keeps the daemon's | 10 |
//! | `push_drain_us=N` | how long (µs, up to 100000) a commit's close of the transaction gate waits for the operations inside before it reopens the gate and tries again; 0: it waits however long | 200 |
//! | `push_patience_us=N` | how long (µs, up to 100000) a commit waits for a moment with no operation inside the transaction gate (then it swaps at once, nobody kept out) before it closes the gate on the operations inside; 0: it closes at once | 5000 |
//! | `fuseblk` / `nofuseblk` | mount as type fuseblk over a loop device (root only; see below) | on for root |
//!
//! `cache_mb` bounds the daemon's memory: the caches, the committed images
//! waiting for their home write, loaded buddies and a checkpoint's copies
//! stay within it, beyond it only by what busy inodes pin (open unlinked
//! files, inodes in use). Outside it: a fixed overhead of about 10–21 bytes
//! per inode the kernel holds one lookup reference on (19–37 with more than
//! one; the lookup-count table, see `cairn_core`'s `inode` module); the FUSE
//! request buffers, code and thread stacks.
//!
//! Only *fuseblk* connections receive FUSE_SYNCFS from the kernel (plain
//! `fuse` mounts never do: an unprivileged server could stall `sync(1)`), so
//! as root `cairn mount` attaches the image to a loop device, lets the kernel
//! claim that device for a fuseblk mount, and keeps doing its own I/O on the
//! image file. The loop device is set to detach itself when the mount goes.
//! Without it (`nofuseblk`, or not root) `sync(1)`/`syncfs(2)` do not reach
//! cairn: only `fsync`/`fdatasync`, the commit timer and unmount commit.
//!
//! The kernel's writeback cache is on by default: buffered writes fill the
//! kernel's page cache and reach cairn in large WRITE requests when the kernel
//! writes back (at `fsync`, `close`, `sync`, memory pressure or its 30 s timer),
//! so a stream of 4 KiB writes costs a few requests per MiB, not two per write.
//! The kernel then owns size, mtime and ctime of a file it caches and sends
//! them with SETATTR. It also sends `SEEK_DATA`/`SEEK_HOLE` without writing
//! back first, so with the cache on cairn answers LSEEK with ENOSYS and the
//! kernel answers lseek from the size alone (the whole file is data, as POSIX
//! allows); `writeback_cache=0` keeps holes visible to `SEEK_HOLE`.
//!
//! FUSE options passed to the kernel: `allow_other`, `allow_root`, `ro`/`rw`,
//! `dev`/`nodev`, `suid`/`nosuid`, `exec`/`noexec`, `atime`/`noatime`,
//! `sync`/`async`, `dirsync`, `fsname=`, `subtype=`, `auto_unmount`.
//! `default_permissions` is always on (the kernel checks permissions from the
//! mode bits; cairn does not check them a second time). Options that
//! `mount(8)` and fstab add (`defaults`, `auto`, `noauto`, `user`, `users`,
//! `nofail`, `_netdev`, `comment=`, `x-*`) are accepted and ignored, and so
//! are the access-time policies (`relatime`, `strictatime`, `lazytime`,
//! `nodiratime`, their `no` forms, `iversion`): cairn never updates atime on
//! a read (the kernel does not for FUSE, and cairn does not on READ), only
//! when asked (utimensat). `norecovery`/`noload` go with `ro` only. Anything else is an
//! error: a misspelt option must not be silently dropped.

use crate::adapter::{AdapterOptions, Timeouts};
use cairn_core::MountOptions;
use cairn_core::BUF_OVERHEAD;
use fuser::MountOption;
use std::time::Duration;

/// Everything `-o` decides.
#[derive(Debug, Clone)]
pub struct Settings {
    pub engine: MountOptions,
    pub adapter: AdapterOptions,
    /// FUSE worker threads.
    pub threads: usize,
    /// Threads per CPU queue under FUSE over io_uring (`adapter.io_uring`).
    pub ring_threads: usize,
    /// Run those threads as SCHED_IDLE (`ring_idle=1`).
    pub ring_idle: bool,
    /// Let other users see the file system.
    pub allow_other: bool,
    /// Let root (besides the owner) see the file system.
    pub allow_root: bool,
    /// Options for the kernel mount.
    pub fuse: Vec<MountOption>,
    /// Name shown as the source in the mount table (default: the image path).
    pub fsname: Option<String>,
    /// Mount as "fuseblk" over this block device (see [`crate::session_config`]).
    pub block_device: Option<String>,
    /// `fuseblk` / `nofuseblk`: `None` lets the command decide (fuseblk when root).
    pub fuseblk: Option<bool>,
    /// Readahead window to set on the connection's bdi after mounting, KiB
    /// (0: leave the kernel's default).
    pub readahead_kb: u32,
    /// Bound on the kernel's dirty page cache for this mount, MiB (`-o
    /// dirty_limit_mb`; `None`: 1/16 of the file system, 8 to 64 MiB; 0: the
    /// kernel's own limit and no space guard, see `space`).
    pub dirty_limit_mb: Option<u64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            engine: MountOptions::default(),
            adapter: AdapterOptions::default(),
            threads: 2,
            ring_threads: 2,
            ring_idle: false,
            allow_other: false,
            allow_root: false,
            fuse: Vec::new(),
            fsname: None,
            block_device: None,
            fuseblk: None,
            readahead_kb: 1024,
            dirty_limit_mb: None,
        }
    }
}

fn seconds(key: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = v.parse().map_err(|_| format!("option {key}={v}: not a number of seconds"))?;
    if !(0.0..=86_400.0 * 365.0).contains(&s) {
        return Err(format!("option {key}={v}: out of range"));
    }
    Ok(Duration::from_secs_f64(s))
}

fn number(key: &str, v: &str, min: u64, max: u64) -> Result<u64, String> {
    let n: u64 = v.parse().map_err(|_| format!("option {key}={v}: not a whole number"))?;
    if n < min || n > max {
        return Err(format!("option {key}={v}: must be between {min} and {max}"));
    }
    Ok(n)
}

/// A `0|1` option.
fn switch(key: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(format!("option {key}={v}: expected 0 or 1")),
    }
}

/// Parses comma-separated `-o` option strings (several `-o` may be given).
pub fn parse<S: AsRef<str>>(groups: &[S]) -> Result<Settings, String> {
    let mut s = Settings::default();
    let mut timeouts = Timeouts::default();
    let mut cache_mb = default_cache_mb();
    let mut norecovery = false;
    for group in groups {
        for opt in group.as_ref().split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, val) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let need = || val.ok_or_else(|| format!("option {key} needs a value ({key}=...)"));
            match key {
                "commit" => {
                    let d = seconds(key, need()?)?;
                    if d.is_zero() {
                        return Err("option commit=0: the commit interval must be above 0".into());
                    }
                    s.engine.commit_interval = d;
                }
                "cache_mb" => cache_mb = number(key, need()?, 4, 1 << 20)?,
                "lru_caches" => s.engine.lru_caches = switch(key, need()?)?,
                "errors" => {
                    let v = need()?;
                    s.engine.errors = cairn_core::ErrorPolicy::parse(v)
                        .ok_or_else(|| format!("option errors={v}: expected continue, remount-ro or shutdown"))?;
                }
                "mb_optimize_scan" => s.engine.mb_optimize_scan = switch(key, need()?)?,
                "mb_group_prealloc" => s.engine.mb_group_prealloc = number(key, need()?, 0, 8192)? as u32,
                "overwrite_fastpath" => s.engine.overwrite_fastpath = switch(key, need()?)?,
                "delaylog" => s.engine.delaylog = switch(key, need()?)?,
                "journal_compress" => s.engine.journal_compress = switch(key, need()?)?,
                "backend_nice" => s.engine.backend_nice = number(key, need()?, 0, 19)? as i32,
                "push_drain_us" => {
                    let us = number(key, need()?, 0, 100_000)?;
                    s.engine.push_drain = (us > 0).then(|| std::time::Duration::from_micros(us));
                }
                "push_patience_us" => {
                    let us = number(key, need()?, 0, 100_000)?;
                    s.engine.push_patience = (us > 0).then(|| std::time::Duration::from_micros(us));
                }
                "nombcache" | "no_mbcache" => s.engine.mbcache = false,
                "discard" => s.engine.discard = true,
                "nodiscard" => s.engine.discard = false,
                "acl" => s.adapter.acl = true,
                "sync_delete" => s.engine.sync_delete = true,
                "noacl" => s.adapter.acl = false,
                "mbcache" => s.engine.mbcache = true,
                "threads" => s.threads = number(key, need()?, 1, 64)? as usize,
                "io_uring" => s.adapter.io_uring = switch(key, need()?)?,
                "parallel_dio" => s.adapter.parallel_dio = switch(key, need()?)?,
                "dio_coherence" => s.adapter.dio_coherence = switch(key, need()?)?,
                "ring_threads" => s.ring_threads = number(key, need()?, 1, 16)? as usize,
                "ring_idle" => s.ring_idle = switch(key, need()?)?,
                "entry_timeout" => timeouts.entry = seconds(key, need()?)?,
                "attr_timeout" => timeouts.attr = seconds(key, need()?)?,
                "negative_timeout" => timeouts.negative = seconds(key, need()?)?,
                "writeback_cache" => s.adapter.writeback_cache = val.map_or(Ok(true), |v| switch(key, v))?,
                "no_writeback_cache" => s.adapter.writeback_cache = false,
                "readahead_kb" => s.readahead_kb = number(key, need()?, 0, 1 << 20)? as u32,
                "dirty_limit_mb" => s.dirty_limit_mb = Some(number(key, need()?, 0, 1 << 20)?),
                "max_write" => s.adapter.max_write = number(key, need()?, 4096, 16 << 20)? as u32,
                "allow_other" => s.allow_other = true,
                "allow_root" => s.allow_root = true,
                "default_permissions" => {}
                "ro" => {
                    s.engine.read_only = true;
                    s.fuse.push(MountOption::RO);
                }
                "rw" => {
                    // The last of `ro`/`rw` wins, for the engine and the kernel alike.
                    s.engine.read_only = false;
                    s.fuse.retain(|o| *o != MountOption::RO);
                }
                "dev" => s.fuse.push(MountOption::Dev),
                "nodev" => s.fuse.push(MountOption::NoDev),
                "suid" => s.fuse.push(MountOption::Suid),
                "nosuid" => s.fuse.push(MountOption::NoSuid),
                "exec" => s.fuse.push(MountOption::Exec),
                "noexec" => s.fuse.push(MountOption::NoExec),
                "atime" => s.fuse.push(MountOption::Atime),
                "noatime" => s.fuse.push(MountOption::NoAtime),
                "sync" => s.fuse.push(MountOption::Sync),
                "async" => s.fuse.push(MountOption::Async),
                "dirsync" => s.fuse.push(MountOption::DirSync),
                "auto_unmount" => s.fuse.push(MountOption::AutoUnmount),
                "fsname" => s.fsname = Some(need()?.to_string()),
                "fuseblk" => s.fuseblk = Some(true),
                "nofuseblk" => s.fuseblk = Some(false),
                "subtype" => s.fuse.push(MountOption::Subtype(need()?.to_string())),
                "defaults" | "auto" | "noauto" | "user" | "users" | "nouser" | "nofail" | "_netdev" | "comment" => {}
                // Access times: the kernel never updates a FUSE inode's atime
                // itself and cairn updates it only on request (utimensat,
                // `touch -a`): every mount behaves as `noatime`. The policies
                // are accepted so that fstab lines written for other file
                // systems mount (see the README's options).
                "relatime" | "norelatime" | "strictatime" | "nostrictatime" | "lazytime" | "nolazytime"
                | "diratime" | "nodiratime" | "iversion" | "noiversion" => {}
                // A read-only mount never replays the journal (it refuses an
                // image whose log needs replay); `norecovery` says so.
                "norecovery" | "noload" => norecovery = true,
                k if k.starts_with("x-") => {}
                _ => return Err(format!("unknown mount option '{opt}' (see `cairn mount --help`)")),
            }
        }
    }
    if norecovery && !s.engine.read_only {
        return Err("option norecovery needs ro: a read-write mount replays the journal".into());
    }
    s.adapter.timeouts = timeouts;
    split_cache(&mut s.engine, cache_mb);
    Ok(s)
}

/// `cache_mb`'s default: a sixteenth of the machine's memory, 64 MiB to
/// 1 GiB (256 MiB when /proc/meminfo cannot be read).
pub fn default_cache_mb() -> u64 {
    let total_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok()
    });
    match total_kib {
        Some(k) => (k / 1024 / 16).clamp(64, 1024),
        None => 256,
    }
}

/// Splits `cache_mb` so that everything the engine keeps in memory in
/// proportion to it fits within it (see `-o cache_mb` in the README):
/// 15/32 to the buffer cache, each 4 KiB block counted with its bookkeeping
/// ([`BUF_OVERHEAD`]); the engine sizes three things from the buffer
/// cache's size: the committed images waiting for their home write (the
/// AIL, a quarter of its bytes), loaded buddies (a sixteenth of its blocks
/// as buddies of about three blocks each) and one checkpoint's captured
/// copies (an eighth); 1/8 each to the inode and the dentry cache. With
/// `lru_caches=0` the buffer cache also gets those two caches' share.
fn split_cache(e: &mut MountOptions, mb: u64) {
    let bytes = (mb << 20) as usize;
    let per_block = 4096 + BUF_OVERHEAD;
    if e.lru_caches {
        e.cache_blocks = bytes / 32 * 15 / per_block;
        e.inode_cache_bytes = bytes / 8;
        e.dentry_cache_bytes = bytes / 8;
    } else {
        e.cache_blocks = bytes / 32 * 23 / per_block;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_own_options() {
        let s = parse(&["allow_other,default_permissions", "commit=2,threads=4,entry_timeout=0.5"]).unwrap();
        assert!(s.allow_other);
        assert_eq!(s.threads, 4);
        assert_eq!(s.engine.commit_interval, Duration::from_secs(2));
        assert_eq!(s.adapter.timeouts.entry, Duration::from_millis(500));
        assert_eq!(s.adapter.timeouts.attr, Duration::from_secs(60));
        assert!(!s.engine.read_only);
        assert!(!s.adapter.parallel_dio);
        assert!(parse(&["parallel_dio=1"]).unwrap().adapter.parallel_dio);
    }

    #[test]
    fn cache_mb_is_split_between_the_caches() {
        let s = parse(&["cache_mb=64"]).unwrap();
        assert!(s.engine.lru_caches);
        assert_eq!(s.engine.cache_blocks, (30 << 20) / (4096 + BUF_OVERHEAD));
        assert_eq!(s.engine.inode_cache_bytes, 8 << 20);
        assert_eq!(s.engine.dentry_cache_bytes, 8 << 20);
        let s = parse(&["lru_caches=0,cache_mb=64"]).unwrap();
        assert!(!s.engine.lru_caches);
        assert_eq!(s.engine.cache_blocks, (46 << 20) / (4096 + BUF_OVERHEAD));
        assert!(parse(&["lru_caches=2"]).is_err());
        let d = default_cache_mb();
        assert!((64..=1024).contains(&d));
        assert_eq!(parse::<&str>(&[]).unwrap().engine.inode_cache_bytes, (d << 20) as usize / 8);
    }

    #[test]
    fn read_only_reaches_engine_and_kernel() {
        let s = parse(&["ro,noatime"]).unwrap();
        assert!(s.engine.read_only);
        assert!(s.fuse.contains(&MountOption::RO));
        assert!(s.fuse.contains(&MountOption::NoAtime));
    }

    #[test]
    fn the_last_of_ro_and_rw_wins() {
        let s = parse(&["ro,rw"]).unwrap();
        assert!(!s.engine.read_only);
        assert!(!s.fuse.contains(&MountOption::RO));
        let s = parse(&["rw", "ro"]).unwrap();
        assert!(s.engine.read_only);
        assert!(s.fuse.contains(&MountOption::RO));
    }

    #[test]
    fn journal_options() {
        let s = parse::<&str>(&[]).unwrap();
        assert!(s.engine.journal_compress && s.engine.delaylog);
        assert_eq!(s.engine.backend_nice, 10);
        let s = parse(&["journal_compress=0,backend_nice=0"]).unwrap();
        assert!(!s.engine.journal_compress);
        assert_eq!(s.engine.backend_nice, 0);
        assert_eq!(parse(&["backend_nice=19"]).unwrap().engine.backend_nice, 19);
        assert!(parse(&["backend_nice=20"]).unwrap_err().contains("between 0 and 19"));
        assert!(parse(&["backend_nice=-5"]).is_err());
        assert_eq!(s.engine.push_drain, Some(std::time::Duration::from_micros(200)));
        assert_eq!(parse(&["push_drain_us=0"]).unwrap().engine.push_drain, None);
        let s = parse(&["push_drain_us=1000"]).unwrap();
        assert_eq!(s.engine.push_drain, Some(std::time::Duration::from_micros(1000)));
        assert!(parse(&["push_drain_us=100001"]).unwrap_err().contains("between 0 and 100000"));
        assert_eq!(s.engine.push_patience, Some(std::time::Duration::from_millis(5)));
        assert_eq!(parse(&["push_patience_us=0"]).unwrap().engine.push_patience, None);
        let p = parse(&["push_patience_us=300"]).unwrap().engine.push_patience;
        assert_eq!(p, Some(std::time::Duration::from_micros(300)));
        assert!(parse(&["push_patience_us=100001"]).unwrap_err().contains("between 0 and 100000"));
        assert!(parse(&["journal_compress=yes"]).is_err());
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(parse(&["allow_otter"]).unwrap_err().contains("unknown mount option 'allow_otter'"));
        assert!(parse(&["commit=abc"]).is_err());
        assert!(parse(&["commit=0"]).is_err());
        assert!(parse(&["commit"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["threads=0"]).is_err());
        assert!(parse(&["threads=1000"]).is_err());
    }

    #[test]
    fn writeback_cache_is_on_unless_turned_off() {
        assert!(parse::<&str>(&[]).unwrap().adapter.writeback_cache);
        assert!(parse(&["writeback_cache"]).unwrap().adapter.writeback_cache);
        assert!(!parse(&["writeback_cache=0"]).unwrap().adapter.writeback_cache);
        assert!(!parse(&["no_writeback_cache"]).unwrap().adapter.writeback_cache);
        assert!(parse(&["no_writeback_cache,writeback_cache=1"]).unwrap().adapter.writeback_cache);
        assert!(parse(&["writeback_cache=yes"]).is_err());
    }

    #[test]
    fn locality_group_runs_are_sized_or_turned_off() {
        assert_eq!(parse::<&str>(&[]).unwrap().engine.mb_group_prealloc, 512);
        assert_eq!(parse(&["mb_group_prealloc=0"]).unwrap().engine.mb_group_prealloc, 0);
        assert_eq!(parse(&["mb_group_prealloc=64"]).unwrap().engine.mb_group_prealloc, 64);
        assert!(parse(&["mb_group_prealloc=9000"]).unwrap_err().contains("between 0 and 8192"));
    }

    #[test]
    fn fstab_noise_is_ignored() {
        let s = parse(&["defaults,noauto,nofail,x-systemd.automount,_netdev,comment=systemd.automount"]).unwrap();
        assert!(s.fuse.is_empty());
        for atime in ["relatime", "strictatime,nodiratime", "lazytime", "norelatime,diratime,iversion"] {
            let s = parse(&[atime]).unwrap();
            assert!(s.fuse.is_empty() && !s.engine.read_only, "{atime}");
        }
    }

    #[test]
    fn norecovery_goes_with_ro_only() {
        assert!(parse(&["ro,norecovery"]).unwrap().engine.read_only);
        assert!(parse(&["noload,ro"]).unwrap().engine.read_only);
        assert!(parse(&["norecovery"]).unwrap_err().contains("needs ro"));
        assert!(parse(&["ro,norecovery,rw"]).unwrap_err().contains("needs ro"));
    }
}
