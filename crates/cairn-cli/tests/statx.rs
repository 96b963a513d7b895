//! `statx(2)` birth time through a real mount: the kernel asks for
//! STATX_BTIME with FUSE_STATX, and cairn answers with the creation time
//! its inodes have always kept on disk. Rust's `Metadata::created` is that
//! statx call; before FUSE_STATX was served it failed with "creation time
//! is not available on this platform".

mod common;

use common::*;
use std::time::{Duration, SystemTime};

fn created(path: &std::path::Path) -> SystemTime {
    std::fs::metadata(path).unwrap().created().expect("statx birth time")
}

#[test]
fn statx_reports_the_birth_time_and_it_survives_writes_renames_and_remounts() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("bt.img", "128M");
    let mp = g.0.clone();
    let before = SystemTime::now() - Duration::from_secs(1);
    let f = mp.join("f");
    std::fs::write(&f, b"one").unwrap();
    std::fs::create_dir(mp.join("d")).unwrap();
    let born = created(&f);
    assert!(born >= before && born <= SystemTime::now(), "birth time {born:?} is not now");
    std::thread::sleep(Duration::from_millis(30));
    std::fs::write(&f, b"two").unwrap();
    std::fs::rename(&f, mp.join("d/g")).unwrap();
    let g_path = mp.join("d/g");
    let m = std::fs::metadata(&g_path).unwrap();
    assert_eq!(m.created().unwrap(), born, "a write or a rename changed the birth time");
    assert!(m.modified().unwrap() > born, "mtime {:?} not after the birth {born:?}", m.modified());
    let dir_born = created(&mp.join("d"));
    // `stat` prints it too (it asks statx for STATX_BTIME).
    let o = sh(&format!("stat -c %W {}", p(&g_path)));
    let secs = born.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), secs.to_string());
    unmount(&mp, pid);
    let img = dir.path().join("bt.img");
    let pid = mount(&img, &mp, &[], "mount");
    assert_eq!(created(&g_path), born, "the birth time changed across a remount");
    assert_eq!(created(&mp.join("d")), dir_born);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the statx test");
}
