//! The `cairn` command as a user runs it: exit codes and messages for good
//! and bad input, and (as root, with /dev/fuse) a real mount used with
//! ordinary file operations, a refused second mount, unmount, fsck and
//! remount.

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn mkfs_makes_a_sparse_image_and_refuses_to_overwrite_one() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.img");
    let o = run(&["mkfs", p(&img), "--size", "64M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("blocks of 4096 bytes"), "{}", stdout(&o));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 << 20);
    let o = run(&["mkfs", p(&img), "--size", "64M"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already holds a cairn file system"), "{}", stderr(&o));
    let o = run(&["mkfs", p(&img), "--size", "64M", "--force", "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn mkfs_refuses_a_foreign_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ext4.img");
    let mut bytes = vec![0u8; 4 << 20];
    bytes[1080] = 0x53;
    bytes[1081] = 0xef;
    std::fs::write(&img, &bytes).unwrap();
    let o = run(&["mkfs", p(&img)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already holds an ext2 file system"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&img).unwrap(), bytes, "a refused mkfs changed the file");
}

#[test]
fn mkfs_rejects_bad_sizes_without_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("b.img");
    for bad in ["12Q", "abc", "", "-1G"] {
        let size_arg = format!("--size={bad}");
        let o = run(&["mkfs", p(&img), &size_arg]);
        assert_eq!(o.status.code(), Some(1), "size {bad:?}");
        assert!(stderr(&o).contains("--size"), "{}", stderr(&o));
    }
    let o = run(&["mkfs", p(&img), "--size", "4K"]);
    assert_eq!(o.status.code(), Some(1), "a 4 KiB file system cannot exist");
    assert!(!img.exists(), "a failed mkfs left a file behind");
    // Each bound is given, not the arithmetic that missed it.
    let o = run(&["mkfs", p(&img), "--size", "1M"]);
    assert!(
        stderr(&o).contains("too small: with 4096-byte blocks and these options cairn needs at least 3.5 MiB"),
        "{}",
        stderr(&o)
    );
    let o = run(&["mkfs", p(&img), "--size", "1P"]);
    assert!(stderr(&o).contains("too large: with 4096-byte blocks cairn formats at most 252.0 TiB"), "{}", stderr(&o));
    assert!(!img.exists(), "a failed mkfs left a file behind");
    // A size the host file system cannot hold (EFBIG on ext4, xfs, tmpfs
    // alike past 8 EiB; 1 PiB of 64 KiB blocks is past most): the file made
    // for it goes again.
    let o = run(&["mkfs", p(&img), "--size", "1P", "--block-size", "65536", "--quiet"]);
    if o.status.success() {
        std::fs::remove_file(&img).unwrap();
    } else {
        assert!(!img.exists(), "mkfs that could not size its new file left it behind: {}", stderr(&o));
    }
    let o = run(&["mkfs", p(&img)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--size"), "{}", stderr(&o));
}

#[test]
fn mkfs_of_16_tib_stays_sparse() {
    // ext4 (a usual /tmp) caps files just below 16 TiB; tmpfs does not.
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let img = dir.path().join("big.img");
    mkfs(&img, "16T");
    let m = std::fs::metadata(&img).unwrap();
    assert_eq!(m.len(), 16 << 40);
    assert!(m.blocks() * 512 < 256 << 20, "16 TiB image uses {} bytes on disk", m.blocks() * 512);
    let o = run(&["stats", p(&img), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["figures"]["size_bytes"].as_u64(), Some(16 << 40));
    assert_eq!(v["state"], "clean");
}

#[test]
fn stats_and_mount_refuse_what_is_not_a_cairn_image() {
    let Scratch { dir: _dir, img: junk, mp } = scratch("junk.img");
    std::fs::write(&junk, vec![0x5au8; 1 << 20]).unwrap();
    let o = run(&["stats", p(&junk)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a cairn file system"), "{}", stderr(&o));
    let o = run(&["mount", p(&junk), p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not a cairn file system: it holds no cairn superblock"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("cairn fsck"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&junk).unwrap(), vec![0x5au8; 1 << 20], "a refused mount changed the file");
}

#[test]
fn mount_refuses_damaged_images_and_bad_arguments() {
    let Scratch { dir, img, mp } = scratch("c.img");
    mkfs(&img, "64M");
    // A missing mount point.
    let o = run(&["mount", p(&img), p(&dir.path().join("nowhere"))]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    // A misspelt option.
    let o = run(&["mount", p(&img), p(&mp), "-o", "allow_otter"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unknown mount option 'allow_otter'"), "{}", stderr(&o));
    // A corrupted superblock (one flipped byte inside its checksummed part).
    let good = std::fs::read(&img).unwrap();
    let mut bad = good.clone();
    bad[40] ^= 0xff;
    std::fs::write(&img, &bad).unwrap();
    let o = run(&["mount", p(&img), p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a usable cairn file system"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&img).unwrap(), bad, "a refused mount changed the image");
    // A truncated image.
    std::fs::write(&img, &good[..(8 << 20)]).unwrap();
    let o = run(&["mount", p(&img), p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a usable cairn file system"), "{}", stderr(&o));
}

// ------------------------------------------------------------- real mounts

#[test]
fn a_real_mount_keeps_data_across_unmount_and_refuses_a_second_mount() {
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("m.img", "256M");
    let (img, mp) = (dir.path().join("m.img"), dir.path().join("mnt"));
    assert!(is_mounted(&mp), "cairn mount returned before the mount appeared");

    // Ordinary use.
    let data = patterned(3_000_000);
    std::fs::create_dir_all(mp.join("a/b/c")).unwrap();
    std::fs::write(mp.join("a/b/c/big"), &data).unwrap();
    std::fs::write(mp.join("small"), b"hello").unwrap();
    std::os::unix::fs::symlink("a/b/c/big", mp.join("link")).unwrap();
    std::fs::hard_link(mp.join("small"), mp.join("small2")).unwrap();
    std::fs::rename(mp.join("small2"), mp.join("a/moved")).unwrap();
    assert_eq!(std::fs::read(mp.join("link")).unwrap(), data);
    assert_eq!(std::fs::metadata(mp.join("small")).unwrap().nlink(), 2);
    let long = "n".repeat(255);
    std::fs::write(mp.join(&long), b"x").unwrap();
    let too_long = "n".repeat(256);
    let e = std::fs::write(mp.join(&too_long), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    let mut names: Vec<String> =
        std::fs::read_dir(&mp).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, vec!["a".to_string(), "link".into(), "lost+found".into(), long.clone(), "small".into()]);

    // A second mount of the same image is refused.
    let mp2 = dir.path().join("mnt2");
    std::fs::create_dir(&mp2).unwrap();
    let o = run(&["mount", p(&img), p(&mp2)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already in use"), "{}", stderr(&o));
    assert!(!is_mounted(&mp2));

    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck after unmount");
    assert_eq!(stats_json(&img)["state"], "clean");

    // Remount: everything is still there.
    let pid = mount(&img, &mp, &[], "remount");
    assert_eq!(std::fs::read(mp.join("a/b/c/big")).unwrap(), data);
    assert_eq!(std::fs::read(mp.join("a/moved")).unwrap(), b"hello");
    assert_eq!(std::fs::read_link(mp.join("link")).unwrap(), Path::new("a/b/c/big"));
    assert_eq!(std::fs::metadata(mp.join("small")).unwrap().nlink(), 2);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck after remount");
}

#[test]
fn a_killed_daemon_leaves_a_journal_that_the_next_mount_replays() {
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("k.img", "128M");
    let (img, mp) = (dir.path().join("k.img"), dir.path().join("mnt"));
    write_synced(&mp.join("kept"), b"fsync'd before the kill");
    Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    wait_gone(pid, Duration::from_secs(30), "after SIGKILL");
    let _ = Command::new("umount").arg(&mp).status();
    // fsck checks it as if replayed: not corrupt.
    assert_fsck_clean(&img, "fsck of an unreplayed image");
    // A read-write mount replays, and the fsync'd file is there.
    let saved = std::fs::read(&img).unwrap();
    let pid = mount(&img, &mp, &[], "remount");
    assert_eq!(std::fs::read(mp.join("kept")).unwrap(), b"fsync'd before the kill");
    let v = stats_json(&mp);
    assert_eq!(v["counters"]["journal.replays_at_mount"].as_u64(), Some(1), "{v}");
    unmount(&mp, pid);
    // So does a read-only mount of the same unreplayed image (as ext4 does
    // while the device is writable); the mount itself stays read-only.
    std::fs::write(&img, &saved).unwrap();
    let pid = mount(&img, &mp, &["-o", "ro"], "read-only mount of an unreplayed image");
    assert_eq!(std::fs::read(mp.join("kept")).unwrap(), b"fsync'd before the kill");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck after replay");
}

#[test]
fn fuse_requests_are_counted_per_opcode() {
    if !can_mount() {
        return;
    }
    let (dir, _g, _) = fresh_mount("r.img", "256M");
    let (img, mp) = (dir.path().join("r.img"), dir.path().join("mnt"));
    std::fs::create_dir(mp.join("d")).unwrap();

    const N: u64 = 1000;
    let d = fuse_requests(&mp, || {
        for i in 0..N {
            std::fs::File::create(mp.join(format!("d/f{i}"))).unwrap();
        }
    });
    let creates = d.get("create").copied().unwrap_or(0) + d.get("mknod").copied().unwrap_or(0);
    assert!(creates >= N, "{N} creates counted as {creates}: {d:?}");
    per_op("create (File::create + close)", N, &d);

    let d = fuse_requests(&mp, || {
        for i in 0..N {
            std::fs::metadata(mp.join(format!("d/f{i}"))).unwrap();
        }
    });
    per_op("stat (attributes cached since create)", N, &d);

    let d = fuse_requests(&mp, || {
        for i in 0..N {
            drop(std::fs::File::open(mp.join(format!("d/f{i}"))).unwrap());
        }
    });
    // OPEN is answered ENOSYS once (the first open of the connection); after
    // that the kernel sends neither OPEN nor RELEASE.
    assert!(d.get("open").copied().unwrap_or(0) <= 1, "{d:?}");
    assert_eq!(d.get("release").copied().unwrap_or(0), 0, "{d:?}");
    per_op("open+close", N, &d);

    let d = fuse_requests(&mp, || {
        assert_eq!(std::fs::read_dir(mp.join("d")).unwrap().count() as u64, N);
    });
    per_op("readdir of 1000 entries (whole listing)", 1, &d);

    let data = patterned(8 << 20);
    std::fs::write(mp.join("big"), &data).unwrap();
    let f = std::fs::File::open(mp.join("big")).unwrap();
    f.sync_all().unwrap();
    // Drop this file's pages from the page cache, so that the reads reach cairn.
    use std::os::unix::io::AsRawFd;
    // SAFETY: fadvise on an open descriptor touches no memory of ours.
    #[allow(unsafe_code)]
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
    let d = fuse_requests(&mp, || {
        use std::io::Read;
        let mut f = &f;
        let mut buf = vec![0u8; 1 << 20];
        let mut got = Vec::new();
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got == data);
    });
    assert!(d.get("read").copied().unwrap_or(0) >= 1, "{d:?}");
    per_op("MiB read sequentially (cold cache)", 8, &d);
    drop(f);

    // Cold stats: after a remount nothing is in the kernel's caches.
    cairn_umount(&mp);
    mount(&img, &mp, &[], "remount");
    let d = fuse_requests(&mp, || {
        for i in 0..N {
            std::fs::metadata(mp.join(format!("d/f{i}"))).unwrap();
        }
    });
    assert!(d.get("lookup").copied().unwrap_or(0) >= N, "{d:?}");
    per_op("stat (cold)", N, &d);
    let c = counters(&mp);
    assert!(c["fuse.lookup.us_p50"] <= c["fuse.lookup.us_p99"], "{c:?}");
    assert!(c["fuse.lookup.us_total"] <= c["fuse.lookup.reply_us_total"], "{c:?}");
    cairn_umount(&mp);
}

/// A cold listing of 3,000 files, then a stat of each (what `ls -l`,
/// `find -printf %s`, `du` and `rm -rf` do): READDIRPLUS hands the kernel
/// every entry's attributes, so no stat costs a LOOKUP (`readdirplus=always`,
/// the default). Under the kernel's `auto` heuristic only the first batch
/// comes with attributes, and the rest cost a LOOKUP each.
#[test]
fn a_cold_listing_then_stats_costs_no_lookup_with_readdirplus_always() {
    if !can_mount() {
        return;
    }
    const N: u64 = 3000;
    let Scratch { dir: _dir, img, mp } = scratch("l.img");
    mkfs(&img, "256M");
    let mut lookups = Vec::new();
    for (i, mode) in ["always", "auto"].iter().enumerate() {
        let opt = format!("readdirplus={mode}");
        let _g = Guard(mp.clone());
        mount(&img, &mp, &["-o", &opt], "mount");
        if i == 0 {
            std::fs::create_dir(mp.join("d")).unwrap();
            for f in 0..N {
                std::fs::File::create(mp.join(format!("d/f{f}"))).unwrap();
            }
            cairn_umount(&mp);
            mount(&img, &mp, &["-o", &opt], "mount again");
        }
        let d = fuse_requests(&mp, || {
            let names: Vec<_> = std::fs::read_dir(mp.join("d")).unwrap().map(|e| e.unwrap().path()).collect();
            assert_eq!(names.len() as u64, N);
            for n in &names {
                assert_eq!(std::fs::symlink_metadata(n).unwrap().len(), 0);
            }
        });
        per_op(&format!("cold listing + stat of {N} files, readdirplus={mode}"), N, &d);
        lookups.push(d.get("lookup").copied().unwrap_or(0));
        cairn_umount(&mp);
    }
    assert!(lookups[0] <= 1, "readdirplus=always: {} lookups for {N} stats", lookups[0]);
    assert!(lookups[1] >= N / 2, "readdirplus=auto: only {} lookups: the test cannot tell the modes apart", lookups[1]);
    assert_fsck_clean(&img, "after the listings");
}

#[test]
fn cairn_umount_returns_when_the_image_is_released() {
    if !can_mount() {
        return;
    }
    let Scratch { dir: _dir, img, mp } = scratch("u.img");
    mkfs(&img, "256M");
    let data = vec![7u8; 20 << 20];
    // fuseblk (root's default) and plain fuse: `cairn fsck` right after
    // `cairn umount`, no wait in between.
    for opts in [&[][..], &["-o", "nofuseblk"][..]] {
        for round in 0..3 {
            let _g = Guard(mp.clone());
            mount(&img, &mp, opts, &format!("mount {opts:?}"));
            std::fs::write(mp.join(format!("f{round}")), &data).unwrap();
            for i in 0..200 {
                std::fs::write(mp.join(format!("s{round}-{i}")), b"x").unwrap();
            }
            cairn_umount(&mp);
            assert!(!is_mounted(&mp));
            assert_fsck_clean(&img, &format!("fsck right after cairn umount {opts:?}"));
            assert_eq!(stats_json(&img)["state"], "clean", "{opts:?}");
        }
    }
    // Not mounted: a clear error.
    let o = run(&["umount", p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not mounted"), "{}", stderr(&o));
}

/// A 4 KiB-aligned buffer of `n` bytes (O_DIRECT wants aligned memory on
/// most file systems; FUSE does not, but users pass aligned buffers).
fn aligned(n: usize, fill: u8) -> (Vec<u8>, usize) {
    let v = vec![fill; n + 4096];
    let pad = (4096 - (v.as_ptr() as usize) % 4096) % 4096;
    (v, pad)
}

#[test]
fn o_direct_overwrites_take_the_fast_path_and_stay_coherent_with_buffered_io() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("d.img", "256M");
    let (img, mp) = (dir.path().join("d.img"), dir.path().join("mnt"));
    let f = mp.join("f");
    let mut model = vec![1u8; 1 << 20];
    write_synced(&f, &model);

    let before = counters(&mp);
    let d = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(&f).unwrap();
    // Aligned: a 4 KiB block and a 64 KiB run.
    let (buf, pad) = aligned(65536, 2);
    d.write_all_at(&buf[pad..pad + 4096], 8192).unwrap();
    model[8192..12288].fill(2);
    d.write_all_at(&buf[pad..pad + 65536], 131072).unwrap();
    model[131072..196608].fill(2);
    // Unaligned offset, length and buffer: FUSE passes them through.
    d.write_all_at(b"unaligned", 12345).unwrap();
    model[12345..12354].copy_from_slice(b"unaligned");
    // One FUSE request per write: with HANDLE_KILLPRIV_V2 the kernel does
    // not ask for security.capability first.
    for i in 0..100u64 {
        d.write_all_at(&buf[pad..pad + 4096], 262_144 + i * 4096).unwrap();
        model[262_144 + i as usize * 4096..262_144 + (i as usize + 1) * 4096].fill(2);
    }
    let after = counters(&mp);
    assert_eq!(after["overwrite.fast_writes"] - before["overwrite.fast_writes"], 103, "{after:?}");
    assert_eq!(after["overwrite.journaled_writes"], before["overwrite.journaled_writes"]);
    let getxattrs = after.get("fuse.getxattr.requests").copied().unwrap_or(0)
        - before.get("fuse.getxattr.requests").copied().unwrap_or(0);
    assert!(getxattrs <= 1, "{getxattrs} GETXATTR requests for 103 writes");

    // Direct reads see them, and so does the page cache of a buffered open.
    let (mut rb, pad) = aligned(65536, 0);
    d.read_exact_at(&mut rb[pad..pad + 65536], 131072).unwrap();
    assert_eq!(&rb[pad..pad + 65536], &model[131072..196608]);
    assert_eq!(std::fs::read(&f).unwrap(), model);
    // A buffered write, then a direct read of it.
    std::fs::OpenOptions::new().write(true).open(&f).unwrap().write_all_at(b"buffered", 8192).unwrap();
    model[8192..8200].copy_from_slice(b"buffered");
    let mut small = [0u8; 8];
    d.read_exact_at(&mut small, 8192).unwrap();
    assert_eq!(&small, b"buffered");
    // A direct write past the end extends the file (journaled).
    d.write_all_at(&buf[pad..pad + 4096], 1 << 20).unwrap();
    model.extend_from_slice(&[2u8; 4096]);
    assert_eq!(std::fs::metadata(&f).unwrap().len(), model.len() as u64);
    d.sync_data().unwrap();
    drop(d);
    assert_eq!(std::fs::read(&f).unwrap(), model);

    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");
    let pid = mount(&img, &mp, &[], "remount");
    assert_eq!(std::fs::read(&f).unwrap(), model);
    unmount(&mp, pid);
}

#[test]
fn writes_truncates_and_chowns_by_others_drop_suid_sgid_and_capabilities() {
    use std::os::unix::fs::PermissionsExt;
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount_with("k.img", "64M", &["-o", "allow_other"]);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (img, mp) = (dir.path().join("k.img"), dir.path().join("mnt"));
    let f = mp.join("f");
    let mode = |f: &Path| std::fs::metadata(f).unwrap().mode() & 0o7777;
    let set = |f: &Path, m: u32| std::fs::set_permissions(f, std::fs::Permissions::from_mode(m)).unwrap();
    std::fs::write(&f, b"12345678").unwrap();
    // A write by another user.
    set(&f, 0o6777);
    let o = sh(&format!("su nobody -s /bin/sh -c 'printf x >> {}'", f.display()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(mode(&f), 0o777, "a write by another user kept suid/sgid");
    // A truncate by another user.
    set(&f, 0o6777);
    let o = sh(&format!("su nobody -s /bin/sh -c 'truncate -s 3 {}'", f.display()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(mode(&f), 0o777, "a truncate by another user kept suid/sgid");
    // sgid without group execute is a locking mark, not a privilege: kept
    // for a writer in the file's group (tests/privs.rs has the others).
    std::os::unix::fs::chown(&f, None, Some(65534)).unwrap();
    set(&f, 0o2766);
    let o = sh(&format!("su nobody -s /bin/sh -c 'printf y >> {}'", f.display()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(mode(&f), 0o2766);
    // chown drops suid and a file capability.
    set(&f, 0o4755);
    let o = sh(&format!("setfattr -n security.capability -v 0sAQAAAgAgAAAAAAAAAAAAAAAAAAA= {}", f.display()));
    assert!(o.status.success(), "setfattr: {}", stderr(&o));
    let o = sh(&format!("chown nobody {}", f.display()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(mode(&f) & 0o4000, 0, "chown kept suid");
    let o = sh(&format!("getfattr -n security.capability {}", f.display()));
    assert!(!o.status.success(), "chown kept the file capability");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");
}

#[test]
fn posix_acls_work_through_a_mount_as_on_ext4() {
    if !can_mount() {
        return;
    }
    if !Path::new("/usr/bin/setfacl").exists() || !Path::new("/usr/bin/getfacl").exists() {
        eprintln!("SKIPPED: setfacl/getfacl not installed (Debian package acl)");
        return;
    }
    let (dir, _g, pid) = fresh_mount_with("acl.img", "256M", &["-o", "allow_other"]);
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (img, mp) = (dir.path().join("acl.img"), dir.path().join("mnt"));
    let m = p(&mp);
    let ok = |cmd: String| {
        let o = sh(&cmd);
        assert!(o.status.success(), "{cmd}: {}{}", stdout(&o), stderr(&o));
        stdout(&o)
    };
    ok(format!("cd {m} && umask 022 && mkdir d && chmod 755 d && setfacl -m u:nobody:rwx d && setfacl -d -m u:nobody:rx,o::- d"));
    let facl = ok(format!("getfacl -cp {m}/d"));
    assert!(facl.contains("user:nobody:rwx") && facl.contains("default:user:nobody:r-x"), "{facl}");
    // Inherited by a new file (masked by the create mode; no umask).
    ok(format!("cd {m} && umask 077 && touch d/f && mkdir d/sub"));
    let f = ok(format!("getfacl -cp {m}/d/f"));
    assert!(f.contains("user:nobody:r-x") && f.contains("mask::r--") && f.contains("other::---"), "{f}");
    let sub = ok(format!("getfacl -cp {m}/d/sub"));
    assert!(sub.contains("default:user:nobody:r-x"), "{sub}");
    // Enforced by the kernel: nobody may create in d (named entry), read f
    // (mask r--) and not after chmod 600 moves the mask.
    ok(format!("su nobody -s /bin/sh -c 'echo hi > {m}/d/by-nobody && cat {m}/d/f'"));
    ok(format!("chmod 600 {m}/d/f"));
    assert!(ok(format!("getfacl -cp {m}/d/f")).contains("mask::---"));
    assert!(!sh(&format!("su nobody -s /bin/sh -c 'cat {m}/d/f'")).status.success(), "the mask did not deny");
    // Without a default ACL the umask applies.
    ok(format!("cd {m} && umask 027 && touch plain"));
    assert_eq!(std::fs::metadata(mp.join("plain")).unwrap().mode() & 0o777, 0o640);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");
    // Still there after a remount.
    let pid = mount(&img, &mp, &["-o", "allow_other"], "remount");
    assert!(ok(format!("getfacl -cp {m}/d")).contains("default:user:nobody:r-x"));
    unmount(&mp, pid);
}

/// Standard base64 (setfattr's `0s` form).
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn xattr_values_up_to_64_kib_through_a_mount() {
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("x.img", "64M");
    let (img, mp) = (dir.path().join("x.img"), dir.path().join("mnt"));
    let f = mp.join("f");
    std::fs::write(&f, b"data").unwrap();
    let big: Vec<u8> = (0..65_536u32).map(|i| (i * 7 + i / 256) as u8).collect();
    let set = |name: &str, v: &[u8]| {
        Command::new("setfattr").args(["-n", name, "-v", &format!("0s{}", base64(v)), p(&f)]).output().unwrap()
    };
    let get = |name: &str| Command::new("getfattr").args(["--only-values", "-n", name, p(&f)]).output().unwrap();
    for (name, len) in [("user.big", 65_536), ("user.mid", 5_000), ("user.one", 1), ("trusted.big", 65_536)] {
        let o = set(name, &big[..len]);
        assert!(o.status.success(), "setfattr {name} ({len} bytes): {}", stderr(&o));
        let o = get(name);
        assert!(o.status.success(), "getfattr {name}: {}", stderr(&o));
        assert_eq!(o.stdout.len(), len, "{name}");
        assert!(o.stdout == big[..len], "{name}: the value read back differs");
    }
    // Replacing a 64 KiB value with another one, and the kernel's E2BIG
    // for 64 KiB + 1 (the syscall refuses it before FUSE sees it).
    let mut other = big.clone();
    other.reverse();
    assert!(set("user.big", &other).status.success());
    assert!(get("user.big").stdout == other);
    let mut longer = big.clone();
    longer.push(1);
    let o = set("user.big", &longer);
    assert!(!o.status.success() && stderr(&o).contains("Argument list too long"), "{}", stderr(&o));
    // Size probing and ERANGE, as libc callers do it.
    if Path::new("/usr/bin/python3").exists() {
        let script = format!(
            "import ctypes, os\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             n = libc.getxattr(b'{f}', b'user.big', None, 0)\n\
             buf = ctypes.create_string_buffer(100)\n\
             r = libc.getxattr(b'{f}', b'user.big', buf, 100)\n\
             print(n, r, ctypes.get_errno() == 34)\n\
             print(len(os.listxattr('{f}')))\n",
            f = f.display()
        );
        let o = Command::new("/usr/bin/python3").arg("-c").arg(script).output().unwrap();
        assert_eq!(stdout(&o), "65536 -1 True\n4\n", "{}", stderr(&o));
    }
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");
    let pid = mount(&img, &mp, &[], "remount");
    assert!(get("user.big").stdout == other, "64 KiB value after a remount");
    let o = Command::new("setfattr").args(["-x", "user.big", p(&f)]).output().unwrap();
    assert!(o.status.success(), "setfattr -x: {}", stderr(&o));
    assert!(!get("user.big").status.success());
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");
}

/// `-o cache_mb=4` through a real mount: the inode and dentry caches get
/// their eighth each and stay within it while 20,000 files are created and
/// listed, every name resolves, and `lru_caches=0` keeps every inode the
/// kernel holds (the old behaviour).
#[test]
fn cache_mb_bounds_the_inode_and_dentry_caches_of_a_real_mount() {
    if !can_mount() {
        return;
    }
    let Scratch { dir: _dir, img, mp } = scratch("c.img");
    let o = run(&["mkfs", p(&img), "--size", "512M", "--inode-ratio", "8192", "--quiet"]);
    assert!(o.status.success(), "mkfs failed: {}", stderr(&o));
    for lru in [1, 0] {
        let _g = Guard(mp.clone());
        let pid = mount(&img, &mp, &["-o", &format!("cache_mb=4,lru_caches={lru}")], "mount");
        let d = mp.join(format!("d{lru}"));
        std::fs::create_dir(&d).unwrap();
        for i in 0..20_000 {
            std::fs::write(d.join(format!("f{i}")), b"").unwrap();
        }
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 20_000);
        for i in (0..20_000).step_by(7) {
            assert!(std::fs::metadata(d.join(format!("f{i}"))).unwrap().is_file());
        }
        let c = counters(&mp);
        if lru == 1 {
            assert_eq!(c["icache.budget_bytes"], 512 << 10, "{c:?}");
            assert!(c["icache.bytes"] <= (512 << 10) + 16 * 320, "{c:?}");
            assert!(c["dcache.bytes"] <= 512 << 10, "{c:?}");
            assert!(c["icache.reclaimed"] > 10_000 && c["dcache.reclaimed"] > 0, "{c:?}");
            assert!(c["icache.lookup_refs"] >= 10_000, "the kernel holds the files: {c:?}");
        } else {
            assert_eq!(c["icache.budget_bytes"], 0, "{c:?}");
            assert_eq!(c["dcache.entries"], 0, "{c:?}");
            assert!(c["icache.entries"] >= c["icache.lookup_refs"], "{c:?}");
        }
        unmount(&mp, pid);
        assert_fsck_clean(&img, "fsck");
    }
}

#[test]
fn fuse_over_io_uring_serves_a_real_mount_and_unmounts_cleanly() {
    if !can_mount() {
        return;
    }
    if !Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        eprintln!("SKIPPED: this kernel has no FUSE over io_uring");
        return;
    }
    let (dir, g, pid) = fresh_mount_with("u.img", "256M", &["-o", "io_uring=1"]);
    let (img, mp) = (dir.path().join("u.img"), dir.path().join("mnt"));
    let before = counters(&mp);
    // Small requests, names, directory listings, xattrs, and 1 MiB writes
    // and reads that fill the ring entries' payload buffers.
    let d = mp.join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..300 {
        std::fs::write(d.join(format!("file-with-a-longish-name-{i}")), format!("{i}").repeat(i)).unwrap();
    }
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 300);
    for i in (0..300).step_by(3) {
        let name = d.join(format!("file-with-a-longish-name-{i}"));
        assert_eq!(std::fs::read(&name).unwrap(), format!("{i}").repeat(i).into_bytes());
        std::fs::rename(&name, d.join(format!("r{i}"))).unwrap();
    }
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    write_synced(&mp.join("big"), &big);
    assert!(sh(&format!("setfattr -n user.k -v hello {}", p(&mp.join("big")))).status.success());
    let o = sh(&format!("getfattr --only-values -n user.k {}", p(&mp.join("big"))));
    assert_eq!(stdout(&o), "hello");
    // Payloads of a KiB or more (the 1 MiB writes above, this value) are
    // parsed where the kernel wrote them in the ring entry, and the reply
    // made meanwhile waits aside: both must arrive whole.
    let long = "x".repeat(3000);
    assert!(sh(&format!("setfattr -n user.long -v {long} {}", p(&mp.join("big")))).status.success());
    let o = sh(&format!("getfattr --only-values -n user.long {}", p(&mp.join("big"))));
    assert_eq!(stdout(&o), long);
    let after = counters(&mp);
    let ring = after["fuse.io_uring_requests"] - before.get("fuse.io_uring_requests").copied().unwrap_or(0);
    let all = after["fuse.requests"] - before["fuse.requests"];
    assert!(ring * 10 >= all * 9, "io_uring served {ring} of {all} requests");
    // DESTROY comes through the ring: `cairn umount` must still return with
    // the image released and clean.
    cairn_umount(&mp);
    wait_gone(pid, Duration::from_secs(30), "after cairn umount");
    drop(g);
    assert_fsck_clean(&img, "after an io_uring mount");
    // The same data through /dev/fuse.
    let _g = Guard(mp.clone());
    let pid = mount(&img, &mp, &["-o", "io_uring=0"], "mount");
    assert_eq!(std::fs::read(mp.join("big")).unwrap(), big);
    assert_eq!(std::fs::read(d.join("r3")).unwrap(), b"333");
    let o = sh(&format!("getfattr --only-values -n user.long {}", p(&mp.join("big"))));
    assert_eq!(stdout(&o), long);
    assert_eq!(counters(&mp)["fuse.io_uring_requests"], 0);
    // A WRITE read from /dev/fuse has its data on a page boundary: with
    // direct data on, it reaches the image with no bounce copy.
    let before = counters(&mp);
    write_synced(&mp.join("big2"), &big);
    assert_eq!(std::fs::read(mp.join("big2")).unwrap(), big);
    let after = counters(&mp);
    if after["dev.direct_data"] == 1 {
        assert!(after["dev.direct_write_bytes"] - before["dev.direct_write_bytes"] >= big.len() as u64);
        assert_eq!(after["dev.bounced_bytes"], before["dev.bounced_bytes"], "WRITE data bounced");
    }
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the /dev/fuse mount");
}

/// `-o read_move=1` (issue #53, the default): a queue thread that takes a
/// large READ moves to the next CPU when that CPU's queue has seen none
/// lately, and back for anything else. The bytes must come back whole and
/// in place, cold, sequentially (the readahead's 1 MiB READs) and from
/// three readers at once, with small requests in between.
#[test]
fn read_move_returns_cold_reads_whole() {
    if !can_mount() {
        return;
    }
    if !Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        eprintln!("SKIPPED: this kernel has no FUSE over io_uring");
        return;
    }
    let opts = ["-o", "io_uring=1,read_move=1"];
    let (dir, _g, pid) = fresh_mount_with("rm.img", "256M", &opts);
    let (img, mp) = (dir.path().join("rm.img"), dir.path().join("mnt"));
    let files: Vec<Vec<u8>> =
        (0..4u32).map(|f| (0..8u32 << 20).map(|i| (i * 13 + i / 4096 + f * 101) as u8).collect()).collect();
    for (f, data) in files.iter().enumerate() {
        write_synced(&mp.join(format!("f{f}")), data);
    }
    unmount(&mp, pid);
    let pid = mount(&img, &mp, &opts, "mount again, cold");
    assert!(std::fs::read(mp.join("f0")).unwrap() == files[0], "a cold sequential read differs");
    // Small requests after the large READs: served at home again.
    for i in 0..50 {
        std::fs::write(mp.join(format!("s{i}")), format!("{i}")).unwrap();
        assert_eq!(std::fs::read_to_string(mp.join(format!("s{i}"))).unwrap(), format!("{i}"));
    }
    let readers: Vec<_> = (1..4)
        .map(|f| {
            let path = mp.join(format!("f{f}"));
            std::thread::spawn(move || std::fs::read(path).unwrap())
        })
        .collect();
    for (f, r) in (1..4).zip(readers) {
        assert!(r.join().unwrap() == files[f], "file {f}, read beside two others, differs");
    }
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after a read_move mount");
}

#[test]
fn completions_and_man_pages_cover_every_command() {
    let o = run(&["completions", "bash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let script = stdout(&o);
    for word in ["_cairn", "mkfs", "mount", "fsck", "trim", "--repair"] {
        assert!(script.contains(word), "bash completion lacks {word}");
    }
    assert!(run(&["completions", "zsh"]).status.success());
    assert_eq!(run(&["completions", "tcsh"]).status.code(), Some(2), "an unknown shell is a usage error");
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man1");
    let o = run(&["manpages", p(&man)]);
    assert!(o.status.success(), "{}", stderr(&o));
    for page in ["cairn", "cairn-mkfs", "cairn-mount", "cairn-fsck", "cairn-stats", "cairn-trim", "cairn-umount"] {
        let text = std::fs::read_to_string(man.join(format!("{page}.1"))).unwrap_or_default();
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}.1 is not a man page: {text:.80}");
        assert!(text.contains(page), "{page}.1 does not name itself");
    }
    assert!(!man.join("cairn-debug.1").exists(), "hidden test tools get no page");
}

/// `umount MNT` and at once `cairn mount IMG MNT`, as scripts and systemd
/// do: umount(8) returns before the daemon has finished writing, and the
/// new mount waits for it (saying so) rather than failing with "already in
/// use" (issue 51: 10 of 20 tries after a 20 MiB write).
#[test]
fn a_mount_right_after_umount_waits_for_the_old_daemon() {
    if !can_mount() {
        return;
    }
    let (dir, g, mut pid) = fresh_mount("again.img", "256M");
    let (img, mp) = (dir.path().join("again.img"), g.0.clone());
    let data = vec![7u8; 20 << 20];
    for round in 0..5 {
        std::fs::write(mp.join(format!("f{round}")), &data).unwrap();
        let o = std::process::Command::new("umount").arg(&mp).output().unwrap();
        assert!(o.status.success(), "umount: {}", stderr(&o));
        mount(&img, &mp, &[], "round {round}: mount right after umount");
        wait_gone(pid, Duration::from_secs(60), "after the new mount");
        pid = daemon_pid(&mp);
        assert_eq!(std::fs::read(mp.join(format!("f{round}"))).unwrap().len(), data.len());
    }
    // A mounted image is still refused at once, naming where.
    let mp2 = dir.path().join("mnt2");
    std::fs::create_dir(&mp2).unwrap();
    let t0 = std::time::Instant::now();
    let o = run(&["mount", p(&img), p(&mp2)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already in use: mounted at"), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(10), "a mounted image made the mount wait");
    unmount(&mp, pid);
}

/// An ordinary user whom /dev/fuse is not open to is told why and what to
/// do (issue 51: fusermount3's "failed to open /dev/fuse: Permission
/// denied" gave no hint). Where /dev/fuse is open to everyone there is
/// nothing to see.
#[test]
fn an_ordinary_user_without_dev_fuse_is_told_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    if !can_mount() {
        return;
    }
    let mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o777;
    if mode & 0o006 == 0o006 {
        eprintln!("skipped: /dev/fuse is open to every user here (mode {mode:04o})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (img, mp) = (dir.path().join("u.img"), dir.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    mkfs(&img, "64M");
    std::os::unix::fs::chown(&img, Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&mp, Some(65534), Some(65534)).unwrap();
    let bin = env!("CARGO_BIN_EXE_cairn");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", bin, "mount", p(&img), p(&mp)])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("/dev/fuse is not open to you") && err.contains("chmod 0666 /dev/fuse"), "{err}");
    assert!(!is_mounted(&mp));
}
