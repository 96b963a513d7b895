//! The engine's error type. Every error maps to one errno for FUSE.

use cairn_format::FormatError;
use thiserror::Error;

/// An engine error.
#[derive(Debug, Error)]
pub enum FsError {
    /// A POSIX error with its errno (`ENOENT`, `EEXIST`, `ENOTEMPTY`, ...).
    #[error("{}", std::io::Error::from_raw_os_error(*.0))]
    Errno(i32),
    /// Metadata read from disk failed verification.
    #[error("corrupt metadata: {0}")]
    Corrupt(#[from] FormatError),
    /// The image could not be read or written.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A size or layout mkfs cannot format (the text names the bound missed).
    #[error("{0}")]
    Geometry(String),
    /// Growing the file system cannot be carried out as asked.
    #[error(transparent)]
    Resize(#[from] ResizeError),
    /// Changing the superblock's settings cannot be carried out as asked.
    #[error(transparent)]
    Tune(#[from] TuneError),
    /// An earlier I/O error or corruption shut the file system down.
    #[error("file system shut down after an earlier error")]
    Shutdown,
    /// The operation needs a transaction handle of this many log credits
    /// (internal: the operation is restarted with them, never reported, so
    /// hidden from the documented API; a variant cannot be private, and the
    /// restart travels through every operation's `Result`).
    #[doc(hidden)]
    #[error("operation needs {0} log credits")]
    NeedCredits(u64),
}

impl FsError {
    /// The errno to answer a FUSE request with.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Errno(e) => *e,
            FsError::Corrupt(_) => libc::EUCLEAN,
            FsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            FsError::Geometry(_) | FsError::Resize(_) | FsError::Tune(_) => libc::EINVAL,
            FsError::Shutdown => libc::EIO,
            FsError::NeedCredits(_) => libc::EAGAIN,
        }
    }
}

/// Why `cairn resize` (offline or online) refuses to grow a file system.
/// Sizes are already shown for people (`human_bytes`).
#[derive(Debug, Error)]
pub enum ResizeError {
    /// The new size is not larger than the file system.
    #[error("the file system has {has} already; cairn resize only grows (shrinking would move data)")]
    NotLarger { has: String },
    /// The new size is past what the group descriptor table can describe.
    #[error("{asked} is more than its group descriptor table can describe: at most {cap} ({groups} groups)")]
    BeyondDescriptors { asked: String, cap: String, groups: u64 },
    /// The new last group cannot hold its own metadata.
    #[error("{asked} leaves too little for a new group's bitmaps and inode table; ask for more")]
    LastGroupTooSmall { asked: String },
    /// The file system needs fsck before it can grow.
    #[error("the file system was not cleanly unmounted or has recorded errors: run `cairn fsck --repair` first")]
    NotClean,
    /// The device is shorter than the new size.
    #[error("the device holds {holds}, less than {asked}")]
    DeviceTooSmall { holds: String, asked: String },
    /// The old last group's block bitmap failed its checksum after the new
    /// size was written.
    #[error(
        "group {group}'s block bitmap does not match its checksum: the new size is in place, \
         but run `cairn fsck --repair` to give its {blocks} new blocks back"
    )]
    LastBitmapChecksum { group: u64, blocks: u64 },
    /// A mounted file system's device could not be lengthened.
    #[error("cannot make the device {bytes} bytes long: {source}")]
    DeviceGrow { bytes: u64, source: std::io::Error },
}

/// Why `cairn tune` refuses a change.
#[derive(Debug, Error)]
pub enum TuneError {
    /// `--errors` is not one of the behaviours.
    #[error("errors {0:?}: expected continue, remount-ro, shutdown or default")]
    Errors(String),
    /// `--uuid` is neither a UUID nor `random`.
    #[error("{0:?} is not a UUID (32 hex digits, dashes optional) or \"random\"")]
    Uuid(String),
    /// The file system needs its journal replayed or fsck first.
    #[error(
        "the file system was not cleanly unmounted: mount and unmount it (the journal is replayed), \
         or run `cairn fsck --repair`, first"
    )]
    NotClean,
    /// The label is too long or holds a NUL.
    #[error("label {label:?} is {} bytes: at most {max}, and no NUL", .label.len())]
    Label { label: String, max: usize },
    /// The default mount options are too long or hold a NUL.
    #[error("mount options {opts:?} are {} bytes: at most {max}, and no NUL", .opts.len())]
    MountOpts { opts: String, max: usize },
}

/// Shorthand for an errno error.
pub fn err<T>(errno: i32) -> Result<T> {
    Err(FsError::Errno(errno))
}

/// Result alias of the engine.
pub type Result<T> = std::result::Result<T, FsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_as_before_and_are_einval() {
        let e = FsError::from(ResizeError::LastBitmapChecksum { group: 3, blocks: 70 });
        assert_eq!(
            e.to_string(),
            "group 3's block bitmap does not match its checksum: the new size is in place, \
             but run `cairn fsck --repair` to give its 70 new blocks back"
        );
        assert_eq!(e.errno(), libc::EINVAL);
        let e = FsError::from(TuneError::Uuid("xyz".into()));
        assert_eq!(e.to_string(), "\"xyz\" is not a UUID (32 hex digits, dashes optional) or \"random\"");
        let e = FsError::from(TuneError::Label { label: "ab".into(), max: 16 });
        assert_eq!(e.to_string(), "label \"ab\" is 2 bytes: at most 16, and no NUL");
        assert_eq!(e.errno(), libc::EINVAL);
        let e = FsError::from(ResizeError::DeviceGrow {
            bytes: 4096,
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        });
        assert!(e.to_string().starts_with("cannot make the device 4096 bytes long: No space left on device"), "{e}");
        assert_eq!(FsError::Geometry("too small".into()).to_string(), "too small");
    }
}
