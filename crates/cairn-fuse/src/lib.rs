//! # cairn-fuse: the FUSE front end
//!
//! A thin adapter from FUSE requests to the engine API ([`cairn_core::Fs`]):
//! [`adapter`] has one handler per opcode, [`convert`] the type conversions,
//! [`options`] the `-o` mount options. This crate owns no on-disk state and
//! decides nothing about the file system's contents: everything durable is
//! the engine's.
//!
//! ## Why fuser (vendored)
//! fuser 0.18 is pure Rust (no libfuse), serves requests from several threads
//! (`Config { n_threads, clone_fd }`, each thread with its own `/dev/fuse`
//! descriptor), and offers every init flag cairn asks for (writeback cache,
//! parallel dirops, readdirplus, max pages). Two opcodes cairn needs are
//! missing from its release: FUSE_SYNCFS (without it `sync(1)` and `syncfs(2)`
//! never reach the file system) and FUSE_TMPFILE (`O_TMPFILE`). cairn carries
//! fuser in `vendor/fuser` with those two added (see
//! `vendor/fuser/CAIRN-PATCHES.md`); its maintainers no longer take outside
//! patches, so the vendored copy is the way to keep them.
//!
//! ## Threads
//! [`Settings::threads`] worker threads (default 2 on this 2-core machine: the
//! measured best) each read requests from their own cloned descriptor and call
//! straight into the engine. There is no lock in this crate.
//!
//! ## Request counters
//! [`metrics`]: per opcode, requests, errors, and log2 histograms of the time
//! inside the engine and from handler entry to reply; `cairn stats MOUNTPOINT`
//! shows them as `fuse.<opcode>.*`. Atomics only: no lock on the hot path.
//!
//! ## Unmount
//! On a fuseblk mount the kernel sends FUSE_DESTROY and `umount(2)` waits for
//! its reply; the vendored fuser calls `destroy_request` before replying, and
//! cairn unmounts the engine there: final commit, checkpoint, image marked
//! clean. A plain fuse mount gets no DESTROY: the session ends with ENODEV,
//! fuser joins the workers and calls `destroy`, which does the same (a no-op
//! when already done). Only then does the daemon exit, so "the daemon has
//! exited" means "the image is clean"; `cairn umount` waits for exactly that.

pub mod adapter;
mod arming;
mod callers;
mod chattr;
mod coherence;
pub mod convert;
pub mod declined;
pub mod metrics;
pub mod option_table;
pub mod options;
pub mod privs;
mod shutdown;
pub mod space;

pub use adapter::{negotiate, AdapterOptions, CairnFuse, Negotiated, Timeouts};
pub use metrics::Metrics;
pub use option_table::parse as parse_options;
pub use options::Settings;
pub use space::SpaceGuard;

use cairn_core::Fs;
use fuser::{Config, MountOption, Session, SessionACL};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// The mount type's subtype (`fuse.cairn`, `fuseblk.cairn`) unless
/// `-o subtype=` names another.
pub const SUBTYPE: &str = "cairn";

/// The fuser session configuration for `settings`.
pub fn session_config(settings: &Settings, fsname: &str) -> Config {
    let mut cfg = Config::default();
    let source = match &settings.block_device {
        Some(dev) => dev.clone(),
        None => settings.fsname.clone().unwrap_or_else(|| fsname.to_string()),
    };
    let mut mo =
        vec![MountOption::FSName(source), MountOption::Subtype(SUBTYPE.into()), MountOption::DefaultPermissions];
    // `subtype=` given by the user replaces ours.
    if settings.fuse.iter().any(|o| matches!(o, MountOption::Subtype(_))) {
        mo.retain(|o| !matches!(o, MountOption::Subtype(_)));
    }
    mo.extend(settings.fuse.iter().cloned());
    if settings.block_device.is_some() {
        // The vendored fuser mounts as "fuseblk" when it sees `blksize=`.
        mo.push(MountOption::CUSTOM("blksize=4096".into()));
    }
    cfg.mount_options = mo;
    cfg.acl = if settings.others_allowed() {
        SessionACL::All
    } else if settings.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    cfg.n_threads = Some(settings.threads);
    cfg.clone_fd = settings.threads > 1;
    cfg.io_uring = settings.adapter.io_uring;
    cfg.io_uring_threads_per_queue = settings.ring_threads;
    cfg.io_uring_idle_priority = settings.ring_idle;
    cfg.io_uring_unpinned = !settings.ring_pin;
    cfg
}

