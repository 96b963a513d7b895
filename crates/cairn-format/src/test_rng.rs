//! A small deterministic generator (xorshift64) for this crate's tests:
//! no dependency, and the same sequence every run. Built only for tests.

/// A xorshift64 stream from a non-zero seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
