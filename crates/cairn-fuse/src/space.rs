//! The space guard: `write(2)` says ENOSPC under the writeback cache.
//!
//! ## The problem
//! With FUSE's writeback cache a buffered `write(2)` only fills the kernel's
//! page cache; cairn sees the data when the kernel writes it back, long
//! after the call returned. If the disk is full then, the kernel drops the
//! pages and reports the error at `fsync` or `close` only: a program that
//! writes past the end of the space is told nothing (`dd` without `count`
//! ran forever), and unless it checks `close` it never learns that its data
//! is gone. ext4 reserves blocks for every dirty page and fails the write
//! itself; FUSE gives a server no such hook.
//!
//! ## The mechanism
//! The one request a buffered write sends before it copies anything is a
//! GETATTR naming the file, when the kernel's attributes of the file are
//! expired or invalidated; an error there fails the `write(2)`. The guard
//! uses it, and keeps what the kernel may hold dirty smaller than the free
//! space:
//! 1. **A bound on what the kernel holds.** At mount (as root) cairn sets the
//!    connection's bdi to `strict_limit` with `max_bytes` = D (`-o
//!    dirty_limit_mb`, default 1/16 of the file system, 8–64 MiB): the
//!    kernel then throttles writers so that no more than about D (measured:
//!    up to 2.3 D) is dirty for this mount at any moment. It costs nothing:
//!    a 3 GB `dd` ran at 609–632 MB/s with D = 64 MiB against 430–477 MB/s
//!    without.
//! 2. **Tight mode** while the free space is below the reserve R = 4 D. On
//!    entry the attributes of every file the kernel holds are invalidated,
//!    and every reply about a regular file arms it (`arming`): its next
//!    buffered write asks first, while a read still does not. The dirty
//!    pages the kernel held on entry (at most about 2.3 D) fit in the
//!    reserve. While tight, the bdi's limit shrinks with the free space (an
//!    eighth of it, at least [`MIN_DIRTY_LIMIT`]), so what the kernel holds
//!    always fits in what is left.
//! 3. **The gate.** In tight mode a GETATTR that comes from a write
//!    (`arming`) is answered ENOSPC when the free space, less what the
//!    kernel may hold dirty (2.5 times the current limit), is under what
//!    the write needs (its size, which the caller's call tells, and
//!    [`GATE_SLACK`]; [`GATE_FLOOR`] for a write of unknown size), or when
//!    a write-back of that file has failed for lack of space since its last
//!    GETATTR; never for an overwrite of allocated blocks, which needs no
//!    space. A write that the free space takes but for what the kernel may
//!    hold dirty first has the kernel write this mount's pages back (`sync
//!    -f`, one at a time; `space.gate_flush_admits` counts the writes then
//!    let through). A writer is so stopped while every
//!    byte it was told was written still fits: `dd` into a 256 MiB image
//!    stops with ENOSPC from `write(2)`, and the file has every byte `dd`
//!    reported. Reads are never refused.
//! 4. **What the kernel holds stays free for it.** While tight, the space
//!    that dirty pages may still need (2.5 times the limit) and the gate's
//!    floor are held (`FileIo::hold_for_write_back`; statfs leaves them out of
//!    the available blocks): an O_DIRECT write or a fallocate that would
//!    take them gets ENOSPC instead, so a writer's accepted pages are not
//!    left without space by another kind of writer, and `df` shows about
//!    nothing available when every writer has been stopped. Outside tight
//!    mode, an O_DIRECT write or a fallocate that would take the free space
//!    down into the reserve first has the kernel write this mount's dirty
//!    pages back (`sync -f MOUNTPOINT`, at most [`FLUSH_WAIT`];
//!    `space.dirty_flushes`) and waits for the reaper, then takes only what
//!    is free (else ENOSPC, `space.kept_for_dirty`): a fallocate of all the
//!    free space had left a moment's accepted buffered writes none
//!    (xfstests generic/299). The kernel tells no server how much it holds
//!    dirty for one mount (the per-bdi counts are in debugfs only).
//! 5. **Write-backs are whole or refused** (`FileIo::write_back`): one that
//!    finds no space anyway stores nothing short of what it was given
//!    without saying so; the kernel reports the ENOSPC at the file's
//!    `fsync` and `close`, and nothing an earlier `fsync` covered changes.
//!
//! A first version answered the gated GETATTR from a thread of its own after
//! making the kernel write the file back; under FUSE over io_uring a queue
//! thread waits for the reply of its request, so two gated writers held
//! both threads of a CPU's queue while the write-back they waited for was
//! queued there: a deadlock. The gate now answers at once.
//!
//! ## What it does not cover
//! * A single `write(2)` larger than the free space left: the kernel accepts
//!   it whole; what does not fit fails at write-back and is reported at
//!   `fsync`/`close` (the kernel's rule for write-back errors).
//! * A mount by an ordinary user cannot set the bdi limit: the kernel may
//!   then hold more dirty data than the reserve (cairn logs a warning).
//! * The last [`GATE_FLOOR`] and a little more of the space are left to
//!   write-backs and metadata: a file system filled by O_DIRECT alone keeps
//!   them free.
//! * mmap writes: the kernel asks nothing before dirtying a mapped page;
//!   their write-back is whole or refused, and `msync`/`fsync` report it.
//! * What `arming` cannot tell apart (see there).
//! * Pages dirtied between that write-back and the end of the O_DIRECT
//!   write or fallocate that takes the space: their write-backs are
//!   refused and reported at `fsync`/`close`.
//!
//! `-o dirty_limit_mb=0` leaves the bdi unbounded; the guard stays, with
//! the default reserve (a write that it lets through and that does not fit
//! is refused at write-back, reported at `fsync`/`close`).
//!
//! ## Counters
//! `space.tight` (0/1), `space.tight_entries`, `space.gated_getattrs`,
//! `space.gate_refusals`, `space.gate_unsure` (GETATTRs in tight mode
//! answered as a read's), `space.protected_refusals` (writes to immutable
//! or append-only files), `space.dirty_flushes` and `space.kept_for_dirty`
//! (write-backs asked for by the gate and by O_DIRECT writes and fallocates
//! into the reserve outside tight mode, see 3 and 4; their refusals),
//! `space.gate_flush_admits`,
//! `space.writeback_enospc`, `space.reserve_bytes`,
//! `space.dirty_limit_bytes` (the bdi's limit now; 0 when not set).
//!
//! ## Locking
//! Outside tight mode a WRITE costs a read of the engine's free-space
//! counters. The set of files whose write-back failed, the arming map and
//! the bdi's sysfs file are behind mutexes taken only in tight mode, for
//! immutable files or on a failure. The guard's thread only sends attribute
//! invalidations, which wait for no request.

