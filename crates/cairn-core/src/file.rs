//! File data: read, write, truncate, fallocate, SEEK_DATA/SEEK_HOLE.
//!
//! Data blocks never enter the buffer cache: reads and writes go straight
//! between the request and the image with `pread`/`pwrite`. Writes over
//! blocks that are already allocated and written change no metadata beyond
//! the timestamps (the overwrite path). Writes into holes allocate blocks,
//! fill them — zeros around the written bytes, so no stale data is ever
//! exposed — and only then map them; the commit's first barrier makes the
//! data durable before the checkpoint that maps it (data ordering, see
//! `journal`). Unwritten extents (fallocate) read as zeros and become written
//! when data lands in them.
//!
//! Locking: the caller holds the inode exclusively (shared for reads) and the
//! transaction gate. A journaled write of file data ([`write_unlocking`])
//! releases the inode's lock while it copies a hole's new blocks into the
//! image (hundreds of microseconds for a MiB) and takes it again to map
//! them: the caller's exclusive I/O lock (`io_locks`) still keeps every
//! other change of the file's blocks and size out (other writes, truncate,
//! fallocate, fast-path overwrites), and what others may do with the inode
//! meanwhile (stat it, set its times or mode, read it) sees the blocks still
//! unmapped, a hole, as before the write. Before, every request about the
//! file waited for the copy (issue 53: the FUSE threads serving the
//! kernel's next write-backs spun on it and called `sched_yield`). That
//! one-handle write is the default; with `-o staged_writes=1` a journaled
//! write runs in stages with the copy outside any handle ([`allocate_unwritten`],
//! [`mapped_runs`], [`fill_blocks`], [`convert_written`]; see
//! `file_io::staged`).

use crate::alloc::AllocRequest;
use crate::error::{FsError, Result};
use crate::extent_map::{self, Mapping};
use crate::inode::InodeState;
use crate::journal::credits;
use crate::meta::Meta;
use crate::tx::Tx;
use cairn_format::extent::{Extent, MAX_EXTENT_LEN};

/// Largest file size supported (bytes): the kernel's own limit for every
/// file system (`MAX_LFS_FILESIZE`, `i64::MAX`), which FUSE gives every
/// mount and checks before a write reaches the page cache. A smaller one
/// could only be enforced when a write is written back, long after the
/// `write(2)` that passed it returned (issue 50: a byte at 2^52 accepted,
/// EFBIG at `close`, the byte gone). Logical block numbers are 64-bit, so
/// the map holds any block of such a file.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

fn bs(meta: &Meta) -> u64 {
    meta.geo().block_size as u64
}

