//! A block device seen by the independent checker (feature `fsck`).
//!
//! ## Purpose
//! `cairn-fsck` reads an image through its own [`ImageSource`] trait and
//! never depends on the engine (docs/design.md, "Crates"), so it cannot name
//! a [`BlockDevice`]. Whoever holds one and wants it checked (`cairn fsck`
//! on an encrypted image, through the decrypting device; the engine's and
//! the checker's tests, on in-memory and crash-state devices) wraps it in
//! [`DeviceSource`]: this is the one place the two traits meet.
//!
//! ## Layout
//! `DeviceSource(d)` holds anything that dereferences to a device: an
//! `Arc<dyn BlockDevice>`, a `&D`, a `Box<D>`. Each call of the checker is
//! the device's call of the same name (`sync` is the device's `flush`).
//!
//! ## Invariants
//! The source is as writable as the device says ([`BlockDevice::writable`]);
//! the checker writes only when asked to repair, and refuses to repair a
//! source that is not writable. Nothing is cached here: every read and write
//! goes to the device, so a device's own layers (decryption, a crash-state
//! overlay) apply to every byte the checker sees.
//!
//! ## Locking and durability
//! None of its own: the device's. The caller keeps the image from being
//! mounted meanwhile (`FileDevice::lock_exclusive`, as `cairn fsck` does).

use crate::dev::BlockDevice;
use cairn_fsck::ImageSource;
use std::io;
use std::ops::Deref;

/// The device `0`, read (and for a repair, written) by the checker.
pub struct DeviceSource<D>(pub D);

impl<D> ImageSource for DeviceSource<D>
where
    D: Deref,
    D::Target: BlockDevice,
{
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.0.read_at(buf, off)
    }
    fn writable(&self) -> bool {
        self.0.writable()
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.0.write_at(buf, off)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use std::sync::Arc;

    #[test]
    fn every_call_reaches_the_device() {
        let dev = Arc::new(MemDevice::new(8192));
        let shared: Arc<dyn BlockDevice> = dev.clone();
        let source = DeviceSource(shared);
        assert_eq!(source.size(), 8192);
        assert!(source.writable());
        source.write_at(b"cairn", 4096).unwrap();
        source.sync().unwrap();
        let mut back = [0u8; 5];
        dev.read_at(&mut back, 4096).unwrap();
        assert_eq!(&back, b"cairn", "a write through the source lands on the device");
        let mut seen = [0u8; 5];
        DeviceSource(&*dev).read_at(&mut seen, 4096).unwrap();
        assert_eq!(&seen, b"cairn", "a borrowed device reads the same bytes");
    }

    #[test]
    fn a_read_only_device_is_a_read_only_source() {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(8192).unwrap();
        let dev = crate::dev::FileDevice::open(f.path(), true).unwrap();
        assert!(!DeviceSource(&dev).writable(), "the checker must not repair it");
    }
}
