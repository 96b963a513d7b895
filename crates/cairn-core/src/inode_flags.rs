//! Inode flags: what `chattr` sets and `lsattr` shows (FS_IOC_GETFLAGS /
//! SETFLAGS, and FS_IOC_FSGETXATTR / FSSETXATTR as xfs_io uses them).
//!
//! ## The flags
//! The ones ext4 users use, with Linux's FS_*_FL values, kept in the
//! inode's `attr_flags` (`cairn_format::inode`, byte 124):
//! * `i` immutable: nothing changes the inode — data, size, mode, owner,
//!   times, xattrs — and no name of it is added or removed; in an immutable
//!   directory no entry is added or removed.
//! * `a` append-only: data may only be added at the end, no name of it is
//!   removed or added, mode and owner stay; in an append-only directory
//!   entries may be added, none removed.
//! * `S` sync: every change of the file is committed before the call
//!   returns; `D` dirsync (or `S` on a directory): every change of the
//!   directory's entries is.
//! * `d` nodump and `A` noatime are kept for the tools that read them
//!   (cairn never updates atime on a read).
//!
//! Other flags are refused (EOPNOTSUPP), as ext4 refuses the ones it does
//! not know. A new inode inherits `S`, `d` and `A` from its directory, a new
//! directory also `D`; `i` and `a` are never inherited (ext4's rules).
//!
//! ## Who may set them
//! The owner, or root; `i` and `a` only with CAP_LINUX_IMMUTABLE (root
//! here). The kernel checks both before FUSE sends the ioctl; the engine
//! checks again for in-process callers. While `i` is set, only a change
//! that clears it is accepted.
//!
//! ## Where they are enforced
//! In the engine, on every operation that reaches it: write, fallocate,
//! setattr, xattr changes, create, link, unlink, rmdir, rename (see
//! [`refuse_if_protected`] and its callers). An append-only file accepts a
//! write below its end only if it leaves every existing byte as it was: the
//! kernel's write-back of an appended partial page resends the page's old
//! bytes. Through FUSE the kernel knows none of these flags (FUSE has no
//! way to tell it), so cairn also answers a protected inode's attributes
//! with a zero timeout and refuses the GETATTR a buffered write sends first
//! (`cairn_fuse`'s adapter): `write(2)` to an immutable file says EPERM.
//! What FUSE keeps from cairn: an `open(O_WRONLY)` of such a file succeeds
//! (the kernel sends no OPEN by default; `-o parallel_dio=1` serves OPEN and
//! refuses it there), and a buffered overwrite inside an append-only file
//! is refused only at write-back (EPERM at `fsync`).
//!
//! ## Durability
//! A flag change is one transaction (the inode and its ctime); `S`/`D`
//! commit after the operation, as an fsync would.

use crate::error::{FsError, Result};
use crate::inode::InodeState;
use cairn_format::inode::*;
pub use cairn_format::inode::{ATTR_APPEND, ATTR_DIRSYNC, ATTR_IMMUTABLE, ATTR_NOATIME, ATTR_NODUMP, ATTR_SYNC};

/// Flags `set_inode_flags` accepts and `inode_flags` reports.
pub const SETTABLE: u32 = ATTR_KNOWN;

/// FS_IOC_FSGETXATTR's `fsx_xflags` bits for the flags cairn keeps.
const XFLAGS: [(u32, u32); 5] =
    [(ATTR_IMMUTABLE, 0x8), (ATTR_APPEND, 0x10), (ATTR_SYNC, 0x20), (ATTR_NOATIME, 0x40), (ATTR_NODUMP, 0x80)];

/// Inode flags as `fsx_xflags` (`D` has no xflag).
pub fn to_xflags(flags: u32) -> u32 {
    XFLAGS.iter().filter(|(f, _)| flags & f != 0).fold(0, |a, (_, x)| a | x)
}

/// `fsx_xflags` as inode flags, keeping `D` from `current`; EOPNOTSUPP for
/// an xflag cairn does not keep.
pub fn from_xflags(xflags: u32, current: u32) -> Result<u32> {
    let known = XFLAGS.iter().fold(0, |a, (_, x)| a | x);
    if xflags & !known != 0 {
        return Err(FsError::Errno(libc::EOPNOTSUPP));
    }
    Ok(XFLAGS.iter().filter(|(_, x)| xflags & x != 0).fold(current & ATTR_DIRSYNC, |a, (f, _)| a | f))
}

/// EPERM if `st` is immutable or append-only: its names, mode, owner and
/// xattrs stay.
pub(crate) fn refuse_if_protected(st: &InodeState) -> Result<()> {
    if st.d.attr_flags & (ATTR_IMMUTABLE | ATTR_APPEND) != 0 {
        return Err(FsError::Errno(libc::EPERM));
    }
    Ok(())
}

/// EPERM if `st` is immutable.
pub(crate) fn refuse_if_immutable(st: &InodeState) -> Result<()> {
    if st.d.attr_flags & ATTR_IMMUTABLE != 0 {
        return Err(FsError::Errno(libc::EPERM));
    }
    Ok(())
}

/// The flags a new inode of `mode` takes from its directory's.
pub(crate) fn inherited(parent_flags: u32, mode: u32) -> u32 {
    let f = parent_flags & (ATTR_SYNC | ATTR_NODUMP | ATTR_NOATIME | ATTR_DIRSYNC);
    match mode & S_IFMT {
        S_IFDIR => f,
        S_IFREG => f & !ATTR_DIRSYNC,
        _ => f & (ATTR_NODUMP | ATTR_NOATIME),
    }
}

/// Whether changes of `st` are committed before they return (`S`).
pub(crate) fn is_sync(st: &InodeState) -> bool {
    st.d.attr_flags & ATTR_SYNC != 0
}

/// Whether changes of directory `st`'s entries are (`D`, or `S`).
pub(crate) fn is_dirsync(st: &InodeState) -> bool {
    st.d.attr_flags & (ATTR_SYNC | ATTR_DIRSYNC) != 0
}
