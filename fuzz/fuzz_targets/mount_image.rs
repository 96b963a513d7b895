//! Mount a damaged image in-process, walk and read it, change it, unmount.
//! The engine may refuse the image or fail an operation (EIO, EUCLEAN,
//! ENOSPC...), but never panic, hang or run out of memory. Input: byte
//! edits of the golden image's metadata (`cairn_fuzz::mutated`).
#![no_main]

use cairn_core::Ctx;
use cairn_fuzz::{mount, mutated};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(fs) = mount(mutated(data)) else { return };
    let c = Ctx::root();
    // A bounded walk: every directory entry, its attributes, xattrs, and
    // the first 64 KiB of each file or the symlink's target.
    let mut queue = vec![1u64];
    let mut seen = 0;
    while let Some(dir) = queue.pop() {
        let mut ents = Vec::new();
        let _ = fs.readdir(dir, 0, &mut |e| {
            ents.push((e.ino, e.name.clone()));
            ents.len() < 200
        });
        for (ino, name) in ents {
            seen += 1;
            if seen > 500 || name == b"." || name == b".." {
                continue;
            }
            let _ = fs.lookup(dir, &name);
            let Ok(a) = fs.inodes().getattr(ino) else { continue };
            let _ = fs.listxattr(ino);
            let _ = fs.getxattr(ino, b"user.tag");
            match a.mode & libc::S_IFMT {
                libc::S_IFDIR => queue.push(ino),
                libc::S_IFREG => {
                    let _ = fs.files().read(ino, 0, 65536);
                }
                libc::S_IFLNK => {
                    let _ = fs.readlink(ino);
                }
                _ => {}
            }
        }
    }
    // Changes: each may fail on damaged metadata, none may panic.
    if let Ok(f) = fs.names().mknod(&c, 1, b"new", libc::S_IFREG | 0o644, 0) {
        let _ = fs.files().write(f.ino, 0, &[1u8; 5000]);
        let _ = fs.setxattr(f.ino, b"user.tag", b"shared value", 0);
    }
    let _ = fs.names().mkdir(&c, 1, b"newdir", 0o755);
    let _ = fs.names().rename(1, b"frag", 1, b"frag2", 0);
    let _ = fs.names().unlink(1, b"null");
    let _ = fs.files().sync_fs();
    let _ = fs.unmount();
});
