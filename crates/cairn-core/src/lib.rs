//! # cairn-core: the engine
//!
//! A complete journaling file system that runs in-process: no FUSE, no CLI.
//! The FUSE adapter (`cairn-fuse`) is a thin layer over [`Fs`]; tests,
//! benchmarks and embedders call [`Fs`] directly.
//!
//! ## Map
//! From the bottom; each module uses only those above it in this list
//! (`tests/it/layers.rs` checks that no import cycle creeps in; the layers
//! are drawn in docs/design.md).
//! * [`dev`] — block devices (image file, RAM); `stats`, `types`, `error`.
//! * `journal` — the write-ahead log: records, replay, deferred home
//!   writes, the error latch, credit arithmetic.
//! * `buffer` — the metadata buffer cache (sharded) and its committed-item
//!   list.
//! * `alloc` — group bitmaps, block and inode allocation.
//! * `meta` — the context the objects work through.
//! * `tx` — transaction handles, the gate, the transaction manager.
//! * `btree` — the generic B+tree over buffers (extents, directories, orphans).
//! * `inode`, `dir`, `file`, `xattr` — the objects.
//! * [`Fs`] (`fs.rs`) — the POSIX-shaped API; its operations live in
//!   `namespace`, `inode_store`, `file_io` (with the overwrite fast
//!   path: no transaction for writes over written blocks, and `chattr`), ...
//! * `fsck_source` (feature `fsck`) — a block device seen by the
//!   independent checker (`cairn-fsck`).
//! * [`mkfs`] — formatting, as a library function; [`tune`], [`resize`] —
//!   changing an unmounted file system.
//!
//! ## Concurrency
//! FUSE serves requests from several threads. There is no global lock on the
//! hot path: each operation holds the *transaction gate* shared (so a commit
//! sees only whole operations), the inode locks it needs (in inode-number
//! order when it needs several), and short buffer and group locks. A commit
//! closes the gate only to swap the committed-item lists (microseconds),
//! then captures and writes them with the gate open. See each module's essay.

#[cfg(feature = "testing")]
pub mod crashdev;
pub mod crypt;
pub mod dev;
pub mod direct_data;
pub mod error;
#[cfg(feature = "fsck")]
pub mod fsck_source;
pub mod mkfs;
pub mod resize;
#[cfg(feature = "testing")]
pub mod testdev;
pub mod tune;
pub mod types;

mod acl;
mod alloc;
mod backend;
mod btree;
mod buffer;
mod dir;
mod engine;
mod file;
mod file_io;
mod fs;
mod inode;
pub mod inode_flags;
mod inode_store;
mod io_locks;
pub(crate) mod journal;
mod lru;
mod stats;
mod thread_index;
pub(crate) mod tx;
mod xattr;

/// Tests: the most deleted files whose orphan-list insert waits for the
/// commit (see `deferred_orphans`).
#[cfg(feature = "testing")]
pub use deferred_orphans::MAX_DEFERRED as MAX_DEFERRED_ORPHANS;
pub use error::{FsError, Result};
pub use file_io::FileIo;
pub use fs::{Fs, MountOptions};
pub use inode_store::InodeStore;
pub use journal::ErrorPolicy;
pub use namespace::Namespace;
/// Tests: the queued deletes that wake the reaper at once (see `reaper`).
#[cfg(feature = "testing")]
pub use reaper::BATCH_INODES as REAPER_BATCH_INODES;
pub use stats::Histogram;
pub use types::*;
mod dcache;
mod deferred_orphans;
mod extent_map;
mod mbcache;
mod meta;
mod mount_options;
mod namespace;
mod overwrite_state;
mod reaper;
