//! Every `-o` option in one table: its names, the kind of its value, its
//! default, what it does and who it is for. [`parse`]
//! applies the table, and `cairn mount --help` prints it ([`help`]): an
//! option is added here, once, with its effect.
//!
//! A value's [`Kind`] is what parses and checks it (a switch is `0|1`, a
//! count lies in its range, a choice is one of its words) and what `--help`
//! shows (`name=0|1`, `name=N` with its range, `name=auto|always`); the
//! row's `apply` receives the value already parsed ([`Val`]). A default is
//! written once, in Rust (`MountOptions::default()`, the adapter's and the
//! session's defaults): a row names the setting it changes ([`Shown::Of`])
//! and `--help` prints what an empty `-o` leaves there, so the text cannot
//! drift from the code; only defaults decided at mount time (a share of the
//! machine's memory, root or not) are described in words ([`Shown::Text`]).
//! A test parses every row with its shown default and checks that it
//! changes nothing.

use crate::options::{Parsing, Settings};
use cairn_core::ErrorPolicy;
use fuser::MountOption;
use std::time::Duration;

/// Who an option is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// cairn's options for users.
    Cairn,
    /// Switches for measuring a mechanism against its absence (benchmarks):
    /// the defaults are what users want.
    Measuring,
    /// FUSE and kernel mount options.
    Fuse,
    /// Accepted so that fstab lines written for other file systems mount,
    /// and ignored.
    Ignored,
}

/// The kind of an option's value: how it is parsed and checked, and how
/// `--help` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No value: `name`.
    Flag,
    /// `name=0|1`.
    Bool,
    /// `name` (on) or `name=0|1`.
    OptBool,
    /// `name=UNIT`: a whole number from `min` to `max`.
    Count { unit: &'static str, min: u64, max: u64 },
    /// `name=SECONDS`: fractions allowed, up to a year.
    Seconds,
    /// `name=WORD`: one of these words.
    Choice(&'static [&'static str]),
    /// `name=FILE`.
    Path,
    /// `name=NAME`: any text.
    Name,
    /// Anything or nothing (mount(8)'s and fstab's words).
    Any,
}

/// A value parsed by its [`Kind`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val<'a> {
    /// A flag, or an ignored option.
    None,
    Bool(bool),
    Count(u64),
    Seconds(Duration),
    /// A choice's word, a path or a name.
    Text(&'a str),
}

impl<'a> Val<'a> {
    /// The value of a `Bool` or `OptBool` row (the table's test parses
    /// every row, so a row reading the wrong kind fails it).
    pub fn bool(self) -> bool {
        matches!(self, Val::Bool(true))
    }

    /// The value of a `Count` row.
    pub fn count(self) -> u64 {
        if let Val::Count(n) = self {
            n
        } else {
            0
        }
    }

    /// The value of a `Seconds` row.
    pub fn seconds(self) -> Duration {
        if let Val::Seconds(d) = self {
            d
        } else {
            Duration::ZERO
        }
    }

    /// The text of a `Choice`, `Path` or `Name` row.
    pub fn text(self) -> &'a str {
        if let Val::Text(t) = self {
            t
        } else {
            ""
        }
    }
}

/// An option's default as `--help` shows it.
pub enum Shown {
    /// None shown (the other half of a pair such as `acl`/`noacl`, a kernel
    /// flag).
    None,
    /// The setting the option changes, read from what an empty `-o` leaves
    /// ([`Parsing::initial`]), shown in the option's own syntax (a flag:
    /// on or off).
    Of(fn(&Parsing) -> Val<'static>),
    /// A default decided at mount time, in words.
    Text(&'static str),
}

/// One option.
pub struct Spec {
    /// Its names (aliases after the first).
    pub names: &'static [&'static str],
    pub kind: Kind,
    pub audience: Audience,
    pub default: Shown,
    pub help: &'static str,
    /// Applies `key` (one of `names`) with its parsed value.
    pub apply: fn(&mut Parsing, &str, Val) -> Result<(), String>,
}

impl Kind {
    /// Whether `name` alone is accepted.
    pub fn bare_ok(self) -> bool {
        matches!(self, Kind::Flag | Kind::OptBool | Kind::Any)
    }

    /// Whether `name=VALUE` is accepted.
    pub fn takes_value(self) -> bool {
        self != Kind::Flag
    }

