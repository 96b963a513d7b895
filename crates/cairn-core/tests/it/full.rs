//! A full file system: ENOSPC is clean, and space freed by a delete is
//! reusable at once from the caller's point of view (the engine commits to
//! release blocks that wait for the journal).

use crate::common::*;
use cairn_core::Ctx;

#[test]
fn enospc_then_delete_and_refill() {
    let dev = new_image(48);
    let fs = mount(&dev);
    let first = fill_up(&fs, b"big1");
    assert!(first > 30 << 20, "filled only {first} bytes");
    // Metadata still works on a full file system (it has a reserve).
    for i in 0..50 {
        fs.mknod(&Ctx::root(), 1, format!("small{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    fs.unlink(1, b"big1").unwrap();
    let second = fill_up(&fs, b"big2");
    assert!(second + (1 << 20) >= first, "after delete only {second} of {first} bytes fit again");
    fs.unmount().unwrap();
    let fs = mount(&dev);
    let a = fs.lookup(1, b"big2").unwrap();
    assert_eq!(a.size, second);
    assert_eq!(fs.read(a.ino, second - 10, 10).unwrap(), vec![7u8; 10]);
    fs.unmount().unwrap();
}

/// A writer that deletes its files as fast as it writes them uses space the
/// journal has not released yet: a write that runs into those blocks must
/// wait for them (commit and retry), never come back short. Short writes
/// here were stress-ng's "hdd: incorrect data found" (it ignores the count).
#[test]
fn churn_through_blocks_waiting_for_the_journal_never_writes_short() {
    let dev = new_image(48);
    let fs = mount(&dev);
    let chunk = vec![9u8; 256 << 10];
    for round in 0..12 {
        let name = format!("churn{round}");
        let f = fs.mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
        fs.unlink(1, name.as_bytes()).unwrap();
        // 16 MiB a round on a 48 MiB file system: after two rounds the free
        // space is mostly blocks the previous rounds freed.
        for i in 0..64u64 {
            let n = fs.write(f.ino, i * chunk.len() as u64, &chunk).unwrap();
            assert_eq!(n as usize, chunk.len(), "round {round}, write {i}: short write");
        }
        assert_eq!(fs.getattr(f.ino).unwrap().size, 16 << 20);
        fs.forget(f.ino, 1);
    }
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after the churn");
}
