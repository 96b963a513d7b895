//! Extents: a run of logically and physically contiguous blocks.
//!
//! ```text
//! off size field
//!  0   8  lblk (first logical block)   -- the B+tree key when in a tree
//!  8   8  pblk (first physical block)
//! 16   4  len (blocks, >= 1)
//! 20   4  flags (EXTENT_UNWRITTEN: allocated by fallocate, reads as zeros)
//! ```
//! In an extent B+tree the value is the last 16 bytes (pblk, len, flags).

use crate::codec::*;

/// Bytes of an extent record (inline form).
pub const EXTENT_DISK_SIZE: usize = 24;
/// Bytes of an extent value in a B+tree leaf (key is `lblk`).
pub const EXTENT_VALUE_SIZE: usize = 16;
/// Extent is allocated but not written: reads return zeros.
pub const EXTENT_UNWRITTEN: u32 = 1;
/// Longest extent, in blocks.
pub const MAX_EXTENT_LEN: u32 = 1 << 30;

const _: () = {
    // Tree value: pblk u64, len u32, flags u32; inline form: lblk u64 + value.
    assert!(EXTENT_VALUE_SIZE == 8 + 4 + 4 && EXTENT_DISK_SIZE == 8 + EXTENT_VALUE_SIZE);
    assert!(MAX_EXTENT_LEN as u64 <= u32::MAX as u64);
};

/// One extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extent {
    pub lblk: u64,
    pub pblk: u64,
    pub len: u32,
    pub unwritten: bool,
}

impl Extent {
    /// One past the last logical block.
    pub fn lend(&self) -> u64 {
        self.lblk + u64::from(self.len)
    }

    /// Encodes the 24-byte inline form.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.lblk);
        self.encode_value(&mut out[8..]);
    }

    /// Decodes the 24-byte inline form.
    pub fn decode(b: &[u8]) -> Extent {
        Self::decode_value(get_u64(b, 0), &b[8.min(b.len())..])
    }

    /// Encodes the 16-byte tree value.
    pub fn encode_value(&self, out: &mut [u8]) {
        put_u64(out, 0, self.pblk);
        put_u32(out, 8, self.len);
        put_u32(out, 12, if self.unwritten { EXTENT_UNWRITTEN } else { 0 });
    }

    /// The 16-byte tree value as a vector.
    pub fn value_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; EXTENT_VALUE_SIZE];
        self.encode_value(&mut v);
        v
    }

    /// Decodes a tree value for key `lblk`.
    pub fn decode_value(lblk: u64, b: &[u8]) -> Extent {
        Extent { lblk, pblk: get_u64(b, 0), len: get_u32(b, 8), unwritten: get_u32(b, 12) & EXTENT_UNWRITTEN != 0 }
    }
}
