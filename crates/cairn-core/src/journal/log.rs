//! The write-ahead log of a mounted file system: the [`Journal`] (its ring
//! positions, counters) and the commit writer. Opening the journal and
//! replaying it at mount is in [`recovery`](super::recovery); the record
//! format, the ring arithmetic and the record walk are the format crate's
//! (`cairn_format::journal`), shared with the checker.
//!
//! ## What a commit writes, in order (the barrier points)
//! Transactions are aggregated in memory: all operations between two commits
//! change buffers in the cache, and a buffer changed a thousand times is
//! logged once (the dirty list holds each buffer once). A commit then:
//! 1. writes the record — region descriptors listing home block numbers and
//!    their changed-chunk maps, then only those chunks (XFS's dirty-region
//!    logging), each descriptor's chunks as one zstd frame when the image has
//!    `INCOMPAT_JOURNAL_ZSTD` and the frame is smaller (`-o
//!    journal_compress=0`: never) — into the ring at `head` (one or two
//!    `pwrite`s). The compression runs here, on the committing thread, under
//!    `state` (counters `journal.chunk_bytes` before, `journal.body_bytes`
//!    after);
//! 2. **fdatasync**: the record body, every file data block written by the
//!    operations of this checkpoint (data ordering: data is durable before the
//!    metadata that points at it), the previous checkpoint's home writes and
//!    the previous journal-superblock update are now durable;
//! 3. writes the commit block (magic, sequence, crc32c of the whole record);
//! 4. **fdatasync**: the checkpoint is durable. `fsync` callers return now;
//! 5. writes the images to their home locations and the journal superblock
//!    with `tail` = this record (the previous record's homes became durable
//!    at step 2). Both become durable at the next commit's step 2.
//!
//! Replay (see [`recovery`](super::recovery)) starts at the durable tail and
//! applies whole records while each has the expected sequence number and a
//! matching checksum; the first that does not ends the log. Replaying a
//! record twice is harmless: replay applies the records from the tail in
//! order, each chunk over the home block, and every byte that changed after
//! a record was logged again by a later one (a block's first record after
//! its allocation holds it whole). Because the durable
//! tail can lag the written tail by one commit, the ring must hold three
//! records: each record is limited to a third of it, and blocks freed by
//! checkpoint N are reused only after the durable tail has passed N (see
//! `alloc`), so an old image can never be replayed over a block that now
//! holds file data.
//!
//! All I/O is plain `pwrite`/`fdatasync` on the image through
//! [`BlockDevice`], so `strace` or `blktrace` on a loop device show it.
//!
//! ## Locking
//! `Journal::state` is held for a whole commit; commits are serialised, which
//! is also what groups concurrent `fsync` calls into one commit.

use super::ail::Ail;
use super::image::Captured;
use crate::dev::BlockDevice;
use crate::error::{FsError, Result};
use crate::stats::percentile;
use crate::stats::Publish;
use cairn_format::journal::{
    body_crc_append, body_seed, encode_commit, encode_compressed_region_descriptor, encode_region_descriptor,
    gather_chunks, logged_bytes, region_desc_capacity, BodyCompressor, JournalRegion, JournalSuper, LogPos,
};
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

struct State {
    head: LogPos,
    written_tail: LogPos,
    durable_tail: LogPos,
    /// Sequence of the newest checkpoint whose commit block is durable.
    committed_seq: u64,
}

impl State {
    /// An empty log whose next record goes at `pos`.
    fn empty_at(pos: LogPos) -> State {
        State { head: pos, written_tail: pos, durable_tail: pos, committed_seq: pos.seq.saturating_sub(1) }
    }
}

/// Journal counters.
#[derive(Default)]
pub struct JournalStats {
    pub commits: AtomicU64,
    pub blocks_logged: AtomicU64,
    pub bytes_logged: AtomicU64,
    pub flushes: AtomicU64,
    pub replayed_records: AtomicU64,
    pub replayed_blocks: AtomicU64,
    pub commit_us_total: AtomicU64,
    pub commit_us_max: AtomicU64,
    /// Chunk bytes the records logged, before compression, and the body
    /// bytes they took (compressed frames, or the chunks as they are).
    pub chunk_bytes: AtomicU64,
    pub body_bytes: AtomicU64,
    /// Latencies of recent commits (µs), for percentiles.
    pub recent_us: Mutex<Vec<u64>>,
}

