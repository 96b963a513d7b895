//! Large READs served on another CPU than the queue thread's (`-o read_offload=1`).
//!
//! ## Why
//! Under FUSE over io_uring the kernel puts a request on the queue of the
//! CPU its caller runs on, and that queue's threads are pinned there. A lone
//! sequential reader's readahead READs therefore all land on the reader's
//! CPU: the reader allocating and copying pages, cairn's `pread` from the
//! image into the reply, and the kernel's copy of the reply into the page
//! cache take turns on one CPU while the others idle (issue #53; traced
//! with `fuse:fuse_request_send` / `fuse_request_end`). The null server has
//! no `pread`, so this serial part is cairn's whole gap to the floor on a
//! single reader.
//!
//! ## How
//! One helper thread per CPU, pinned to it. A READ of at least
//! [`MIN_BYTES`] arriving on a queue thread goes, with its reply, to the
//! helper of the next CPU, if that helper has room; the queue thread returns
//! at once and sleeps until the reply is written (fuser's queue thread waits
//! for an entry's reply before it commits it; a reply may come from any
//! thread). The helper reads the file straight into the ring entry's payload
//! buffer, as the queue thread would have. So the `pread` of one READ runs
//! beside the kernel's copy of the one before and the reader's own work.
//! A READ is served where it arrives when it is small, comes through
//! `/dev/fuse`, when the next CPU's helper has [`DEPTH`] READs already, or
//! when a large READ arrived on the next CPU's own queue in the last
//! [`RECENT`]: then
//! readers on every CPU keep them all busy (four `dd` on two CPUs), and a
//! hand-off would only add its two wake-ups and move the bytes between CPU
//! caches.
//!
//! ## Invariants and locking
//! A job owns its reply: it is answered exactly once, by whoever runs it.
//! Each helper has a mutex-guarded queue (at most [`DEPTH`] jobs, the one
//! running included) and a condition variable. `own[cpu]` is when a large
//! READ last arrived on that CPU's queue (atomic, a hint: a race costs one
//! hand-off more or less, never a reply). The helpers exit when the pool is
//! dropped (the session has ended, no request is in flight). Nothing here is
//! durable.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// READs smaller than this are served where they arrive: for them the
/// hand-off's two wake-ups cost more than the copy.
pub const MIN_BYTES: u32 = 256 << 10;

/// A CPU on whose queue a large READ arrived this recently has a reader of
/// its own: no READ is handed to it.
pub const RECENT: Duration = Duration::from_millis(2);

/// READs a helper holds at most, the one it is serving included: a lone
/// reader's readahead has one or two in flight, and both go to the helper,
/// so that the reader's CPU keeps only the kernel's copies and the reader.
pub const DEPTH: usize = 2;

/// A READ to serve: it answers its reply.
pub type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Slot {
    jobs: std::collections::VecDeque<Job>,
    /// Jobs given and not finished (queued or running).
    pending: usize,
    closed: bool,
}

#[derive(Default)]
struct Helper {
    slot: Mutex<Slot>,
    wake: Condvar,
}

/// The helper threads, one per CPU.
pub struct ReadOffload {
    helpers: Vec<Arc<Helper>>,
    threads: Vec<JoinHandle<()>>,
    /// Per CPU: when a large READ last arrived on its queue (ns since
    /// `epoch`; 0: never). Hand-offs to it do not count.
    own: Box<[AtomicU64]>,
    epoch: Instant,
}

