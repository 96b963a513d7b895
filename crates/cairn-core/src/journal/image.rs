//! Block images, and a meter of the memory they hold.
//!
//! ## Purpose
//! An [`Image`] is one block's bytes behind an `Arc`: a cached buffer's
//! contents, and the same allocation shared, copy-on-write, with whatever a
//! push captures, a writer freezes or the AIL holds (see `buffer::Buf`).
//! Sharing hides what an image costs from any one holder. The AIL's image of
//! a hot directory leaf is, most of the time, the cached buffer's own bytes:
//! the leaf has not changed since the push that captured it, and the image
//! costs nothing beyond the buffer. Only the leaf's next change, or its
//! eviction from the cache, makes the AIL's image a block of its own.
//!
//! The [`ImageMeter`] counts the bytes of every live image as images are
//! allocated and freed (an atomic add each: an image is copied at most once
//! per buffer per checkpoint), and the buffer cache counts the bytes its
//! buffers hold. The difference is what the captures, frozen copies and the
//! AIL add to the cache's memory ([`ImageMeter::unshared`]), and what the
//! AIL's memory budget bounds (`journal::ail`). Before this meter the AIL
//! counted every image it listed at a block, shared or not, and sent hot
//! leaves home long before the log needed the room.
//!
//! ## Invariants
//! * `live` is the sum of the lengths of the live [`ImageBytes`]: each
//!   constructor and `clone` adds its length, `drop` subtracts it.
//! * `cached` is the bytes of the images the cached buffers hold: every
//!   buffer holds exactly one image of a block, from its insertion in the
//!   cache until its eviction, so the cache adds a block at each and
//!   subtracts one at the other.
//!
//! ## Locking
//! None: two relaxed atomics. A reading taken while images are being copied
//! or freed may be off by the few blocks in motion; the budget it is compared
//! against is a quarter of the cache.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A block's bytes, shared (see the module essay). The bytes are a boxed
/// slice of exactly one block behind the `Arc`, not `Arc<[u8]>`, whose
/// header in the same allocation would push every 4 KiB image into the
/// allocator's next size class (a fifth more memory per image).
pub type Image = Arc<ImageBytes>;

/// One captured buffer: home block, chunk map, whole image (what a log
/// record carries).
pub type Captured = (u64, u64, Image);

/// Bytes of live images, and of those the cached buffers hold.
#[derive(Default, Debug)]
pub struct ImageMeter {
    live: AtomicU64,
    cached: AtomicU64,
}

impl ImageMeter {
    /// Bytes of every live image.
    pub fn live(&self) -> u64 {
        self.live.load(Relaxed)
    }

    /// Bytes of the images that cached buffers hold.
    pub fn cached(&self) -> u64 {
        self.cached.load(Relaxed)
    }

    /// Bytes of live images that no cached buffer holds: captures not yet in
    /// the AIL, frozen copies, and AIL images whose buffer has changed since
    /// or left the cache.
    pub fn unshared(&self) -> u64 {
        self.live().saturating_sub(self.cached())
    }

    /// A buffer holding `bytes` of image entered the cache.
    pub(crate) fn cache_in(&self, bytes: usize) {
        self.cached.fetch_add(bytes as u64, Relaxed);
    }

    /// A buffer holding `bytes` of image left the cache.
    pub(crate) fn cache_out(&self, bytes: usize) {
        self.cached.fetch_sub(bytes as u64, Relaxed);
    }
}

/// The bytes of one image, counted by the meter they were made under.
pub struct ImageBytes {
    bytes: Box<[u8]>,
    meter: Arc<ImageMeter>,
}

impl ImageBytes {
    /// A new image of `bytes`, counted by `meter`.
    pub fn new(bytes: Box<[u8]>, meter: &Arc<ImageMeter>) -> Image {
        meter.live.fetch_add(bytes.len() as u64, Relaxed);
        Arc::new(ImageBytes { bytes, meter: meter.clone() })
    }
}

impl Clone for ImageBytes {
    /// A copy of the bytes (what `Arc::make_mut` makes of a shared image),
    /// counted by the same meter.
    fn clone(&self) -> ImageBytes {
        self.meter.live.fetch_add(self.bytes.len() as u64, Relaxed);
        ImageBytes { bytes: self.bytes.clone(), meter: self.meter.clone() }
    }
}

impl Drop for ImageBytes {
    fn drop(&mut self) {
        self.meter.live.fetch_sub(self.bytes.len() as u64, Relaxed);
    }
}

impl Deref for ImageBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl DerefMut for ImageBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

/// Copies `data` into a new [`Image`] under a meter of its own.
#[cfg(test)]
pub fn image_of(data: &[u8]) -> Image {
    ImageBytes::new(data.into(), &Arc::new(ImageMeter::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_counts_copies_and_frees_and_sees_what_the_cache_does_not_hold() {
        let meter = Arc::new(ImageMeter::default());
        let mut held = ImageBytes::new(vec![7u8; 4096].into(), &meter);
        meter.cache_in(4096);
        assert_eq!((meter.live(), meter.unshared()), (4096, 0));
        // A capture shares the bytes: nothing new.
        let captured = Image::clone(&held);
        assert_eq!(meter.unshared(), 0);
        // The buffer's next change copies them: the capture is now its own.
        Arc::make_mut(&mut held)[0] = 1;
        assert_eq!((meter.live(), meter.unshared()), (8192, 4096));
        assert_eq!((captured[0], held[0]), (7, 1));
        drop(captured);
        assert_eq!(meter.unshared(), 0);
        // Evicted while an AIL image still shares the bytes: those are now
        // the AIL's alone.
        let listed = Image::clone(&held);
        meter.cache_out(4096);
        drop(held);
        assert_eq!((meter.live(), meter.unshared()), (4096, 4096));
        drop(listed);
        assert_eq!(meter.live(), 0);
    }
}