/// The journal of one mounted file system.
pub struct Journal {
    pub(super) dev: Arc<dyn BlockDevice>,
    pub(super) region: JournalRegion,
    pub(super) bs: usize,
    pub(super) seed: u32,
    state: Mutex<State>,
    /// `committed_seq` and `durable_tail.seq` of `state`, readable without
    /// its lock (held through a whole commit or write-back). They may lag:
    /// a caller then commits once more, or releases frees one commit later.
    committed: AtomicU64,
    tail_seq: AtomicU64,
    /// Compresses each descriptor's chunks (`compress_records`); none
    /// logs them as they are. Locked only by the commit, which holds `state`.
    compressor: Mutex<Option<BodyCompressor>>,
    /// Committed images whose home writes are deferred.
    pub ail: Arc<Ail>,
    pub stats: JournalStats,
    /// A read-only mount's restart point, in memory only: written to the
    /// journal superblock by [`Journal::begin_writing`] before any record.
    pub(super) unwritten_restart: Mutex<Option<LogPos>>,
}

impl Journal {
    /// A journal over `region` whose log is empty from `tail` on (what the
    /// journal superblock says before replay, where replay ended after it).
    pub(super) fn at_tail(
        dev: Arc<dyn BlockDevice>,
        region: JournalRegion,
        bs: usize,
        seed: u32,
        tail: LogPos,
    ) -> Journal {
        Journal {
            dev,
            region,
            bs,
            seed,
            state: Mutex::new(State::empty_at(tail)),
            committed: AtomicU64::new(tail.seq.saturating_sub(1)),
            tail_seq: AtomicU64::new(tail.seq),
            compressor: Mutex::new(None),
            ail: Arc::new(Ail::new(u64::MAX, true)),
            stats: JournalStats::default(),
            unwritten_restart: Mutex::new(None),
        }
    }

    /// Before the first record of a mount that began read-only: the
    /// journal superblock moves to the restart point that mount kept in
    /// memory (past every sequence number on the ring), durably.
    pub fn begin_writing(&self) -> Result<()> {
        let mut pending = self.unwritten_restart.lock();
        if let Some(restart) = *pending {
            self.write_jsb(restart)?;
            self.flush()?;
            *pending = None;
        }
        Ok(())
    }

    /// Forgets every position and starts an empty log at `pos` (after
    /// replay, once the journal superblock says so durably).
    pub(super) fn restart_at(&self, pos: LogPos) {
        let mut st = self.state.lock();
        *st = State::empty_at(pos);
        self.publish_positions(&st);
    }

    /// Byte address of ring position `off`.
    pub(super) fn addr(&self, off: u64) -> u64 {
        self.region.block_of(off) * self.bs as u64
    }

    /// Largest number of home blocks one checkpoint may carry.
    pub fn max_record_images(&self) -> u64 {
        let per = (self.region.blocks - 1) / 3;
        let cap = region_desc_capacity(self.bs) as u64;
        // images + descriptors + commit <= per
        (per.saturating_sub(2)) * cap / (cap + 1)
    }

    /// Writes the journal superblock with the log starting at `tail`.
    pub(super) fn write_jsb(&self, tail: LogPos) -> Result<()> {
        let mut b = vec![0u8; self.bs];
        JournalSuper { tail_seq: tail.seq, tail_off: tail.off }.encode(self.seed, &mut b);
        self.dev.write_at(&b, self.region.start * self.bs as u64)?;
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(self.dev.flush()?)
    }

    /// Sends the AIL's oldest images home when they, or the cache, are over
    /// their memory budget (see `ail`; under the home lock).
    fn shrink_if_over_budget(&self) -> Result<()> {
        if self.ail.over_budget() {
            let _home = self.ail.home_lock.lock();
            self.ail.shrink(self.dev.as_ref(), self.bs)?;
        }
        Ok(())
    }

