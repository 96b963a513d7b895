//! The write-ahead journal region: formats of its superblock and records.
//!
//! The region is `journal_blocks` blocks from `journal_start` on: in group 0,
//! and, when it does not fit there, on through the next groups past each
//! one's metadata ([`JournalRegion`]). Its block 0 is the journal superblock;
//! blocks 1.. form a ring of records. A record is one checkpoint (a committed
//! transaction group):
//!
//! ```text
//! descriptor | logged bytes ... | descriptor | logged bytes ... | commit
//! ```
//! * Region descriptor (what the engine writes; 32-byte header + 16-byte
//!   entries): `0 magic "CJDR" | 4 n (entries) | 8 seq u64 | 16 reserved |
//!   28 crc32c(seed, block with field zero)`, then per entry
//!   `0 home block u64 | 8 chunk map u64`. A block is 64 chunks of
//!   `block_size / 64` bytes ([`chunk_size`]); bit `i` of the map says chunk
//!   `i` is logged (XFS's dirty-region bitmap, `XFS_BLF_CHUNK`). The
//!   descriptor is followed by the logged chunks of its entries, in entry
//!   order and chunk order, concatenated, zero-padded to a whole block. A
//!   block logged whole has every bit set; a freshly allocated block is
//!   always logged whole (its home bytes are garbage).
//! * Compressed region descriptor (`INCOMPAT_JOURNAL_ZSTD`): `"CJDZ"`, the
//!   region descriptor's header and entries with `16 stored bytes u32`; its
//!   entries' logged chunks, concatenated as above, follow as one zstd frame
//!   of that many bytes (fewer than the chunks'), zero-padded to a whole
//!   block. The engine writes it when the frame is smaller than the chunks:
//!   a checkpoint's inode table and directory chunks shrink to a fifth.
//! * Whole-block descriptor (still read; the first format): `"CJDS"`, 8-byte
//!   entries of home block numbers only, each followed by a whole image.
//! * Commit: `0 magic "CJCM" | 4 total blocks of the record (descriptors,
//!   bodies and the commit) | 8 seq | 16 crc32c of every earlier block of the
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

/// Smallest journal region accepted (a bound of the superblock's, which
/// validates `journal_blocks` against it).
pub use crate::superblock::MIN_JOURNAL_BLOCKS;
/// Magic of the journal superblock.
pub const JSB_MAGIC: u32 = 0x4253_4a43;
/// Magic of a whole-block descriptor (the first format; still replayed).
pub const DESC_MAGIC: u32 = 0x5344_4a43;
/// Magic of a region descriptor.
pub const REGION_DESC_MAGIC: u32 = 0x5244_4a43;
/// Chunks per block in a region map.
pub const CHUNKS: usize = 64;
/// A chunk map naming every chunk of the block.
pub const WHOLE: u64 = u64::MAX;
/// Magic of a compressed region descriptor (`INCOMPAT_JOURNAL_ZSTD`).
pub const ZREGION_DESC_MAGIC: u32 = 0x5a44_4a43;
/// Offset of a compressed descriptor's stored (compressed) body length.
const STORED_OFF: usize = 16;
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

/// Home block numbers one whole-block descriptor holds.
pub const fn desc_capacity(block_size: usize) -> usize {
    (block_size - DESC_HEADER) / 8
}

/// Entries one region descriptor holds.
pub const fn region_desc_capacity(block_size: usize) -> usize {
    (block_size - DESC_HEADER) / 16
}

/// Bytes of one chunk of a region map.
pub const fn chunk_size(block_size: usize) -> usize {
    block_size / CHUNKS
}

/// Bytes a region entry with chunk map `map` logs.
pub fn logged_bytes(block_size: usize, map: u64) -> usize {
    map.count_ones() as usize * chunk_size(block_size)
}

/// Copies the chunks of `block` that `map` names, in order, to `out`.
pub fn gather_chunks(block: &[u8], map: u64, out: &mut Vec<u8>) {
    let c = chunk_size(block.len());
    for i in (0..CHUNKS).filter(|i| map >> i & 1 == 1) {
        out.extend_from_slice(&block[i * c..(i + 1) * c]);
    }
}

