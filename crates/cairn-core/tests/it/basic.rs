//! Basic behaviour through the engine API, across unmount and remount.

use crate::common::*;
use cairn_core::{Ctx, SetAttr, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, RENAME_EXCHANGE, RENAME_NOREPLACE};

const ROOT: u64 = 1;

fn names(fs: &cairn_core::Fs, dir: u64) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        v.push(String::from_utf8_lossy(&e.name).into_owned());
        true
    })
    .unwrap();
    v
}

#[test]
fn files_dirs_links_survive_remount() {
    let dev = new_image(64);
    let c = Ctx::root();
    {
        let fs = mount(&dev);
        let d = fs.names().mkdir(&c, ROOT, b"dir", 0o755).unwrap();
        let f = fs.names().mknod(&c, d.ino, b"file", libc::S_IFREG | 0o644, 0).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(fs.files().write(f.ino, 0, &data).unwrap() as usize, data.len());
        assert_eq!(fs.files().write(f.ino, 10 << 20, b"tail").unwrap(), 4);
        fs.names().symlink(&c, ROOT, b"short", b"dir/file").unwrap();
        let long = vec![b'x'; 3000];
        fs.names().symlink(&c, ROOT, b"long", &long).unwrap();
        fs.names().link(f.ino, ROOT, b"hard").unwrap();
        fs.setxattr(f.ino, b"user.k", b"v1", 0).unwrap();
        fs.unmount().unwrap();
    }
    let fs = mount(&dev);
    let d = fs.lookup(ROOT, b"dir").unwrap();
    let f = fs.lookup(d.ino, b"file").unwrap();
    assert_eq!(f.nlink, 2);
    assert_eq!(f.size, (10 << 20) + 4);
    let back = fs.files().read(f.ino, 0, 300_000).unwrap();
    assert!(back.iter().enumerate().all(|(i, b)| *b == (i as u32 * 7 % 251) as u8));
    assert_eq!(fs.files().read(f.ino, 5 << 20, 10).unwrap(), vec![0u8; 10], "hole must read as zeros");
    assert_eq!(fs.files().read(f.ino, 10 << 20, 100).unwrap(), b"tail");
    let s = fs.lookup(ROOT, b"short").unwrap();
    assert_eq!(fs.readlink(s.ino).unwrap(), b"dir/file");
    let l = fs.lookup(ROOT, b"long").unwrap();
    assert_eq!(fs.readlink(l.ino).unwrap(), vec![b'x'; 3000]);
    assert_eq!(fs.getxattr(f.ino, b"user.k").unwrap(), b"v1");
    let mut n = names(&fs, ROOT);
    n.sort();
    assert_eq!(n, [".", "..", "dir", "hard", "long", "short"]);
    fs.unmount().unwrap();
}