    /// Writes `data` at ring offset `off`, splitting at the wrap and where
    /// the region moves on to its part in the next group.
    fn write_ring(&self, mut off: u64, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = self.region.run(off, (data.len() / self.bs) as u64);
            let (now, rest) = data.split_at(n as usize * self.bs);
            self.dev.write_at(now, self.addr(off))?;
            data = rest;
            off = self.region.next(off, n);
        }
        Ok(())
    }

    /// Sequence number the next checkpoint will get.
    pub fn next_seq(&self) -> u64 {
        self.state.lock().head.seq
    }

    /// The last checkpoint whose commit block is durable.
    pub fn committed_seq(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Ring blocks between the durable tail and the head (log space in use).
    pub fn used_blocks(&self) -> u64 {
        let st = self.state.lock();
        self.region.used(st.durable_tail.off, st.head.off)
    }

    /// Size of the journal region in blocks.
    pub fn size_blocks(&self) -> u64 {
        self.region.blocks
    }

    /// The checkpoint sequence that the durable tail has passed: images of
    /// checkpoints below it can no longer be replayed.
    pub fn durable_tail_seq(&self) -> u64 {
        self.tail_seq.load(Ordering::Acquire)
    }

    /// Writes one checkpoint (see the module essay) and returns its sequence:
    /// each item's changed chunks go to the log, its whole image home. With no
    /// items it only flushes the device (data of overwrites).
    pub fn commit(&self, images: &[Captured]) -> Result<u64> {
        let t0 = Instant::now();
        let mut st = self.state.lock();
        if images.is_empty() {
            // Nothing to log: make data durable, and move the tail past the
            // last checkpoint (its homes are durable after this flush), so
            // that blocks it freed become reusable.
            self.flush()?;
            st.durable_tail = st.written_tail;
            if st.written_tail != st.head && self.ail.is_empty() {
                self.write_jsb(st.head)?;
                self.flush()?;
                st.written_tail = st.head;
                st.durable_tail = st.head;
            }
            // The backend's idle commits bound the AIL's memory while
            // nothing changes (a walk that fills the cache, say).
            self.shrink_if_over_budget()?;
            self.publish_positions(&st);
            return Ok(st.committed_seq);
        }
        let seq = st.head.seq;
        // 1. region descriptors + changed chunks
        let (body, crc) = self.format_body(seq, images);
        let total = (body.len() / self.bs) as u64 + 1;
        // Room: the ring must not overwrite anything from the durable tail on.
        let ring = self.region.blocks - 1;
        if self.region.used(st.durable_tail.off, st.head.off) + total >= ring {
            self.flush()?;
            st.durable_tail = st.written_tail;
            if self.region.used(st.durable_tail.off, st.head.off) + total >= ring {
                self.write_back(&mut st)?;
            }
        }
        if total >= ring {
            return Err(FsError::Errno(libc::ENOSPC));
        }
        self.write_ring(st.head.off, &body)?;
        // 2. barrier: record body, file data, previous homes and jsb durable
        self.flush()?;
        st.durable_tail = st.written_tail;
        // 3-4. commit block, barrier
        let mut cb = vec![0u8; self.bs];
        encode_commit(self.seed, seq, total as u32, crc, &mut cb);
        let commit_off = self.region.next(st.head.off, total - 1);
        self.dev.write_at(&cb, self.addr(commit_off))?;
        self.flush()?;
        let record_start = st.head;
        st.head = LogPos { seq: seq + 1, off: self.region.next(commit_off, 1) };
        st.committed_seq = seq;
        self.publish_positions(&st);
        // 5. the images go to the AIL (see `ail`); without deferred home
        // writes, home at once, durable at the next commit's first barrier.
        self.ail.insert(seq, images.iter().map(|(blk, _, img)| (*blk, img.clone())));
        if !self.ail.defer.load(Ordering::Relaxed) {
            let _home = self.ail.home_lock.lock();
            self.ail.write_home(self.dev.as_ref(), self.bs)?;
            self.ail.home_written();
            self.write_jsb(record_start)?;
            st.written_tail = record_start;
        } else if self.region.used(st.durable_tail.off, st.head.off) * 8 > ring * 7 {
            self.write_back(&mut st)?;
        } else {
            self.shrink_if_over_budget()?;
        }
        drop(st);
        let us = t0.elapsed().as_micros() as u64;
        let s = &self.stats;
        s.commits.fetch_add(1, Ordering::Relaxed);
        s.blocks_logged.fetch_add(total, Ordering::Relaxed);
        s.bytes_logged.fetch_add(total * self.bs as u64, Ordering::Relaxed);
        s.commit_us_total.fetch_add(us, Ordering::Relaxed);
        s.commit_us_max.fetch_max(us, Ordering::Relaxed);
        let mut r = s.recent_us.lock();
        if r.len() >= 1024 {
            r.remove(0);
        }
        r.push(us);
        Ok(seq)
    }

    /// Compress the chunks of every record from now on (the image has
    /// `INCOMPAT_JOURNAL_ZSTD`); zstd level 1, measured at about 700 MB/s
    /// here, a fifth of the chunks' bytes for fs_mark's creates.
    pub(crate) fn compress_records(&self) {
        *self.compressor.lock() = BodyCompressor::new(1);
    }

    /// The record's blocks before its commit block: region descriptors, each
    /// followed by its entries' changed chunks (as one compressed frame when
    /// that is smaller; padded to a block), and the body checksum over them.
    fn format_body(&self, seq: u64, items: &[Captured]) -> (Vec<u8>, u32) {
        let bs = self.bs;
        let mut body = Vec::new();
        let mut chunks = Vec::new();
        let mut compressor = self.compressor.lock();
        let mut crc = body_seed(self.seed, seq);
        for group in items.chunks(region_desc_capacity(bs)) {
            let entries: Vec<(u64, u64)> = group.iter().map(|(home, map, _)| (*home, *map)).collect();
            let raw = group.iter().map(|(_, map, _)| logged_bytes(bs, *map)).sum::<usize>();
            let gather = |out: &mut Vec<u8>| group.iter().for_each(|(_, map, img)| gather_chunks(img, *map, out));
            let at = body.len();
            let start = at + bs;
            body.resize(start, 0);
            // Compressing, the chunks are gathered apart and the frame goes
            // into the body; otherwise (or if it would not be smaller) they
            // are gathered into the body itself.
            let stored = compressor.as_mut().and_then(|z| {
                chunks.clear();
                chunks.reserve(raw);
                gather(&mut chunks);
                z.compress(&chunks, &mut body)
            });
            match stored {
                Some(n) => encode_compressed_region_descriptor(self.seed, seq, &entries, n, &mut body[at..start]),
                None => {
                    encode_region_descriptor(self.seed, seq, &entries, &mut body[at..start]);
                    body.reserve(raw + bs);
                    gather(&mut body);
                }
            }
            self.stats.chunk_bytes.fetch_add(raw as u64, Relaxed);
            self.stats.body_bytes.fetch_add(stored.unwrap_or(raw) as u64, Relaxed);
            body.resize(start + (body.len() - start).div_ceil(bs) * bs, 0);
            for b in body[at..].chunks(bs) {
                crc = body_crc_append(crc, b);
            }
        }
        (body, crc)
    }

    /// Writes every deferred image home and empties the log: afterwards
    /// nothing needs replay and every freed block may be reused (unmount,
    /// and a full file system waiting for freed blocks).
    pub fn checkpoint_all(&self) -> Result<()> {
        let mut st = self.state.lock();
        self.write_back(&mut st)
    }

    fn publish_positions(&self, st: &State) {
        self.committed.store(st.committed_seq, Ordering::Release);
        self.tail_seq.store(st.durable_tail.seq, Ordering::Release);
    }

    /// The AIL's images home, **flush**, the tail to the head, **flush**.
    fn write_back(&self, st: &mut State) -> Result<()> {
        let _home = self.ail.home_lock.lock();
        self.ail.write_home(self.dev.as_ref(), self.bs)?;
        self.flush()?;
        self.write_jsb(st.head)?;
        self.flush()?;
        st.written_tail = st.head;
        st.durable_tail = st.head;
        self.publish_positions(st);
        self.ail.home_written();
        Ok(())
    }
}

