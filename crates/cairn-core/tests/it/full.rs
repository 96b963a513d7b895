//! A full file system: ENOSPC is clean, and space freed by a delete is
//! reusable at once from the caller's point of view (the engine commits to
//! release blocks that wait for the journal).

use crate::common::*;
use cairn_core::Ctx;

#[test]
fn enospc_then_delete_and_refill() {
    let (dev, fs) = mounted_image(48);
    let first = fill_up(&fs, b"big1");
    assert!(first > 30 << 20, "filled only {first} bytes");
    // Metadata still works on a full file system (it has a reserve).
    for i in 0..50 {
        fs.names().mknod(&Ctx::root(), 1, format!("small{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    fs.names().unlink(1, b"big1").unwrap();
    let second = fill_up(&fs, b"big2");
    assert!(second + (1 << 20) >= first, "after delete only {second} of {first} bytes fit again");
    fs.unmount().unwrap();
    let fs = mount(&dev);
    let a = fs.lookup(1, b"big2").unwrap();
    assert_eq!(a.size, second);
    assert_eq!(fs.files().read(a.ino, second - 10, 10).unwrap(), vec![7u8; 10]);
    fs.unmount().unwrap();
}

/// A writer that deletes its files as fast as it writes them uses space the
/// journal has not released yet: a write that runs into those blocks must
/// wait for them (commit and retry), never come back short. Short writes
/// here were stress-ng's "hdd: incorrect data found" (it ignores the count).
#[test]
fn churn_through_blocks_waiting_for_the_journal_never_writes_short() {
    let (dev, fs) = mounted_image(48);
    let chunk = vec![9u8; 256 << 10];
    for round in 0..12 {
        let name = format!("churn{round}");
        let f = fs.names().mknod(&Ctx::root(), 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
        fs.names().unlink(1, name.as_bytes()).unwrap();
        // 16 MiB a round on a 48 MiB file system: after two rounds the free
        // space is mostly blocks the previous rounds freed.
        for i in 0..64u64 {
            let n = fs.files().write(f.ino, i * chunk.len() as u64, &chunk).unwrap();
            assert_eq!(n as usize, chunk.len(), "round {round}, write {i}: short write");
        }
        assert_eq!(fs.inodes().getattr(f.ino).unwrap().size, 16 << 20);
        fs.inodes().forget(f.ino, 1);
    }
    unmount_clean(&fs, dev.as_ref(), "after the churn");
}

/// Issue 32, item 6 (xfstests generic/449): a POSIX ACL that cannot be
/// stored for lack of space failed with ENOSPC but had already changed the
/// file's mode. Now the mode changes only with the ACL.
#[test]
fn an_acl_that_does_not_fit_changes_nothing() {
    let (dev, fs) = mounted_image(48);
    let c = Ctx::root();
    let f = fs.names().mknod(&c, 1, b"f", libc::S_IFREG | 0o640, 0).unwrap().ino;
    let others: Vec<u64> = (0..4000)
        .map(|i| fs.names().mknod(&c, 1, format!("x{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino)
        .collect();
    fill_up(&fs, b"big");
    // Use up the metadata reserve with xattr blocks no other file shares.
    let mut full = false;
    for (i, o) in others.iter().enumerate() {
        let value: Vec<u8> =
            (0..3000u32).map(|k| (k as usize * 31 + i) as u8).chain((i as u32).to_le_bytes()).collect();
        match fs.setxattr(*o, b"user.v", &value, 0) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                full = true;
                break;
            }
        }
    }
    assert!(full, "4,000 xattr blocks fitted: the reserve was not used up");
    // user::rwx, user:1:r--, group::r-x, mask::rwx, other::---
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in
        [(1u16, 7u16, u32::MAX), (2, 4, 1), (4, 5, u32::MAX), (0x10, 7, u32::MAX), (0x20, 0, u32::MAX)]
    {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    let before = fs.inodes().getattr(f).unwrap();
    let err = fs.setxattr(f, b"system.posix_acl_access", &acl, 0).expect_err("the ACL cannot fit");
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    let after = fs.inodes().getattr(f).unwrap();
    assert_eq!(after.mode, before.mode, "a failed setfacl changed the mode");
    assert_eq!(after.ctime, before.ctime, "a failed setfacl changed the ctime");
    assert!(fs.getxattr(f, b"system.posix_acl_access").is_err());
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(fs.inodes().getattr(f).unwrap().mode, before.mode, "after a remount");
    fs.unmount().unwrap();
}

/// Issue 32, item 6 (xfstests generic/103): statfs counted the metadata
/// reserve as available, so a fallocate of nearly all the space it reported
/// failed with ENOSPC. Available space now leaves the reserve out.
#[test]
fn fallocate_of_nearly_all_available_space_succeeds() {
    let (_dev, fs) = mounted_image(64);
    let f = fs.names().mknod(&Ctx::root(), 1, b"spc", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let s = fs.statfs().unwrap();
    assert!(s.blocks_avail < s.blocks_free, "the reserve is not left out: {s:?}");
    let avail = s.blocks_avail * u64::from(s.block_size);
    fs.files().fallocate(f, 0, avail - (512 << 10), 0).expect("fallocate of the available space less 512 KiB");
    fs.unmount().unwrap();
}

/// xfstests generic/626: renames with RENAME_WHITEOUT on a full file system
/// fail with ENOSPC when the new entry needs a directory block, and leave
/// no whiteout behind that no entry names.
#[test]
fn a_whiteout_rename_that_finds_no_space_leaves_no_whiteout() {
    let (dev, fs) = mounted_image(48);
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    for i in 0..400 {
        fs.names().mknod(&c, 1, format!("src-{i:04}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    fill_up(&fs, b"big");
    // Use up the metadata reserve with entries in `d`.
    let mut i = 0;
    while fs.names().mknod(&c, d, format!("filler-with-a-long-name-{i:06}").as_bytes(), libc::S_IFREG, 0).is_ok() {
        i += 1;
    }
    let mut enospc = 0;
    for i in 0..400 {
        let name = format!("src-{i:04}");
        let to = format!("moved-with-a-long-name-{i:04}");
        match fs.names().rename_as(&c, 1, name.as_bytes(), d, to.as_bytes(), cairn_core::RENAME_WHITEOUT) {
            Ok(()) => assert_eq!(fs.lookup(1, name.as_bytes()).unwrap().mode, libc::S_IFCHR),
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                assert_eq!(fs.lookup(1, name.as_bytes()).unwrap().mode & libc::S_IFMT, libc::S_IFREG, "unchanged");
                enospc += 1;
            }
        }
    }
    assert!(enospc > 0, "no rename ran out of space: the test proves nothing");
    unmount_clean(&fs, dev.as_ref(), "after whiteout renames on a full file system");
}

/// FITRIM (and `-o discard`) discard only blocks no file holds: a trim
/// racing writers that create, grow and delete files never zeroes a byte a
/// file still holds (the in-memory device zeroes what is discarded).
#[test]
fn trims_racing_writers_never_discard_live_data() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dev = new_image(64);
    let opts = cairn_core::MountOptions { discard: true, ..Default::default() };
    let fs = mount_with(&dev, opts);
    let c = Ctx::root();
    let stop = AtomicBool::new(false);
    let trimmed = std::thread::scope(|s| {
        let trimmer = s.spawn(|| {
            let mut total = 0u64;
            while !stop.load(Ordering::Relaxed) {
                total += fs.trim(0, u64::MAX, 0).unwrap();
            }
            total
        });
        for round in 0..40u32 {
            let name = format!("f{}", round % 7);
            let _ = fs.names().unlink(1, name.as_bytes());
            let f = fs.names().mknod(&c, 1, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
            let fill = vec![(round % 250 + 1) as u8; 300_000 + round as usize * 1000];
            fs.files().write(f, 0, &fill).unwrap();
            if round % 3 == 0 {
                fs.files().fsync(f, false).unwrap();
            }
            assert_eq!(fs.files().read(f, 0, fill.len() as u32).unwrap(), fill, "round {round}");
        }
        stop.store(true, Ordering::Relaxed);
        trimmer.join().unwrap()
    });
    assert!(trimmed > 0);
    for i in 0..7u32 {
        let a = fs.lookup(1, format!("f{i}").as_bytes()).unwrap();
        let data = fs.files().read(a.ino, 0, a.size as u32).unwrap();
        let want = data[0];
        assert!(want != 0 && data.iter().all(|b| *b == want), "f{i} lost bytes to a discard");
    }
    unmount_clean(&fs, dev.as_ref(), "after trims racing writers");
    let fs = mount(&dev);
    for i in 0..7u32 {
        let a = fs.lookup(1, format!("f{i}").as_bytes()).unwrap();
        assert!(fs.files().read(a.ino, 0, a.size as u32).unwrap().iter().all(|b| *b != 0), "f{i} after remount");
    }
    fs.unmount().unwrap();
}

/// xfstests generic/371 (a write and a fallocate of 80 MiB each, in a loop
/// with `rm`, on 256 MiB): through FUSE an unlink returns while the kernel
/// still holds the file, and its FORGET comes a moment later. A fallocate
/// that needed that file's space failed with ENOSPC about one run in six;
/// it now waits for the FORGET and the reaper.
#[test]
fn an_allocation_waits_for_the_forget_of_a_file_unlinked_while_held() {
    let (dev, fs) = mounted_image(64);
    let root = Ctx::root();
    let big = fs.names().mknod(&root, 1, b"big", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let s = fs.statfs().unwrap();
    let most = s.blocks_avail * u64::from(s.block_size) - (2 << 20);
    fs.files().fallocate(big, 0, most, 0).unwrap();
    // Unlinked while "the kernel" holds it (mknod took a lookup reference).
    fs.names().unlink(1, b"big").unwrap();
    let next = fs.names().mknod(&root, 1, b"next", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let forgetter = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            fs.inodes().forget(big, 1);
        })
    };
    fs.files().fallocate(next, 0, most, 0).expect("the space of the file being forgotten");
    forgetter.join().unwrap();
    let stat = |name: &str| fs.stats().into_iter().find(|(n, _)| n == name).map(|(_, v)| v).unwrap();
    assert!(stat("reaper.forget_waits") >= 1, "the fallocate did not wait for the FORGET");
    assert_eq!(stat("reaper.held_unlinked"), 0);
    fs.inodes().forget(next, 1);
    unmount_clean(&fs, dev.as_ref(), "after the wait");
}

/// Issue 50, items 1 and 2: a write-back of the kernel's dirty pages that
/// runs out of space part-way was answered with the short count, which the
/// kernel ignores: `fsync` returned 0 and the file was cut back to a block
/// boundary. `FileIo::write_back` is whole or ENOSPC, and what it stored before
/// the space ran out never changes a byte an earlier `fsync` covered, nor
/// shrinks the file.
#[test]
fn a_write_back_that_does_not_fit_is_refused_and_keeps_the_durable_bytes() {
    let (dev, fs) = mounted_image(48);
    let c = Ctx::root();
    let f = fs.names().mknod(&c, 1, b"appends", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let durable: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(fs.files().write_back(f, 0, &durable).unwrap(), 6000);
    fs.files().fsync(f, false).unwrap();
    fill_up(&fs, b"big");
    // The kernel writes back the page holding bytes 4096..6000 together
    // with 5,000 new ones: the first block is there, the next is not.
    let mut page = durable[4096..].to_vec();
    page.extend(std::iter::repeat_n(0xeeu8, 5000));
    let e = fs.files().write_back(f, 4096, &page).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
    let size = fs.inodes().getattr(f).unwrap().size;
    assert!(size >= 6000, "the file shrank below its durable size: {size}");
    fs.unmount().unwrap();
    let fs = mount(&dev);
    let a = fs.lookup(1, b"appends").unwrap();
    assert!(a.size >= 6000, "after the remount the file is {} bytes", a.size);
    assert_eq!(fs.files().read(a.ino, 0, 6000).unwrap(), durable, "durable bytes changed");
    unmount_clean(&fs, dev.as_ref(), "after the refused write-back");
}

/// Issue 50, item 6: the largest file size is the kernel's (`i64::MAX`),
/// which the kernel checks at `write(2)`; a byte at 2^52 or just below the
/// limit is stored and reads back after a remount.
#[test]
fn a_byte_at_the_largest_offsets_is_stored() {
    let (dev, fs) = mounted_image(48);
    let f = fs.names().mknod(&Ctx::root(), 1, b"sparse", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let last = i64::MAX as u64 - 1;
    assert_eq!(fs.files().write_back(f, 1 << 52, b"A").unwrap(), 1);
    assert_eq!(fs.files().write_back(f, last, b"Z").unwrap(), 1);
    assert_eq!(fs.files().write(f, last + 1, b"!").unwrap_err().errno(), libc::EFBIG);
    fs.unmount().unwrap();
    let fs = mount(&dev);
    let a = fs.lookup(1, b"sparse").unwrap();
    assert_eq!(a.size, last + 1);
    assert_eq!(fs.files().read(a.ino, 1 << 52, 1).unwrap(), b"A");
    assert_eq!(fs.files().read(a.ino, last, 1).unwrap(), b"Z");
    unmount_clean(&fs, dev.as_ref(), "after bytes at the largest offsets");
}
