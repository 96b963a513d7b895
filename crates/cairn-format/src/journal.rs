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
//! Ring positions run from 1 to `journal_blocks - 1` and wrap
//! ([`ring_next`], [`ring_used`]). Replay starts at `(tail_off, tail_seq)` and
//! applies records while each decodes with the expected sequence number and a
//! matching commit checksum; the first record that fails ends the log (it was
//! torn by the crash). [`read_record`] is that walk, one record at a time,
//! shared by the engine's replay and the checker's; what to do with the
//! records (write them home, overlay them, report them) is the caller's.
//!
//! A record also ends the log when it cannot be one the engine wrote: longer
//! than the ring, or naming a home block inside the journal region or past
//! the end of the image ([`JournalRegion::valid_home`]).

use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::error::{FormatError, Result};
use crate::superblock::Superblock;

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

/// Bytes of the journal superblock, descriptor header and commit block that
/// carry fields (the rest of each block is zero).
const FIXED_BYTES: usize = 32;
/// Offset of the crc32c in the journal superblock, descriptors and commits.
const CSUM_OFF: usize = 28;

const _: () = {
    assert!(DESC_HEADER == FIXED_BYTES && CSUM_OFF + 4 == FIXED_BYTES);
    // A descriptor of the smallest block holds at least one home block.
    assert!(desc_capacity(crate::MIN_BLOCK_SIZE as usize) == 124);
    assert!(FIXED_BYTES <= crate::MIN_BLOCK_SIZE as usize);
};

/// Home block numbers one descriptor holds.
pub const fn desc_capacity(block_size: usize) -> usize {
    (block_size - DESC_HEADER) / 8
}

/// The ring position `n` blocks after `off`, for a journal region of
/// `journal_blocks` blocks: positions run `1 ..= journal_blocks - 1` (block 0
/// of the region is the journal superblock) and wrap.
///
/// `off` must be a ring position and `journal_blocks >= 2`.
pub fn ring_next(journal_blocks: u64, off: u64, n: u64) -> u64 {
    let ring = journal_blocks - 1;
    (off - 1 + n % ring) % ring + 1
}

/// Ring blocks from position `from` up to (not including) position `to`,
/// going forward with wrap: the log space between a tail and a head.
///
/// Both must be ring positions and `journal_blocks >= 2`.
pub fn ring_used(journal_blocks: u64, from: u64, to: u64) -> u64 {
    let ring = journal_blocks - 1;
    (to + ring - from) % ring
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

    /// Decodes the journal superblock read from block `at` (the region's
    /// first block, `journal_start`) and validates it against the region size.
    pub fn decode(seed: u32, at: u64, b: &[u8], journal_blocks: u64) -> Result<JournalSuper> {
        const W: &str = "journal superblock";
        if get_u32(b, 0) != JSB_MAGIC {
            return Err(FormatError::bad_magic(W, at));
        }
        let stored = get_u32(b, CSUM_OFF);
        let computed = crc_skipping(seed, b, CSUM_OFF);
        if stored != computed {
            return Err(FormatError::Checksum { what: W, at, stored, computed });
        }
        let j = JournalSuper { tail_seq: get_u64(b, 8), tail_off: get_u64(b, 16) };
        if j.tail_off == 0 || j.tail_off >= journal_blocks {
            return Err(FormatError::corrupt(
                W,
                at,
                format!("tail at ring position {} outside the journal of {journal_blocks} blocks", j.tail_off),
            ));
        }
        Ok(j)
    }
}

/// Encodes a descriptor listing `homes` for record `seq` into a whole block.
///
/// # Panics
/// If `homes` is empty or holds more than [`desc_capacity`] numbers (a
/// descriptor like that would not decode).
pub fn encode_descriptor(seed: u32, seq: u64, homes: &[u64], out: &mut [u8]) {
    assert!(
        !homes.is_empty() && homes.len() <= desc_capacity(out.len()),
        "encoder bug: descriptor of {} home blocks in a {}-byte block",
        homes.len(),
        out.len()
    );
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

/// The sequence number a block of the ring claims if it looks like a
/// descriptor or a commit block (by magic alone, checksum not verified), for
/// tools that must pick a sequence number past every record in the ring.
pub fn claimed_seq(b: &[u8]) -> Option<u64> {
    matches!(get_u32(b, 0), DESC_MAGIC | COMMIT_MAGIC).then(|| get_u64(b, 8))
}

/// Where the journal region is, and how big the image is: what the record
/// walk needs to know besides the blocks themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalRegion {
    /// First block of the region (the journal superblock).
    pub start: u64,
    /// Blocks of the region, journal superblock included.
    pub blocks: u64,
    /// Blocks of the whole image.
    pub total_blocks: u64,
}

