//! File data to and from the image with `O_DIRECT`: each byte cached once.
//!
//! ## Why
//! Through FUSE the kernel keeps a file's pages in its own page cache. If
//! cairn then reads the image with plain `pread`, the host's page cache
//! keeps the image file's pages too: reading a 1 GiB file grew the page
//! cache by about 2.2 GiB (issue #37). File data is therefore read and
//! written with a second descriptor of the image opened `O_DIRECT`, which
//! moves bytes between the device and cairn's buffer without caching them.
//! Metadata keeps the plain descriptor: cairn caches it itself, and the
//! journal's and the checkpoint's writes are small and batched.
//!
//! ## Alignment
//! `O_DIRECT` wants the file offset and the length in multiples of the
//! device's direct-I/O alignment and the memory aligned too; `statx`
//! (`STATX_DIOALIGN`) tells both, else a page is assumed. Data blocks are
//! block-aligned, and the buffers FUSE hands cairn start on a page (see
//! fuser's `page_buf`), so whole blocks go straight through. What does not:
//! - a read of a partial unit (a file's last block, clipped at its size) or
//!   into unaligned memory goes through a page-aligned bounce buffer per
//!   thread, read whole and copied;
//! - a write of unaligned memory is copied to the bounce buffer first;
//! - a write of a partial unit (only where cairn's block is smaller than
//!   the alignment) goes through the plain descriptor.
//!
//! ## Coherence
//! Both descriptors name one file, and the kernel keeps them coherent: a
//! direct read or write first writes back the host's dirty pages in its
//! range, and a direct write drops the cached pages it overwrote. So a
//! block may move between metadata and data, and partial writes may mix
//! with direct ones, without a stale byte being read.
//!
//! ## Durability
//! Unchanged: a direct write has left the host's cache when it returns,
//! and the device's own cache is flushed by the same `fdatasync` as before
//! (it is per file, whichever descriptor wrote).
//!
//! ## Off-switch and counters
//! `-o direct_data=0` keeps every byte on the plain descriptor. Where the
//! host refuses `O_DIRECT` (some network file systems, FUSE hosts), cairn
//! says so at mount and goes on without it. `cairn stats`: `dev.direct_data`
//! (1 when on), `dev.direct_read_bytes`, `dev.direct_write_bytes`,
//! `dev.bounced_bytes`, `dev.buffered_data_bytes`.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The bounce buffer's size: reads and writes that need it go in pieces of
/// at most this much.
const BOUNCE: usize = 256 << 10;

/// Bytes per page: the bounce buffer's alignment, and the alignment assumed
/// where `statx` does not tell.
const PAGE: usize = 4096;

#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Page([u8; PAGE]);

thread_local! {
    static BOUNCE_BUF: RefCell<Vec<Page>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's page-aligned bounce buffer of `BOUNCE` bytes.
fn with_bounce<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    BOUNCE_BUF.with(|cell| {
        let mut pages = cell.borrow_mut();
        if pages.is_empty() {
            *pages = vec![Page([0; PAGE]); BOUNCE / PAGE];
        }
        #[allow(unsafe_code)]
        // SAFETY: `pages` holds BOUNCE / PAGE pages of initialised bytes,
        // contiguous with no padding (`Page` is a byte array as large as its
        // alignment), borrowed mutably for the call only.
        let bytes = unsafe { std::slice::from_raw_parts_mut(pages.as_mut_ptr().cast::<u8>(), BOUNCE) };
        f(bytes)
    })
}

#[derive(Default)]
struct Counters {
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    bounced_bytes: AtomicU64,
    buffered_bytes: AtomicU64,
}

/// The image's `O_DIRECT` descriptor and its alignment.
pub struct DirectData {
    file: File,
    /// Offsets and lengths: multiples of this (a power of two).
    unit: u64,
    /// Memory: aligned to this (a power of two, at most a page).
    mem: usize,
    /// The read-only description `file`'s number named before
    /// [`DirectData::make_writable`].
    held: Mutex<Option<OwnedFd>>,
    counters: Counters,
}

/// `statx`'s direct-I/O alignment of `file`: `Some((offset, memory))`,
/// `Some((0, _))` where the file system says it has no direct I/O, `None`
/// where it does not tell.
fn dio_alignment(file: &File) -> Option<(u32, u32)> {
    // SAFETY: `statx` is plain old data, valid zeroed.
    #[allow(unsafe_code)]
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, an empty path with AT_EMPTY_PATH, and a
    // live, writable statx buffer.
    #[allow(unsafe_code)]
    let r = unsafe { libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx) };
    (r == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0).then_some((stx.stx_dio_offset_align, stx.stx_dio_mem_align))
}

