//! The error latch: what happens after corruption or an I/O error.
//!
//! The first corruption found in metadata, or the first failed read, write or
//! flush of the image, is *latched*: the on-disk superblock gets
//! `STATE_ERRORS` (written in place at once, outside the journal, as ext4's
//! `ext4_handle_error` does — so `cairn fsck` sees it even if nothing is ever
//! committed again), one clear log line names the error and the policy, and
//! the file system then behaves as `-o errors=`:
//! * `continue` — go on (the flag stays set until fsck clears it);
//! * `remount-ro` (the default, as ext4's) — the journal is aborted: changes
//!   not yet committed are dropped, every later change fails with `EROFS`,
//!   reads go on;
//! * `shutdown` — every later request fails with `EIO`.
//!
//! An image opened read-only (`cairn inspect`, a `-o ro` mount) is never
//! written, as ext4 leaves a read-only block device alone: the error is
//! logged and latched in memory, not recorded in the superblock.
//!
//! Whatever the policy, an error inside an operation that had already
//! changed buffers aborts the journal: the running checkpoint holds half an
//! operation and must never be committed. A failed commit does the same.

use crate::dev::BlockDevice;
use crate::error::{FsError, Result};
use crate::stats::Publish;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_ERRORS};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// `-o errors=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    Continue,
    #[default]
    RemountRo,
    Shutdown,
}

impl ErrorPolicy {
    /// Parses `continue`, `remount-ro` or `shutdown` (ext4's names; ext4's
    /// `panic` is not offered: a user-space daemon has nothing to panic).
    pub fn parse(s: &str) -> Option<ErrorPolicy> {
        match s {
            "continue" => Some(ErrorPolicy::Continue),
            "remount-ro" => Some(ErrorPolicy::RemountRo),
            "shutdown" => Some(ErrorPolicy::Shutdown),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ErrorPolicy::Continue => "continue",
            ErrorPolicy::RemountRo => "remount-ro",
            ErrorPolicy::Shutdown => "shutdown",
        }
    }
}

/// See the module essay.
pub struct Latch {
    policy: ErrorPolicy,
    /// Errors latched (corruption and I/O), and whether the image had the
    /// flag already at mount.
    errors: AtomicU64,
    had_errors_at_mount: bool,
    aborted: AtomicBool,
    shut: AtomicBool,
    first: Mutex<Option<String>>,
    /// Held while the superblock is rewritten in place, and by the AIL's
    /// write-backs (`ail::Ail::home_lock`): an in-place write must not put
    /// back a superblock older than one a write-back just wrote home, after
    /// which no record in the log would rewrite it.
    home_lock: Arc<Mutex<()>>,
}

impl Latch {
    pub fn new(policy: ErrorPolicy, had_errors_at_mount: bool, home_lock: Arc<Mutex<()>>) -> Latch {
        Latch {
            home_lock,
            policy,
            errors: AtomicU64::new(0),
            had_errors_at_mount,
            aborted: AtomicBool::new(false),
            shut: AtomicBool::new(false),
            first: Mutex::new(None),
        }
    }

    pub fn policy(&self) -> ErrorPolicy {
        self.policy
    }

    /// Errors latched since mount.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Whether the superblock carries `STATE_ERRORS` (from before the mount
    /// or since).
    pub fn flagged(&self) -> bool {
        self.had_errors_at_mount || self.errors() > 0
    }

    /// The first error latched since mount.
    pub fn first_error(&self) -> Option<String> {
        self.first.lock().clone()
    }

    /// Whether the journal was aborted (no more commits, changes refused).
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Fails when no request may be served at all.
    pub fn check_alive(&self) -> Result<()> {
        if self.shut.load(Ordering::Acquire) {
            return Err(FsError::Shutdown);
        }
        Ok(())
    }

    /// Fails when changes are refused.
    pub fn check_writable(&self) -> Result<()> {
        self.check_alive()?;
        if self.aborted() {
            return Err(FsError::Errno(libc::EROFS));
        }
        Ok(())
    }

    /// Fails when the journal was aborted.
    pub fn check_commit(&self) -> Result<()> {
        if self.aborted() {
            return Err(FsError::Errno(libc::EROFS));
        }
        Ok(())
    }

