//! Changes to file data and size: write, fallocate, setattr (truncate).
//!
//! Each may need more blocks of log than one handle may hold — a write or
//! fallocate that maps thousands of extents in a fragmented file system, a
//! truncate that frees a million — so each runs in steps: a step does what
//! its handle's credits cover (see `file`: the budget is checked before
//! every extent) and the next step continues in a new handle, after a commit
//! if the log needs one. The inode's I/O lock is held across the steps, so
//! no other write, truncate or fallocate of the file interleaves.
//!
//! What a crash between steps leaves: a write or fallocate partly done (as
//! in any file system: neither is atomic); a truncate with the new size and
//! the inode on the orphan list, which the next mount finishes.

use super::FileIo;
use crate::error::{FsError, Result};
use crate::inode::InodeState;
use crate::journal::credits;
use crate::tx::Tx;
use crate::types::*;
use crate::{acl, file};
use cairn_format::inode::*;
use std::sync::atomic::Ordering;

/// Where a write comes from, which decides what of the space it may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// A caller waiting for it (write-through, O_DIRECT).
    Caller,
    /// The kernel's dirty pages being written back.
    WriteBack,
}

impl FileIo {
    /// Writes `data` at `off`; returns the bytes written. Overwrites of
    /// written blocks inside the file take the fast path (`overwrite`); the
    /// rest is journaled, in steps. Sets mtime and ctime.
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<u32> {
        self.write_data(ino, off, data, true)
    }

    /// [`FileIo::write`], setting mtime and ctime only if `update_times`. FUSE's
    /// writeback cache owns a cached file's times: the kernel sends them in
    /// a SETATTR, and its WRITEs of dirty pages may reach cairn after that
    /// SETATTR, so they must not move the times again.
    pub fn write_data(&self, ino: u64, off: u64, data: &[u8], update_times: bool) -> Result<u32> {
        self.write_from(Origin::Caller, ino, off, data, update_times)
    }

    /// [`FileIo::write_data`] for a write from `origin`.
    fn write_from(&self, origin: Origin, ino: u64, off: u64, data: &[u8], update_times: bool) -> Result<u32> {
        if self.inodes.cache().flags_in_use() {
            let sync = {
                let r = self.inodes.iget(ino)?;
                let g = r.read();
                self.check_protected_write(&g, off, data)?;
                crate::inode_flags::is_sync(&g)
            };
            if sync {
                let n = self.write_data_checked(origin, ino, off, data, update_times)?;
                self.fsync(ino, false)?;
                return Ok(n);
            }
        }
        self.write_data_checked(origin, ino, off, data, update_times)
    }

    /// Dirty pages that the kernel's writeback cache writes back: all of
    /// `data` or an error, never a short count. The kernel ignores the
    /// count in a write-back's reply: a short one would leave pages marked
    /// clean whose bytes never reached the image, and the file's `fsync`
    /// would return 0 (issue 50: fsync'd appends cut back to a block
    /// boundary). The error goes to the file's next `fsync` and `close`.
    ///
    /// What a refused write-back stored before the space ran out stays; it
    /// changes no durable byte but to the newer bytes the kernel held for
    /// it, and the size only grows (`file::write` extends it to what was
    /// written), so everything an earlier `fsync` covered is intact. The
    /// kernel owns the file's times (see [`FileIo::write_data`]).
    pub fn write_back(&self, ino: u64, off: u64, data: &[u8]) -> Result<u32> {
        Self::whole(data, self.write_from(Origin::WriteBack, ino, off, data, false))
    }

    /// [`FileIo::write_data`], whole or an error: for a caller that cannot take
    /// a short count. Besides write-backs ([`FileIo::write_back`]), an O_DIRECT
    /// write under FUSE's asynchronous direct I/O: the kernel turns a short
    /// count there into EIO (`fuse_get_res_by_io`), so a full disk must say
    /// ENOSPC instead.
    pub fn write_whole(&self, ino: u64, off: u64, data: &[u8], update_times: bool) -> Result<u32> {
        Self::whole(data, self.write_data(ino, off, data, update_times))
    }

    /// The data blocks a write of `len` bytes at `off` would allocate: the
    /// holes in its range (0: an overwrite of allocated blocks, which needs
    /// no space).
    pub fn blocks_to_allocate(&self, ino: u64, off: u64, len: u64) -> Result<u64> {
        let r = self.inodes.iget(ino)?;
        let g = r.read();
        file::hole_blocks(self.engine.meta(), &g, off, len)
    }

