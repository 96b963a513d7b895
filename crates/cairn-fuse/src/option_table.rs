//! Every `-o` option in one table: its names, its value, its default, what
//! it does and who it is for. [`crate::options::parse`] applies the table,
//! and `cairn mount --help` prints it ([`help`]): an option is added here,
//! once, with its effect.

use crate::options::Parsing;
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

/// An option's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// A flag: `name`.
    None,
    /// `name=PLACEHOLDER`, required.
    Required(&'static str),
    /// `name` or `name=PLACEHOLDER`.
    Optional(&'static str),
}

/// One option.
pub struct Spec {
    /// Its names (aliases after the first).
    pub names: &'static [&'static str],
    pub value: Value,
    pub audience: Audience,
    /// The default, as users read it ("" for none).
    pub default: &'static str,
    pub help: &'static str,
    /// Applies `key` (one of `names`) with its value.
    pub apply: fn(&mut Parsing, &str, Option<&str>) -> Result<(), String>,
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

/// The value of an option whose value is required (the parser checked).
fn req(v: Option<&str>) -> &str {
    v.unwrap_or_default()
}

fn micros(key: &str, v: Option<&str>) -> Result<Option<Duration>, String> {
    let us = number(key, req(v), 0, 100_000)?;
    Ok((us > 0).then(|| Duration::from_micros(us)))
}

fn fuse(p: &mut Parsing, o: MountOption) -> Result<(), String> {
    p.s.fuse.push(o);
    Ok(())
}

const fn spec(
    names: &'static [&'static str],
    value: Value,
    audience: Audience,
    default: &'static str,
    help: &'static str,
    apply: fn(&mut Parsing, &str, Option<&str>) -> Result<(), String>,
) -> Spec {
    Spec { names, value, audience, default, help, apply }
}

use Audience::*;
use Value::{None as Flag, Optional, Required};