impl JournalRegion {
    /// The journal region of a (decoded, hence validated) superblock.
    pub fn of(sb: &Superblock) -> JournalRegion {
        JournalRegion { start: sb.journal_start, blocks: sb.journal_blocks, total_blocks: sb.total_blocks }
    }

    /// True if `blk` lies inside the journal region.
    pub fn contains(&self, blk: u64) -> bool {
        blk >= self.start && blk - self.start < self.blocks
    }

    /// True if a record may name `home` as a home block: inside the image
    /// and outside the journal region.
    pub fn valid_home(&self, home: u64) -> bool {
        home < self.total_blocks && !self.contains(home)
    }

    /// Absolute block number of ring position `off`.
    pub fn block_of(&self, off: u64) -> u64 {
        self.start + off
    }

    /// See [`ring_next`].
    pub fn next(&self, off: u64, n: u64) -> u64 {
        ring_next(self.blocks, off, n)
    }

    /// See [`ring_used`].
    pub fn used(&self, from: u64, to: u64) -> u64 {
        ring_used(self.blocks, from, to)
    }
}

/// A position in the log: the record expected there and its ring position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPos {
    /// Sequence number of the record that starts here.
    pub seq: u64,
    /// Ring position (`1 ..= journal_blocks - 1`).
    pub off: u64,
}

/// One verified record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// (home block, image) pairs in log order; later pairs win.
    pub images: Vec<(u64, Vec<u8>)>,
    /// Where the next record would start.
    pub next: LogPos,
}

/// Why the log ends at a position (none of these is corruption: the end of
/// the log is always some record that does not verify).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEnd {
    /// The position is not a ring position (a caller bug or a damaged tail).
    BadPosition,
    /// The block at ring position `off` is neither a descriptor of the
    /// expected record nor (after one) its commit block.
    NoDescriptor { off: u64 },
    /// The commit block at `off` disagrees with the record: wrong length or
    /// body checksum.
    BadCommit { off: u64 },
    /// The record would be longer than the ring.
    TooLong,
    /// The descriptor at `off` names a home block inside the journal or past
    /// the end of the image: not a record the engine could have written.
    ImpossibleHome { off: u64, home: u64 },
}

/// What [`read_record`] found at a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walk {
    /// A whole, verified record.
    Record(Record),
    /// The end of the log, and why.
    End(LogEnd),
}

impl Walk {
    /// The record, or `None` at the end of the log.
    pub fn record(self) -> Option<Record> {
        match self {
            Walk::Record(r) => Some(r),
            Walk::End(_) => None,
        }
    }
}

