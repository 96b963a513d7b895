//! cairn patch: byte buffers that start on a page boundary.
//!
//! cairn reads and writes its image's data blocks with `O_DIRECT`, which
//! wants the memory it reads into or writes from aligned (to the device's
//! sector, at most a page). A ring entry's payload and the buffer a request
//! is reassembled in are such buffers, so a READ's reply and a WRITE's data
//! can go between the image and the ring with no bounce copy.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// Bytes per page, the alignment of a [`PageBuf`].
pub(crate) const PAGE: usize = 4096;

#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Page([u8; PAGE]);

/// A zeroed byte buffer of a fixed length whose first byte is page-aligned.
pub(crate) struct PageBuf {
    pages: Vec<Page>,
    len: usize,
}

impl PageBuf {
    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> PageBuf {
        PageBuf {
            pages: vec![Page([0; PAGE]); len.div_ceil(PAGE)],
            len,
        }
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `pages` holds `len.div_ceil(PAGE)` pages of initialised
        // bytes, contiguous (a `Vec`) with no padding (`Page` is a byte
        // array whose size is its alignment), so its first `len` bytes are
        // one valid `[u8]` borrowed for as long as `self`.
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), self.len) }
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed mutably for as long as `self` is.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_page_and_has_its_length() {
        for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
            let mut b = PageBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % PAGE, 0);
            assert!(b.iter().all(|&x| x == 0));
            if len > 0 {
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
        }
    }
}
