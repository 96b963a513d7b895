//! cairn patch: FUSE over io_uring (kernel ABI 7.42, `CONFIG_FUSE_IO_URING`).
//!
//! ## Why
//! Through `/dev/fuse` every request wakes whichever server thread sleeps in
//! `read`, usually on another CPU than the caller, and the reply wakes the
//! caller back across CPUs. On a virtual machine each such wake-up is an
//! inter-processor interrupt and an idle exit: tens of microseconds, more
//! than the file system's own work. With io_uring the kernel keeps one
//! queue per possible CPU and puts each request on the queue of the CPU its
//! caller runs on; a server thread pinned to that CPU takes it, so both
//! wake-ups stay on one CPU.
//!
//! ## Protocol
//! After FUSE_INIT (reply flag `FUSE_OVER_IO_URING`), each queue thread
//! registers ring entries with `IORING_OP_URING_CMD` SQEs (SQE128) on the
//! `/dev/fuse` fd: command `REGISTER` with `sqe.addr` pointing at two
//! iovecs, a header buffer (`fuse_uring_req_header`: 128 bytes for the
//! in/out header, 128 for the opcode's fixed struct, then
//! `fuse_uring_ent_in_out`) and a payload buffer of at least the
//! connection's largest request. A request arrives as the completion of an
//! entry's command; the reply is written into the same buffers and sent
//! with `COMMIT_AND_FETCH`, which also hands the entry back for the next
//! request. The kernel uses the ring once every queue has an entry;
//! FORGET, INTERRUPT and notifications stay on `/dev/fuse`, whose threads
//! keep running.
//!
//! fuser parses a request from one contiguous buffer (in header, fixed
//! struct, payload); the fixed struct's length is what the in header's `len`
//! leaves after the header and the payload. Each entry's payload buffer
//! starts one page into its allocation, and a request with a payload of a
//! KiB or more (a WRITE's data, a SETXATTR's value) is parsed where the
//! kernel wrote it: its headers are copied into that page, just before the
//! payload, and the buffer is lent to the request until it is answered (a
//! reply made meanwhile waits in the entry's stash and is moved into the
//! buffer when it comes back). Smaller requests are copied whole into the
//! thread's buffer, laid out alike. Either way a WRITE's data starts on a
//! page boundary, as the payload buffers do (a READ's reply is read straight
//! into one): cairn moves file data between them and its image with
//! `O_DIRECT`, which wants aligned memory.
//!
//! ## Replies
//! A reply may come from another thread (fuser's replies are `Send`): the
//! entry's buffers sit behind a mutex shared with the reply sender, and the
//! queue thread waits for the reply before it commits the entry.

use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::error;
use log::warn;
use parking_lot::Condvar;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::page_buf::PAGE;
use crate::page_buf::PageBuf;
use crate::ReplyEmpty;
use crate::ll::Operation;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// `fuse_uring_req_header`: in/out header, the opcode's struct, the entry's in/out.
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
const ENT_COMMIT_ID: usize = ENT_IN_OUT + 8;
const ENT_PAYLOAD_SZ: usize = ENT_IN_OUT + 16;
const HEADER_SIZE: usize = ENT_IN_OUT + 32;
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Offset of `len` in `struct io_uring_sqe` (the iovec count of a REGISTER).
const SQE_LEN_OFFSET: usize = 24;

