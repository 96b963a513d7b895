//! Journal replay, fsck's own: the image is checked as the engine would find
//! it after mounting.
//!
//! ## Purpose
//! A crash (or a process that exits without unmounting) leaves committed
//! checkpoints in the journal whose blocks may not all have reached their
//! home locations. Such an image is *not* corrupt: the next mount replays
//! the journal. So, like e2fsck, fsck replays first and checks the result.
//!
//! The replay is written here from the format's record definitions
//! (`cairn_format::journal`) and follows the rules stated there, not the
//! engine's code:
//!
//! * the journal superblock gives the tail: `(tail_seq, tail_off)`;
//! * a record is `descriptor | images... | descriptor | images... | commit`,
//!   every descriptor carrying the record's sequence number; the commit block
//!   holds the record's length and a crc32c chained over every earlier block
//!   of the record (seeded by `body_seed(seed, seq)`);
//! * ring positions run `1 ..= journal_blocks - 1` and wrap;
//! * records are applied in order while each decodes with the expected
//!   sequence number and matching checksum; the first that does not ends the
//!   log (it was torn by the crash). A record longer than the ring, or one
//!   naming a home block outside the image or inside the journal, also ends
//!   the log (the engine's rule too: such a record cannot be ours).
//!
//! ## What it writes
//! Without `--repair`: nothing. Replayed images go into the [`Image`]
//! overlay, so every later read sees the replayed state.
//! With `--repair`: the images are written home in log order, the image is
//! fsynced, then the journal superblock is rewritten with the tail after the
//! last replayed record (exactly what mount does), and fsynced again.
//!
//! ## What it concludes
//! How many records and blocks were replayed (a note, not a problem), or a
//! problem when the journal superblock itself is damaged (the engine refuses
//! to mount then); a repair rewrites it with an empty log whose sequence
//! number is past every record still in the ring, so no stale record can ever
//! be replayed.

use crate::image::Image;
use crate::report::{num, Pass, Report};
use crate::FsckError;
use cairn_format::codec::get_u64;
use cairn_format::journal::*;
use cairn_format::superblock::Superblock;

/// A position in the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    seq: u64,
    off: u64,
}

struct Ring<'a, 'i> {
    img: &'a mut Image<'i>,
    start: u64,
    blocks: u64,
    seed: u32,
    total_blocks: u64,
}

impl Ring<'_, '_> {
    fn next(&self, off: u64, n: u64) -> u64 {
        let ring = self.blocks - 1;
        (off - 1 + n) % ring + 1
    }

    fn read(&mut self, off: u64) -> std::io::Result<Vec<u8>> {
        self.img.read_block(self.start + off)
    }

    /// The record at `pos`: its (home, image) pairs and the position after it;
    /// `None` at the end of the log.
    #[allow(clippy::type_complexity)]
    fn record(&mut self, pos: Pos) -> std::io::Result<Option<(Vec<(u64, Vec<u8>)>, Pos)>> {
        let limit = self.blocks - 1;
        let mut off = pos.off;
        let mut used = 0u64;
        let mut crc = body_seed(self.seed, pos.seq);
        let mut images: Vec<(u64, Vec<u8>)> = Vec::new();
        loop {
            if used >= limit {
                return Ok(None);
            }
            let blk = self.read(off)?;
            if !images.is_empty() {
                if let Some((total, body)) = decode_commit(self.seed, pos.seq, &blk) {
                    if u64::from(total) != used + 1 || body != crc {
                        return Ok(None);
                    }
                    return Ok(Some((images, Pos { seq: pos.seq.wrapping_add(1), off: self.next(off, 1) })));
                }
            }
            let Some(homes) = decode_descriptor(self.seed, pos.seq, &blk) else { return Ok(None) };
            crc = body_crc_append(crc, &blk);
            off = self.next(off, 1);
            used += 1;
            for home in homes {
                if used >= limit {
                    return Ok(None);
                }
                let img = self.read(off)?;
                crc = body_crc_append(crc, &img);
                off = self.next(off, 1);
                used += 1;
                let in_journal = home >= self.start && home < self.start + self.blocks;
                if home >= self.total_blocks || in_journal {
                    return Ok(None);
                }
                images.push((home, img));
            }
        }
    }

