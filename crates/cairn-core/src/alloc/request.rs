//! What a caller asks the block allocator for, and how a data request is
//! normalized (ext4's `ext4_mb_normalize_request`, without the reserved
//! preallocation: see the allocator's essay).
//!
//! A request has a *goal* (the block the caller would like first: after the
//! file's previous extent, or near its inode), the number of blocks it
//! *wants* now, and the length to *search* for: a file that is growing past
//! 64 KiB looks for a free chunk of its size class (1 MiB and below: the next
//! power of two; then 2, 4, 8 MiB), takes what it wants from the chunk's
//! start, and leaves the rest free right behind it, so that its next write's
//! goal is free and the file stays contiguous; the rest of the chunk, up to
//! the search length, is reserved for the file as a *preallocation* (see
//! `prealloc`). Only streaming writes (from
//! the file's start or right after its last block) are normalized: a write
//! into a hole would otherwise split a fresh chunk for every block. Small
//! files (whose end stays within 64 KiB) are marked `small`: they take what
//! they want from a locality group's run (see `group_prealloc`), or, with
//! those off, search for exactly what they want near their inode.

/// Files whose end stays within this many bytes are not normalized (ext4's
/// `mb_stream_req`, 16 blocks of 4 KiB).
const STREAM_BYTES: u64 = 64 << 10;
/// Largest normalized search (ext4's 8 MiB class).
const MAX_CLASS_BYTES: u64 = 8 << 20;

/// Data or metadata: data may not use the metadata reserve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Data,
    Meta,
}

/// One block allocation request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRequest {
    /// Preferred first block.
    pub goal: u64,
    /// Blocks wanted now (the allocator returns between 1 and this many).
    pub want: u32,
    /// Length to search for (≥ `want`).
    pub search: u32,
    pub purpose: Purpose,
    /// For file data: the inode and the first file block, so a streaming
    /// file can be served from (and leave) a preallocation. 0 for metadata.
    pub ino: u64,
    pub lblk: u64,
    /// A small file's data (its end within the stream threshold): served
    /// from a locality group's runs (see `group_prealloc`).
    pub small: bool,
}

impl AllocRequest {
    /// One metadata block near `goal`.
    pub fn meta(goal: u64) -> AllocRequest {
        AllocRequest { goal, want: 1, search: 1, purpose: Purpose::Meta, ino: 0, lblk: 0, small: false }
    }

    /// `want` data blocks for file blocks from `lblk` of inode `ino`,
    /// searched for as they are, at `goal`.
    pub fn exact(ino: u64, goal: u64, want: u32, lblk: u64) -> AllocRequest {
        AllocRequest { goal, want, search: want, purpose: Purpose::Data, ino, lblk, small: false }
    }

    /// `want` data blocks for file blocks from `lblk` of streaming file
    /// `ino` of `size` bytes, at `goal`; `block_size` in bytes.
    pub fn data(ino: u64, goal: u64, want: u32, lblk: u64, size: u64, block_size: u32) -> AllocRequest {
        let bs = u64::from(block_size);
        let end = ((lblk + u64::from(want)) * bs).max(size);
        let class = if end <= STREAM_BYTES {
            0
        } else if end <= 1 << 20 {
            end.next_power_of_two()
        } else if end <= 4 << 20 {
            2 << 20
        } else if end <= 8 << 20 {
            4 << 20
        } else {
            MAX_CLASS_BYTES
        };
        let search = (class / bs).min(1 << super::buddy::MAX_ORDER).max(u64::from(want)) as u32;
        AllocRequest { goal, want, search, purpose: Purpose::Data, ino, lblk, small: class == 0 }
    }

    /// The buddy order to look for first: `Some(k)` when the search length
    /// is `2^k` with `k ≥ 2` (ext4's `mb_order2_req`), else `None`.
    pub fn power_of_two_order(&self) -> Option<u32> {
        (self.search.is_power_of_two() && self.search >= 4).then(|| self.search.ilog2())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        let r = |lblk, want, size| AllocRequest::data(9, 0, want, lblk, size, 4096).search;
        assert_eq!(r(0, 1, 0), 1, "a small file is not normalized");
        assert!(AllocRequest::data(9, 0, 16, 0, 0, 4096).small, "64 KiB is small");
        assert!(!AllocRequest::data(9, 0, 17, 0, 0, 4096).small);
        assert!(!AllocRequest::data(9, 0, 1, 16, 64 << 10, 4096).small, "appending past 64 KiB");
        assert_eq!(r(0, 16, 0), 16);
        assert_eq!(r(0, 17, 0), 32, "past 64 KiB: next power of two");
        assert_eq!(r(0, 256, 0), 256, "1 MiB");
        assert_eq!(r(256, 256, 1 << 20), 512, "2 MiB class");
        assert_eq!(r(1024, 256, 4 << 20), 1024, "4 MiB class");
        assert_eq!(r(4096, 256, 16 << 20), 2048, "8 MiB class");
        assert_eq!(r(0, 4000, 0), 4000, "never below what is wanted");
        let req = AllocRequest::data(9, 0, 256, 256, 1 << 20, 4096);
        assert_eq!(req.power_of_two_order(), Some(9));
        assert_eq!(AllocRequest::meta(7).power_of_two_order(), None);
    }
}
