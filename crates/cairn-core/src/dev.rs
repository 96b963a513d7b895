//! Block devices: where the image's bytes live.
//!
//! The engine reads and writes the image only through [`BlockDevice`]. The
//! file implementation uses plain `pread`/`pwrite`/`fdatasync` on the image
//! file (or block device), so external tools (strace, blktrace on a loop
//! device) can see every I/O. [`MemDevice`] keeps an image in RAM for tests.

use crate::direct_data::{replace_description, DirectData};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Random-access storage with a durability barrier.
pub trait BlockDevice: Send + Sync {
    /// Reads exactly `buf.len()` bytes at byte offset `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Writes all of `buf` at byte offset `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Makes every completed write durable (fdatasync).
    fn flush(&self) -> io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Makes `len` bytes at `off` read as zeros, if the device can do it
    /// without writing them (a hole punched in an image file); false if
    /// not, and nothing is changed. mkfs uses it for the inode tables. (An
    /// encrypted device writes encrypted zeros: a hole would not decrypt
    /// to zeros.)
    fn zero_range(&self, _off: u64, _len: u64) -> io::Result<bool> {
        Ok(false)
    }
    /// Tells the device that `len` bytes at `off` hold nothing (FITRIM): a
    /// hole punched in an image file, BLKDISCARD on a block device; what
    /// they read afterwards is unspecified. False if the device cannot
    /// (nothing is changed).
    fn discard(&self, off: u64, len: u64) -> io::Result<bool> {
        self.zero_range(off, len)
    }
    /// Makes a device opened read-only writable (a read-only mount turned
    /// read-write); a device that is writable already says so.
    fn make_writable(&self) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "this device cannot be made writable"))
    }
    /// Whether writes can reach the device now: false for an image opened
    /// read-only (`cairn inspect`, a `-o ro` mount), which the engine then
    /// never tries to write, not even to record an error in the superblock.
    fn writable(&self) -> bool {
        true
    }
    /// Reads file data: as [`BlockDevice::read_at`], but a device may keep
    /// the bytes out of the host's page cache (see `direct_data`).
    fn read_data(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.read_at(buf, off)
    }
    /// Writes file data: as [`BlockDevice::write_at`] (see `read_data`).
    fn write_data(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.write_at(buf, off)
    }
    /// Publishes the device's counters (`dev.*`), if it has any.
    fn publish(&self, _put: &mut dyn FnMut(&str, u64)) {}
    /// Makes the device at least `bytes` long for a grow while mounted (an
    /// image file is lengthened, sparse); fails if it cannot be, changing
    /// nothing.
    fn grow_to(&self, bytes: u64) -> io::Result<()> {
        if self.size() >= bytes {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the device holds {} bytes, less than {bytes}", self.size()),
        ))
    }
}

/// An image file or block device.
pub struct FileDevice {
    file: File,
    /// Size in bytes (an image file grows with `grow_to`).
    size: std::sync::atomic::AtomicU64,
    /// A regular file (holes can be punched), not a block device.
    regular: bool,
    /// Opened for writing (or made writable since).
    writable: std::sync::atomic::AtomicBool,
    /// The read-only open file description `file`'s descriptor named before
    /// [`BlockDevice::make_writable`]: it holds the image's lock.
    held: Mutex<Option<std::os::fd::OwnedFd>>,
    /// File data's `O_DIRECT` descriptor, once [`FileDevice::use_direct_data`]
    /// succeeded.
    direct: Option<DirectData>,
}