/// How the ring is set up (from the INIT exchange and the mount's config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UringParams {
    /// Payload buffer size: at least the connection's largest request.
    pub(crate) payload_size: usize,
    /// Server threads per CPU queue (each its own ring and entry).
    pub(crate) threads_per_queue: usize,
    /// Run the queue threads as SCHED_IDLE. A CPU running only SCHED_IDLE
    /// threads counts as idle when the scheduler places a woken task, so a
    /// caller woken by its reply stays on its CPU (and queue) instead of
    /// being moved to the other, idle CPU at every request, which costs a
    /// cross-CPU wake-up each time. The price: a CPU-bound task on the same
    /// CPU starves the queue thread.
    pub(crate) idle_priority: bool,
    /// Leave the queue threads unpinned. The kernel puts a request on the
    /// queue of the CPU its task runs on, so a lone reader's readahead all
    /// lands on one queue; pinned, that queue's threads share the reader's
    /// CPU while the other CPUs idle. Unpinned, the scheduler may run them
    /// beside the reader.
    pub(crate) unpinned: bool,
    /// Pin a queue's threads round the CPUs, thread `t` of queue `q` on CPU
    /// `(q + t) % CPUs`, instead of all on CPU `q`. The kernel hands a
    /// request to the queue's entry freed last, so requests one at a time
    /// keep going to one thread; but when a lone reader's readahead has
    /// two READs in flight, the second is served on another CPU while the
    /// reader's CPU serves the first (and copies it to the reader).
    pub(crate) spread: bool,
    /// Serve a READ of `MOVE_MIN` bytes or more on the next CPU when no such
    /// READ arrived on that CPU's queue in the last `MOVE_RECENT_NS` (so that
    /// CPU has no reader of its own) and no large READ of another file in the
    /// last `MOVE_SHARED_NS`, and every other request at home; see
    /// `Placement`.
    pub(crate) read_move: bool,
}

#[derive(Debug)]
struct EntryBufs {
    header: Box<[u8]>,
    /// One page of room for the request's headers, then the payload buffer
    /// the kernel knows (`PAGE..`). Empty while lent to a request (`lent`).
    payload: PageBuf,
    /// The payload buffer is lent to the request being served (its headers
    /// were put in the page before it, so the request is parsed where the
    /// kernel wrote it): a reply meanwhile waits in `stash`.
    lent: bool,
    /// A reply's payload made while the buffer was lent, moved into the
    /// buffer when it comes back.
    stash: Vec<u8>,
    /// Bytes the payload buffer holds after its page of headroom.
    capacity: usize,
    replied: bool,
}

impl EntryBufs {
    /// Where a reply's payload goes now: the ring's payload buffer, or the
    /// stash while that buffer is lent.
    fn reply_area(&mut self, len: usize) -> &mut [u8] {
        if self.lent {
            self.stash.clear();
            self.stash.resize(len, 0);
            &mut self.stash[..]
        } else {
            &mut self.payload[PAGE..PAGE + len]
        }
    }
}

/// One ring entry's buffers, shared by the queue thread and the reply.
#[derive(Debug)]
pub(crate) struct UringReply {
    bufs: Mutex<EntryBufs>,
    done: Condvar,
}

impl UringReply {
    fn new(payload_size: usize) -> Arc<UringReply> {
        Arc::new(UringReply {
            bufs: Mutex::new(EntryBufs {
                header: vec![0u8; HEADER_SIZE.max(4096)].into_boxed_slice(),
                payload: PageBuf::zeroed(PAGE + payload_size),
                lent: false,
                stash: Vec::new(),
                capacity: payload_size,
                replied: true,
            }),
            done: Condvar::new(),
        })
    }

    /// Writes a reply (`fuse_out_header` then its payload) into the entry.
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let mut b = self.bufs.lock();
        let total: usize = data.iter().map(|s| s.len()).sum();
        if total < OUT_HEADER {
            return Err(io::Error::other("FUSE reply shorter than its header"));
        }
        let b = &mut *b;
        let header_len = OUT_HEADER;
        let mut payload_len = total - header_len;
        if payload_len > b.capacity {
            error!("FUSE reply of {total} bytes does not fit the ring entry");
            copy_skipping(data, 0, &mut b.header[..header_len]);
            b.header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            payload_len = 0;
        } else {
            copy_skipping(data, 0, &mut b.header[..header_len]);
            copy_skipping(data, header_len, b.reply_area(payload_len));
        }
        self.complete(b, payload_len);
        Ok(())
    }

    /// Marks the reply in `b` done, with `payload_len` bytes of payload, and
    /// wakes the queue thread waiting for it.
    fn complete(&self, b: &mut EntryBufs, payload_len: usize) {
        b.header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&(payload_len as u32).to_ne_bytes());
        b.replied = true;
        self.done.notify_one();
    }

    /// Size of the entry's payload buffer.
    pub(crate) fn payload_capacity(&self) -> usize {
        self.bufs.lock().capacity
    }

    /// Replies to `unique` with the bytes `fill` writes into the entry's
    /// payload buffer (at most `max`, which must fit it), or with its error.
    pub(crate) fn send_with(
        &self,
        unique: u64,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, crate::Errno>,
    ) -> io::Result<()> {
        let mut b = self.bufs.lock();
        let b = &mut *b;
        // The entry is this request's until `replied`: the queue thread
        // waits for it and takes nothing else from the buffers meanwhile.
        let (error, payload_len) = match fill(b.reply_area(max)) {
            Ok(n) => (0i32, n.min(max)),
            Err(e) => (-e.code(), 0),
        };
        if b.lent {
            b.stash.truncate(payload_len);
        }
        b.header[..OUT_HEADER].copy_from_slice(&out_header(OUT_HEADER + payload_len, error, unique));
        self.complete(b, payload_len);
        Ok(())
    }
}

