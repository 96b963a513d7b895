//! Transactions: handles with log credits, the transaction gate, and the
//! manager that admits handles and pushes checkpoints into the log
//! (`journal`).
//!
//! ## The pieces
//! * [`handle`] — [`Tx`], the transaction handle. Every change to metadata
//!   happens through one: it holds the transaction gate shared (so a commit
//!   sees only whole operations) and a reservation of *log credits*, the
//!   worst-case number of buffers the operation may newly dirty (as jbd2's
//!   `handle_t` and XFS's `xfs_trans` reservations; `journal::credits` gives
//!   the worst cases). Layers below the metadata context (the buffer cache,
//!   the allocator) take it as a [`crate::buffer::Change`]: proof that a
//!   transaction runs, and the account each newly dirtied buffer is charged
//!   to.
//! * [`gate`] — the transaction gate: operations hold it shared, a push
//!   closes it for its swap; whoever finds it closed and empty runs the swap.
//! * [`manager`] — [`TxManager`]: admits handles only while the running
//!   checkpoint plus every outstanding reservation fits in one log record,
//!   else commits first (a reservation *waits* for log space, it never
//!   fails); groups concurrent syncs into one commit; snapshots dirty buffers
//!   and keeps them pinned in the cache until their home writes are done.

pub mod gate;
pub mod handle;
pub mod manager;

pub use handle::Tx;
pub use manager::TxManager;
