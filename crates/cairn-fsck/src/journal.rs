//! Journal replay, fsck's own: the image is checked as the engine would find
//! it after mounting.
//!
//! ## Purpose
//! A crash (or a process that exits without unmounting) leaves committed
//! checkpoints in the journal whose blocks may not all have reached their
//! home locations. Such an image is *not* corrupt: the next mount replays
//! the journal. So, like e2fsck, fsck replays first and checks the result.
//!
//! The replay follows the format's rules, not the engine's code. The record
//! walk — verifying one record and finding where the next one starts — is
//! `cairn_format::journal::read_record`, defined once in the format crate
//! and shared with the engine; what to do with the records (below) is
//! fsck's own. The rules the walk implements:
//!
//! * the journal superblock gives the tail: `(tail_seq, tail_off)`;
//! * a record is `descriptor | body... | descriptor | body... | commit`,
//!   every descriptor carrying the record's sequence number (a body is the
//!   changed chunks of the descriptor's blocks, or whole images in the first
//!   format); the commit block
//!   holds the record's length and a crc32c chained over every earlier block
//!   of the record (seeded by `body_seed(seed, seq)`);
//! * ring positions run `1 ..= journal_blocks - 1` and wrap;
//! * records are applied in order while each decodes with the expected
//!   sequence number and matching checksum; the first that does not ends the
//!   log (it was torn by the crash) — unless a record with a later sequence
//!   number verifies somewhere after it: then the log is damaged in the
//!   middle (`cairn_format::journal_damage`), a problem; the records before
//!   the damage are applied and the rest dropped. A record longer than the ring, or one
//!   naming a home block outside the image or inside the journal, also ends
//!   the log (the engine's rule too: such a record cannot be ours).
//!
//! ## What it writes
//! The patches are applied in log order, each over the block as the earlier
//! ones (or the home block) left it.
//! Without `--repair`: nothing. The rebuilt blocks go into the [`Image`]
//! overlay, so every later read sees the replayed state.
//! With `--repair`: the rebuilt blocks are written home, the image is
//! fsynced, then the journal superblock is rewritten with the tail after the
//! last replayed record and a sequence number past every record in the ring
//! (what mount does), and fsynced again.
//!
//! ## What it concludes
//! How many records and blocks were replayed (a note, not a problem), or a
//! problem when the journal superblock itself is damaged (the engine refuses
//! to mount then); a repair rewrites it with an empty log whose sequence
//! number is past every record still in the ring, so no stale record can ever
//! be replayed.

use crate::error::FsckError;
use crate::image::Image;
use crate::problems::Code;
use crate::report::{num, Report};
use cairn_format::journal::{claimed_seq, read_record, JournalRegion, JournalSuper, LogEnd, LogPos, Patch, Walk};
use cairn_format::journal_damage::{damage_message, find_later_records, restart_seq};
use cairn_format::superblock::Superblock;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// Highest sequence number any descriptor or commit block in the ring claims.
fn max_seq_in_ring(img: &mut Image, region: &JournalRegion) -> std::io::Result<u64> {
    let mut max = 0u64;
    let bs = img.block_size() as u64;
    let chunk = (1 << 20) / bs;
    let mut off = 1;
    while off < region.blocks {
        let n = region.run(off, chunk);
        let buf = img.read_blocks(region.block_of(off), n)?;
        for b in buf.chunks(bs as usize) {
            max = max.max(claimed_seq(b).unwrap_or(0));
        }
        off += n;
    }
    Ok(max)
}

/// Rewrites the journal superblock with an empty log at `tail`, durably.
fn write_tail(img: &mut Image, region: &JournalRegion, seed: u32, tail: LogPos) -> std::io::Result<()> {
    let mut b = vec![0u8; img.block_size()];
    JournalSuper { tail_seq: tail.seq, tail_off: tail.off }.encode(seed, &mut b);
    img.write_block(region.start, &b)?;
    img.sync()
}

