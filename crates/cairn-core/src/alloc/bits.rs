//! Bit-array helpers shared by the allocator's maps.
//!
//! In-memory maps are `u64` words (bit `i` = word `i / 64`, bit `i % 64`);
//! on-disk bitmaps are bytes (bit `i` = byte `i / 8`, bit `i % 8`), which is
//! the same bit order once the bytes are read as little-endian words.

pub fn test_bit(map: &[u64], i: u64) -> bool {
    map[(i / 64) as usize] >> (i % 64) & 1 == 1
}

pub fn set_bit(map: &mut [u64], i: u64) {
    map[(i / 64) as usize] |= 1 << (i % 64);
}

pub fn clear_bit(map: &mut [u64], i: u64) {
    map[(i / 64) as usize] &= !(1 << (i % 64));
}

/// Whether bit `i` of an on-disk bitmap is set.
pub fn disk_bit(b: &[u8], i: u64) -> bool {
    b[(i / 8) as usize] >> (i % 8) & 1 == 1
}

/// Sets or clears bit `i` of an on-disk bitmap.
pub fn disk_set(b: &mut [u8], i: u64, v: bool) {
    let m = 1u8 << (i % 8);
    if v {
        b[(i / 8) as usize] |= m;
    } else {
        b[(i / 8) as usize] &= !m;
    }
}

/// The words of an on-disk bitmap.
pub fn words_from_bytes(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(a)
        })
        .collect()
}

/// First clear bit at or after `from` and before `end`.
pub fn find_zero(map: &[u64], from: u64, end: u64) -> Option<u64> {
    let mut i = from;
    while i < end {
        let w = map[(i / 64) as usize] | ((1u64 << (i % 64)) - 1);
        if w != u64::MAX {
            let bit = (i / 64) * 64 + u64::from((!w).trailing_zeros());
            return (bit < end).then_some(bit);
        }
        i = (i / 64 + 1) * 64;
    }
    None
}

/// First set bit at or after `from` and before `end`.
pub fn find_one(map: &[u64], from: u64, end: u64) -> Option<u64> {
    let mut i = from;
    while i < end {
        let w = map[(i / 64) as usize] & !((1u64 << (i % 64)) - 1);
        if w != 0 {
            let bit = (i / 64) * 64 + u64::from(w.trailing_zeros());
            return (bit < end).then_some(bit);
        }
        i = (i / 64 + 1) * 64;
    }
    None
}

/// Calls `f(word index, mask)` for each word that bits `[from, to)` touch,
/// the mask selecting the range's bits in that word.
pub fn for_each_word(from: u64, to: u64, mut f: impl FnMut(usize, u64)) {
    let mut i = from;
    while i < to {
        let lo = i % 64;
        let hi = (to - (i - lo)).min(64);
        let mask = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
        f((i / 64) as usize, mask);
        i = i - lo + hi;
    }
}

/// Sets (`v`) or clears bits `[from, to)`; returns how many changed.
pub fn fill_range(map: &mut [u64], from: u64, to: u64, v: bool) -> u32 {
    let mut changed = 0;
    for_each_word(from, to, |w, mask| {
        let before = map[w];
        map[w] = if v { before | mask } else { before & !mask };
        changed += (before ^ map[w]).count_ones();
    });
    changed
}

/// Number of set bits in `[from, to)`.
pub fn count_ones(map: &[u64], from: u64, to: u64) -> u64 {
    let mut n = 0u64;
    for_each_word(from, to, |w, mask| n += u64::from((map[w] & mask).count_ones()));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_and_fill() {
        let mut m = vec![0u64; 4];
        assert_eq!(fill_range(&mut m, 3, 130, true), 127);
        assert_eq!(count_ones(&m, 0, 256), 127);
        assert_eq!(find_zero(&m, 0, 256), Some(0));
        assert_eq!(find_zero(&m, 3, 256), Some(130));
        assert_eq!(find_one(&m, 0, 256), Some(3));
        assert_eq!(find_one(&m, 130, 256), None);
        assert_eq!(find_zero(&m, 3, 130), None);
        assert_eq!(fill_range(&mut m, 0, 256, false), 127);
        assert_eq!(fill_range(&mut m, 0, 256, true), 256);
        assert_eq!(find_zero(&m, 0, 256), None);
    }
}
