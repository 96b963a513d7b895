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
    let mount = File::open(&mp).unwrap();

    drop_caches();
    let lookups = counters(&mp).get("fuse.lookup.requests").copied().unwrap_or(0);
    for (name, h, ino) in &handles {
        let flags =
            if name.ends_with('f') || *name == "g" { libc::O_RDONLY } else { libc::O_RDONLY | libc::O_DIRECTORY };
        let f = open_by_handle(&mount, h, flags).unwrap_or_else(|e| panic!("open_by_handle_at {name:?}: {e}"));
        assert_eq!(f.metadata().unwrap().ino(), *ino, "{name:?}");
    }
    let mut s = String::new();
    open_by_handle(&mount, &handles[0].1, libc::O_RDONLY).unwrap().read_to_string(&mut s).unwrap();
    assert_eq!(s, "inside e");
    let after = counters(&mp).get("fuse.lookup.requests").copied().unwrap_or(0);
    assert!(after > lookups, "the kernel never forgot the inodes: the test proves nothing");

    // The file goes: its handle is stale, once the kernel forgot it too.
    std::fs::remove_file(mp.join("g")).unwrap();
    drop_caches();
    let e = open_by_handle(&mount, &handles[3].1, libc::O_RDONLY).expect_err("a removed file's handle opened");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    // The others still open.
    drop_caches();
    assert!(open_by_handle(&mount, &handles[1].1, libc::O_RDONLY | libc::O_DIRECTORY).is_ok());
    drop(mount);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck");

    // generic/477: handles outlive a cycle mount (same numbers, same
    // generations on disk).
    let o = run(&["mount", p(&img), p(&mp)]);
    assert!(o.status.success(), "mount again: {}", stderr(&o));
    let pid = daemon_pid(&mp);
    let mount = File::open(&mp).unwrap();
    for (name, h, ino) in handles.iter().filter(|(n, _, _)| *n != "g") {
        let flags = if name.ends_with('f') { libc::O_RDONLY } else { libc::O_RDONLY | libc::O_DIRECTORY };
        let f = open_by_handle(&mount, h, flags).unwrap_or_else(|e| panic!("after a cycle mount, {name:?}: {e}"));
        assert_eq!(f.metadata().unwrap().ino(), *ino, "{name:?}");
    }
    drop(mount);
    unmount(&mp, pid);
}
