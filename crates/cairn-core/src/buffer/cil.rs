//! The committed-item list (XFS's CIL): which buffers each checkpoint
//! changed, and the push that turns them into a log record.
//!
//! ## Insertion
//! A transaction "commits" its changes into the running checkpoint as it
//! makes them: the first change of a buffer in a checkpoint inserts it into
//! the list (`BufferCache::modify`); later changes only widen the buffer's
//! dirty-region map (an item relogged a thousand times before a push is
//! written once). The list is split into per-thread insertion lists (a
//! thread keeps its list for life, as XFS's per-CPU CIL lists since the
//! seed's patch), so concurrent operations do not meet on one lock.
//!
//! ## The push
//! A commit closes the transaction gate (`gate`) only to *swap* the lists
//! for empty ones and advance the running sequence ([`Cil::swap`]: one lock
//! per list, independent of how much is dirty). With the gate released,
//! operations go on into the next checkpoint while the push captures each
//! buffer of the old one ([`Cil::capture`]): a reference to its bytes and
//! its chunk map. The bytes are shared copy-on-write with the buffer: the
//! buffer's next change copies them, so a block that is not changed again
//! before its home write is never copied at all. A writer that reaches a
//! buffer the push has not captured yet freezes its bytes for the push first
//! (`BufferCache::modify`: jbd2's frozen copy, here a reference and the
//! copy-on-write), so a record never holds a change of a later checkpoint
//! and a writer never waits for the capture. The captured buffers stay
//! pinned (in flight) until their home writes are done ([`Cil::unpin`]).
//!
//! ## Counters (`cil.*` in `cairn stats`)
//! items inserted and relogged, frozen copies, pushes, the bytes each push
//! logged, how long the closed gate was held for a swap, and how long
//! operations waited to enter a checkpoint (a histogram, shown as
//! percentiles).
//!
//! ## Locking
//! commit mutex → gate (closed, the swap) → insertion lists. The capture
//! runs under the commit mutex only: buffer bytes (read) → buffer log state.

use super::{Buf, LogState};
use crate::stats::{Histogram, Publish};
use crate::thread_index::thread_index;
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Insertion lists (more than the threads that serve requests, so threads
/// rarely share one).
const LISTS: usize = 16;

use crate::journal::image::{Captured, Image};

/// A buffer's image of a committing checkpoint, copied by a writer.
pub(crate) struct Frozen {
    pub seq: u64,
    pub map: u64,
    pub image: Image,
}

/// What one push took from the lists: the buffers of checkpoint `seq`.
pub struct Batch {
    pub seq: u64,
    lists: Vec<Vec<Arc<Buf>>>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.lists.iter().all(Vec::is_empty)
    }
}

/// The captured buffers of one push, sorted by block, and the buffers
/// themselves, pinned until [`Cil::unpin`].
pub struct Snapshot {
    pub seq: u64,
    pub items: Vec<Captured>,
    bufs: Vec<Arc<Buf>>,
}

/// CIL counters.
#[derive(Default)]
pub struct CilStats {
    pub inserted: AtomicU64,
    pub relogged: AtomicU64,
    pub frozen: AtomicU64,
    pub pushes: AtomicU64,
    pub bytes_logged_last_push: AtomicU64,
    pub bytes_logged_max_push: AtomicU64,
    pub items_last_push: AtomicU64,
    pub swap_us_max: AtomicU64,
    pub capture_us_total: AtomicU64,
    pub capture_us_max: AtomicU64,
    /// Time an operation that found the gate closed by a push waited until
    /// it was in (see `gate::Wait`; operations that found it open do not
    /// wait and are not counted).
    pub writer_wait: Histogram,
    pub writer_wait_us_max: AtomicU64,
    /// Waits during which the kernel switched the spinning thread out
    /// (`gate::Wait::preempted`), and the longest wait by the clock of all
    /// the others (those that parked included).
    pub writer_waits_preempted: AtomicU64,
    pub writer_wait_on_cpu_us_max: AtomicU64,
}

/// See the module essay.
pub struct Cil {
    lists: Vec<Mutex<Vec<Arc<Buf>>>>,
    count: AtomicU64,
    /// The checkpoint operations now change (starts at 1; 0 means "none").
    running: AtomicU64,
    /// Tests: a pause (µs) after capturing each buffer, widening the window
    /// in which writers overtake a push.
    #[cfg(feature = "testing")]
    capture_pause_us: AtomicU64,
    pub stats: CilStats,
}

impl Default for Cil {
    fn default() -> Self {
        Self::new()
    }
}

impl Cil {
    pub fn new() -> Cil {
        Cil {
            lists: (0..LISTS).map(|_| Mutex::new(Vec::new())).collect(),
            count: AtomicU64::new(0),
            running: AtomicU64::new(1),
            #[cfg(feature = "testing")]
            capture_pause_us: AtomicU64::new(0),
            stats: CilStats::default(),
        }
    }

    /// The running checkpoint's sequence.
    pub fn running(&self) -> u64 {
        self.running.load(Ordering::Acquire)
    }

    /// Buffers on the lists (the running checkpoint's size in blocks).
    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// Adds a buffer changed for the first time in the running checkpoint.
    pub(crate) fn insert(&self, buf: Arc<Buf>) {
        self.count.fetch_add(1, Relaxed);
        self.stats.inserted.fetch_add(1, Relaxed);
        self.lists[thread_index() % LISTS].lock().push(buf);
    }

