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
    /// A request that cannot be carried out as asked (mkfs's geometry, say).
    #[error("{0}")]
    Invalid(String),
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
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Shutdown => libc::EIO,
            FsError::NeedCredits(_) => libc::EAGAIN,
        }
    }
}

/// Shorthand for an errno error.
pub fn err<T>(errno: i32) -> Result<T> {
    Err(FsError::Errno(errno))
}

/// Result alias of the engine.
pub type Result<T> = std::result::Result<T, FsError>;
