//! `-o` mount options: cairn's own and the FUSE ones, parsed into the
//! settings of the engine, the adapter and the FUSE session.
//!
//! Every option — its names, value, default, what it does and whom it is
//! for — is one row of `option_table`'s `OPTIONS`: its `parse` applies
//! the rows into the [`Parsing`] state kept here, `cairn mount --help`
//! prints them (`option_table::help`).
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
//! FUSE options passed to the kernel: `allow_other` (the default for root's
//! mounts, as a kernel file system is reachable by every user; `noallow_other`
//! keeps a mount to its owner), `allow_root`, `ro`/`rw`,
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
use fuser::MountOption;
#[cfg(test)]
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
    /// Pin each of those threads to its queue's CPU (`ring_pin=1`, the default).
    pub ring_pin: bool,
    /// Pin thread `t` of queue `q` to CPU `(q + t) % CPUs` (`ring_spread=1`),
    /// so that a lone reader's second READ in flight is served on another CPU.
    pub ring_spread: bool,
    /// A queue thread serving a large READ moves to the next CPU when that
    /// CPU's queue has seen none lately (`read_move=1`, the default; issue #53:
    /// a lone reader's cold 1 GiB read 2,302 MB/s against 1,305 without).
    pub read_move: bool,
    /// Let other users see the file system (`None`: when mounted by root,
    /// as a kernel file system is; see [`Settings::others_allowed`]).
    pub allow_other: Option<bool>,
    /// Let root (besides the owner) see the file system.
    pub allow_root: bool,
    /// Options for the kernel mount.
    pub fuse: Vec<MountOption>,
    /// Name shown as the source in the mount table (default: the image path).
    pub fsname: Option<String>,
    /// Where the background daemon logs (`-o log=FILE`, as `--log FILE`).
    pub log_file: Option<std::path::PathBuf>,
    /// The key file of an encrypted image (`-o keyfile=FILE`, as `--key-file FILE`).
    pub key_file: Option<std::path::PathBuf>,
    /// Let an encrypted image's discards through (`-o allow_discards`, as
    /// LUKS' allow-discards); a plain image's always go.
    pub allow_discards: bool,
    /// Mount as "fuseblk" over this block device (see [`crate::session_config`]).
    pub block_device: Option<String>,
    /// `fuseblk` / `nofuseblk`: `None` lets the command decide (fuseblk when root).
    pub fuseblk: Option<bool>,
    /// Readahead window to set on the connection's bdi after mounting, KiB
    /// (0: leave the kernel's default).
    pub readahead_kb: u32,
    /// Bound on the kernel's dirty page cache for this mount, MiB (`-o
    /// dirty_limit_mb`; `None`: 1/16 of the file system, 8 to 64 MiB; 0: the
    /// kernel's own limit; the space guard keeps its default reserve, see
    /// `space`).
    pub dirty_limit_mb: Option<u64>,
    /// Read and write file data with `O_DIRECT` (`-o direct_data`, see
    /// `cairn_core::direct_data`).
    pub direct_data: bool,
}

impl Settings {
    /// Whether other users may enter the mount: `allow_other` or
    /// `noallow_other` as given, else when root mounts (with
    /// `default_permissions`, always on, the kernel checks the mode bits as
    /// for ext4, which every user reaches; an ordinary user's mount needs
    /// `user_allow_other` in /etc/fuse.conf for it, so stays private).
    pub fn others_allowed(&self) -> bool {
        self.allow_other.unwrap_or_else(|| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
        })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            engine: MountOptions::default(),
            adapter: AdapterOptions::default(),
            threads: 2,
            ring_threads: 2,
            ring_idle: false,
            ring_pin: true,
            ring_spread: false,
            read_move: true,
            direct_data: true,
            allow_other: None,
            allow_root: false,
            fuse: Vec::new(),
            fsname: None,
            log_file: None,
            key_file: None,
            allow_discards: false,
            block_device: None,
            fuseblk: None,
            readahead_kb: 1024,
            dirty_limit_mb: None,
        }
    }
}

