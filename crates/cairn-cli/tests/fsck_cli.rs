//! `cairn fsck` as scripts and boot see it: a path that is not an image,
//! and an image file cut short (found by a check, extended by a repair).
//! No mounts: these run as any user.

mod common;

use common::*;

fn code(o: &std::process::Output) -> i32 {
    o.status.code().expect("exited")
}

#[test]
fn fsck_of_a_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for args in [vec!["fsck", p(dir.path())], vec!["fsck", "--repair", p(dir.path())]] {
        let o = run(&args);
        assert_eq!(code(&o), 8, "{}", stdout(&o));
        let want = format!("{} is a directory, not an image file or block device", dir.path().display());
        assert!(stdout(&o).contains(&want), "cairn {args:?}: {}{}", stdout(&o), stderr(&o));
    }
}

#[test]
fn a_truncated_image_is_reported_and_extended_by_repair() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    mkfs(&img, "256M");
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(255 << 20).unwrap();
    drop(f);
    let o = run(&["fsck", "-n", p(&img)]);
    assert_eq!(code(&o), 8, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("1,048,576 bytes (1 MiB) shorter than the file system"), "{out}");
    assert!(out.contains("--repair"), "{out}");
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 255 << 20, "a check changed the image's size");
    let o = run(&["fsck", "--repair", p(&img)]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("S05 the image file is 1,048,576 bytes (1 MiB) shorter"), "{out}");
    assert!(out.contains("extended from 267,386,880 to 268,435,456 bytes") && out.contains("[fixed]"), "{out}");
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 256 << 20);
    let o = run(&["fsck", "-n", p(&img)]);
    assert_eq!(code(&o), 0, "after the repair: {}", stdout(&o));
}
