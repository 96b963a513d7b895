//! Who runs this command: its effective uid and gid, read as the owner of
//! `/proc/self` (no libc call, no unsafe). Used to give a new file system's
//! root directory to its maker, to pick the control-socket directory, and to
//! decide whether a fuseblk mount is possible (root only).

use std::os::unix::fs::MetadataExt;

/// Effective (uid, gid); `None` if `/proc` is not mounted.
pub fn ids() -> Option<(u32, u32)> {
    std::fs::metadata("/proc/self").ok().map(|m| (m.uid(), m.gid()))
}

/// True when running as root.
pub fn is_root() -> bool {
    ids().is_some_and(|(uid, _)| uid == 0)
}
