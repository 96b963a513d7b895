//! READDIRPLUS entries of inodes not in core (`Fs::listing_entry`, "Listings"
//! in `inode`): the attributes come from the inode table and no in-core
//! inode is made, the kernel's reference is counted, an unlink after the
//! listing keeps the file until the kernel's FORGET, an entry that did not
//! fit gives its reference back.

use crate::common::*;
use cairn_core::{Ctx, FsError, MountOptions};

/// An image with `n` files of sizes 0..n in directory `d`, remounted with
/// `opts` so that nothing is in core; returns the mount, `d` and the files.
fn remounted(
    n: u64,
    opts: MountOptions,
) -> (std::sync::Arc<cairn_core::Fs>, std::sync::Arc<cairn_core::dev::MemDevice>, u64, Vec<u64>) {
    let dev = new_image(64);
    let c = Ctx::root();
    let fs = mount(&dev);
    let d = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    let files = (0..n)
        .map(|i| {
            let f = fs.names().mknod(&c, d, format!("f{i}").as_bytes(), libc::S_IFREG | 0o640, 0).unwrap().ino;
            fs.files().write(f, 0, &vec![1u8; i as usize]).unwrap();
            f
        })
        .collect();
    fs.unmount().unwrap();
    drop(fs);
    (mount_with(&dev, opts), dev, d, files)
}

#[test]
fn a_listed_inode_not_in_core_is_read_from_its_table_and_not_cached() {
    let (fs, dev, _, files) = remounted(50, MountOptions::default());
    let cached = stat(&fs, "icache.entries");
    let refs = stat(&fs, "icache.lookup_refs");
    for (i, &f) in files.iter().enumerate() {
        let taken = fs
            .listing_entry(f, true, |a| {
                assert_eq!((a.ino, a.size, a.mode & 0o7777, a.nlink), (f, i as u64, 0o640, 1));
                true
            })
            .unwrap();
        assert!(taken);
    }
    assert_eq!(stat(&fs, "icache.entries"), cached, "no in-core inode was made");
    assert_eq!(stat(&fs, "icache.lookup_refs"), refs + 50, "each entry holds the kernel's reference");
    for &f in &files {
        fs.inodes().forget(f, 1);
    }
    assert_eq!(stat(&fs, "icache.lookup_refs"), refs);
    unmount_clean(&fs, dev.as_ref(), "after listing");
}

#[test]
fn an_unlink_after_the_listing_keeps_the_file_until_the_forget() {
    let (fs, dev, d, files) = remounted(3, MountOptions::default());
    let f = files[2];
    assert!(fs.listing_entry(f, true, |_| true).unwrap());
    fs.names().unlink(d, b"f2").unwrap();
    // The kernel still holds it: an open-unlinked file, not freed.
    assert_eq!(fs.inodes().getattr(f).unwrap().nlink, 0);
    let free = fs.statfs().unwrap().files_free;
    fs.inodes().forget(f, 1);
    wait_reaped(&fs);
    assert!(matches!(fs.inodes().getattr(f), Err(FsError::Errno(libc::ENOENT))), "freed at the FORGET");
    assert_eq!(fs.statfs().unwrap().files_free, free + 1);
    unmount_clean(&fs, dev.as_ref(), "after the unlink and forget");
}

#[test]
fn an_entry_that_did_not_fit_gives_its_reference_back() {
    let (fs, dev, d, files) = remounted(2, MountOptions::default());
    let refs = stat(&fs, "icache.lookup_refs");
    assert!(!fs.listing_entry(files[0], true, |_| false).unwrap());
    assert_eq!(stat(&fs, "icache.lookup_refs"), refs);
    // Nothing holds it now: its unlink frees it at once.
    let free = fs.statfs().unwrap().files_free;
    fs.names().unlink(d, b"f0").unwrap();
    wait_reaped(&fs);
    assert_eq!(fs.statfs().unwrap().files_free, free + 1);
    unmount_clean(&fs, dev.as_ref(), "after the unlink");
}

#[test]
fn an_entry_freed_since_the_listing_began_is_not_given() {
    let (fs, dev, d, files) = remounted(2, MountOptions::default());
    let refs = stat(&fs, "icache.lookup_refs");
    fs.names().unlink(d, b"f1").unwrap();
    wait_reaped(&fs);
    // The batch still names it: its inode has no links, and is refused.
    let r = fs.listing_entry(files[1], true, |_| panic!("a freed inode's attributes were listed"));
    assert!(matches!(r, Err(FsError::Errno(libc::ENOENT))), "{r:?}");
    assert_eq!(stat(&fs, "icache.lookup_refs"), refs, "no reference is left behind");
    unmount_clean(&fs, dev.as_ref(), "after the listing");
}

/// Two threads list a directory over and over (every third entry "does not
/// fit in the reply") while the main thread unlinks and makes its files
/// again on a small image, whose inode numbers come back quickly.
fn listings_racing_with_unlinks() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dev = new_image(16);
    let fs = mount_with(&dev, MountOptions::default());
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    let refs0 = stat(&fs, "icache.lookup_refs");
    const NAMES: u64 = 40;
    let done = Arc::new(AtomicBool::new(false));
    let listers: Vec<_> = (0..2u64)
        .map(|t| {
            let (fs, done) = (Arc::clone(&fs), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let mut entries = Vec::new();
                    fs.readdir(d, 0, &mut |e| {
                        entries.push(e.ino);
                        true
                    })
                    .unwrap();
                    let mut held = Vec::new();
                    for (i, ino) in entries.into_iter().enumerate() {
                        let counts = ino != d && ino != 1;
                        let fits = !(i as u64 + round + t).is_multiple_of(3);
                        match fs.listing_entry(ino, counts, |_| fits) {
                            Ok(true) if counts => held.push(ino),
                            Ok(_) | Err(FsError::Errno(libc::ENOENT)) => {}
                            Err(e) => panic!("listing {ino}: {e}"),
                        }
                    }
                    for ino in held {
                        fs.inodes().forget(ino, 1);
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let why = |fs: &cairn_core::Fs| format!("the first error: {:?}", fs.first_error());
    for i in 0..4000u64 {
        let name = format!("f{}", i % NAMES);
        match fs.names().unlink(d, name.as_bytes()) {
            Ok(()) | Err(FsError::Errno(libc::ENOENT)) => {}
            Err(e) => panic!("unlink {name}: {e}; {}", why(&fs)),
        }
        let f = fs.names().mknod(&c, d, name.as_bytes(), libc::S_IFREG | 0o644, 0);
        let f = f.unwrap_or_else(|e| panic!("mknod {name}: {e}; {}", why(&fs))).ino;
        fs.inodes().forget(f, 1);
    }
    done.store(true, Ordering::Relaxed);
    for l in listers {
        l.join().unwrap();
    }
    for i in 0..NAMES {
        fs.names().unlink(d, format!("f{i}").as_bytes()).unwrap();
    }
    wait_reaped(&fs);
    assert_eq!(fs.first_error(), None);
    assert_eq!(stat(&fs, "icache.lookup_refs"), refs0, "every reference a listing took was given back");
    unmount_clean(&fs, dev.as_ref(), "after the race");
}

/// Before the reaper checked the inode bitmap, a file whose last reference
/// was dropped twice (a listing of a stale entry took one after the first
/// FORGET queued the file) was queued twice, and the second job read the
/// freed inode back and freed it again: "freeing an inode that is not in
/// use", and the journal aborted. Both listing paths.
#[test]
fn listings_racing_with_unlinks_and_creates_leave_no_reference_behind() {
    listings_racing_with_unlinks();
}
