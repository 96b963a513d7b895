//! Conversions between the engine's types and fuser's.
//!
//! Pure functions, no state and no locking: engine [`Attr`] → [`FileAttr`],
//! on-disk [`Timestamp`] ↔ [`SystemTime`], `DT_*` → [`FileType`], and engine
//! errors → [`Errno`]. Nothing here touches the image, so nothing here is
//! durable; it only decides what the kernel is told.

use cairn_core::{Attr, FsError, Timestamp};
use fuser::{Errno, FileAttr, FileType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The errno to answer a request that failed in the engine.
pub fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

/// A seconds+nanoseconds timestamp (possibly before 1970) as a `SystemTime`.
pub fn to_system_time(t: Timestamp) -> SystemTime {
    let nsec = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.sec.unsigned_abs()) + nsec
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + nsec
    }
}

/// A `SystemTime` as the engine's timestamp (floor to whole seconds, then nanoseconds).
pub fn from_system_time(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp { sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), nsec: d.subsec_nanos() },
        Err(e) => {
            // Before the epoch: -1.25 s is { sec: -2, nsec: 750_000_000 }.
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                Timestamp { sec: -secs, nsec: 0 }
            } else {
                Timestamp { sec: -secs - 1, nsec: 1_000_000_000 - d.subsec_nanos() }
            }
        }
    }
}

/// The fuser file type of a `S_IFMT` mode (unknown types read as regular files).
pub fn kind_of_mode(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// The fuser file type of a `DT_*` directory-entry type.
/// statx's `STATX_ATTR_*` bits for chattr's flags, and the mask of those
/// cairn reports: immutable (0x10), append (0x20), nodump (0x40).
pub fn statx_attributes(flags: u32) -> (u64, u64) {
    use cairn_core::inode_flags::{ATTR_APPEND, ATTR_IMMUTABLE, ATTR_NODUMP};
    let mut a = 0u64;
    for (f, bit) in [(ATTR_IMMUTABLE, 0x10), (ATTR_APPEND, 0x20), (ATTR_NODUMP, 0x40)] {
        if flags & f != 0 {
            a |= bit;
        }
    }
    (a, 0x10 | 0x20 | 0x40)
}

pub fn kind_of_dtype(dtype: u8) -> FileType {
    match dtype {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// Engine attributes as the kernel wants them.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.crtime),
        kind: kind_of_mode(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // The kernel sent `new_encode_dev(rdev)` in MKNOD and decodes the
        // same 32-bit encoding here; the engine stores it unchanged.
        rdev: a.rdev as u32,
        blksize: a.blksize,
        flags: 0,
    }
}

/// The attributes of a negative entry (inode 0): only the TTL matters.
pub fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_across_the_epoch() {
        for (sec, nsec) in [(0, 0), (1, 5), (1_700_000_000, 999_999_999), (-1, 0), (-2, 750_000_000), (-5, 999_999_999)]
        {
            let t = Timestamp { sec, nsec };
            assert_eq!(from_system_time(to_system_time(t)), t, "{sec}.{nsec}");
        }
        let before = UNIX_EPOCH - Duration::from_millis(1250);
        assert_eq!(from_system_time(before), Timestamp { sec: -2, nsec: 750_000_000 });
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_of_mode(libc::S_IFDIR | 0o755), FileType::Directory);
        assert_eq!(kind_of_mode(libc::S_IFLNK | 0o777), FileType::Symlink);
        assert_eq!(kind_of_mode(libc::S_IFREG | 0o644), FileType::RegularFile);
        assert_eq!(kind_of_dtype(libc::DT_SOCK), FileType::Socket);
        assert_eq!(kind_of_dtype(libc::DT_UNKNOWN), FileType::RegularFile);
    }

    #[test]
    fn errno_mapping() {
        assert_eq!(errno(&FsError::Errno(libc::ENOENT)).code(), libc::ENOENT);
        assert_eq!(errno(&FsError::Shutdown).code(), libc::EIO);
        assert_eq!(errno(&FsError::Errno(0)).code(), libc::EIO);
    }
}
