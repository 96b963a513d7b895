//! [`Engine`]: the transaction layer every owner of the file system's state
//! works through — the metadata ([`Meta`]: device, buffer cache, allocator,
//! superblock), the transaction manager (gate, journal, commit, error
//! latch), the mount's state (options, read-only, closed) and the two
//! background threads that keep it going: the backend's periodic commits and
//! the reaper's deferred frees (Tux3's backend).
//!
//! ## What it offers
//! [`Engine::change`] runs a changing operation in a transaction handle
//! (credits, restart with more credits, one retry on ENOSPC once deferred
//! frees are done); [`Engine::read_op`] runs a reading one; both hand
//! corruption and I/O errors to the latch. [`Engine::commit`] makes the
//! journal's running checkpoint durable. The engine knows nothing of inodes,
//! names or files: those owners sit above it (`fs` routes to them), so a
//! commit here does not store the overwrite path's dirty times —
//! `FileIo::commit` does that first, for `fsync`, `syncfs`, the backend's
//! commits and unmount.
//!
//! ## Locking
//! The engine adds no lock of its own: the gate, the commit mutex and the
//! latch are the transaction manager's (see `tx`). [`Engine::change`] must
//! not be called while the caller holds a handle.

use crate::backend::Backend;
use crate::error::{FsError, Result};
use crate::meta::Meta;
pub use crate::mount_options::MountOptions;
use crate::reaper::Reaper;
use crate::tx::{Tx, TxManager};
use crate::types::StatFs;
use cairn_format::NAME_MAX;
use std::sync::atomic::{AtomicBool, Ordering};

/// The transaction layer and mount state (see the module essay).
pub(crate) struct Engine {
    meta: Meta,
    txm: TxManager,
    opts: MountOptions,
    /// Changes are refused: `opts.read_only` until [`Engine::set_writable`]
    /// (`ro_recovery`) clears it.
    read_only: AtomicBool,
    /// Set when unmount finished: later requests fail with `Shutdown`.
    closed: AtomicBool,
    backend: Backend,
    /// Inodes whose last link and reference are gone and whose blocks are
    /// still to free, in steps, and the thread that frees them (`reaper`).
    reaper: Reaper,
}

impl Engine {
    pub(crate) fn new(meta: Meta, txm: TxManager, opts: MountOptions) -> Engine {
        Engine {
            meta,
            txm,
            read_only: AtomicBool::new(opts.read_only),
            closed: AtomicBool::new(false),
            backend: Backend::default(),
            reaper: Reaper::new(!opts.sync_delete),
            opts,
        }
    }

    pub(crate) fn meta(&self) -> &Meta {
        &self.meta
    }

    pub(crate) fn txm(&self) -> &TxManager {
        &self.txm
    }

    pub(crate) fn opts(&self) -> &MountOptions {
        &self.opts
    }

    pub(crate) fn reaper(&self) -> &Reaper {
        &self.reaper
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Whether changes are refused by the mount (read-only, until remounted
    /// writable); [`Engine::is_read_only`] also counts an aborted journal.
    pub(crate) fn mounted_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    /// Whether changes are refused (read-only mount or aborted journal).
    pub(crate) fn is_read_only(&self) -> bool {
        self.mounted_read_only() || self.txm.latch.aborted()
    }

    /// A read-only mount becomes writable (`ro_recovery`).
    pub(crate) fn set_writable(&self) {
        self.read_only.store(false, Ordering::Release);
    }

    /// Unmount finished: later requests fail with `Shutdown`.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub(crate) fn alive(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(FsError::Shutdown);
        }
        self.txm.latch.check_alive()
    }

    pub(crate) fn writable(&self) -> Result<()> {
        self.alive()?;
        if self.mounted_read_only() {
            return Err(FsError::Errno(libc::EROFS));
        }
        self.txm.latch.check_writable()
    }

    /// Logs the superblock as it stands (its state, mount count, times)
    /// in the running checkpoint: a direct change with no handle running,
    /// as every change of the superblock is (a swap writes it too).
    pub(crate) fn log_superblock(&self) -> Result<()> {
        self.writable()?;
        let flagged = self.txm.latch.flagged();
        self.txm.quiesced_change(&self.meta, crate::tx::manager::MARGIN, |tx| self.meta.write_sb_buffer(tx, flagged))
    }

    /// Makes everything logged before this call durable; concurrent callers
    /// share one commit (see `tx::manager`).
    pub(crate) fn commit(&self) -> Result<()> {
        self.txm.commit(&self.meta)
    }

    /// Whether a sync (syncfs, a `dirsync` directory's change) has anything
    /// to commit: false on a read-only mount; after an abort, changes since
    /// the last commit are lost, and this says so (an error).
    pub(crate) fn sync_wanted(&self) -> Result<bool> {
        self.alive()?;
        if self.mounted_read_only() {
            return Ok(false);
        }
        self.txm.latch.check_commit()?;
        Ok(true)
    }

