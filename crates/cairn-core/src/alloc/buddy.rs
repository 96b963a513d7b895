//! One group's buddy: its allocatable bitmap and, for every order `k`, the
//! free aligned chunks of `2^k` blocks that are maximal (ext4 mballoc's
//! buddy, built from the bitmap and never stored).
//!
//! ## Layout
//! - `map`: order 0, bit `i` set = block `i` of the group is not allocatable
//!   (in use on disk, or freed by a checkpoint the journal may still replay).
//!   Bits from the group's length to the end of the last word are set.
//! - `chunks[k]` (`k` in `0..=MAX_ORDER`): bit `i` set = blocks
//!   `[i·2^k, (i+1)·2^k)` are all free and are not part of a free aligned
//!   chunk of order `k+1`. Every free block lies in exactly one such chunk.
//!   ext4 stores the complement, one bitmap per order from 1 up; storing
//!   order 0 too makes "find a free chunk of order ≥ k" one word scan.
//! - `counters[k]`: the number of set bits in `chunks[k]` (ext4's
//!   `bb_counters`); `free` and `fragments` (maximal free runs) complete the
//!   group's summary.
//!
//! Chunks never cross a *window* of `2^MAX_ORDER` blocks (they are aligned
//! and at most that long), so a change to `map` rebuilds only the windows it
//! touches: at most a few hundred words, instead of splitting and merging
//! buddies block by block.
//!
//! ## Invariants (checked by [`Buddy::check`] in debug builds and tests)
//! `chunks`, `counters`, `free` and `fragments` are exactly what
//! [`Buddy::new`] would build from `map`.

use super::bits::*;

/// Largest chunk order (8192 blocks, 32 MiB at 4 KiB blocks: ext4's
/// `blocksize_bits + 1`).
pub const MAX_ORDER: u32 = 13;
/// Orders 0..=MAX_ORDER.
pub const NUM_ORDERS: usize = MAX_ORDER as usize + 1;
const WINDOW: u64 = 1 << MAX_ORDER;

/// What [`Buddy::mark`] (and the allocator's on-disk bitmap change) makes
/// of blocks: in use (bits set) or free (bits cleared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Used,
    Free,
}

/// The buddy of one group (see the module essay).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Buddy {
    len: u64,
    map: Vec<u64>,
    chunks: Vec<Vec<u64>>,
    counters: [u32; NUM_ORDERS],
    free: u32,
    fragments: u32,
}

impl Buddy {
    /// Builds the buddy of a group of `len` blocks from its allocatable map
    /// (bit set = not allocatable; the map may be longer than `len`).
    pub fn new(mut map: Vec<u64>, len: u64) -> Buddy {
        let words = len.div_ceil(64) as usize;
        map.resize(words.max(map.len()), u64::MAX);
        let total_bits = map.len() as u64 * 64;
        fill_range(&mut map, len, total_bits, true);
        let chunks = (0..NUM_ORDERS).map(|k| vec![0u64; (len.div_ceil(1 << k)).div_ceil(64) as usize]).collect();
        let mut b = Buddy { len, map, chunks, counters: [0; NUM_ORDERS], free: 0, fragments: 0 };
        b.free = (len - count_ones(&b.map, 0, len)) as u32;
        b.fragments = b.starts(0, len) as u32;
        for w in 0..len.div_ceil(WINDOW) {
            b.rebuild_window(w);
        }
        b
    }

    /// Allocatable free blocks.
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Maximal runs of free blocks.
    pub fn fragments(&self) -> u32 {
        self.fragments
    }

    /// Free maximal chunks per order.
    #[cfg(test)]
    pub fn counters(&self) -> &[u32; NUM_ORDERS] {
        &self.counters
    }

    /// The largest order with a free chunk, if any block is free.
    pub fn largest_order(&self) -> Option<u32> {
        (0..NUM_ORDERS).rev().find(|&k| self.counters[k] > 0).map(|k| k as u32)
    }

    /// Whether block `i` is allocatable.
    pub fn is_free(&self, i: u64) -> bool {
        i < self.len && !test_bit(&self.map, i)
    }

    /// The allocatable map (bit set = not allocatable).
    pub fn map(&self) -> &[u64] {
        &self.map
    }

    /// Length of the free run starting at `i`, at most `max`.
    pub fn run_at(&self, i: u64, max: u64) -> u64 {
        if !self.is_free(i) {
            return 0;
        }
        (find_one(&self.map, i, self.len).unwrap_or(self.len) - i).min(max)
    }

    /// The first maximal free run that starts at or after `from`:
    /// `(start, end)`. A run that began before `from` is cut at `from`.
    pub fn next_extent(&self, from: u64) -> Option<(u64, u64)> {
        let a = find_zero(&self.map, from, self.len)?;
        Some((a, find_one(&self.map, a, self.len).unwrap_or(self.len)))
    }

    /// A free chunk of order `order` or more, the smallest order first and,
    /// within an order, the first at or after `hint` (wrapping): `(start, order)`.
    pub fn find_chunk(&self, order: u32, hint: u64) -> Option<(u64, u32)> {
        for k in order as usize..NUM_ORDERS {
            if self.counters[k] == 0 {
                continue;
            }
            let bits = self.len.div_ceil(1 << k);
            let from = (hint >> k).min(bits);
            let c = &self.chunks[k];
            if let Some(i) = find_one(c, from, bits).or_else(|| find_one(c, 0, from)) {
                return Some((i << k, k as u32));
            }
        }
        None
    }

