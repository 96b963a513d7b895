//! Raw access to the image under check: positioned reads, the journal
//! overlay, and the few writes a repair makes.
//!
//! ## Purpose
//! Every other module sees the image only through [`Image`], so that three
//! rules hold everywhere without each pass having to remember them:
//!
//! * **Bounds.** Every read is checked against the image size before it
//!   reaches the source; a block number taken from a damaged structure can
//!   make a read fail with a clear error, never read past the end or allocate
//!   a buffer sized by disk data (callers pass block counts that the geometry
//!   bounded).
//! * **Replay overlay.** When the journal holds committed checkpoints that were
//!   never written home, fsck checks the image *as if replayed* (as e2fsck
//!   replays first). Without `--repair` nothing may be written, so the
//!   replayed block images live in an in-memory overlay that every read
//!   consults; with `--repair` the journal pass writes them home instead and
//!   the overlay stays empty.
//! * **Read-only unless repairing.** [`Image::write_block`] refuses to write
//!   unless the image was opened for repair.
//!
//! ## Sources
//! The bytes come from an [`ImageSource`]: an image file or block device
//! ([`ImageFile`], read with `pread`), or an image held in memory (`[u8]`,
//! `Vec<u8>`, or any type a caller implements the trait for, such as a test
//! harness's crash-state overlay). Memory sources are read-only: they can be
//! checked, not repaired.
//!
//! ## Mount detection
//! The engine holds an exclusive `flock` on the image while it is mounted
//! (`FileDevice::lock_exclusive`). [`ImageFile::open`] takes the same lock,
//! non-blocking, on its own descriptor: if that fails the image is in use and
//! fsck refuses to look at it (its contents change under our feet). The lock
//! is held until the [`ImageFile`] is dropped, so a mount cannot start during
//! a repair or the check that verifies it.
//!
//! ## What it concludes
//! Nothing about consistency: it only moves bytes and reports I/O failures.

use crate::error::FsckError;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Where the bytes of an image come from.
///
/// fsck checks every access against [`size`](ImageSource::size) before it
/// calls [`read_at`](ImageSource::read_at) or
/// [`write_at`](ImageSource::write_at), so implementations may assume the
/// range lies inside the image. Only a source that says it is
/// [`writable`](ImageSource::writable) can be repaired.
pub trait ImageSource {
    /// Size of the image in bytes.
    fn size(&self) -> u64;

    /// Fills `buf` from byte offset `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;

    /// True when [`write_at`](ImageSource::write_at) works (a repair needs it).
    fn writable(&self) -> bool {
        false
    }

    /// Writes `buf` at byte offset `off` (repair only).
    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(read_only())
    }

    /// Makes every write durable.
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

/// The error of a write to an image that is not open for writing.
pub(crate) fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "image opened read-only")
}

impl ImageSource for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let range = usize::try_from(off).ok().and_then(|s| Some(s..s.checked_add(buf.len())?));
        match range.and_then(|r| self.get(r)) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the image")),
        }
    }
}

impl ImageSource for Vec<u8> {
    fn size(&self) -> u64 {
        self.as_slice().size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.as_slice().read_at(buf, off)
    }
}

impl<T: ImageSource + ?Sized> ImageSource for &T {
    fn size(&self) -> u64 {
        (**self).size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        (**self).read_at(buf, off)
    }

    fn writable(&self) -> bool {
        (**self).writable()
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        (**self).write_at(buf, off)
    }

    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
}

/// An image file or block device, locked like a mount while it is open.
pub struct ImageFile {
    file: File,
    size: u64,
    writable: bool,
    /// A regular file (not a block device).
    regular: bool,
}

impl ImageFile {
    /// Opens `path` (read-write only when `writable`, i.e. to repair it) and
    /// takes the exclusive lock; fails with [`FsckError::Mounted`] when another
    /// process holds it.
    pub fn open(path: &Path, writable: bool) -> Result<ImageFile, FsckError> {
        let fail = |source| FsckError::Open { path: path.to_path_buf(), source };
        // Before opening: a FIFO would block the open, a directory opens
        // read-only and then fails every read with a bare errno.
        let kind = std::fs::metadata(path).map_err(fail)?.file_type();
        if let Some(what) = not_an_image(&kind) {
            return Err(FsckError::NotAnImage { path: path.to_path_buf(), what });
        }
        let file = OpenOptions::new().read(true).write(writable).open(path).map_err(fail)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(FsckError::Mounted(path.to_path_buf())),
            Err(std::fs::TryLockError::Error(e)) => {
                // Locks unsupported (some network file systems): go on unlocked.
                if e.kind() != io::ErrorKind::Unsupported {
                    return Err(fail(e));
                }
            }
        }
        let meta = file.metadata().map_err(fail)?;
        let regular = meta.file_type().is_file();
        let size = if regular {
            meta.len()
        } else {
            use std::io::Seek;
            let mut f = &file;
            f.seek(io::SeekFrom::End(0)).map_err(fail)?
        };
        Ok(ImageFile { file, size, writable, regular })
    }

    /// True for a block device (false for an image file).
    pub fn is_block_device(&self) -> bool {
        !self.regular
    }

    /// Extends an image file opened for repair to `len` bytes (the new
    /// bytes read as zeros, and stay sparse), as `truncate -s` would; a
    /// block device cannot grow.
    pub fn extend(&mut self, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(read_only());
        }
        if !self.regular {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "a block device cannot be extended"));
        }
        if len > self.size {
            self.file.set_len(len)?;
            self.file.sync_all()?;
            self.size = len;
        }
        Ok(())
    }
}