/// Copies the bytes of `data` (slices taken as one) from offset `skip`
/// into `to`, until `to` is full.
fn copy_skipping(data: &[IoSlice<'_>], mut skip: usize, to: &mut [u8]) {
    let mut at = 0usize;
    for s in data {
        if at == to.len() {
            break;
        }
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        let s = &s[skip..];
        skip = 0;
        let n = s.len().min(to.len() - at);
        to[at..at + n].copy_from_slice(&s[..n]);
        at += n;
    }
}

/// A `fuse_out_header`: total length, negative errno or 0, request id.
fn out_header(len: usize, error: i32, unique: u64) -> [u8; OUT_HEADER] {
    let mut out = [0u8; OUT_HEADER];
    out[..4].copy_from_slice(&(len as u32).to_ne_bytes());
    out[4..8].copy_from_slice(&error.to_ne_bytes());
    out[8..16].copy_from_slice(&unique.to_ne_bytes());
    out
}

thread_local! {
    static ON_RING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Work queued by `after_reply`, run once the reply is committed.
    static AFTER_COMMIT: std::cell::RefCell<Vec<Box<dyn FnOnce()>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` once the reply to the request the calling thread serves has
/// reached the kernel. Through /dev/fuse a reply is written by the reply
/// call itself, so `f` runs at once; on an io_uring queue thread the reply
/// waits in its entry's buffer until the thread commits it, and `f` runs
/// after that commit. A notification that must follow a reply (the kernel
/// drops a reply's attributes if an invalidation of the inode overtook it)
/// goes through here.
pub fn after_reply(f: impl FnOnce() + 'static) {
    if ON_RING.with(|r| r.get()) {
        AFTER_COMMIT.with(|q| q.borrow_mut().push(Box::new(f)));
    } else {
        f();
    }
}

/// Runs what `after_reply` queued on this thread.
fn run_after_commit() {
    let queued = AFTER_COMMIT.with(|q| std::mem::take(&mut *q.borrow_mut()));
    for f in queued {
        f();
    }
}

/// Whether the calling thread is an io_uring queue thread (a file system
/// can count which transport served a request).
pub fn on_io_uring_thread() -> bool {
    ON_RING.with(|r| r.get())
}

/// Number of queues the kernel expects: one per possible CPU.
pub(crate) fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let mut n = 0usize;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.split('-').map(|x| x.trim().parse::<usize>().ok());
        match (ends.next().flatten(), ends.next().flatten()) {
            (Some(a), Some(b)) if b >= a => n = n.max(b + 1),
            (Some(a), None) => n = n.max(a + 1),
            _ => {}
        }
    }
    if n == 0 {
        std::thread::available_parallelism().map_or(1, |p| p.get())
    } else {
        n
    }
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it, and
    // sched_setaffinity reads size_of::<cpu_set_t>() bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            warn!(
                "io_uring queue {cpu}: could not pin its thread: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// Makes the calling thread SCHED_IDLE (see `UringParams::idle_priority`).
fn make_idle(qid: u16) {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads the sched_param it is given and
    // changes the calling thread only (pid 0).
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) } != 0 {
        warn!("io_uring queue {qid}: could not set SCHED_IDLE: {}", io::Error::last_os_error());
    }
}

fn cmd_req(qid: u16, commit_id: u64) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

fn register_sqe(fd: i32, qid: u16, iov: &[libc::iovec; 2], idx: usize) -> squeue::Entry128 {
    let sqe = opcode::UringCmd80::new(types::Fd(fd), CMD_REGISTER)
        .cmd(cmd_req(qid, 0))
        .addr(Some(iov.as_ptr() as u64))
        .build()
        .user_data(idx as u64);
    // SAFETY: `squeue::Entry128` is `#[repr(C)]` over `struct io_uring_sqe`
    // followed by 64 bytes of command data (128 bytes in all), and `len` is
    // the u32 at offset 24 of `io_uring_sqe` (the kernel's UAPI layout); the
    // io-uring crate's UringCmd80 builder has no setter for it, and
    // FUSE_IO_URING_CMD_REGISTER requires it to be the iovec count, 2.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: the same layout back; every bit pattern is a valid SQE value.
    unsafe { std::mem::transmute(bytes) }
}

fn commit_sqe(fd: i32, qid: u16, commit_id: u64, idx: usize) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), CMD_COMMIT_AND_FETCH)
        .cmd(cmd_req(qid, commit_id))
        .build()
        .user_data(idx as u64)
}

