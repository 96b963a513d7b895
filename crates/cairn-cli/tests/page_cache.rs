//! The kernel's writeback cache (on by default) through a real mount: small
//! buffered writes reach cairn in a few large WRITE requests, the kernel's
//! mtime and size survive writeback and remount, and `SEEK_DATA`/`SEEK_HOLE`
//! never miss data still in the kernel's page cache (cairn answers LSEEK
//! with ENOSYS while the cache is on; with `writeback_cache=0` it reports
//! holes).

mod common;

use common::*;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;

const MIB: u64 = 1 << 20;

fn seek(f: &std::fs::File, offset: u64, whence: i32) -> std::io::Result<u64> {
    // SAFETY: lseek on a descriptor `f` owns; no memory is passed.
    #[allow(unsafe_code)]
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset as libc::off_t, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

#[test]
fn seek_data_and_seek_hole_see_writes_still_in_the_page_cache() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("s.img", "256M");
    let (img, mp) = (dir.path().join("s.img"), dir.path().join("mnt"));
    let path = mp.join("sparse");
    // No process may be spawned between the write and the seeks: a child's
    // exec closes its copy of the descriptor, and FUSE writes back at close.
    let before = counters(&mp);
    let f = std::fs::OpenOptions::new().create_new(true).read(true).write(true).open(&path).unwrap();
    f.set_len(4 * MIB).unwrap();
    f.write_all_at(&[7u8; 4096], MIB).unwrap();
    // No fsync: the 4 KiB are only in the kernel's page cache. Answered from
    // cairn's own map, SEEK_DATA would say ENXIO: no data at all.
    let data = seek(&f, 0, libc::SEEK_DATA).expect("SEEK_DATA must find the written block");
    assert!(data <= MIB, "SEEK_DATA from 0 skipped written data: {data}");
    let hole = seek(&f, MIB, libc::SEEK_HOLE).unwrap();
    assert!(hole >= MIB + 4096, "SEEK_HOLE from 1 MiB inside written data: {hole}");
    assert_eq!(seek(&f, 4 * MIB, libc::SEEK_DATA).unwrap_err().raw_os_error(), Some(libc::ENXIO));
    // (Spawning `cairn stats` now writes the page back: the child's exec
    // closes its copy of `f`, a FLUSH.)
    let after = counters(&mp);
    let lseeks = after.get("fuse.lseek.requests").copied().unwrap_or(0);
    assert!(lseeks - before.get("fuse.lseek.requests").copied().unwrap_or(0) <= 1, "LSEEK asked more than once");
    f.sync_all().unwrap();
    drop(f);
    unmount(&mp, pid);
    drop(g);
    assert_fsck_clean(&img, "after the writeback-cache mount");

    // Without the writeback cache cairn answers, and reports the holes.
    let _g = Guard(mp.clone());
    let pid = mount(&img, &mp, &["-o", "writeback_cache=0"], "mount");
    let f = std::fs::File::open(&path).unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_DATA).unwrap(), MIB);
    assert_eq!(seek(&f, MIB, libc::SEEK_HOLE).unwrap(), MIB + 4096);
    let mut b = [0u8; 4096];
    f.read_exact_at(&mut b, MIB).unwrap();
    assert_eq!(b, [7u8; 4096]);
    drop(f);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the writeback_cache=0 mount");
}

#[test]
fn small_buffered_writes_arrive_in_few_requests_and_keep_size_and_mtime() {
    if !can_mount() {
        return;
    }
    let (dir, g, pid) = fresh_mount("w.img", "256M");
    let (img, mp) = (dir.path().join("w.img"), dir.path().join("mnt"));
    let path = mp.join("log");
    let block: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let reqs = fuse_requests(&mp, || {
        use std::io::Write;
        let mut f = std::fs::File::create(&path).unwrap();
        for _ in 0..1024 {
            f.write_all(&block).unwrap();
        }
    });
    // 4 MiB in 4 KiB writes: without the cache 1,024 WRITE requests; with it
    // the kernel writes back at close in requests of up to 1 MiB.
    let writes = reqs.get("write").copied().unwrap_or(0);
    assert!(writes <= 64, "{writes} WRITE requests for 1,024 buffered 4 KiB writes: {reqs:?}");
    let before = std::fs::metadata(&path).unwrap();
    assert_eq!(before.len(), 4 * MIB);
    unmount(&mp, pid);
    drop(g);
    assert_fsck_clean(&img, "after small buffered writes");

    let _g = Guard(mp.clone());
    let pid = mount(&img, &mp, &[], "remount");
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(after.len(), 4 * MIB);
    assert_eq!((after.mtime(), after.mtime_nsec()), (before.mtime(), before.mtime_nsec()));
    assert_eq!((after.ctime(), after.ctime_nsec()), (before.ctime(), before.ctime_nsec()));
    let data = std::fs::read(&path).unwrap();
    assert!(data.chunks(4096).all(|c| c == block.as_slice()));
    unmount(&mp, pid);
}

#[test]
fn times_cairn_stamps_and_times_the_kernel_stamps_keep_their_order() {
    // Under the writeback cache the kernel stamps a regular file's ctime
    // itself (a link, a write) from its coarse clock; cairn stamps a new
    // fifo's. Each object made after another must not look older
    // (xfstests generic/423: a hard link's ctime against the socket made
    // before it).
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("t.img", "64M");
    let mp = dir.path().join("mnt");
    let f = mp.join("f");
    std::fs::write(&f, b"x").unwrap();
    let time = |m: &std::fs::Metadata| (m.ctime(), m.ctime_nsec());
    let mut inversions = Vec::new();
    for i in 0..200 {
        let fifo = mp.join(format!("p{i}"));
        let o = std::process::Command::new("mkfifo").arg(&fifo).output().unwrap();
        assert!(o.status.success(), "mkfifo: {}", stderr(&o));
        std::fs::hard_link(&f, mp.join(format!("l{i}"))).unwrap();
        let (before, after) = (std::fs::symlink_metadata(&fifo).unwrap(), std::fs::metadata(&f).unwrap());
        if time(&after) < time(&before) {
            inversions.push((i, time(&before), time(&after)));
        }
    }
    assert!(inversions.is_empty(), "a link's ctime before the fifo made before it: {inversions:?}");
    unmount(&mp, pid);
}