/// The chunks in which `old` and `new` differ (slices of one block starting
/// at byte `at` of it), as a chunk map.
pub fn changed_chunks(block_size: usize, at: usize, old: &[u8], new: &[u8]) -> u64 {
    debug_assert_eq!(old.len(), new.len());
    let c = chunk_size(block_size);
    let mut map = 0u64;
    let mut i = 0;
    while i < old.len() {
        let chunk = (at + i) / c;
        let end = ((chunk + 1) * c - at).min(old.len());
        if old[i..end] != new[i..end] {
            map |= 1 << chunk;
        }
        i = end;
    }
    map
}

/// The chunks a byte range `at .. at + len` of a block touches.
pub fn range_chunks(block_size: usize, at: usize, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let c = chunk_size(block_size);
    let (first, last) = (at / c, (at + len - 1) / c);
    let n = last - first + 1;
    if n >= 64 {
        WHOLE
    } else {
        ((1u64 << n) - 1) << first
    }
}

/// One block's change as a record carries it: the chunks named by `map`,
/// concatenated in `bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub home: u64,
    pub map: u64,
    pub bytes: Vec<u8>,
}

impl Patch {
    /// True if the patch holds the whole block (no need to read home first).
    pub fn is_whole(&self) -> bool {
        self.map == WHOLE
    }

    /// Writes the patch's chunks over `block`.
    pub fn apply(&self, block: &mut [u8]) {
        let c = chunk_size(block.len());
        let mut p = 0;
        for i in (0..CHUNKS).filter(|i| self.map >> i & 1 == 1) {
            block[i * c..(i + 1) * c].copy_from_slice(&self.bytes[p..p + c]);
            p += c;
        }
    }
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
    encode_desc(seed, DESC_MAGIC, seq, homes.len(), out, |out| {
        for (i, h) in homes.iter().enumerate() {
            put_u64(out, DESC_HEADER + i * 8, *h);
        }
    });
}

/// A descriptor block: header, the entries `fill` writes, checksum.
fn encode_desc(seed: u32, magic: u32, seq: u64, n: usize, out: &mut [u8], fill: impl FnOnce(&mut [u8])) {
    out.fill(0);
    put_u32(out, 0, magic);
    put_u32(out, 4, n as u32);
    put_u64(out, 8, seq);
    fill(out);
    let c = crc_skipping(seed, out, 28);
    put_u32(out, 28, c);
}

/// Encodes a region descriptor of `(home, chunk map)` entries for record
/// `seq` into a whole block.
///
/// # Panics
/// If `entries` is empty, holds more than [`region_desc_capacity`] entries or
/// an empty map (a descriptor like that would not decode).
pub fn encode_region_descriptor(seed: u32, seq: u64, entries: &[(u64, u64)], out: &mut [u8]) {
    encode_region(seed, REGION_DESC_MAGIC, seq, entries, 0, out);
}

/// A region descriptor block of either kind: `stored` is the compressed
/// descriptor's frame length (0, the reserved field, for a plain one).
fn encode_region(seed: u32, magic: u32, seq: u64, entries: &[(u64, u64)], stored: u32, out: &mut [u8]) {
    assert!(
        !entries.is_empty() && entries.len() <= region_desc_capacity(out.len()) && entries.iter().all(|e| e.1 != 0),
        "encoder bug: region descriptor of {} entries in a {}-byte block",
        entries.len(),
        out.len()
    );
    encode_desc(seed, magic, seq, entries.len(), out, |out| {
        put_u32(out, STORED_OFF, stored);
        for (i, (home, map)) in entries.iter().enumerate() {
            put_u64(out, DESC_HEADER + i * 16, *home);
            put_u64(out, DESC_HEADER + i * 16 + 8, *map);
        }
    });
}

