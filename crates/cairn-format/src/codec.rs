//! Little-endian field access on byte slices.
//!
//! Readers return 0 for out-of-range offsets instead of panicking; callers
//! validate lengths first (every decoder checks its buffer size up front), so
//! an out-of-range read is a bug that shows up as a checksum or bounds error,
//! never as a crash on a corrupt image.
//!
//! Writers are different: every encoder writes into a buffer it sized itself,
//! at offsets fixed by the format, so a write out of range can only be a bug
//! in the encoder (or a caller passing a short buffer). Writers panic then,
//! naming the offset and the buffer length, rather than silently dropping a
//! field and producing a structure that encodes fine but decodes wrong.

/// The `N` bytes at `off`, if they are inside `b`.
fn read<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
    let s = b.get(off..off.checked_add(N)?)?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Some(a)
}

/// Reads a `u16` at `off` (0 if out of range).
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    read(b, off).map_or(0, u16::from_le_bytes)
}

/// Reads a `u32` at `off` (0 if out of range).
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    read(b, off).map_or(0, u32::from_le_bytes)
}

/// Reads a `u64` at `off` (0 if out of range).
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    read(b, off).map_or(0, u64::from_le_bytes)
}

/// Reads an `i64` at `off` (0 if out of range).
pub fn get_i64(b: &[u8], off: usize) -> i64 {
    get_u64(b, off) as i64
}

/// The `N` bytes at `off`, or a panic naming the bad write.
#[track_caller]
fn field<const N: usize>(b: &mut [u8], off: usize) -> &mut [u8] {
    let len = b.len();
    match off.checked_add(N).and_then(|end| b.get_mut(off..end)) {
        Some(s) => s,
        None => panic!("encoder bug: {N}-byte field at offset {off} is outside a {len}-byte buffer"),
    }
}

/// Writes a `u16` at `off`.
///
/// # Panics
/// If `off + 2 > b.len()`: an encoder bug.
#[track_caller]
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    field::<2>(b, off).copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u32` at `off`.
///
/// # Panics
/// If `off + 4 > b.len()`: an encoder bug.
#[track_caller]
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    field::<4>(b, off).copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u64` at `off`.
///
/// # Panics
/// If `off + 8 > b.len()`: an encoder bug.
#[track_caller]
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    field::<8>(b, off).copy_from_slice(&v.to_le_bytes());
}

/// Writes an `i64` at `off`.
///
/// # Panics
/// If `off + 8 > b.len()`: an encoder bug.
#[track_caller]
pub fn put_i64(b: &mut [u8], off: usize, v: i64) {
    put_u64(b, off, v as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn little_endian_roundtrip() {
        let mut b = [0u8; 16];
        put_u16(&mut b, 0, 0x0102);
        put_u32(&mut b, 2, 0x0304_0506);
        put_u64(&mut b, 8, 0x0708_090a_0b0c_0d0e);
        assert_eq!(b, [2, 1, 6, 5, 4, 3, 0, 0, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 9, 8, 7]);
        assert_eq!((get_u16(&b, 0), get_u32(&b, 2), get_u64(&b, 8)), (0x0102, 0x0304_0506, 0x0708_090a_0b0c_0d0e));
        put_i64(&mut b, 8, -2);
        assert_eq!(get_i64(&b, 8), -2);
    }

    #[test]
    fn reads_out_of_range_are_zero() {
        let b = [0xffu8; 7];
        assert_eq!((get_u16(&b, 6), get_u32(&b, 4), get_u64(&b, 0), get_u64(&b, usize::MAX)), (0, 0, 0, 0));
    }

    #[test]
    #[should_panic(expected = "8-byte field at offset 4 is outside a 11-byte buffer")]
    fn write_out_of_range_panics() {
        put_u64(&mut [0u8; 11], 4, 1);
    }

    #[test]
    #[should_panic(expected = "encoder bug")]
    fn write_at_overflowing_offset_panics() {
        put_u16(&mut [0u8; 4], usize::MAX, 1);
    }
}
