//! What the thread that sent a request is doing: the system call it is
//! inside, read from `/proc/TID/syscall` (its number and arguments) and
//! `/proc/TID/fdinfo/FD` (a descriptor's flags, offset and inode), and
//! which of FUSE's file paths its kernel stack is in (`/proc/TID/stack`).
//! The space guard and chattr's flags use it to tell a buffered write from
//! a read when both send the same GETATTR (see `arming`).
//!
//! The stack decides read against write where it shows FUSE's read or
//! write path: exact for a libaio batch that reads and writes one file (the
//! system call alone cannot say which control block the kernel is carrying
//! out: xfstests generic/299's readers were refused as writers) and for
//! io_uring's workers. The system call then tells the descriptor, the size
//! and the place of the write.
//!
//! Only a root daemon reads other processes' calls and stacks (Yama's
//! ptrace scope refuses an ordinary user's); a caller that cannot be read
//! is `Unknown`, and so is a call other than the ones below. For
//! `io_submit` (libaio, whose buffered requests the kernel carries out
//! inside the call) the batch's control blocks are read from the caller's
//! memory (`/proc/TID/mem`): its writes to the file in question.

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
    /// Writing a file: through descriptor `fd` (status flags `flags`) when
    /// the call names it; `count` bytes at `pos` when the call tells (for
    /// `write`/`writev` the descriptor's offset, none when appending).
    Writing { fd: Option<i32>, flags: Option<i32>, count: Option<u64>, pos: Option<u64> },
    /// Inside a call that reads or seeks (`read`, `pread64`, `lseek`, ...).
    Reading,
    /// Not known: `/proc/TID/syscall` unreadable, or another call.
    Unknown,
}

impl Caller {
    fn writing() -> Caller {
        Caller::Writing { fd: None, flags: None, count: None, pos: None }
    }
}

/// Which way the kernel is moving a file's data for a thread blocked in a
/// FUSE request, from its kernel stack (`/proc/TID/stack`, root only):
/// inside the write or the read path of FUSE's files. Exact where the
/// system call is not (a libaio batch of reads and writes, io_uring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelPath {
    Write,
    Read,
}

/// The FUSE file functions a blocked thread's stack may show (the cached
/// variants are inlined into the first ones on some builds).
const WRITE_PATH: [&str; 3] = ["fuse_file_write_iter", "fuse_cache_write_iter", "fuse_perform_write"];
const READ_PATH: [&str; 2] = ["fuse_file_read_iter", "fuse_cache_read_iter"];

/// Reads thread `tid`'s kernel stack: see [`KernelPath`].
pub fn kernel_path(tid: u32) -> Option<KernelPath> {
    let stack = std::fs::read_to_string(format!("/proc/{tid}/stack")).ok()?;
    path_in_stack(&stack)
}

fn path_in_stack(stack: &str) -> Option<KernelPath> {
    let frame = |names: &[&str]| {
        stack
            .lines()
            .any(|l| names.iter().any(|n| l.split_whitespace().nth(1).is_some_and(|f| f.starts_with(&format!("{n}+")))))
    };
    if frame(&WRITE_PATH) {
        Some(KernelPath::Write)
    } else if frame(&READ_PATH) {
        Some(KernelPath::Read)
    } else {
        None
    }
}

/// The system call thread `tid` is in now, asking about inode `ino` (see
/// the module essay); its kernel stack decides between a read and a write
/// where it shows FUSE's file paths.
pub fn caller(tid: u32, ino: u64) -> Caller {
    let path = kernel_path(tid);
    if path == Some(KernelPath::Read) {
        return Caller::Reading;
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/{tid}/syscall")) else {
        return if path == Some(KernelPath::Write) { Caller::writing() } else { Caller::Unknown };
    };
    let mut words = text.split_whitespace();
    let Some(n) = words.next().and_then(|n| n.parse::<libc::c_long>().ok()) else {
        return Caller::Unknown;
    };
    // The arguments, in hex: the descriptor first for each of these calls.
    let args: Vec<u64> =
        words.take(4).filter_map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok()).collect();
    match (classify(n), args.first()) {
        (Caller::Writing { .. }, Some(&fd)) => sync_writer(tid, n, fd as i32, &args),
        _ if n == libc::SYS_io_submit => aio_caller(tid, &args, ino, path),
        // io_uring's worker, or a call other than the ones above.
        _ if path == Some(KernelPath::Write) => Caller::writing(),
        (Caller::Writing { .. }, None) => Caller::Unknown,
        (c, _) => c,
    }
}