    /// Parses option `key`'s value `v` (`None`: given bare, which the
    /// caller has checked is allowed).
    pub fn parse<'a>(self, key: &str, v: Option<&'a str>) -> Result<Val<'a>, String> {
        let Some(v) = v else {
            return Ok(if self == Kind::OptBool { Val::Bool(true) } else { Val::None });
        };
        match self {
            Kind::Flag | Kind::Any => Ok(Val::None),
            Kind::Bool | Kind::OptBool => match v {
                "1" => Ok(Val::Bool(true)),
                "0" => Ok(Val::Bool(false)),
                _ => Err(format!("option {key}={v}: expected 0 or 1")),
            },
            Kind::Count { min, max, .. } => {
                let n: u64 = v.parse().map_err(|_| format!("option {key}={v}: not a whole number"))?;
                if n < min || n > max {
                    return Err(format!("option {key}={v}: must be between {min} and {max}"));
                }
                Ok(Val::Count(n))
            }
            Kind::Seconds => {
                let s: f64 = v.parse().map_err(|_| format!("option {key}={v}: not a number of seconds"))?;
                if !(0.0..=86_400.0 * 365.0).contains(&s) {
                    return Err(format!("option {key}={v}: out of range"));
                }
                Ok(Val::Seconds(Duration::from_secs_f64(s)))
            }
            Kind::Choice(words) => match words.iter().find(|w| **w == v) {
                Some(_) => Ok(Val::Text(v)),
                None => Err(format!("option {key}={v}: expected {}", words.join(", "))),
            },
            Kind::Path | Kind::Name => Ok(Val::Text(v)),
        }
    }

    /// `name` with its value's placeholder, as `--help` shows it.
    fn usage(self, names: &str) -> String {
        match self {
            Kind::Flag => names.to_string(),
            Kind::Bool => format!("{names}=0|1"),
            Kind::OptBool => format!("{names}[=0|1]"),
            Kind::Count { unit, .. } => format!("{names}={unit}"),
            Kind::Seconds => format!("{names}=SECONDS"),
            Kind::Choice(words) => format!("{names}={}", words.join("|")),
            Kind::Path => format!("{names}=FILE"),
            Kind::Name => format!("{names}=NAME"),
            Kind::Any => format!("{names}[=...]"),
        }
    }

    /// Value `v` as it would be written after `name=` (a flag's: on or
    /// off).
    pub fn show(self, v: Val) -> String {
        match (self, v) {
            (Kind::Flag, Val::Bool(b)) => (if b { "on" } else { "off" }).to_string(),
            (_, Val::Bool(b)) => u8::from(b).to_string(),
            (_, Val::Count(n)) => n.to_string(),
            (_, Val::Seconds(d)) => {
                let s = d.as_secs_f64();
                if s.fract() == 0.0 {
                    format!("{}", d.as_secs())
                } else {
                    format!("{s}")
                }
            }
            (_, Val::Text(t)) => t.to_string(),
            (_, Val::None) => String::new(),
        }
    }
}

fn fuse(p: &mut Parsing, o: MountOption) -> Result<(), String> {
    p.s.fuse.push(o);
    Ok(())
}

/// Microseconds, 0 for none (the gate's tuning).
fn micros(v: Val) -> Option<Duration> {
    let us = v.count();
    (us > 0).then(|| Duration::from_micros(us))
}

/// `Some(d)` as microseconds, `None` as 0.
fn as_micros(d: Option<Duration>) -> Val<'static> {
    Val::Count(d.map_or(0, |d| d.as_micros() as u64))
}

const fn spec(
    names: &'static [&'static str],
    kind: Kind,
    audience: Audience,
    default: Shown,
    help: &'static str,
    apply: fn(&mut Parsing, &str, Val) -> Result<(), String>,
) -> Spec {
    Spec { names, kind, audience, default, help, apply }
}

const fn count(unit: &'static str, min: u64, max: u64) -> Kind {
    Kind::Count { unit, min, max }
}

use Audience::*;
use Kind::{Any, Bool, Choice, Flag, Name, OptBool, Path, Seconds};
use Shown::{None as NoDefault, Of, Text};