/// Reads up to `size` bytes at `off`, clipped at end of file.
pub fn read(meta: &Meta, st: &InodeState, off: u64, size: u32) -> Result<Vec<u8>> {
    let mut out = vec![0u8; st.d.size.saturating_sub(off).min(u64::from(size)) as usize];
    let n = read_into(meta, st, off, &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// Reads into `out` from `off`, clipped at end of file: the bytes read.
/// Every byte counted is written (holes and unwritten extents as zeros), so
/// `out` may hold anything before.
pub fn read_into(meta: &Meta, st: &InodeState, off: u64, out: &mut [u8]) -> Result<usize> {
    if off >= st.d.size {
        return Ok(0);
    }
    let end = st.d.size.min(off.saturating_add(out.len() as u64));
    let b = bs(meta);
    let mut pos = off;
    while pos < end {
        let lblk = pos / b;
        let inner = pos % b;
        let o = (pos - off) as usize;
        match extent_map::lookup(meta, st, lblk)? {
            Mapping::Hole { len } => {
                let stop = end.min((lblk.saturating_add(len)).saturating_mul(b));
                out[o..(stop - off) as usize].fill(0);
                pos = stop;
            }
            Mapping::Mapped { pblk, len, unwritten } => {
                let stop = end.min((lblk + len) * b);
                let n = (stop - pos) as usize;
                if unwritten {
                    out[o..o + n].fill(0);
                } else {
                    meta.dev().read_data(&mut out[o..o + n], pblk * b + inner)?;
                }
                pos = stop;
            }
        }
    }
    Ok((end - off) as usize)
}

/// The allocation request for `want` blocks of `st` from `lblk`: its goal is
/// the block after the previous file block's, else the start of the data
/// area of the inode's group. Only a file written from its start or right
/// after its last block is *streaming* and gets a normalized search length
/// (see `alloc::request`); a write into a hole searches for what it wants.
fn data_request(meta: &Meta, st: &InodeState, lblk: u64, want: u32) -> Result<AllocRequest> {
    let bs = meta.geo().block_size;
    if lblk > 0 {
        if let Mapping::Mapped { pblk, .. } = extent_map::lookup(meta, st, lblk - 1)? {
            return Ok(AllocRequest::data(st.ino, pblk + 1, want, lblk, st.d.size, bs));
        }
    }
    let g = meta.geo().group_of_ino(st.ino);
    let goal = meta.geo().meta_start(g) + meta.geo().meta_blocks();
    Ok(if lblk == 0 {
        AllocRequest::data(st.ino, goal, want, 0, st.d.size, bs)
    } else {
        AllocRequest::exact(st.ino, goal, want, lblk)
    })
}

/// Blocks of the byte range `[off, off + len)` that a write would have to
/// allocate: the holes (unwritten extents are allocated already).
pub fn hole_blocks(meta: &Meta, st: &InodeState, off: u64, len: u64) -> Result<u64> {
    let b = bs(meta);
    let (mut lblk, end) = (off / b, off.saturating_add(len).div_ceil(b));
    let mut holes = 0u64;
    while lblk < end {
        match extent_map::lookup(meta, st, lblk)? {
            Mapping::Hole { len } => {
                let n = len.min(end - lblk);
                holes += n;
                lblk += n;
            }
            Mapping::Mapped { len, .. } => lblk = lblk.saturating_add(len),
        }
    }
    Ok(holes)
}

/// Room for mapping one more extent in `tx`: `Ok(false)` when the handle's
/// credits are spent and something was done already (the caller goes on in
/// a new handle); asks for more credits when nothing was.
fn room_for_extent(tx: &Tx<'_>, st: &InodeState, progressed: bool) -> Result<bool> {
    let need = credits::map_extent(crate::extent_map::levels(tx.meta(), st)?) + credits::INODE;
    if tx.left() >= need {
        return Ok(true);
    }
    if progressed {
        return Ok(false);
    }
    tx.require(tx.used() + need)?;
    Ok(true)
}

/// Writes `data` at `off`. Returns the bytes written and whether the
/// handle's credits ran out first (the caller writes the rest in a new
/// handle); short without that only on ENOSPC after some progress.
pub fn write(tx: &Tx<'_>, st: &mut InodeState, off: u64, data: &[u8]) -> Result<(u32, bool)> {
    write_held(tx, &mut Held(st), off, data)
}

/// [`write`], with the inode's lock `g` released while the data of newly
/// allocated blocks is copied into the image (see the module essay: the
/// caller holds the inode's I/O lock exclusively).
pub fn write_unlocking(
    tx: &Tx<'_>,
    g: &mut parking_lot::RwLockWriteGuard<'_, InodeState>,
    off: u64,
    data: &[u8],
) -> Result<(u32, bool)> {
    write_held(tx, g, off, data)
}

/// An inode held for a write: the state, and whether its lock can be let go
/// for a while.
trait HeldInode: std::ops::DerefMut<Target = InodeState> {
    /// Runs `f` with the inode's lock released, if it is a lock.
    fn unlocked<U>(&mut self, f: impl FnOnce() -> U) -> U;
}

impl HeldInode for parking_lot::RwLockWriteGuard<'_, InodeState> {
    fn unlocked<U>(&mut self, f: impl FnOnce() -> U) -> U {
        parking_lot::RwLockWriteGuard::unlocked(self, f)
    }
}

/// State that is not released (a caller's plain `&mut InodeState`).
struct Held<'a>(&'a mut InodeState);

