//! Set-id bits and file capabilities that a change must drop, where the
//! kernel leaves that to cairn, and telling the kernel when it did.
//!
//! ## The kernel's rules
//! On a local file system the VFS drops privileges itself
//! (`file_remove_privs`, `setattr_should_drop_suidgid`, chown's
//! `ATTR_KILL_SUID`, `posix_acl_update_mode`). For a FUSE connection with
//! FUSE_HANDLE_KILLPRIV_V2 (which cairn asks for: without it the kernel sends
//! a GETXATTR of `security.capability` before every write) it leaves them to
//! the server:
//! * WRITE carries FUSE_WRITE_KILL_SUIDGID when the writer lacks
//!   CAP_FSETID, SETATTR carries FATTR_KILL_SUIDGID for every chown of a
//!   non-directory and for a truncate by a caller without CAP_FSETID. cairn
//!   then drops suid, the sgid of a group-executable file, and a sgid
//!   without group execute (a mandatory-locking mark) when the caller is
//!   neither in the file's group nor holds CAP_FSETID
//!   (`setattr_should_drop_sgid`): an unprivileged owner who chgrps a file
//!   out of a group they are not in loses it, as on ext4.
//! * FALLOCATE carries no flag at all, though the VFS (`file_modified`)
//!   drops privileges on every fallocate, punch hole and zero range; cairn
//!   decides from the caller's credentials (xfstests generic/683–685).
//! * Setting an access ACL updates the mode; the kernel leaves the sgid
//!   rule of `posix_acl_update_mode` to the server (it would send
//!   FUSE_SETXATTR_ACL_KILL_SGID only with FUSE_SETXATTR_EXT, which the
//!   vendored fuser does not parse): cairn drops sgid for a caller who is
//!   not in the file's group and lacks CAP_FSETID (generic/375).
//!
//! ## Who the caller is
//! A request carries the caller's fsuid, fsgid and thread id, not its
//! supplementary groups or capabilities. [`Caller::of`] reads them from
//! `/proc/TID/status` (`Groups:`, `CapEff:`), and only when a rule needs
//! them (the file has a set-id bit that depends on them). A caller that has
//! exited is judged by its fsuid (root: CAP_FSETID) and fsgid alone.
//!
//! ## Telling the kernel
//! A SETATTR reply carries the new attributes. WRITE and FALLOCATE replies
//! carry none, and the kernel keeps showing the old mode for the attribute
//! timeout (60 s by default; generic/355 looks right after an O_DIRECT
//! write). When a write or fallocate dropped a bit, cairn sends
//! FUSE_NOTIFY_INVAL_INODE with offset -1 after its reply: the kernel bumps
//! the inode's attribute version and refetches the attributes at the next
//! stat, leaving its page cache alone. The notification takes no inode lock
//! in the kernel, so sending it from a request thread cannot deadlock.

use cairn_core::Fs;
use fuser::{INodeNo, Notifier, Request};
use std::cell::OnceCell;
use std::sync::{Arc, OnceLock};

/// CAP_FSETID's bit in `CapEff`.
const CAP_FSETID: u32 = 4;

/// The credentials of a request's caller that the privilege rules need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The caller holds CAP_FSETID.
    pub fsetid: bool,
    /// The fsgid (the request's gid).
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Caller {
    /// The caller of `req`, from `/proc/TID/status`.
    pub fn of(req: &Request) -> Caller {
        let status = std::fs::read_to_string(format!("/proc/{}/status", req.pid())).unwrap_or_default();
        Caller::parse(&status, req.uid(), req.gid())
    }

    /// The caller whose `/proc/TID/status` is `status` (empty when it could
    /// not be read: then root has CAP_FSETID and nobody else does).
    pub fn parse(status: &str, uid: u32, gid: u32) -> Caller {
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        let fsetid = match field("CapEff:").and_then(|h| u64::from_str_radix(h, 16).ok()) {
            Some(caps) => caps & (1 << CAP_FSETID) != 0,
            None => uid == 0,
        };
        let groups = field("Groups:").map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect());
        Caller { fsetid, gid, groups: groups.unwrap_or_default() }
    }

    /// Whether the caller is in group `gid` (fsgid or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the caller keeps the sgid bit of a file of group `gid`
    /// (the kernel's `in_group_or_capable`).
    pub fn may_keep_sgid(&self, gid: u32) -> bool {
        self.fsetid || self.in_group(gid)
    }
}