#[test]
fn unlink_rmdir_rename_semantics() {
    let dev = new_image(32);
    let c = Ctx::root();
    let fs = mount(&dev);
    let a = fs.names().mkdir(&c, ROOT, b"a", 0o755).unwrap();
    let b = fs.names().mkdir(&c, ROOT, b"b", 0o755).unwrap();
    fs.names().mknod(&c, a.ino, b"x", libc::S_IFREG | 0o600, 0).unwrap();
    fs.names().mknod(&c, b.ino, b"y", libc::S_IFREG | 0o600, 0).unwrap();
    assert_eq!(fs.names().rmdir(ROOT, b"a").unwrap_err().errno(), libc::ENOTEMPTY);
    assert_eq!(fs.names().unlink(ROOT, b"a").unwrap_err().errno(), libc::EISDIR);
    assert_eq!(fs.names().rename(a.ino, b"x", b.ino, b"y", RENAME_NOREPLACE).unwrap_err().errno(), libc::EEXIST);
    fs.names().rename(a.ino, b"x", b.ino, b"y", RENAME_EXCHANGE).unwrap();
    fs.names().rename(b.ino, b"y", ROOT, b"z", 0).unwrap();
    assert_eq!(fs.names().rename(ROOT, b"a", a.ino, b"sub", 0).unwrap_err().errno(), libc::EINVAL);
    fs.names().rename(ROOT, b"a", b.ino, b"a2", 0).unwrap();
    assert_eq!(fs.inodes().getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.inodes().getattr(ROOT).unwrap().nlink, 3);
    assert_eq!(fs.lookup(a.ino, b"..").unwrap().ino, b.ino);
    fs.names().unlink(a.ino, b"x").unwrap();
    fs.names().unlink(ROOT, b"z").unwrap();
    fs.names().rmdir(b.ino, b"a2").unwrap();
    assert_eq!(fs.lookup(b.ino, b"a2").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(fs.lookup(ROOT, &[b'n'; 256]).unwrap_err().errno(), libc::ENAMETOOLONG);
    fs.unmount().unwrap();
}

#[test]
fn truncate_fallocate_seek() {
    let dev = new_image(32);
    let c = Ctx::root();
    let fs = mount(&dev);
    let f = fs.names().mknod(&c, ROOT, b"f", libc::S_IFREG | 0o644, 0).unwrap();
    fs.files().write(f.ino, 0, &vec![1u8; 20000]).unwrap();
    fs.files().setattr(&c, f.ino, &SetAttr { size: Some(5000), ..Default::default() }).unwrap();
    fs.files().setattr(&c, f.ino, &SetAttr { size: Some(9000), ..Default::default() }).unwrap();
    let r = fs.files().read(f.ino, 0, 9000).unwrap();
    assert!(r[..5000].iter().all(|b| *b == 1) && r[5000..].iter().all(|b| *b == 0));
    fs.files().fallocate(f.ino, 1 << 20, 1 << 20, FALLOC_FL_KEEP_SIZE).unwrap();
    assert_eq!(fs.inodes().getattr(f.ino).unwrap().size, 9000);
    fs.files().fallocate(f.ino, 0, 8192, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).unwrap();
    assert_eq!(fs.files().read(f.ino, 0, 8192).unwrap(), vec![0u8; 8192]);
    assert_eq!(fs.files().lseek(f.ino, 0, libc::SEEK_DATA).unwrap_err().errno(), libc::ENXIO);
    fs.files().write(f.ino, 8192, &[9u8; 100]).unwrap();
    assert_eq!(fs.files().lseek(f.ino, 0, libc::SEEK_HOLE).unwrap(), 0);
    assert_eq!(fs.files().lseek(f.ino, 0, libc::SEEK_DATA).unwrap(), 8192);
    assert_eq!(fs.files().lseek(f.ino, 8192, libc::SEEK_HOLE).unwrap(), 9000);
    fs.unmount().unwrap();
}

/// `read_into` writes every byte it counts, over a buffer of old bytes:
/// data, a hole and an unwritten extent, clipped at the end of the file.
#[test]
fn read_into_a_dirty_buffer_zeroes_holes_and_unwritten_blocks() {
    let dev = new_image(32);
    let c = Ctx::root();
    let fs = mount(&dev);
    let f = fs.names().mknod(&c, ROOT, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(f, 0, &[3u8; 5000]).unwrap();
    fs.files().write(f, 20000, &[4u8; 100]).unwrap(); // a hole from 8192 to 16384
    fs.files().fallocate(f, 32768, 8192, 0).unwrap(); // unwritten, the new end
    let size = 32768 + 8192;
    for (off, len) in [(0u64, 65536usize), (4000, 20000), (30000, 4096), (40000, 4096), (size, 10)] {
        let mut buf = vec![0xeeu8; len];
        let n = fs.files().read_into(f, off, &mut buf).unwrap();
        let want = fs.files().read(f, off, len as u32).unwrap();
        assert_eq!(n, want.len(), "count at {off}+{len}");
        assert_eq!(&buf[..n], &want[..], "bytes at {off}+{len}");
        assert!(buf[n..].iter().all(|&b| b == 0xee), "bytes past the count at {off}+{len} changed");
    }
    let mut buf = vec![0xeeu8; 65536];
    assert_eq!(fs.files().read_into(f, 0, &mut buf).unwrap(), size as usize);
    assert!(buf[5000..20000].iter().all(|&b| b == 0) && buf[20100..size as usize].iter().all(|&b| b == 0));
    fs.unmount().unwrap();
}

#[test]
fn big_directory_and_many_extents() {
    let dev = new_image(128);
    let c = Ctx::root();
    let fs = mount(&dev);
    let d = fs.names().mkdir(&c, ROOT, b"big", 0o755).unwrap();
    for i in 0..5000 {
        fs.names().mknod(&c, d.ino, format!("file-{i:05}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    }
    let f = fs.names().mknod(&c, ROOT, b"frag", libc::S_IFREG | 0o644, 0).unwrap();
    // Every other block: many extents, forcing an extent tree.
    for i in 0..2000u64 {
        fs.files().write(f.ino, i * 8192, &[i as u8; 10]).unwrap();
    }
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(names(&fs, d.ino).len(), 5002);
    for i in (0..5000).step_by(97) {
        fs.lookup(d.ino, format!("file-{i:05}").as_bytes()).unwrap();
    }
    for i in (0..2000u64).step_by(37) {
        assert_eq!(fs.files().read(f.ino, i * 8192, 10).unwrap(), vec![i as u8; 10]);
    }
    for i in 0..5000 {
        fs.names().unlink(d.ino, format!("file-{i:05}").as_bytes()).unwrap();
    }
    fs.names().rmdir(ROOT, b"big").unwrap();
    fs.unmount().unwrap();
}

/// The nice values of this process's threads named `cairn-backend`.
fn backend_nice_values() -> Vec<i64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
        // "tid (comm) state ppid ...": nice is the 19th field, the 17th after the comm.
        let Some((head, rest)) = stat.rsplit_once(") ") else { continue };
        if head.ends_with("(cairn-backend") {
            out.push(rest.split_whitespace().nth(16).unwrap().parse().unwrap());
        }
    }
    out
}

#[test]
fn the_backend_thread_runs_at_its_nice_value() {
    let (_dev, fs) = mounted_image(16);
    // Every backend of this test process runs at the default (no test mounts
    // with another value) once it has started: a thread has its name before
    // it lowers its priority, so a backend of another test that is just
    // starting may still show 0 for a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let nice = loop {
        let nice = backend_nice_values();
        if (!nice.is_empty() && nice.iter().all(|n| *n == 10)) || std::time::Instant::now() > deadline {
            break nice;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert!(!nice.is_empty(), "no cairn-backend thread");
    assert!(nice.iter().all(|n| *n == 10), "backend nice values {nice:?}");
    fs.unmount().unwrap();
}

/// The superblock at home, as the device holds it now.
fn home_superblock(dev: &cairn_core::dev::MemDevice) -> cairn_format::superblock::Superblock {
    use cairn_core::dev::BlockDevice;
    let mut b = vec![0u8; 4096];
    dev.read_at(&mut b, 0).unwrap();
    cairn_format::superblock::Superblock::decode(&b, dev.size()).unwrap()
}

/// The journal open skips its scan of the whole ring for damage when the
/// superblock says clean; that is sound only if a mount makes "not clean"
/// durable at home before it logs anything else, and only a clean unmount
/// puts "clean" back.
#[test]
fn a_mounted_image_says_not_clean_at_home_until_it_is_unmounted() {
    use cairn_format::superblock::STATE_CLEAN;
    let dev = new_image(64);
    assert_ne!(home_superblock(&dev).state & STATE_CLEAN, 0, "a new image is clean");
    let fs = mount(&dev);
    assert_eq!(home_superblock(&dev).state & STATE_CLEAN, 0, "mounted, before any operation");
    fs.names().mknod(&Ctx::root(), ROOT, b"f", libc::S_IFREG | 0o644, 0).unwrap();
    fs.files().sync_fs().unwrap();
    assert_eq!(home_superblock(&dev).state & STATE_CLEAN, 0, "after a commit");
    fs.unmount().unwrap();
    assert_ne!(home_superblock(&dev).state & STATE_CLEAN, 0, "after unmount");
}

#[test]
fn mkfs_makes_lost_found_and_the_image_still_reads_as_never_mounted() {
    let dev = new_image(64);
    let d: std::sync::Arc<dyn cairn_core::dev::BlockDevice> = dev.clone();
    let ino = cairn_core::mkfs::create_lost_found(d).unwrap();
    let sb = home_superblock(&dev);
    assert_eq!((sb.mount_count, sb.last_mount_time), (0, 0));
    let fs = mount(&dev);
    let attr = fs.lookup(ROOT, b"lost+found").unwrap();
    assert_eq!(attr.ino, ino);
    assert_eq!(attr.mode & 0o7777, 0o700);
    assert_eq!(attr.uid, 0);
    assert_eq!(names(&fs, ino).len(), 2, "only . and ..: {:?}", names(&fs, ino));
    unmount_clean(&fs, dev.as_ref(), "after mkfs made /lost+found");
}

#[test]
fn rename_whiteout_leaves_a_whiteout_owned_by_the_caller_in_one_transaction() {
    use cairn_core::RENAME_WHITEOUT;
    let (dev, fs) = mounted_image(64);
    let root = Ctx::root();
    let user = Ctx { uid: 1000, gid: 1000, ..Ctx::root() };
    let a = fs.names().mknod(&root, ROOT, b"a", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(a, 0, b"moved").unwrap();
    fs.names().mknod(&root, ROOT, b"there", libc::S_IFREG | 0o644, 0).unwrap();
    // Invalid combinations change nothing.
    for bad in [RENAME_WHITEOUT | RENAME_EXCHANGE, RENAME_WHITEOUT | RENAME_NOREPLACE | RENAME_EXCHANGE] {
        let e = fs.names().rename_as(&user, ROOT, b"a", ROOT, b"there", bad).unwrap_err();
        assert!(matches!(e, cairn_core::FsError::Errno(libc::EINVAL)), "{e:?}");
    }
    let e = fs.names().rename_as(&user, ROOT, b"a", ROOT, b"there", RENAME_WHITEOUT | RENAME_NOREPLACE).unwrap_err();
    assert!(matches!(e, cairn_core::FsError::Errno(libc::EEXIST)), "{e:?}");
    let used = fs.statfs().unwrap().files_free;
    assert_eq!(fs.lookup(ROOT, b"a").unwrap().ino, a, "a refused rename left no whiteout");

    fs.names().rename_as(&user, ROOT, b"a", ROOT, b"b", RENAME_WHITEOUT).unwrap();
    assert_eq!(fs.lookup(ROOT, b"b").unwrap().ino, a);
    let w = fs.lookup(ROOT, b"a").unwrap();
    assert_ne!(w.ino, a);
    assert_eq!((w.mode, w.rdev, w.uid, w.gid, w.nlink), (libc::S_IFCHR, 0, 1000, 1000, 1));
    assert_eq!(fs.statfs().unwrap().files_free, used - 1);
    // Over an existing target, which goes.
    fs.names().rename_as(&user, ROOT, b"b", ROOT, b"there", RENAME_WHITEOUT).unwrap();
    assert_eq!(fs.files().read(fs.lookup(ROOT, b"there").unwrap().ino, 0, 10).unwrap(), b"moved");
    assert_eq!(fs.lookup(ROOT, b"b").unwrap().mode, libc::S_IFCHR);
    // A directory, into another directory; its whiteout takes a set-gid
    // parent's group.
    let sg = fs.names().mkdir(&root, ROOT, b"sg", 0o2777).unwrap().ino;
    fs.files().setattr(&root, sg, &SetAttr { gid: Some(50), ..Default::default() }).unwrap();
    fs.files().setattr(&root, sg, &SetAttr { mode: Some(0o2777), ..Default::default() }).unwrap();
    fs.names().mkdir(&user, sg, b"dir", 0o755).unwrap();
    fs.names().rename_as(&user, sg, b"dir", ROOT, b"dir", RENAME_WHITEOUT).unwrap();
    let w = fs.lookup(sg, b"dir").unwrap();
    assert_eq!((w.mode, w.uid, w.gid), (libc::S_IFCHR, 1000, 50));
    assert_eq!(fs.inodes().getattr(sg).unwrap().nlink, 2, "the set-gid directory lost its subdirectory");
    let mut n = names(&fs, ROOT);
    n.sort();
    assert_eq!(n, [".", "..", "a", "b", "dir", "sg", "there"]);
    unmount_clean(&fs, dev.as_ref(), "after whiteout renames");
    let fs = mount(&dev);
    assert_eq!(fs.lookup(sg, b"dir").unwrap().mode, libc::S_IFCHR);
    fs.unmount().unwrap();
}

/// A write's privilege drop (`FileIo::kill_privs`) is skipped while no
/// inode of the mount has a set-id bit or an xattr block: what a chmod, a
/// setxattr, or a listing of a file loaded from disk shows must turn it on.
#[test]
fn kill_privs_sees_set_id_bits_and_capabilities_given_after_the_mount() {
    let dev = new_image(64);
    let fs = mount(&dev);
    let root = Ctx::root();
    let f = fs.names().mknod(&root, ROOT, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let outsider = |_gid: u32| false;
    assert!(!fs.files().kill_privs(f, Some(&outsider)).unwrap(), "nothing to drop");
    fs.files().setattr(&root, f, &SetAttr { mode: Some(0o6755), ..Default::default() }).unwrap();
    assert!(fs.files().kill_privs(f, Some(&outsider)).unwrap(), "a chmod's set-id bits");
    assert_eq!(fs.inodes().getattr(f).unwrap().mode & 0o7777, 0o755);
    let g = fs.names().mknod(&root, ROOT, b"g", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.setxattr(g, b"security.capability", b"caps", 0).unwrap();
    fs.unmount().unwrap();

    // A new mount: the first the engine hears of `g` is a listing's entry
    // (read from its inode-table buffer, not loaded into the cache).
    let fs = mount(&dev);
    let mut seen = false;
    fs.listing_entry(g, true, |a| {
        seen = a.ino == g;
        true
    })
    .unwrap();
    assert!(seen);
    assert!(!fs.files().kill_privs(g, None).unwrap(), "no mode change");
    fs.inodes().forget(g, 1);
    let e = fs.getxattr(g, b"security.capability").unwrap_err();
    assert_eq!(e.errno(), libc::ENODATA, "the capability was dropped");
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after the drops");
}