impl std::ops::Deref for Held<'_> {
    type Target = InodeState;
    fn deref(&self) -> &InodeState {
        self.0
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut InodeState {
        self.0
    }
}

impl HeldInode for Held<'_> {
    fn unlocked<U>(&mut self, f: impl FnOnce() -> U) -> U {
        f()
    }
}

fn write_held<G: HeldInode>(tx: &Tx<'_>, st: &mut G, off: u64, data: &[u8]) -> Result<(u32, bool)> {
    let end = off.checked_add(data.len() as u64).filter(|e| *e <= MAX_FILE_SIZE).ok_or(FsError::Errno(libc::EFBIG))?;
    let b = bs(tx.meta());
    if off > st.d.size {
        zero_tail(tx.meta(), st, off)?;
    }
    let mut pos = off;
    let mut out_of_credits = false;
    while pos < end {
        let lblk = pos / b;
        let inner = pos % b;
        let res = (|| -> Result<Option<u64>> {
            let mapping = extent_map::lookup(tx.meta(), st, lblk)?;
            let progressed = pos > off || tx.changed();
            if !matches!(mapping, Mapping::Mapped { unwritten: false, .. }) && !room_for_extent(tx, st, progressed)? {
                return Ok(None);
            }
            match mapping {
                Mapping::Mapped { pblk, len, unwritten: false } => {
                    let stop = end.min((lblk + len) * b);
                    let d = &data[(pos - off) as usize..(stop - off) as usize];
                    tx.meta().dev().write_data(d, pblk * b + inner)?;
                    Ok(Some(stop))
                }
                Mapping::Mapped { pblk, len, unwritten: true } => {
                    let need = (end - lblk * b).div_ceil(b);
                    let k = need.min(len);
                    fill_blocks(tx.meta(), pblk, lblk, k, off, data)?;
                    map_written(tx, st, lblk, pblk, k)?;
                    Ok(Some(end.min((lblk + k) * b)))
                }
                Mapping::Hole { len } => {
                    let need = (end - lblk * b).div_ceil(b);
                    let want = need.min(len).min(u64::from(MAX_EXTENT_LEN)).min(1 << 16) as u32;
                    let req = data_request(tx.meta(), st, lblk, want)?;
                    let (pblk, got) = tx.meta().alloc().alloc_data(tx, req)?;
                    let k = u64::from(got);
                    // The blocks are this handle's and unmapped: nobody
                    // else reaches them while the inode is let go.
                    if let Err(e) = st.unlocked(|| fill_blocks(tx.meta(), pblk, lblk, k, off, data)) {
                        let _ = tx.free(pblk, k);
                        return Err(e);
                    }
                    if let Err(e) = extent_map::insert(tx, st, Extent { lblk, pblk, len: got, unwritten: false }) {
                        // Not mapped (no room for the map): not kept.
                        tx.free(pblk, k)?;
                        return Err(e);
                    }
                    st.d.blocks += k;
                    Ok(Some(end.min((lblk + k) * b)))
                }
            }
        })();
        match res {
            Ok(Some(next)) => pos = next,
            Ok(None) => {
                out_of_credits = true;
                break;
            }
            // A full file system after some progress ends the step: while
            // freed blocks still wait for the journal, the caller goes on in
            // a new step (which commits and retries, see `Engine::change`);
            // otherwise it is a short write. Any other error (I/O,
            // corruption) goes up to the error latch.
            Err(FsError::Errno(e @ (libc::ENOSPC | libc::EDQUOT))) if pos > off => {
                if tx.meta().alloc().pending_blocks() > 0 {
                    out_of_credits = true;
                } else {
                    tracing::debug!(errno = e, "short write");
                }
                break;
            }
            Err(e) => return Err(e),
        }
    }
    if pos > st.d.size {
        st.d.size = pos;
    }
    Ok(((pos - off) as u32, out_of_credits))
}

