//! Buffered reads never keep stale bytes after an asynchronous O_DIRECT
//! write (issue 32, item 5; xfstests generic/451), through a real mount.
//!
//! Two threads read a 640 KiB file through the page cache in a loop while
//! the test rewrites it with Linux AIO (`io_submit`, O_DIRECT), alternating
//! two patterns; after each write completes, a buffered read must return
//! the new pattern. The kernel does not drop pages after an *asynchronous*
//! direct write, so without cairn's invalidation (the retired `-o
//! dio_coherence=0` measured it) a stale page shows up within the first few cycles (measured: every run,
//! in under 0.1 s).

mod common;

use common::*;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE: usize = 640 << 10;

/// The kernel's `struct iocb` (linux/aio_abi.h), little-endian layout.
#[repr(C)]
#[derive(Default)]
struct Iocb {
    data: u64,
    key: u32,
    rw_flags: i32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

/// The kernel's `struct io_event`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PWRITE: u16 = 1;

/// One Linux AIO context.
struct Aio(u64);

impl Aio {
    fn new() -> Aio {
        let mut ctx: u64 = 0;
        // SAFETY: io_setup writes the new context id into `ctx`, a live u64.
        #[allow(unsafe_code)]
        let r = unsafe { libc::syscall(libc::SYS_io_setup, 4, &raw mut ctx) };
        assert_eq!(r, 0, "io_setup: {}", std::io::Error::last_os_error());
        Aio(ctx)
    }

    /// Writes `buf` at `offset` of `fd` asynchronously and waits for it.
    fn pwrite(&self, fd: i32, buf: &[u8], offset: i64) -> i64 {
        let mut cb = Iocb {
            opcode: IOCB_CMD_PWRITE,
            fildes: fd as u32,
            buf: buf.as_ptr() as u64,
            nbytes: buf.len() as u64,
            offset,
            ..Iocb::default()
        };
        let mut list = [&raw mut cb];
        // SAFETY: `list` holds one pointer to `cb`, which with `buf` lives
        // until the event below says the kernel is done with both.
        #[allow(unsafe_code)]
        let r = unsafe { libc::syscall(libc::SYS_io_submit, self.0, 1, list.as_mut_ptr()) };
        assert_eq!(r, 1, "io_submit: {}", std::io::Error::last_os_error());
        let mut ev = [IoEvent::default()];
        // SAFETY: the kernel writes at most one event into `ev`.
        #[allow(unsafe_code)]
        let r = unsafe {
            libc::syscall(libc::SYS_io_getevents, self.0, 1, 1, ev.as_mut_ptr(), std::ptr::null_mut::<libc::timespec>())
        };
        assert_eq!(r, 1, "io_getevents: {}", std::io::Error::last_os_error());
        ev[0].res
    }
}

impl Drop for Aio {
    fn drop(&mut self) {
        // SAFETY: destroys the context this value owns; no memory is passed.
        #[allow(unsafe_code)]
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.0);
        }
    }
}

/// A page-aligned buffer of `SIZE` bytes of `byte`.
fn aligned(byte: u8) -> (Vec<u8>, usize) {
    let v = vec![byte; SIZE + 4096];
    let skip = v.as_ptr().align_offset(4096);
    (v, skip)
}

/// Runs the cycle for `limit` on a fresh mount with `opts`; returns the
/// cycles run and the first stale read, if any.
fn cycle(opts: &[&str], limit: Duration) -> (u64, Option<String>, u64) {
    let (dir, g, pid) = fresh_mount_with("aio.img", "256M", opts);
    let mp = g.0.clone();
    let path = mp.join("cycle");
    std::fs::write(&path, vec![b'A'; SIZE]).unwrap();
    let dio = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(&path).unwrap();
    dio.sync_all().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; SIZE];
                while !stop.load(Ordering::Relaxed) {
                    let f = std::fs::File::open(&path).unwrap();
                    f.read_exact_at(&mut buf, 0).unwrap();
                }
            })
        })
        .collect();
    let aio = Aio::new();
    let patterns = [aligned(b'B'), aligned(b'A')];
    let mut check = vec![0u8; SIZE];
    let (mut cycles, mut stale) = (0u64, None);
    let t0 = Instant::now();
    while t0.elapsed() < limit && stale.is_none() {
        let (v, skip) = &patterns[(cycles % 2) as usize];
        let want = v[*skip];
        let res = aio.pwrite(dio.as_raw_fd(), &v[*skip..*skip + SIZE], 0);
        assert_eq!(res, SIZE as i64, "AIO O_DIRECT write");
        let f = std::fs::File::open(&path).unwrap();
        f.read_exact_at(&mut check, 0).unwrap();
        if let Some(at) = check.iter().position(|&b| b != want) {
            stale = Some(format!("cycle {cycles}: byte {at} is {:?}, written {:?}", check[at] as char, want as char));
        }
        cycles += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    drop(dio);
    let invalidations = counters(&mp)["dio.invalidations"];
    unmount(&mp, pid);
    assert_fsck_clean(&dir.path().join("aio.img"), "after the AIO cycles");
    (cycles, stale, invalidations)
}

#[test]
fn buffered_reads_see_every_completed_aio_direct_write() {
    if !can_mount() {
        return;
    }
    for opts in [&[][..], &["-o", "io_uring=0"], &["-o", "writeback_cache=0"]] {
        let (cycles, stale, invalidations) = cycle(opts, Duration::from_secs(4));
        assert!(stale.is_none(), "{opts:?}: stale buffered read after {cycles} cycles: {}", stale.unwrap());
        assert!(cycles > 20, "{opts:?}: only {cycles} cycles");
        assert!(invalidations > 0, "{opts:?}: the readers' pages were never dropped");
    }
}
