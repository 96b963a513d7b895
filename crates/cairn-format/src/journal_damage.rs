//! Telling the torn end of the log from damage in its middle.
//!
//! ## Why
//! The record walk ([`read_record`]) ends the log at the first record that
//! does not verify. After a crash that is right: the engine writes a record,
//! flushes, writes its commit block, flushes, and only then starts the next
//! record, so a record that is torn can only be the last one ever written.
//! It follows that a record which verifies *after* the end of the log, with a
//! later sequence number, can exist only if a record that was once whole (its
//! commit block was durable before the next record was begun) no longer
//! verifies: the log was damaged in the middle. Replaying the records before
//! the damage and dropping the ones after it would silently lose checkpoints
//! that `fsync` had promised, and a log that restarted at the damaged
//! record's position would let the old records after it verify again once new
//! records of the same length covered the damaged one.
//!
//! So the engine (at mount) and the checker look, after the end, for a
//! record with a later sequence number that verifies ([`find_later_records`]).
//! If there is one the log is damaged: mount refuses, and `cairn fsck
//! --repair` replays the verified records before the damage (what is provably
//! in order), then restarts the log past every sequence number in the ring.
//!
//! ## Why stale records cannot be mistaken for new ones
//! Every read-write mount restarts the log at [`restart_seq`]:
//! `end + journal_blocks`, made durable in the journal superblock before
//! anything else is written to the log. Records left in the ring from
//! before the end (the torn one included) have numbers at or below the
//! end's; so does any record that a damaged log leaves after its damage
//! once that damage has been dealt with, as long as it was written within
//! one lap of the ring after the end — and a lap holds fewer than
//! `journal_blocks` records, each at least two blocks long. A record
//! written after the restart therefore has a number no stale record has:
//! a stale record can neither continue the new log (restarting at the
//! damaged record's own number, as cairn once did, let old records verify
//! again once new records of the same length had covered the damaged one)
//! nor be taken for a later record by this scan.
//!
//! ## Cost
//! One read of every ring block after the end (the whole ring after a clean
//! unmount), and a full record walk only for the few blocks that are
//! descriptors whose own checksum verifies with a later sequence number.

use crate::checksum::crc_skipping;
use crate::codec::{get_u32, get_u64};
use crate::journal::{
    read_record, JournalRegion, LogEnd, LogPos, Walk, DESC_MAGIC, REGION_DESC_MAGIC, ZREGION_DESC_MAGIC,
};

/// Records that verify after the end of the log, with sequence numbers past
/// the end's: proof that the log was damaged at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaterRecords {
    /// The first such record found, scanning the ring from the end onwards.
    pub first: LogPos,
    /// How many were found.
    pub count: u64,
    /// The highest sequence number among them.
    pub max_seq: u64,
}

/// A log whose walk ended at `end` (for reason `why`) although later records
/// verify: the message mount and fsck give.
pub fn damage_message(end: LogPos, why: LogEnd, later: &LaterRecords) -> String {
    format!(
        "journal damaged: record {} at ring block {} does not verify ({}), but {} later record(s) do \
         (the first is record {} at ring block {}); the checkpoints after the damage cannot be replayed in order",
        end.seq,
        end.off,
        describe_end(why),
        later.count,
        later.first.seq,
        later.first.off
    )
}

/// Why a walk ended, in words.
pub fn describe_end(why: LogEnd) -> String {
    match why {
        LogEnd::BadPosition => "the position is outside the ring".into(),
        LogEnd::NoDescriptor { off } => format!("block {off} is not a descriptor or commit block of the record"),
        LogEnd::BadCommit { off } => {
            format!("the commit block at {off} does not match the record's length or checksum")
        }
        LogEnd::TooLong => "the record would be longer than the ring".into(),
        LogEnd::BadBody { off } => format!("the compressed body after the descriptor at {off} does not expand"),
        LogEnd::ImpossibleHome { off, home } => {
            format!("the descriptor at {off} names home block {home}, inside the journal or past the image")
        }
    }
}

/// The sequence number a read-write mount restarts the log at when the walk
/// ended at `end` (see the module essay).
pub fn restart_seq(region: &JournalRegion, end: LogPos) -> u64 {
    end.seq.saturating_add(region.blocks)
}

/// The sequence number of `b` if it is a descriptor block (of any kind)
/// whose own checksum verifies; `None` otherwise.
pub fn verified_descriptor_seq(seed: u32, b: &[u8]) -> Option<u64> {
    if b.len() < 32 {
        return None;
    }
    let magic = get_u32(b, 0);
    if ![DESC_MAGIC, REGION_DESC_MAGIC, ZREGION_DESC_MAGIC].contains(&magic)
        || get_u32(b, 28) != crc_skipping(seed, b, 28)
    {
        return None;
    }
    Some(get_u64(b, 8))
}

/// Scans every ring position from `end.off` on (once round the ring) for
/// records that verify with a sequence number above `end.seq`. `read(off)`
/// returns the whole block at ring position `off`, as for [`read_record`].
pub fn find_later_records<E>(
    seed: u32,
    region: &JournalRegion,
    end: LogPos,
    mut read: impl FnMut(u64) -> Result<Vec<u8>, E>,
) -> Result<Option<LaterRecords>, E> {
    if region.blocks < 2 || end.off == 0 || end.off >= region.blocks {
        return Ok(None);
    }
    let positions = region.blocks - 1;
    let mut found: Option<LaterRecords> = None;
    let mut scanned = 0u64;
    let mut off = end.off;
    while scanned < positions {
        let b = read(off)?;
        let mut step = 1;
        if let Some(seq) = verified_descriptor_seq(seed, &b).filter(|s| *s > end.seq) {
            if let Walk::Record(rec) = read_record(seed, region, LogPos { seq, off }, &mut read)? {
                let at = LogPos { seq, off };
                let f = found.get_or_insert(LaterRecords { first: at, count: 0, max_seq: seq });
                f.count += 1;
                f.max_seq = f.max_seq.max(seq);
                // Skip the record's own blocks (it ends just before `next`).
                step = region.used(off, rec.next.off).max(1);
            }
        }
        scanned += step;
        off = region.next(off, step);
    }
    Ok(found)
}
