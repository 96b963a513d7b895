//! chattr / lsattr through a real mount (e2fsprogs' tools, FS_IOC_GETFLAGS /
//! SETFLAGS through FUSE): an immutable file refuses writes, truncation,
//! removal and chmod at once; an append-only file takes appends only; the
//! flags survive a remount, and the next mount also refuses opening such a
//! file for writing (it answers OPEN: `cairn_fuse::chattr`). A write through
//! a descriptor opened before `chattr +i` is refused when written back:
//! `fsync` reports it and the file keeps its bytes.

mod common;

use common::*;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn tool(cmd: &str, args: &[&str], path: &Path) -> std::process::Output {
    std::process::Command::new(cmd).args(args).arg(path).output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn flags_of(path: &Path) -> String {
    let o = tool("lsattr", &["-d"], path);
    assert!(o.status.success(), "lsattr: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().to_string()
}

fn eperm(r: std::io::Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{what}: {e}"),
        Ok(v) => panic!("{what} was allowed: {v:?}"),
    }
}

#[test]
fn chattr_immutable_and_append_only_hold_through_a_mount_and_a_remount() {
    if !can_mount() || std::process::Command::new("chattr").arg("-V").output().is_err() {
        eprintln!("skipped: needs root, /dev/fuse and e2fsprogs' chattr");
        return;
    }
    let (dir, g, pid) = fresh_mount("c.img", "256M");
    let (img, mp) = (dir.path().join("c.img"), g.0.clone());
    let (f, log) = (mp.join("f"), mp.join("log"));
    std::fs::write(&f, b"kept").unwrap();
    std::fs::write(&log, b"1\n").unwrap();
    let mut early = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    assert!(tool("chattr", &["+i"], &f).status.success());
    assert!(tool("chattr", &["+a"], &log).status.success());
    assert_eq!(flags_of(&f).matches('i').count(), 1, "{}", flags_of(&f));
    assert!(flags_of(&log).contains('a'), "{}", flags_of(&log));

    // This mount: every change cairn sees is refused.
    eperm(std::fs::write(&f, b"new"), "truncating open");
    eperm(std::fs::remove_file(&f), "unlink");
    eperm(std::fs::rename(&f, mp.join("g")), "rename");
    eperm(std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o777)), "chmod");
    eperm(std::fs::hard_link(&f, mp.join("h")), "link");
    // A descriptor opened before the flag, and an append opened after it
    // (no OPEN reaches cairn in this mount): each `write(2)` is refused at
    // the call (issue 50, item 7: `echo b >> f` returned 0, the line showed
    // until the page cache was dropped).
    eperm(early.write(b"XXXX"), "write through a descriptor opened before chattr +i");
    drop(early);
    let mut late = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
    eperm(late.write(b"b\n"), "append to an immutable file");
    drop(late);
    assert_eq!(std::fs::read(&f).unwrap(), b"kept");
    std::fs::write("/proc/sys/vm/drop_caches", b"3").unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"kept");
    let mut a = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    a.write_all(b"2\n").unwrap();
    a.sync_all().unwrap();
    drop(a);
    // Opened without O_APPEND (the open is not seen in this mount): the
    // overwrite is refused at the call.
    let mut over = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    eperm(over.write(b"X"), "a write without O_APPEND to an append-only file");
    drop(over);
    eperm(std::fs::write(&log, b"over"), "truncating an append-only file");
    eperm(std::fs::remove_file(&log), "unlink of an append-only file");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the first mount");

    // The next mount checks opens too.
    let pid = mount(&img, &mp, &[], "mount");
    assert!(flags_of(&f).contains('i') && flags_of(&log).contains('a'), "flags lost across a remount");
    assert_eq!(std::fs::read(&f).unwrap(), b"kept");
    assert_eq!(std::fs::read(&log).unwrap(), b"1\n2\n");
    eperm(std::fs::OpenOptions::new().write(true).open(&f), "open for writing of an immutable file");
    eperm(std::fs::OpenOptions::new().write(true).open(&log), "open for writing without O_APPEND");
    eperm(std::fs::OpenOptions::new().write(true).custom_flags(libc::O_RDONLY).open(&log), "the same");
    let mut a = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    a.write_all(b"3\n").unwrap();
    drop(a);
    assert_eq!(std::fs::read(&log).unwrap(), b"1\n2\n3\n");
    // Cleared, everything goes again.
    assert!(tool("chattr", &["-i"], &f).status.success());
    assert!(tool("chattr", &["-a"], &log).status.success());
    std::fs::write(&f, b"changed").unwrap();
    std::fs::remove_file(&f).unwrap();
    std::fs::remove_file(&log).unwrap();
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the second mount");
}
