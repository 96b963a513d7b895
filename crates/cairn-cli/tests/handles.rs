//! File handles through a real mount (`name_to_handle_at`,
//! `open_by_handle_at`), as xfstests' exportfs tests (generic/426, 467,
//! 477) use them: a handle taken while the kernel knows the inode still
//! opens after the kernel has dropped its caches and forgotten it (it then
//! asks cairn with a LOOKUP of `.` on the handle's inode number, and of
//! `..` to reconnect a directory), and one whose file is gone is stale.

mod common;

use common::*;
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `struct file_handle` with room for any handle.
#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    f_handle: [u8; 128],
}

fn name_to_handle(path: &Path) -> Handle {
    let mut h = Handle { bytes: 128, kind: 0, f_handle: [0; 128] };
    let mut mount_id: libc::c_int = 0;
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string, a handle buffer of the size it says, an int.
    #[allow(unsafe_code)]
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut h as *mut Handle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    assert_eq!(r, 0, "name_to_handle_at {}: {}", path.display(), std::io::Error::last_os_error());
    h
}

fn open_by_handle(mount: &File, h: &Handle, flags: i32) -> std::io::Result<File> {
    // SAFETY: an open descriptor, a handle filled by name_to_handle_at.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::syscall(libc::SYS_open_by_handle_at, mount.as_raw_fd(), h as *const Handle, flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us and owned by nobody else.
    #[allow(unsafe_code)]
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// Opens the file behind `h` (read-only) and reads it whole.
fn read_by_handle(mount: &File, h: &Handle) -> std::io::Result<String> {
    let mut s = String::new();
    open_by_handle(mount, h, libc::O_RDONLY)?.read_to_string(&mut s)?;
    Ok(s)
}

/// The LOOKUP requests the mount at `mp` has had so far.
fn lookups(mp: &Path) -> u64 {
    counters(mp).get("fuse.lookup.requests").copied().unwrap_or(0)
}

/// Makes the kernel forget every inode nobody holds (FUSE FORGETs them).
fn drop_caches() {
    for _ in 0..2 {
        std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    }
}

#[test]
fn handles_open_after_the_kernel_forgot_the_inode_and_go_stale_with_the_file() {
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("h.img", "64M");
    let (img, mp) = (dir.path().join("h.img"), dir.path().join("mnt"));
    std::fs::create_dir_all(mp.join("d/e")).unwrap();
    std::fs::write(mp.join("d/e/f"), b"inside e").unwrap();
    std::fs::write(mp.join("g"), b"gone soon").unwrap();
    std::os::unix::fs::symlink("d/e/f", mp.join("s")).unwrap();
    let names = ["d/e/f", "d/e", "d", "g", ""];
    let handles: Vec<(&str, Handle, u64)> = names
        .iter()
        .map(|n| {
            let p = mp.join(n);
            (*n, name_to_handle(&p), std::fs::metadata(&p).unwrap().ino())
        })
        .collect();
    let root = File::open(&mp).unwrap();

    drop_caches();
    let before = lookups(&mp);
    for (name, h, ino) in &handles {
        let flags =
            if name.ends_with('f') || *name == "g" { libc::O_RDONLY } else { libc::O_RDONLY | libc::O_DIRECTORY };
        let f = open_by_handle(&root, h, flags).unwrap_or_else(|e| panic!("open_by_handle_at {name:?}: {e}"));
        assert_eq!(f.metadata().unwrap().ino(), *ino, "{name:?}");
    }
    assert_eq!(read_by_handle(&root, &handles[0].1).unwrap(), "inside e");
    assert!(lookups(&mp) > before, "the kernel never forgot the inodes: the test proves nothing");

    // The file goes: its handle is stale, once the kernel forgot it too.
    std::fs::remove_file(mp.join("g")).unwrap();
    drop_caches();
    let e = open_by_handle(&root, &handles[3].1, libc::O_RDONLY).expect_err("a removed file's handle opened");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    // The others still open.
    drop_caches();
    assert!(open_by_handle(&root, &handles[1].1, libc::O_RDONLY | libc::O_DIRECTORY).is_ok());
    drop(root);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");

    // generic/477: handles outlive a cycle mount (same numbers, same
    // generations on disk).
    let pid = mount(&img, &mp, &[], "mount again");
    let root = File::open(&mp).unwrap();
    for (name, h, ino) in handles.iter().filter(|(n, _, _)| *n != "g") {
        let flags = if name.ends_with('f') { libc::O_RDONLY } else { libc::O_RDONLY | libc::O_DIRECTORY };
        let f = open_by_handle(&root, h, flags).unwrap_or_else(|e| panic!("after a cycle mount, {name:?}: {e}"));
        assert_eq!(f.metadata().unwrap().ino(), *ino, "{name:?}");
    }
    drop(root);
    unmount(&mp, pid);
}

/// generic/467's worry: a handle must never open another file. The file
/// goes, and its inode NUMBER is taken by a new file (on a small image the
/// "next inode number" counter wraps to the freed number): the old handle
/// is stale, whether the kernel still holds the new inode (it compares the
/// generations itself) or has forgotten it (cairn answers the LOOKUP of `.`
/// with the new generation, and the kernel refuses it).
#[test]
fn a_handle_goes_stale_when_its_inode_number_is_reused() {
    if !can_mount() {
        return;
    }
    let Scratch { dir: _dir, img, mp } = scratch("r.img");
    // 128 inodes: the counter wraps after a hundred-odd creates. (Not
    // smaller: under 32 MiB free the space guard refuses buffered writes.)
    let o = run(&["mkfs", p(&img), "--size", "128M", "--inode-ratio", "1M", "--quiet"]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    let _g = Guard(mp.clone());
    let pid = mount(&img, &mp, &[], "mount");

    std::fs::create_dir(mp.join("fill")).unwrap();
    std::fs::write(mp.join("old"), b"the old file").unwrap();
    let old_ino = std::fs::metadata(mp.join("old")).unwrap().ino();
    let h = name_to_handle(&mp.join("old"));
    std::fs::remove_file(mp.join("old")).unwrap();
    drop_caches();
    // The unlinked inode is freed once the kernel forgot it (by the
    // reaper, maybe a moment later): create files until one gets the old
    // number. Every other number is taken first (freed numbers come back
    // only when the counter wraps), so the image runs out of inodes if the
    // old one is not free yet: wait for it then.
    let mut new = None;
    let mut full = 0;
    for i in 0..1024 {
        let path = mp.join(format!("fill/f{i}"));
        match std::fs::write(&path, format!("new file {i}")) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && full < 100 => {
                full += 1;
                drop_caches();
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
            Err(e) => panic!("create {}: {e}", path.display()),
        }
        if std::fs::metadata(&path).unwrap().ino() == old_ino {
            new = Some(path);
            break;
        }
    }
    let new = new.unwrap_or_else(|| panic!("inode number {old_ino} was never reused"));
    let want = std::fs::read_to_string(&new).unwrap();
    let root = File::open(&mp).unwrap();

    // The kernel knows the new inode (it was just created and read).
    let held = File::open(&new).unwrap();
    let e = read_by_handle(&root, &h)
        .expect_err(&format!("the old handle opened the new file {} ({want:?})", new.display()));
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "new inode cached: {e}");
    drop(held);

    // The kernel forgot it: cairn answers the LOOKUP of `.` from disk.
    drop_caches();
    let e = read_by_handle(&root, &h).expect_err("the old handle opened the new file after drop_caches");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "new inode forgotten: {e}");
    // The new file's own handle opens it.
    let hn = name_to_handle(&new);
    drop_caches();
    assert_eq!(read_by_handle(&root, &hn).unwrap(), want);
    drop(root);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");

    // And after a remount (a new generation counter in the daemon).
    let pid = mount(&img, &mp, &[], "mount again");
    let root = File::open(&mp).unwrap();
    let e = open_by_handle(&root, &h, libc::O_RDONLY).expect_err("the old handle opened the new file after a remount");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "after a remount: {e}");
    assert_eq!(read_by_handle(&root, &hn).unwrap(), want);
    drop(root);
    unmount(&mp, pid);
}

