//! The daemon's control socket: how `cairn stats MOUNTPOINT` reaches the live
//! counters of a mounted file system.
//!
//! Each daemon listens on a Unix socket named after its mount point:
//! `/run/cairn/<hash>.sock` for root, `$XDG_RUNTIME_DIR/cairn/<hash>.sock` (or
//! `/tmp/cairn-<uid>/<hash>.sock`) for other users, where `<hash>` is the
//! FNV-1a hash of the canonical mount-point path. A client connects and reads
//! one JSON document (`{"image", "mountpoint", "pid", "read_only",
//! "counters": {...}}`; `read_only`: the engine refuses changes, see
//! `remount_cmd`);
//! the daemon closes the connection after writing it. A client may first
//! write a request and shut its side: `make-writable` (`cairn remount
//! rw`) or `grow BYTES` (`cairn resize MOUNTPOINT SIZE`), answered with
//! `{"ok": true, ...}` or `{"error": "..."}`.
//!
//! The socket holds no state: removing it only makes `cairn stats` unable to
//! find the daemon. The daemon removes it when it exits.

use cairn_core::Fs;
use cairn_fuse::Metrics;
use serde_json::{json, Map, Value};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn runtime_dir() -> PathBuf {
    let uid = crate::whoami::ids().map_or(u32::MAX, |(uid, _)| uid);
    if uid == 0 {
        return PathBuf::from("/run/cairn");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("cairn"),
        _ => PathBuf::from(format!("/tmp/cairn-{uid}")),
    }
}

/// The socket path for a canonical mount point.
pub fn socket_path(canonical_mountpoint: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    runtime_dir().join(format!("{:016x}.sock", fnv1a(canonical_mountpoint.as_os_str().as_bytes())))
}

/// The stats document of a mounted file system: the engine's counters and
/// the FUSE session's (`fuse.*`).
pub fn stats_document(fs: &Fs, fuse: &Metrics, image: &Path, mountpoint: &Path) -> Value {
    let mut counters = Map::new();
    for (k, v) in fs.stats().into_iter().chain(fuse.counters()) {
        counters.insert(k, json!(v));
    }
    let statfs = fs.statfs().ok().map(|s| {
        json!({
            "block_size": s.block_size, "blocks": s.blocks, "blocks_free": s.blocks_free,
            "blocks_avail": s.blocks_avail, "files": s.files, "files_free": s.files_free,
        })
    });
    json!({
        "image": image.display().to_string(),
        "mountpoint": mountpoint.display().to_string(),
        "pid": std::process::id(),
        "read_only": fs.is_read_only(),
        "statfs": statfs,
        "counters": counters,
    })
}

/// How long the daemon waits for a request before it takes silence for a
/// stats request.
const REQUEST_WAIT: Duration = Duration::from_millis(200);

/// The request on `conn`: what the client sent before closing its side.
fn read_request(conn: &mut UnixStream) -> String {
    let _ = conn.set_read_timeout(Some(REQUEST_WAIT));
    let mut req = Vec::new();
    let _ = conn.take(64).read_to_end(&mut req);
    String::from_utf8_lossy(&req).trim().to_string()
}

/// A listening control socket; the file is removed on drop.
pub struct ControlSocket {
    path: PathBuf,
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Starts serving `fs`'s and `fuse`'s counters for `mountpoint` on a background thread.
pub fn serve(fs: Arc<Fs>, fuse: Arc<Metrics>, image: PathBuf, mountpoint: PathBuf) -> std::io::Result<ControlSocket> {
    let path = socket_path(&mountpoint);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // A stale socket from a daemon that was killed: nobody answers on it.
    if path.exists() && UnixStream::connect(&path).is_err() {
        let _ = std::fs::remove_file(&path);
    }
    let listener = UnixListener::bind(&path)?;
    std::thread::Builder::new().name("cairn-control".into()).spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
            let doc = match read_request(&mut conn).as_str() {
                "make-writable" => match fs.make_writable() {
                    Ok(()) => json!({ "ok": true }),
                    Err(e) => {
                        tracing::error!(error = %e, "remount read-write failed");
                        json!({ "error": e.to_string() })
                    }
                },
                r if r.starts_with("grow ") => match r[5..].trim().parse::<u64>() {
                    Ok(bytes) => match fs.grow(bytes) {
                        Ok(g) => json!({
                            "ok": true,
                            "old_blocks": g.old_blocks,
                            "new_blocks": g.new_blocks,
                            "old_groups": g.old_groups,
                            "new_groups": g.new_groups,
                            "block_size": g.block_size,
                        }),
                        Err(e) => {
                            tracing::warn!(error = %e, bytes, "grow while mounted refused or failed");
                            json!({ "error": e.to_string() })
                        }
                    },
                    Err(_) => json!({ "error": format!("bad size in {r:?}") }),
                },
                "" => stats_document(&fs, &fuse, &image, &mountpoint),
                other => json!({ "error": format!("unknown request {other:?}") }),
            };
            let _ = conn.write_all(doc.to_string().as_bytes());
        }
    })?;
    Ok(ControlSocket { path })
}

/// Reads the stats document of the daemon serving `canonical_mountpoint`.
pub fn fetch(canonical_mountpoint: &Path) -> Result<Value, String> {
    ask(canonical_mountpoint, "")
}

/// Sends `request` to the daemon serving `canonical_mountpoint` and reads its answer.
pub fn ask(canonical_mountpoint: &Path, request: &str) -> Result<Value, String> {
    let path = socket_path(canonical_mountpoint);
    let mut s = UnixStream::connect(&path).map_err(|e| {
        format!(
            "no cairn daemon answers for {} (socket {}: {e}); is it a cairn mount, mounted by this user?",
            canonical_mountpoint.display(),
            path.display()
        )
    })?;
    s.write_all(request.as_bytes())
        .and_then(|()| s.shutdown(std::net::Shutdown::Write))
        .map_err(|e| format!("writing to {}: {e}", path.display()))?;
    // Turning read-write commits (and finishes the orphan list): allow it time.
    let _ = s.set_read_timeout(Some(Duration::from_secs(if request.is_empty() { 10 } else { 120 })));
    let mut buf = String::new();
    s.read_to_string(&mut buf).map_err(|e| format!("reading from {}: {e}", path.display()))?;
    serde_json::from_str(&buf).map_err(|e| format!("bad answer from the daemon: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names_differ_per_mountpoint() {
        let a = socket_path(Path::new("/mnt/a"));
        let b = socket_path(Path::new("/mnt/b"));
        assert_ne!(a, b);
        assert_eq!(a, socket_path(Path::new("/mnt/a")));
        assert!(a.to_string_lossy().ends_with(".sock"));
    }
}