    /// Marks blocks `[s, s+n)` not allocatable ([`Mark::Used`]) or
    /// allocatable ([`Mark::Free`]); returns how many blocks changed state.
    pub fn mark(&mut self, s: u64, n: u64, mark: Mark) -> u32 {
        let used = mark == Mark::Used;
        let e = (s + n).min(self.len);
        if s >= e {
            return 0;
        }
        // Whether a block starts a run depends on it and on its predecessor.
        let starts_to = (e + 1).min(self.len);
        let before = self.starts(s, starts_to);
        let changed = fill_range(&mut self.map, s, e, used);
        let after = self.starts(s, starts_to);
        self.fragments = (u64::from(self.fragments) + after - before) as u32;
        if used {
            self.free -= changed;
        } else {
            self.free += changed;
        }
        for w in s / WINDOW..=(e - 1) / WINDOW {
            self.rebuild_window(w);
        }
        changed
    }

    /// Blocks in `[from, to)` that are free with a used (or no) predecessor.
    fn starts(&self, from: u64, to: u64) -> u64 {
        let mut n = 0u64;
        for_each_word(from, to, |w, mask| {
            let word = self.map[w];
            let carry = if w == 0 { 1 } else { self.map[w - 1] >> 63 };
            let prev_used = (word << 1) | carry;
            n += u64::from((!word & prev_used & mask).count_ones());
        });
        n
    }

    /// Recomputes the chunks of window `w` from `map`.
    fn rebuild_window(&mut self, w: u64) {
        let base = w * WINDOW;
        let end = (base + WINDOW).min(self.len);
        for k in 0..NUM_ORDERS {
            let removed = fill_range(&mut self.chunks[k], base >> k, end.div_ceil(1 << k), false);
            self.counters[k] -= removed;
        }
        let mut p = base;
        while let Some(a) = find_zero(&self.map, p, end) {
            let b = find_one(&self.map, a, end).unwrap_or(end);
            let mut q = a;
            while q < b {
                let mut k = q.trailing_zeros().min(MAX_ORDER);
                while q + (1 << k) > b {
                    k -= 1;
                }
                set_bit(&mut self.chunks[k as usize], q >> k);
                self.counters[k as usize] += 1;
                q += 1 << k;
            }
            p = b;
        }
    }

    /// Panics unless the buddy is what [`Buddy::new`] builds from its map.
    pub fn check(&self) {
        let fresh = Buddy::new(self.map.clone(), self.len);
        assert_eq!(self.free, fresh.free, "buddy free count");
        assert_eq!(self.fragments, fresh.fragments, "buddy fragment count");
        assert_eq!(self.counters, fresh.counters, "buddy counters");
        assert!(self.chunks == fresh.chunks, "buddy chunk maps differ from the bitmap's");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Free runs of a map, block by block.
    fn runs(map: &[u64], len: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut i = 0;
        while i < len {
            if test_bit(map, i) {
                i += 1;
                continue;
            }
            let a = i;
            while i < len && !test_bit(map, i) {
                i += 1;
            }
            v.push((a, i));
        }
        v
    }

    #[test]
    fn empty_and_full_groups() {
        let b = Buddy::new(vec![0; 512], 32768);
        assert_eq!((b.free(), b.fragments(), b.largest_order()), (32768, 1, Some(13)));
        assert_eq!(b.counters()[13], 4);
        let b = Buddy::new(vec![u64::MAX; 512], 32768);
        assert_eq!((b.free(), b.fragments(), b.largest_order()), (0, 0, None));
        // A short last group: 1000 blocks = 512+256+128+64+32+8.
        let b = Buddy::new(vec![0; 16], 1000);
        assert_eq!(b.largest_order(), Some(9));
        assert_eq!(b.counters().iter().sum::<u32>(), 6);
    }

    #[test]
    fn every_other_mebibyte_has_no_order_9() {
        let mut map = vec![0u64; 512];
        for i in 0..32768u64 {
            if (i / 256) % 2 == 1 {
                set_bit(&mut map, i);
            }
        }
        let b = Buddy::new(map, 32768);
        assert_eq!(b.largest_order(), Some(8));
        assert_eq!((b.free(), b.fragments()), (16384, 64));
        assert_eq!(b.find_chunk(9, 0), None);
        assert_eq!(b.find_chunk(8, 300), Some((512, 8)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn buddy_stays_equal_to_its_bitmap(
            len in 1u64..20000,
            ops in proptest::collection::vec((any::<u64>(), 1u64..3000, any::<bool>()), 1..40),
        ) {
            let mut b = Buddy::new(vec![0; len.div_ceil(64) as usize], len);
            for (s, n, used) in ops {
                let s = s % len;
                b.mark(s, n, if used { Mark::Used } else { Mark::Free });
                b.check();
                let r = runs(b.map(), len);
                prop_assert_eq!(b.fragments() as usize, r.len());
                prop_assert_eq!(u64::from(b.free()), r.iter().map(|(a, e)| e - a).sum::<u64>());
                // Every chunk found is free, aligned, and of the order asked or more.
                for order in 0..NUM_ORDERS as u32 {
                    match b.find_chunk(order, s) {
                        Some((c, k)) => {
                            prop_assert!(k >= order && c % (1 << k) == 0);
                            prop_assert!(b.run_at(c, 1 << k) == 1 << k);
                        }
                        None => prop_assert!(b.largest_order().is_none_or(|l| l < order)),
                    }
                }
            }
        }
    }
}