/// What a file of this type is, when it cannot hold an image.
fn not_an_image(t: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() {
        Some("a character device")
    } else {
        None
    }
}

impl ImageSource for ImageFile {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, off)
    }

    fn writable(&self) -> bool {
        self.writable
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.file.write_all_at(buf, off)
    }

    fn sync(&self) -> io::Result<()> {
        if self.writable {
            self.file.sync_all()?;
        }
        Ok(())
    }
}

/// The image under check, with the journal overlay.
pub struct Image<'a> {
    src: &'a dyn ImageSource,
    size: u64,
    block_size: u64,
    writable: bool,
    overlay: BTreeMap<u64, Vec<u8>>,
    /// Bytes read so far (for the summary).
    pub bytes_read: u64,
    /// Blocks written by repairs.
    pub blocks_written: u64,
}

impl<'a> Image<'a> {
    /// The image in `src`; `repair` allows writes (the source must be writable).
    pub fn new(src: &'a dyn ImageSource, repair: bool) -> Image<'a> {
        Image {
            src,
            size: src.size(),
            block_size: 4096,
            writable: repair,
            overlay: BTreeMap::new(),
            bytes_read: 0,
            blocks_written: 0,
        }
    }

    /// Size of the image in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// True when opened for repair.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Sets the block size once the superblock is known.
    pub fn set_block_size(&mut self, bs: u32) {
        self.block_size = u64::from(bs);
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> usize {
        self.block_size as usize
    }

    /// Reads `buf.len()` bytes at byte offset `off` (no overlay).
    pub fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let end = off.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.size) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read of {} bytes at offset {off} past the end of the image ({} bytes)", buf.len(), self.size),
            ));
        }
        self.src.read_at(buf, off)?;
        self.bytes_read += buf.len() as u64;
        Ok(())
    }

    /// Reads `n` whole blocks from `start`, with replayed journal images applied.
    pub fn read_blocks(&mut self, start: u64, n: u64) -> io::Result<Vec<u8>> {
        let bs = self.block_size;
        let len = n.checked_mul(bs).filter(|l| *l <= 1 << 30).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("refusing to read {n} blocks at once"))
        })?;
        let off = start
            .checked_mul(bs)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("block {start} out of range")))?;
        let mut buf = vec![0u8; len as usize];
        self.read_at(&mut buf, off)?;
        if !self.overlay.is_empty() {
            let end = start.saturating_add(n);
            for (b, img) in self.overlay.range(start..end) {
                let o = ((b - start) * bs) as usize;
                buf[o..o + bs as usize].copy_from_slice(img);
            }
        }
        Ok(buf)
    }

    /// Reads one block, with replayed journal images applied.
    pub fn read_block(&mut self, blk: u64) -> io::Result<Vec<u8>> {
        self.read_blocks(blk, 1)
    }

    /// Records a replayed block image (check without repair).
    pub fn overlay_block(&mut self, blk: u64, data: Vec<u8>) {
        self.overlay.insert(blk, data);
    }

    /// Writes one whole block (repair only).
    pub fn write_block(&mut self, blk: u64, data: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(read_only());
        }
        let bs = self.block_size;
        if data.len() as u64 != bs || blk.checked_add(1).and_then(|e| e.checked_mul(bs)).is_none_or(|e| e > self.size) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad write of block {blk}")));
        }
        self.src.write_at(data, blk * bs)?;
        self.overlay.remove(&blk);
        self.blocks_written += 1;
        Ok(())
    }

    /// Makes every write durable (fsync).
    pub fn sync(&mut self) -> io::Result<()> {
        if self.writable {
            self.src.sync()?;
        }
        Ok(())
    }
}
