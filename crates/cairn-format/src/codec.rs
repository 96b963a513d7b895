//! Little-endian field access on byte slices, bounds-checked.
//!
//! Readers return 0 for out-of-range offsets instead of panicking; callers
//! validate lengths first (every decoder checks its buffer size up front), so
//! an out-of-range read is a bug that shows up as a checksum or bounds error,
//! never as a crash.

/// Reads a `u16` at `off`.
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    b.get(off..off + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

/// Reads a `u32` at `off`.
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Reads a `u64` at `off`.
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).map_or(0, |s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_le_bytes(a)
    })
}

/// Reads an `i64` at `off`.
pub fn get_i64(b: &[u8], off: usize) -> i64 {
    get_u64(b, off) as i64
}

/// Writes a `u16` at `off` (ignored if out of range).
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    if let Some(s) = b.get_mut(off..off + 2) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes a `u32` at `off` (ignored if out of range).
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    if let Some(s) = b.get_mut(off..off + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes a `u64` at `off` (ignored if out of range).
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    if let Some(s) = b.get_mut(off..off + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes an `i64` at `off`.
pub fn put_i64(b: &mut [u8], off: usize, v: i64) {
    put_u64(b, off, v as u64);
}