    /// Highest sequence number any descriptor or commit block in the ring claims.
    fn max_seq_in_ring(&mut self) -> std::io::Result<u64> {
        let mut max = 0u64;
        let bs = self.img.block_size() as u64;
        let chunk = (1 << 20) / bs;
        let mut off = 1;
        while off < self.blocks {
            let n = chunk.min(self.blocks - off);
            let buf = self.img.read_blocks(self.start + off, n)?;
            for b in buf.chunks(bs as usize) {
                let magic = cairn_format::codec::get_u32(b, 0);
                if magic == DESC_MAGIC || magic == COMMIT_MAGIC {
                    max = max.max(get_u64(b, 8));
                }
            }
            off += n;
        }
        Ok(max)
    }
}

/// Replays the journal of `sb` (see the module essay). Returns true when
/// records were replayed (the superblock must then be re-read).
pub fn replay(img: &mut Image, sb: &Superblock, seed: u32, report: &mut Report) -> Result<bool, FsckError> {
    let repair = img.writable();
    let mut ring =
        Ring { start: sb.journal_start, blocks: sb.journal_blocks, seed, total_blocks: sb.total_blocks, img };
    let jb = ring.img.read_block(ring.start)?;
    let jsb = match JournalSuper::decode(seed, ring.start, &jb, ring.blocks) {
        Ok(j) => j,
        Err(e) => {
            let msg =
                format!("journal superblock at block {} is damaged ({e}); the journal cannot be replayed", ring.start);
            if repair {
                let seq = ring.max_seq_in_ring()?.saturating_add(1).max(1);
                let mut b = vec![0u8; ring.img.block_size()];
                JournalSuper { tail_seq: seq, tail_off: 1 }.encode(seed, &mut b);
                ring.img.write_block(ring.start, &b)?;
                ring.img.sync()?;
                report.push(Pass::Journal, format!("{msg}; rewritten as an empty journal"), true);
            } else {
                report.push(Pass::Journal, msg, false);
            }
            return Ok(false);
        }
    };
    let mut pos = Pos { seq: jsb.tail_seq, off: jsb.tail_off };
    let mut records = 0u64;
    let mut blocks = 0u64;
    let mut replayed: Vec<(u64, Vec<u8>)> = Vec::new();
    // Each record takes at least two ring blocks and sequence numbers only
    // grow, so a log longer than the ring is impossible; the bound guards
    // against pathological images.
    while records < ring.blocks {
        let Some((images, next)) = ring.record(pos)? else { break };
        records += 1;
        blocks += images.len() as u64;
        replayed.extend(images);
        pos = next;
    }
    if records == 0 {
        return Ok(false);
    }
    report.journal_records_replayed = records;
    report.journal_blocks_replayed = blocks;
    if repair {
        for (home, data) in &replayed {
            ring.img.write_block(*home, data)?;
        }
        ring.img.sync()?;
        let mut b = vec![0u8; ring.img.block_size()];
        JournalSuper { tail_seq: pos.seq, tail_off: pos.off }.encode(seed, &mut b);
        ring.img.write_block(ring.start, &b)?;
        ring.img.sync()?;
        report.note(format!(
            "journal: replayed {} committed checkpoint(s), {} blocks, into the image",
            num(records),
            num(blocks)
        ));
    } else {
        for (home, data) in replayed {
            ring.img.overlay_block(home, data);
        }
        report.note(format!(
            "journal: {} committed checkpoint(s) ({} blocks) await replay; checked as if replayed (the image was not changed)",
            num(records),
            num(blocks)
        ));
    }
    Ok(true)
}
