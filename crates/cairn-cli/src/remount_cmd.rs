//! `cairn mount IMAGE MOUNTPOINT -o remount[,ro|rw,...]`: change a live
//! cairn mount's flags, as `mount -o remount` does for a kernel file system.
//!
//! ## What FUSE lets a daemon see
//! Nothing: a remount is the kernel's alone. `fuse_reconfigure` writes the
//! dirty pages back, sends FUSE_SYNCFS (fuseblk connections only), refuses
//! any change but the generic flags, and flips the superblock's read-only
//! flag itself; no request tells the daemon. So:
//! * **ro** is the kernel's flag: once it is set no change reaches cairn.
//!   This command sets it with `mount(2)` (MS_REMOUNT | MS_RDONLY), which
//!   fails with EBUSY while a file is open for writing, and then commits
//!   the journal through an fsync of the mount's root (FUSE_FSYNCDIR: a
//!   full commit), so what was written is durable when it returns, on a
//!   plain `fuse` connection too.
//! * **rw** clears the flag, which is honest only if the daemon can write.
//!   A daemon started with `-o ro` is asked to turn read-write first (its
//!   control socket's `make-writable`: it reopens the image for writing and
//!   starts its journal, `cairn_core::ro_recovery`); one that cannot (the
//!   image is not writable) or must not (it turned read-only after an
//!   error, `errors=remount-ro`) says why, and this command refuses with
//!   exit 1 and that reason, instead of a mount that says `rw` and answers
//!   EROFS. A bare `mount(2)` that bypasses this command (mount(8) on a
//!   fuseblk mount without the `mount.fuseblk.cairn` helper) still flips the
//!   kernel's flag, and returns 0: a daemon that is read-only watches the
//!   mount table ([`guard_read_only`]) and sets the flag back at once, with
//!   an error in its log, until it turns read-write.
//! * The per-mount flags (`nosuid`, `nodev`, `noexec`, the atime mode,
//!   `sync`, `dirsync`, `lazytime`) are taken from the mount table and
//!   changed as the options say; cairn's own options (`commit=`,
//!   `cache_mb=`, ...) and the FUSE connection's (`allow_other`,
//!   `user_id=`, ...) keep the values the daemon started with: a note says
//!   so for cairn's own.
//!
//! ## How it is reached
//! `mount(8)` runs the helper `mount.fuse.cairn` (and `mount.fuseblk.cairn`,
//! the same script, for root's fuseblk mounts) with the mount table's
//! options merged with the new ones (`ro,nosuid,nodev,relatime,remount,
//! user_id=0,...`); the helper runs `cairn mount`, which comes here when
//! the options hold `remount`. IMAGE is not used: the mount point names the
//! mount (mount(8) passes the mount table's source, a loop device for
//! fuseblk).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether `-o` options ask for a remount.
pub fn is_remount<S: AsRef<str>>(options: &[S]) -> bool {
    options.iter().any(|g| g.as_ref().split(',').any(|o| o.trim() == "remount"))
}

/// What a remount asks for: the `mount(2)` flags and cairn's own options
/// that cannot change.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub flags: libc::c_ulong,
    pub kept: Vec<String>,
}

/// `mount(2)` flags of the generic options; `None` for any other option.
fn flag(opt: &str) -> Option<(libc::c_ulong, bool)> {
    Some(match opt {
        "ro" => (libc::MS_RDONLY, true),
        "rw" => (libc::MS_RDONLY, false),
        "nosuid" => (libc::MS_NOSUID, true),
        "suid" => (libc::MS_NOSUID, false),
        "nodev" => (libc::MS_NODEV, true),
        "dev" => (libc::MS_NODEV, false),
        "noexec" => (libc::MS_NOEXEC, true),
        "exec" => (libc::MS_NOEXEC, false),
        "sync" => (libc::MS_SYNCHRONOUS, true),
        "async" => (libc::MS_SYNCHRONOUS, false),
        "dirsync" => (libc::MS_DIRSYNC, true),
        "lazytime" => (libc::MS_LAZYTIME, true),
        "nolazytime" => (libc::MS_LAZYTIME, false),
        "noatime" => (libc::MS_NOATIME, true),
        "relatime" => (libc::MS_RELATIME, true),
        "strictatime" => (libc::MS_STRICTATIME, true),
        "nodiratime" => (libc::MS_NODIRATIME, true),
        "diratime" => (libc::MS_NODIRATIME, false),
        _ => return None,
    })
}