    /// Shuts down on request (the shutdown ioctl, `crate::shutdown`): the
    /// journal is aborted and every later request fails with EIO, with no
    /// mark on disk.
    pub fn shut_down(&self) {
        self.aborted.store(true, Ordering::Release);
        self.shut.store(true, Ordering::Release);
    }

    /// Looks at an operation's error: corruption and I/O errors are latched.
    /// `changed` says whether the failing operation had dirtied buffers.
    pub fn note(&self, dev: &Arc<dyn BlockDevice>, e: &FsError, changed: bool) {
        if !matches!(e, FsError::Corrupt(_) | FsError::Io(_)) {
            return;
        }
        let journal = if changed {
            JournalFate::AbortHalfDone
        } else if self.policy != ErrorPolicy::Continue {
            JournalFate::Abort
        } else {
            JournalFate::Continue
        };
        self.latch(dev, e, journal);
    }

    /// A commit failed, or an operation ended half done (its end failed, or
    /// it unwound): the journal is aborted whatever the policy.
    pub fn abort_half_done(&self, dev: &Arc<dyn BlockDevice>, e: &FsError) {
        self.latch(dev, e, JournalFate::AbortHalfDone);
    }

    /// Sets the on-disk flag again (after a commit whose superblock image
    /// may not carry it).
    pub fn remark(&self, dev: &Arc<dyn BlockDevice>) {
        mark_errors_on_disk(dev, &self.home_lock);
    }

    fn latch(&self, dev: &Arc<dyn BlockDevice>, e: &FsError, journal: JournalFate) {
        let abort = journal != JournalFate::Continue;
        let n = self.errors.fetch_add(1, Ordering::AcqRel);
        let was_aborted = self.aborted.swap(abort || self.aborted(), Ordering::AcqRel);
        if self.policy == ErrorPolicy::Shutdown {
            self.shut.store(true, Ordering::Release);
        }
        if n == 0 {
            *self.first.lock() = Some(e.to_string());
            // An image opened read-only (`cairn inspect`, a `-o ro` mount)
            // is never written: the error is logged, not recorded.
            let recorded = dev.writable();
            let then = match (self.policy, journal) {
                (ErrorPolicy::Shutdown, _) => "shutting down: every request now fails with EIO",
                _ if !recorded => "the file system stays read-only",
                (_, JournalFate::AbortHalfDone) => {
                    "aborting the journal (the failed operation was half done): the file system is now read-only"
                }
                (_, JournalFate::Abort) => "aborting the journal: the file system is now read-only",
                (_, JournalFate::Continue) => "continuing (errors=continue)",
            };
            let marked = if recorded {
                "the image is marked as having errors"
            } else {
                "the image is open read-only, so this is not recorded in it"
            };
            tracing::error!(error = %e, policy = self.policy.name(), "cairn: {e}; {marked} (run `cairn fsck`); {then}");
            mark_errors_on_disk(dev, &self.home_lock);
        } else if abort && !was_aborted {
            tracing::error!(error = %e, "cairn: {e}; aborting the journal: the file system is now read-only");
        }
    }
}

/// What a latched error does to the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JournalFate {
    /// Nothing: `errors=continue`, and the failed operation changed nothing.
    Continue,
    /// Aborted, as the policy says.
    Abort,
    /// Aborted whatever the policy: the failed operation (or commit) left
    /// half its changes in the running checkpoint.
    AbortHalfDone,
}

/// Sets `STATE_ERRORS` in the on-disk superblock, in place (best effort: the
/// device may be what failed).
fn mark_errors_on_disk(dev: &Arc<dyn BlockDevice>, home_lock: &Mutex<()>) {
    if !dev.writable() {
        return;
    }
    let _home = home_lock.lock();
    let mut head = vec![0u8; SB_SIZE];
    let res = (|| -> Result<()> {
        dev.read_at(&mut head, 0)?;
        let mut sb = Superblock::decode(&head, dev.size())?;
        sb.state |= STATE_ERRORS;
        sb.encode(&mut head);
        dev.write_at(&head, 0)?;
        dev.flush()?;
        Ok(())
    })();
    if let Err(e) = res {
        tracing::error!(error = %e, "could not record the error state in the superblock");
    }
}

impl Publish for Latch {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        put("errors.latched", self.errors());
        put("errors.flagged", u64::from(self.flagged()));
        put("errors.journal_aborted", u64::from(self.aborted()));
    }
}