impl ReadOffload {
    /// Starts a helper per online CPU; `None` on a single CPU (no other CPU
    /// to hand a READ to).
    pub fn start() -> Option<ReadOffload> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 {
            return None;
        }
        let helpers: Vec<Arc<Helper>> = (0..cpus).map(|_| Arc::new(Helper::default())).collect();
        let mut threads = Vec::new();
        for (cpu, h) in helpers.iter().enumerate() {
            let h = h.clone();
            let t = std::thread::Builder::new().name(format!("cairn-read-{cpu}")).spawn(move || {
                pin_to(cpu);
                serve(&h);
            });
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    tracing::warn!("read_offload: could not start a helper thread: {e}");
                    return None;
                }
            }
        }
        let own = (0..cpus).map(|_| AtomicU64::new(0)).collect();
        Some(ReadOffload { helpers, threads, own, epoch: Instant::now() })
    }

    /// Serves a READ of `bytes`: hands `job` to the helper of the CPU after
    /// the caller's if the READ is large, arrived on an io_uring queue thread,
    /// that helper holds fewer than [`DEPTH`] and that CPU has no reader of its own (see
    /// [`RECENT`]); otherwise runs it here.
    pub fn run(&self, bytes: u32, job: Job) {
        if bytes < MIN_BYTES || !fuser::on_io_uring_thread() {
            return job();
        }
        let Some(cpu) = current_cpu().filter(|&c| c < self.helpers.len()) else {
            return job();
        };
        let now = self.epoch.elapsed().as_nanos() as u64 + 1;
        self.own[cpu].store(now, Relaxed);
        let next = (cpu + 1) % self.helpers.len();
        let last = self.own[next].load(Relaxed);
        let job = if last == 0 || now.saturating_sub(last) > RECENT.as_nanos() as u64 {
            self.hand_off(next, job)
        } else {
            Err(job)
        };
        if let Err(job) = job {
            job();
        }
    }

    /// Gives `job` to the helper of `cpu` if it holds fewer than [`DEPTH`].
    fn hand_off(&self, cpu: usize, job: Job) -> Result<(), Job> {
        let h = &self.helpers[cpu];
        let mut s = h.slot.lock();
        if s.pending >= DEPTH || s.closed {
            return Err(job);
        }
        s.pending += 1;
        s.jobs.push_back(job);
        h.wake.notify_one();
        Ok(())
    }
}

/// The CPU the calling thread runs on.
fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only reads the calling
    // thread's CPU.
    #[allow(unsafe_code)]
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

impl Drop for ReadOffload {
    fn drop(&mut self) {
        for h in &self.helpers {
            h.slot.lock().closed = true;
            h.wake.notify_one();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A helper's loop: runs each job given to it until the pool closes (a job
/// given before the close is still run, so its reply is sent).
fn serve(h: &Helper) {
    loop {
        let job = {
            let mut s = h.slot.lock();
            loop {
                if let Some(job) = s.jobs.pop_front() {
                    break job;
                }
                if s.closed {
                    return;
                }
                h.wake.wait(&mut s);
            }
        };
        job();
        h.slot.lock().pending -= 1;
    }
}

#[allow(unsafe_code)]
fn pin_to(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it and
    // sched_setaffinity reads size_of::<cpu_set_t>() bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::warn!("read_offload: could not pin helper {cpu}: {}", std::io::Error::last_os_error());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_small_read_or_one_off_the_ring_runs_on_the_caller() {
        let Some(pool) = ReadOffload::start() else { return };
        for bytes in [MIN_BYTES - 1, MIN_BYTES] {
            let (tx, rx) = mpsc::channel();
            let me = std::thread::current().id();
            pool.run(bytes, Box::new(move || tx.send(std::thread::current().id()).unwrap()));
            // This test thread is no io_uring queue thread: never handed off.
            assert_eq!(rx.try_recv().unwrap(), me);
        }
        assert!(pool.own.iter().all(|t| t.load(Relaxed) == 0), "nothing ran on a queue thread");
    }

    #[test]
    fn a_pool_dropped_with_a_job_given_runs_it() {
        let Some(pool) = ReadOffload::start() else { return };
        let (tx, rx) = mpsc::channel();
        // Given by hand (no io_uring thread here): the drop must still run it.
        assert!(pool.hand_off(0, Box::new(move || tx.send(7).unwrap())).is_ok());
        drop(pool);
        assert_eq!(rx.recv().unwrap(), 7);
    }
}