impl Publish for Journal {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let j = &self.stats;
        put("journal.commits", j.commits.load(Relaxed));
        put("journal.blocks_logged", j.blocks_logged.load(Relaxed));
        put("journal.bytes_logged", j.bytes_logged.load(Relaxed));
        put("journal.chunk_bytes", j.chunk_bytes.load(Relaxed));
        put("journal.body_bytes", j.body_bytes.load(Relaxed));
        put("journal.home_bytes_written", self.ail.stats.blocks_written.load(Relaxed) * self.bs as u64);
        put("journal.flushes", j.flushes.load(Relaxed));
        put("journal.replayed_records_at_mount", j.replayed_records.load(Relaxed));
        put("journal.replayed_blocks_at_mount", j.replayed_blocks.load(Relaxed));
        put("journal.replays_at_mount", u64::from(j.replayed_records.load(Relaxed) > 0));
        put("journal.commit_us_total", j.commit_us_total.load(Relaxed));
        put("journal.commit_us_max", j.commit_us_max.load(Relaxed));
        let mut recent = j.recent_us.lock().clone();
        recent.sort_unstable();
        put("journal.commit_us_p50", percentile(&recent, 0.5));
        put("journal.commit_us_p99", percentile(&recent, 0.99));
        put("journal.next_seq", self.next_seq());
        put("journal.log_used_blocks", self.used_blocks());
        put("journal.log_size_blocks", self.size_blocks());
        self.ail.publish(put);
    }
}
