//! READDIRPLUS entries of inodes not in core (`Fs::listing_entry`, "Listings"
//! in `inode`): the attributes come from the inode table and no in-core
//! inode is made, the kernel's reference is counted, an unlink after the
//! listing keeps the file until the kernel's FORGET, an entry that did not
//! fit gives its reference back, and `-o cache_listed` makes them in core.

use crate::common::*;
use cairn_core::{Ctx, FsError, MountOptions};

fn counter(fs: &cairn_core::Fs, name: &str) -> u64 {
    fs.stats().into_iter().find(|(k, _)| k == name).map(|(_, v)| v).unwrap_or_else(|| panic!("no counter {name}"))
}

/// An image with `n` files of sizes 0..n in directory `d`, remounted with
/// `opts` so that nothing is in core; returns the mount, `d` and the files.
fn remounted(
    n: u64,
    opts: MountOptions,
) -> (std::sync::Arc<cairn_core::Fs>, std::sync::Arc<cairn_core::dev::MemDevice>, u64, Vec<u64>) {
    let dev = new_image(64);
    let c = Ctx::root();
    let fs = mount(&dev);
    let d = fs.mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    let files = (0..n)
        .map(|i| {
            let f = fs.mknod(&c, d, format!("f{i}").as_bytes(), libc::S_IFREG | 0o640, 0).unwrap().ino;
            fs.write(f, 0, &vec![1u8; i as usize]).unwrap();
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
    let cached = counter(&fs, "icache.entries");
    let refs = counter(&fs, "icache.lookup_refs");
    for (i, &f) in files.iter().enumerate() {
        let taken = fs
            .listing_entry(f, true, |a| {
                assert_eq!((a.ino, a.size, a.mode & 0o7777, a.nlink), (f, i as u64, 0o640, 1));
                true
            })
            .unwrap();
        assert!(taken);
    }
    assert_eq!(counter(&fs, "icache.entries"), cached, "no in-core inode was made");
    assert_eq!(counter(&fs, "icache.lookup_refs"), refs + 50, "each entry holds the kernel's reference");
    for &f in &files {
        fs.forget(f, 1);
    }
    assert_eq!(counter(&fs, "icache.lookup_refs"), refs);
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after listing");
}

#[test]
fn an_unlink_after_the_listing_keeps_the_file_until_the_forget() {
    let (fs, dev, d, files) = remounted(3, MountOptions::default());
    let f = files[2];
    assert!(fs.listing_entry(f, true, |_| true).unwrap());
    fs.unlink(d, b"f2").unwrap();
    // The kernel still holds it: an open-unlinked file, not freed.
    assert_eq!(fs.getattr(f).unwrap().nlink, 0);
    let free = fs.statfs().unwrap().files_free;
    fs.forget(f, 1);
    wait_reaped(&fs);
    assert!(matches!(fs.getattr(f), Err(FsError::Errno(libc::ENOENT))), "freed at the FORGET");
    assert_eq!(fs.statfs().unwrap().files_free, free + 1);
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after the unlink and forget");
}

#[test]
fn an_entry_that_did_not_fit_gives_its_reference_back() {
    let (fs, dev, d, files) = remounted(2, MountOptions::default());
    let refs = counter(&fs, "icache.lookup_refs");
    assert!(!fs.listing_entry(files[0], true, |_| false).unwrap());
    assert_eq!(counter(&fs, "icache.lookup_refs"), refs);
    // Nothing holds it now: its unlink frees it at once.
    let free = fs.statfs().unwrap().files_free;
    fs.unlink(d, b"f0").unwrap();
    wait_reaped(&fs);
    assert_eq!(fs.statfs().unwrap().files_free, free + 1);
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after the unlink");
}

#[test]
fn an_entry_freed_since_the_listing_began_is_not_given() {
    let (fs, dev, d, files) = remounted(2, MountOptions::default());
    let refs = counter(&fs, "icache.lookup_refs");
    fs.unlink(d, b"f1").unwrap();
    wait_reaped(&fs);
    // The batch still names it: its inode has no links, and is refused.
    let r = fs.listing_entry(files[1], true, |_| panic!("a freed inode's attributes were listed"));
    assert!(matches!(r, Err(FsError::Errno(libc::ENOENT))), "{r:?}");
    assert_eq!(counter(&fs, "icache.lookup_refs"), refs, "no reference is left behind");
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after the listing");
}

#[test]
fn cache_listed_makes_every_listed_inode_in_core() {
    let (fs, dev, _, files) = remounted(20, MountOptions { cache_listed: true, ..Default::default() });
    let cached = counter(&fs, "icache.entries");
    for &f in &files {
        assert!(fs.listing_entry(f, true, |_| true).unwrap());
    }
    assert_eq!(counter(&fs, "icache.entries"), cached + 20);
    for &f in &files {
        fs.forget(f, 1);
    }
    fs.unmount().unwrap();
    fsck_clean_mem(dev.as_ref(), "after listing");
}