/// A request's caller, read from `/proc` at most once and only if asked.
pub struct LazyCaller<'a> {
    req: &'a Request,
    caller: OnceCell<Caller>,
}

impl<'a> LazyCaller<'a> {
    pub fn new(req: &'a Request) -> LazyCaller<'a> {
        LazyCaller { req, caller: OnceCell::new() }
    }

    pub fn get(&self) -> &Caller {
        self.caller.get_or_init(|| Caller::of(self.req))
    }

    /// [`Caller::may_keep_sgid`].
    pub fn may_keep_sgid(&self, gid: u32) -> bool {
        self.get().may_keep_sgid(gid)
    }
}

/// Drops privileges for a write (`kill`: the kernel's
/// FUSE_WRITE_KILL_SUIDGID) or a SETATTR with FATTR_KILL_SUIDGID (`kill`
/// true) by `req`'s caller; the capability xattr always. Returns whether the
/// mode changed.
pub fn on_write(fs: &Fs, req: &Request, ino: u64, kill: bool) -> cairn_core::Result<bool> {
    let caller = LazyCaller::new(req);
    let keep = |gid| caller.may_keep_sgid(gid);
    fs.files().kill_privs(ino, kill.then_some(&keep as &dyn Fn(u32) -> bool))
}

/// Drops privileges for a fallocate (any mode) by `req`'s caller: the
/// capability xattr always; set-id bits unless the caller holds
/// CAP_FSETID, looked up only when the file has one. Returns whether the
/// mode changed.
pub fn on_fallocate(fs: &Fs, req: &Request, ino: u64) -> cairn_core::Result<bool> {
    let setid = fs.inodes().getattr(ino)?.mode & (libc::S_ISUID | libc::S_ISGID) != 0;
    let caller = LazyCaller::new(req);
    let keep = |gid| caller.may_keep_sgid(gid);
    let kill = setid && !caller.get().fsetid;
    fs.files().kill_privs(ino, kill.then_some(&keep as &dyn Fn(u32) -> bool))
}

/// The session's notifier, set once the session exists (requests are served
/// only after that).
#[derive(Clone, Default)]
pub struct KernelNotifier(Arc<OnceLock<Notifier>>);

impl KernelNotifier {
    /// Gives the session's notifier.
    pub fn set(&self, n: Notifier) {
        let _ = self.0.set(n);
    }

    /// Makes the kernel drop its cached attributes of `ino` (not its pages).
    pub fn attributes_changed(&self, ino: u64) {
        if let Some(n) = self.0.get() {
            if let Err(e) = n.inval_inode(INodeNo(ino), -1, 0) {
                tracing::debug!(ino, error = %e, "could not invalidate the kernel's attributes");
            }
        }
    }

    /// Makes the kernel drop every cached page of `ino` (and its
    /// attributes); waits for pages locked by reads in flight (see
    /// `coherence`).
    pub fn pages_changed(&self, ino: u64) {
        if let Some(n) = self.0.get() {
            if let Err(e) = n.inval_inode(INodeNo(ino), 0, 0) {
                tracing::debug!(ino, error = %e, "could not invalidate the kernel's pages");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsetpriv\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\n\
        Groups:\t100 65534 \nCapInh:\t0000000000000000\nCapEff:\t0000000000000000\n";

    #[test]
    fn groups_and_capabilities_come_from_proc_status() {
        let c = Caller::parse(STATUS, 65534, 65534);
        assert!(!c.fsetid);
        assert_eq!(c.groups, vec![100, 65534]);
        assert!(c.in_group(100) && c.in_group(65534) && !c.in_group(0));
        assert!(!c.may_keep_sgid(0));
        let root = STATUS.replace("CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff");
        let r = Caller::parse(&root, 0, 0);
        assert!(r.fsetid && r.may_keep_sgid(12345));
        // CAP_FSETID alone.
        let only = STATUS.replace("CapEff:\t0000000000000000", "CapEff:\t0000000000000010");
        assert!(Caller::parse(&only, 65534, 65534).fsetid);
    }

    #[test]
    fn a_caller_that_has_gone_is_judged_by_its_ids() {
        let c = Caller::parse("", 1000, 1000);
        assert!(!c.fsetid && c.in_group(1000) && !c.in_group(100));
        assert!(Caller::parse("", 0, 0).fsetid);
    }
}