/// Mounts `fs` at `mountpoint` and completes the FUSE handshake; the file
/// system answers requests once the returned session runs
/// ([`Session::run`]). `fsname` is the mount table's source column; the
/// session counts its requests in `metrics` ([`Metrics::counters`]).
/// Returns the session and its space guard (see [`space`]).
pub fn mount(
    fs: Arc<Fs>,
    mountpoint: &Path,
    settings: &Settings,
    fsname: &str,
    metrics: Arc<Metrics>,
) -> io::Result<(Session<CairnFuse>, Arc<SpaceGuard>)> {
    let cfg = session_config(settings, fsname);
    let mut settings = settings.clone();
    if settings.adapter.io_uring && !fuser::io_uring_kernel_switch(true) {
        tracing::warn!(
            "FUSE over io_uring is off in this kernel (/sys/module/fuse/parameters/enable_uring; root turns it on): serving through /dev/fuse"
        );
        settings.adapter.io_uring = false;
    }
    settings.adapter.serving_threads = if settings.adapter.io_uring { settings.ring_threads } else { settings.threads };
    let settings = &settings;
    let fuse = CairnFuse::with_metrics(fs, settings.adapter, metrics);
    let space = fuse.space().clone();
    let notify = fuse.kernel_notifier();
    let session = Session::new(fuse, mountpoint, &cfg)?;
    notify.set(session.notifier());
    Ok((session, space))
}

/// Bounds the dirty page cache the kernel keeps for the FUSE connection
/// mounted at `mountpoint` to `bytes` (its bdi's `strict_limit` and
/// `max_bytes` in sysfs; root only, Linux 6.2 or later), so that the space
/// guard's reserve covers whatever the kernel may hold (see [`space`]).
/// Returns the bdi's `max_bytes` file.
pub fn set_dirty_limit(mountpoint: &Path, bytes: u64) -> io::Result<std::path::PathBuf> {
    let dir = bdi_dir(mountpoint)?;
    std::fs::write(dir.join("strict_limit"), "1\n")?;
    let max = dir.join("max_bytes");
    std::fs::write(&max, format!("{bytes}\n"))?;
    Ok(max)
}

/// Sets the readahead window of the FUSE connection mounted at `mountpoint`
/// to `kb` KiB, through its bdi in sysfs (`/sys/class/bdi/MAJ:MIN[-fuseblk]/
/// read_ahead_kb`; root only). The kernel offers 128 KiB at FUSE_INIT and a
/// server may only lower it there; raised afterwards, cold sequential reads
/// arrive in requests of up to `max_pages` (1 MiB) instead of 128 KiB.
/// Returns the sysfs file written.
pub fn set_readahead(mountpoint: &Path, kb: u32) -> io::Result<std::path::PathBuf> {
    let path = bdi_dir(mountpoint)?.join("read_ahead_kb");
    std::fs::write(&path, format!("{kb}\n"))?;
    Ok(path)
}

/// The sysfs directory of the bdi of the FUSE connection mounted at
/// `mountpoint` (`/sys/class/bdi/MAJ:MIN[-fuseblk]`).
fn bdi_dir(mountpoint: &Path) -> io::Result<std::path::PathBuf> {
    // The device number comes from the mount table, not from stat(2): a stat
    // of the mount point is a FUSE request, and the caller may not be
    // serving requests yet.
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = mountpoint.to_string_lossy();
    let dev = table
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4 && unescape_mountinfo(f[4]) == want).then(|| f[2].to_string())
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{want} is not in the mount table")))?;
    for name in [format!("{dev}-fuseblk"), dev.clone()] {
        let dir = Path::new("/sys/class/bdi").join(name);
        if dir.is_dir() {
            return Ok(dir);
        }
    }
    Err(io::Error::new(io::ErrorKind::NotFound, format!("no bdi for {dev} in /sys/class/bdi")))
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