/// One queue thread's io_uring (SQE128 for the 80-byte FUSE command).
pub(crate) type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Makes a ring for one queue thread.
pub(crate) fn new_ring() -> io::Result<Ring> {
    IoUring::builder().build(8)
}

/// Tells the kernel to give up on the ring for this connection (after a
/// queue thread could not be set up): a REGISTER for a queue that does not
/// exist fails, which makes the kernel clear the connection's io_uring flag
/// and serve every request through /dev/fuse again. Without it the kernel
/// would hold every request until all queues had registered.
pub(crate) fn refuse(ring: &mut Ring, fd: i32) {
    let iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2];
    let sqe = register_sqe(fd, u16::MAX, &iov, usize::MAX);
    if push(ring, &sqe).is_ok() && ring.submit_and_wait(1).is_ok() {
        let res: Vec<i32> = ring.completion().map(|c| c.result()).collect();
        warn!(
            "io_uring: queue setup failed; the kernel answered the refusal with {res:?}; serving through /dev/fuse"
        );
    }
}

fn push(ring: &mut Ring, sqe: &squeue::Entry128) -> io::Result<()> {
    // SAFETY: the SQE points at buffers (iovecs, header, payload) owned by
    // `entries` in `queue_thread`, which outlive the ring (declared before
    // it, so dropped after it: the kernel cancels the commands when the ring
    // closes, before the buffers go).
    unsafe { ring.submission().push(sqe) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))
}

