//! Arming: how cairn tells a buffered `write(2)` from a read, so that only
//! writes are ever refused.
//!
//! ## The problem
//! Under the writeback cache the one request a buffered write sends before
//! it copies anything into the page cache is a GETATTR naming the file
//! (`fuse_cache_write_iter` refreshes size and mode first). A read that
//! reaches past the cached end of file, and `lseek(SEEK_END)`, send the
//! very same request. The first space guard answered every such request
//! ENOSPC on a full disk, and `cat old` said "No space left on device"
//! (issue 50, item 5). With cairn's zero-request open (OPEN is answered
//! ENOSYS once and never sent again) nothing else tells them apart.
//!
//! ## Which files
//! Files are *armed* while the space guard is tight (the free space is
//! below its reserve) and, always, while they carry chattr's `i` or `a`
//! flag: a write to an immutable file, and one through a descriptor opened
//! without O_APPEND to an append-only file (its flags:
//! `/proc/TID/fdinfo/FD`), are refused with EPERM at the call, in the mount
//! that set the flag too, where no OPEN is sent to refuse them earlier.
//!
//! ## Asking the caller (a root daemon)
//! A GETATTR carries the id of the thread that sent it, and that thread is
//! still inside the system call that made the kernel ask. A root daemon
//! reads `/proc/TID/syscall`: the call's number tells a `write`, `pwrite`
//! or `writev` from a `read`, `pread` or `lseek` exactly. Armed files'
//! replies then carry a zero attribute timeout, so every write and every
//! read past the end asks, and the call decides. A caller that cannot be
//! read (a non-dumpable process), or a call the kernel makes on another
//! thread's behalf (io_uring's), is answered.
//!
//! ## Invalidations (the fallback)
//! A daemon that cannot read its callers' calls (an ordinary user's, under
//! Yama's ptrace scope) uses the masks instead. The kernel asks for
//! attributes for one of two reasons: its copy has expired (the reply's
//! timeout ran out), or a mask of attributes was invalidated. A read asks
//! only for the size, which the writeback cache owns, so an invalidation
//! alone never makes a read ask; a write also asks for the mode, so an
//! invalidation makes the next write ask at once (`fuse_update_get_attr`:
//! `request_mask & inval_mask & ~cache_mask` decides before the timeout
//! does). So after every reply that carries an armed file's attributes
//! cairn sends the kernel an attribute invalidation
//! (`FUSE_NOTIFY_INVAL_INODE`, no pages). Until the reply's timeout (at
//! least [`MIN_ARMED_TTL`]) runs out, a GETATTR naming a handle of an armed
//! file can only come from a write: that one the guard may refuse. After
//! the timeout it may be a read, and it is answered.
//!
//! ### When the kernel drops a reply
//! The kernel applies a reply's attributes only if no invalidation of the
//! inode (nor a truncate or fallocate changing its size) happened while the
//! request was in flight; a dropped reply leaves the kernel's copy marked
//! for refetching, so the next read past the end asks too. cairn's own
//! invalidation is one such event: it is sent only once the reply has
//! reached the kernel (`fuser::after_reply`: on an io_uring queue the reply
//! waits in its ring entry until the thread commits it, and an invalidation
//! sent from the handler overtook it). Every event that can drop a reply
//! is remembered per file with the thread it followed: a reply to a request
//! whose handler started less than [`IN_FLIGHT`] after another thread's
//! event is *unsure*, and until the next sure reply the file's GETATTRs are
//! answered as if from a read. (A thread's own earlier event cannot drop
//! its next request: that one is sent after the reply the event followed,
//! and asks at all only once the invalidation has landed.)
//!
//! ## What it does not cover
//! * Under the fallback, the invalidation follows the reply: a write that
//!   starts in the microseconds between the two is not asked about, nor is
//!   one after an unsure reply. What it leaves dirty is still written back whole or
//!   refused (`FileIo::write_back`), and a refusal reaches the file's `fsync`
//!   and `close`.
//! * An event the kernel makes on its own that cairn does not see drops a
//!   reply unnoticed; the size-changing ones come as requests (SETATTR with
//!   a size, FALLOCATE, a direct WRITE) and are remembered.
//! * Under the fallback, a file armed on entering tight mode (every file
//!   the kernel holds is invalidated then) whose last reply is older than
//!   its timeout cannot be told from a read: its first write after the
//!   entry is answered; the reply arms it.
//! * A write to an append-only file whose descriptor cannot be read (an
//!   ordinary user's daemon) is answered; the engine refuses a write-back
//!   that overwrites (EPERM, at `fsync`/`close`).
//! * Stores through a shared mapping ask nothing (FUSE has no
//!   `page_mkwrite` request).
//!
//! ## Locking
//! The map of reply times is behind one mutex taken only for armed files
//! (tight mode, immutable files): never on the common path.

use crate::privs::KernelNotifier;
use cairn_core::inode_flags::{ATTR_APPEND, ATTR_IMMUTABLE};
use cairn_core::Attr;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The shortest attribute timeout an armed file's replies carry: with a
/// zero timeout every read past the end would ask too, and could not be
/// told from a write.
pub const MIN_ARMED_TTL: Duration = Duration::from_secs(1);

