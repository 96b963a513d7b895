//! Opening the journal at mount, and replay.
//!
//! ## Purpose
//! A crash (or a process that exits without unmounting) can leave committed
//! checkpoints in the log whose images have not all reached their home
//! locations. [`Journal::open`] reads the journal superblock and, starting at
//! its tail, applies every committed record again, in log order: each patch
//! (a block's changed chunks, or the whole block) over the home block.
//!
//! ## Which records are applied
//! The walk is the format's ([`read_record`], shared with `cairn-fsck`):
//! records are applied whole, in order, while each has the expected sequence
//! number and a commit block whose length and body checksum match; the first
//! record that does not ends the log (it was torn by the crash), and nothing
//! of it is written. A record naming a home block inside the journal or past
//! the end of the image ([`LogEnd::ImpossibleHome`]) also ends the log, with
//! a warning: it cannot be one the engine wrote. Replaying records again is
//! harmless: whatever changed after a record was logged again by a later one,
//! applied after it.
//!
//! ## Damage in the middle of the log
//! A torn record can only be the last one written (a record is begun only
//! after the previous commit block is durable), so a record that verifies
//! after the end with a later sequence number means the log was damaged
//! ([`find_later_records`], see `cairn_format::journal_damage`). The open
//! then refuses, before writing anything, with a message that names the
//! damaged record and says to run `cairn fsck --repair` (which replays the
//! records before the damage and restarts the log). So the walk runs twice:
//! once to verify and find the end, once to apply.
//!
//! The scan reads the whole ring (a 1 GiB journal on a 4 TiB image: 262,144
//! reads), so it is skipped on an image whose superblock says it was
//! unmounted cleanly: every mount makes its not-clean superblock durable at
//! its home location before it logs anything else (`Fs::start_writing`
//! checkpoints), and a clean unmount checkpoints everything, so "clean" at
//! home means the log is empty and every record in the ring predates the
//! tail's sequence number.
//!
//! ## What is durable when
//! Replay writes the images home, then **flush**: they are durable; then the
//! journal superblock with the tail at the end of the log and a sequence
//! number past every record in the ring ([`restart_seq`]), then **flush**.
//! Every read-write open writes that restart, replay or not, so that no
//! record written from now on can line up with a stale one. A crash before
//! the second flush leaves the old tail, and the next mount replays the same
//! records again. A read-only open (`replay == false`) writes nothing and
//! refuses an image whose log is not empty.

use super::log::Journal;
use crate::dev::BlockDevice;
use crate::error::{FsError, Result};
use cairn_format::journal::{read_record, JournalRegion, JournalSuper, LogEnd, LogPos, Record, Walk};
use cairn_format::journal_damage::{damage_message, find_later_records, restart_seq};
use cairn_format::superblock::{Superblock, STATE_CLEAN};
use cairn_format::FormatError;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What replay found.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReplayReport {
    pub records: u64,
    pub blocks: u64,
}

/// The journal region of `sb`, whose records may name any home block on
/// the device: a file system grown while mounted (`Fs::grow`) logs blocks of
/// its new groups before its grown superblock reaches home, and a replay
/// reads the superblock as it was before (the grown one is among the
/// records it replays). A record's home stays inside the device.
fn region_of(sb: &Superblock, dev: &dyn BlockDevice) -> JournalRegion {
    let mut region = JournalRegion::of(sb);
    region.total_blocks = region.total_blocks.max(dev.size() / u64::from(sb.block_size()));
    region
}

impl Journal {
    /// Committed records in `sb`'s journal that a mount would replay; reads
    /// and verifies the log, writes nothing. Fails as `open` does on a log
    /// damaged in the middle.
    pub fn pending(dev: Arc<dyn BlockDevice>, sb: &Superblock, seed: u32) -> Result<u64> {
        Ok(Journal::verify(dev, sb, seed)?.1)
    }