/// Encodes a compressed region descriptor of `(home, chunk map)` entries
/// for record `seq` whose chunks follow as a zstd frame of `stored` bytes
/// (see [`BodyCompressor`]).
///
/// # Panics
/// As [`encode_region_descriptor`], and if `stored` is 0 or not smaller than
/// the entries' logged bytes (a descriptor like that would not decode).
pub fn encode_compressed_region_descriptor(seed: u32, seq: u64, entries: &[(u64, u64)], stored: usize, out: &mut [u8]) {
    let raw: usize = entries.iter().map(|e| logged_bytes(out.len(), e.1)).sum();
    assert!(stored > 0 && stored < raw, "encoder bug: compressed body of {stored} bytes for {raw} bytes of chunks");
    encode_region(seed, ZREGION_DESC_MAGIC, seq, entries, stored as u32, out);
}

/// Compresses the logged chunks of one region descriptor for a compressed
/// descriptor (zstd, one frame; the context is kept between calls).
pub struct BodyCompressor {
    ctx: zstd::bulk::Compressor<'static>,
}

impl BodyCompressor {
    /// A compressor at zstd `level` (1: about 700 MB/s on this project's
    /// machine, chunks to a fifth); `None` if zstd refuses the level.
    pub fn new(level: i32) -> Option<BodyCompressor> {
        zstd::bulk::Compressor::new(level).ok().map(|ctx| BodyCompressor { ctx })
    }

    /// Appends `raw` compressed to `out` and returns the frame's length, or
    /// returns `None` (and leaves `out` as it was) when the frame would not
    /// be smaller than `raw`: the chunks are then logged as they are.
    pub fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        // The frame goes straight into `out`, into room one byte short of
        // `raw`: zstd fails when it does not fit.
        let at = out.len();
        out.resize(at + raw.len().checked_sub(1)?, 0);
        let n = self.ctx.compress_to_buffer(raw, &mut out[at..]).ok().filter(|n| *n > 0);
        out.truncate(at + n.unwrap_or(0));
        n
    }
}

/// The logged chunks of a compressed body: `stored` bytes of zstd frame
/// that must expand to exactly `raw` bytes; `None` if they do not.
fn expand_body(frame: &[u8], raw: usize) -> Option<Vec<u8>> {
    let out = zstd::bulk::decompress(frame, raw).ok()?;
    (out.len() == raw).then_some(out)
}

/// Decodes a descriptor (any kind) expected to belong to record `seq`
/// into `(home, chunk map)` entries (whole-block entries have [`WHOLE`]);
/// `None` if the block is not a valid descriptor of that record (end of log).
pub fn decode_descriptor(seed: u32, seq: u64, b: &[u8]) -> Option<Vec<(u64, u64)>> {
    let magic = get_u32(b, 0);
    if ![DESC_MAGIC, REGION_DESC_MAGIC, ZREGION_DESC_MAGIC].contains(&magic)
        || get_u64(b, 8) != seq
        || get_u32(b, 28) != crc_skipping(seed, b, 28)
    {
        return None;
    }
    let n = get_u32(b, 4) as usize;
    if magic == DESC_MAGIC {
        if n == 0 || n > desc_capacity(b.len()) {
            return None;
        }
        return Some((0..n).map(|i| (get_u64(b, DESC_HEADER + i * 8), WHOLE)).collect());
    }
    if n == 0 || n > region_desc_capacity(b.len()) {
        return None;
    }
    let entries: Vec<(u64, u64)> =
        (0..n).map(|i| (get_u64(b, DESC_HEADER + i * 16), get_u64(b, DESC_HEADER + i * 16 + 8))).collect();
    if entries.iter().any(|e| e.1 == 0) {
        return None;
    }
    if magic == ZREGION_DESC_MAGIC {
        let raw: usize = entries.iter().map(|e| logged_bytes(b.len(), e.1)).sum();
        let stored = get_u32(b, STORED_OFF) as usize;
        if stored == 0 || stored >= raw {
            return None;
        }
    }
    Some(entries)
}

/// Bytes of body that follow the (valid) descriptor `b` of `entries`:
/// whole-block descriptors a block per entry; region descriptors the logged
/// chunks; compressed ones their frame. Padded to whole blocks after it.
fn body_bytes(b: &[u8], entries: &[(u64, u64)]) -> usize {
    match get_u32(b, 0) {
        DESC_MAGIC => entries.len() * b.len(),
        ZREGION_DESC_MAGIC => get_u32(b, STORED_OFF) as usize,
        _ => entries.iter().map(|e| logged_bytes(b.len(), e.1)).sum(),
    }
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
    matches!(get_u32(b, 0), DESC_MAGIC | REGION_DESC_MAGIC | ZREGION_DESC_MAGIC | COMMIT_MAGIC).then(|| get_u64(b, 8))
}

