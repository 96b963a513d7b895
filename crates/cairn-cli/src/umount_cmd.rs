//! `cairn umount MOUNTPOINT`: unmount, and return only once the daemon has
//! released the image (final commit, checkpoint and clean mark done).
//!
//! A plain `umount` of a FUSE mount returns before the daemon has finished
//! (always for a plain `fuse` mount; for `fuseblk` the kernel waits for the
//! final commit, which cairn does in FUSE_DESTROY, but not for the daemon to
//! close the image). This command asks the daemon's control socket which
//! image it serves, unmounts (`umount2` as root, `fusermount3 -u` otherwise),
//! then waits until the image's `flock` is free: the daemon holds it for its
//! whole life, so a free lock means the daemon has exited and `cairn fsck`,
//! a copy or a new mount can use the image at once.

use crate::control;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_CLEAN};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether `mp` (canonical) is a mount point in this namespace.
fn is_mounted(mp: &Path) -> bool {
    let Some(want) = mp.to_str() else { return false };
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        // Field 5 is the mount point, with spaces etc. escaped as \040.
        .any(|l| l.split(' ').nth(4).is_some_and(|f| f.replace("\\040", " ") == want))
}

/// Canonical path of a mount point; a dead FUSE mount (ENOTCONN) cannot be
/// canonicalized, so fall back to an absolute path.
fn mount_path(mp: &Path) -> Result<PathBuf, String> {
    match std::fs::canonicalize(mp) {
        Ok(p) => Ok(p),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            std::path::absolute(mp).map_err(|e| format!("{}: {e}", mp.display()))
        }
        Err(e) => Err(format!("{}: {e}", mp.display())),
    }
}

fn unmount(mp: &Path) -> Result<(), String> {
    if crate::whoami::is_root() {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(mp.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        // A file can hold the mount for a moment after its last user let go
        // (a forked child's copy of a descriptor until it execs, a close
        // deferred by an exiting process): EBUSY is retried for up to a
        // second before it is reported.
        let mut tries = 0;
        let e = loop {
            // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
            #[allow(unsafe_code)]
            let r = unsafe { libc::umount2(c.as_ptr(), 0) };
            if r == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) || tries == 20 {
                break e;
            }
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        return Err(match e.raw_os_error() {
            Some(libc::EBUSY) => {
                format!("cannot unmount {}: busy (a process has a file or its working directory there)", mp.display())
            }
            _ => format!("cannot unmount {}: {e}", mp.display()),
        });
    }
    let o = Command::new("fusermount3")
        .arg("-u")
        .arg(mp)
        .output()
        .map_err(|e| format!("cannot run fusermount3 -u {}: {e}", mp.display()))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("fusermount3 -u {}: {}", mp.display(), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

/// Whether nobody holds the image's lock (tries to take it and lets go).
fn image_released(image: &Path) -> Result<bool, String> {
    let f = std::fs::File::open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    // SAFETY: flock on a valid, owned descriptor has no memory effects.
    #[allow(unsafe_code)]
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    // Closing `f` drops the lock if we got it.
    Ok(r == 0)
}

fn image_is_clean(image: &Path) -> Option<bool> {
    let f = std::fs::File::open(image).ok()?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut head = vec![0u8; SB_SIZE];
    f.read_exact_at(&mut head, 0).ok()?;
    let sb = Superblock::decode(&head, size).ok()?;
    Some(sb.state & STATE_CLEAN != 0)
}

/// Runs `cairn umount MOUNTPOINT`.
pub fn run(mountpoint: &Path, timeout: Duration) -> Result<(), String> {
    let mp = mount_path(mountpoint)?;
    if !is_mounted(&mp) {
        return Err(format!("{} is not mounted", mp.display()));
    }
    let daemon = control::fetch(&mp).ok().and_then(|doc| {
        let image = PathBuf::from(doc.get("image")?.as_str()?);
        let pid = doc.get("pid")?.as_u64()?;
        Some((image, pid))
    });
    unmount(&mp)?;
    let Some((image, pid)) = daemon else {
        eprintln!(
            "cairn umount: {} unmounted, but no cairn daemon answered for it (not a cairn mount, or its \
             daemon died): nothing to wait for",
            mp.display()
        );
        return Ok(());
    };
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(1);
    while !image_released(&image)? {
        if t0.elapsed() >= timeout {
            return Err(format!(
                "{} is unmounted, but its daemon (pid {pid}) still holds {} after {} s; the image is not \
                 safe to copy or check until it exits",
                mp.display(),
                image.display(),
                timeout.as_secs()
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    if image_is_clean(&image) == Some(false) {
        return Err(format!(
            "{} is unmounted and its daemon has exited, but {} is not marked clean (the final commit failed, \
             or the file system has errors): run `cairn fsck {}`",
            mp.display(),
            image.display(),
            image.display()
        ));
    }
    Ok(())
}
