//! `fstrim` on a cairn mount gives the image's free space back to the host
//! (FITRIM through FUSE's ioctl; holes punched in the image file), and
//! keeps every live byte.

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

fn allocated(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn fstrim_gives_deleted_space_back_and_keeps_live_files() {
    if !can_mount() {
        eprintln!("skipped: no /dev/fuse or not root");
        return;
    }
    let (dir, g, pid) = fresh_mount("trim.img", "512M");
    let (mp, img) = (g.0.clone(), dir.path().join("trim.img"));
    let keep: Vec<u8> = (0..8u32 << 20).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(mp.join("keep"), &keep).unwrap();
    let junk = vec![0x5au8; 96 << 20];
    std::fs::write(mp.join("junk"), &junk).unwrap();
    assert!(Command::new("sync").status().unwrap().success());
    let full = allocated(&img);
    assert!(full > 100 << 20, "the image holds the data: {full}");
    std::fs::remove_file(mp.join("junk")).unwrap();

    let o = Command::new("fstrim").arg("-v").arg(&mp).output().unwrap();
    assert!(o.status.success(), "fstrim: {}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(said.contains("trimmed"), "{said}");
    let after = allocated(&img);
    assert!(after + (90 << 20) < full, "the image gave back {} of 96 MiB deleted", (full - after.min(full)) >> 20);
    assert!(counters(&mp)["alloc.trim.blocks"] > 0);

    // Live data survives, also across a remount; fsck is clean.
    assert_eq!(std::fs::read(mp.join("keep")).unwrap(), keep);
    std::fs::write(mp.join("later"), b"written after the trim").unwrap();
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after fstrim");
    // A read-only mount discards nothing (EROFS).
    let o = run(&["mount", "-o", "ro", p(&img), p(&mp)]);
    assert!(o.status.success(), "mount -o ro: {}", stderr(&o));
    assert_eq!(std::fs::read(mp.join("keep")).unwrap(), keep);
    assert_eq!(std::fs::read(mp.join("later")).unwrap(), b"written after the trim");
    let o = Command::new("fstrim").arg(&mp).output().unwrap();
    assert!(!o.status.success(), "fstrim of a read-only mount succeeded");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Read-only"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn mount_option_discard_punches_deleted_space_at_unmount_without_fstrim() {
    if !can_mount() {
        eprintln!("skipped: no /dev/fuse or not root");
        return;
    }
    let (dir, g, pid) = fresh_mount_with("online.img", "512M", &["-o", "discard"]);
    let (mp, img) = (g.0.clone(), dir.path().join("online.img"));
    std::fs::write(mp.join("keep"), b"kept").unwrap();
    std::fs::write(mp.join("junk"), vec![0x33u8; 96 << 20]).unwrap();
    assert!(Command::new("sync").status().unwrap().success());
    let full = allocated(&img);
    std::fs::remove_file(mp.join("junk")).unwrap();
    unmount(&mp, pid);
    let after = allocated(&img);
    assert!(after + (90 << 20) < full, "unmount gave back {} of 96 MiB deleted", (full - after.min(full)) >> 20);
    assert_fsck_clean(&img, "after online discard");
    mount(&img, &mp, &[], "remount");
    assert_eq!(std::fs::read(mp.join("keep")).unwrap(), b"kept");
}

#[test]
fn cairn_trim_discards_the_free_space_of_an_unmounted_image_and_refuses_a_mounted_one() {
    if !can_mount() {
        eprintln!("skipped: no /dev/fuse or not root");
        return;
    }
    let (dir, g, pid) = fresh_mount("offline.img", "512M");
    let (mp, img) = (g.0.clone(), dir.path().join("offline.img"));
    std::fs::write(mp.join("keep"), b"kept").unwrap();
    std::fs::write(mp.join("junk"), vec![0x44u8; 64 << 20]).unwrap();
    assert!(Command::new("sync").status().unwrap().success());
    std::fs::remove_file(mp.join("junk")).unwrap();
    let o = run(&["trim", p(&img)]);
    assert_eq!(o.status.code(), Some(1), "a mounted image must be refused: {}", stdout(&o));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    unmount(&mp, pid);
    let full = allocated(&img);
    let o = run(&["trim", p(&img)]);
    assert!(o.status.success(), "trim: {}", stderr(&o));
    assert!(stdout(&o).contains("discarded"), "{}", stdout(&o));
    let after = allocated(&img);
    assert!(after + (60 << 20) < full, "cairn trim gave back {} MiB", (full - after.min(full)) >> 20);
    assert_fsck_clean(&img, "after cairn trim");
    mount(&img, &mp, &[], "remount");
    assert_eq!(std::fs::read(mp.join("keep")).unwrap(), b"kept");
}
