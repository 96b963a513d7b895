//! Live counters for `cairn stats` (the daemon serves them; see cairn-cli).
//!
//! Each subsystem publishes its own counters by implementing [`Publish`]
//! next to its code; `Fs::stats` gathers them, in a fixed order.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A subsystem that has counters: calls `put(dotted_name, value)` for each.
pub trait Publish {
    fn publish(&self, put: &mut dyn FnMut(&str, u64));
}

/// The value at quantile `p` (0..=1) of `sorted`.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Buckets of a [`Histogram`].
const BUCKETS: usize = 40;

/// A log2 histogram of microseconds: bucket `b` holds `[2^(b-1), 2^b)` µs,
/// bucket 0 holds `< 1` µs. Lock-free (relaxed atomics: statistics).
pub struct Histogram([AtomicU64; BUCKETS]);

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Self {
        Histogram(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    fn bucket(us: u64) -> usize {
        // 0 → 0, 1 → 1, 2..3 → 2, 4..7 → 3, ...
        ((u64::BITS - us.leading_zeros()) as usize).min(BUCKETS - 1)
    }

    /// Counts one sample of `us` microseconds.
    pub fn add(&self, us: u64) {
        self.0[Self::bucket(us)].fetch_add(1, Relaxed);
    }

    /// Adds `other`'s samples to this one (merging per-thread histograms).
    pub fn absorb(&self, other: &Histogram) {
        for (mine, theirs) in self.0.iter().zip(&other.0) {
            mine.fetch_add(theirs.load(Relaxed), Relaxed);
        }
    }

    /// Samples counted.
    pub fn count(&self) -> u64 {
        self.0.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Upper bound (µs) of the bucket holding quantile `q` (0..=1), accurate
    /// to a factor of two; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let want = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return if b == 0 { 1 } else { 1u64 << b };
            }
        }
        1u64 << (BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_quantiles() {
        assert_eq!(Histogram::bucket(0), 0);
        assert_eq!(Histogram::bucket(1), 1);
        assert_eq!(Histogram::bucket(3), 2);
        assert_eq!(Histogram::bucket(4), 3);
        assert_eq!(Histogram::bucket(u64::MAX), BUCKETS - 1);
        let h = Histogram::new();
        assert_eq!(h.quantile(0.5), 0);
        for _ in 0..98 {
            h.add(10);
        }
        h.add(1000);
        h.add(1000);
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.5), 16);
        assert_eq!(h.quantile(0.99), 1024);
    }
}
