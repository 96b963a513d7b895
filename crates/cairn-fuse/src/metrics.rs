//! Per-opcode request counts and latency histograms.
//!
//! Every FUSE handler in [`crate::adapter`] starts a [`Timer`] for its opcode;
//! the engine call runs inside [`Timer::engine`]; when the timer drops (after
//! the reply has been written to `/dev/fuse`) the request is counted. Two
//! times are kept per request:
//!
//! * **inside cairn** (`us_*`): the engine call alone;
//! * **in the adapter** (`reply_us_*`): from the handler's entry to the reply
//!   written (engine call + conversions + the reply's `writev`). fuser parses
//!   the request before the handler runs; that part (well under a µs) is not
//!   seen.
//!
//! The structure is a fixed array of atomics per opcode: no lock and no
//! allocation per request, relaxed ordering (the counters are statistics, a
//! reader may see a request counted in one field and not yet in another).
//! There is one array per *slot*, and each serving thread counts in its own
//! slot (a thread number modulo [`SLOTS`]): counters shared by the ring
//! threads would move their cache lines between CPUs on every request.
//! Readers sum the slots. The inside-cairn time of a handler's first engine
//! call is measured from the handler's entry (the arguments' conversion
//! before it is well under a microsecond): two clock reads per request.
//! Latencies go into log2 buckets of microseconds (bucket `b` holds
//! `[2^(b-1), 2^b)` µs, bucket 0 holds `< 1` µs); p50 and p99 are the upper
//! bound of the bucket where the cumulative count crosses the quantile, so
//! they are accurate to a factor of two.

use crate::coherence::CoherenceStats;
use crate::space::SpaceStats;
use cairn_core::Histogram;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

macro_rules! opcodes {
    ($($v:ident => $n:literal),* $(,)?) => {
        /// The FUSE opcodes the adapter answers.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Op { $($v),* }
        impl Op {
            /// Every opcode, in counter order.
            pub const ALL: &'static [Op] = &[$(Op::$v),*];
            /// The name used in the counters (`fuse.<name>.requests`).
            pub fn name(self) -> &'static str {
                match self { $(Op::$v => $n),* }
            }
        }
    };
}

opcodes! {
    Lookup => "lookup", Forget => "forget", Getattr => "getattr",
    Setattr => "setattr", Readlink => "readlink", Mknod => "mknod", Mkdir => "mkdir",
    Unlink => "unlink", Rmdir => "rmdir", Symlink => "symlink", Rename => "rename", Link => "link",
    Open => "open", Read => "read", Write => "write", Flush => "flush", Release => "release",
    Fsync => "fsync", Opendir => "opendir", Readdir => "readdir", Readdirplus => "readdirplus",
    Releasedir => "releasedir", Fsyncdir => "fsyncdir", Statfs => "statfs", Setxattr => "setxattr",
    Getxattr => "getxattr", Listxattr => "listxattr", Removexattr => "removexattr",
    Access => "access", Create => "create", Ioctl => "ioctl", Fallocate => "fallocate",
    Lseek => "lseek", Syncfs => "syncfs", Tmpfile => "tmpfile", Statx => "statx", Destroy => "destroy",
}

struct OpStats {
    requests: AtomicU64,
    errors: AtomicU64,
    engine_ns: AtomicU64,
    reply_ns: AtomicU64,
    engine_hist: Histogram,
    reply_hist: Histogram,
}

impl OpStats {
    fn new() -> Self {
        OpStats {
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            engine_ns: AtomicU64::new(0),
            reply_ns: AtomicU64::new(0),
            engine_hist: Histogram::new(),
            reply_hist: Histogram::new(),
        }
    }
}

/// Slots of counters (see the module essay).
pub const SLOTS: usize = 8;

/// One thread slot's counters, on cache lines of their own.
#[repr(align(128))]
struct Slot {
    ops: Vec<OpStats>,
    /// Requests served by an io_uring queue thread (`-o io_uring`).
    ring_requests: AtomicU64,
}

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SLOT: usize = NEXT_SLOT.fetch_add(1, Relaxed) % SLOTS;
}

/// Request counters of one FUSE session (shared with the control socket).
pub struct Metrics {
    slots: Vec<Slot>,
    /// The space guard's counters (`space`).
    pub space: Arc<SpaceStats>,
    /// Page invalidations after direct writes (`coherence`).
    pub dio: Arc<CoherenceStats>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("requests", &self.total_requests()).finish()
    }
}

