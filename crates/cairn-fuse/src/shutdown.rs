//! The shutdown ioctl through FUSE: `xfs_io -x -c shutdown [-f]` on any
//! file or directory of the mount.
//!
//! XFS_IOC_GOINGDOWN (and ext4's EXT4_IOC_SHUTDOWN, the same number) is
//! declared `_IOR('X', 125, __u32)` but *reads* its flags through the
//! pointer it is given. A FUSE file system gets only "restricted" ioctls,
//! whose input is what the number declares: none here. The kernel still
//! passes the pointer, and the vendored fuser hands it on
//! (`ioctl_with_arg`), so cairn reads the four bytes of flags from the
//! caller's memory with `process_vm_readv` (root may; only root may shut a
//! file system down, as CAP_SYS_ADMIN is needed for XFS and ext4).
//!
//! Flags: 0 (DEFAULT) and 1 (LOGFLUSH) commit the journal first; 2
//! (NOLOGFLUSH) does not. The engine's side is `cairn_core::Fs::shutdown`.

use fuser::Errno;

/// `_IOR('X', 125, __u32)`: XFS_IOC_GOINGDOWN, EXT4_IOC_SHUTDOWN.
pub const GOINGDOWN: u32 = 0x8004_587d;

/// Whether a shutdown by `uid` (process `pid`, flags at `arg` in its
/// memory) commits first; EPERM for anyone but root, EFAULT when the flags
/// cannot be read, EINVAL for unknown flags.
pub fn flush_of(uid: u32, pid: u32, arg: u64) -> Result<bool, Errno> {
    if uid != 0 {
        return Err(Errno::EPERM);
    }
    match read_caller_u32(pid, arg).ok_or(Errno::EFAULT)? {
        0 | 1 => Ok(true),
        2 => Ok(false),
        _ => Err(Errno::EINVAL),
    }
}

/// Four bytes at `addr` in process `pid`'s memory.
fn read_caller_u32(pid: u32, addr: u64) -> Option<u32> {
    // Read straight into a u32: the flags are in the caller's (this
    // machine's) byte order.
    let mut out: u32 = 0;
    let len = std::mem::size_of::<u32>();
    let local = libc::iovec { iov_base: (&raw mut out).cast(), iov_len: len };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
    // SAFETY: `local` describes `out`, a live 4-byte value this function
    // owns; `remote` is only an address in the other process, which the
    // kernel checks (EFAULT, ESRCH, EPERM) and never dereferences here.
    #[allow(unsafe_code)]
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    (n == 4).then_some(out)
}