/// One server thread of CPU queue `qid`: registers `depth` entries, then
/// serves the requests that arrive on them until the connection ends.
pub(crate) fn queue_thread<FS: Filesystem>(
    se: SessionEventLoop<FS>,
    mut ring: Ring,
    qid: u16,
    thread: usize,
    params: UringParams,
) -> io::Result<()> {
    let home = if params.spread {
        (qid as usize + thread) % possible_cpus()
    } else {
        qid as usize
    };
    if !params.unpinned {
        pin_to_cpu(home);
    }
    let mut placement = Placement::new(qid as usize, home, params);
    if params.idle_priority {
        make_idle(qid);
    }
    ON_RING.with(|r| r.set(true));
    let fd = se.ch.as_fd_raw();
    let depth = 1usize;
    let entries: Vec<Arc<UringReply>> = (0..depth)
        .map(|_| UringReply::new(params.payload_size))
        .collect();
    let iovs: Vec<[libc::iovec; 2]> = entries
        .iter()
        .map(|e| {
            let mut b = e.bufs.lock();
            [
                libc::iovec {
                    iov_base: b.header.as_mut_ptr().cast(),
                    iov_len: b.header.len(),
                },
                libc::iovec {
                    iov_base: b.payload[PAGE..].as_mut_ptr().cast(),
                    iov_len: b.capacity,
                },
            ]
        })
        .collect();
    // The command each entry has in the kernel: None for REGISTER, Some(commit
    // id) for COMMIT_AND_FETCH (resent as it was after EINTR/EAGAIN).
    let mut pending: Vec<Option<u64>> = vec![None; depth];
    for (i, iov) in iovs.iter().enumerate() {
        push(&mut ring, &register_sqe(fd, qid, iov, i))?;
    }
    ring.submit()?;
    let mut req_buf = PageBuf::zeroed(PAGE + params.payload_size + OP_IN);
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(depth);
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(idx, res) in &done {
            let idx = idx as usize;
            if idx >= entries.len() {
                continue;
            }
            let sqe = if res == -libc::EAGAIN || res == -libc::EINTR {
                // A REGISTER before the kernel finished INIT, or an
                // interrupted command: send it again.
                std::thread::sleep(std::time::Duration::from_millis(1));
                match pending[idx] {
                    None => register_sqe(fd, qid, &iovs[idx], idx),
                    Some(commit_id) => commit_sqe(fd, qid, commit_id, idx),
                }
            } else if res < 0 {
                let teardown = [libc::ENOTCONN, libc::ECANCELED, libc::ENODEV, libc::ECONNABORTED];
                if teardown.contains(&-res) {
                    // The connection is gone (unmount, abort).
                    return Ok(());
                }
                if pending[idx].is_none() {
                    return Err(io::Error::from_raw_os_error(-res));
                }
                // A commit the kernel refused (it ended that request
                // itself): give the queue the entry back as a new one, so
                // the CPU's requests keep a server.
                warn!("io_uring queue {qid}: commit refused ({res}); registering the entry again");
                pending[idx] = None;
                register_sqe(fd, qid, &iovs[idx], idx)
            } else {
                if let Some(p) = placement.as_mut() {
                    p.place(&entries[idx]);
                }
                let commit_id = serve(&se, &entries[idx], &mut req_buf);
                pending[idx] = Some(commit_id);
                commit_sqe(fd, qid, commit_id, idx)
            };
            push(&mut ring, &sqe)?;
            ring.submit()?;
            run_after_commit();
        }
    }
}

/// Payloads from this size up are parsed where the kernel wrote them (the
/// entry's buffer is lent to the request); smaller ones are copied, which
/// costs less than a reply's detour through the stash.
const LEND_FROM: usize = 1024;

/// A large READ: served on the next CPU under `read_move`.
const MOVE_MIN: usize = 256 << 10;
/// A queue that took a large READ this recently has a reader on its CPU.
const MOVE_RECENT_NS: u64 = 2_000_000;
/// Large READs of two files this recently: more than one reader, so no CPU
/// is left idle for a lone reader's requests and nothing moves.
const MOVE_SHARED_NS: u64 = 100_000_000;
const FUSE_READ: usize = 15;
/// When a large READ last arrived on each queue (ns since `MOVE_EPOCH`, 0:
/// never). One set per process: a hint shared by every session's queues.
static MOVE_SEEN: std::sync::OnceLock<(std::time::Instant, Box<[std::sync::atomic::AtomicU64]>)> =
    std::sync::OnceLock::new();
/// The inode of the last large READ (0: none yet), and when a large READ of
/// another inode last followed one (ns since `MOVE_EPOCH`, 0: never).
static MOVE_STREAM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static MOVE_SHARED_AT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `UringParams::read_move` for one queue thread. The kernel puts a request
/// on the queue of the CPU its caller runs on, so a lone reader's readahead
/// READs, cairn's `pread` of them and the kernel's copy of each reply into the
/// page cache (done in the COMMIT) all share the reader's CPU. A thread that
/// serves a large READ while the next CPU's queue has seen none lately moves
/// there (`sched_setaffinity`, at the change only) and commits it there; any
/// other request brings it home first, so small requests keep their CPU.
/// With readers on every CPU every queue sees large READs and nothing moves.
/// Nor does anything move while large READs of more than one file arrive
/// (`MOVE_SHARED_NS`): four readers on two CPUs leave no CPU idle, and a
/// queue whose readers the scheduler had gathered on one CPU would move its
/// threads onto the other, pinned there beside that CPU's own queue (40% of
/// four readers' throughput lost, issue #53).
struct Placement {
    qid: usize,
    home: usize,
    next: usize,
    away: bool,
}