/// Reads and verifies the record at `pos` of the journal in `region`:
///
/// `descriptor | images... | descriptor | images... | commit`, every
/// descriptor carrying `pos.seq` and naming only valid home blocks, then a
/// commit block of `pos.seq` whose total equals the record's length and whose
/// body checksum (chained from [`body_seed`] over every earlier block) matches.
/// The record must be shorter than the ring.
///
/// `read(off)` returns the whole block at ring position `off` (absolute block
/// [`JournalRegion::block_of`]`(off)`); its errors are passed through. Blocks
/// are read in ring order, each once.
pub fn read_record<E>(
    seed: u32,
    region: &JournalRegion,
    pos: LogPos,
    mut read: impl FnMut(u64) -> std::result::Result<Vec<u8>, E>,
) -> std::result::Result<Walk, E> {
    if region.blocks < 2 || pos.off == 0 || pos.off >= region.blocks {
        return Ok(Walk::End(LogEnd::BadPosition));
    }
    let limit = region.blocks - 1;
    let mut off = pos.off;
    let mut used = 0u64;
    let mut crc = body_seed(seed, pos.seq);
    let mut images: Vec<(u64, Vec<u8>)> = Vec::new();
    loop {
        if used >= limit {
            return Ok(Walk::End(LogEnd::TooLong));
        }
        let blk = read(off)?;
        if !images.is_empty() {
            if let Some((total, body)) = decode_commit(seed, pos.seq, &blk) {
                if u64::from(total) != used + 1 || body != crc {
                    return Ok(Walk::End(LogEnd::BadCommit { off }));
                }
                let next = LogPos { seq: pos.seq.wrapping_add(1), off: region.next(off, 1) };
                return Ok(Walk::Record(Record { images, next }));
            }
        }
        let Some(homes) = decode_descriptor(seed, pos.seq, &blk) else {
            return Ok(Walk::End(LogEnd::NoDescriptor { off }));
        };
        if let Some(&home) = homes.iter().find(|h| !region.valid_home(**h)) {
            return Ok(Walk::End(LogEnd::ImpossibleHome { off, home }));
        }
        crc = body_crc_append(crc, &blk);
        off = region.next(off, 1);
        used += 1;
        for home in homes {
            if used >= limit {
                return Ok(Walk::End(LogEnd::TooLong));
            }
            let img = read(off)?;
            crc = body_crc_append(crc, &img);
            off = region.next(off, 1);
            used += 1;
            images.push((home, img));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const BS: usize = 1024;
    const SEED: u32 = 0x1234_5678;
    const REGION: JournalRegion = JournalRegion { start: 10, blocks: 64, total_blocks: 1000 };

    fn write_record(ring: &mut HashMap<u64, Vec<u8>>, seq: u64, off: u64, images: &[(u64, u8)]) -> u64 {
        write_record_in(&REGION, ring, seq, off, images)
    }

    /// Writes a record (as the engine does) at `off`; returns the next position.
    fn write_record_in(
        region: &JournalRegion,
        ring: &mut HashMap<u64, Vec<u8>>,
        seq: u64,
        off: u64,
        images: &[(u64, u8)],
    ) -> u64 {
        let cap = desc_capacity(BS);
        let mut off = off;
        let mut crc = body_seed(SEED, seq);
        let mut total = 1;
        for chunk in images.chunks(cap) {
            let homes: Vec<u64> = chunk.iter().map(|i| i.0).collect();
            let mut d = vec![0u8; BS];
            encode_descriptor(SEED, seq, &homes, &mut d);
            crc = body_crc_append(crc, &d);
            ring.insert(off, d);
            off = region.next(off, 1);
            for &(_, fill) in chunk {
                let img = vec![fill; BS];
                crc = body_crc_append(crc, &img);
                ring.insert(off, img);
                off = region.next(off, 1);
            }
            total += 1 + chunk.len() as u32;
        }
        let mut c = vec![0u8; BS];
        encode_commit(SEED, seq, total, crc, &mut c);
        ring.insert(off, c);
        region.next(off, 1)
    }

    fn walk(ring: &HashMap<u64, Vec<u8>>, seq: u64, off: u64) -> Walk {
        let r: std::result::Result<Walk, ()> = read_record(SEED, &REGION, LogPos { seq, off }, |o| {
            assert!((1..REGION.blocks).contains(&o), "read outside the ring: {o}");
            Ok(ring.get(&o).cloned().unwrap_or_else(|| vec![0u8; BS]))
        });
        r.unwrap()
    }

    #[test]
    fn ring_arithmetic_wraps_past_block_zero() {
        assert_eq!(ring_next(64, 1, 1), 2);
        assert_eq!(ring_next(64, 63, 1), 1, "position 0 is the journal superblock");
        assert_eq!(ring_next(64, 60, 10), 7);
        assert_eq!(ring_next(64, 5, 63), 5, "a whole turn");
        assert_eq!(ring_next(64, 5, u64::MAX), ring_next(64, 5, u64::MAX % 63));
        assert_eq!(ring_used(64, 5, 5), 0);
        assert_eq!(ring_used(64, 5, 9), 4);
        assert_eq!(ring_used(64, 60, 2), 5);
        for from in 1..64 {
            for n in 0..63 {
                assert_eq!(ring_used(64, from, ring_next(64, from, n)), n);
            }
        }
    }

    #[test]
    fn walks_records_in_order_across_the_wrap() {
        let mut ring = HashMap::new();
        let a = write_record(&mut ring, 7, 55, &[(100, 1), (0, 2), (101, 3)]);
        assert_eq!(a, 60);
        let b = write_record(&mut ring, 8, a, &[(200, 4), (201, 5), (202, 6), (203, 7)]);
        assert_eq!(b, 3, "six blocks from 60 wrap to 3");
        let Walk::Record(r) = walk(&ring, 7, 55) else { panic!("first record not found") };
        assert_eq!(r.next, LogPos { seq: 8, off: 60 });
        assert_eq!(r.images.iter().map(|(h, i)| (*h, i[0])).collect::<Vec<_>>(), vec![(100, 1), (0, 2), (101, 3)]);
        let Walk::Record(r) = walk(&ring, 8, 60) else { panic!("wrapped record not found") };
        assert_eq!(r.next, LogPos { seq: 9, off: 3 });
        assert_eq!(
            r.images.iter().map(|(h, i)| (*h, i[0])).collect::<Vec<_>>(),
            [(200, 4), (201, 5), (202, 6), (203, 7)]
        );
        assert_eq!(walk(&ring, 9, 3), Walk::End(LogEnd::NoDescriptor { off: 3 }));
        assert_eq!(walk(&ring, 8, 55), Walk::End(LogEnd::NoDescriptor { off: 55 }), "wrong sequence number");
    }

    #[test]
    fn records_with_several_descriptors() {
        // 130 images need two descriptors in 1 KiB blocks (124 each): 133 blocks.
        let big = JournalRegion { blocks: 400, ..REGION };
        let images: Vec<(u64, u8)> = (0..130).map(|i| (500 + i, i as u8)).collect();
        let mut ring = HashMap::new();
        assert_eq!(write_record_in(&big, &mut ring, 3, 1, &images), 134);
        let w: std::result::Result<Walk, ()> =
            read_record(SEED, &big, LogPos { seq: 3, off: 1 }, |o| Ok(ring.get(&o).cloned().unwrap_or_default()));
        let Walk::Record(r) = w.unwrap() else { panic!("two-descriptor record not found") };
        assert_eq!(r.images.iter().map(|(h, i)| (*h, i[0])).collect::<Vec<_>>(), images);
        assert_eq!(r.next, LogPos { seq: 4, off: 134 });
        // The largest record the 63-block ring of REGION holds: 62 blocks.
        let mut ring = HashMap::new();
        write_record(&mut ring, 1, 1, &images[..60]);
        assert!(matches!(walk(&ring, 1, 1), Walk::Record(_)));
    }

    #[test]
    fn torn_and_impossible_records_end_the_log() {
        let mut ring = HashMap::new();
        let next = write_record(&mut ring, 5, 1, &[(100, 1), (101, 2)]);
        // A damaged image: the commit's body checksum no longer matches.
        ring.get_mut(&3).unwrap()[17] ^= 1;
        assert_eq!(walk(&ring, 5, 1), Walk::End(LogEnd::BadCommit { off: 4 }));
        ring.get_mut(&3).unwrap()[17] ^= 1;
        // A missing commit (torn before step 3).
        let commit = ring.remove(&(next - 1)).unwrap();
        assert_eq!(walk(&ring, 5, 1), Walk::End(LogEnd::NoDescriptor { off: 4 }));
        ring.insert(next - 1, commit);
        assert!(matches!(walk(&ring, 5, 1), Walk::Record(_)));
        for bad in [10, 10 + 63, 1000, u64::MAX] {
            let mut r = HashMap::new();
            write_record(&mut r, 5, 1, &[(100, 1), (bad, 2)]);
            assert_eq!(walk(&r, 5, 1), Walk::End(LogEnd::ImpossibleHome { off: 1, home: bad }), "home {bad}");
        }
        for ok in [9, 74, 999] {
            let mut r = HashMap::new();
            write_record(&mut r, 5, 1, &[(ok, 1)]);
            assert!(matches!(walk(&r, 5, 1), Walk::Record(_)), "home {ok}");
        }
        assert_eq!(walk(&ring, 5, 0), Walk::End(LogEnd::BadPosition));
        assert_eq!(walk(&ring, 5, 64), Walk::End(LogEnd::BadPosition));
    }

    #[test]
    fn a_record_as_long_as_the_ring_ends_the_log() {
        // A descriptor claiming 62 images fills the 63-block ring with no room
        // for its commit: the walk must stop, not wrap onto its own start.
        let mut ring = HashMap::new();
        let homes: Vec<u64> = (100..162).collect();
        let mut d = vec![0u8; BS];
        encode_descriptor(SEED, 1, &homes, &mut d);
        ring.insert(1, d);
        assert_eq!(walk(&ring, 1, 1), Walk::End(LogEnd::TooLong));
    }

    #[test]
    fn io_errors_pass_through() {
        let r = read_record(SEED, &REGION, LogPos { seq: 1, off: 1 }, Err);
        assert_eq!(r, Err(1));
    }

    #[test]
    fn claimed_sequence_numbers() {
        let mut d = vec![0u8; BS];
        encode_descriptor(SEED, 77, &[5], &mut d);
        assert_eq!(claimed_seq(&d), Some(77));
        encode_commit(SEED, 78, 2, 0, &mut d);
        assert_eq!(claimed_seq(&d), Some(78));
        JournalSuper { tail_seq: 79, tail_off: 1 }.encode(SEED, &mut d);
        assert_eq!(claimed_seq(&d), None);
    }

    #[test]
    fn journal_superblock_errors_carry_the_block() {
        let mut b = vec![0u8; BS];
        assert_eq!(
            JournalSuper::decode(SEED, 10, &b, 64),
            Err(FormatError::BadMagic { what: "journal superblock", at: 10 })
        );
        JournalSuper { tail_seq: 1, tail_off: 64 }.encode(SEED, &mut b);
        assert!(matches!(JournalSuper::decode(SEED, 10, &b, 64), Err(FormatError::Corrupt { at: 10, .. })));
        b[8] ^= 1;
        assert!(matches!(JournalSuper::decode(SEED, 10, &b, 64), Err(FormatError::Checksum { at: 10, .. })));
    }

    #[test]
    #[should_panic(expected = "descriptor of 125 home blocks")]
    fn overfull_descriptor_is_a_bug() {
        encode_descriptor(SEED, 1, &[1; 125], &mut [0u8; BS]);
    }
}
