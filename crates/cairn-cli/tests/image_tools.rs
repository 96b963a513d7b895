//! The tools that work on an unmounted image, at its edges (issue 51):
//! `inspect` of an inode that is not in use changes nothing and says so.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// The image's SHA-256, from sha256sum (an image here may be 300 MiB).
fn digest(img: &Path) -> String {
    let o = Command::new("sha256sum").arg(img).output().expect("sha256sum");
    assert!(o.status.success());
    stdout(&o).split_whitespace().next().unwrap().to_string()
}

#[test]
fn inspect_of_an_inode_not_in_use_says_so_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("i.img");
    mkfs(&img, "16M");
    let before = digest(&img);
    for (ino, want) in [
        ("#2", "inode 2: not in use (inodes 2 to 7 are reserved)"),
        ("#9", "inode 9: not in use"),
        ("100", "inode 100: not in use"),
        ("#0", "inode 0: not in use (out of range)"),
        ("#99999999", "inode 99999999: not in use (out of range)"),
    ] {
        let o = run(&["inspect", p(&img), "stat", ino]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "stat {ino}: {}", stdout(&o));
        assert!(err.contains(want), "stat {ino}: {err}");
        for never in ["corrupt", "checksum", "marked", "journal", "superblock", "descriptor"] {
            assert!(!err.contains(never), "stat {ino} says {never:?}: {err}");
        }
    }
    // The root and /lost+found (the first inode mkfs hands out) are in use.
    let o = run(&["inspect", p(&img), "stat", "#1"]);
    assert!(o.status.success() && stdout(&o).starts_with("inode 1 "), "{}", stderr(&o));
    let o = run(&["inspect", p(&img), "stat", "#8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(digest(&img), before, "inspect changed the image");
    assert_fsck_clean(&img, "after inspect");
    // Damage in an inode in use is reported, and still not written to the
    // image (it is open read-only: no error state recorded).
    let o = run(&["inspect", p(&img), "stat", "#8"]);
    let out = stdout(&o);
    let loc = out.split_once("(block ").and_then(|(_, r)| r.split_once(')')).unwrap().0;
    let (blk, byte) = loc.split_once(", byte ").unwrap();
    let at = blk.parse::<u64>().unwrap() * 4096 + byte.parse::<u64>().unwrap() + 40;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    let mut b = [0u8];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, at).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[b[0] ^ 0xff], at).unwrap();
    drop(f);
    let damaged = digest(&img);
    let o = run(&["inspect", p(&img), "stat", "#8"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("checksum mismatch") && err.contains("not recorded"), "{err}");
    assert!(!err.contains("Bad file descriptor") && !err.contains("could not record"), "{err}");
    assert_eq!(digest(&img), damaged, "inspect wrote to a damaged image");
}