/// The table (see the module essay).
pub const OPTIONS: &[Spec] = &[
    spec(&["commit"], Seconds, Cairn, Of(|p| Val::Seconds(p.s.engine.commit_interval)), "journal commit interval (fractions allowed; above 0)", |p, _, v| {
        if v.seconds().is_zero() {
            return Err("option commit=0: the commit interval must be above 0".into());
        }
        p.s.engine.commit_interval = v.seconds();
        Ok(())
    }),
    spec(&["log"], Path, Cairn, Text("syslog, else a file (see `cairn mount --help`)"),
        "append the background daemon's log to FILE (as --log FILE; for fstab)", |p, _, v| {
            p.s.log_file = Some(std::path::PathBuf::from(v.text()));
            Ok(())
        }),
    spec(&["keyfile"], Path, Cairn, Text("none (a plain image)"),
        "open an encrypted image with the key in FILE (as --key-file FILE; for fstab)", |p, _, v| {
            p.s.key_file = Some(std::path::PathBuf::from(v.text()));
            Ok(())
        }),
    spec(&["cache_mb"], count("N", 4, 1 << 20), Cairn, Text("1/16 of RAM, 64..1024"),
        "memory for the engine's caches, MiB: 15/32 to the metadata buffer cache (which sizes the images awaiting their home write, loaded buddies and a checkpoint's copies), 1/8 each to the inode and dentry caches",
        |p, _, v| {
            p.cache_mb = v.count();
            Ok(())
        }),
    spec(&["errors"], Choice(&["continue", "remount-ro", "shutdown"]), Cairn, Of(|p| Val::Text(p.s.engine.errors.name())),
        "what corruption or an I/O error does (ext4's names)", |p, _, v| {
            p.s.engine.errors = ErrorPolicy::parse(v.text()).unwrap_or_default();
            Ok(())
        }),
    spec(&["discard"], Flag, Cairn, Of(|p| Val::Bool(p.s.engine.discard)), "discard blocks (punch holes in the image file) once the checkpoint that frees them is durable; `fstrim` does it on demand", |p, _, _| {
        p.s.engine.discard = true;
        Ok(())
    }),
    spec(&["nodiscard"], Flag, Cairn, NoDefault, "no online discard", |p, _, _| {
        p.s.engine.discard = false;
        Ok(())
    }),
    spec(&["allow_discards"], Flag, Cairn, Of(|p| Val::Bool(p.s.allow_discards)),
        "let an encrypted image's discards (-o discard, fstrim) through: they show which blocks are free, so they are off without it (as LUKS' allow-discards); nothing on a plain image", |p, _, _| {
        p.s.allow_discards = true;
        Ok(())
    }),
    spec(&["acl"], Flag, Cairn, Of(|p| Val::Bool(p.s.adapter.acl)), "POSIX ACLs (setfacl/getfacl, enforced by the kernel, inherited from default ACLs)", |p, _, _| {
        p.s.adapter.acl = true;
        Ok(())
    }),
    spec(&["noacl"], Flag, Cairn, NoDefault, "no POSIX ACLs", |p, _, _| {
        p.s.adapter.acl = false;
        Ok(())
    }),
    spec(&["entry_timeout"], Seconds, Cairn, Of(|p| Val::Seconds(p.timeouts.entry)), "how long the kernel caches a name", |p, _, v| {
        p.timeouts.entry = v.seconds();
        Ok(())
    }),
    spec(&["attr_timeout"], Seconds, Cairn, Of(|p| Val::Seconds(p.timeouts.attr)), "how long the kernel caches attributes", |p, _, v| {
        p.timeouts.attr = v.seconds();
        Ok(())
    }),
    spec(&["negative_timeout"], Seconds, Cairn, Of(|p| Val::Seconds(p.timeouts.negative)), "how long the kernel caches a name's absence", |p, _, v| {
        p.timeouts.negative = v.seconds();
        Ok(())
    }),
    spec(&["writeback_cache"], OptBool, Cairn, Of(|p| Val::Bool(p.s.adapter.writeback_cache)),
        "the kernel's writeback cache: buffered writes reach cairn in large requests; 0 makes SEEK_HOLE see holes", |p, _, v| {
            p.s.adapter.writeback_cache = v.bool();
            Ok(())
        }),
    spec(&["no_writeback_cache"], Flag, Cairn, NoDefault, "writeback_cache=0", |p, _, _| {
        p.s.adapter.writeback_cache = false;
        Ok(())
    }),
    spec(&["dirty_limit_mb"], count("N", 0, 1 << 20), Cairn, Text("1/16 of the file system, 8..64"),
        "bound on the kernel's dirty pages for this mount (root only); the space guard keeps 4x that free and makes buffered writes say ENOSPC on a full disk; 0 leaves the dirty pages unbounded (the guard stays, with the default reserve)",
        |p, _, v| {
            p.s.dirty_limit_mb = Some(v.count());
            Ok(())
        }),
    spec(&["readahead_kb"], count("N", 0, 1 << 20), Cairn, Of(|p| Val::Count(p.s.readahead_kb.into())), "the connection's readahead window (root only; 0 keeps the kernel's 128)", |p, _, v| {
        p.s.readahead_kb = v.count() as u32;
        Ok(())
    }),
    spec(&["max_write"], count("BYTES", 4096, 16 << 20), Cairn, Of(|p| Val::Count(p.s.adapter.max_write.into())), "largest WRITE request", |p, _, v| {
        p.s.adapter.max_write = v.count() as u32;
        Ok(())
    }),
    spec(&["parallel_dio"], Bool, Cairn, Of(|p| Val::Bool(p.s.adapter.parallel_dio)),
        "answer OPEN, so O_DIRECT writers to one file overlap (FOPEN_PARALLEL_DIRECT_WRITES); costs an OPEN and a RELEASE per open (dbench 10-16% slower)",
        |p, _, v| {
            p.s.adapter.parallel_dio = v.bool();
            Ok(())
        }),
    spec(&["readdirplus"], Choice(&["auto", "always"]), Cairn, Of(|p| Val::Text(if p.s.adapter.readdirplus_always { "always" } else { "auto" })),
        "list directories with READDIRPLUS (names with attributes) always, or where the kernel's heuristic asks (auto: cheaper names-only listings, a LOOKUP per entry for rm -rf and find)", |p, _, v| {
            p.s.adapter.readdirplus_always = v.text() == "always";
            Ok(())
        }),
    spec(&["mknod_create"], Bool, Cairn, Of(|p| Val::Bool(p.s.adapter.mknod_create)),
        "make files with MKNOD (CREATE answered ENOSYS), which spares each created file its RELEASE; 0: FUSE_CREATE", |p, _, v| {
            p.s.adapter.mknod_create = v.bool();
            Ok(())
        }),
    spec(&["direct_data"], Bool, Cairn, Of(|p| Val::Bool(p.s.direct_data)),
        "read and write file data in the image with O_DIRECT, so the host caches each byte once (0: through the host's page cache, where the host refuses O_DIRECT)", |p, _, v| {
            p.s.direct_data = v.bool();
            Ok(())
        }),
    spec(&["threads"], count("N", 1, 64), Cairn, Of(|p| Val::Count(p.s.threads as u64)), "worker threads reading /dev/fuse", |p, _, v| {
        p.s.threads = v.count() as usize;
        Ok(())
    }),
    spec(&["io_uring"], Bool, Cairn, Of(|p| Val::Bool(p.s.adapter.io_uring)), "serve requests through FUSE over io_uring, a queue per CPU (where the kernel offers it)", |p, _, v| {
        p.s.adapter.io_uring = v.bool();
        Ok(())
    }),
    spec(&["ring_threads"], count("N", 1, 16), Cairn, Of(|p| Val::Count(p.s.ring_threads as u64)), "threads per CPU queue under io_uring", |p, _, v| {
        p.s.ring_threads = v.count() as usize;
        Ok(())
    }),
    spec(&["ring_idle"], Bool, Cairn, Of(|p| Val::Bool(p.s.ring_idle)),
        "run the io_uring queue threads as SCHED_IDLE (a lone O_DIRECT writer gains; a CPU-bound task on the same CPU starves the queue)", |p, _, v| {
            p.s.ring_idle = v.bool();
            Ok(())
        }),
    spec(&["ring_pin"], Bool, Measuring, Of(|p| Val::Bool(p.s.ring_pin)),
        "pin each io_uring queue thread to its queue's CPU (0: the scheduler places them, so a lone reader's queue may run beside it)", |p, _, v| {
            p.s.ring_pin = v.bool();
            Ok(())
        }),
    spec(&["read_move"], Bool, Measuring, Of(|p| Val::Bool(p.s.read_move)),
        "an io_uring queue thread serving a READ of 256 KiB or more moves to the next CPU when no such READ arrived on that CPU's queue in the last 2 ms nor one of another file anywhere in the last 100 ms, and back for any other request (a lone reader's pread and page cache copy run beside it)", |p, _, v| {
            p.s.read_move = v.bool();
            Ok(())
        }),
    spec(&["ring_spread"], Bool, Measuring, Of(|p| Val::Bool(p.s.ring_spread)),
        "pin a queue's threads round the CPUs, thread t of queue q on CPU q+t (a lone reader's second READ in flight is served on another CPU)", |p, _, v| {
            p.s.ring_spread = v.bool();
            Ok(())
        }),
    spec(&["fuseblk"], Flag, Cairn, Text("on for root"), "mount as fuseblk over a loop device, so that sync(1) reaches cairn (root only)", |p, _, _| {
        p.s.fuseblk = Some(true);
        Ok(())
    }),
    spec(&["nofuseblk"], Flag, Cairn, NoDefault, "a plain fuse mount", |p, _, _| {
        p.s.fuseblk = Some(false);
        Ok(())
    }),
    spec(&["norecovery", "noload"], Flag, Cairn, NoDefault, "with ro: mount without replaying the journal", |p, _, _| {
        p.norecovery = true;
        Ok(())
    }),
    // Measuring: each mechanism's off-switch and tuning knobs.
    spec(&["lru_caches"], Bool, Measuring, Of(|p| Val::Bool(p.s.engine.lru_caches)), "bounded inode and dentry caches (0: keep every inode the kernel holds, no dentry cache)", |p, _, v| {
        p.s.engine.lru_caches = v.bool();
        Ok(())
    }),
    spec(&["mb_optimize_scan"], Bool, Measuring, Of(|p| Val::Bool(p.s.engine.mb_optimize_scan)), "find block groups through order lists and fragment buckets (ext4's option)", |p, _, v| {
        p.s.engine.mb_optimize_scan = v.bool();
        Ok(())
    }),
    spec(&["mb_group_prealloc"], count("N", 0, 8192), Measuring, Of(|p| Val::Count(p.s.engine.mb_group_prealloc.into())), "blocks a locality group's run for small files (ext4's knob; 0 turns locality groups off)", |p, _, v| {
        p.s.engine.mb_group_prealloc = v.count() as u32;
        Ok(())
    }),
    spec(&["inode_readahead_blks"], count("N", 0, 1024), Measuring, Of(|p| Val::Count(p.s.engine.inode_readahead_blks.into())), "inode-table blocks read in one read when an inode is not cached, and a READDIRPLUS batch's read ahead (ext4's knob; 0 reads one block)", |p, _, v| {
        p.s.engine.inode_readahead_blks = v.count() as u32;
        Ok(())
    }),
    spec(&["node_readahead"], Bool, Measuring, Of(|p| Val::Bool(p.s.engine.node_readahead)), "read a directory or extent scan's next tree leaves ahead, nearby blocks in one read", |p, _, v| {
        p.s.engine.node_readahead = v.bool();
        Ok(())
    }),
    spec(&["overwrite_fastpath"], Bool, Measuring, Of(|p| Val::Bool(p.s.engine.overwrite_fastpath)), "overwrite allocated, written blocks with no journal transaction", |p, _, v| {
        p.s.engine.overwrite_fastpath = v.bool();
        Ok(())
    }),
    spec(&["staged_writes"], Bool, Measuring, Of(|p| Val::Bool(p.s.engine.staged_writes)), "a write into holes maps its blocks unwritten, copies its data with no journal transaction open, then maps them written (0, the default: all in one transaction, which every commit waits for; 1 can refuse a write-back near a full disk)", |p, _, v| {
        p.s.engine.staged_writes = v.bool();
        Ok(())
    }),
    spec(&["delaylog"], Bool, Measuring, Of(|p| Val::Bool(p.s.engine.delaylog)), "log only changed chunks and defer home writes (XFS's delayed logging)", |p, _, v| {
        p.s.engine.delaylog = v.bool();
        Ok(())
    }),
    spec(&["journal_compress"], Bool, Measuring, Of(|p| Val::Bool(p.s.engine.journal_compress)), "compress each checkpoint's logged chunks (zstd)", |p, _, v| {
        p.s.engine.journal_compress = v.bool();
        Ok(())
    }),
    spec(&["mbcache"], Flag, Measuring, Of(|p| Val::Bool(p.s.engine.mbcache)), "share identical xattr blocks through the dedup cache", |p, _, _| {
        p.s.engine.mbcache = true;
        Ok(())
    }),
    spec(&["nombcache", "no_mbcache"], Flag, Measuring, NoDefault, "every inode its own xattr block (ext4's option)", |p, _, _| {
        p.s.engine.mbcache = false;
        Ok(())
    }),
    spec(&["sync_delete"], Flag, Measuring, Of(|p| Val::Bool(p.s.engine.sync_delete)), "free deleted files on the calling thread, not the reaper thread", |p, _, _| {
        p.s.engine.sync_delete = true;
        Ok(())
    }),
    spec(&["push_drain_us"], count("N", 0, 100_000), Measuring, Of(|p| as_micros(p.s.engine.push_drain)), "how long (us) a commit's closed gate waits for the operations inside; 0: however long", |p, _, v| {
        p.s.engine.push_drain = micros(v);
        Ok(())
    }),
    spec(&["push_patience_us"], count("N", 0, 100_000), Measuring, Of(|p| as_micros(p.s.engine.push_patience)), "how long (us) a commit waits for an empty gate before closing it; 0: closes at once", |p, _, v| {
        p.s.engine.push_patience = micros(v);
        Ok(())
    }),
    spec(&["conflict_probe"], Flag, Measuring, Of(|p| Val::Bool(p.s.engine.conflict_probe)), "count the changes that would meet another running operation's if operations kept their changes private until their end (docs/gate-plan.md)", |p, _, _| {
        p.s.engine.conflict_probe = true;
        Ok(())
    }),
    // FUSE and the kernel's mount flags.
    spec(&["allow_other"], Flag, Fuse, Text("root's mounts"), "let other users see the file system (the kernel checks the mode bits, as on ext4)", |p, _, _| {
        p.s.allow_other = Some(true);
        Ok(())
    }),
    spec(&["noallow_other"], Flag, Fuse, NoDefault, "only the mounting user (and with allow_root root) sees the file system", |p, _, _| {
        p.s.allow_other = Some(false);
        Ok(())
    }),
    spec(&["allow_root"], Flag, Fuse, NoDefault, "let root see it too", |p, _, _| {
        p.s.allow_root = true;
        Ok(())
    }),
    spec(&["default_permissions"], Flag, Fuse, Text("always"), "the kernel checks permissions from the mode bits", |_, _, _| Ok(())),
    spec(&["ro"], Flag, Fuse, NoDefault, "read-only", |p, _, _| {
        p.s.engine.read_only = true;
        fuse(p, MountOption::RO)
    }),
    spec(&["rw"], Flag, Fuse, Of(|p| Val::Bool(!p.s.engine.read_only)), "read-write (the last of ro and rw wins)", |p, _, _| {
        p.s.engine.read_only = false;
        p.s.fuse.retain(|o| *o != MountOption::RO);
        Ok(())
    }),
    spec(&["dev"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::Dev)),
    spec(&["nodev"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::NoDev)),
    spec(&["suid"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::Suid)),
    spec(&["nosuid"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::NoSuid)),
    spec(&["exec"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::Exec)),
    spec(&["noexec"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::NoExec)),
    spec(&["atime"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::Atime)),
    spec(&["noatime"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::NoAtime)),
    spec(&["sync"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::Sync)),
    spec(&["async"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::Async)),
    spec(&["dirsync"], Flag, Fuse, NoDefault, "", |p, _, _| fuse(p, MountOption::DirSync)),
    spec(&["auto_unmount"], Flag, Fuse, NoDefault, "unmount when the daemon exits", |p, _, _| fuse(p, MountOption::AutoUnmount)),
    spec(&["fsname"], Name, Fuse, Text("the image; root: the loop device"), "the source df and the mount table show; a fuseblk mount (root's default; -o nofuseblk for a plain one) shows its block device (/dev/loopN for an image file) and ignores fsname=", |p, _, v| {
        p.s.fsname = Some(v.text().to_string());
        Ok(())
    }),
    spec(&["subtype"], Name, Fuse, Text(crate::SUBTYPE), "the mount type's subtype", |p, _, v| fuse(p, MountOption::Subtype(v.text().to_string()))),
    // fstab's and mount(8)'s own words, and the access-time policies: the
    // kernel never updates a FUSE inode's atime and cairn only on request
    // (utimensat), so every mount behaves as noatime.
    spec(
        &[
            "defaults", "auto", "noauto", "user", "users", "nouser", "nofail", "_netdev", "comment", "relatime",
            "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "diratime", "nodiratime",
            "iversion", "noiversion",
        ],
        Any,
        Ignored,
        NoDefault,
        "mount(8)'s and fstab's options, and the access-time policies (cairn never updates atime on a read); also x-*",
        |_, _, _| Ok(()),
    ),
];

