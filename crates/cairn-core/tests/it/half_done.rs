//! An operation that fails half-way leaves nothing half-done.
//!
//! Each operation below runs once on a prepared image to count the block
//! and inode allocations it makes; then, from the same image, once per
//! allocation with that one failing (ENOSPC, as a full disk fails it at
//! that point: the `testing` feature's `faults`). After each run the tree as
//! the engine shows it — names, types, modes, owners, sizes, link counts,
//! contents, xattrs, symlink targets — is either exactly as before (the
//! operation said ENOSPC) or exactly as after the run that did not fail
//! (the operation succeeded anyway, say by retrying); then the image is
//! unmounted and fsck must find it clean: no leaked block or inode, no
//! entry without its inode, no count off.

use crate::common::*;
use cairn_core::dev::MemDevice;
use cairn_core::{Ctx, Fs};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Everything about the tree that an operation may change, times and
/// inode numbers aside.
fn describe(fs: &Fs) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(1u64, String::from("/"))];
    while let Some((dir, path)) = todo.pop() {
        let mut entries = Vec::new();
        fs.readdir(dir, 0, &mut |e| {
            entries.push((e.ino, e.name.clone()));
            true
        })
        .unwrap();
        for (ino, name) in entries {
            if name == b"." || name == b".." {
                continue;
            }
            let p = format!("{path}{}", String::from_utf8_lossy(&name));
            let a = fs.inodes().getattr(ino).unwrap();
            let mut d = format!("mode {:o} uid {} gid {} size {} nlink {}", a.mode, a.uid, a.gid, a.size, a.nlink);
            let names = fs.listxattr(ino).unwrap();
            for n in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
                let v = fs.getxattr(ino, n).unwrap();
                d += &format!(" xattr {}={}", String::from_utf8_lossy(n), crc32c::crc32c(&v));
            }
            match a.mode & libc::S_IFMT {
                libc::S_IFDIR => todo.push((ino, format!("{p}/"))),
                libc::S_IFREG => {
                    d += &format!(" data {}", crc32c::crc32c(&fs.files().read(ino, 0, a.size as u32).unwrap()))
                }
                libc::S_IFLNK => d += &format!(" target {}", String::from_utf8_lossy(&fs.readlink(ino).unwrap())),
                _ => {}
            }
            out.insert(p, d);
        }
    }
    out
}