    /// Holds `bytes` of the free space for dirty pages the kernel accepted
    /// and has still to write back (0: none): writes that are not
    /// write-backs, and fallocate, get ENOSPC rather than take them. The
    /// FUSE space guard sets it while the disk is nearly full.
    pub fn hold_for_write_back(&self, bytes: u64) {
        let bs = u64::from(self.engine.meta().geo().block_size);
        self.engine.meta().alloc().hold_for_write_back(bytes.div_ceil(bs));
    }

    /// Free bytes that file data may take, what is held for write-backs
    /// included: statfs's available space before the hold.
    pub fn data_space_free(&self) -> Result<u64> {
        let s = self.engine.statfs()?;
        let unheld = s.blocks_free.saturating_sub(self.engine.meta().alloc().reserve_blocks());
        Ok(unheld * u64::from(s.block_size))
    }

    /// A write's count if it wrote all of `data`, else ENOSPC.
    fn whole(data: &[u8], written: Result<u32>) -> Result<u32> {
        let n = written?;
        if (n as usize) < data.len() {
            tracing::debug!(len = data.len(), stored = n, "a whole write refused: the file system is full");
            return Err(FsError::Errno(libc::ENOSPC));
        }
        Ok(n)
    }

    /// ENOSPC if a write from `origin` of `len` bytes at `off` would take
    /// blocks held for the kernel's write-backs (see
    /// `Allocator::room_for_writes`); only while any are held.
    fn admit(&self, origin: Origin, ino: u64, off: u64, len: u64) -> Result<()> {
        if origin == Origin::WriteBack || self.engine.meta().alloc().room_for_writes(u64::MAX) == u64::MAX {
            return Ok(());
        }
        let holes = self.blocks_to_allocate(ino, off, len)?;
        if self.engine.meta().alloc().room_for_writes(holes) < holes {
            // The space of deleted files the reaper is still freeing first.
            if !self.engine.wait_for_reaper()? || self.engine.meta().alloc().room_for_writes(holes) < holes {
                return Err(FsError::Errno(libc::ENOSPC));
            }
        }
        Ok(())
    }

    /// Waits, once, for the space of deleted files that the reaper is still
    /// freeing (see `reaper`); false if none was waiting or this thread may
    /// not wait. For a caller deciding from the free space whether a write
    /// fits, before it calls in (the FUSE space guard).
    pub fn wait_for_deleted_space(&self) -> Result<bool> {
        self.engine.wait_for_reaper()
    }

    /// [`FileIo::write_data`] once the inode's flags allow it.
    fn write_data_checked(&self, origin: Origin, ino: u64, off: u64, data: &[u8], update_times: bool) -> Result<u32> {
        if let Some(n) = self.try_overwrite(ino, off, data, update_times)? {
            return Ok(n);
        }
        self.admit(origin, ino, off, data.len() as u64)?;
        self.ow.note_journaled(data.len());
        let mut done = 0usize;
        let mut waited = false;
        loop {
            let rest = &data[done..];
            let step = if self.engine.opts().staged_writes {
                self.write_staged(ino, off + done as u64, rest, update_times)
            } else {
                self.write_steps(ino, off + done as u64, rest, update_times)
            };
            match step {
                Ok(n) => {
                    done += n as usize;
                    if done >= data.len() {
                        return Ok(done as u32);
                    }
                }
                Err(FsError::Errno(libc::ENOSPC | libc::EDQUOT)) => {}
                Err(e) => return Err(e),
            }
            // Full: space of deleted files the reaper is still freeing is
            // the caller's to wait for (see `reaper`), once.
            if waited || !self.engine.wait_for_reaper()? {
                return if done > 0 { Ok(done as u32) } else { Err(FsError::Errno(libc::ENOSPC)) };
            }
            waited = true;
        }
    }

    /// A step's result, with the inode stored first when the step failed
    /// after changing something: the in-core and on-disk inode stay in step
    /// with what the step mapped before it failed.
    pub(super) fn stored_if_failed<T>(&self, tx: &Tx<'_>, g: &InodeState, r: Result<T>) -> Result<T> {
        if r.is_err() && tx.changed() {
            self.inodes.store(tx, g)?;
        }
        r
    }

