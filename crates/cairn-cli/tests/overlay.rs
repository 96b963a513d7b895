//! cairn as overlayfs's upper layer (container storage): the kernel's
//! overlayfs needs RENAME_WHITEOUT, trusted.* xattrs, O_TMPFILE and d_type
//! from the upper file system. Through a real cairn mount and a real
//! overlay mount: removing and renaming lower files leaves whiteouts
//! (character devices 0:0) in the upper directory, a removed lower
//! directory stays hidden, copy-up keeps contents, and after both unmounts
//! fsck finds the image clean and a second overlay mount shows the same.

mod common;

use common::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;

fn overlay(lower: &Path, upper: &Path, work: &Path, merged: &Path) -> std::process::Output {
    let opts = format!("lowerdir={},upperdir={},workdir={}", p(lower), p(upper), p(work));
    Command::new("mount").args(["-t", "overlay", "overlay", "-o", &opts, p(merged)]).output().unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

#[test]
fn overlayfs_runs_on_a_cairn_upper_layer() {
    if !can_mount() {
        eprintln!("skipped: no /dev/fuse or not root");
        return;
    }
    let (dir, g, _) = fresh_mount("ov.img", "256M");
    let mp = g.0.clone();
    let (lower, merged) = (dir.path().join("lower"), dir.path().join("merged"));
    let (upper, work) = (mp.join("upper"), mp.join("work"));
    for d in [&lower, &merged, &upper, &work, &lower.join("d")] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(lower.join("a"), b"lower a").unwrap();
    std::fs::write(lower.join("b"), b"lower b").unwrap();
    std::fs::write(lower.join("d/x"), b"x").unwrap();
    std::fs::write(lower.join("keep"), b"kept").unwrap();
    let o = overlay(&lower, &upper, &work, &merged);
    if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unknown filesystem type") {
        eprintln!("skipped: no overlayfs in this kernel");
        return;
    }
    assert!(o.status.success(), "mount -t overlay: {}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(merged.join("a")).unwrap();
    std::fs::rename(merged.join("b"), merged.join("b2")).unwrap();
    std::fs::remove_dir_all(merged.join("d")).unwrap();
    std::fs::write(merged.join("keep"), b"changed above").unwrap();
    std::fs::write(merged.join("new"), b"new").unwrap();
    assert_eq!(names(&merged), ["b2", "keep", "new"]);
    assert_eq!(std::fs::read(merged.join("b2")).unwrap(), b"lower b");
    let st = Command::new("umount").arg(&merged).status().unwrap();
    assert!(st.success());

    // The upper layer holds whiteouts for what is gone below.
    for gone in ["a", "b", "d"] {
        let m = std::fs::symlink_metadata(upper.join(gone)).unwrap();
        assert!(m.file_type().is_char_device() && m.rdev() == 0, "{gone}: a whiteout, {m:?}");
    }
    assert_eq!(std::fs::read(upper.join("keep")).unwrap(), b"changed above");
    assert_eq!(std::fs::read(lower.join("keep")).unwrap(), b"kept", "the lower layer never changes");

    // Again, after cairn's own remount: the same view.
    let img = dir.path().join("ov.img");
    let pid = daemon_pid(&mp);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after overlayfs on cairn");
    mount(&img, &mp, &[], "remount");
    let o = overlay(&lower, &upper, &work, &merged);
    assert!(o.status.success(), "second overlay mount: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(names(&merged), ["b2", "keep", "new"]);
    assert_eq!(std::fs::read(merged.join("keep")).unwrap(), b"changed above");
    let st = Command::new("umount").arg(&merged).status().unwrap();
    assert!(st.success());
}
