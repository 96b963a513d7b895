//! chattr's flags (`inode_flags`): what each refuses and allows, who may
//! set them, inheritance, durability across a remount, and `S`/`D`
//! committing their changes.

use crate::common::*;
use cairn_core::{Ctx, SetAttr, TimeSet};
use cairn_format::inode::*;

fn eperm<T: std::fmt::Debug>(r: cairn_core::Result<T>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.errno(), libc::EPERM, "{what}: {e}"),
        Ok(v) => panic!("{what} was allowed: {v:?}"),
    }
}

fn user(uid: u32) -> Ctx {
    Ctx { uid, gid: uid, ..Ctx::default() }
}

#[test]
fn immutable_refuses_every_change_until_cleared_and_survives_a_remount() {
    let (dev, fs) = mounted_image(64);
    let root = Ctx::root();
    let f = fs.names().mknod(&root, 1, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(f, 0, b"original").unwrap();
    fs.setxattr(f, b"user.k", b"v", 0).unwrap();
    assert_eq!(
        fs.files().set_inode_flags(&root, f, ATTR_IMMUTABLE | ATTR_NODUMP).unwrap().flags,
        ATTR_IMMUTABLE | ATTR_NODUMP
    );
    fs.unmount().unwrap();
    let fs = mount(&dev);
    let f = fs.lookup(1, b"f").unwrap().ino;
    assert_eq!(fs.files().inode_flags(f).unwrap(), ATTR_IMMUTABLE | ATTR_NODUMP, "after a remount");
    eperm(fs.files().write(f, 0, b"X"), "write");
    eperm(fs.files().write(f, 8, b"more"), "append");
    eperm(fs.files().fallocate(f, 0, 1 << 20, 0), "fallocate");
    eperm(fs.files().setattr(&root, f, &SetAttr { size: Some(0), ..Default::default() }), "truncate");
    eperm(fs.files().setattr(&root, f, &SetAttr { mode: Some(0o777), ..Default::default() }), "chmod");
    eperm(fs.files().setattr(&root, f, &SetAttr { uid: Some(5), ..Default::default() }), "chown");
    eperm(fs.files().setattr(&root, f, &SetAttr { mtime: Some(TimeSet::Now), ..Default::default() }), "touch");
    eperm(fs.setxattr(f, b"user.k", b"w", 0), "setxattr");
    eperm(fs.removexattr(f, b"user.k"), "removexattr");
    eperm(fs.names().unlink(1, b"f"), "unlink");
    eperm(fs.names().rename(1, b"f", 1, b"g", 0), "rename");
    eperm(fs.names().link(f, 1, b"h"), "link");
    let other = fs.names().mknod(&root, 1, b"other", libc::S_IFREG | 0o644, 0).unwrap().ino;
    eperm(fs.names().rename(1, b"other", 1, b"f", 0), "rename over it");
    eperm(fs.files().set_inode_flags(&root, f, ATTR_IMMUTABLE), "changing another flag while immutable");
    assert_eq!(fs.files().read(f, 0, 100).unwrap(), b"original");
    assert_eq!(fs.getxattr(f, b"user.k").unwrap(), b"v");
    // Clearing it gives everything back.
    fs.files().set_inode_flags(&root, f, 0).unwrap();
    fs.files().write(f, 0, b"O").unwrap();
    fs.names().rename(1, b"f", 1, b"g", 0).unwrap();
    fs.names().unlink(1, b"g").unwrap();
    fs.inodes().forget(f, 2);
    fs.inodes().forget(other, 1);
    unmount_clean(&fs, dev.as_ref(), "after the immutable file");
}

#[test]
fn an_immutable_directory_keeps_its_entries_and_an_append_only_one_only_grows() {
    let (dev, fs) = mounted_image(64);
    let root = Ctx::root();
    let d = fs.names().mkdir(&root, 1, b"d", 0o755).unwrap().ino;
    let inside = fs.names().mknod(&root, d, b"in", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let out = fs.names().mknod(&root, 1, b"out", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().set_inode_flags(&root, d, ATTR_IMMUTABLE).unwrap();
    eperm(fs.names().mknod(&root, d, b"new", libc::S_IFREG | 0o644, 0), "create in it");
    eperm(fs.names().mkdir(&root, d, b"sub", 0o755), "mkdir in it");
    eperm(fs.names().unlink(d, b"in"), "unlink in it");
    eperm(fs.names().rename(1, b"out", d, b"moved", 0), "rename into it");
    eperm(fs.names().rename(d, b"in", 1, b"moved", 0), "rename out of it");
    eperm(fs.names().link(out, d, b"l"), "link into it");
    fs.files().write(inside, 0, b"files inside still change").unwrap();
    fs.files().set_inode_flags(&root, d, ATTR_APPEND).unwrap();
    fs.names().mknod(&root, d, b"new", libc::S_IFREG | 0o644, 0).unwrap();
    fs.names().rename(1, b"out", d, b"moved", 0).unwrap();
    eperm(fs.names().unlink(d, b"in"), "unlink in an append-only directory");
    eperm(fs.names().rename(d, b"moved", 1, b"back", 0), "rename out of an append-only directory");
    unmount_clean(&fs, dev.as_ref(), "after the directories");
}

#[test]
fn append_only_takes_appends_and_rewrites_of_the_same_bytes_only() {
    let (dev, fs) = mounted_image(64);
    let root = Ctx::root();
    let f = fs.names().mknod(&root, 1, b"log", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(f, 0, b"line 1\n").unwrap();
    fs.files().set_inode_flags(&root, f, ATTR_APPEND).unwrap();
    fs.files().write(f, 7, b"line 2\n").unwrap();
    // What a page-cache write-back of an append sends: the page from its
    // start, old bytes unchanged, then the new ones.
    fs.files().write(f, 0, b"line 1\nline 2\nline 3\n").unwrap();
    eperm(fs.files().write(f, 0, b"LINE 1"), "an overwrite");
    eperm(fs.files().write(f, 14, b"line 3 changed\n"), "an overwrite that also appends");
    eperm(fs.files().setattr(&root, f, &SetAttr { size: Some(3), ..Default::default() }), "truncate");
    eperm(fs.files().setattr(&root, f, &SetAttr { size: Some(100), ..Default::default() }), "extend by truncate");
    eperm(fs.files().setattr(&root, f, &SetAttr { mode: Some(0o600), ..Default::default() }), "chmod");
    eperm(fs.files().fallocate(f, 0, 4096, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE), "punch");
    fs.files().fallocate(f, 0, 1 << 20, libc::FALLOC_FL_KEEP_SIZE).unwrap();
    fs.files()
        .setattr(&root, f, &SetAttr { mtime: Some(TimeSet::Now), atime: Some(TimeSet::Now), ..Default::default() })
        .unwrap();
    let epoch = TimeSet::At(cairn_core::Timestamp { sec: 0, nsec: 0 });
    eperm(
        fs.files().setattr(&root, f, &SetAttr { atime: Some(epoch), mtime: Some(epoch), ..Default::default() }),
        "utimes",
    );
    eperm(fs.names().unlink(1, b"log"), "unlink");
    eperm(fs.setxattr(f, b"user.x", b"1", 0), "setxattr");
    assert_eq!(fs.files().read(f, 0, 100).unwrap(), b"line 1\nline 2\nline 3\n");
    fs.inodes().forget(f, 1);
    unmount_clean(&fs, dev.as_ref(), "after the append-only file");
}

#[test]
fn who_may_set_which_flags_and_what_is_refused() {
    let (_dev, fs) = mounted_image(64);
    let f = fs.names().mknod(&user(1000), 1, b"mine", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().set_inode_flags(&user(1000), f, ATTR_NODUMP | ATTR_NOATIME).unwrap();
    eperm(fs.files().set_inode_flags(&user(1000), f, ATTR_IMMUTABLE), "an owner setting i without the capability");
    eperm(fs.files().set_inode_flags(&user(1000), f, ATTR_APPEND), "an owner setting a");
    eperm(fs.files().set_inode_flags(&user(2000), f, 0), "someone else");
    let e = fs.files().set_inode_flags(&Ctx::root(), f, 0x0008_0000).unwrap_err();
    assert_eq!(e.errno(), libc::EOPNOTSUPP, "a flag cairn does not keep (extents)");
    assert_eq!(fs.files().inode_flags(f).unwrap(), ATTR_NODUMP | ATTR_NOATIME, "a refused change changed nothing");
    fs.unmount().unwrap();
}

#[test]
fn new_inodes_inherit_s_d_a_and_dirsync_but_never_i_or_a() {
    let (_dev, fs) = mounted_image(64);
    let root = Ctx::root();
    let d = fs.names().mkdir(&root, 1, b"d", 0o755).unwrap().ino;
    fs.files().set_inode_flags(&root, d, ATTR_SYNC | ATTR_NODUMP | ATTR_NOATIME | ATTR_DIRSYNC | ATTR_APPEND).unwrap();
    let f = fs.names().mknod(&root, d, b"f", libc::S_IFREG | 0o644, 0).unwrap();
    assert_eq!(f.flags, ATTR_SYNC | ATTR_NODUMP | ATTR_NOATIME);
    let sub = fs.names().mkdir(&root, d, b"sub", 0o755).unwrap();
    assert_eq!(sub.flags, ATTR_SYNC | ATTR_NODUMP | ATTR_NOATIME | ATTR_DIRSYNC);
    let l = fs.names().symlink(&root, d, b"l", b"f").unwrap();
    assert_eq!(l.flags, ATTR_NODUMP | ATTR_NOATIME);
    fs.unmount().unwrap();
}

#[test]
fn sync_and_dirsync_commit_their_changes_before_returning() {
    let dev = new_image(64);
    let fs = mount_with(
        &dev,
        cairn_core::MountOptions { commit_interval: std::time::Duration::from_secs(3600), ..Default::default() },
    );
    let root = Ctx::root();
    let commits = |fs: &cairn_core::Fs| fs.stats().into_iter().find(|(n, _)| n == "journal.commits").unwrap().1;
    let d = fs.names().mkdir(&root, 1, b"d", 0o755).unwrap().ino;
    let f = fs.names().mknod(&root, 1, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().sync_fs().unwrap();
    let before = commits(&fs);
    fs.files().write(f, 0, b"not synchronous").unwrap();
    fs.names().mknod(&root, d, b"a", libc::S_IFREG | 0o644, 0).unwrap();
    assert_eq!(commits(&fs), before, "a plain write or create committed");
    fs.files().set_inode_flags(&root, f, ATTR_SYNC).unwrap();
    fs.files().set_inode_flags(&root, d, ATTR_DIRSYNC).unwrap();
    let before = commits(&fs);
    fs.files().write(f, 0, b"synchronous").unwrap();
    let after_write = commits(&fs);
    assert!(after_write > before, "a write to an S file did not commit");
    fs.names().mknod(&root, d, b"b", libc::S_IFREG | 0o644, 0).unwrap();
    assert!(commits(&fs) > after_write, "a create in a D directory did not commit");
    fs.unmount().unwrap();
}