impl Placement {
    fn new(qid: usize, home: usize, params: UringParams) -> Option<Placement> {
        let n = possible_cpus();
        if !params.read_move || params.unpinned || n < 2 || qid >= n {
            return None;
        }
        MOVE_SEEN.get_or_init(|| {
            let seen = (0..n)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect();
            (std::time::Instant::now(), seen)
        });
        Some(Placement {
            qid,
            home,
            next: (qid + 1) % n,
            away: false,
        })
    }

    /// Moves the thread for the request now in `entry`'s header, if need be.
    fn place(&mut self, entry: &UringReply) {
        let big_read = {
            let b = entry.bufs.lock();
            let word =
                |at: usize| u32::from_ne_bytes(b.header[at..at + 4].try_into().unwrap()) as usize;
            // fuse_in_header.opcode at 4, nodeid at 16; fuse_read_in.size at
            // 16 of the op struct.
            let nodeid = u64::from_ne_bytes(b.header[16..24].try_into().unwrap());
            (word(4) == FUSE_READ && word(OP_IN + 16) >= MOVE_MIN).then_some(nodeid)
        };
        let Some((epoch, seen)) = MOVE_SEEN.get() else {
            return;
        };
        let Some(seen_here) = seen.get(self.qid) else {
            return;
        };
        let away = big_read.is_some_and(|nodeid| {
            use std::sync::atomic::Ordering::Relaxed;
            let now = epoch.elapsed().as_nanos() as u64 + 1;
            seen_here.store(now, Relaxed);
            let before = MOVE_STREAM.swap(nodeid, Relaxed);
            if before != 0 && before != nodeid {
                MOVE_SHARED_AT.store(now, Relaxed);
            }
            let shared_at = MOVE_SHARED_AT.load(Relaxed);
            let lone = shared_at == 0 || now.saturating_sub(shared_at) > MOVE_SHARED_NS;
            let last = seen.get(self.next).map_or(0, |s| s.load(Relaxed));
            lone && (last == 0 || now.saturating_sub(last) > MOVE_RECENT_NS)
        });
        if away != self.away {
            pin_to_cpu(if away { self.next } else { self.home });
            self.away = away;
        }
    }
}

/// Where a request's contiguous form is: in the entry's own payload buffer
/// (lent, with the headers put in the page before the payload) or in the
/// thread's buffer (copied).
enum Reassembled {
    Lent(PageBuf, std::ops::Range<usize>),
    Copied(std::ops::Range<usize>),
    Malformed,
}

/// Puts the request in the entry's buffers `b` into its contiguous form
/// (headers, then the payload on a page boundary); returns where it is and
/// the commit id and unique of the request.
fn reassemble(b: &mut EntryBufs, req_buf: &mut PageBuf) -> (u64, u64, Reassembled) {
    let h = &b.header;
    let word = |at: usize| u32::from_ne_bytes(h[at..at + 4].try_into().unwrap()) as usize;
    let commit_id = u64::from_ne_bytes(h[ENT_COMMIT_ID..ENT_COMMIT_ID + 8].try_into().unwrap());
    let unique = u64::from_ne_bytes(h[8..16].try_into().unwrap());
    let (len, payload_sz) = (word(0), word(ENT_PAYLOAD_SZ));
    let valid = len >= IN_HEADER + payload_sz
        && len - IN_HEADER - payload_sz <= OP_IN
        && payload_sz <= b.capacity;
    if !valid {
        return (commit_id, unique, Reassembled::Malformed);
    }
    let op_len = len - IN_HEADER - payload_sz;
    let heads = IN_HEADER + op_len;
    // The payload at `PAGE` (the headers stay 8-aligned).
    let aligned = heads <= PAGE && heads % 8 == 0;
    let start = if aligned { PAGE - heads } else { 0 };
    if aligned && payload_sz >= LEND_FROM {
        let mut buf = std::mem::replace(&mut b.payload, PageBuf::zeroed(0));
        b.lent = true;
        buf[start..start + IN_HEADER].copy_from_slice(&b.header[..IN_HEADER]);
        buf[start + IN_HEADER..PAGE].copy_from_slice(&b.header[OP_IN..OP_IN + op_len]);
        let at = start..start + len;
        return (commit_id, unique, Reassembled::Lent(buf, at));
    }
    req_buf[start..start + IN_HEADER].copy_from_slice(&h[..IN_HEADER]);
    req_buf[start + IN_HEADER..start + heads].copy_from_slice(&h[OP_IN..OP_IN + op_len]);
    req_buf[start + heads..start + len].copy_from_slice(&b.payload[PAGE..PAGE + payload_sz]);
    (commit_id, unique, Reassembled::Copied(start..start + len))
}

