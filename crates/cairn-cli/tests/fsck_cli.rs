//! `cairn fsck` as scripts and boot see it: fsck(8)'s exit code for a bad
//! command line (16), a path that is not an image, and an image file cut
//! short (found by a check, extended by a repair). No mounts: these run
//! as any user.

mod common;

use common::*;

fn code(o: &std::process::Output) -> i32 {
    o.status.code().expect("exited")
}

#[test]
fn fsck_usage_errors_exit_16() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("u.img");
    mkfs(&img, "64M");
    for args in [
        vec!["fsck", "--no-such-option", p(&img)],
        vec!["fsck"],
        vec!["fsck", "-y", "-n", p(&img)],
        vec!["fsck", "-b", "notanumber", p(&img)],
        vec!["fsck", p(&img), "extra"],
    ] {
        let o = run(&args);
        assert_eq!(code(&o), 16, "cairn {args:?} should be a usage error (16): {}", stderr(&o));
        assert!(stderr(&o).starts_with("error: "), "cairn {args:?}: {}", stderr(&o));
    }
    // --help is no error; other subcommands keep clap's code.
    assert_eq!(code(&run(&["fsck", "--help"])), 0);
    assert_eq!(code(&run(&["mkfs", "--no-such-option", p(&img)])), 2);
    assert_eq!(code(&run(&["fsck", p(&img)])), 0);
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