/// The spec of option `key` (`x-*` are fstab's: ignored).
pub fn find(key: &str) -> Option<&'static Spec> {
    if key.starts_with("x-") {
        return OPTIONS.iter().find(|s| s.audience == Ignored);
    }
    if let Some(bare) = key.strip_prefix(DEBUG_PREFIX) {
        return OPTIONS.iter().find(|s| s.audience == Measuring && s.names.contains(&bare));
    }
    OPTIONS.iter().find(|s| s.names.contains(&key))
}

/// The prefix that names a measuring option (`debug.push_patience_us`,
/// `debug.overwrite_fastpath=0`); their bare names are accepted too (some
/// are ext4's: `mb_optimize_scan`, `nombcache`, `delaylog`).
pub const DEBUG_PREFIX: &str = "debug.";

/// The options as `cairn mount --help` prints them, grouped by audience,
/// each with its default (read from an empty `-o`: see [`Shown`]).
pub fn help() -> String {
    let initial = Parsing::initial();
    let mut out = String::from("Mount options, comma-separated (several -o may be given):\n");
    for (aud, title) in [
        (Cairn, "cairn's options"),
        (Fuse, "FUSE and kernel options"),
        (Measuring, "for measuring a mechanism against its absence (benchmarks; the defaults are the ones to use; the bare names work too)"),
        (Ignored, "accepted and ignored"),
    ] {
        out.push_str(&format!("\n{title}:\n"));
        for s in OPTIONS.iter().filter(|s| s.audience == aud) {
            let prefix = if aud == Measuring { DEBUG_PREFIX } else { "" };
            let names: Vec<String> = s.names.iter().map(|n| format!("{prefix}{n}")).collect();
            out.push_str(&format!("  {}\n", s.kind.usage(&names.join(" | "))));
            let mut notes = Vec::new();
            match s.default {
                Shown::None => {}
                Shown::Of(get) => notes.push(format!("default: {}", s.kind.show(get(&initial)))),
                Shown::Text(t) => notes.push(format!("default: {t}")),
            }
            if let Kind::Count { min, max, .. } = s.kind {
                notes.push(format!("range {min}..{max}"));
            }
            let notes: String = notes.iter().map(|n| format!(" [{n}]")).collect();
            if !s.help.is_empty() || !notes.is_empty() {
                out.push_str(&format!("      {}{notes}\n", s.help));
            }
        }
    }
    out
}

/// Parses comma-separated `-o` option strings (several `-o` may be given)
/// through the option table.
pub fn parse<S: AsRef<str>>(groups: &[S]) -> Result<Settings, String> {
    let mut p = Parsing::initial();
    for group in groups {
        for opt in group.as_ref().split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, val) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let spec = find(key).ok_or_else(|| format!("unknown mount option '{opt}' (see `cairn mount --help`)"))?;
            match val {
                None if !spec.kind.bare_ok() => return Err(format!("option {key} needs a value ({key}=...)")),
                Some(_) if !spec.kind.takes_value() => return Err(format!("option {key} takes no value")),
                _ => {}
            }
            let v = spec.kind.parse(key, val)?;
            (spec.apply)(&mut p, key, v)?;
        }
    }
    let Parsing { mut s, timeouts, cache_mb, norecovery } = p;
    if norecovery && !s.engine.read_only {
        return Err("option norecovery needs ro: a read-write mount replays the journal".into());
    }
    s.adapter.timeouts = timeouts;
    s.engine.memory_budget = Some(cache_mb << 20);
    Ok(s)
}