impl Metrics {
    /// All counters zero.
    pub fn new() -> Self {
        Metrics {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    ops: Op::ALL.iter().map(|_| OpStats::new()).collect(),
                    ring_requests: AtomicU64::new(0),
                })
                .collect(),
            space: Arc::new(SpaceStats::default()),
            dio: Arc::new(CoherenceStats::default()),
        }
    }

    /// Starts timing one request of `op`.
    #[inline]
    pub fn timer(&self, op: Op) -> Timer<'_> {
        Timer { m: self, op, start: Instant::now(), engine_ns: 0, engine_calls: 0, failed: false }
    }

    fn record(&self, op: Op, engine_ns: u64, reply_ns: u64, failed: bool) {
        let slot = &self.slots[MY_SLOT.with(|s| *s)];
        let s = &slot.ops[op as usize];
        s.requests.fetch_add(1, Relaxed);
        if fuser::on_io_uring_thread() {
            slot.ring_requests.fetch_add(1, Relaxed);
        }
        if failed {
            s.errors.fetch_add(1, Relaxed);
        }
        s.engine_ns.fetch_add(engine_ns, Relaxed);
        s.reply_ns.fetch_add(reply_ns, Relaxed);
        s.engine_hist.add(engine_ns / 1000);
        s.reply_hist.add(reply_ns / 1000);
    }

    /// Requests of `op` so far.
    pub fn requests(&self, op: Op) -> u64 {
        self.sum(|slot| slot.ops[op as usize].requests.load(Relaxed))
    }

    /// Requests of every opcode so far.
    pub fn total_requests(&self) -> u64 {
        self.sum(|slot| slot.ops.iter().map(|s| s.requests.load(Relaxed)).sum())
    }

    fn sum(&self, f: impl Fn(&Slot) -> u64) -> u64 {
        self.slots.iter().map(f).sum()
    }

    /// The counters, as `cairn stats` shows them: `fuse.requests`, and for
    /// every opcode seen at least once `fuse.<op>.requests`, `.errors`,
    /// `.us_total` / `.us_p50` / `.us_p99` (inside the engine) and
    /// `.reply_us_total` / `.reply_us_p50` / `.reply_us_p99` (handler entry
    /// to reply written).
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut out = vec![
            ("fuse.requests".to_string(), self.total_requests()),
            ("fuse.io_uring_requests".to_string(), self.sum(|slot| slot.ring_requests.load(Relaxed))),
        ];
        out.extend(self.space.counters());
        out.extend(self.dio.counters());
        for &op in Op::ALL {
            let n = self.requests(op);
            if n == 0 {
                continue;
            }
            let (engine, reply) = (Histogram::new(), Histogram::new());
            for slot in &self.slots {
                engine.absorb(&slot.ops[op as usize].engine_hist);
                reply.absorb(&slot.ops[op as usize].reply_hist);
            }
            let field = |f: fn(&OpStats) -> &AtomicU64| self.sum(|slot| f(&slot.ops[op as usize]).load(Relaxed));
            let name = op.name();
            out.push((format!("fuse.{name}.requests"), n));
            out.push((format!("fuse.{name}.errors"), field(|s| &s.errors)));
            out.push((format!("fuse.{name}.us_total"), field(|s| &s.engine_ns) / 1000));
            out.push((format!("fuse.{name}.us_p50"), engine.quantile(0.5)));
            out.push((format!("fuse.{name}.us_p99"), engine.quantile(0.99)));
            out.push((format!("fuse.{name}.reply_us_total"), field(|s| &s.reply_ns) / 1000));
            out.push((format!("fuse.{name}.reply_us_p50"), reply.quantile(0.5)));
            out.push((format!("fuse.{name}.reply_us_p99"), reply.quantile(0.99)));
        }
        out
    }
}

/// One request being timed; counted when dropped.
pub struct Timer<'a> {
    m: &'a Metrics,
    op: Op,
    start: Instant,
    engine_ns: u64,
    engine_calls: u32,
    failed: bool,
}

impl Timer<'_> {
    /// Runs the engine call `f`, adding its duration to the time inside cairn.
    #[inline]
    pub fn engine<T>(&mut self, f: impl FnOnce() -> T) -> T {
        // The first call is timed from the handler's entry (see the essay).
        let t0 = if self.engine_calls == 0 { self.start } else { Instant::now() };
        self.engine_calls += 1;
        let r = f();
        self.engine_ns += t0.elapsed().as_nanos() as u64;
        r
    }

    /// Runs the engine call `f` and notes whether it failed.
    #[inline]
    pub fn call<T, E>(&mut self, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let r = self.engine(f);
        self.failed |= r.is_err();
        r
    }
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        let total = self.start.elapsed().as_nanos() as u64;
        self.m.record(self.op, self.engine_ns, total, self.failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_list_only_seen_opcodes() {
        let m = Metrics::new();
        {
            let mut t = m.timer(Op::Create);
            let _: Result<(), ()> = t.call(|| Err(()));
        }
        drop(m.timer(Op::Getattr));
        assert_eq!(m.total_requests(), 2);
        let c: std::collections::HashMap<String, u64> = m.counters().into_iter().collect();
        assert_eq!(c["fuse.requests"], 2);
        assert_eq!(c["fuse.create.requests"], 1);
        assert_eq!(c["fuse.create.errors"], 1);
        assert_eq!(c["fuse.getattr.errors"], 0);
        assert!(!c.contains_key("fuse.lookup.requests"));
        assert_eq!(Op::ALL.len(), Op::Destroy as usize + 1);
    }
}