/// The table (see the module essay).
pub const OPTIONS: &[Spec] = &[
    spec(&["commit"], Required("SECONDS"), Cairn, "5", "journal commit interval (fractions allowed; above 0)", |p, k, v| {
        let d = seconds(k, req(v))?;
        if d.is_zero() {
            return Err("option commit=0: the commit interval must be above 0".into());
        }
        p.s.engine.commit_interval = d;
        Ok(())
    }),
    spec(&["log"], Required("FILE"), Cairn, "syslog, else a file (see `cairn mount --help`)",
        "append the background daemon's log to FILE (as --log FILE; for fstab)", |p, _, v| {
            p.s.log_file = Some(std::path::PathBuf::from(req(v)));
            Ok(())
        }),
    spec(&["cache_mb"], Required("N"), Cairn, "1/16 of RAM, 64..1024",
        "memory for the engine's caches, MiB: 15/32 to the metadata buffer cache (which sizes the images awaiting their home write, loaded buddies and a checkpoint's copies), 1/8 each to the inode and dentry caches",
        |p, k, v| {
            p.cache_mb = number(k, req(v), 4, 1 << 20)?;
            Ok(())
        }),
    spec(&["errors"], Required("continue|remount-ro|shutdown"), Cairn, "remount-ro",
        "what corruption or an I/O error does (ext4's names)", |p, _, v| {
            let v = req(v);
            p.s.engine.errors =
                ErrorPolicy::parse(v).ok_or_else(|| format!("option errors={v}: expected continue, remount-ro or shutdown"))?;
            Ok(())
        }),
    spec(&["discard"], Flag, Cairn, "off", "discard blocks (punch holes in the image file) once the checkpoint that frees them is durable; `fstrim` does it on demand", |p, _, _| {
        p.s.engine.discard = true;
        Ok(())
    }),
    spec(&["nodiscard"], Flag, Cairn, "", "no online discard", |p, _, _| {
        p.s.engine.discard = false;
        Ok(())
    }),
    spec(&["acl"], Flag, Cairn, "on", "POSIX ACLs (setfacl/getfacl, enforced by the kernel, inherited from default ACLs)", |p, _, _| {
        p.s.adapter.acl = true;
        Ok(())
    }),
    spec(&["noacl"], Flag, Cairn, "", "no POSIX ACLs", |p, _, _| {
        p.s.adapter.acl = false;
        Ok(())
    }),
    spec(&["entry_timeout"], Required("SECONDS"), Cairn, "60", "how long the kernel caches a name", |p, k, v| {
        p.timeouts.entry = seconds(k, req(v))?;
        Ok(())
    }),
    spec(&["attr_timeout"], Required("SECONDS"), Cairn, "60", "how long the kernel caches attributes", |p, k, v| {
        p.timeouts.attr = seconds(k, req(v))?;
        Ok(())
    }),
    spec(&["negative_timeout"], Required("SECONDS"), Cairn, "60", "how long the kernel caches a name's absence", |p, k, v| {
        p.timeouts.negative = seconds(k, req(v))?;
        Ok(())
    }),
    spec(&["writeback_cache"], Optional("0|1"), Cairn, "1",
        "the kernel's writeback cache: buffered writes reach cairn in large requests; 0 makes SEEK_HOLE see holes", |p, k, v| {
            p.s.adapter.writeback_cache = v.map_or(Ok(true), |v| switch(k, v))?;
            Ok(())
        }),
    spec(&["no_writeback_cache"], Flag, Cairn, "", "writeback_cache=0", |p, _, _| {
        p.s.adapter.writeback_cache = false;
        Ok(())
    }),
    spec(&["dirty_limit_mb"], Required("N"), Cairn, "1/16 of the file system, 8..64",
        "bound on the kernel's dirty pages for this mount (root only); the space guard keeps 4x that free and makes buffered writes say ENOSPC on a full disk; 0 leaves the dirty pages unbounded (the guard stays, with the default reserve)",
        |p, k, v| {
            p.s.dirty_limit_mb = Some(number(k, req(v), 0, 1 << 20)?);
            Ok(())
        }),
    spec(&["readahead_kb"], Required("N"), Cairn, "1024", "the connection's readahead window (root only; 0 keeps the kernel's 128)", |p, k, v| {
        p.s.readahead_kb = number(k, req(v), 0, 1 << 20)? as u32;
        Ok(())
    }),
    spec(&["max_write"], Required("BYTES"), Cairn, "1048576", "largest WRITE request", |p, k, v| {
        p.s.adapter.max_write = number(k, req(v), 4096, 16 << 20)? as u32;
        Ok(())
    }),
    spec(&["parallel_dio"], Required("0|1"), Cairn, "0",
        "answer OPEN, so O_DIRECT writers to one file overlap (FOPEN_PARALLEL_DIRECT_WRITES); costs an OPEN and a RELEASE per open (dbench 10-16% slower)",
        |p, k, v| {
            p.s.adapter.parallel_dio = switch(k, req(v))?;
            Ok(())
        }),
    spec(&["readdirplus"], Required("auto|always"), Cairn, "always",
        "list directories with READDIRPLUS (names with attributes) always, or where the kernel's heuristic asks (auto: cheaper names-only listings, a LOOKUP per entry for rm -rf and find)", |p, k, v| {
            p.s.adapter.readdirplus_always = match req(v) {
                "auto" => false,
                "always" => true,
                other => return Err(format!("{k}={other}: expected auto or always")),
            };
            Ok(())
        }),
    spec(&["mknod_create"], Required("0|1"), Cairn, "1",
        "make files with MKNOD (CREATE answered ENOSYS), which spares each created file its RELEASE; 0: FUSE_CREATE", |p, k, v| {
            p.s.adapter.mknod_create = switch(k, req(v))?;
            Ok(())
        }),
    spec(&["threads"], Required("N"), Cairn, "2", "worker threads reading /dev/fuse (1..64)", |p, k, v| {
        p.s.threads = number(k, req(v), 1, 64)? as usize;
        Ok(())
    }),
    spec(&["io_uring"], Required("0|1"), Cairn, "1", "serve requests through FUSE over io_uring, a queue per CPU (where the kernel offers it)", |p, k, v| {
        p.s.adapter.io_uring = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["ring_threads"], Required("N"), Cairn, "2", "threads per CPU queue under io_uring (1..16)", |p, k, v| {
        p.s.ring_threads = number(k, req(v), 1, 16)? as usize;
        Ok(())
    }),
    spec(&["ring_idle"], Required("0|1"), Cairn, "0",
        "run the io_uring queue threads as SCHED_IDLE (a lone O_DIRECT writer gains; a CPU-bound task on the same CPU starves the queue)", |p, k, v| {
            p.s.ring_idle = switch(k, req(v))?;
            Ok(())
        }),
    spec(&["ring_pin"], Required("0|1"), Measuring, "1",
        "pin each io_uring queue thread to its queue's CPU (0: the scheduler places them, so a lone reader's queue may run beside it)", |p, k, v| {
            p.s.ring_pin = switch(k, req(v))?;
            Ok(())
        }),
    spec(&["fuseblk"], Flag, Cairn, "on for root", "mount as fuseblk over a loop device, so that sync(1) reaches cairn (root only)", |p, _, _| {
        p.s.fuseblk = Some(true);
        Ok(())
    }),
    spec(&["nofuseblk"], Flag, Cairn, "", "a plain fuse mount", |p, _, _| {
        p.s.fuseblk = Some(false);
        Ok(())
    }),
    spec(&["norecovery", "noload"], Flag, Cairn, "", "with ro: mount without replaying the journal", |p, _, _| {
        p.norecovery = true;
        Ok(())
    }),
    // Measuring: each mechanism's off-switch and tuning knobs.
    spec(&["lru_caches"], Required("0|1"), Measuring, "1", "bounded inode and dentry caches (0: keep every inode the kernel holds, no dentry cache)", |p, k, v| {
        p.s.engine.lru_caches = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["mb_optimize_scan"], Required("0|1"), Measuring, "1", "find block groups through order lists and fragment buckets (ext4's option)", |p, k, v| {
        p.s.engine.mb_optimize_scan = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["mb_group_prealloc"], Required("N"), Measuring, "512", "blocks a locality group's run for small files (ext4's knob; 0 turns locality groups off)", |p, k, v| {
        p.s.engine.mb_group_prealloc = number(k, req(v), 0, 8192)? as u32;
        Ok(())
    }),
    spec(&["inode_readahead_blks"], Required("N"), Measuring, "32", "inode-table blocks read in one read when an inode is not cached (ext4's knob; 0 reads one block)", |p, k, v| {
        p.s.engine.inode_readahead_blks = number(k, req(v), 0, 1024)? as u32;
        Ok(())
    }),
    spec(&["node_readahead"], Required("0|1"), Measuring, "1", "read a directory or extent scan's next tree leaves ahead, nearby blocks in one read", |p, k, v| {
        p.s.engine.node_readahead = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["listing_readahead"], Required("0|1"), Measuring, "1", "read the inode-table blocks of a READDIRPLUS batch ahead, nearby blocks in one read", |p, k, v| {
        p.s.engine.listing_readahead = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["cache_listed"], Required("0|1"), Measuring, "0", "make an in-core inode of every inode a READDIRPLUS lists (0: read it from its buffer, leave the cache alone)", |p, k, v| {
        p.s.engine.cache_listed = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["overwrite_fastpath"], Required("0|1"), Measuring, "1", "overwrite allocated, written blocks with no journal transaction", |p, k, v| {
        p.s.engine.overwrite_fastpath = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["direct_data"], Required("0|1"), Measuring, "1",
        "read and write file data in the image with O_DIRECT, so the host caches each byte once (0: through the host's page cache)", |p, k, v| {
            p.s.direct_data = switch(k, req(v))?;
            Ok(())
        }),
    spec(&["delaylog"], Required("0|1"), Measuring, "1", "log only changed chunks and defer home writes (XFS's delayed logging)", |p, k, v| {
        p.s.engine.delaylog = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["journal_compress"], Required("0|1"), Measuring, "1", "compress each checkpoint's logged chunks (zstd)", |p, k, v| {
        p.s.engine.journal_compress = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["mbcache"], Flag, Measuring, "on", "share identical xattr blocks through the dedup cache", |p, _, _| {
        p.s.engine.mbcache = true;
        Ok(())
    }),
    spec(&["nombcache", "no_mbcache"], Flag, Measuring, "", "every inode its own xattr block (ext4's option)", |p, _, _| {
        p.s.engine.mbcache = false;
        Ok(())
    }),
    spec(&["sync_delete"], Flag, Measuring, "off", "free deleted files on the calling thread, not the reaper thread", |p, _, _| {
        p.s.engine.sync_delete = true;
        Ok(())
    }),
    spec(&["defer_orphans"], Required("0|1"), Measuring, "1", "put a deleted file the kernel still holds on the orphan list at the commit, not in its unlink", |p, k, v| {
        p.s.engine.defer_orphans = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["dio_coherence"], Required("0|1"), Measuring, "1", "drop the kernel's cached pages of a range written with O_DIRECT before replying", |p, k, v| {
        p.s.adapter.dio_coherence = switch(k, req(v))?;
        Ok(())
    }),
    spec(&["backend_nice"], Required("N"), Measuring, "10", "nice value (0..19) of the background commit thread", |p, k, v| {
        p.s.engine.backend_nice = number(k, req(v), 0, 19)? as i32;
        Ok(())
    }),
    spec(&["push_drain_us"], Required("N"), Measuring, "200", "how long (us, up to 100000) a commit's closed gate waits for the operations inside; 0: however long", |p, k, v| {
        p.s.engine.push_drain = micros(k, v)?;
        Ok(())
    }),
    spec(&["push_patience_us"], Required("N"), Measuring, "5000", "how long (us, up to 100000) a commit waits for an empty gate before closing it; 0: closes at once", |p, k, v| {
        p.s.engine.push_patience = micros(k, v)?;
        Ok(())
    }),
    // FUSE and the kernel's mount flags.
    spec(&["allow_other"], Flag, Fuse, "root's mounts", "let other users see the file system (the kernel checks the mode bits, as on ext4)", |p, _, _| {
        p.s.allow_other = Some(true);
        Ok(())
    }),
    spec(&["noallow_other"], Flag, Fuse, "", "only the mounting user (and with allow_root root) sees the file system", |p, _, _| {
        p.s.allow_other = Some(false);
        Ok(())
    }),
    spec(&["allow_root"], Flag, Fuse, "", "let root see it too", |p, _, _| {
        p.s.allow_root = true;
        Ok(())
    }),
    spec(&["default_permissions"], Flag, Fuse, "always", "the kernel checks permissions from the mode bits", |_, _, _| Ok(())),
    spec(&["ro"], Flag, Fuse, "", "read-only", |p, _, _| {
        p.s.engine.read_only = true;
        fuse(p, MountOption::RO)
    }),
    spec(&["rw"], Flag, Fuse, "rw", "read-write (the last of ro and rw wins)", |p, _, _| {
        p.s.engine.read_only = false;
        p.s.fuse.retain(|o| *o != MountOption::RO);
        Ok(())
    }),
    spec(&["dev"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::Dev)),
    spec(&["nodev"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::NoDev)),
    spec(&["suid"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::Suid)),
    spec(&["nosuid"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::NoSuid)),
    spec(&["exec"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::Exec)),
    spec(&["noexec"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::NoExec)),
    spec(&["atime"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::Atime)),
    spec(&["noatime"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::NoAtime)),
    spec(&["sync"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::Sync)),
    spec(&["async"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::Async)),
    spec(&["dirsync"], Flag, Fuse, "", "", |p, _, _| fuse(p, MountOption::DirSync)),
    spec(&["auto_unmount"], Flag, Fuse, "", "unmount when the daemon exits", |p, _, _| fuse(p, MountOption::AutoUnmount)),
    spec(&["fsname"], Required("NAME"), Fuse, "the image; root: the loop device", "the source df and the mount table show; a fuseblk mount (root's default; -o nofuseblk for a plain one) shows its block device (/dev/loopN for an image file) and ignores fsname=", |p, _, v| {
        p.s.fsname = Some(req(v).to_string());
        Ok(())
    }),
    spec(&["subtype"], Required("NAME"), Fuse, "cairn", "the mount type's subtype", |p, _, v| fuse(p, MountOption::Subtype(req(v).to_string()))),
    // fstab's and mount(8)'s own words, and the access-time policies: the
    // kernel never updates a FUSE inode's atime and cairn only on request
    // (utimensat), so every mount behaves as noatime.
    spec(
        &[
            "defaults", "auto", "noauto", "user", "users", "nouser", "nofail", "_netdev", "comment", "relatime",
            "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "diratime", "nodiratime",
            "iversion", "noiversion",
        ],
        Optional("..."),
        Ignored,
        "",
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

/// The options as `cairn mount --help` prints them, grouped by audience.
pub fn help() -> String {
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
            let names = names.join(" | ");
            let name = match s.value {
                Value::None => names,
                Value::Required(v) => format!("{names}={v}"),
                Value::Optional(v) => format!("{names}[={v}]"),
            };
            let default = if s.default.is_empty() { String::new() } else { format!(" [default: {}]", s.default) };
            out.push_str(&format!("  {name}\n"));
            if !s.help.is_empty() || !default.is_empty() {
                out.push_str(&format!("      {}{default}\n", s.help));
            }
        }
    }
    out
}
