//! Types of the engine's public API (what the FUSE adapter and embedders see).

pub use cairn_format::inode::Timestamp;

/// The time cairn stamps on inodes: the kernel's coarse wall clock
/// (CLOCK_REALTIME_COARSE, the last timer tick), the clock of the kernel's
/// `current_time()`. Under the writeback cache the kernel stamps a file's
/// mtime and ctime itself; were cairn's stamps (a link's ctime, say) read
/// from the fine clock, which runs up to a tick ahead, an object changed
/// later could show an earlier time than one changed before it
/// (xfstests generic/423). Several changes within one tick share a stamp,
/// as on ext4.
pub(crate) fn now() -> Timestamp {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, ours.
    #[allow(unsafe_code)]
    let r = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if r != 0 {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() };
    }
    Timestamp { sec: ts.tv_sec, nsec: ts.tv_nsec as u32 }
}

/// Who is asking: the caller's credentials, used for ownership of new files.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The caller's umask, applied by cairn to a new inode's mode unless
    /// its directory has a default ACL (FUSE_DONT_MASK); 0 when the kernel
    /// applied it already.
    pub umask: u32,
}

impl Ctx {
    /// Root credentials.
    pub fn root() -> Ctx {
        Ctx::default()
    }
}

/// Attributes of an inode, as `stat(2)` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub generation: u32,
    pub size: u64,
    /// 512-byte units, as `st_blocks`.
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    /// Type and permission bits (`S_IFMT | 07777`).
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub blksize: u32,
    /// chattr's flags (`cairn_format::inode::ATTR_*`).
    pub flags: u32,
}

/// A time to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSet {
    /// The current time.
    Now,
    /// A given time.
    At(Timestamp),
}

/// Attributes to change in `setattr`; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    /// Permission bits (07777); the file type is never changed.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate or extend to this size.
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    pub ctime: Option<Timestamp>,
}

/// One directory entry from `readdir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u64,
    /// Offset to pass to `readdir` to continue after this entry.
    pub next_offset: u64,
    /// `DT_*` type.
    pub dtype: u8,
    pub name: Vec<u8>,
}

/// File-system totals, as `statfs(2)` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

/// `rename` flags (as `renameat2`).
pub const RENAME_NOREPLACE: u32 = 1;
/// Atomically exchange the two names.
pub const RENAME_EXCHANGE: u32 = 2;
/// Leave a whiteout (a character device 0:0) at the source name, in the same
/// transaction (overlayfs's upper directory needs it).
pub const RENAME_WHITEOUT: u32 = 4;

/// `fallocate` mode bits (as `<linux/falloc.h>`).
pub const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
/// Deallocate the range (must be combined with KEEP_SIZE).
pub const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
/// Zero the range.
pub const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// `setxattr` flags.
pub const XATTR_CREATE: i32 = 1;
/// Fail with ENODATA if the attribute does not exist.
pub const XATTR_REPLACE: i32 = 2;

/// `bytes` for people: `1.0 GiB`, `512.0 KiB`, `100 B` (binary units, as
/// the CLI prints sizes and mkfs names its bounds).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A size as people write it: `4096`, `512K`, `1G`, `16T`, `1.5G`, `64MiB`.
/// Parses a size with an optional K/M/G/T/P suffix (powers of 1024; a
/// trailing `B` or `iB` is allowed). Errors say what was wrong.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let lower = t.to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (num, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        Some('p') => (&body[..body.len() - 1], 50),
        _ => (body, 0),
    };
    let bad = || format!("'{s}' is not a size (examples: 4096, 512M, 1G, 16T)");
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let value = if num.contains('.') {
        let f: f64 = num.parse().map_err(|_| bad())?;
        let v = f * (1u64 << shift) as f64;
        if !v.is_finite() || v >= u64::MAX as f64 {
            return Err(format!("size '{s}' is too large"));
        }
        v as u64
    } else {
        let n: u64 = num.parse().map_err(|_| format!("size '{s}' is too large"))?;
        n.checked_mul(1u64 << shift).ok_or_else(|| format!("size '{s}' is too large"))?
    };
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("16T").unwrap(), 16 << 40);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("2GB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
    }

    #[test]
    fn bad_sizes() {
        for s in ["", "G", "abc", "1X", "-1G", "1..2G", "99999999999P"] {
            assert!(parse_size(s).is_err(), "{s} should be refused");
        }
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB");
    }
}
