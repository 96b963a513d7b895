//! Lookups by inode number, as the kernel makes them to open a file handle
//! (`open_by_handle_at`, NFS) whose inode it has forgotten: a LOOKUP of `.`
//! on the handle's number, of any type, and of `..` on directories up to
//! the root; and the root's generation, which FUSE wants to be 0.

use crate::common::*;
use cairn_core::{Ctx, FsError};

fn errno<T: std::fmt::Debug>(r: cairn_core::Result<T>) -> i32 {
    match r {
        Err(FsError::Errno(e)) => e,
        other => panic!("expected an errno, got {other:?}"),
    }
}

#[test]
fn dot_finds_any_live_inode_with_its_generation() {
    let (dev, fs) = mounted_image(64);
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap();
    let f = fs.names().mknod(&c, d.ino, b"f", libc::S_IFREG | 0o644, 0).unwrap();
    let s = fs.names().symlink(&c, d.ino, b"s", b"f").unwrap();
    for a in [&d, &f, &s] {
        let got = fs.lookup(a.ino, b".").unwrap_or_else(|e| panic!("lookup . on {}: {e}", a.ino));
        assert_eq!((got.ino, got.generation, got.mode), (a.ino, a.generation, a.mode));
        fs.inodes().forget(a.ino, 1);
    }
    // `..` still wants a directory.
    assert_eq!(errno(fs.lookup(f.ino, b"..")), libc::ENOTDIR);
    assert_eq!(fs.lookup(d.ino, b"..").unwrap().ino, 1);
    // A file whose last link is gone and that the kernel forgot: stale.
    fs.names().unlink(d.ino, b"f").unwrap();
    fs.inodes().forget(f.ino, 1);
    assert_eq!(errno(fs.lookup(f.ino, b".")), libc::ESTALE);
    // Numbers never used or out of range: stale, and nothing is latched.
    assert_eq!(errno(fs.lookup(f.ino + 1000, b".")), libc::ESTALE);
    assert_eq!(errno(fs.lookup(u64::MAX / 2, b".")), libc::ESTALE);
    assert_eq!(errno(fs.lookup(0, b".")), libc::ESTALE);
    assert!(!fs.is_read_only());
    unmount_clean(&fs, dev.as_ref(), "after lookups by number");
}

#[test]
fn the_root_reports_generation_zero() {
    let (_dev, fs) = mounted_image(64);
    let d = fs.names().mkdir(&Ctx::root(), 1, b"d", 0o755).unwrap();
    assert_ne!(d.generation, 0, "a test of nothing: cairn's generations are random");
    assert_eq!(fs.inodes().getattr(1).unwrap().generation, 0);
    assert_eq!(fs.lookup(d.ino, b"..").unwrap().generation, 0);
    assert_eq!(fs.lookup(1, b".").unwrap().generation, 0);
    assert_eq!(fs.lookup(1, b"..").unwrap().generation, 0);
    fs.unmount().unwrap();
}
