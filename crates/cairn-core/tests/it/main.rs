//! Engine integration tests: one binary, one module per scenario.

mod basic;
mod big_delete;
mod caches;
mod cil;
mod common;
mod concurrency;
mod contiguity;
mod crash;
mod deep_dir;
mod deferred_orphans;
mod full;
mod half_done;
mod handles;
mod inode_flags;
mod inode_numbers;
mod latch;
mod layers;
mod model;
mod overwrite;
mod pressure;
mod read_only;
mod reaper;
mod resize;
mod small_files;
mod xattr_big;
mod xattr_share;
