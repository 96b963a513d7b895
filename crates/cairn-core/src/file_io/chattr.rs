//! The chattr operations of [`FileIo`]: reading and setting an inode's flags,
//! and the checks of opens and writes that the flags forbid. The rules
//! themselves, and which flags cairn keeps, are `inode_flags`'s.

use super::FileIo;
use crate::error::{FsError, Result};
use crate::inode::InodeState;
use crate::inode_flags::*;
use crate::journal::credits;
use crate::types::{now, Attr, Ctx};

impl FileIo {
    /// The inode's chattr flags (Linux's FS_*_FL values).
    pub fn inode_flags(&self, ino: u64) -> Result<u32> {
        self.engine.read_op(|| Ok(self.inodes.iget(ino)?.read().d.attr_flags & SETTABLE))
    }

    /// Sets the inode's chattr flags to `flags` as `ctx` (see the module
    /// essay for who may); sets ctime.
    pub fn set_inode_flags(&self, ctx: &Ctx, ino: u64, flags: u32) -> Result<Attr> {
        if flags & !SETTABLE != 0 {
            return Err(FsError::Errno(libc::EOPNOTSUPP));
        }
        self.engine.change(credits::INODE, |tx| {
            let r = self.inodes.iget(ino)?;
            let mut g = r.write();
            let old = g.d.attr_flags;
            if ctx.uid != 0 && ctx.uid != g.d.uid {
                return Err(FsError::Errno(libc::EPERM));
            }
            if (old ^ flags) & (ATTR_IMMUTABLE | ATTR_APPEND) != 0 && ctx.uid != 0 {
                return Err(FsError::Errno(libc::EPERM));
            }
            if old & ATTR_IMMUTABLE != 0 && flags & ATTR_IMMUTABLE != 0 && old != flags {
                return Err(FsError::Errno(libc::EPERM));
            }
            if old != flags {
                g.d.attr_flags = flags;
                g.d.ctime = now();
                self.inodes.store(tx, &g)?;
                if flags & (ATTR_IMMUTABLE | ATTR_APPEND | ATTR_SYNC | ATTR_DIRSYNC) != 0 {
                    self.inodes.cache().note_protected();
                }
                if flags & (ATTR_IMMUTABLE | ATTR_APPEND) != 0 {
                    // Written with the superblock at the commit.
                    self.engine.meta().sb().lock().feature_compat |= cairn_format::superblock::COMPAT_INODE_FLAGS;
                }
            }
            Ok(self.inodes.attr(&g))
        })
    }

    /// Whether an inode of this file system has ever been made immutable or
    /// append-only (`COMPAT_INODE_FLAGS`): opens must then be checked
    /// ([`FileIo::check_open`]).
    pub fn has_protected_inodes(&self) -> bool {
        self.engine.meta().sb().lock().feature_compat & cairn_format::superblock::COMPAT_INODE_FLAGS != 0
    }

    /// EPERM for an `open(2)` with `flags` that the inode's chattr flags
    /// forbid: any write access or O_TRUNC to an immutable file; to an
    /// append-only one, write access without O_APPEND, or O_TRUNC.
    pub fn check_open(&self, ino: u64, flags: i32) -> Result<()> {
        let f = self.engine.read_op(|| Ok(self.inodes.iget(ino)?.read().d.attr_flags))?;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if !writing || f & (ATTR_IMMUTABLE | ATTR_APPEND) == 0 {
            return Ok(());
        }
        if f & ATTR_IMMUTABLE != 0 || flags & libc::O_APPEND == 0 || flags & libc::O_TRUNC != 0 {
            return Err(FsError::Errno(libc::EPERM));
        }
        Ok(())
    }

    /// EPERM for a write of `data` at `off` that `st` does not allow:
    /// any write to an immutable file, and one to an append-only file that
    /// would change a byte already there.
    pub(crate) fn check_protected_write(&self, st: &InodeState, off: u64, data: &[u8]) -> Result<()> {
        let f = st.d.attr_flags;
        if f & ATTR_IMMUTABLE != 0 {
            return Err(FsError::Errno(libc::EPERM));
        }
        if f & ATTR_APPEND != 0 && off < st.d.size {
            let n = (st.d.size - off).min(data.len() as u64) as usize;
            let old = crate::file::read(self.engine.meta(), st, off, n as u32)?;
            if old.len() != n || old[..] != data[..n] {
                return Err(FsError::Errno(libc::EPERM));
            }
        }
        Ok(())
    }
}