/// The image every operation starts from.
fn base_image() -> Vec<u8> {
    let (dev, fs) = mounted_image(64);
    let root = Ctx::root();
    let u = u32::MAX;
    let d = fs.names().mkdir(&root, 1, b"acl", 0o777).unwrap().ino;
    let dfl = acl(&[(1, 7, u), (2, 7, 1000), (4, 5, u), (0x10, 7, u), (0x20, 5, u)]);
    fs.setxattr(d, b"system.posix_acl_default", &dfl, 0).unwrap();
    let big = fs.names().mkdir(&root, 1, b"big", 0o755).unwrap().ino;
    for i in 0..300 {
        fs.names()
            .mknod(&root, big, format!("entry-with-a-longish-name-{i:04}").as_bytes(), libc::S_IFREG | 0o644, 0)
            .unwrap();
    }
    let f = fs.names().mknod(&root, 1, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(f, 0, &vec![3u8; 100 << 10]).unwrap();
    for k in 0..3 {
        fs.setxattr(f, format!("user.k{k}").as_bytes(), &[k as u8; 200], 0).unwrap();
    }
    let g = fs.names().mknod(&root, 1, b"g", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(g, 0, b"g's data").unwrap();
    fs.setxattr(g, b"user.g", b"value", 0).unwrap();
    // Every other 4 KiB block of 1 MiB: an extent tree of 128 extents.
    let frag = fs.names().mknod(&root, 1, b"frag", libc::S_IFREG | 0o644, 0).unwrap().ino;
    for i in (0..256u64).step_by(2) {
        fs.files().write(frag, i * 4096, &[i as u8; 4096]).unwrap();
    }
    // 32 unwritten extents of 16 blocks, 16 blocks apart: a tree.
    let unw = fs.names().mknod(&root, 1, b"unw", libc::S_IFREG | 0o644, 0).unwrap().ino;
    for i in 0..32u64 {
        fs.files().fallocate(unw, i * 32 * 4096, 16 * 4096, 0).unwrap();
    }
    fs.unmount().unwrap();
    dev.snapshot()
}

type Op = fn(&Fs) -> cairn_core::Result<()>;

fn ino(fs: &Fs, path: &str) -> u64 {
    let mut i = 1;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        i = fs.lookup(i, part.as_bytes()).unwrap().ino;
    }
    i
}

fn ops() -> Vec<(&'static str, Op)> {
    vec![
        ("create inheriting a default ACL", |fs| {
            fs.names().mknod(&Ctx::root(), ino(fs, "/acl"), b"new", libc::S_IFREG | 0o666, 0).map(|_| ())
        }),
        ("mkdir inheriting a default ACL", |fs| {
            fs.names().mkdir(&Ctx::root(), ino(fs, "/acl"), b"sub", 0o777).map(|_| ())
        }),
        ("mkdir in a large directory", |fs| {
            fs.names().mkdir(&Ctx::root(), ino(fs, "/big"), b"newdir", 0o755).map(|_| ())
        }),
        ("symlink with a long target", |fs| {
            fs.names().symlink(&Ctx::root(), ino(fs, "/big"), b"longlink", &[b'x'; 600]).map(|_| ())
        }),
        ("setxattr of a 10 KiB value", |fs| fs.setxattr(ino(fs, "/f"), b"user.big", &[7u8; 10 << 10], 0)),
        ("link into a large directory", |fs| fs.names().link(ino(fs, "/f"), ino(fs, "/big"), b"hardlink").map(|_| ())),
        ("rename across directories", |fs| {
            fs.names().rename(ino(fs, "/big"), b"entry-with-a-longish-name-0007", ino(fs, "/acl"), b"moved", 0)
        }),
        ("rename over a file with xattrs", |fs| fs.names().rename(1, b"g", 1, b"f", 0)),
        ("unlink of a file with xattrs from a large directory", |fs| {
            fs.names().rename(1, b"g", ino(fs, "/big"), b"g", 0)?;
            fs.names().unlink(ino(fs, "/big"), b"g")
        }),
        ("unlink of a file with an extent tree", |fs| fs.names().unlink(1, b"frag")),
        ("truncate of a fragmented file to the middle of its tree", |fs| {
            let set = cairn_core::SetAttr { size: Some(300 << 10), ..Default::default() };
            fs.files().setattr(&Ctx::root(), ino(fs, "/frag"), &set).map(|_| ())
        }),
        ("truncate that splits an unwritten extent", |fs| {
            let set = cairn_core::SetAttr { size: Some((32 * 7 + 5) * 4096), ..Default::default() };
            fs.files().setattr(&Ctx::root(), ino(fs, "/unw"), &set).map(|_| ())
        }),
        ("fallocate over a fragmented file", |fs| fs.files().fallocate(ino(fs, "/frag"), 0, 2 << 20, 0)),
        ("punch a hole in a contiguous file", |fs| {
            fs.files().fallocate(ino(fs, "/f"), 8192, 4096, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
        }),
        // One block, so that it cannot be a short write (which would be a
        // success that changed part of the range).
        ("write into a hole of a fragmented file", |fs| {
            fs.files().write(ino(fs, "/frag"), 4096, &[9u8; 4096]).map(|_| ())
        }),
        // Splits an unwritten extent in three: its tail under a new key,
        // the written block under another.
        ("write into the middle of an unwritten extent", |fs| {
            fs.files().write(ino(fs, "/unw"), (32 * 5 + 7) * 4096, &[8u8; 4096]).map(|_| ())
        }),
    ]
}

#[test]
fn every_operation_that_fails_at_any_allocation_leaves_nothing_half_done() {
    let base = base_image();
    let mut failures_checked = 0;
    for (name, op) in ops() {
        // The run that does not fail: how many allocations, and the result.
        let dev = Arc::new(MemDevice::from_bytes(base.clone()));
        let fs = mount(&dev);
        let before = describe(&fs);
        let n0 = fs.allocations();
        op(&fs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let allocations = fs.allocations() - n0;
        let done = describe(&fs);
        assert_ne!(before, done, "{name} changed nothing");
        // (An operation that allocates nothing here, say a link into a leaf
        // with room, is still checked: done once, fsck clean.)
        unmount_clean(&fs, dev.as_ref(), name);

        for nth in 1..=allocations {
            let dev = Arc::new(MemDevice::from_bytes(base.clone()));
            let fs = mount(&dev);
            fs.fail_allocation(nth);
            let r = op(&fs);
            fs.fail_allocation(0);
            let now = describe(&fs);
            match r {
                Ok(()) => assert_eq!(now, done, "{name}, allocation {nth} failing: succeeded with another result"),
                Err(e) => {
                    assert_eq!(e.errno(), libc::ENOSPC, "{name}, allocation {nth} failing: {e}");
                    for (path, d) in &before {
                        assert_eq!(now.get(path), Some(d), "{name}, allocation {nth} failing: {path} changed");
                    }
                    assert_eq!(now, before, "{name}, allocation {nth} failing: something was added");
                    failures_checked += 1;
                }
            }
            fs.unmount().unwrap_or_else(|e| panic!("{name}, allocation {nth} failing: unmount: {e}"));
            fsck_clean_mem(dev.as_ref(), &format!("{name}, allocation {nth} failing"));
        }
    }
    assert!(failures_checked >= 11, "only {failures_checked} failed runs were checked");
}