const ATIME: libc::c_ulong = libc::MS_NOATIME | libc::MS_RELATIME | libc::MS_STRICTATIME;

/// Options the mount table shows for a FUSE mount, fixed at mount time.
fn fixed(key: &str) -> bool {
    matches!(
        key,
        "remount"
            | "user_id"
            | "group_id"
            | "default_permissions"
            | "allow_other"
            | "noallow_other"
            | "allow_root"
            | "blksize"
            | "fsname"
            | "subtype"
            | "max_read"
            | "fuseblk"
            | "nofuseblk"
            | "auto_unmount"
            | "atime"
            | "defaults"
            | "auto"
            | "noauto"
            | "user"
            | "users"
            | "nouser"
            | "nofail"
            | "_netdev"
    ) || key.starts_with("x-")
}

/// The remount of a mount whose per-mount options (mountinfo's sixth
/// field) are `current`, asked with `options`.
pub fn plan<S: AsRef<str>>(current: &str, options: &[S]) -> Result<Plan, String> {
    let mut flags: libc::c_ulong = 0;
    let mut apply = |opt: &str| match flag(opt) {
        Some((f, on)) => {
            if f & ATIME != 0 {
                flags &= !ATIME;
            }
            if on {
                flags |= f;
            } else {
                flags &= !f;
            }
            true
        }
        None => false,
    };
    for o in current.split(',') {
        apply(o);
    }
    let mut kept = Vec::new();
    for opt in options.iter().flat_map(|g| g.as_ref().split(',')).map(str::trim).filter(|o| !o.is_empty()) {
        let key = opt.split_once('=').map_or(opt, |(k, _)| k);
        if apply(opt) || fixed(key) {
            continue;
        }
        // One of cairn's own: valid, but fixed for the daemon's life.
        cairn_fuse::parse_options(&[opt])?;
        kept.push(opt.to_string());
    }
    Ok(Plan { flags: flags | libc::MS_REMOUNT, kept })
}

/// The mount table entry at `mp` (canonical): (fstype, per-mount options).
fn mount_entry(mp: &Path) -> Result<(String, String), String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let want = mp.to_string_lossy();
    table
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            (f.len() > sep + 1 && f.get(4) == Some(&&*want)).then(|| (f[sep + 1].to_string(), f[5].to_string()))
        })
        .ok_or_else(|| format!("{want} is not mounted"))
}

/// Runs a remount of the cairn mount at `mountpoint`.
pub fn run<S: AsRef<str>>(mountpoint: &Path, options: &[S]) -> Result<(), String> {
    let mp = std::fs::canonicalize(mountpoint).map_err(|e| format!("mount point {}: {e}", mountpoint.display()))?;
    let (fstype, current) = mount_entry(&mp)?;
    if !matches!(fstype.as_str(), "fuse.cairn" | "fuseblk.cairn") {
        return Err(format!("{} is a {fstype} mount, not a cairn one", mp.display()));
    }
    let plan = plan(&current, options)?;
    let ro = plan.flags & libc::MS_RDONLY != 0;
    if !ro {
        let doc = crate::control::fetch(&mp)?;
        if doc["read_only"].as_bool() != Some(false) {
            let answer = crate::control::ask(&mp, "make-writable")?;
            if let Some(why) = answer["error"].as_str() {
                return Err(format!(
                    "cannot remount {} read-write: its cairn daemon stays read-only: {why} (an image that cannot be \
                     opened for writing, or an error since the mount: unmount it, `cairn fsck` it, and mount it again)",
                    mp.display()
                ));
            }
        }
    }
    if !plan.kept.is_empty() {
        eprintln!(
            "cairn mount: remount of {}: {} keep the values the mount started with (unmount and mount again to change them)",
            mp.display(),
            plan.kept.join(",")
        );
    }
    let target = CString::new(mp.as_os_str().as_bytes()).map_err(|_| "mount point with a NUL byte".to_string())?;
    // SAFETY: a valid C string; null source, type and data are allowed for MS_REMOUNT.
    #[allow(unsafe_code)]
    let r = unsafe { libc::mount(std::ptr::null(), target.as_ptr(), std::ptr::null(), plan.flags, std::ptr::null()) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::EBUSY) if ro => "a file is open for writing".to_string(),
            Some(libc::EPERM) => "only root may remount".to_string(),
            _ => e.to_string(),
        };
        return Err(format!("cannot remount {}: {why}", mp.display()));
    }
    if ro {
        // The kernel lets nothing change any more: commit what did.
        std::fs::File::open(&mp)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("{} is read-only now, but the journal commit failed: {e}", mp.display()))?;
    }
    Ok(())
}