impl DirectData {
    /// Opens `file`'s image again with `O_DIRECT` (through `/proc/self/fd`,
    /// so the same file): `Err` with the reason where the host refuses it.
    pub fn open(file: &File, writable: bool) -> io::Result<DirectData> {
        let direct = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_DIRECT)
            .open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        let (unit, mem) = match dio_alignment(&direct) {
            Some((0, _)) => {
                return Err(io::Error::new(io::ErrorKind::Unsupported, "the host file system has no direct I/O for it"))
            }
            Some((u, m)) => (u64::from(u), (m as usize).clamp(1, PAGE)),
            None => (PAGE as u64, PAGE),
        };
        if !unit.is_power_of_two() || !mem.is_power_of_two() || unit > 64 << 10 {
            return Err(io::Error::new(io::ErrorKind::Unsupported, format!("direct I/O alignment {unit}/{mem}")));
        }
        Ok(DirectData { file: direct, unit, mem, held: Mutex::new(None), counters: Counters::default() })
    }

    /// Reopens the `O_DIRECT` description for writing under the same
    /// descriptor number (see `FileDevice::make_writable`).
    pub fn make_writable(&self) -> io::Result<()> {
        let mut held = self.held.lock();
        if held.is_some() {
            return Ok(());
        }
        let rw = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(format!("/proc/self/fd/{}", self.file.as_raw_fd()))?;
        *held = Some(replace_description(&self.file, rw)?);
        Ok(())
    }

    fn aligned(&self, ptr: *const u8, off: u64, len: usize) -> bool {
        off.is_multiple_of(self.unit)
            && (len as u64).is_multiple_of(self.unit)
            && (ptr as usize).is_multiple_of(self.mem)
    }

    /// Reads `buf.len()` bytes at `off`.
    pub fn read(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let mut done = 0;
        if off.is_multiple_of(self.unit) && (buf.as_ptr() as usize).is_multiple_of(self.mem) {
            // The whole units straight into `buf`.
            let n = (buf.len() as u64 / self.unit * self.unit) as usize;
            if n > 0 {
                read_full(&self.file, &mut buf[..n], off, n)?;
                self.counters.read_bytes.fetch_add(n as u64, Relaxed);
                done = n;
            }
        }
        while done < buf.len() {
            let n = self.read_bounced(&mut buf[done..], off + done as u64)?;
            done += n;
        }
        Ok(())
    }

    /// Reads the first bytes of `buf` from `off` through the bounce buffer:
    /// the units around them, read whole. Returns how many it read (at most
    /// what the bounce buffer holds).
    fn read_bounced(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let start = off / self.unit * self.unit;
        let lead = (off - start) as usize;
        // Room for rounding up to a unit (at most 64 KiB, see `open`).
        let n = buf.len().min(BOUNCE - lead - self.unit as usize);
        let span = (lead + n).next_multiple_of(self.unit as usize);
        with_bounce(|b| {
            // A span past the end of the image comes back short; the bytes
            // wanted must all be there.
            read_full(&self.file, &mut b[..span], start, lead + n)?;
            buf[..n].copy_from_slice(&b[lead..lead + n]);
            Ok::<_, io::Error>(())
        })?;
        self.counters.read_bytes.fetch_add(span as u64, Relaxed);
        self.counters.bounced_bytes.fetch_add(n as u64, Relaxed);
        Ok(n)
    }

    /// Writes `buf` at `off`; partial units go through `buffered`.
    pub fn write(&self, buf: &[u8], off: u64, buffered: &File) -> io::Result<()> {
        let unit = self.unit;
        let end = off + buf.len() as u64;
        let first = off.next_multiple_of(unit).min(end);
        let last = (end / unit * unit).max(first);
        if first > off {
            self.write_buffered(&buf[..(first - off) as usize], off, buffered)?;
        }
        let mid = &buf[(first - off) as usize..(last - off) as usize];
        if !mid.is_empty() {
            if self.aligned(mid.as_ptr(), first, mid.len()) {
                self.file.write_all_at(mid, first)?;
            } else {
                for (i, piece) in mid.chunks(BOUNCE).enumerate() {
                    with_bounce(|b| {
                        b[..piece.len()].copy_from_slice(piece);
                        self.file.write_all_at(&b[..piece.len()], first + (i * BOUNCE) as u64)
                    })?;
                }
                self.counters.bounced_bytes.fetch_add(mid.len() as u64, Relaxed);
            }
            self.counters.write_bytes.fetch_add(mid.len() as u64, Relaxed);
        }
        if end > last {
            self.write_buffered(&buf[(last - off) as usize..], last, buffered)?;
        }
        Ok(())
    }

    fn write_buffered(&self, buf: &[u8], off: u64, buffered: &File) -> io::Result<()> {
        buffered.write_all_at(buf, off)?;
        self.counters.buffered_bytes.fetch_add(buf.len() as u64, Relaxed);
        Ok(())
    }

    /// Publishes the `dev.*` counters.
    pub fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let c = &self.counters;
        put("dev.direct_data", 1);
        put("dev.direct_read_bytes", c.read_bytes.load(Relaxed));
        put("dev.direct_write_bytes", c.write_bytes.load(Relaxed));
        put("dev.bounced_bytes", c.bounced_bytes.load(Relaxed));
        put("dev.buffered_data_bytes", c.buffered_bytes.load(Relaxed));
    }
}

