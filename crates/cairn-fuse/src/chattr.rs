//! chattr / lsattr through FUSE: the kernel turns FS_IOC_GETFLAGS /
//! SETFLAGS (and FS_IOC_FSGETXATTR / FSSETXATTR, xfs_io's) on a cairn file
//! into FUSE IOCTL requests on the inode, after checking ownership and
//! CAP_LINUX_IMMUTABLE itself; the engine keeps and enforces the flags
//! (`cairn_core::inode_flags`).
//!
//! ## Opens
//! FUSE tells the kernel nothing of these flags, so only cairn can refuse
//! to open an immutable file for writing. By default cairn answers OPEN
//! with ENOSYS and the kernel never asks again (`adapter::open`); so a
//! mount of an image in which some inode was ever made immutable or
//! append-only (`FileIo::has_protected_inodes`) answers OPEN and checks each
//! (`FileIo::check_open`), at the price of an OPEN and a RELEASE per open. A
//! mount in which the first such flag is set has stopped asking already:
//! there an `open(O_WRONLY)` succeeds, and the writes are refused instead.
//! A buffered `write(2)` to an immutable file fails with EPERM at the call:
//! the file is *armed* (`arming`), so the GETATTR each write sends first is
//! told from a read's and refused. A write-back that overwrites an
//! append-only file is refused by the engine (EPERM at `fsync`/`close`).
//! From the next mount on the opens are checked; cairn logs this once.

use cairn_core::inode_flags::{ATTR_APPEND, ATTR_IMMUTABLE};
use cairn_core::{Ctx, Fs};
use fuser::Errno;
use std::sync::atomic::{AtomicBool, Ordering};

/// `_IOR('f', 1, long)`: the inode's flags (an `int` in fact).
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// `_IOW('f', 2, long)`: set them.
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// The 32-bit compat numbers of the same.
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
/// `_IOR('X', 31, struct fsxattr)` and `_IOW('X', 32, ...)`.
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// `struct fsxattr`: xflags, extsize, nextents, projid, cowextsize, 8 pad.
const FSXATTR_SIZE: usize = 28;

/// Whether `cmd` is one of the flag ioctls.
pub fn handles(cmd: u32) -> bool {
    matches!(
        cmd,
        FS_IOC_GETFLAGS
            | FS_IOC_SETFLAGS
            | FS_IOC32_GETFLAGS
            | FS_IOC32_SETFLAGS
            | FS_IOC_FSGETXATTR
            | FS_IOC_FSSETXATTR
    )
}

/// The caller's integer, in its byte order.
#[allow(clippy::host_endian_bytes)]
fn host_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

#[allow(clippy::host_endian_bytes)]
fn host_bytes(v: u32) -> [u8; 4] {
    v.to_ne_bytes()
}

/// Serves flag ioctl `cmd` on `ino` for `ctx`: the reply's output bytes.
/// `opens_checked` says whether this mount answers OPEN (see the essay).
pub fn ioctl(fs: &Fs, ctx: &Ctx, ino: u64, cmd: u32, input: &[u8], opens_checked: bool) -> Result<Vec<u8>, Errno> {
    let err = |e: cairn_core::FsError| Errno::from_i32(e.errno());
    match cmd {
        FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => Ok(host_bytes(fs.files().inode_flags(ino).map_err(err)?).to_vec()),
        FS_IOC_FSGETXATTR => {
            let mut out = vec![0u8; FSXATTR_SIZE];
            out[..4].copy_from_slice(&host_bytes(cairn_core::inode_flags::to_xflags(
                fs.files().inode_flags(ino).map_err(err)?,
            )));
            Ok(out)
        }
        FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
            let flags = host_u32(input).ok_or(Errno::EINVAL)?;
            set(fs, ctx, ino, flags, opens_checked)
        }
        FS_IOC_FSSETXATTR => {
            if input.len() < FSXATTR_SIZE {
                return Err(Errno::EINVAL);
            }
            // Project ids, extent size hints: not kept.
            let field = |i: usize| host_u32(&input[i * 4..]).unwrap_or(0);
            if field(1) != 0 || field(3) != 0 || field(4) != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            let current = fs.files().inode_flags(ino).map_err(err)?;
            let flags = cairn_core::inode_flags::from_xflags(field(0), current).map_err(err)?;
            set(fs, ctx, ino, flags, opens_checked)
        }
        _ => Err(Errno::ENOTTY),
    }
}

fn set(fs: &Fs, ctx: &Ctx, ino: u64, flags: u32, opens_checked: bool) -> Result<Vec<u8>, Errno> {
    fs.files().set_inode_flags(ctx, ino, flags).map_err(|e| Errno::from_i32(e.errno()))?;
    static WARNED: AtomicBool = AtomicBool::new(false);
    if flags & (ATTR_IMMUTABLE | ATTR_APPEND) != 0 && !opens_checked && !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            ino,
            "chattr +i/+a: this mount does not check opens (the kernel stopped sending OPEN): writes to such files are refused at the call instead, and from the next mount on so is opening them for writing"
        );
    }
    Ok(Vec::new())
}