/// Where the journal region is, and how big the image is: what the record
/// walk needs to know besides the blocks themselves.
///
/// The region's blocks, in ring order: `first` blocks from `start` (in group
/// 0), then, in each group the journal continues into
/// (`INCOMPAT_JOURNAL_GROUPS`), the group's blocks past its `skip` blocks of
/// metadata. Without that feature `first == blocks` and the region is one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalRegion {
    /// First block of the region (the journal superblock).
    pub start: u64,
    /// Blocks of the region, journal superblock included.
    pub blocks: u64,
    /// Blocks of the whole image.
    pub total_blocks: u64,
    /// Blocks of the region in group 0, from `start`.
    pub first: u64,
    /// Blocks per group.
    pub bpg: u64,
    /// Metadata blocks at the start of each group the journal continues into.
    pub skip: u64,
}

impl JournalRegion {
    /// The journal region of a (decoded, hence validated) superblock.
    pub fn of(sb: &Superblock) -> JournalRegion {
        let bpg = u64::from(sb.blocks_per_group);
        JournalRegion {
            start: sb.journal_start,
            blocks: sb.journal_blocks,
            total_blocks: sb.total_blocks,
            first: sb.journal_blocks_in_group0(),
            bpg,
            skip: bpg - sb.journal_segment_blocks(),
        }
    }

    /// A region that is one run of `blocks` blocks at `start`.
    pub const fn contiguous(start: u64, blocks: u64, total_blocks: u64) -> JournalRegion {
        JournalRegion { start, blocks, total_blocks, first: blocks, bpg: u64::MAX, skip: 0 }
    }

    /// Blocks of the region in each group after group 0.
    fn segment(&self) -> u64 {
        self.bpg - self.skip
    }

    /// True if `blk` lies inside the journal region.
    pub fn contains(&self, blk: u64) -> bool {
        if blk >= self.start && blk - self.start < self.first {
            return true;
        }
        if self.first == self.blocks || blk < self.bpg {
            return false;
        }
        let groups = (self.blocks - self.first) / self.segment();
        let g = blk / self.bpg;
        g >= 1 && g <= groups && blk % self.bpg >= self.skip
    }

    /// True if a record may name `home` as a home block: inside the image
    /// and outside the journal region.
    pub fn valid_home(&self, home: u64) -> bool {
        home < self.total_blocks && !self.contains(home)
    }

    /// Absolute block number of ring position `off` (`off < blocks`).
    pub fn block_of(&self, off: u64) -> u64 {
        if off < self.first {
            return self.start + off;
        }
        let r = off - self.first;
        let g = 1 + r / self.segment();
        g * self.bpg + self.skip + r % self.segment()
    }