/// Writes whole blocks `[lblk, lblk+k)` at `pblk`: the bytes of `data` (which
/// starts at file offset `off`) where they fall, zeros elsewhere.
pub(crate) fn fill_blocks(meta: &Meta, pblk: u64, lblk: u64, k: u64, off: u64, data: &[u8]) -> Result<()> {
    let b = bs(meta);
    let start = lblk * b;
    let stop = start + k * b;
    let dend = off + data.len() as u64;
    if off <= start && dend >= stop {
        meta.dev().write_data(&data[(start - off) as usize..(stop - off) as usize], pblk * b)?;
        return Ok(());
    }
    let mut buf = vec![0u8; (k * b) as usize];
    let s = off.max(start);
    let e = dend.min(stop);
    if s < e {
        buf[(s - start) as usize..(e - start) as usize].copy_from_slice(&data[(s - off) as usize..(e - off) as usize]);
    }
    meta.dev().write_data(&buf, pblk * b)?;
    Ok(())
}

/// Writes zeros over the written (allocated, not unwritten) parts of the
/// byte range `[from, to)`.
fn zero_written(meta: &Meta, st: &InodeState, from: u64, to: u64) -> Result<()> {
    let b = bs(meta);
    let mut pos = from;
    while pos < to {
        let lblk = pos / b;
        match extent_map::lookup(meta, st, lblk)? {
            Mapping::Hole { len } => pos = to.min(lblk.saturating_add(len).saturating_mul(b)),
            Mapping::Mapped { pblk, len, unwritten } => {
                let stop = to.min((lblk + len) * b);
                if !unwritten {
                    let zeros = vec![0u8; (stop - pos) as usize];
                    meta.dev().write_data(&zeros, pblk * b + pos % b)?;
                }
                pos = stop;
            }
        }
    }
    Ok(())
}

/// One step of unmapping and freeing `[start, end)`: frees the last extents
/// of the range, as many as the handle's credits allow, and returns whether
/// any are left (the caller commits and calls again, in a new handle).
pub fn free_range_step(tx: &Tx<'_>, st: &mut InodeState, start: u64, end: u64, reserve: u64) -> Result<bool> {
    let levels = crate::extent_map::levels(tx.meta(), st)?;
    let per = credits::unmap_extent(levels);
    // Clipped pieces re-inserted at both ends, the inode, and what the
    // caller does after the step (`reserve`).
    let fixed = 2 * credits::tree_insert(levels) + credits::INODE + reserve;
    // Ask for up to half a record (a step of many extents), at least one.
    let want = (tx.log_limit() / 2).clamp(per + fixed, 1024 * per + fixed);
    if tx.left() < want && !tx.changed() {
        tx.require(tx.used() + want)?;
    }
    if tx.left() < per + fixed {
        // Changed already and out of room: the next handle goes on.
        return Ok(true);
    }
    let budget = tx.left().saturating_sub(fixed);
    let k = (budget / per).clamp(1, 1024) as usize;
    match extent_map::tail_cut(tx.meta(), st, start, end, k)? {
        None => {
            free_range(tx, st, start, end)?;
            Ok(false)
        }
        Some(cut) => {
            free_range(tx, st, cut, end)?;
            Ok(true)
        }
    }
}

/// Unmaps and frees logical blocks `[start, end)` (the caller's credits must
/// cover every extent in it: see [`free_range_step`]).
pub fn free_range(tx: &Tx<'_>, st: &mut InodeState, start: u64, end: u64) -> Result<()> {
    for e in extent_map::remove(tx, st, start, end)? {
        tx.free(e.pblk, u64::from(e.len))?;
        st.d.blocks = st.d.blocks.saturating_sub(u64::from(e.len));
    }
    Ok(())
}

/// Changes the file size (truncate or extend with a hole); a shrink leaves
/// the blocks past the new end to the caller.
pub fn set_size(tx: &Tx<'_>, st: &mut InodeState, size: u64) -> Result<()> {
    if size > MAX_FILE_SIZE {
        return Err(FsError::Errno(libc::EFBIG));
    }
    if size >= st.d.size {
        zero_tail(tx.meta(), st, size)?;
    }
    // A shrink frees the blocks past the new end afterwards, in steps
    // (`free_range_step`), with the inode on the orphan list meanwhile. The
    // bytes past the new end in the last block stay on disk until the file
    // grows again (`zero_tail`): zeroing them now, in place, would change the
    // committed file before this truncate commits.
    st.d.size = size;
    Ok(())
}

