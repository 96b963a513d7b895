//! Devices for testing under pressure: a fault-injecting wrapper (failed
//! reads, writes or flushes; a slow flush) and a sparse RAM device for
//! images far larger than the data they hold (a 10 GiB file of a million
//! extents, in memory).
//!
//! They are part of the public API so that the integration tests, the
//! benchmarks and embedders can run the real engine over them: nothing here
//! is a mock of the engine, only of the disk's misbehaviour.

use crate::dev::BlockDevice;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Wraps a device and makes it misbehave on request.
pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    /// Byte ranges whose reads fail with EIO.
    fail_reads: Mutex<Vec<Range<u64>>>,
    /// Byte ranges whose writes fail with EIO.
    fail_writes: Mutex<Vec<Range<u64>>>,
    fail_flushes: AtomicBool,
    flush_delay_us: AtomicU64,
    /// Writes of exactly this many bytes wait until released (0: none).
    hold_len: Mutex<usize>,
    released: parking_lot::Condvar,
    /// Writes waiting now.
    held: AtomicU64,
    /// Failures injected so far.
    pub injected: AtomicU64,
}

fn overlaps(ranges: &[Range<u64>], off: u64, len: usize) -> bool {
    let end = off + len as u64;
    ranges.iter().any(|r| r.start < end && off < r.end)
}

impl FaultDevice {
    /// A well-behaved wrapper of `inner`.
    pub fn new(inner: Arc<dyn BlockDevice>) -> FaultDevice {
        FaultDevice {
            inner,
            fail_reads: Mutex::new(Vec::new()),
            fail_writes: Mutex::new(Vec::new()),
            fail_flushes: AtomicBool::new(false),
            flush_delay_us: AtomicU64::new(0),
            hold_len: Mutex::new(0),
            released: parking_lot::Condvar::new(),
            held: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Writes of exactly `len` bytes wait, from now on, until
    /// [`FaultDevice::release_held_writes`] (a copy of file data caught in
    /// the middle: what else may happen meanwhile).
    pub fn hold_writes_of(&self, len: usize) {
        *self.hold_len.lock() = len;
    }

    /// Writes waiting now.
    pub fn held_writes(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// Lets the waiting writes go and holds no more.
    pub fn release_held_writes(&self) {
        *self.hold_len.lock() = 0;
        self.released.notify_all();
    }

    fn wait_if_held(&self, len: usize) {
        let mut hold = self.hold_len.lock();
        if *hold == 0 || *hold != len {
            return;
        }
        self.held.fetch_add(1, Ordering::AcqRel);
        while *hold == len {
            self.released.wait(&mut hold);
        }
        self.held.fetch_sub(1, Ordering::AcqRel);
    }

    /// Reads touching `bytes` fail from now on.
    pub fn fail_reads(&self, bytes: Range<u64>) {
        self.fail_reads.lock().push(bytes);
    }

    /// Writes touching `bytes` fail from now on.
    pub fn fail_writes(&self, bytes: Range<u64>) {
        self.fail_writes.lock().push(bytes);
    }

    /// Every flush fails (`true`) or works again (`false`).
    pub fn fail_flushes(&self, on: bool) {
        self.fail_flushes.store(on, Ordering::Release);
    }

    /// Each flush takes `d` (a slow disk: commits stay in flight longer).
    pub fn set_flush_delay(&self, d: Duration) {
        self.flush_delay_us.store(d.as_micros() as u64, Ordering::Release);
    }

    /// Back to well-behaved.
    pub fn heal(&self) {
        self.fail_reads.lock().clear();
        self.fail_writes.lock().clear();
        self.fail_flushes(false);
    }

    fn injected_error(&self, what: &str) -> io::Error {
        self.injected.fetch_add(1, Ordering::Relaxed);
        io::Error::other(format!("injected {what} error"))
    }
}

impl BlockDevice for FaultDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if overlaps(&self.fail_reads.lock(), off, buf.len()) {
            return Err(self.injected_error("read"));
        }
        self.inner.read_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if overlaps(&self.fail_writes.lock(), off, buf.len()) {
            return Err(self.injected_error("write"));
        }
        self.wait_if_held(buf.len());
        self.inner.write_at(buf, off)
    }

    fn flush(&self) -> io::Result<()> {
        let us = self.flush_delay_us.load(Ordering::Acquire);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
        if self.fail_flushes.load(Ordering::Acquire) {
            return Err(self.injected_error("flush"));
        }
        self.inner.flush()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}

const CHUNK: u64 = 64 * 1024;

/// A sparse device in memory: only the 64 KiB chunks ever written take
/// memory; the rest reads as zeros.
pub struct SparseDevice {
    size: u64,
    chunks: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl SparseDevice {
    /// An all-zero device of `size` bytes.
    pub fn new(size: u64) -> SparseDevice {
        SparseDevice { size, chunks: Mutex::new(HashMap::new()) }
    }

    /// Bytes of memory the written chunks take.
    pub fn resident_bytes(&self) -> u64 {
        self.chunks.lock().len() as u64 * CHUNK
    }

    fn check(&self, off: u64, len: usize) -> io::Result<()> {
        match off.checked_add(len as u64) {
            Some(e) if e <= self.size => Ok(()),
            _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "access past the end of the device")),
        }
    }
}

impl BlockDevice for SparseDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.check(off, buf.len())?;
        let chunks = self.chunks.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let (c, inner) = (pos / CHUNK, (pos % CHUNK) as usize);
            let n = (buf.len() - done).min(CHUNK as usize - inner);
            match chunks.get(&c) {
                Some(d) => buf[done..done + n].copy_from_slice(&d[inner..inner + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.check(off, buf.len())?;
        let mut chunks = self.chunks.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let (c, inner) = (pos / CHUNK, (pos % CHUNK) as usize);
            let n = (buf.len() - done).min(CHUNK as usize - inner);
            let d = chunks.entry(c).or_insert_with(|| vec![0u8; CHUNK as usize].into_boxed_slice());
            d[inner..inner + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }
}