    /// Commits everything logged so far, for a caller that must see it
    /// durable (a `dirsync` directory's change; see [`Engine::sync_wanted`]).
    pub(crate) fn sync(&self) -> Result<()> {
        if self.sync_wanted()? {
            self.commit()?;
        }
        Ok(())
    }

    /// Writes every deferred image home and empties the log, so that every
    /// block freed so far may be reused.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        self.txm.checkpoint(&self.meta)
    }

    /// Commits, then checkpoints (a full file system).
    pub(crate) fn commit_and_checkpoint(&self) -> Result<()> {
        self.commit()?;
        self.checkpoint()
    }

    /// statfs(2).
    pub(crate) fn statfs(&self) -> Result<StatFs> {
        self.alive()?;
        let a = self.meta.alloc();
        // Blocks of deleted files the reaper has still to free count as free.
        let free = (a.disk_free_blocks.load(Ordering::Relaxed) + self.reaper.backlog_blocks())
            .min(self.meta.geo().total_blocks);
        Ok(StatFs {
            block_size: self.meta.geo().block_size,
            blocks: self.meta.geo().total_blocks,
            blocks_free: free,
            // File data cannot take the metadata reserve, nor what is held
            // for the kernel's write-backs: a program that fallocates what
            // statfs says is available must get it.
            blocks_avail: free.saturating_sub(a.reserve_blocks() + a.held_for_write_back()),
            files: self.meta.geo().total_inodes(),
            files_free: a.free_inodes.load(Ordering::Relaxed),
            name_max: NAME_MAX as u32,
        })
    }

    /// Runs a changing operation in a transaction handle of `credits` log
    /// credits (see `tx::handle`): restarts it with more credits when it
    /// asks for them before changing anything, and retries once, after two
    /// commits, an operation that found the file system full while freed
    /// blocks still waited for the journal (operations leave nothing
    /// half-done when they fail with ENOSPC). Corruption and I/O errors go
    /// to the error latch.
    pub(crate) fn change<T>(&self, credits: u64, f: impl Fn(&Tx<'_>) -> Result<T>) -> Result<T> {
        let mut credits = credits;
        let mut retried_enospc = false;
        loop {
            self.writable()?;
            if self.meta.bufs().dirty_count() > self.txm.limit() / 2 {
                self.backend.kick();
            }
            let tx = self.txm.begin(&self.meta, credits, &|| self.commit())?;
            let r = f(&tx);
            let changed = tx.changed();
            if let Err(e) = &r {
                // Latch while the handle still holds the gate: a commit
                // waiting for it must see the abort and not take half an
                // operation.
                self.txm.latch.note(self.meta.dev(), e, changed);
            }
            tx.end();
            match r {
                Err(FsError::NeedCredits(n)) if !changed => credits = n,
                Err(FsError::Errno(libc::ENOSPC))
                    if !retried_enospc
                        && (self.meta.alloc().pending_blocks() > 0
                            || self.reaper.backlog_inodes() > 0
                            || self.reaper.held_unlinked() > 0) =>
                {
                    // Blocks wait for the journal, or inodes and blocks for
                    // the reaper (a create after a batch of deletes): let
                    // them go and try once more.
                    retried_enospc = true;
                    if !self.wait_for_reaper()? {
                        self.commit_and_checkpoint()?;
                    }
                }
                Err(e) => return Err(e),
                Ok(v) => return Ok(v),
            }
        }
    }

    /// Runs a reading operation; corruption and I/O errors go to the latch.
    pub(crate) fn read_op<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.alive()?;
        let r = f();
        if let Err(e) = &r {
            self.txm.latch.note(self.meta.dev(), e, false);
        }
        r
    }

    /// Waits until the reaper has freed what it holds, then commits so that
    /// the blocks leave the journal's hold (or, with nothing queued, only
    /// checkpoints if freed blocks wait for the journal); false if nothing
    /// was queued or waits, if
    /// the calling thread is itself freeing queued inodes (the reaper
    /// thread, or a `sync_delete` caller): it would wait for itself, or if
    /// it holds an I/O lock, which the reaper may need (see `io_locks`): the
    /// caller returns ENOSPC to an outer level that waits without it, as
    /// `write_data` and `fallocate` do.
    /// Files unlinked while the kernel held them are waited for first, a
    /// moment, for their FORGET (see `reaper`).
    pub(crate) fn wait_for_reaper(&self) -> Result<bool> {
        if crate::reaper::reaping_here() || crate::io_locks::holds_io_lock() {
            return Ok(false);
        }
        let forgotten = self.reaper.wait_for_forget(crate::reaper::FORGET_WAIT);
        if self.reaper.backlog_inodes() == 0 && !forgotten {
            // The reaper may have finished since the caller's own retry
            // checkpointed: what it freed waits for the journal.
            if self.meta.alloc().pending_blocks() == 0 {
                return Ok(false);
            }
            self.commit_and_checkpoint()?;
            return Ok(true);
        }
        self.reaper.wait_idle(std::time::Duration::from_secs(300));
        self.commit_and_checkpoint()?;
        Ok(true)
    }
}