    /// How many blocks from ring position `off` on (at most `n`) lie in one
    /// run on the device: up to the end of the region or of its part in a
    /// group.
    pub fn run(&self, off: u64, n: u64) -> u64 {
        let end = if off < self.first {
            self.first
        } else {
            let r = off - self.first;
            off + self.segment() - r % self.segment()
        };
        n.min(end.min(self.blocks) - off)
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
    /// The changes in log order, to apply in that order (a later patch of
    /// the same block goes over an earlier one).
    pub patches: Vec<Patch>,
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
    /// The compressed body after the descriptor at `off` does not expand to
    /// the chunks its entries name, though the record's checksums match.
    BadBody { off: u64 },
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
/// `descriptor | body... | descriptor | body... | commit`, every
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
    let mut parts: Vec<Part> = Vec::new();
    loop {
        if used >= limit {
            return Ok(Walk::End(LogEnd::TooLong));
        }
        let blk = read(off)?;
        if !parts.is_empty() {
            if let Some((total, body)) = decode_commit(seed, pos.seq, &blk) {
                if u64::from(total) != used + 1 || body != crc {
                    return Ok(Walk::End(LogEnd::BadCommit { off }));
                }
                let next = LogPos { seq: pos.seq.wrapping_add(1), off: region.next(off, 1) };
                return Ok(match patches_of(blk.len(), parts) {
                    Ok(patches) => Walk::Record(Record { patches, next }),
                    Err(end) => Walk::End(end),
                });
            }
        }
        let Some(entries) = decode_descriptor(seed, pos.seq, &blk) else {
            return Ok(Walk::End(LogEnd::NoDescriptor { off }));
        };
        if let Some(&(home, _)) = entries.iter().find(|e| !region.valid_home(e.0)) {
            return Ok(Walk::End(LogEnd::ImpossibleHome { off, home }));
        }
        let bs = blk.len();
        let stored = body_bytes(&blk, &entries);
        let nbody = stored.div_ceil(bs) as u64;
        let compressed = get_u32(&blk, 0) == ZREGION_DESC_MAGIC;
        let at = off;
        crc = body_crc_append(crc, &blk);
        off = region.next(off, 1);
        used += 1;
        if used + nbody >= limit {
            return Ok(Walk::End(LogEnd::TooLong));
        }
        let mut body = Vec::with_capacity(nbody as usize * bs);
        for _ in 0..nbody {
            let b = read(off)?;
            crc = body_crc_append(crc, &b);
            body.extend_from_slice(&b);
            off = region.next(off, 1);
            used += 1;
        }
        body.truncate(stored);
        parts.push(Part { off: at, entries, compressed, body });
    }
}

/// A descriptor [`read_record`] read: its ring position, entries, whether
/// its body is compressed, and the body (expanded once the commit verifies).
struct Part {
    off: u64,
    entries: Vec<(u64, u64)>,
    compressed: bool,
    body: Vec<u8>,
}

/// The patches of a verified record's descriptors, in log order; a
/// compressed body that does not expand to its entries' chunks ends the log.
fn patches_of(bs: usize, parts: Vec<Part>) -> std::result::Result<Vec<Patch>, LogEnd> {
    let mut patches = Vec::new();
    for Part { off, entries, compressed, body } in parts {
        let raw: usize = entries.iter().map(|e| logged_bytes(bs, e.1)).sum();
        let body = if compressed { expand_body(&body, raw).ok_or(LogEnd::BadBody { off })? } else { body };
        let mut p = 0;
        for (home, map) in entries {
            let n = logged_bytes(bs, map);
            patches.push(Patch { home, map, bytes: body[p..p + n].to_vec() });
            p += n;
        }
    }
    Ok(patches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const BS: usize = 1024;
    const SEED: u32 = 0x1234_5678;
    const REGION: JournalRegion = JournalRegion::contiguous(10, 64, 1000);

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
        assert_eq!(
            r.patches.iter().map(|p| (p.home, p.bytes[0])).collect::<Vec<_>>(),
            vec![(100, 1), (0, 2), (101, 3)]
        );
        let Walk::Record(r) = walk(&ring, 8, 60) else { panic!("wrapped record not found") };
        assert_eq!(r.next, LogPos { seq: 9, off: 3 });
        assert_eq!(
            r.patches.iter().map(|p| (p.home, p.bytes[0])).collect::<Vec<_>>(),
            [(200, 4), (201, 5), (202, 6), (203, 7)]
        );
        assert_eq!(walk(&ring, 9, 3), Walk::End(LogEnd::NoDescriptor { off: 3 }));
        assert_eq!(walk(&ring, 8, 55), Walk::End(LogEnd::NoDescriptor { off: 55 }), "wrong sequence number");
    }

    #[test]
    fn records_with_several_descriptors() {
        // 130 images need two descriptors in 1 KiB blocks (124 each): 133 blocks.
        let big = JournalRegion::contiguous(10, 400, 1000);
        let images: Vec<(u64, u8)> = (0..130).map(|i| (500 + i, i as u8)).collect();
        let mut ring = HashMap::new();
        assert_eq!(write_record_in(&big, &mut ring, 3, 1, &images), 134);
        let w: std::result::Result<Walk, ()> =
            read_record(SEED, &big, LogPos { seq: 3, off: 1 }, |o| Ok(ring.get(&o).cloned().unwrap_or_default()));
        let Walk::Record(r) = w.unwrap() else { panic!("two-descriptor record not found") };
        assert_eq!(r.patches.iter().map(|p| (p.home, p.bytes[0])).collect::<Vec<_>>(), images);
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

    /// Writes a record of region descriptors: `(home, map, fill)` entries,
    /// each logged chunk filled with `fill`.
    fn write_region_record(ring: &mut HashMap<u64, Vec<u8>>, seq: u64, off: u64, entries: &[(u64, u64, u8)]) -> u64 {
        let mut off = off;
        let mut crc = body_seed(SEED, seq);
        let mut total = 1;
        for chunk in entries.chunks(region_desc_capacity(BS)) {
            let ents: Vec<(u64, u64)> = chunk.iter().map(|e| (e.0, e.1)).collect();
            let mut d = vec![0u8; BS];
            encode_region_descriptor(SEED, seq, &ents, &mut d);
            crc = body_crc_append(crc, &d);
            ring.insert(off, d);
            off = REGION.next(off, 1);
            total += 1;
            let mut body = Vec::new();
            for &(_, map, fill) in chunk {
                body.resize(body.len() + logged_bytes(BS, map), fill);
            }
            body.resize(body.len().div_ceil(BS) * BS, 0);
            for b in body.chunks(BS) {
                crc = body_crc_append(crc, b);
                ring.insert(off, b.to_vec());
                off = REGION.next(off, 1);
                total += 1;
            }
        }
        let mut c = vec![0u8; BS];
        encode_commit(SEED, seq, total, crc, &mut c);
        ring.insert(off, c);
        REGION.next(off, 1)
    }

    #[test]
    fn region_records_carry_only_the_logged_chunks() {
        let mut ring = HashMap::new();
        // 3 + 64 + 1 chunks of 16 bytes: 68 * 16 = 1088 bytes, two body blocks.
        let next =
            write_region_record(&mut ring, 9, 5, &[(100, 0b1011, 0xaa), (101, WHOLE, 0xbb), (100, 1 << 63, 0xcc)]);
        assert_eq!(next, 5 + 1 + 2 + 1);
        let Walk::Record(r) = walk(&ring, 9, 5) else { panic!("region record not found") };
        assert_eq!(r.next, LogPos { seq: 10, off: next });
        assert_eq!(r.patches.len(), 3);
        assert!(r.patches[1].is_whole() && !r.patches[0].is_whole());
        let mut block = vec![0u8; BS];
        for p in r.patches.iter().filter(|p| p.home == 100) {
            p.apply(&mut block);
        }
        let c = chunk_size(BS);
        for (i, chunk) in block.chunks(c).enumerate() {
            let want = match i {
                0 | 1 | 3 => 0xaa,
                63 => 0xcc,
                _ => 0,
            };
            assert!(chunk.iter().all(|b| *b == want), "chunk {i}");
        }
        // A damaged body byte breaks the commit's checksum.
        ring.get_mut(&7).unwrap()[3] ^= 1;
        assert_eq!(walk(&ring, 9, 5), Walk::End(LogEnd::BadCommit { off: 8 }));
        // An empty map cannot be decoded (the engine never writes one).
        let mut d = vec![0u8; BS];
        encode_region_descriptor(SEED, 1, &[(100, 1)], &mut d);
        d[DESC_HEADER + 8] = 0;
        let c = crc_skipping(SEED, &d, 28);
        put_u32(&mut d, 28, c);
        assert_eq!(decode_descriptor(SEED, 1, &d), None);
    }

    /// Writes a record of one compressed region descriptor of `(home, map,
    /// fill)` entries; returns the next position and the frame's length.
    fn write_compressed_record(
        ring: &mut HashMap<u64, Vec<u8>>,
        seq: u64,
        off: u64,
        entries: &[(u64, u64, u8)],
    ) -> (u64, usize) {
        let ents: Vec<(u64, u64)> = entries.iter().map(|e| (e.0, e.1)).collect();
        let mut raw = Vec::new();
        for &(_, map, fill) in entries {
            raw.resize(raw.len() + logged_bytes(BS, map), fill);
        }
        let mut body = Vec::new();
        let stored = BodyCompressor::new(1).unwrap().compress(&raw, &mut body).expect("runs of one byte compress");
        assert_eq!(body.len(), stored);
        let mut d = vec![0u8; BS];
        encode_compressed_region_descriptor(SEED, seq, &ents, stored, &mut d);
        let mut crc = body_crc_append(body_seed(SEED, seq), &d);
        ring.insert(off, d);
        let mut off = REGION.next(off, 1);
        body.resize(body.len().div_ceil(BS) * BS, 0);
        for b in body.chunks(BS) {
            crc = body_crc_append(crc, b);
            ring.insert(off, b.to_vec());
            off = REGION.next(off, 1);
        }
        let mut c = vec![0u8; BS];
        encode_commit(SEED, seq, (body.len() / BS + 2) as u32, crc, &mut c);
        ring.insert(off, c);
        (REGION.next(off, 1), stored)
    }

    #[test]
    fn compressed_records_expand_to_the_same_patches() {
        let entries = [(100, 0b1011, 0xaa), (101, WHOLE, 0xbb), (100, 1 << 63, 0xcc)];
        let mut plain = HashMap::new();
        let plain_next = write_region_record(&mut plain, 9, 5, &entries);
        let mut ring = HashMap::new();
        let (next, stored) = write_compressed_record(&mut ring, 9, 5, &entries);
        assert!(stored < 68 * 16 / 4, "1,088 bytes of three runs took {stored}");
        assert_eq!(next, 5 + 1 + 1 + 1, "descriptor, one block of frame, commit");
        let (Walk::Record(p), Walk::Record(z)) = (walk(&plain, 9, 5), walk(&ring, 9, 5)) else {
            panic!("records not found")
        };
        assert_eq!(z.patches, p.patches);
        assert_eq!((z.next, p.next.off), (LogPos { seq: 10, off: next }, plain_next));
    }

    #[test]
    fn damaged_compressed_records_end_the_log() {
        let entries = [(100, WHOLE, 0xaa), (101, 0b11, 0xbb)];
        let mut ring = HashMap::new();
        let (_, stored) = write_compressed_record(&mut ring, 9, 5, &entries);
        // A damaged frame byte breaks the commit's checksum first.
        let mut bad = ring.clone();
        bad.get_mut(&6).unwrap()[stored / 2] ^= 0x40;
        assert_eq!(walk(&bad, 9, 5), Walk::End(LogEnd::BadCommit { off: 7 }));
        // A frame that does not expand to the entries' chunks, with every
        // checksum right (an encoder bug), ends the log too, without a panic.
        for garbage in [vec![0u8; stored], vec![0xffu8; stored], (0..stored).map(|i| i as u8).collect()] {
            let mut bad = ring.clone();
            bad.get_mut(&6).unwrap()[..stored].copy_from_slice(&garbage);
            let crc = [&bad[&5], &bad[&6]].iter().fold(body_seed(SEED, 9), |c, b| body_crc_append(c, b));
            encode_commit(SEED, 9, 3, crc, bad.get_mut(&7).unwrap());
            assert_eq!(walk(&bad, 9, 5), Walk::End(LogEnd::BadBody { off: 5 }));
        }
        // A stored length of 0, or not below the chunks', is no descriptor.
        for stored in [0u32, 64 * 16 + 2 * 16, u32::MAX] {
            let mut d = ring[&5].clone();
            put_u32(&mut d, STORED_OFF, stored);
            let c = crc_skipping(SEED, &d, 28);
            put_u32(&mut d, 28, c);
            assert_eq!(decode_descriptor(SEED, 9, &d), None, "stored {stored}");
        }
    }

    #[test]
    fn incompressible_chunks_are_not_compressed() {
        let mut z = BodyCompressor::new(1).unwrap();
        let mut rng = crate::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
        let raw: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
        let mut out = vec![1, 2, 3];
        assert_eq!(z.compress(&raw, &mut out), None);
        assert_eq!(out, [1, 2, 3], "nothing appended");
        assert_eq!(z.compress(&[], &mut out), None);
        assert!(z.compress(&[7u8; 4096], &mut out).is_some_and(|n| n == out.len() - 3 && n < 100));
    }

    #[test]
    fn a_region_body_longer_than_the_ring_ends_the_log() {
        let mut ring = HashMap::new();
        let entries: Vec<(u64, u64)> = (0..62).map(|i| (100 + i, WHOLE)).collect();
        let mut d = vec![0u8; BS];
        encode_region_descriptor(SEED, 1, &entries, &mut d);
        ring.insert(1, d);
        assert_eq!(walk(&ring, 1, 1), Walk::End(LogEnd::TooLong));
    }

    #[test]
    fn chunk_maps() {
        let bs = 4096;
        assert_eq!(chunk_size(bs), 64);
        assert_eq!(range_chunks(bs, 0, 0), 0);
        assert_eq!(range_chunks(bs, 0, 1), 1);
        assert_eq!(range_chunks(bs, 256, 256), 0b1111 << 4);
        assert_eq!(range_chunks(bs, 63, 2), 0b11);
        assert_eq!(range_chunks(bs, 0, bs), WHOLE);
        assert_eq!(range_chunks(bs, 4032, 64), 1 << 63);
        let old = vec![0u8; bs];
        let mut new = old.clone();
        assert_eq!(changed_chunks(bs, 0, &old, &new), 0);
        new[0] = 1;
        new[130] = 1;
        new[4095] = 1;
        assert_eq!(changed_chunks(bs, 0, &old, &new), 1 | 1 << 2 | 1 << 63);
        // A slice starting mid-chunk: bytes 100..300 of the block.
        assert_eq!(changed_chunks(bs, 100, &old[100..300], &new[100..300]), 1 << 2);
        // Every single-byte change, at any start and length of the slice,
        // lands in its own chunk and nowhere else.
        for (at, len) in [(0, bs), (3, 200), (61, 5), (64, 64), (4090, 6), (1000, 1)] {
            for b in at..at + len {
                let mut one = old.clone();
                one[b] = 0x80;
                let want = 1u64 << (b / 64);
                assert_eq!(
                    changed_chunks(bs, at, &old[at..at + len], &one[at..at + len]),
                    want,
                    "byte {b} of {at}+{len}"
                );
            }
        }
        let mut out = Vec::new();
        gather_chunks(&new, 1 | 1 << 63, &mut out);
        assert_eq!(out.len(), 128);
        assert_eq!((out[0], out[127]), (1, 1));
        let p = Patch { home: 0, map: 1 | 1 << 63, bytes: out };
        let mut b = vec![9u8; bs];
        p.apply(&mut b);
        assert_eq!((b[0], b[1], b[64], b[4095]), (1, 0, 9, 1));
    }

    #[test]
    #[should_panic(expected = "descriptor of 125 home blocks")]
    fn overfull_descriptor_is_a_bug() {
        encode_descriptor(SEED, 1, &[1; 125], &mut [0u8; BS]);
    }

    #[test]
    fn a_region_across_groups_maps_positions_past_each_groups_metadata() {
        // 5 blocks in group 0 from block 10, then groups 1 and 2 of 16
        // blocks past their 3 blocks of metadata (13 each).
        let r = JournalRegion { start: 10, blocks: 31, total_blocks: 64, first: 5, bpg: 16, skip: 3 };
        let blocks: Vec<u64> = (0..31).map(|o| r.block_of(o)).collect();
        let want: Vec<u64> = (10..15).chain(19..32).chain(35..48).collect();
        assert_eq!(blocks, want);
        for b in 0..64 {
            assert_eq!(r.contains(b), want.contains(&b), "block {b}");
        }
        // Group 1's and 2's metadata are homes; the region's blocks are not.
        assert!(r.valid_home(16) && r.valid_home(34) && r.valid_home(48));
        assert!(!r.valid_home(19) && !r.valid_home(47));
        // Runs end where a part of the region ends.
        assert_eq!((r.run(3, 10), r.run(5, 100), r.run(17, 100), r.run(18, 4), r.run(30, 9)), (2, 13, 1, 4, 1));
        // One run without the feature.
        let c = JournalRegion::contiguous(10, 31, 64);
        assert_eq!((c.block_of(30), c.run(1, 100), c.contains(41)), (40, 30, false));
    }
}
