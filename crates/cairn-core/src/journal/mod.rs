//! The write-ahead log: its on-disk ring and records, replay, the deferred
//! home writes of committed images, and the error latch.
//!
//! ## The pieces
//! * [`log`] — the on-disk log: the [`Journal`], its positions and counters,
//!   and the commit of checkpoints (the barrier points).
//! * [`ail`] — deferred home writes: committed images wait here (and serve
//!   cache misses) until the log needs the room, then go home at once.
//! * [`image`] — block images, shared copy-on-write between buffers,
//!   captures and the AIL, and the meter of the memory they really hold.
//! * [`latch`] — the error latch: corruption or an I/O error marks the
//!   superblock `STATE_ERRORS` and applies `-o errors=`.
//! * [`recovery`] — [`Journal::open`]: reading the journal superblock and
//!   replaying committed checkpoints at mount. The record format, the ring
//!   arithmetic and the record walk are `cairn_format::journal`'s, shared
//!   with `cairn-fsck`.
//! * [`credits`] — the worst-case log credits of each kind of change
//!   (arithmetic on tree depths only).
//!
//! Above this module: the buffer cache (`buffer`, with the committed-item
//! list `buffer::cil`, which records which buffers each checkpoint changed)
//! and the transactions (`tx`: handles, the gate, the manager that pushes a
//! checkpoint into this log).
//!
//! ## Long operations
//! An operation whose worst case does not fit one record (deleting or
//! truncating a file of a million extents, a write that allocates many
//! extents) runs in steps, each its own handle that leaves a consistent
//! state: the inode sits on the orphan list with its target size while a
//! truncate or delete is in progress, and mount finishes the job (see
//! `inode_store`). No record larger than the log can ever be built.
//!
//! ## What is durable when
//! See [`log`]: a checkpoint is durable when its commit block is; `fsync`
//! returns after that. Home writes follow and become durable at the next
//! commit's first barrier; until then the buffers stay pinned in memory.

pub mod ail;
pub mod credits;
pub mod image;
pub mod latch;
pub mod log;
pub mod recovery;

pub use latch::{ErrorPolicy, Latch};
pub use log::Journal;