/// A directory's handle opened after the kernel forgot the whole chain
/// comes back connected: the kernel walks up with LOOKUPs of `..` and
/// finds each name by READDIR of the parent (`reconnect_path`), so the
/// descriptor's path is the real one. An NFS server needs this for every
/// directory handle a client holds.
#[test]
fn a_deep_directory_handle_reconnects_up_its_parent_chain() {
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("d.img", "64M");
    let (img, mp) = (dir.path().join("d.img"), dir.path().join("mnt"));
    let deep = mp.join("a/b/c/d");
    std::fs::create_dir_all(&deep).unwrap();
    // Siblings on every level, so finding the name takes a real search.
    for lvl in ["", "a", "a/b", "a/b/c", "a/b/c/d"] {
        for i in 0..40 {
            std::fs::write(mp.join(lvl).join(format!("sib{i}")), b"x").unwrap();
        }
        std::fs::create_dir(mp.join(lvl).join("sibdir")).unwrap();
    }
    let mut hs: Vec<(String, Handle)> =
        ["a/b/c/d", "a/b/c", "a/b/c/d/sibdir"].iter().map(|n| (n.to_string(), name_to_handle(&mp.join(n)))).collect();
    let root = File::open(&mp).unwrap();
    let mp_real = std::fs::canonicalize(&mp).unwrap();
    for round in 0..2 {
        let before = lookups(&mp);
        drop_caches();
        for (name, h) in &hs {
            let f = open_by_handle(&root, h, libc::O_RDONLY | libc::O_DIRECTORY)
                .unwrap_or_else(|e| panic!("open_by_handle_at {name}: {e}"));
            let path = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
            assert_eq!(path, mp_real.join(name), "round {round}: {name} reconnected to the wrong path");
            let listed: Vec<_> = std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().file_name()).collect();
            // 40 files and `sibdir` (and `d` in `c`); `sibdir` is empty.
            let want = if name.ends_with("sibdir") {
                0
            } else if name.ends_with('d') {
                41
            } else {
                42
            };
            assert_eq!(listed.len(), want, "{name}: {listed:?}");
            drop(f);
            drop_caches();
        }
        assert!(lookups(&mp) > before, "the kernel never forgot the inodes: the test proves nothing");
        // Round two: after a rename up the chain, the handle follows the
        // directory to its new path.
        if round == 0 {
            std::fs::rename(mp.join("a/b"), mp.join("a/moved")).unwrap();
            for (name, _) in &mut hs {
                *name = name.replacen("a/b/", "a/moved/", 1);
            }
        }
    }
    drop(root);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");
}