    /// The journaled write, in steps under the inode's I/O lock.
    pub(super) fn write_steps(&self, ino: u64, off: u64, data: &[u8], update_times: bool) -> Result<u32> {
        let _io = self.inodes.io_locks().exclusive(ino);
        self.inodes.settle_truncate(ino)?;
        let mut done = 0usize;
        loop {
            let step = self.engine.change(credits::DEFAULT, |tx| {
                let r = self.inodes.iget(ino)?;
                let mut g = r.write();
                regular_file(&g)?;
                let written = file::write_unlocking(tx, &mut g, off + done as u64, &data[done..]);
                let (n, more) = self.stored_if_failed(tx, &g, written)?;
                if update_times {
                    let t = now();
                    g.d.mtime = t;
                    g.d.ctime = t;
                }
                self.inodes.store(tx, &g)?;
                Ok((n as usize, more))
            });
            let (n, more) = match step {
                Ok(x) => x,
                // A later step that finds the file system full (after
                // `change` committed and retried, if frees were waiting for
                // the journal) keeps what the earlier ones wrote: a short
                // write, never a lost count.
                Err(FsError::Errno(libc::ENOSPC | libc::EDQUOT)) if done > 0 => return Ok(done as u32),
                Err(e) => return Err(e),
            };
            done += n;
            if !more || done >= data.len() {
                return Ok(done as u32);
            }
            self.engine.txm().stats.steps.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// fallocate(2): `mode` is 0 or a combination of `FALLOC_FL_*`. A full
    /// file system waits once for the reaper (see [`FileIo::write`]). Sets ctime,
    /// and mtime for a punch or zero-range.
    pub fn fallocate(&self, ino: u64, off: u64, len: u64, mode: i32) -> Result<()> {
        self.fallocate_data(ino, off, len, mode, true)
    }

    /// [`FileIo::fallocate`], setting the times only if `update_times`: under
    /// FUSE's writeback cache the kernel owns a cached file's times (see
    /// [`FileIo::write_data`]). It stamps them itself before it sends FALLOCATE
    /// and sends them in the SETATTR of the inode's write-back, which may
    /// reach cairn first; times set here would then stay on disk, different
    /// from what the caller saw.
    pub fn fallocate_data(&self, ino: u64, off: u64, len: u64, mode: i32, update_times: bool) -> Result<()> {
        let mut sync = false;
        if self.inodes.cache().flags_in_use() {
            let r = self.inodes.iget(ino)?;
            let g = r.read();
            crate::inode_flags::refuse_if_immutable(&g)?;
            if g.d.attr_flags & cairn_format::inode::ATTR_APPEND != 0 && mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                return Err(FsError::Errno(libc::EPERM));
            }
            sync = crate::inode_flags::is_sync(&g);
        }
        if mode & libc::FALLOC_FL_PUNCH_HOLE == 0 {
            self.admit(Origin::Caller, ino, off, len)?;
        }
        match self.fallocate_steps(ino, off, len, mode, update_times) {
            Err(FsError::Errno(libc::ENOSPC)) if self.engine.wait_for_reaper()? => {
                self.fallocate_steps(ino, off, len, mode, update_times)
            }
            r => r,
        }?;
        if sync {
            self.fsync(ino, false)?;
        }
        Ok(())
    }

    fn fallocate_steps(&self, ino: u64, off: u64, len: u64, mode: i32, update_times: bool) -> Result<()> {
        let _io = self.inodes.io_locks().exclusive(ino);
        self.inodes.settle_truncate(ino)?;
        let mut phase = 0u8;
        loop {
            let more = self.engine.change(credits::DEFAULT, |tx| {
                let r = self.inodes.iget(ino)?;
                let mut g = r.write();
                match g.d.file_type() {
                    S_IFREG => {}
                    S_IFDIR => return Err(FsError::Errno(libc::EISDIR)),
                    _ => return Err(FsError::Errno(libc::ENODEV)),
                }
                let mut p = phase;
                // What was allocated stays allocated (as ext4's fallocate
                // leaves it): the inode must record it.
                let allocated = file::fallocate(tx, &mut g, off, len, mode, &mut p);
                let more = self.stored_if_failed(tx, &g, allocated)?;
                if update_times {
                    let t = now();
                    if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
                        g.d.mtime = t;
                    }
                    g.d.ctime = t;
                }
                self.inodes.store(tx, &g)?;
                Ok((more, p))
            })?;
            phase = more.1;
            if !more.0 {
                return Ok(());
            }
            self.engine.txm().stats.steps.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops what a write, truncate, chown or fallocate must drop, when the
    /// kernel leaves it to the file system (FUSE_HANDLE_KILLPRIV_V2): the
    /// `security.capability` xattr always, and with `suidgid` the set-id
    /// bits of a non-directory as the kernel's `setattr_should_drop_suidgid`
    /// does: suid always, sgid of a group-executable file always, and a
    /// sgid without group execute (a mandatory-locking mark) unless
    /// `suidgid(gid)` says the caller may keep it: the caller is in the
    /// file's group `gid` or holds CAP_FSETID. Whether to drop set-id bits
    /// at all (the caller lacks CAP_FSETID; any chown) is the caller's
    /// decision. Costs nothing while no inode of the mount has a set-id bit
    /// or an xattr block (`InodeCache::privs_in_use`: the look at the inode
    /// would wait for the inode lock a write in flight holds), else one
    /// look at the inode when there is nothing to drop. Returns whether the mode changed: the kernel's cached attributes then
    /// still show the old bits, and the adapter tells it.
    pub fn kill_privs(&self, ino: u64, suidgid: Option<&dyn Fn(u32) -> bool>) -> Result<bool> {
        const CAPS: &[u8] = b"security.capability";
        if !self.inodes.cache().privs_in_use() {
            return Ok(false);
        }
        let needs = |st: &crate::inode::InodeState| -> Result<(u32, bool)> {
            let m = st.d.mode;
            let mut bits = 0;
            // Every non-directory: the kernel asks for a chown of a FIFO,
            // socket or device node too (writes reach regular files only).
            if let (Some(may_keep_sgid), false) = (suidgid, st.d.is_dir()) {
                bits = m & libc::S_ISUID;
                if m & libc::S_ISGID != 0 && (m & libc::S_IXGRP != 0 || !may_keep_sgid(st.d.gid)) {
                    bits |= libc::S_ISGID;
                }
            }
            let caps = st.d.xattr_block != 0
                && match crate::xattr::get(self.engine.meta(), st, CAPS) {
                    Ok(_) => true,
                    Err(FsError::Errno(libc::ENODATA | libc::EOPNOTSUPP)) => false,
                    Err(e) => return Err(e),
                };
            Ok((bits, caps))
        };
        let (bits, caps) = self.engine.read_op(|| needs(&self.inodes.iget(ino)?.read()))?;
        if bits == 0 && !caps {
            return Ok(false);
        }
        self.engine.change(credits::DEFAULT, |tx| {
            let r = self.inodes.iget(ino)?;
            let mut g = r.write();
            let (bits, caps) = needs(&g)?;
            g.d.mode &= !bits;
            if caps {
                crate::xattr::remove(tx, &mut g, CAPS)?;
            }
            g.d.ctime = now();
            self.inodes.store(tx, &g)?;
            Ok(bits != 0)
        })
    }

    /// A SETATTR of times alone on a file with no links left: set in core,
    /// with no transaction (`None`: not such a request, take the usual
    /// way). With the write-back cache the kernel sends one after every
    /// unlink (the file's new ctime, `fuse_update_ctime`). Nothing of an
    /// unlinked inode outlives a crash (mount frees it), and whatever
    /// stores it later (its free) stores these times with it.
    fn set_unlinked_times(&self, ino: u64, set: &SetAttr) -> Result<Option<Attr>> {
        let times_only = set.mode.is_none() && set.uid.is_none() && set.gid.is_none() && set.size.is_none();
        if !times_only || self.engine.is_read_only() {
            return Ok(None);
        }
        let r = self.inodes.iget(ino)?;
        let mut g = r.write();
        let special = cairn_format::inode::ATTR_IMMUTABLE | cairn_format::inode::ATTR_APPEND;
        if g.d.nlink > 0 || g.freed || g.d.attr_flags & special != 0 {
            return Ok(None);
        }
        g.fold_lazy_time();
        set_times(&mut g.d, set, now());
        self.engine.meta().orphans().times_in_core.fetch_add(1, Ordering::Relaxed);
        Ok(Some(self.inodes.attr(&g)))
    }

    /// Changes attributes (chmod, chown, truncate, utimens). A truncate that
    /// frees more than one handle covers finishes in steps (see the module
    /// essay), on the reaper's thread unless `-o sync_delete`.
    pub fn setattr(&self, _ctx: &Ctx, ino: u64, set: &SetAttr) -> Result<Attr> {
        if let Some(attr) = self.set_unlinked_times(ino, set)? {
            return Ok(attr);
        }
        let _io = set.size.map(|_| self.inodes.io_locks().exclusive(ino));
        if set.size.is_some() {
            self.inodes.settle_truncate(ino)?;
            // A new size ends the stream the preallocation was made for.
            self.engine.meta().alloc().discard_prealloc(self.engine.meta().bufs(), ino);
        }
        let (attr, more) = self.engine.change(credits::DEFAULT, |tx| {
            let r = self.inodes.iget(ino)?;
            let mut g = r.write();
            // An immutable inode changes in nothing; an append-only one
            // keeps its size, mode and owner, and takes no times but "now"
            // and those its writes set (the kernel's write-back cache sends
            // mtime and ctime, never atime: an explicit atime is utimes').
            crate::inode_flags::refuse_if_immutable(&g)?;
            if g.d.attr_flags & cairn_format::inode::ATTR_APPEND != 0
                && (set.size.is_some()
                    || set.mode.is_some()
                    || set.uid.is_some()
                    || set.gid.is_some()
                    || matches!(set.atime, Some(TimeSet::At(_))))
            {
                return Err(FsError::Errno(libc::EPERM));
            }
            // Times set here (utimens) must not be overridden by older
            // fast-path times.
            g.fold_lazy_time();
            let t = now();
            let mut more = false;
            if let Some(size) = set.size {
                regular_file(&g)?;
                if size < g.d.size {
                    // The blocks past the new end first, as many as this
                    // handle covers (its credits are asked for before
                    // anything changes, so a restart finds the inode as it
                    // was), then the new size and, if blocks are left, the
                    // orphan entry that lets mount finish the job.
                    let from = size.div_ceil(u64::from(self.engine.meta().geo().block_size));
                    more = file::free_range_step(tx, &mut g, from, u64::MAX, self.inodes.orphan_credits()?)?;
                    file::set_size(tx, &mut g, size)?;
                    if more {
                        self.inodes.orphan_add(tx, &mut g)?;
                    }
                } else if size != g.d.size {
                    file::set_size(tx, &mut g, size)?;
                }
                g.d.mtime = t;
            }
            if let Some(m) = set.mode {
                g.d.mode = (g.d.mode & S_IFMT) | (m & 0o7777);
                // An access ACL follows the new permission bits.
                match crate::xattr::get(tx.meta(), &g, acl::ACCESS) {
                    Ok(v) => {
                        let mut a = acl::Acl::parse(&v)?;
                        a.chmod(g.d.mode);
                        crate::xattr::set(tx, &mut g, acl::ACCESS, &a.encode(), 0)?;
                    }
                    Err(FsError::Errno(libc::ENODATA)) => {}
                    Err(e) => return Err(e),
                }
            }
            if let Some(u) = set.uid {
                g.d.uid = u;
            }
            if let Some(gid) = set.gid {
                g.d.gid = gid;
            }
            set_times(&mut g.d, set, t);
            self.inodes.store(tx, &g)?;
            Ok((self.inodes.attr(&g), more))
        })?;
        if more {
            if self.engine.reaper().deferred {
                // The rest goes to the reaper (see `inode_store`); about
                // this many blocks lie past the new end.
                let past = attr.blocks / u64::from(self.engine.meta().geo().block_size / 512);
                let kept = attr.size.div_ceil(u64::from(self.engine.meta().geo().block_size));
                self.engine.reaper().push_truncate(ino, past.saturating_sub(kept));
                self.engine.reaper().kick();
                return Ok(attr);
            }
            self.inodes.finish_truncate(ino, &mut |_| {})?;
            return self.inodes.getattr(ino);
        }
        if attr.flags & cairn_format::inode::ATTR_SYNC != 0 {
            self.fsync(ino, false)?;
        }
        Ok(attr)
    }
}

/// The times a SETATTR names (`Now`: `t`), and the ctime it gives or `t`.
fn set_times(d: &mut cairn_format::inode::DiskInode, set: &SetAttr, t: Timestamp) {
    let resolve = |ts: TimeSet| match ts {
        TimeSet::Now => t,
        TimeSet::At(x) => x,
    };
    if let Some(a) = set.atime {
        d.atime = resolve(a);
    }
    if let Some(m) = set.mtime {
        d.mtime = resolve(m);
    }
    d.ctime = set.ctime.unwrap_or(t);
}

/// EISDIR for a directory, EINVAL for anything else that is not a regular
/// file: what a write or a size change of `st` answers.
pub(super) fn regular_file(st: &crate::inode::InodeState) -> Result<()> {
    match st.d.file_type() {
        S_IFREG => Ok(()),
        S_IFDIR => Err(FsError::Errno(libc::EISDIR)),
        _ => Err(FsError::Errno(libc::EINVAL)),
    }
}