    /// The first pass of every open: the journal at its tail, the records
    /// that verify, where the log ends and why; a later record that
    /// verifies after the end is damage, and an error. Writes nothing.
    fn verify(dev: Arc<dyn BlockDevice>, sb: &Superblock, seed: u32) -> Result<(Journal, u64, LogPos, LogEnd, LogPos)> {
        let bs = sb.block_size() as usize;
        let region = region_of(sb, dev.as_ref());
        let mut jb = vec![0u8; bs];
        dev.read_at(&mut jb, region.start * bs as u64)?;
        let jsb = JournalSuper::decode(seed, region.start, &jb, region.blocks)?;
        let tail = LogPos { seq: jsb.tail_seq, off: jsb.tail_off };
        let j = Journal::at_tail(dev, region, bs, seed, tail);
        let (records, end, why) = j.walk(tail, |_| Ok(()))?;
        // A cleanly unmounted image's log is empty and every record left in
        // the ring is older than its tail (see "Damage in the middle of the
        // log"): the scan, a read of the whole ring, is for the others.
        let clean = sb.state & STATE_CLEAN != 0 && records == 0;
        if clean {
            return Ok((j, records, end, why, tail));
        }
        if let Some(later) = find_later_records(seed, &region, end, |off| j.read_ring_block(off))? {
            let msg = damage_message(end, why, &later);
            tracing::error!("{msg}");
            return Err(FsError::Corrupt(FormatError::Incompatible(format!(
                "{msg}; nothing was replayed or changed: run `cairn fsck --repair` on the image"
            ))));
        }
        Ok((j, records, end, why, tail))
    }

    /// Opens the journal of `sb`, replaying committed checkpoints into their
    /// home locations when `replay` is true (else fails if any are pending).
    pub fn open(
        dev: Arc<dyn BlockDevice>,
        sb: &Superblock,
        seed: u32,
        replay: bool,
    ) -> Result<(Journal, ReplayReport)> {
        let bs = sb.block_size() as usize;
        let region = region_of(sb, dev.as_ref());
        // First pass: verify the log and find its end, writing nothing.
        let (j, records, end, why, tail) = Journal::verify(dev, sb, seed)?;
        if let LogEnd::ImpossibleHome { off, home } = why {
            tracing::warn!(seq = end.seq, off, home, "journal record names an impossible home block; ending replay");
        }
        if records > 0 && !replay {
            return Err(FsError::Corrupt(FormatError::Incompatible(
                "the journal holds committed changes that need replay; mount read-write once or run `cairn fsck --repair`".into(),
            )));
        }
        let mut report = ReplayReport::default();
        // Where the log restarts: past every sequence number in the ring.
        let restart = LogPos { seq: restart_seq(&region, end), off: end.off };
        if !replay {
            // Read-only: the log is empty. The restart point is taken in
            // memory only, so that the journal stands where a writable
            // mount's would, should the mount become writable
            // (`begin_writing`).
            j.restart_at(restart);
            *j.unwritten_restart.lock() = Some(restart);
            return Ok((j, report));
        }
        // Second pass: in log order, each patch over the home block as the
        // earlier ones left it.
        let mut block = vec![0u8; bs];
        j.walk(tail, |rec| {
            for p in &rec.patches {
                if !p.is_whole() {
                    j.dev.read_at(&mut block, p.home * bs as u64)?;
                }
                p.apply(&mut block);
                j.dev.write_at(&block, p.home * bs as u64)?;
            }
            report.records += 1;
            report.blocks += rec.patches.len() as u64;
            Ok(())
        })?;
        // The images are durable before the log that held them is emptied.
        if report.records > 0 {
            j.dev.flush()?;
        }
        j.write_jsb(restart)?;
        j.dev.flush()?;
        j.restart_at(restart);
        if report.records > 0 {
            tracing::info!(
                records = report.records,
                blocks = report.blocks,
                "the file system was not cleanly unmounted: journal replayed"
            );
        }
        j.stats.replayed_records.store(report.records, Ordering::Relaxed);
        j.stats.replayed_blocks.store(report.blocks, Ordering::Relaxed);
        Ok((j, report))
    }