/// How long before its handler starts a request may have been sent: an
/// event of another thread in that window may have dropped its reply.
pub const IN_FLIGHT: Duration = Duration::from_millis(50);

/// Files tracked before the ones with nothing recent are dropped.
const PRUNE_AT: usize = 4096;

/// Events remembered per file.
const EVENTS: usize = 4;

/// Whether `a` is a regular file carrying chattr's `i` flag.
pub fn immutable(a: &Attr) -> bool {
    a.mode & libc::S_IFMT == libc::S_IFREG && a.flags & ATTR_IMMUTABLE != 0
}

/// Whether `a` is a regular file carrying chattr's `i` or `a` flag.
pub fn protected(a: &Attr) -> bool {
    a.mode & libc::S_IFMT == libc::S_IFREG && a.flags & (ATTR_IMMUTABLE | ATTR_APPEND) != 0
}

/// Who asked, and when its handler started: a request's mark for
/// [`Arming::replied`].
#[derive(Clone, Copy, Debug)]
pub struct Asked {
    /// The kernel task (thread) id that sent the request.
    pub tid: u32,
    pub at: Instant,
}

impl Asked {
    /// A request of thread `tid` whose handler starts now.
    pub fn now(tid: u32) -> Asked {
        Asked { tid, at: Instant::now() }
    }
}

/// What is known of one armed file.
#[derive(Default)]
struct Armed {
    /// When the last reply the kernel surely applied was sent; `None` while
    /// the last one may have been dropped.
    sure_reply: Option<Instant>,
    /// The latest events that drop a reply in flight: when, and the thread
    /// (kernel task id) whose request they followed; 0 for none.
    events: [Option<(Instant, u32)>; EVENTS],
    next: usize,
}

impl Armed {
    fn note_event(&mut self, at: Instant, tid: u32) {
        self.events[self.next] = Some((at, tid));
        self.next = (self.next + 1) % EVENTS;
    }

    /// Whether an event of a thread other than `tid` may have overtaken a
    /// request whose handler started at `started`.
    fn overtaken(&self, tid: u32, started: Instant) -> bool {
        self.events.iter().flatten().any(|(at, who)| *who != tid && *at + IN_FLIGHT > started)
    }

    fn latest(&self) -> Option<Instant> {
        self.events.iter().flatten().map(|(at, _)| *at).chain(self.sure_reply).max()
    }
}

/// See the module essay.
pub struct Arming {
    notify: KernelNotifier,
    /// The attribute timeout of armed files' replies.
    ttl: Duration,
    files: Mutex<HashMap<u64, Armed>>,
}

impl Arming {
    pub fn new(notify: KernelNotifier, ttl: Duration) -> Arming {
        Arming { notify, ttl: ttl.max(MIN_ARMED_TTL), files: Mutex::new(HashMap::new()) }
    }

    fn with<T>(&self, ino: u64, f: impl FnOnce(&mut Armed) -> T) -> T {
        let mut m = self.files.lock();
        if m.len() >= PRUNE_AT && !m.contains_key(&ino) {
            let ttl = self.ttl;
            m.retain(|_, a| a.latest().is_some_and(|t| t.elapsed() < ttl));
        }
        f(m.entry(ino).or_default())
    }

    /// After a reply that carried the attributes of armed file `ino`, to
    /// the request `asked`: notes
    /// whether the kernel surely applies it, and invalidates the attributes
    /// once the reply has reached the kernel, so that the next write asks.
    pub fn replied(&self, ino: u64, asked: Asked) {
        let now = Instant::now();
        self.with(ino, |a| {
            a.sure_reply = if a.overtaken(asked.tid, asked.at) { None } else { Some(now) };
            a.note_event(now, asked.tid);
        });
        let notify = self.notify.clone();
        fuser::after_reply(move || notify.attributes_changed(ino));
    }

    /// A request of thread `tid` that changes the size of `ino` in the
    /// kernel (SETATTR with a size, FALLOCATE, a direct WRITE): replies to
    /// other threads in flight meanwhile may be dropped.
    pub fn size_event(&self, ino: u64, tid: u32) {
        if self.files.lock().contains_key(&ino) {
            self.with(ino, |a| a.note_event(Instant::now(), tid));
        }
    }

    /// Whether a GETATTR naming a handle of `ino` must come from a write:
    /// the file is armed, its last reply surely applied and not expired, so
    /// only the invalidation made the kernel ask.
    pub fn asked_by_a_write(&self, ino: u64) -> bool {
        self.files.lock().get(&ino).and_then(|a| a.sure_reply).is_some_and(|t| t.elapsed() < self.ttl)
    }

    /// Invalidates the attributes of `inos` (entering tight mode), from the
    /// guard's thread.
    pub fn invalidate(&self, inos: &[u64]) {
        for &ino in inos {
            self.size_event(ino, 0);
            self.notify.attributes_changed(ino);
        }
    }
}