/// Remounts `mp` read-only again whenever the mount table shows it
/// read-write while `fs` is read-only (a daemon that opened its image
/// read-only cannot honour `rw` until it turns read-write), for as long as
/// it is mounted and `fs` stays read-only. The kernel wakes pollers of
/// `/proc/self/mountinfo` (POLLPRI) at every change of the mount table.
pub fn guard_read_only(mp: std::path::PathBuf, fs: std::sync::Arc<cairn_core::Fs>) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let table = std::fs::File::open("/proc/self/mountinfo")?;
    std::thread::Builder::new().name("cairn-ro-guard".into()).spawn(move || loop {
        let Ok((_, current)) = mount_entry(&mp) else { return };
        if current.split(',').any(|o| o == "rw") {
            if !fs.is_read_only() {
                // Turned read-write (`make-writable`, then this remount).
                return;
            }
            let flags = plan(&current, &["ro"]).map(|p| p.flags).unwrap_or(libc::MS_REMOUNT | libc::MS_RDONLY);
            let r = CString::new(mp.as_os_str().as_bytes()).map(|target| {
                // SAFETY: as in `run`.
                #[allow(unsafe_code)]
                unsafe {
                    libc::mount(std::ptr::null(), target.as_ptr(), std::ptr::null(), flags, std::ptr::null())
                }
            });
            match r {
                Ok(0) => tracing::error!(
                    mountpoint = %mp.display(),
                    "remounted read-write behind cairn's back (the image is open read-only): set back to read-only"
                ),
                _ => tracing::error!(
                    mountpoint = %mp.display(),
                    error = %std::io::Error::last_os_error(),
                    "remounted read-write, and setting it back to read-only failed; changes fail with EROFS"
                ),
            }
        }
        let mut pfd = libc::pollfd { fd: table.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
        // SAFETY: one pollfd of ours, an open descriptor.
        #[allow(unsafe_code)]
        let n = unsafe { libc::poll(&mut pfd, 1, 60_000) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_start_from_the_mount_and_change_as_asked() {
        let p = plan("rw,nosuid,nodev,relatime", &["ro,nosuid,nodev,relatime,remount,user_id=0,allow_other"]).unwrap();
        assert_eq!(p.flags, libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RELATIME);
        assert!(p.kept.is_empty());
        let p = plan("ro,nosuid,nodev,noatime", &["remount,rw,suid"]).unwrap();
        assert_eq!(p.flags, libc::MS_REMOUNT | libc::MS_NODEV | libc::MS_NOATIME);
        let p = plan("rw,relatime", &["remount,strictatime"]).unwrap();
        assert_eq!(p.flags, libc::MS_REMOUNT | libc::MS_STRICTATIME);
    }

    #[test]
    fn cairns_own_options_are_checked_and_kept() {
        let p = plan("rw", &["remount,ro,commit=10"]).unwrap();
        assert_eq!(p.kept, vec!["commit=10".to_string()]);
        assert!(plan("rw", &["remount,bogus"]).unwrap_err().contains("bogus"));
        assert!(plan("rw", &["remount,commit=0"]).is_err());
    }

    #[test]
    fn remount_is_found_in_any_group() {
        assert!(is_remount(&["ro", "remount"]));
        assert!(is_remount(&["rw,remount,nosuid"]));
        assert!(!is_remount(&["ro,allow_other"]));
    }
}