    /// Walks the log from `tail`, calling `each` with every verified record
    /// in order; returns how many there were, where the log ends and why.
    fn walk(&self, tail: LogPos, mut each: impl FnMut(&Record) -> Result<()>) -> Result<(u64, LogPos, LogEnd)> {
        let mut pos = tail;
        let mut records = 0u64;
        // Sequence numbers only grow and a record takes at least two ring
        // blocks, so a longer log is impossible; the bound guards the loop.
        loop {
            match read_record(self.seed, &self.region, pos, |off| self.read_ring_block(off))? {
                Walk::Record(rec) if records < self.region.blocks => {
                    each(&rec)?;
                    records += 1;
                    pos = rec.next;
                }
                Walk::Record(_) => return Ok((records, pos, LogEnd::TooLong)),
                Walk::End(why) => return Ok((records, pos, why)),
            }
        }
    }

    /// Reads the whole block at ring position `off`.
    fn read_ring_block(&self, off: u64) -> Result<Vec<u8>> {
        let mut b = vec![0u8; self.bs];
        self.dev.read_at(&mut b, self.addr(off))?;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use crate::journal::image::{image_of, Captured, Image};
    use crate::mkfs::{format, MkfsOptions};
    use cairn_format::journal::{chunk_size, decode_commit, encode_commit, encode_descriptor, WHOLE};
    use cairn_format::superblock::SB_SIZE;

    /// A fresh 8 MiB image with a 64-block journal.
    fn image() -> (Arc<MemDevice>, Superblock, u32) {
        let dev = Arc::new(MemDevice::new(8 << 20));
        format(dev.as_ref(), &MkfsOptions { journal_blocks: Some(256), ..Default::default() }, &mut |_, _| {})
            .expect("mkfs");
        let mut head = vec![0u8; SB_SIZE];
        dev.read_at(&mut head, 0).unwrap();
        let sb = Superblock::decode(&head, dev.size()).unwrap();
        let seed = sb.csum_seed();
        (dev, sb, seed)
    }

    fn open(dev: &Arc<MemDevice>, sb: &Superblock, seed: u32, replay: bool) -> Result<(Journal, ReplayReport)> {
        let d: Arc<dyn BlockDevice> = dev.clone();
        Journal::open(d, sb, seed, replay)
    }

    fn read(dev: &MemDevice, bs: usize, blk: u64) -> Vec<u8> {
        let mut b = vec![0u8; bs];
        dev.read_at(&mut b, blk * bs as u64).unwrap();
        b
    }

    fn write(dev: &MemDevice, bs: usize, blk: u64, b: &[u8]) {
        assert_eq!(b.len(), bs);
        dev.write_at(b, blk * bs as u64).unwrap();
    }

    /// The tail the journal superblock records.
    fn jsb_tail(dev: &MemDevice, sb: &Superblock, seed: u32) -> LogPos {
        let b = read(dev, sb.block_size() as usize, sb.journal_start);
        let j = JournalSuper::decode(seed, sb.journal_start, &b, sb.journal_blocks).unwrap();
        LogPos { seq: j.tail_seq, off: j.tail_off }
    }

    /// How a test damages the second record of the log.
    #[derive(Debug, Clone, Copy)]
    enum Damage {
        /// None: every record replays.
        Nothing,
        /// The commit block is self-consistent but its body checksum does
        /// not match the record.
        BodyChecksum,
        /// The commit block's own checksum is wrong.
        CommitChecksum,
        /// The descriptor (valid checksum) names a block of the journal.
        ImpossibleHome,
    }

    /// Commits three records A = {h0, h1}, B = {h2}, C = {h3, h0} (as the
    /// engine does), then puts the image back in the state of a crash after
    /// C's commit block but before any home write or journal superblock
    /// update (homes old, tail at A), with record `which` (0 = A, 1 = B,
    /// 2 = C) damaged as `damage` says. Returns
    /// the image, the homes, their old contents and the images of A, B, C.
    #[allow(clippy::type_complexity)]
    fn crashed_log(
        damage: Damage,
        which: usize,
    ) -> (Arc<MemDevice>, Superblock, u32, Vec<u64>, Vec<Vec<u8>>, [LogPos; 3], Vec<Vec<(u64, Vec<u8>)>>) {
        let (dev, sb, seed) = image();
        let bs = sb.block_size() as usize;
        let region = JournalRegion::of(&sb);
        let homes: Vec<u64> = (0..4).map(|i| sb.total_blocks - 10 + i).collect();
        assert!(homes.iter().all(|h| region.valid_home(*h)));
        let old: Vec<Vec<u8>> = homes.iter().map(|h| read(&dev, bs, *h)).collect();
        let records: Vec<Vec<(u64, Vec<u8>)>> = vec![
            vec![(homes[0], vec![0xa0; bs]), (homes[1], vec![0xa1; bs])],
            vec![(homes[2], vec![0xb2; bs])],
            vec![(homes[3], vec![0xc3; bs]), (homes[0], vec![0xc0; bs])],
        ];
        let (j, rep) = open(&dev, &sb, seed, true).unwrap();
        assert_eq!(rep.records, 0, "a fresh image has nothing to replay");
        // Home writes at every commit, so the journal superblock names each
        // record as it is committed.
        j.ail.defer.store(false, Ordering::Relaxed);
        let mut starts = Vec::new();
        for rec in &records {
            let imgs: Vec<Captured> = rec.iter().map(|(h, i)| (*h, WHOLE, image_of(i))).collect();
            let seq = j.commit(&imgs).unwrap();
            let start = jsb_tail(&dev, &sb, seed);
            assert_eq!(start.seq, seq, "the journal superblock points at the record just committed");
            starts.push(start);
        }
        drop(j);
        // The crash: no home write, no journal superblock update after A's commit.
        for (h, o) in homes.iter().zip(&old) {
            write(&dev, bs, *h, o);
        }
        let mut jb = vec![0u8; bs];
        JournalSuper { tail_seq: starts[0].seq, tail_off: starts[0].off }.encode(seed, &mut jb);
        write(&dev, bs, region.start, &jb);
        let b = starts[which];
        let len = 1 + records[which].len() as u64 + 1;
        let commit_blk = region.block_of(region.next(b.off, len - 1));
        let mut cb = read(&dev, bs, commit_blk);
        let (total, body) = decode_commit(seed, b.seq, &cb).expect("the damaged record's commit block");
        assert_eq!(u64::from(total), len);
        match damage {
            Damage::Nothing => {}
            Damage::BodyChecksum => encode_commit(seed, b.seq, total, body ^ 1, &mut cb),
            Damage::CommitChecksum => cb[20] ^= 1,
            Damage::ImpossibleHome => {
                let mut d = vec![0u8; bs];
                encode_descriptor(seed, b.seq, &[region.start + 1], &mut d);
                write(&dev, bs, region.block_of(b.off), &d);
            }
        }
        write(&dev, bs, commit_blk, &cb);
        // A mount's superblock says "not clean" at home before it logs.
        let sb = Superblock { state: sb.state & !STATE_CLEAN, ..sb };
        (dev, sb, seed, homes, old, [starts[0], starts[1], starts[2]], records)
    }

    #[test]
    fn replay_applies_every_committed_record_in_order() {
        let (dev, sb, seed, homes, _, starts, records) = crashed_log(Damage::Nothing, 1);
        let bs = sb.block_size() as usize;
        let (j, rep) = open(&dev, &sb, seed, true).unwrap();
        assert_eq!((rep.records, rep.blocks), (3, 5));
        assert_eq!(j.stats.replayed_records.load(Ordering::Relaxed), 3);
        assert_eq!(read(&dev, bs, homes[0]), records[2][1].1, "the later record wins");
        assert_eq!(read(&dev, bs, homes[1]), records[0][1].1);
        assert_eq!(read(&dev, bs, homes[2]), records[1][0].1);
        assert_eq!(read(&dev, bs, homes[3]), records[2][0].1);
        let region = JournalRegion::of(&sb);
        let end = LogPos { seq: starts[2].seq + 1, off: region.next(starts[2].off, 4) };
        let restart = LogPos { seq: end.seq + region.blocks, off: end.off };
        assert_eq!(jsb_tail(&dev, &sb, seed), restart, "the log is empty after replay, past the ring's numbers");
        assert_eq!(j.next_seq(), restart.seq);
        assert_eq!(j.used_blocks(), 0);
        drop(j);
        let (j, rep) = open(&dev, &sb, seed, true).unwrap();
        assert_eq!(rep.records, 0, "a second mount finds nothing to replay");
        let again = LogPos { seq: restart.seq + region.blocks, off: end.off };
        assert_eq!(j.next_seq(), again.seq, "every read-write mount restarts the log");
        assert_eq!(jsb_tail(&dev, &sb, seed), again);
    }

    #[test]
    fn replay_applies_changed_chunks_over_home_in_log_order() {
        let (dev, sb, seed) = image();
        let bs = sb.block_size() as usize;
        let c = chunk_size(bs);
        let home = sb.total_blocks - 3;
        write(&dev, bs, home, &vec![0x11; bs]);
        let (j, _) = open(&dev, &sb, seed, true).unwrap();
        let tail = jsb_tail(&dev, &sb, seed);
        let img = |fill: u8| -> Image { image_of(&vec![fill; bs]) };
        // A logs chunks 0 and 2, B chunk 2 again and chunk 63.
        assert_eq!(j.commit(&[(home, 0b101, img(0xaa))]).unwrap(), tail.seq);
        j.commit(&[(home, 0b100 | 1 << 63, img(0xbb))]).unwrap();
        drop(j);
        // The crash: home still holds its old bytes, the tail is at A.
        write(&dev, bs, home, &vec![0x11; bs]);
        let mut jb = vec![0u8; bs];
        JournalSuper { tail_seq: tail.seq, tail_off: tail.off }.encode(seed, &mut jb);
        write(&dev, bs, sb.journal_start, &jb);
        let (_, rep) = open(&dev, &sb, seed, true).unwrap();
        assert_eq!((rep.records, rep.blocks), (2, 2));
        let got = read(&dev, bs, home);
        for (i, chunk) in got.chunks(c).enumerate() {
            let want = match i {
                0 => 0xaa,
                2 | 63 => 0xbb,
                _ => 0x11,
            };
            assert!(chunk.iter().all(|b| *b == want), "chunk {i}: {:x}", chunk[0]);
        }
    }

    #[test]
    fn a_damaged_last_record_ends_replay_and_nothing_of_it_is_applied() {
        for damage in [Damage::BodyChecksum, Damage::CommitChecksum, Damage::ImpossibleHome] {
            let (dev, sb, seed, homes, old, starts, records) = crashed_log(damage, 2);
            let bs = sb.block_size() as usize;
            let region = JournalRegion::of(&sb);
            let (j, rep) = open(&dev, &sb, seed, true).unwrap();
            assert_eq!((rep.records, rep.blocks), (2, 3), "{damage:?}: A and B replay");
            assert_eq!(read(&dev, bs, homes[0]), records[0][0].1, "{damage:?}: A applied, C not");
            assert_eq!(read(&dev, bs, homes[1]), records[0][1].1, "{damage:?}");
            assert_eq!(read(&dev, bs, homes[2]), records[1][0].1, "{damage:?}: B applied");
            assert_eq!(read(&dev, bs, homes[3]), old[3], "{damage:?}: nothing of C");
            let restart = LogPos { seq: starts[2].seq + region.blocks, off: starts[2].off };
            assert_eq!(jsb_tail(&dev, &sb, seed), restart, "{damage:?}: the log restarts past the ring's numbers");
            assert_eq!(j.next_seq(), restart.seq, "{damage:?}");
        }
    }

    #[test]
    fn a_damaged_record_followed_by_one_that_verifies_refuses_the_mount_and_writes_nothing() {
        for damage in [Damage::BodyChecksum, Damage::CommitChecksum, Damage::ImpossibleHome] {
            for which in [0, 1] {
                let (dev, sb, seed, _, _, starts, _) = crashed_log(damage, which);
                let before = dev.snapshot();
                for replay in [true, false] {
                    let err = open(&dev, &sb, seed, replay).err().expect("a damaged log must not open");
                    let msg = err.to_string();
                    assert!(msg.contains("journal damaged"), "{damage:?} {which}: {msg}");
                    assert!(
                        msg.contains(&format!("record {} at ring block {}", starts[which].seq, starts[which].off)),
                        "{msg}"
                    );
                    assert!(msg.contains("fsck --repair"), "{msg}");
                    assert!(dev.snapshot() == before, "{damage:?} {which}: a refused open wrote to the image");
                }
            }
        }
    }

    /// The failure of #32: after a damaged record was taken for the end of
    /// the log, new records of the same length landed on the old ones and
    /// old records after them verified again at the next mount. Now every
    /// mount restarts the log past the ring's sequence numbers, so records
    /// committed after a torn end never line up with stale ones.
    #[test]
    fn records_written_after_a_torn_end_never_continue_into_stale_ones() {
        let (dev, sb, seed, homes, _, starts, records) = crashed_log(Damage::CommitChecksum, 1);
        let bs = sb.block_size() as usize;
        let region = JournalRegion::of(&sb);
        // Make C stale-looking but still valid: rewind the tail to B's
        // position with B's number, as the old engine would have restarted.
        let mut jb = vec![0u8; bs];
        JournalSuper { tail_seq: starts[1].seq, tail_off: starts[1].off }.encode(seed, &mut jb);
        write(&dev, bs, region.start, &jb);
        // B is damaged and C verifies: refused.
        assert!(open(&dev, &sb, seed, true).is_err());
        // Undamage B by committing a record of B's length over it from a
        // journal restarted the new way: the scan then sees C as stale.
        let restart = LogPos { seq: restart_seq(&region, starts[1]), off: starts[1].off };
        let j = Journal::at_tail(dev.clone(), region, bs, seed, restart);
        j.write_jsb(restart).unwrap();
        j.ail.defer.store(false, Ordering::Relaxed);
        let imgs: Vec<Captured> = records[1]
            .iter()
            .map(|(h, i)| (*h, WHOLE, image_of(&i.iter().map(|b| b ^ 0xff).collect::<Vec<u8>>())))
            .collect();
        assert_eq!(j.commit(&imgs).unwrap(), restart.seq);
        drop(j);
        // The new record takes B's place exactly; C, right after it, has a
        // smaller number than the log expects next, so it is neither
        // replayed nor counted as a later record.
        let mut jb = vec![0u8; bs];
        JournalSuper { tail_seq: restart.seq, tail_off: restart.off }.encode(seed, &mut jb);
        write(&dev, bs, region.start, &jb);
        let before_c = read(&dev, bs, homes[3]);
        let (_, rep) = open(&dev, &sb, seed, true).expect("stale records after the log are not damage");
        assert_eq!(rep.records, 1, "only the new record replays");
        assert_eq!(read(&dev, bs, homes[3]), before_c, "C, stale, is not replayed");
        assert_eq!(read(&dev, bs, homes[2]), vec![0xb2 ^ 0xff; bs]);
    }

    #[test]
    fn read_only_open_refuses_a_log_that_needs_replay_and_writes_nothing() {
        let (dev, sb, seed, homes, old, starts, _) = crashed_log(Damage::Nothing, 1);
        let bs = sb.block_size() as usize;
        let before = dev.snapshot();
        let err = open(&dev, &sb, seed, false).err().expect("read-only open must fail");
        assert!(matches!(err, FsError::Corrupt(FormatError::Incompatible(_))), "{err:?}");
        assert!(dev.snapshot() == before, "a read-only open wrote to the image");
        assert_eq!(read(&dev, bs, homes[0]), old[0]);
        assert_eq!(jsb_tail(&dev, &sb, seed), starts[0]);
    }
}