    pub(crate) fn note_relog(&self) {
        self.stats.relogged.fetch_add(1, Relaxed);
    }

    /// Copies a committing buffer's image for the push (the caller holds the
    /// buffer's bytes exclusively and is about to change them).
    pub(crate) fn freeze(&self, st: &mut LogState, image: Image) {
        st.frozen = Some(Frozen { seq: st.dirty_seq, map: st.map, image });
        st.inflight = st.dirty_seq;
        st.dirty_seq = 0;
        st.map = 0;
        self.stats.frozen.fetch_add(1, Relaxed);
    }

    /// Takes the running checkpoint's buffers and starts the next one.
    /// Caller has closed the transaction gate; costs one lock per list.
    pub fn swap(&self) -> Batch {
        let seq = self.running();
        let lists = self.lists.iter().map(|l| std::mem::take(&mut *l.lock())).collect();
        self.count.store(0, Relaxed);
        self.running.store(seq + 1, Ordering::Release);
        Batch { seq, lists }
    }

    /// Captures every buffer of `batch` (gate not held): the frozen copy if a
    /// writer made one, else the bytes now. The buffers become in flight.
    pub fn capture(&self, batch: Batch, block_size: usize) -> Snapshot {
        let n: usize = batch.lists.iter().map(Vec::len).sum();
        let mut items = Vec::with_capacity(n);
        let mut bufs = Vec::with_capacity(n);
        let mut bytes = 0u64;
        for b in batch.lists.into_iter().flatten() {
            // A reference to the bytes, not a copy: the next change copies
            // them if this image still shares them (see `Buf`).
            let data = b.read_image();
            let mut st = b.log.lock();
            let (map, image) = match st.frozen.take() {
                Some(fz) => {
                    debug_assert_eq!(fz.seq, batch.seq, "frozen image of another checkpoint");
                    (fz.map, fz.image)
                }
                None => {
                    debug_assert_eq!(st.dirty_seq, batch.seq, "block {} on a list it was not dirtied in", b.blk);
                    let map = std::mem::take(&mut st.map);
                    st.dirty_seq = 0;
                    st.inflight = batch.seq;
                    (map, Image::clone(&data))
                }
            };
            drop(st);
            drop(data);
            bytes += cairn_format::journal::logged_bytes(block_size, map) as u64;
            #[cfg(feature = "testing")]
            {
                let pause = self.capture_pause_us.load(Relaxed);
                if pause > 0 {
                    std::thread::sleep(std::time::Duration::from_micros(pause));
                }
            }
            items.push((b.blk, map, image));
            bufs.push(b);
        }
        items.sort_unstable_by_key(|(blk, _, _)| *blk);
        let s = &self.stats;
        s.pushes.fetch_add(1, Relaxed);
        s.items_last_push.store(items.len() as u64, Relaxed);
        s.bytes_logged_last_push.store(bytes, Relaxed);
        s.bytes_logged_max_push.fetch_max(bytes, Relaxed);
        Snapshot { seq: batch.seq, items, bufs }
    }

    /// The snapshot's images are at home: its buffers may be evicted again
    /// (unless they are dirty again, or a later capture took them).
    pub fn unpin(&self, snap: Snapshot) {
        for b in snap.bufs {
            let mut st = b.log.lock();
            if st.inflight == snap.seq {
                st.inflight = 0;
            }
        }
    }

    /// Tests: pause this long after capturing each buffer.
    #[cfg(feature = "testing")]
    pub fn set_capture_pause(&self, pause: std::time::Duration) {
        self.capture_pause_us.store(pause.as_micros() as u64, Relaxed);
    }

    /// Calls `f` on every listed buffer (consistency checks).
    pub fn for_each_listed(&self, mut f: impl FnMut(&Buf)) {
        for l in &self.lists {
            for b in l.lock().iter() {
                f(b);
            }
        }
    }
}

impl Publish for Cil {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("cil.items", self.count());
        put("cil.items_inserted", s.inserted.load(Relaxed));
        put("cil.items_relogged", s.relogged.load(Relaxed));
        put("cil.frozen_copies", s.frozen.load(Relaxed));
        put("cil.pushes", s.pushes.load(Relaxed));
        put("cil.items_last_push", s.items_last_push.load(Relaxed));
        put("cil.bytes_logged_last_push", s.bytes_logged_last_push.load(Relaxed));
        put("cil.bytes_logged_max_push", s.bytes_logged_max_push.load(Relaxed));
        put("cil.swap_us_max", s.swap_us_max.load(Relaxed));
        put("cil.capture_us_total", s.capture_us_total.load(Relaxed));
        put("cil.capture_us_max", s.capture_us_max.load(Relaxed));
        put("cil.writer_waits", s.writer_wait.count());
        put("cil.writer_wait_us_p50", s.writer_wait.quantile(0.5));
        put("cil.writer_wait_us_p99", s.writer_wait.quantile(0.99));
        put("cil.writer_wait_us_p999", s.writer_wait.quantile(0.999));
        put("cil.writer_wait_us_max", s.writer_wait_us_max.load(Relaxed));
        put("cil.writer_waits_preempted", s.writer_waits_preempted.load(Relaxed));
        put("cil.writer_wait_on_cpu_us_max", s.writer_wait_on_cpu_us_max.load(Relaxed));
    }
}