/// What parsing gathers before the settings are final.
pub struct Parsing {
    pub s: Settings,
    pub timeouts: Timeouts,
    pub cache_mb: u64,
    pub norecovery: bool,
}

impl Parsing {
    /// Where parsing starts: every default (what `--help` shows, see
    /// `option_table::Shown`).
    pub fn initial() -> Parsing {
        Parsing {
            s: Settings::default(),
            timeouts: Timeouts::default(),
            cache_mb: default_cache_mb(),
            norecovery: false,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::option_table::parse;

    #[test]
    fn defaults_and_own_options() {
        let s = parse(&["allow_other,default_permissions", "commit=2,threads=4,entry_timeout=0.5"]).unwrap();
        assert_eq!(s.allow_other, Some(true));
        assert_eq!(parse(&["allow_other,noallow_other"]).unwrap().allow_other, Some(false));
        assert_eq!(parse(&["ro"]).unwrap().allow_other, None);
        assert_eq!(s.threads, 4);
        assert_eq!(s.engine.commit_interval, Duration::from_secs(2));
        assert_eq!(s.adapter.timeouts.entry, Duration::from_millis(500));
        assert_eq!(s.adapter.timeouts.attr, Duration::from_secs(60));
        assert!(!s.engine.read_only);
        assert!(!s.adapter.parallel_dio);
        assert!(parse(&["parallel_dio=1"]).unwrap().adapter.parallel_dio);
    }

    #[test]
    fn cache_mb_is_the_engines_budget() {
        // The engine splits it once it knows the block size
        // (`MountOptions::split_budget`).
        assert_eq!(parse(&["cache_mb=64"]).unwrap().engine.memory_budget, Some(64 << 20));
        let s = parse(&["lru_caches=0,cache_mb=64"]).unwrap();
        assert!(!s.engine.lru_caches);
        assert!(parse(&["lru_caches=2"]).is_err());
        let d = default_cache_mb();
        assert!((64..=1024).contains(&d));
        assert_eq!(parse::<&str>(&[]).unwrap().engine.memory_budget, Some(d << 20));
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
        let s = parse(&["journal_compress=0"]).unwrap();
        assert!(!s.engine.journal_compress);
        // Retired measuring switches (#52) are unknown options now.
        for gone in ["backend_nice=0", "defer_orphans=0", "listing_readahead=0", "cache_listed=1", "dio_coherence=0"] {
            assert!(parse(&[gone]).unwrap_err().contains("unknown mount option"), "{gone}");
        }
        assert_eq!(s.engine.push_drain, Some(std::time::Duration::from_micros(200)));
        // Measuring knobs under `debug.` names, and only those.
        assert_eq!(parse(&["debug.push_drain_us=0"]).unwrap().engine.push_drain, None);
        assert!(!parse(&["debug.overwrite_fastpath=0"]).unwrap().engine.overwrite_fastpath);
        assert!(parse(&["debug.allow_other"]).is_err());
        assert!(parse(&["debug.commit=5"]).is_err());
        assert_eq!(parse(&["push_drain_us=0"]).unwrap().engine.push_drain, None);
        let d = parse(&["push_drain_us=1000"]).unwrap().engine.push_drain;
        assert_eq!(d, Some(std::time::Duration::from_micros(1000)));
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
        assert_eq!(parse::<&str>(&[]).unwrap().engine.inode_readahead_blks, 32);
        assert_eq!(parse(&["inode_readahead_blks=0"]).unwrap().engine.inode_readahead_blks, 0);
        assert!(parse(&["inode_readahead_blks=2048"]).unwrap_err().contains("between 0 and 1024"));
        assert!(parse::<&str>(&[]).unwrap().engine.node_readahead);
        assert!(!parse(&["node_readahead=0"]).unwrap().engine.node_readahead);
        assert!(parse(&["node_readahead=2"]).is_err());
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

    /// Every row of the table parses with a value of its kind, and its
    /// help names it; a flag given a value and a valued option given none
    /// are refused; a value of the wrong kind is refused.
    #[test]
    fn every_option_in_the_table_parses_and_is_in_the_help() {
        use crate::option_table::{help, Kind, OPTIONS};
        let text = help();
        for spec in OPTIONS {
            let sample = match spec.kind {
                Kind::Flag | Kind::OptBool | Kind::Any => None,
                Kind::Bool => Some("1".to_string()),
                Kind::Count { min, max, .. } => Some(((min + max) / 2).to_string()),
                Kind::Seconds => Some("2.5".to_string()),
                Kind::Choice(words) => Some(words[0].to_string()),
                Kind::Path | Kind::Name => Some("x".to_string()),
            };
            for name in spec.names {
                let opt = sample.as_ref().map_or(name.to_string(), |v| format!("{name}={v}"));
                let with = if *name == "norecovery" || *name == "noload" { format!("ro,{opt}") } else { opt.clone() };
                assert!(parse(&[with.as_str()]).is_ok(), "{opt}: {:?}", parse(&[with.as_str()]).err());
                assert!(text.contains(name), "--help does not name {name}");
                if !spec.kind.takes_value() {
                    assert!(parse(&[format!("{name}=1")]).unwrap_err().contains("takes no value"));
                }
                if !spec.kind.bare_ok() {
                    assert!(parse(&[*name]).unwrap_err().contains("needs a value"));
                }
                match spec.kind {
                    Kind::Bool | Kind::OptBool | Kind::Count { .. } | Kind::Seconds | Kind::Choice(_) => {
                        assert!(parse(&[format!("{name}=nonsense")]).is_err(), "{name}=nonsense accepted");
                    }
                    _ => {}
                }
                if let Kind::Count { max, .. } = spec.kind {
                    let e = parse(&[format!("{name}={}", max + 1)]).unwrap_err();
                    assert!(e.contains("must be between"), "{name}: {e}");
                }
            }
        }
    }

    /// The default `--help` shows for a row is the setting an empty `-o`
    /// leaves (the Rust defaults): giving it explicitly changes nothing,
    /// and a flag shown "on" is what the setting already is.
    #[test]
    fn every_shown_default_is_the_default_the_code_applies() {
        use crate::option_table::{Kind, Shown, OPTIONS};
        let initial = Parsing::initial();
        for spec in OPTIONS {
            let Shown::Of(get) = spec.default else { continue };
            let before = get(&initial);
            let shown = spec.kind.show(before);
            let name = spec.names[0];
            let opt = match spec.kind {
                Kind::Flag => {
                    assert!(shown == "on" || shown == "off", "{name}: a flag's default is on or off, not {shown:?}");
                    if shown == "off" {
                        continue;
                    }
                    name.to_string()
                }
                _ => format!("{name}={shown}"),
            };
            let mut p = Parsing::initial();
            let v = spec.kind.parse(name, opt.split_once('=').map(|(_, v)| v)).unwrap();
            (spec.apply)(&mut p, name, v).unwrap_or_else(|e| panic!("{opt}: {e}"));
            assert_eq!(get(&p), before, "{opt} (the shown default) changes the setting");
        }
        // What the help says, for a few, against the Rust defaults.
        let text = crate::option_table::help();
        let d = cairn_core::MountOptions::default();
        assert!(text.contains(&format!("[default: {}]", d.commit_interval.as_secs())));
        assert!(text.contains(&format!("[default: {}]", d.mb_group_prealloc)));
        assert!(text.contains("[default: remount-ro]"));
    }

    #[test]
    fn norecovery_goes_with_ro_only() {
        assert!(parse(&["ro,norecovery"]).unwrap().engine.read_only);
        assert!(parse(&["noload,ro"]).unwrap().engine.read_only);
        assert!(parse(&["norecovery"]).unwrap_err().contains("needs ro"));
        assert!(parse(&["ro,norecovery,rw"]).unwrap_err().contains("needs ro"));
    }
}
