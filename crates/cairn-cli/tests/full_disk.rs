//! A full disk through a real mount with the writeback cache on (issue 32,
//! item 1). Before the space guard every buffered `write(2)` succeeded and
//! the data that did not fit was dropped at write-back: `dd` into a 256 MiB
//! image wrote 600 MB "successfully", and without `count` it never stopped.
//! Now `write(2)` itself says ENOSPC, every byte it accepted is on disk
//! after `fsync`, and freeing space lets writers go on.

mod common;

use common::*;
use std::io::Write;

const MIB: usize = 1 << 20;

/// Writes `chunk`-sized pieces of the pattern to `path` until `write(2)`
/// fails; returns the bytes accepted and the error.
fn fill(path: &std::path::Path, chunk: usize) -> (usize, std::io::Error) {
    let mut f = std::fs::File::create(path).unwrap();
    let mut done = 0usize;
    loop {
        let buf: Vec<u8> = (done..done + chunk).map(pattern).collect();
        match f.write(&buf) {
            Ok(n) => done += n,
            Err(e) => {
                f.sync_all().expect("fsync after the ENOSPC: every accepted byte fits");
                return (done, e);
            }
        }
        assert!(done < 1 << 30, "wrote 1 GiB into a 256 MiB file system without an error");
    }
}

#[test]
fn buffered_writes_say_enospc_and_keep_every_accepted_byte() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("full.img", "256M");
    let mp = g.0.clone();
    let (done, err) = fill(&mp.join("big"), MIB);
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(done > 200 * MIB, "only {done} bytes before ENOSPC");
    let c = counters(&mp);
    assert_eq!(c["space.writeback_enospc"], 0, "a write-back failed: accepted bytes were lost {c:?}");
    assert!(c["space.gate_refusals"] >= 1, "{c:?}");

    // Space freed: the guard lets writers go on.
    std::fs::remove_file(mp.join("big")).unwrap();
    let (small, err) = fill(&mp.join("again"), 64 << 10);
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(small > 200 * MIB, "only {small} bytes after the space was freed");
    let _ = std::fs::remove_file(mp.join("again"));
    let (done, _) = fill(&mp.join("big"), MIB);

    // After a remount the file holds exactly what write(2) accepted.
    unmount(&mp, pid);
    let img = dir.path().join("full.img");
    assert_fsck_clean(&img, "after the fill");
    let pid = mount(&img, &mp, &[], "mount");
    let back = std::fs::read(mp.join("big")).unwrap();
    assert_eq!(back.len(), done);
    if let Some(i) = back.iter().enumerate().position(|(i, b)| *b != pattern(i)) {
        panic!("byte {i} of {done} differs after the remount");
    }
    drop(back);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the remount");
}

#[test]
fn dirty_limit_mb_0_leaves_the_dirty_pages_unbounded_and_keeps_the_guard() {
    if !can_mount() {
        return;
    }
    let (_dir, g, pid) = fresh_mount_with("off.img", "64M", &["-o", "dirty_limit_mb=0"]);
    let c = counters(&g.0);
    assert_eq!(c["space.dirty_limit_bytes"], 0, "{c:?}");
    assert_eq!(c["space.reserve_bytes"], 4 * (8 << 20), "the guard keeps its default reserve: {c:?}");
    unmount(&g.0, pid);
}