/// Puts `new`'s open file description under `file`'s descriptor number
/// with `dup2`, which reads and writes in flight on other threads see as
/// one atomic switch; returns the old description (which may hold the
/// image's `flock`), kept open.
pub(crate) fn replace_description(file: &File, new: File) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsFd, IntoRawFd};
    let fd = file.as_raw_fd();
    let keep = file.as_fd().try_clone_to_owned()?;
    let new_fd = new.into_raw_fd();
    // SAFETY: both descriptors are open and ours; dup2 replaces what `fd`
    // names (kept alive by `keep`), and the spare one is closed.
    #[allow(unsafe_code)]
    let r = unsafe {
        let r = libc::dup2(new_fd, fd);
        libc::close(new_fd);
        r
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(keep)
}

/// Reads into `buf` at `off` until at least `need` bytes are in (a direct
/// read may stop short at the end of the file); end of file before that is
/// an error.
fn read_full(file: &File, buf: &mut [u8], off: u64, need: usize) -> io::Result<()> {
    let mut got = 0;
    while got < need {
        match file.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the image")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dev::{BlockDevice, FileDevice};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// `len` bytes of `buf` starting `skew` bytes past a page boundary.
    fn skewed(buf: &mut Vec<u8>, len: usize, skew: usize) -> &mut [u8] {
        buf.resize(len + skew + 8192, 0);
        let at = buf.as_ptr().align_offset(4096) + skew;
        &mut buf[at..at + len]
    }

    #[test]
    fn direct_data_reads_back_what_any_mix_of_writes_left() {
        const SIZE: usize = 1 << 20;
        let tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.as_file().set_len(SIZE as u64).unwrap();
        let mut dev = FileDevice::open(tmp.path(), false).unwrap();
        if let Err(e) = dev.use_direct_data() {
            eprintln!("skipped: {} refuses O_DIRECT: {e}", tmp.path().display());
            return;
        }
        let unit = dev.direct_data().unwrap().unit as usize;
        let mut model = vec![0u8; SIZE];
        // Seeded, so a failure repeats.
        let mut rng = StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        let (mut wbuf, mut rbuf) = (Vec::new(), Vec::new());
        for round in 0..3000 {
            // Aligned or not, in offset, length and memory, with lengths
            // across the bounce buffer's size.
            let aligned = rng.gen_range(0..2) == 0;
            let mut off = rng.gen_range(0..SIZE as u64 - 1) as usize;
            let most = if rng.gen_range(0..8) == 0 { 600_000 } else { 20_000 };
            let mut len = 1 + rng.gen_range(0..most) as usize;
            if aligned {
                off = off / unit * unit;
                len = len.div_ceil(unit) * unit;
            }
            len = len.min(SIZE - off);
            let skew = if aligned { 0 } else { rng.gen_range(0..64) as usize };
            match rng.gen_range(0..3) {
                0 => {
                    let w = skewed(&mut wbuf, len, skew);
                    rng.fill(&mut w[..]);
                    dev.write_data(w, off as u64).unwrap();
                    model[off..off + len].copy_from_slice(w);
                }
                1 => {
                    // A metadata write through the plain descriptor.
                    let w = skewed(&mut wbuf, len.min(8192), skew);
                    rng.fill(&mut w[..]);
                    dev.write_at(w, off as u64).unwrap();
                    model[off..off + w.len()].copy_from_slice(w);
                }
                _ => {
                    let r = skewed(&mut rbuf, len, skew);
                    dev.read_data(r, off as u64).unwrap();
                    assert!(r == &model[off..off + len], "round {round}: read of {len} at {off} (skew {skew}) differs");
                }
            }
        }
        let mut all = vec![0u8; SIZE];
        dev.read_at(&mut all, 0).unwrap();
        assert!(all == model, "the plain descriptor reads something else");
        let d = dev.direct_data().unwrap();
        let c = &d.counters;
        use std::sync::atomic::Ordering::Relaxed;
        assert!(c.read_bytes.load(Relaxed) > 0 && c.write_bytes.load(Relaxed) > 0);
        assert!(c.bounced_bytes.load(Relaxed) > 0, "no read or write took the bounce buffer");
    }

    #[test]
    fn a_read_past_the_end_of_the_image_is_an_error() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.as_file().set_len(10_000).unwrap();
        let mut dev = FileDevice::open(tmp.path(), false).unwrap();
        if dev.use_direct_data().is_err() {
            return;
        }
        let mut buf = vec![0u8; 4096];
        assert!(dev.read_data(&mut buf[..100], 9_900).is_ok());
        assert_eq!(dev.read_data(&mut buf[..200], 9_900).unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(dev.read_data(&mut buf, 8192).unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
