//! Where a background daemon's log goes.
//!
//! In order: `--log FILE` or `-o log=FILE` (the daemon's stderr, appended;
//! `-o log=` is the only way an fstab line can name one); else syslog, when
//! something listens on `/dev/log` (journald, rsyslog: see `syslog`); else a
//! file the user can read, since syslog(3) would drop every line: root's
//! daemons append to `/var/log/cairn/IMAGE.log`, an ordinary user's to
//! `$XDG_STATE_HOME/cairn/IMAGE.log` (default `~/.local/state`), IMAGE being
//! the image's file name. Issue 51: without a syslog daemon the messages of
//! a background daemon (errors, ENOSPC, replays) were lost.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The daemon's log destination.
pub enum Destination {
    /// Append to this file (its stderr).
    File(PathBuf),
    /// syslog(3) through `/dev/log`.
    Syslog,
}

/// Where the daemon of `image` logs, `asked` being `--log` or `-o log=`.
pub fn destination(asked: Option<&Path>, image: &Path) -> Destination {
    match asked {
        Some(p) => Destination::File(p.to_path_buf()),
        None if syslog_listens() => Destination::Syslog,
        None => Destination::File(fallback_file(image, is_root())),
    }
}

/// Opens `d` for the daemon: its stderr (null for syslog).
pub fn open(d: &Destination) -> Result<Stdio, String> {
    let Destination::File(p) = d else { return Ok(Stdio::null()) };
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("log directory {}: {e}", dir.display()))?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map_err(|e| format!("log file {}: {e}", p.display()))?;
    Ok(Stdio::from(f))
}

/// Whether a syslog daemon takes datagrams on `/dev/log`.
fn syslog_listens() -> bool {
    std::os::unix::net::UnixDatagram::unbound().is_ok_and(|s| s.connect("/dev/log").is_ok())
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The file a daemon of `image` logs to without syslog.
pub fn fallback_file(image: &Path, root: bool) -> PathBuf {
    let name = image.file_name().map_or_else(|| "cairn".into(), |n| n.to_string_lossy().into_owned());
    let dir = if root {
        PathBuf::from("/var/log/cairn")
    } else {
        let state = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
        state.unwrap_or_else(|| home.join(".local/state")).join("cairn")
    };
    dir.join(format!("{name}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_asked_for_wins_and_the_fallback_is_per_image() {
        let img = Path::new("/srv/data.img");
        assert!(
            matches!(destination(Some(Path::new("/tmp/x.log")), img), Destination::File(p) if p == Path::new("/tmp/x.log"))
        );
        assert_eq!(fallback_file(img, true), Path::new("/var/log/cairn/data.img.log"));
        assert!(fallback_file(img, false).ends_with("cairn/data.img.log"));
    }
}