/// A `write`-family call `n` by thread `tid` on descriptor `fd`.
fn sync_writer(tid: u32, n: libc::c_long, fd: i32, args: &[u64]) -> Caller {
    let flags = fd_flags(tid, fd);
    let appending = flags.is_some_and(|f| f & libc::O_APPEND != 0);
    let sized = n == libc::SYS_write || n == libc::SYS_pwrite64;
    let pos = match n {
        _ if n == libc::SYS_pwrite64 => args.get(3).copied(),
        _ if appending => None,
        _ if n == libc::SYS_write || n == libc::SYS_writev => fd_pos(tid, fd),
        _ => None,
    };
    Caller::Writing { fd: Some(fd), flags, count: args.get(2).copied().filter(|_| sized), pos }
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
        Caller::writing()
    } else if READS.contains(&n) {
        Caller::Reading
    } else {
        Caller::Unknown
    }
}

/// `io_submit(ctx, nr, iocbpp)` by thread `tid` (arguments `args`), its
/// kernel stack showing `path`: a writer if the stack says so or, when it
/// cannot tell, if one of the batch's control blocks writes to a descriptor
/// of inode `ino` (`struct iocb`, `linux/aio_abi.h`); else a reader. The
/// write's size and place are known when the batch has one write to the
/// file; with several, the largest size and no place.
// The control blocks are in the caller's memory, in the host's byte order.
#[allow(clippy::host_endian_bytes)]
fn aio_caller(tid: u32, args: &[u64], ino: u64, path: Option<KernelPath>) -> Caller {
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
    // (fd, size if a plain pwrite, offset) of each write to the file.
    let mut writes: Vec<(i32, Option<u64>, u64)> = Vec::new();
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
            writes.push((fd, Some(word(32)).filter(|_| opcode == 1), word(40)));
        }
    }
    match (writes.as_slice(), path) {
        ([], Some(KernelPath::Write)) => Caller::writing(),
        ([], _) => Caller::Reading,
        (&[(fd, count, pos)], _) => {
            Caller::Writing { fd: Some(fd), flags: fd_flags(tid, fd), count, pos: count.map(|_| pos) }
        }
        (many, _) => {
            let fd = many[0].0;
            let count = many.iter().map(|w| w.1).collect::<Option<Vec<u64>>>().and_then(|c| c.into_iter().max());
            Caller::Writing { fd: Some(fd), flags: fd_flags(tid, fd), count, pos: None }
        }
    }
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
        assert_eq!(classify(libc::SYS_write), Caller::writing());
        assert_eq!(classify(libc::SYS_pwrite64), Caller::writing());
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

    #[test]
    fn the_kernel_stack_tells_fuse_writes_from_reads() {
        let stack = |f: &str| {
            format!(
                "[<0>] request_wait_answer+0x16a/0x280\n[<0>] __fuse_simple_request+0x120/0x330\n\
                 [<0>] fuse_do_getattr+0x1af/0x290\n[<0>] {f}+0x1e1/0x530\n[<0>] vfs_write+0x29c/0x4c0\n"
            )
        };
        assert_eq!(path_in_stack(&stack("fuse_file_write_iter")), Some(KernelPath::Write));
        assert_eq!(path_in_stack(&stack("fuse_cache_write_iter")), Some(KernelPath::Write));
        assert_eq!(path_in_stack(&stack("fuse_file_read_iter")), Some(KernelPath::Read));
        assert_eq!(path_in_stack(&stack("vfs_getattr_nosec")), None);
        // A name that only starts like one is not one.
        assert_eq!(path_in_stack(&stack("fuse_file_write_iter_x")), None);
    }
}