/// Replays the journal of `sb` (see the module essay). Returns true when
/// records were replayed (the superblock must then be re-read).
pub fn replay(img: &mut Image, sb: &Superblock, seed: u32, report: &mut Report) -> Result<bool, FsckError> {
    let repair = img.writable();
    // Homes may lie past the superblock's end, up to the image's: an online
    // grow logs its new groups before its superblock reaches home (as the
    // engine's replay, `journal::recovery`).
    let mut region = JournalRegion::of(sb);
    region.total_blocks = region.total_blocks.max(img.size() / u64::from(sb.block_size()));
    let jb = img.read_block(region.start)?;
    let jsb = match JournalSuper::decode(seed, region.start, &jb, region.blocks) {
        Ok(j) => j,
        Err(e) => {
            let msg = format!(
                "journal superblock at block {} is damaged ({e}); the journal cannot be replayed",
                region.start
            );
            if repair {
                let seq = max_seq_in_ring(img, &region)?.saturating_add(1).max(1);
                let mut b = vec![0u8; img.block_size()];
                JournalSuper { tail_seq: seq, tail_off: 1 }.encode(seed, &mut b);
                img.write_block(region.start, &b)?;
                img.sync()?;
                report.push(Code::JournalSuperDamaged, format!("{msg}; rewritten as an empty journal"), true);
            } else {
                report.push(Code::JournalSuperDamaged, msg, false);
            }
            return Ok(false);
        }
    };
    let mut pos = LogPos { seq: jsb.tail_seq, off: jsb.tail_off };
    let mut records = 0u64;
    let mut blocks = 0u64;
    let mut replayed: Vec<Patch> = Vec::new();
    // Each record takes at least two ring blocks and sequence numbers only
    // grow, so a log longer than the ring is impossible; the bound guards
    // against pathological images.
    let why = loop {
        match read_record(seed, &region, pos, |off| img.read_block(region.block_of(off)))? {
            Walk::Record(rec) if records < region.blocks => {
                records += 1;
                blocks += rec.patches.len() as u64;
                replayed.extend(rec.patches);
                pos = rec.next;
            }
            Walk::Record(_) => break LogEnd::TooLong,
            Walk::End(why) => break why,
        }
    };
    let later = find_later_records(seed, &region, pos, |off| img.read_block(region.block_of(off)))?;
    if let Some(later) = &later {
        let msg = damage_message(pos, why, later);
        if repair {
            report.push(
                Code::JournalRecordDamaged,
                format!(
                    "{msg}; replayed the {} record(s) before the damage and dropped the rest (the checks that follow repair what they lost)",
                    num(records)
                ),
                true,
            );
        } else {
            report.push(
                Code::JournalRecordDamaged,
                format!("{msg}; the image is checked as if the {} record(s) before it were replayed", num(records)),
                false,
            );
        }
    }
    // The log restarts past every sequence number in the ring (the
    // engine's rule), and past every later record of a damaged log.
    let restart =
        LogPos { seq: restart_seq(&region, pos).max(later.map_or(0, |l| l.max_seq.saturating_add(1))), off: pos.off };
    if records == 0 {
        if repair && later.is_some() {
            write_tail(img, &region, seed, restart)?;
        }
        return Ok(false);
    }
    report.journal_records_replayed = records;
    report.journal_blocks_replayed = blocks;
    // Each patch over the block as the earlier ones left it (whole-block
    // patches need no read); the result goes home or into the overlay.
    let mut built: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for p in &replayed {
        let block = match built.entry(p.home) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                e.insert(if p.is_whole() { vec![0u8; img.block_size()] } else { img.read_block(p.home)? })
            }
        };
        p.apply(block);
    }
    if repair {
        for (home, data) in &built {
            img.write_block(*home, data)?;
        }
        img.sync()?;
        write_tail(img, &region, seed, restart)?;
        report.note(format!(
            "journal: replayed {} committed checkpoint(s), {} blocks, into the image",
            num(records),
            num(blocks)
        ));
    } else {
        for (home, data) in built {
            img.overlay_block(home, data);
        }
        report.note(format!(
            "journal: {} committed checkpoint(s) ({} blocks) await replay; checked as if replayed (the image was not changed)",
            num(records),
            num(blocks)
        ));
    }
    Ok(true)
}