/// Before the file grows to `new_size`: zeroes the stale bytes between the
/// current end of file and the end of its last block (left there by an
/// earlier truncate). They are past the committed end of file, so writing
/// them in place is invisible to every committed state.
pub(crate) fn zero_tail(meta: &Meta, st: &InodeState, new_size: u64) -> Result<()> {
    let b = bs(meta);
    let old = st.d.size;
    if new_size <= old || old.is_multiple_of(b) {
        return Ok(());
    }
    zero_written(meta, st, old, new_size.min(old.div_ceil(b) * b))
}

/// Allocates unwritten extents over the holes in blocks `[s, e)`, as many
/// as the handle's credits allow; returns whether holes are left.
pub fn allocate_unwritten(tx: &Tx<'_>, st: &mut InodeState, s: u64, e: u64) -> Result<bool> {
    let mut l = s;
    let mut progressed = tx.changed();
    while l < e {
        match extent_map::lookup(tx.meta(), st, l)? {
            Mapping::Mapped { len, .. } => l = e.min(l + len),
            Mapping::Hole { len } => {
                if !room_for_extent(tx, st, progressed)? {
                    return Ok(true);
                }
                progressed = true;
                let want = (e - l).min(len).min(1 << 16) as u32;
                let req = data_request(tx.meta(), st, l, want)?;
                let (pblk, got) = tx.meta().alloc().alloc_data(tx, req)?;
                if let Err(e) = extent_map::insert(tx, st, Extent { lblk: l, pblk, len: got, unwritten: true }) {
                    // Not mapped (no room for the map): not kept.
                    tx.free(pblk, u64::from(got))?;
                    return Err(e);
                }
                st.d.blocks += u64::from(got);
                l += u64::from(got);
            }
        }
    }
    Ok(false)
}

/// Converts the unwritten extents over the byte range `[off, end)` to
/// written, as many as the handle's credits allow: the staged write's last
/// stage (see `file_io::staged`), once the data is in their blocks. Returns
/// the byte position up to which the range is written (from `off`) and
/// whether the credits ran out first. A hole stops it there (the stage
/// before mapped the range; nothing else maps or unmaps it meanwhile).
pub fn convert_written(tx: &Tx<'_>, st: &mut InodeState, off: u64, end: u64) -> Result<(u64, bool)> {
    let b = bs(tx.meta());
    let reached = |l: u64| end.min(off.max(l * b));
    let (mut l, e) = (off / b, end.div_ceil(b));
    let mut progressed = tx.changed();
    while l < e {
        match extent_map::lookup(tx.meta(), st, l)? {
            Mapping::Hole { .. } => return Ok((reached(l), false)),
            Mapping::Mapped { len, unwritten: false, .. } => l = e.min(l + len),
            Mapping::Mapped { pblk, len, unwritten: true } => {
                if !room_for_extent(tx, st, progressed)? {
                    return Ok((reached(l), true));
                }
                progressed = true;
                let k = len.min(e - l);
                map_written(tx, st, l, pblk, k)?;
                l += k;
            }
        }
    }
    Ok((end, false))
}

/// Maps the `k` unwritten blocks from `lblk` at `pblk` written, once their
/// data is in them. No room to map them written: the blocks go back and the
/// range reads as a hole, zeros, as it read while unwritten.
fn map_written(tx: &Tx<'_>, st: &mut InodeState, lblk: u64, pblk: u64, k: u64) -> Result<()> {
    extent_map::remove(tx, st, lblk, lblk + k)?;
    if let Err(e) = extent_map::insert(tx, st, Extent { lblk, pblk, len: k as u32, unwritten: false }) {
        tx.free(pblk, k)?;
        st.d.blocks -= k;
        return Err(e);
    }
    Ok(())
}

