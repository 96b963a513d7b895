//! Transactions: handles with log credits, the transaction manager (gate,
//! group commit, limits, pinning), the error latch, and the write-ahead log.
//!
//! ## The pieces
//! * [`handle`] — [`Tx`], the transaction handle. Every change to metadata
//!   happens through one: it holds the transaction gate shared (so a commit
//!   sees only whole operations) and a reservation of *log credits*, the
//!   worst-case number of buffers the operation may newly dirty (as jbd2's
//!   `handle_t` and XFS's `xfs_trans` reservations). Marking a buffer dirty
//!   takes a `&Tx`, so the types prove the gate is held; each newly dirtied
//!   buffer is charged to the handle. [`credits`] gives the worst cases.
//! * [`gate`] — the transaction gate: operations hold it shared, a push
//!   closes it for its swap; both sides spin before they sleep.
//! * [`ail`] — deferred home writes: committed images wait here (and serve
//!   cache misses) until the log needs the room, then go home at once.
//! * [`image`] — block images, shared copy-on-write between buffers,
//!   captures and the AIL, and the meter of the memory they really hold.
//! * [`cil`] — the committed-item list: which buffers each checkpoint
//!   changed (per-thread insertion lists), and the push that swaps it out
//!   under the gate and captures the buffers outside it.
//! * [`manager`] — [`TxManager`]: admits handles only while the running
//!   checkpoint plus every outstanding reservation fits in one log record,
//!   else commits first (a reservation *waits* for log space, it never
//!   fails); groups concurrent syncs into one commit; snapshots dirty buffers
//!   and keeps them pinned in the cache until their home writes are done.
//! * [`latch`] — the error latch: corruption or an I/O error marks the
//!   superblock `STATE_ERRORS` and applies `-o errors=`.
//! * [`log`] — the on-disk log: the [`Journal`], its positions and counters,
//!   and the commit of checkpoints (the barrier points).
//! * [`recovery`] — [`Journal::open`]: reading the journal superblock and
//!   replaying committed checkpoints at mount. The record format, the ring
//!   arithmetic and the record walk are `cairn_format::journal`'s, shared
//!   with `cairn-fsck`.
//!
//! ## Long operations
//! An operation whose worst case does not fit one record (deleting or
//! truncating a file of a million extents, a write that allocates many
//! extents) runs in steps, each its own handle that leaves a consistent
//! state: the inode sits on the orphan list with its target size while a
//! truncate or delete is in progress, and mount finishes the job (see
//! `lifecycle`). No record larger than the log can ever be built.
//!
//! ## What is durable when
//! See [`log`]: a checkpoint is durable when its commit block is; `fsync`
//! returns after that. Home writes follow and become durable at the next
//! commit's first barrier; until then the buffers stay pinned in memory.

pub mod ail;
pub mod cil;
pub mod credits;
pub mod gate;
pub mod handle;
pub mod image;
pub mod latch;
pub mod log;
pub mod manager;
pub mod recovery;

pub use handle::Tx;
pub use latch::{ErrorPolicy, Latch};
pub use log::Journal;
pub use manager::TxManager;
