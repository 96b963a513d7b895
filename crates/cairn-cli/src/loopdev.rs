//! The loop device behind a root mount: only "fuseblk" FUSE connections get
//! FUSE_SYNCFS from the kernel, and a fuseblk mount needs a block device as
//! its source. The kernel claims that device for the mount; cairn keeps doing
//! its I/O on the image file itself (the loop device sees none).
//!
//! `losetup --find --show IMAGE` attaches it; once the mount holds it,
//! `losetup -d` marks it to detach itself when the mount goes (the kernel's
//! autoclear for a busy device), so nothing leaks even if the daemon is
//! killed.

use std::path::Path;
use std::process::{Command, Stdio};

/// `losetup`, found on PATH or where util-linux puts it (mount(8) runs its
/// helpers with a short PATH).
fn losetup() -> Command {
    let path = ["/usr/sbin/losetup", "/sbin/losetup", "/usr/bin/losetup"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("losetup");
    Command::new(path)
}

/// An attached loop device.
pub struct LoopDevice {
    pub path: String,
}

impl LoopDevice {
    /// Attaches `image` to a free loop device.
    pub fn attach(image: &Path) -> Result<LoopDevice, String> {
        let out = losetup()
            .arg("--find")
            .arg("--show")
            .arg(image)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!("losetup: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !path.starts_with("/dev/") {
            return Err(format!("losetup printed no device ({path:?})"));
        }
        Ok(LoopDevice { path })
    }

    /// Detaches now, or (when the mount holds it) when the mount goes.
    pub fn release(self) {
        let r = losetup().arg("-d").arg(&self.path).stdin(Stdio::null()).stderr(Stdio::null()).status();
        if !r.is_ok_and(|s| s.success()) {
            tracing::warn!(device = %self.path, "could not detach the loop device");
        }
    }
}
