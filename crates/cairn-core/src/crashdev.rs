//! Devices for crash testing: record every write and flush of a workload,
//! then rebuild the images a power cut could leave behind.
//!
//! [`RecordingDevice`] wraps an in-memory image and logs each `write_at` and
//! `flush`. [`CrashPlan::image`] rebuilds a crash state from that log: every
//! write before the chosen flush, plus any chosen subset of the writes issued
//! after it (a power cut may persist writes in flight in any order), with
//! optionally one of them torn (only its first sectors reach the disk) — the
//! CrashMonkey/ALICE model. [`OverlayDevice`] then mounts such a state
//! without copying the whole image.

use crate::dev::BlockDevice;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

/// One recorded operation.
#[derive(Debug, Clone)]
pub enum Op {
    /// Bytes written at an offset.
    Write(u64, Arc<[u8]>),
    /// A durability barrier.
    Flush,
}

const PAGE: u64 = 4096;

/// Copy-on-write pages over a shared base image.
pub struct OverlayDevice {
    base: Arc<Vec<u8>>,
    pages: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl OverlayDevice {
    /// An overlay over `base`.
    pub fn new(base: Arc<Vec<u8>>) -> OverlayDevice {
        OverlayDevice { base, pages: Mutex::new(HashMap::new()) }
    }

    fn check(&self, off: u64, len: usize) -> io::Result<()> {
        if off.checked_add(len as u64).is_none_or(|e| e > self.base.len() as u64) {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "access past the end of the device"));
        }
        Ok(())
    }

    /// Materialises the whole image (for fsck and inspection).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = (*self.base).clone();
        for (p, d) in self.pages.lock().iter() {
            let s = (p * PAGE) as usize;
            let e = (s + PAGE as usize).min(v.len());
            v[s..e].copy_from_slice(&d[..e - s]);
        }
        v
    }
}

impl BlockDevice for OverlayDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.check(off, buf.len())?;
        let pages = self.pages.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let (p, inner) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - inner).min(buf.len() - done);
            match pages.get(&p) {
                Some(d) => buf[done..done + n].copy_from_slice(&d[inner..inner + n]),
                None => buf[done..done + n].copy_from_slice(&self.base[pos as usize..pos as usize + n]),
            }
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.check(off, buf.len())?;
        let mut pages = self.pages.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let (p, inner) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - inner).min(buf.len() - done);
            let page = pages.entry(p).or_insert_with(|| {
                let s = (p * PAGE) as usize;
                let e = (s + PAGE as usize).min(self.base.len());
                let mut v = vec![0u8; PAGE as usize];
                v[..e - s].copy_from_slice(&self.base[s..e]);
                v.into_boxed_slice()
            });
            page[inner..inner + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.len() as u64
    }
}

/// Records the writes and flushes a workload sends to an image.
pub struct RecordingDevice {
    inner: OverlayDevice,
    base: Arc<Vec<u8>>,
    log: Mutex<Vec<Op>>,
}

impl RecordingDevice {
    /// Starts recording on top of the image `base`.
    pub fn new(base: Vec<u8>) -> RecordingDevice {
        let base = Arc::new(base);
        RecordingDevice { inner: OverlayDevice::new(base.clone()), base, log: Mutex::new(Vec::new()) }
    }

    /// The recorded operations so far.
    pub fn ops(&self) -> Vec<Op> {
        self.log.lock().clone()
    }

    /// A plan to rebuild crash states from what was recorded.
    pub fn plan(&self) -> CrashPlan {
        CrashPlan { base: self.base.clone(), ops: self.ops() }
    }
}

impl BlockDevice for RecordingDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.inner.write_at(buf, off)?;
        self.log.lock().push(Op::Write(off, buf.into()));
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.log.lock().push(Op::Flush);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// Rebuilds crash states from a recording.
pub struct CrashPlan {
    base: Arc<Vec<u8>>,
    /// The recorded operations.
    pub ops: Vec<Op>,
}

impl CrashPlan {
    /// Indices of the flushes in `ops`.
    pub fn flushes(&self) -> Vec<usize> {
        self.ops.iter().enumerate().filter(|(_, o)| matches!(o, Op::Flush)).map(|(i, _)| i).collect()
    }

    /// The crash state: every operation before `upto` applied, plus those
    /// writes at indices in `extra` (all at or after `upto`, before the next
    /// flush); if `torn` is set, the write at that index persists only its
    /// first `torn.1` bytes.
    pub fn image(&self, upto: usize, extra: &[usize], torn: Option<(usize, usize)>) -> OverlayDevice {
        let dev = OverlayDevice::new(self.base.clone());
        let apply = |i: usize| {
            if let Op::Write(off, data) = &self.ops[i] {
                let n = match torn {
                    Some((t, keep)) if t == i => keep.min(data.len()),
                    _ => data.len(),
                };
                let _ = dev.write_at(&data[..n], *off);
            }
        };
        for i in 0..upto.min(self.ops.len()) {
            apply(i);
        }
        for &i in extra {
            if i < self.ops.len() {
                apply(i);
            }
        }
        dev
    }
}