/// Reassembles, dispatches and waits for the reply of the request in
/// `entry`; returns its commit id.
fn serve<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    entry: &Arc<UringReply>,
    req_buf: &mut PageBuf,
) -> u64 {
    let (commit_id, unique, form) = {
        let mut b = entry.bufs.lock();
        b.replied = false;
        reassemble(&mut b, req_buf)
    };
    let bytes = match &form {
        Reassembled::Lent(buf, at) => Some(&buf[at.clone()]),
        Reassembled::Copied(at) => Some(&req_buf[at.clone()]),
        Reassembled::Malformed => None,
    };
    match bytes.and_then(|bytes| RequestWithSender::new(se.ch.sender(), bytes)) {
        Some(req) => dispatch(se, entry, req),
        None => {
            error!("io_uring: malformed FUSE request {unique}; answering EIO");
            let out = out_header(OUT_HEADER, -libc::EIO, unique);
            let _ = entry.send(&[IoSlice::new(&out)]);
        }
    }
    let mut b = entry.bufs.lock();
    while !b.replied {
        entry.done.wait(&mut b);
    }
    if let Reassembled::Lent(buf, _) = form {
        // The request is gone: the buffer comes back, with the reply's
        // payload if one was made meanwhile.
        let b = &mut *b;
        b.payload = buf;
        b.lent = false;
        b.payload[PAGE..PAGE + b.stash.len()].copy_from_slice(&b.stash);
        b.stash.clear();
    }
    commit_id
}

/// Hands a parsed request to the file system (DESTROY, and FORGET which has
/// no reply, handled here).
fn dispatch<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    entry: &Arc<UringReply>,
    req: RequestWithSender<'_>,
) {
    let req = req.with_uring(crate::reply::ReplySender::Uring(entry.clone()));
    if let Ok(Operation::Destroy(_)) = req.request.operation() {
        if let Some(fs) = se.filesystem.fs.as_ref() {
            fs.destroy_request();
        }
        req.reply::<ReplyEmpty>().ok();
    } else if matches!(
        req.request.operation(),
        Ok(Operation::Forget(_) | Operation::BatchForget(_))
    ) {
        // No reply exists for these (the kernel sends them through
        // /dev/fuse); never wait for one.
        req.dispatch(se);
        entry.bufs.lock().replied = true;
    } else {
        req.dispatch(se);
    }
}

/// Whether FUSE over io_uring can be used by a new mount: the kernel
/// offers it (as root, the module's switch is turned on first when `enable`
/// is set) and this process may make an io_uring of the kind it needs
/// (io_uring can be disabled by sysctl or a seccomp filter).
pub fn kernel_switch(enable: bool) -> bool {
    const SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";
    let on = || std::fs::read_to_string(SWITCH).is_ok_and(|s| s.trim() == "Y");
    if !on() && enable {
        let _ = std::fs::write(SWITCH, "Y");
    }
    on() && new_ring().is_ok()
}

impl crate::channel::Channel {
    /// The /dev/fuse descriptor number (for io_uring commands on it).
    pub(crate) fn as_fd_raw(&self) -> i32 {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}
