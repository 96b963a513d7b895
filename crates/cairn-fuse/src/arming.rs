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
//! ## The mechanism
//! The kernel asks for attributes for one of two reasons: its copy has
//! expired (the reply's timeout ran out), or a mask of attributes was
//! invalidated. A read asks only for the size, which the writeback cache
//! owns, so an invalidation alone never makes a read ask; a write also asks
//! for the mode, so an invalidation makes the next write ask at once.
//! (`fuse_update_get_attr`: `request_mask & inval_mask & ~cache_mask`
//! decides before the timeout does.) So cairn *arms* a regular file: after
//! every reply that carries its attributes it sends the kernel an
//! attribute invalidation (`FUSE_NOTIFY_INVAL_INODE`, no pages). Until the
//! reply's timeout runs out, a GETATTR naming a handle of an armed file can
//! only come from a write: that one the guard may refuse. After the timeout
//! it may be a read, and it is answered.
//!
//! Files are armed while the space guard is tight (the free space is below
//! its reserve) and, always, while they carry chattr's `i` flag: a write to
//! an immutable file is refused with EPERM at the call, in the mount that
//! set the flag too, where no OPEN is sent to refuse it earlier.
//!
//! ## What it does not cover
//! * The invalidation follows the reply: a write that starts in the
//!   microseconds between the two is not asked about. What it leaves dirty
//!   is still written back whole or refused (`Fs::write_back`), and a
//!   refusal reaches the file's `fsync` and `close`.
//! * A file armed on entering tight mode (every file the kernel holds is
//!   invalidated then) whose last reply is older than its timeout cannot be
//!   told from a read: its first write after the entry is answered; the
//!   reply arms it.
//! * Append-only files are not refused here: an append and an overwrite ask
//!   alike. The engine refuses a write-back that overwrites (EPERM, at
//!   `fsync`/`close`).
//! * Stores through a shared mapping ask nothing (FUSE has no
//!   `page_mkwrite` request).
//!
//! ## Locking
//! The map of reply times is behind one mutex taken only for armed files
//! (tight mode, immutable files): never on the common path.

use crate::privs::KernelNotifier;
use cairn_core::inode_flags::ATTR_IMMUTABLE;
use cairn_core::Attr;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The shortest attribute timeout an armed file's replies carry: with a
/// zero timeout every read past the end would ask too, and could not be
/// told from a write.
pub const MIN_ARMED_TTL: Duration = Duration::from_secs(1);

/// Reply times kept before old ones are dropped.
const PRUNE_AT: usize = 4096;

/// Whether `a` is a regular file carrying chattr's `i` flag.
pub fn immutable(a: &Attr) -> bool {
    a.mode & libc::S_IFMT == libc::S_IFREG && a.flags & ATTR_IMMUTABLE != 0
}

/// See the module essay.
pub struct Arming {
    notify: KernelNotifier,
    /// The attribute timeout of the mount's replies.
    ttl: Duration,
    /// When each armed file's attributes were last sent.
    replied: Mutex<HashMap<u64, Instant>>,
}

impl Arming {
    pub fn new(notify: KernelNotifier, ttl: Duration) -> Arming {
        Arming { notify, ttl: ttl.max(MIN_ARMED_TTL), replied: Mutex::new(HashMap::new()) }
    }

    /// After a reply that carried the attributes of armed file `ino`: notes
    /// the time and invalidates them, so that its next write asks first.
    pub fn replied(&self, ino: u64) {
        let now = Instant::now();
        {
            let mut m = self.replied.lock();
            if m.len() >= PRUNE_AT {
                m.retain(|_, t| now.duration_since(*t) < self.ttl);
            }
            m.insert(ino, now);
        }
        self.notify.attributes_changed(ino);
    }

    /// Whether a GETATTR naming a handle of `ino` must come from a write:
    /// the file is armed and the kernel's copy of its attributes has not
    /// expired, so only the invalidation made it ask.
    pub fn asked_by_a_write(&self, ino: u64) -> bool {
        self.replied.lock().get(&ino).is_some_and(|t| t.elapsed() < self.ttl)
    }

    /// Invalidates the attributes of `inos` (entering tight mode).
    pub fn invalidate(&self, inos: &[u64]) {
        for &ino in inos {
            self.notify.attributes_changed(ino);
        }
    }
}
