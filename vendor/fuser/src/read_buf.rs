//! The buffer a `/dev/fuse` server thread reads each request into.
//!
//! cairn patch: the request is read so that a WRITE's data starts on a page
//! boundary. A WRITE arrives as `fuse_in_header` (40 bytes), `fuse_write_in`
//! (40 bytes), then the data; the read starts [`WRITE_HEADERS`] bytes before
//! a page boundary, so the data lands on it. cairn writes file data to its
//! image with `O_DIRECT`, which wants aligned memory: before this, every
//! byte written through `/dev/fuse` was first copied into a bounce buffer
//! (`dev.bounced_bytes` in `cairn stats`). The io_uring transport gets the
//! same alignment from its ring entries (see `uring`). Every other request
//! is read at the same place; the headers stay 8-aligned, which is all
//! fuser's parser asks.
//!
//! The buffer is a `Vec` of zeros (calloc'd: pages that no request reaches
//! are never touched), one page longer than the largest request.

use std::mem::size_of;

use crate::ll::fuse_abi as abi;
use crate::session::MAX_WRITE_SIZE;

/// Size of the buffer for reading a request from the kernel. Since the kernel may send
/// up to `MAX_WRITE_SIZE` bytes in a write request, we use that value plus some extra space.
const BUFFER_SIZE: usize = MAX_WRITE_SIZE + 4096;

/// Bytes per page (the alignment a WRITE's data is given).
const PAGE: usize = 4096;

/// A WRITE's headers: what comes before its data.
pub(crate) const WRITE_HEADERS: usize =
    size_of::<abi::fuse_in_header>() + size_of::<abi::fuse_write_in>();

/// A buffer for one request at a time (see the module essay).
#[derive(Debug)]
pub(crate) struct FuseReadBuf {
    buffer: Vec<u8>,
}

impl FuseReadBuf {
    /// Creates a new `FuseReadBuf` with the default buffer size.
    pub(crate) fn new() -> Self {
        Self {
            buffer: vec![0; BUFFER_SIZE + PAGE],
        }
    }

    /// Where to read a request: `WRITE_HEADERS` bytes before a page boundary
    /// of the buffer (so a WRITE's data starts on it), at least `BUFFER_SIZE`
    /// bytes long.
    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        let addr = self.buffer.as_ptr() as usize;
        let off = (2 * PAGE - WRITE_HEADERS - addr % PAGE) % PAGE;
        &mut self.buffer[off..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writes_data_starts_on_a_page_and_the_header_is_aligned() {
        assert_eq!(WRITE_HEADERS, 80);
        let mut b = FuseReadBuf::new();
        let s = b.as_mut();
        assert!(s.len() >= BUFFER_SIZE);
        let at = s.as_ptr() as usize;
        assert_eq!((at + WRITE_HEADERS) % PAGE, 0);
        assert_eq!(at % std::mem::align_of::<abi::fuse_in_header>(), 0);
    }
}
