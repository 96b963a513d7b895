//! What the thread that sent a request is doing: the system call it is
//! inside, read from `/proc/TID/syscall` (its number and arguments) and
//! `/proc/TID/fdinfo/FD` (a descriptor's flags, offset and inode). The
//! space guard and chattr's flags use it to tell a buffered write from a
//! read when both send the same GETATTR (see `arming`).
//!
//! Only a root daemon reads other processes' calls (Yama's ptrace scope
//! refuses an ordinary user's); a caller that cannot be read is `Unknown`,
//! and so is a call other than the ones below. For `io_submit` (libaio,
//! whose buffered requests the kernel carries out inside the call) the
//! batch's control blocks are read from the caller's memory
//! (`/proc/TID/mem`): a write to the file in question makes it a writer.

use std::os::unix::fs::FileExt;

/// Whether this process may read its callers' `/proc/TID/syscall`: it
/// runs as root (an ordinary user's daemon is refused other processes'
/// under Yama's ptrace scope). A caller that still cannot be read (a
/// non-dumpable process) is answered as `Caller::Unknown`.
pub fn can_inspect_callers() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// What the thread that sent a request is doing, as far as the guard cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Inside a call that writes a file (`write`, `pwrite64`, `writev`, ...)
    /// through descriptor `fd`; `write` and `pwrite64` also say how many
    /// bytes (`count`), and `pwrite64` where (`pos`).
    Writing { fd: i32, count: Option<u64>, pos: Option<u64> },
    /// Inside a call that reads or seeks (`read`, `pread64`, `lseek`, ...).
    Reading,
    /// Not known: `/proc/TID/syscall` unreadable, or another call.
    Unknown,
}

/// The system call thread `tid` is in now, asking about inode `ino` (see
/// the module essay).
pub fn caller(tid: u32, ino: u64) -> Caller {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{tid}/syscall")) else {
        return Caller::Unknown;
    };
    let mut words = text.split_whitespace();
    let Some(n) = words.next().and_then(|n| n.parse::<libc::c_long>().ok()) else {
        return Caller::Unknown;
    };
    // The arguments, in hex: the descriptor first for each of these calls.
    let args: Vec<u64> =
        words.take(4).filter_map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok()).collect();
    match (classify(n), args.first()) {
        (Caller::Writing { .. }, Some(&fd)) => {
            let sized = n == libc::SYS_write || n == libc::SYS_pwrite64;
            Caller::Writing {
                fd: fd as i32,
                count: args.get(2).copied().filter(|_| sized),
                pos: args.get(3).copied().filter(|_| n == libc::SYS_pwrite64),
            }
        }
        (Caller::Writing { .. }, None) => Caller::Unknown,
        _ if n == libc::SYS_io_submit => aio_caller(tid, &args, ino),
        (c, _) => c,
    }
}

/// Where thread `tid`'s descriptor `fd` will write next: its offset.
pub fn fd_pos(tid: u32, fd: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("pos:"))?.trim().parse().ok()
}

/// The status flags of thread `tid`'s descriptor `fd` (`O_APPEND`,
/// `O_DIRECT`, ...), if they can be read.
pub fn fd_flags(tid: u32, fd: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).ok()?;
    let flags = text.lines().find_map(|l| l.strip_prefix("flags:"))?.trim();
    i32::from_str_radix(flags, 8).ok()
}

/// A system call number's kind.
pub fn classify(n: libc::c_long) -> Caller {
    const WRITES: [libc::c_long; 5] =
        [libc::SYS_write, libc::SYS_pwrite64, libc::SYS_writev, libc::SYS_pwritev, libc::SYS_pwritev2];
    const READS: [libc::c_long; 8] = [
        libc::SYS_read,
        libc::SYS_pread64,
        libc::SYS_readv,
        libc::SYS_preadv,
        libc::SYS_preadv2,
        libc::SYS_lseek,
        libc::SYS_sendfile,
        libc::SYS_splice,
    ];
    if WRITES.contains(&n) {
        Caller::Writing { fd: -1, count: None, pos: None }
    } else if READS.contains(&n) {
        Caller::Reading
    } else {
        Caller::Unknown
    }
}

/// `io_submit(ctx, nr, iocbpp)` by thread `tid` (arguments `args`): a
/// writer if one of its control blocks writes to a descriptor of inode
/// `ino` (`struct iocb`, `linux/aio_abi.h`), a reader if none does.
// The control blocks are in the caller's memory, in the host's byte order.
#[allow(clippy::host_endian_bytes)]
fn aio_caller(tid: u32, args: &[u64], ino: u64) -> Caller {
    /// `IOCB_CMD_PWRITE` and `IOCB_CMD_PWRITEV`.
    const WRITES: [u16; 2] = [1, 8];
    /// Control blocks looked at, at most.
    const MAX_IOCBS: u64 = 64;
    let (Some(&nr), Some(&list)) = (args.get(1), args.get(2)) else { return Caller::Unknown };
    let Ok(mem) = std::fs::File::open(format!("/proc/{tid}/mem")) else { return Caller::Unknown };
    let read_u64 = |at: u64| {
        let mut b = [0u8; 8];
        mem.read_exact_at(&mut b, at).ok().map(|()| u64::from_ne_bytes(b))
    };
    for i in 0..nr.min(MAX_IOCBS) {
        let Some(iocb) = read_u64(list + 8 * i) else { return Caller::Unknown };
        let mut cb = [0u8; 48];
        if mem.read_exact_at(&mut cb, iocb).is_err() {
            return Caller::Unknown;
        }
        let opcode = u16::from_ne_bytes([cb[16], cb[17]]);
        let fd = i32::from_ne_bytes([cb[20], cb[21], cb[22], cb[23]]);
        if WRITES.contains(&opcode) && fd_ino(tid, fd) == Some(ino) {
            let word = |at: usize| u64::from_ne_bytes(cb[at..at + 8].try_into().unwrap_or([0; 8]));
            let sized = opcode == 1;
            return Caller::Writing {
                fd,
                count: Some(word(32)).filter(|_| sized),
                pos: Some(word(40)).filter(|_| sized),
            };
        }
    }
    Caller::Reading
}

/// The inode behind thread `tid`'s descriptor `fd`.
pub fn fd_ino(tid: u32, fd: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("ino:"))?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn system_calls_are_told_apart() {
        assert_eq!(classify(libc::SYS_write), Caller::Writing { fd: -1, count: None, pos: None });
        assert_eq!(classify(libc::SYS_pwrite64), Caller::Writing { fd: -1, count: None, pos: None });
        assert_eq!(classify(libc::SYS_pread64), Caller::Reading);
        assert_eq!(classify(libc::SYS_lseek), Caller::Reading);
        assert_eq!(classify(libc::SYS_io_uring_enter), Caller::Unknown);
    }

    #[test]
    fn a_thread_blocked_in_read_is_seen_reading() {
        use std::io::{Read, Write};
        // A thread blocked reading a pipe: its /proc/TID/syscall says read.
        let (mut rd, mut wr) = std::io::pipe().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let tid: u32 = me.file_name().unwrap().to_str().unwrap().parse().unwrap();
            tx.send(tid).unwrap();
            let mut b = [0u8; 1];
            rd.read_exact(&mut b).unwrap();
        });
        let tid = rx.recv().unwrap();
        let mut seen = Caller::Unknown;
        for _ in 0..200 {
            seen = caller(tid, 0);
            if seen != Caller::Unknown {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        wr.write_all(b"x").unwrap();
        reader.join().unwrap();
        // Readable for our own threads even as an ordinary user.
        assert_eq!(seen, Caller::Reading);
    }
}