use crate::arming::{self, Arming, Asked};
use crate::callers::{self, Caller};
use crate::privs::KernelNotifier;
use cairn_core::inode_flags::ATTR_APPEND;
use cairn_core::{Attr, Fs};
use fuser::Errno;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The smallest dirty limit the guard sets in tight mode.
pub const MIN_DIRTY_LIMIT: u64 = 256 << 10;

/// Free space, beyond what the kernel may hold dirty, below which a gated
/// buffered write of unknown size is refused; also held from O_DIRECT
/// writes and fallocate while tight.
pub const GATE_FLOOR: u64 = 8 << 20;

/// Free space, beyond what the kernel may hold dirty and the write's own
/// bytes, below which a gated write of known size is refused.
pub const GATE_SLACK: u64 = 1 << 20;

/// How long an O_DIRECT write or fallocate that would take the free space
/// into the reserve waits for the kernel to write its dirty pages back.
pub const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// What the kernel may hold dirty, in tenths of its limit (measured: 23).
const DIRTY_OVERSHOOT_TENTHS: u64 = 25;

/// The guard's counters.
#[derive(Default)]
pub struct SpaceStats {
    pub tight: AtomicBool,
    pub tight_entries: AtomicU64,
    pub gated_getattrs: AtomicU64,
    pub gate_refusals: AtomicU64,
    pub gate_unsure: AtomicU64,
    pub protected_refusals: AtomicU64,
    pub kept_for_dirty: AtomicU64,
    pub dirty_flushes: AtomicU64,
    pub gate_flush_admits: AtomicU64,
    pub writeback_enospc: AtomicU64,
    pub reserve_bytes: AtomicU64,
    pub dirty_limit_bytes: AtomicU64,
}