impl FileDevice {
    /// Opens `path` for reading and writing (or read-only).
    pub fn open(path: &Path, read_only: bool) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        let meta = file.metadata()?;
        let size = if meta.file_type().is_file() {
            meta.len()
        } else {
            // Block device: seek to the end to learn its size.
            use std::io::Seek;
            let mut f = &file;
            f.seek(io::SeekFrom::End(0))?
        };
        Ok(FileDevice {
            file,
            size: size.into(),
            regular: meta.file_type().is_file(),
            writable: (!read_only).into(),
            held: Mutex::new(None),
            direct: None,
        })
    }

    /// Takes an exclusive advisory lock so that a second mount (or a
    /// concurrent fsck --repair) of the same image is refused.
    pub fn lock_exclusive(&self) -> io::Result<()> {
        // SAFETY: flock on a valid, owned descriptor has no memory effects.
        #[allow(unsafe_code)]
        let r = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Makes an image file `len` bytes long (sparse when it grows). Take
    /// the lock first ([`FileDevice::lock_exclusive`]): a mounted image must
    /// not change size under its daemon.
    pub fn set_len(&mut self, len: u64) -> io::Result<()> {
        if !self.regular {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a block device has its own size"));
        }
        self.file.set_len(len)?;
        *self.size.get_mut() = len;
        Ok(())
    }

    /// Reads and writes file data with `O_DIRECT` from now on (see
    /// `direct_data`); `Err` with the host's reason, and nothing changed,
    /// where it cannot be done.
    pub fn use_direct_data(&mut self) -> io::Result<()> {
        let writable = self.writable.load(std::sync::atomic::Ordering::Acquire);
        self.direct = Some(DirectData::open(&self.file, writable)?);
        Ok(())
    }

    /// The `O_DIRECT` side, when file data uses it.
    pub fn direct_data(&self) -> Option<&DirectData> {
        self.direct.as_ref()
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.file.write_all_at(buf, off)
    }
    fn read_data(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        match &self.direct {
            Some(d) => d.read(buf, off),
            None => self.read_at(buf, off),
        }
    }
    fn write_data(&self, buf: &[u8], off: u64) -> io::Result<()> {
        match &self.direct {
            Some(d) => d.write(buf, off, &self.file),
            None => self.write_at(buf, off),
        }
    }
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        match &self.direct {
            Some(d) => d.publish(put),
            None => put("dev.direct_data", 0),
        }
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn size(&self) -> u64 {
        self.size.load(std::sync::atomic::Ordering::Acquire)
    }
    fn writable(&self) -> bool {
        self.writable.load(std::sync::atomic::Ordering::Acquire)
    }
    fn grow_to(&self, bytes: u64) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        if !self.regular {
            // A block device grown underneath (a loop device's capacity set
            // again): learn its size anew.
            use std::io::Seek;
            let mut f = &self.file;
            let now = f.seek(io::SeekFrom::End(0))?;
            self.size.fetch_max(now, Ordering::AcqRel);
        } else if self.size() < bytes {
            self.file.set_len(bytes)?;
            self.size.fetch_max(bytes, Ordering::AcqRel);
        }
        if self.size() < bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the device holds {} bytes, less than {bytes}", self.size()),
            ));
        }
        Ok(())
    }
    /// Reopens the image for writing (through `/proc/self/fd`, so the same
    /// file even if its path changed) and puts the new open file description
    /// under the same descriptor number with `dup2`, which reads and writes
    /// in flight on other threads see as one atomic switch. The old
    /// description stays open: the image's `flock` belongs to it.
    fn make_writable(&self) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        let mut held = self.held.lock();
        if self.writable.load(Ordering::Acquire) {
            return Ok(());
        }
        let fd = self.file.as_raw_fd();
        let rw = OpenOptions::new().read(true).write(true).open(format!("/proc/self/fd/{fd}"))?;
        if let Some(d) = &self.direct {
            d.make_writable()?;
        }
        *held = Some(replace_description(&self.file, rw)?);
        self.writable.store(true, Ordering::Release);
        Ok(())
    }
    fn discard(&self, off: u64, len: u64) -> io::Result<bool> {
        if self.regular || len == 0 {
            return self.zero_range(off, len);
        }
        let range: [u64; 2] = [off, len];
        // BLKDISCARD = _IO(0x12, 119).
        const BLKDISCARD: libc::c_ulong = 0x1277;
        // SAFETY: the ioctl reads two u64s from a live array; no other memory effects.
        #[allow(unsafe_code)]
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), BLKDISCARD, range.as_ptr()) };
        if r == 0 {
            return Ok(true);
        }
        match io::Error::last_os_error() {
            e if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL)) => Ok(false),
            e => Err(e),
        }
    }
    fn zero_range(&self, off: u64, len: u64) -> io::Result<bool> {
        if !self.regular || len == 0 {
            return Ok(len == 0);
        }
        let (Ok(o), Ok(l)) = (i64::try_from(off), i64::try_from(len)) else { return Ok(false) };
        // SAFETY: fallocate on a valid, owned descriptor has no memory effects.
        #[allow(unsafe_code)]
        let r = unsafe {
            libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, o, l)
        };
        if r == 0 {
            return Ok(true);
        }
        match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(false),
            e => Err(e),
        }
    }
}

/// An image in memory (tests, benchmarks, the crash harness).
pub struct MemDevice {
    data: Mutex<Vec<u8>>,
    flushes: std::sync::atomic::AtomicU64,
}

impl MemDevice {
    /// A zero-filled device of `size` bytes.
    pub fn new(size: u64) -> MemDevice {
        MemDevice { data: Mutex::new(vec![0; size as usize]), flushes: Default::default() }
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.lock().clone()
    }

    /// A device holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice { data: Mutex::new(bytes), flushes: Default::default() }
    }

    /// Number of flushes so far.
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn range_check(len: usize, off: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let s = usize::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EIO))?;
    match s.checked_add(n) {
        Some(e) if e <= len => Ok(s..e),
        _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "access past the end of the device")),
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let d = self.data.lock();
        let r = range_check(d.len(), off, buf.len())?;
        buf.copy_from_slice(&d[r]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut d = self.data.lock();
        let r = range_check(d.len(), off, buf.len())?;
        d[r].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.data.lock().len() as u64
    }
    fn make_writable(&self) -> io::Result<()> {
        Ok(())
    }
    fn grow_to(&self, bytes: u64) -> io::Result<()> {
        let mut d = self.data.lock();
        let n = usize::try_from(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        if d.len() < n {
            d.resize(n, 0);
        }
        Ok(())
    }
    fn zero_range(&self, off: u64, len: u64) -> io::Result<bool> {
        let mut d = self.data.lock();
        let n = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EIO))?;
        let r = range_check(d.len(), off, n)?;
        d[r].fill(0);
        Ok(true)
    }
}

/// Reads and decodes the superblock of the image on `dev` (a device too
/// short to hold one is not a cairn image). Mount, tune, resize and the
/// CLI's readers of an unmounted image all start here.
pub fn read_superblock(dev: &dyn BlockDevice) -> crate::error::Result<cairn_format::superblock::Superblock> {
    use cairn_format::FormatError;
    let mut head = vec![0u8; cairn_format::superblock::SB_SIZE];
    dev.read_at(&mut head, 0).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            crate::error::FsError::Corrupt(FormatError::BadMagic { what: "superblock", at: 0 })
        } else {
            e.into()
        }
    })?;
    Ok(cairn_format::superblock::Superblock::decode(&head, dev.size())?)
}
