//! fsck integration tests: images built by the engine, checked by fsck.

mod backup_sb;
mod catalogue;
mod clean;
mod common;
mod corrupt;
mod damaged_log;
mod encrypted;
mod fuzz;
mod golden;
mod operational;
mod preen;