impl SpaceStats {
    /// `(name, value)` pairs for `cairn stats`.
    pub fn counters(&self) -> Vec<(String, u64)> {
        vec![
            ("space.tight".into(), u64::from(self.tight.load(Relaxed))),
            ("space.tight_entries".into(), self.tight_entries.load(Relaxed)),
            ("space.gated_getattrs".into(), self.gated_getattrs.load(Relaxed)),
            ("space.gate_refusals".into(), self.gate_refusals.load(Relaxed)),
            ("space.gate_unsure".into(), self.gate_unsure.load(Relaxed)),
            ("space.protected_refusals".into(), self.protected_refusals.load(Relaxed)),
            ("space.kept_for_dirty".into(), self.kept_for_dirty.load(Relaxed)),
            ("space.dirty_flushes".into(), self.dirty_flushes.load(Relaxed)),
            ("space.gate_flush_admits".into(), self.gate_flush_admits.load(Relaxed)),
            ("space.writeback_enospc".into(), self.writeback_enospc.load(Relaxed)),
            ("space.reserve_bytes".into(), self.reserve_bytes.load(Relaxed)),
            ("space.dirty_limit_bytes".into(), self.dirty_limit_bytes.load(Relaxed)),
        ]
    }
}

/// See the module essay.
pub struct SpaceGuard {
    fs: Arc<Fs>,
    stats: Arc<SpaceStats>,
    /// Free bytes below which the guard is tight; 0: the guard is off.
    reserve: u64,
    /// The dirty limit outside tight mode (a quarter of the reserve).
    base_limit: u64,
    /// The limit in force (the base limit while the bdi is not set).
    limit: AtomicU64,
    /// The bdi's `max_bytes` file, once the mount has set the limit.
    bdi_max_bytes: Mutex<Option<PathBuf>>,
    /// The mount point, once mounted.
    mountpoint: Mutex<Option<PathBuf>>,
    /// Held by the gate's one write-back in flight.
    gate_flush: Mutex<()>,
    /// Files a write-back of which failed with ENOSPC, not yet told.
    failed: Mutex<HashSet<u64>>,
    /// Which GETATTRs come from writes (see `arming`).
    arming: Arming,
    /// Whether the callers' system calls can be read (`arming`: "Asking the
    /// caller first"); if not, arming decides.
    inspect: bool,
    jobs: Mutex<Option<Sender<Vec<u64>>>>,
    /// When the last "nearly full" line was logged (seconds since the epoch).
    logged_at: AtomicU64,
}