/// The mapped extents of blocks `[first, last)`, clipped to it (holes left
/// out).
pub fn mapped_runs(meta: &Meta, st: &InodeState, first: u64, last: u64) -> Result<Vec<Extent>> {
    let mut runs = Vec::new();
    let mut l = first;
    while l < last {
        match extent_map::lookup(meta, st, l)? {
            Mapping::Hole { len } => l = last.min(l.saturating_add(len)),
            Mapping::Mapped { pblk, len, unwritten } => {
                // One extent's length, so within a u32.
                let len = len.min(last - l);
                runs.push(Extent { lblk: l, pblk, len: len as u32, unwritten });
                l += len;
            }
        }
    }
    Ok(runs)
}

/// fallocate(2), one step: `phase` (0 at the first call) remembers where
/// the operation is between steps. Returns whether more steps are needed
/// (the caller runs each in a new handle, holding the inode's I/O lock).
pub fn fallocate(tx: &Tx<'_>, st: &mut InodeState, off: u64, len: u64, mode: i32, phase: &mut u8) -> Result<bool> {
    use crate::types::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO};
    if len == 0 {
        return Err(FsError::Errno(libc::EINVAL));
    }
    let end = off.checked_add(len).filter(|e| *e <= MAX_FILE_SIZE).ok_or(FsError::Errno(libc::EFBIG))?;
    if mode & !(KEEP | PUNCH | ZERO) != 0 {
        return Err(FsError::Errno(libc::EOPNOTSUPP));
    }
    if mode & PUNCH != 0 && (mode & KEEP == 0 || mode & ZERO != 0) {
        return Err(FsError::Errno(libc::EOPNOTSUPP));
    }
    let b = bs(tx.meta());
    let keep = mode & KEEP != 0;
    let (fs, fe) = (off.div_ceil(b), end / b);
    let clears = mode & (PUNCH | ZERO) != 0;
    loop {
        match *phase {
            // Punch and zero-range: free the whole blocks of the range.
            0 if clears => {
                if fs < fe && free_range_step(tx, st, fs, fe, 0)? {
                    return Ok(true);
                }
                *phase = 1;
            }
            0 => *phase = 2,
            // Zero the partial edge blocks; zero-range re-maps the middle
            // as unwritten first.
            1 => {
                if mode & ZERO != 0 && fs < fe && allocate_unwritten(tx, st, fs, fe)? {
                    return Ok(true);
                }
                zero_written(tx.meta(), st, off, end.min(fs * b))?;
                zero_written(tx.meta(), st, (fe * b).max(off), end)?;
                if mode & PUNCH != 0 {
                    return Ok(false);
                }
                *phase = 2;
            }
            // Allocate what is still a hole (zero-range: the partial edge
            // blocks that were holes, as ext4 does), then the size.
            _ => {
                if allocate_unwritten(tx, st, off / b, end.div_ceil(b))? {
                    return Ok(true);
                }
                if !keep && end > st.d.size {
                    zero_tail(tx.meta(), st, end)?;
                    st.d.size = end;
                }
                return Ok(false);
            }
        }
    }
}

/// SEEK_DATA (3) / SEEK_HOLE (4). Unwritten extents count as data.
pub fn seek(meta: &Meta, st: &InodeState, off: u64, whence: i32) -> Result<u64> {
    let size = st.d.size;
    if off >= size {
        return Err(FsError::Errno(libc::ENXIO));
    }
    let b = bs(meta);
    let mut pos = off;
    while pos < size {
        let lblk = pos / b;
        match (extent_map::lookup(meta, st, lblk)?, whence) {
            (Mapping::Mapped { .. }, libc::SEEK_DATA) => return Ok(pos),
            (Mapping::Hole { .. }, libc::SEEK_HOLE) => return Ok(pos),
            (Mapping::Mapped { len, .. }, _) | (Mapping::Hole { len }, _) => {
                pos = lblk.saturating_add(len).saturating_mul(b);
            }
        }
    }
    match whence {
        libc::SEEK_HOLE => Ok(size),
        _ => Err(FsError::Errno(libc::ENXIO)),
    }
}
