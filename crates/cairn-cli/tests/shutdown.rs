//! The shutdown ioctl through a real mount (issue 32): `xfs_io -x -c
//! shutdown` (NOLOGFLUSH) and `shutdown -f` (LOGFLUSH) on the mount point.
//! After it every request fails with EIO, nothing more reaches the image,
//! and the next mount replays the journal: what was fsync'd is there, and
//! with `-f` what was changed before the shutdown too.

mod common;

use common::*;
use std::process::Command;

fn shutdown(mp: &std::path::Path, flush: bool) {
    let cmd = if flush { "shutdown -f" } else { "shutdown" };
    let o = Command::new("xfs_io").args(["-x", "-c", cmd, p(mp)]).output().expect("xfs_io (xfsprogs)");
    assert!(o.status.success(), "xfs_io {cmd}: {}{}", stdout(&o), stderr(&o));
}

#[test]
fn shutdown_fails_every_request_and_the_next_mount_replays() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("sd.img", "128M");
    let mp = g.0.clone();
    let img = dir.path().join("sd.img");
    write_synced(&mp.join("synced"), b"fsync'd before the shutdown");
    std::fs::create_dir(mp.join("flushed-by-f")).unwrap();
    shutdown(&mp, true);
    let err = std::fs::metadata(mp.join("synced")).expect_err("a request after the shutdown");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let err = std::fs::File::create(mp.join("after")).expect_err("a change after the shutdown");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    unmount(&mp, pid);

    // Not clean: the next mount replays the journal; fsck replays it too.
    assert_fsck_clean(&img, "after shutdown -f");
    let pid = mount(&img, &mp, &[], "mount");
    assert!(counters(&mp)["journal.replayed_records_at_mount"] > 0, "nothing was replayed");
    assert_eq!(std::fs::read(mp.join("synced")).unwrap(), b"fsync'd before the shutdown");
    assert!(mp.join("flushed-by-f").is_dir(), "shutdown -f commits first");
    assert!(!mp.join("after").exists());

    // Without -f: what was fsync'd survives; nothing fails but EIO.
    write_synced(&mp.join("synced2"), b"second");
    shutdown(&mp, false);
    let err = std::fs::read_dir(&mp).and_then(|mut d| d.next().transpose()).expect_err("readdir after the shutdown");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after shutdown");
    let pid = mount(&img, &mp, &[], "mount");
    assert_eq!(std::fs::read(mp.join("synced2")).unwrap(), b"second");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the last unmount");
}

#[test]
fn only_root_may_shut_down() {
    if !can_mount() {
        return;
    }
    let (_dir, g, pid) = fresh_mount_with("sdu.img", "64M", &["-o", "allow_other"]);
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "xfs_io", "-x", "-c", "shutdown", p(&g.0)])
        .output()
        .unwrap();
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(out.contains("not permitted") || !o.status.success(), "an ordinary user shut it down: {out}");
    std::fs::write(g.0.join("still-alive"), b"yes").expect("the mount still works");
    unmount(&g.0, pid);
}

#[test]
fn a_read_only_mount_after_a_shutdown_replays_the_journal_first() {
    // generic/417 and 646: shutdown, then `mount -o ro`. As ext4 does while
    // the device is writable, the journal is replayed first; the mount
    // itself stays read-only.
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("sdro.img", "128M");
    let mp = g.0.clone();
    let img = dir.path().join("sdro.img");
    write_synced(&mp.join("synced"), b"fsync'd before the shutdown");
    shutdown(&mp, false);
    unmount(&mp, pid);
    let pid = mount(&img, &mp, &["-o", "ro"], "read-only mount after a shutdown");
    assert_eq!(std::fs::read(mp.join("synced")).unwrap(), b"fsync'd before the shutdown");
    let err = std::fs::write(mp.join("new"), b"x").expect_err("a read-only mount");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the read-only mount");
    // Nothing is pending any more: a second read-only mount replays nothing.
    let pid = mount(&img, &mp, &["-o", "ro"], "a second read-only mount");
    unmount(&mp, pid);
}
