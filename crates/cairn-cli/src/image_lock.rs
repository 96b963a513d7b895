//! Taking an image's lock for a mount, and waiting for a daemon that is
//! finishing an unmount of it.
//!
//! A daemon holds an exclusive `flock` on its image for its whole life
//! (`mount_cmd`). A plain `umount MNT` or `fusermount3 -u MNT` returns once
//! the kernel has let the mount go, while the daemon may still be writing
//! (its last commit, the checkpoint, the clean mark): a `cairn mount` of the
//! same image at once found the lock taken and failed with "already in use"
//! (issue 51: 10 of 20 tries after a 20 MiB write). Scripts, systemd units
//! and test suites do exactly this.
//!
//! So: when the lock is taken and the image is mounted nowhere (no
//! `fuse.cairn`/`fuseblk.cairn` entry of `/proc/self/mountinfo` has it, or a
//! loop device over it, as its source), the holder is a daemon finishing
//! its unmount (or a `cairn fsck`): the mount says so and waits for the lock,
//! up to [`UNMOUNT_WAIT`]. A mounted image is refused at once.

use cairn_core::dev::FileDevice;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a mount waits for a daemon finishing an unmount of its image.
pub const UNMOUNT_WAIT: Duration = Duration::from_secs(60);

/// Takes `dev`'s lock (the image `image`), waiting as the module essay says;
/// `note` is told once when the mount waits.
pub fn lock_for_mount(dev: &FileDevice, image: &Path, note: &dyn Fn(&str)) -> Result<(), String> {
    let in_use = || format!("{} is already in use: mounted (or being checked) by another process", image.display());
    if dev.lock_exclusive().is_ok() {
        return Ok(());
    }
    let canonical = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
    if let Some(mp) = mounted_at(&canonical) {
        return Err(format!("{} is already in use: mounted at {}", image.display(), mp));
    }
    note(&format!(
        "{} is held by another process (a daemon finishing its unmount, or cairn fsck): waiting up to {} s",
        image.display(),
        UNMOUNT_WAIT.as_secs()
    ));
    let t0 = Instant::now();
    while t0.elapsed() < UNMOUNT_WAIT {
        std::thread::sleep(Duration::from_millis(50));
        if dev.lock_exclusive().is_ok() {
            return Ok(());
        }
        if let Some(mp) = mounted_at(&canonical) {
            return Err(format!("{} is already in use: mounted at {}", image.display(), mp));
        }
    }
    Err(format!("{} (waited {} s)", in_use(), UNMOUNT_WAIT.as_secs()))
}

/// Where cairn has `image` (canonical) mounted in this namespace, if it has.
fn mounted_at(image: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mp = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let (fstype, source) = (r.next()?, unescape(r.next()?));
        let ours = fstype.starts_with("fuse") && fstype.ends_with(".cairn");
        (ours && is_image(Path::new(&source), image)).then(|| unescape(mp))
    })
}

/// Whether a mount's `source` is `image`: the image itself, or a loop device
/// over it.
fn is_image(source: &Path, image: &Path) -> bool {
    if source == image {
        return true;
    }
    let Some(name) = source.strip_prefix("/dev").ok().and_then(|n| n.to_str()) else { return false };
    let backing = PathBuf::from(format!("/sys/block/{name}/loop/backing_file"));
    std::fs::read_to_string(backing).is_ok_and(|b| Path::new(b.trim_end()) == image)
}

/// A mountinfo field with `\040`-style escapes undone.
fn unescape(field: &str) -> String {
    field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_its_own_source_and_escapes_are_undone() {
        assert!(is_image(Path::new("/srv/a.img"), Path::new("/srv/a.img")));
        assert!(!is_image(Path::new("/srv/b.img"), Path::new("/srv/a.img")));
        assert_eq!(unescape("/mnt/my\\040disk"), "/mnt/my disk");
    }
}
