//! The write-ahead journal region: formats of its superblock and records.
//!
//! The region is `journal_blocks` blocks at `journal_start`. Its block 0 is
//! the journal superblock; blocks 1.. form a ring of records. A record is one
//! checkpoint (a committed transaction group):
//!
//! ```text
//! descriptor | home block images ... | descriptor | images ... | commit
//! ```
//! * Descriptor (32-byte header + u64 home block numbers):
//!   `0 magic "CJDS" | 4 n (numbers in this descriptor) | 8 seq u64 |
//!    16 reserved | 28 crc32c(seed, block with field zero)`.
//! * Commit: `0 magic "CJCM" | 4 total blocks of the record (descriptors,
//!   images and the commit) | 8 seq | 16 crc32c of every earlier block of the
//!   record, in order | 20 reserved | 28 crc32c of this block`.
//! * Journal superblock: `0 magic "CJSB" | 4 version | 8 tail_seq | 16 tail_off
//!   (ring position of the oldest record that may still need replay) |
//!   24 reserved | 28 crc`.
//!
//! Ring positions run from 1 to `journal_blocks - 1` and wrap. Replay starts
//! at `(tail_off, tail_seq)` and applies records while each decodes with the
//! expected sequence number and a matching commit checksum; the first record
//! that fails ends the log (it was torn by the crash).

use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::error::{FormatError, Result};

/// Smallest journal region accepted.
pub const MIN_JOURNAL_BLOCKS: u64 = 64;
/// Magic of the journal superblock.
pub const JSB_MAGIC: u32 = 0x4253_4a43;
/// Magic of a descriptor block.
pub const DESC_MAGIC: u32 = 0x5344_4a43;
/// Magic of a commit block.
pub const COMMIT_MAGIC: u32 = 0x4d43_4a43;
/// Header bytes of a descriptor.
pub const DESC_HEADER: usize = 32;

/// Home block numbers one descriptor holds.
pub fn desc_capacity(block_size: usize) -> usize {
    (block_size - DESC_HEADER) / 8
}

/// Journal superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalSuper {
    pub tail_seq: u64,
    pub tail_off: u64,
}

impl JournalSuper {
    /// Encodes into a whole block.
    pub fn encode(&self, seed: u32, out: &mut [u8]) {
        out.fill(0);
        put_u32(out, 0, JSB_MAGIC);
        put_u32(out, 4, 1);
        put_u64(out, 8, self.tail_seq);
        put_u64(out, 16, self.tail_off);
        let c = crc_skipping(seed, out, 28);
        put_u32(out, 28, c);
    }

    /// Decodes and validates against the region size.
    pub fn decode(seed: u32, b: &[u8], journal_blocks: u64) -> Result<JournalSuper> {
        const W: &str = "journal superblock";
        if get_u32(b, 0) != JSB_MAGIC {
            return Err(FormatError::BadMagic { what: W });
        }
        let stored = get_u32(b, 28);
        let computed = crc_skipping(seed, b, 28);
        if stored != computed {
            return Err(FormatError::Checksum { what: W, at: 0, stored, computed });
        }
        let j = JournalSuper { tail_seq: get_u64(b, 8), tail_off: get_u64(b, 16) };
        if j.tail_off == 0 || j.tail_off >= journal_blocks {
            return Err(FormatError::corrupt(W, 0, "tail outside the journal"));
        }
        Ok(j)
    }
}

/// Encodes a descriptor listing `homes` for record `seq`.
pub fn encode_descriptor(seed: u32, seq: u64, homes: &[u64], out: &mut [u8]) {
    out.fill(0);
    put_u32(out, 0, DESC_MAGIC);
    put_u32(out, 4, homes.len() as u32);
    put_u64(out, 8, seq);
    for (i, h) in homes.iter().enumerate() {
        put_u64(out, DESC_HEADER + i * 8, *h);
    }
    let c = crc_skipping(seed, out, 28);
    put_u32(out, 28, c);
}

/// Decodes a descriptor expected to belong to record `seq`; `None` if the
/// block is not a valid descriptor of that record (end of log).
pub fn decode_descriptor(seed: u32, seq: u64, b: &[u8]) -> Option<Vec<u64>> {
    if get_u32(b, 0) != DESC_MAGIC || get_u64(b, 8) != seq || get_u32(b, 28) != crc_skipping(seed, b, 28) {
        return None;
    }
    let n = get_u32(b, 4) as usize;
    if n == 0 || n > desc_capacity(b.len()) {
        return None;
    }
    Some((0..n).map(|i| get_u64(b, DESC_HEADER + i * 8)).collect())
}

/// Encodes a commit block.
pub fn encode_commit(seed: u32, seq: u64, total_blocks: u32, body_crc: u32, out: &mut [u8]) {
    out.fill(0);
    put_u32(out, 0, COMMIT_MAGIC);
    put_u32(out, 4, total_blocks);
    put_u64(out, 8, seq);
    put_u32(out, 16, body_crc);
    let c = crc_skipping(seed, out, 28);
    put_u32(out, 28, c);
}

/// Decodes a commit block of record `seq`: `(total_blocks, body_crc)`.
pub fn decode_commit(seed: u32, seq: u64, b: &[u8]) -> Option<(u32, u32)> {
    if get_u32(b, 0) != COMMIT_MAGIC || get_u64(b, 8) != seq || get_u32(b, 28) != crc_skipping(seed, b, 28) {
        return None;
    }
    Some((get_u32(b, 4), get_u32(b, 16)))
}

/// Seed used for the body checksum chain of a record.
pub fn body_seed(seed: u32, seq: u64) -> u32 {
    seed ^ seq as u32 ^ (seq >> 32) as u32
}

/// Checksum helper: continues a body checksum with one more block.
pub fn body_crc_append(crc: u32, block: &[u8]) -> u32 {
    crate::checksum::crc(crc, block)
}