impl SpaceGuard {
    /// A guard keeping `reserve` bytes (0: off) for the kernel's dirty
    /// pages, counting in `stats` and invalidating through `notify`; the
    /// mount's replies carry attribute timeout `attr_ttl`. Its thread starts
    /// with it.
    pub fn start(
        fs: Arc<Fs>,
        reserve: u64,
        stats: Arc<SpaceStats>,
        notify: KernelNotifier,
        attr_ttl: Duration,
    ) -> Arc<SpaceGuard> {
        stats.reserve_bytes.store(reserve, Relaxed);
        let (tx, rx) = channel::<Vec<u64>>();
        let guard = Arc::new(SpaceGuard {
            fs,
            stats,
            reserve,
            base_limit: reserve / 4,
            limit: AtomicU64::new(reserve / 4),
            bdi_max_bytes: Mutex::new(None),
            mountpoint: Mutex::new(None),
            gate_flush: Mutex::new(()),
            failed: Mutex::new(HashSet::new()),
            arming: Arming::new(notify, attr_ttl),
            inspect: callers::can_inspect_callers(),
            jobs: Mutex::new(if reserve > 0 { Some(tx) } else { None }),
            logged_at: AtomicU64::new(0),
        });
        if reserve > 0 {
            let weak: Weak<SpaceGuard> = Arc::downgrade(&guard);
            let spawned = std::thread::Builder::new().name("cairn-space".into()).spawn(move || {
                for inos in rx {
                    let Some(g) = weak.upgrade() else { break };
                    g.arming.invalidate(&inos);
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no space-guard thread: attributes cached before the disk filled are trusted until they expire");
                *guard.jobs.lock() = None;
            }
        }
        guard
    }

    /// The mount point, once mounted (to have the kernel write this
    /// mount's dirty pages back).
    pub fn set_mountpoint(&self, path: PathBuf) {
        *self.mountpoint.lock() = Some(path);
    }

    /// The bdi's `max_bytes` file, which the mount has set to the base
    /// limit: the guard lowers it in tight mode.
    pub fn set_bdi_max_bytes(&self, path: PathBuf) {
        self.stats.dirty_limit_bytes.store(self.base_limit, Relaxed);
        *self.bdi_max_bytes.lock() = Some(path);
    }

    /// The dirty limit outside tight mode.
    pub fn base_limit(&self) -> u64 {
        self.base_limit
    }

    /// Stops the guard's thread (the session is ending).
    pub fn stop(&self) {
        *self.jobs.lock() = None;
    }

    /// Free bytes that file data may take, what is held for write-backs
    /// included (statfs leaves it out of the available blocks).
    fn free_bytes(&self) -> u64 {
        self.fs.files().data_space_free().unwrap_or(u64::MAX)
    }

    /// Whether the free space is below the reserve; notes a change, and
    /// keeps the dirty limit in step with the free space.
    pub fn tight(&self) -> bool {
        if self.reserve == 0 {
            return false;
        }
        let free = self.free_bytes();
        let tight = free < self.reserve;
        if self.stats.tight.swap(tight, Relaxed) != tight {
            if tight {
                self.entered_tight(free);
            } else {
                self.failed.lock().clear();
            }
        }
        let want = if tight {
            (free / 8).clamp(MIN_DIRTY_LIMIT, self.base_limit.max(MIN_DIRTY_LIMIT))
        } else {
            self.base_limit
        };
        let now = self.limit.load(Relaxed);
        if want < now - now / 4 || want > now + now / 2 || (!tight && want != now) {
            self.set_limit(want);
        }
        // What the kernel may hold dirty, and the gate's floor (room for a
        // write that started before its file was armed), stay free for
        // write-backs: O_DIRECT writes and fallocate leave them alone.
        self.fs.files().hold_for_write_back(if tight { self.held() + GATE_FLOOR } else { 0 });
        tight
    }

    /// What the kernel may hold dirty under the limit in force, in bytes.
    fn held(&self) -> u64 {
        self.limit.load(Relaxed) * DIRTY_OVERSHOOT_TENTHS / 10
    }

    /// Whether an O_DIRECT write or a fallocate of `len` bytes at `off` of
    /// file `ino` leaves room for the kernel's dirty pages. In tight mode
    /// the engine's hold answers (`FileIo::hold_for_write_back`). Outside it,
    /// one that would take the free space down into the reserve first has
    /// the kernel write this mount's dirty pages back (`sync -f`, waited for
    /// at most [`FLUSH_WAIT`]) and the reaper free deleted files' space:
    /// then it takes what is free, and tight mode guards what follows. A
    /// fallocate of all the free space had left buffered writes accepted a
    /// moment before nowhere to go (xfstests generic/299).
    pub fn leaves_room_for_dirty(&self, ino: u64, off: u64, len: u64) -> bool {
        if self.reserve == 0 || self.tight() {
            return true;
        }
        if self.free_bytes() >= len.saturating_add(self.reserve) {
            return true;
        }
        let block = u64::from(self.fs.statfs().map_or(4096, |s| s.block_size));
        let need = || self.fs.files().blocks_to_allocate(ino, off, len).map_or(len, |b| b * block);
        if need() == 0 {
            return true;
        }
        let flushed = self.flush_kernel_dirty();
        let _ = self.fs.files().wait_for_deleted_space();
        let (need, free) = (need(), self.free_bytes());
        if flushed && need <= free {
            return true;
        }
        tracing::debug!(ino, need, free, flushed, "space guard: an O_DIRECT write or fallocate refused");
        self.stats.kept_for_dirty.fetch_add(1, Relaxed);
        false
    }

    /// Has the kernel write this mount's dirty pages back (`sync -f
    /// MOUNTPOINT`: syncfs(2), in a process of its own, whose WRITEs other
    /// threads serve); true once done within [`FLUSH_WAIT`].
    fn flush_kernel_dirty(&self) -> bool {
        self.stats.dirty_flushes.fetch_add(1, Relaxed);
        let Some(mp) = self.mountpoint.lock().clone() else { return false };
        let child = std::process::Command::new("sync")
            .arg("-f")
            .arg(&mp)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let Ok(mut child) = child else { return false };
        let t0 = std::time::Instant::now();
        while t0.elapsed() < FLUSH_WAIT {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(_) => return false,
            }
        }
        // Left to finish on its own, reaped by a thread of its own; this
        // request goes on without it.
        tracing::debug!("space guard: the kernel's write-back took longer than {FLUSH_WAIT:?}");
        let _ = std::thread::Builder::new().name("cairn-flush".into()).spawn(move || child.wait());
        false
    }

    /// Entering tight mode: logs it (once a minute at most) and has every
    /// file the kernel holds invalidated, so that their writes ask first.
    fn entered_tight(&self, free: u64) {
        let n = self.stats.tight_entries.fetch_add(1, Relaxed);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let last = self.logged_at.swap(now, Relaxed);
        if n == 0 || now >= last + 60 {
            tracing::warn!(
                free_bytes = free,
                "the file system is nearly full: buffered writes now ask first, and get ENOSPC when the space is gone"
            );
        }
        if let Some(tx) = self.jobs.lock().as_ref() {
            let _ = tx.send(self.fs.inodes().kernel_held_inodes());
        }
    }

    /// Sets the dirty limit: the bdi's, when the mount could set it at all;
    /// else only the guard's estimate of what the kernel holds follows the
    /// free space (nothing bounds the kernel then, see "What it does not
    /// cover").
    fn set_limit(&self, bytes: u64) {
        let bdi = self.bdi_max_bytes.lock();
        let Some(path) = bdi.as_ref() else {
            self.limit.store(bytes, Relaxed);
            return;
        };
        match std::fs::write(path, format!("{bytes}\n")) {
            Ok(()) => {
                self.limit.store(bytes, Relaxed);
                self.stats.dirty_limit_bytes.store(bytes, Relaxed);
            }
            Err(e) => tracing::warn!(error = %e, path = %path.display(), "could not change the dirty limit"),
        }
    }

    /// Whether replies about `a` arm it (see `arming`): a regular file while
    /// the guard is tight, an immutable or append-only one always.
    pub fn arms(&self, a: &Attr) -> bool {
        a.mode & libc::S_IFMT == libc::S_IFREG
            && ((self.reserve > 0 && self.stats.tight.load(Relaxed)) || arming::protected(a))
    }

    /// The attribute timeout to reply with about `a`: the mount's; for an
    /// armed file zero where callers can be inspected (every write and
    /// every read past the end asks, and the caller's call decides), else
    /// at least [`arming::MIN_ARMED_TTL`].
    pub fn attr_ttl(&self, normal: Duration, a: &Attr) -> Duration {
        match (self.arms(a), self.inspect) {
            (false, _) => normal,
            (true, true) => Duration::ZERO,
            (true, false) => normal.max(arming::MIN_ARMED_TTL),
        }
    }

    /// After a reply to `asked` that carried `a`: arms the file if it
    /// should be.
    pub fn replied(&self, a: &Attr, asked: Asked) {
        if !self.inspect && self.arms(a) {
            self.arming.replied(a.ino, asked);
        }
    }

    /// A request of thread `tid` that changes the size of file `ino` in the
    /// kernel (see `arming`).
    pub fn size_event(&self, ino: u64, tid: u32) {
        if self.reserve > 0 && self.stats.tight.load(Relaxed) {
            self.arming.size_event(ino, tid);
        }
    }

    /// Notes a WRITE of `ino` and its outcome.
    pub fn note_write(&self, ino: u64, result: Result<u32, Errno>) {
        if result == Err(Errno::ENOSPC) {
            self.stats.writeback_enospc.fetch_add(1, Relaxed);
            if self.reserve > 0 {
                self.failed.lock().insert(ino);
            }
        }
        self.tight();
    }

    /// The error for a GETATTR naming a handle of file `a`, sent by thread
    /// `tid` (a buffered write asking first, or a read past the cached end):
    /// EPERM for a write to an immutable file, ENOSPC for one the space
    /// cannot take; `None` to answer it.
    pub fn refusal(&self, a: &Attr, tid: u32) -> Option<Errno> {
        let tight = self.tight();
        if !tight && !arming::protected(a) {
            return None;
        }
        let who = callers::caller(tid, a.ino);
        tracing::trace!(ino = a.ino, tid, ?who, tight, "a GETATTR naming a file, asked while armed");
        let (writing, flags, count, pos) = match who {
            Caller::Writing { flags, count, pos, .. } => (true, flags, count, pos),
            Caller::Reading => (false, None, None, None),
            // A call made on another thread's behalf whose stack says nothing: answered.
            Caller::Unknown if self.inspect => (false, None, None, None),
            Caller::Unknown => (self.arming.asked_by_a_write(a.ino), None, None, None),
        };
        if !writing {
            if tight {
                self.stats.gate_unsure.fetch_add(1, Relaxed);
            }
            return None;
        }
        let overwrite = a.flags & ATTR_APPEND != 0 && flags.is_some_and(|f| f & libc::O_APPEND == 0);
        if arming::immutable(a) || overwrite {
            self.stats.protected_refusals.fetch_add(1, Relaxed);
            return Some(Errno::EPERM);
        }
        // An O_DIRECT write asks too, but reaches cairn at once and gets its
        // exact answer there (what is held for write-backs stays out of it).
        if !tight || flags.is_some_and(|f| f & libc::O_DIRECT != 0) {
            return None;
        }
        self.stats.gated_getattrs.fetch_add(1, Relaxed);
        let overwrite = || match (count, pos) {
            // An overwrite of allocated blocks needs no space: answered,
            // as ext4 takes it on a full disk.
            (Some(count), Some(pos)) => self.fs.files().blocks_to_allocate(a.ino, pos, count).is_ok_and(|n| n == 0),
            _ => false,
        };
        // A write whose size the caller's call tells needs room for itself;
        // one of unknown size (writev) the whole floor.
        let need = count.map_or(GATE_FLOOR, |c| c + GATE_SLACK);
        let failed = self.failed.lock().remove(&a.ino);
        let free = self.free_bytes();
        if (!failed && free >= self.held() + need) || overwrite() {
            return None;
        }
        // It would fit but for what the kernel may still hold dirty: have
        // that written back and look again (generic/275: the 256 KiB an rm
        // freed stayed unwritable while pages written before it waited).
        if !failed && free >= need && self.flush_for_gate() && self.free_bytes() >= need {
            self.stats.gate_flush_admits.fetch_add(1, Relaxed);
            return None;
        }
        tracing::debug!(ino = a.ino, "space guard: a buffered write refused");
        self.stats.gate_refusals.fetch_add(1, Relaxed);
        Some(Errno::ENOSPC)
    }

    /// [`SpaceGuard::flush_kernel_dirty`] for the gate: one at a time (a
    /// gate that finds one running does not wait for it), so at most one
    /// request thread waits while others serve the write-backs.
    fn flush_for_gate(&self) -> bool {
        let Some(_one) = self.gate_flush.try_lock() else { return false };
        self.flush_kernel_dirty()
    }
}
