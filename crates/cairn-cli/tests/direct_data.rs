//! File data through `O_DIRECT` (`-o direct_data`, on by default) through a
//! real mount: a file read cold leaves none of its bytes in the host's page
//! cache of the image file (the kernel caches them once, as the FUSE file's
//! pages), while `-o direct_data=0` leaves them all there, a second copy;
//! and what was written either way reads back the same.

mod common;

use common::*;
use std::os::unix::io::AsRawFd;
use std::path::Path;

const MIB: usize = 1 << 20;

/// Drops the host's clean cached pages of `path`.
fn forget_pages(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: fadvise on a descriptor `f` owns; no memory is passed.
    #[allow(unsafe_code)]
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise");
}

/// Bytes of `path` in the host's page cache (mincore over a mapping).
fn cached_bytes(path: &Path) -> usize {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: a read-only shared mapping of a file `f` owns, `len` bytes
    // long; mincore writes one byte per page into `vec`, which has room for
    // every page; the mapping is removed before returning and never read.
    #[allow(unsafe_code)]
    unsafe {
        let at = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0);
        assert_ne!(at, libc::MAP_FAILED, "mmap");
        let r = libc::mincore(at, len, vec.as_mut_ptr());
        libc::munmap(at, len);
        assert_eq!(r, 0, "mincore");
    }
    vec.iter().filter(|&&b| b & 1 != 0).count() * page
}

fn drop_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// Writes the file (`-o direct_data=` `direct`), remounts, reads it cold:
/// the image's bytes the host then caches.
fn image_cache_after_a_cold_read(dir: &Path, direct: &str, data: &[u8]) -> usize {
    let (img, mp) = (dir.join("d.img"), dir.join("mnt"));
    let opts = format!("direct_data={direct}");
    let _g = Guard(mp.clone());
    let pid = mount(&img, &mp, &["-o", &opts], "mount");
    let file = mp.join(format!("f{direct}"));
    std::fs::write(&file, data).unwrap();
    // A short tail: the last block is read partly.
    std::fs::write(mp.join(format!("small{direct}")), &data[..5000]).unwrap();
    unmount(&mp, pid);
    drop_caches();
    forget_pages(&img);
    let pid = mount(&img, &mp, &["-o", &opts], "mount again");
    let before = cached_bytes(&img);
    assert!(std::fs::read(&file).unwrap() == data, "direct_data={direct}: the file reads back different bytes");
    assert!(std::fs::read(mp.join(format!("small{direct}"))).unwrap() == data[..5000]);
    let grown = cached_bytes(&img).saturating_sub(before);
    let c = counters(&mp);
    assert_eq!(c["dev.direct_data"], u64::from(direct == "1"), "dev.direct_data");
    unmount(&mp, pid);
    assert_fsck_clean(&img, "after the reads");
    grown
}

#[test]
fn a_cold_read_caches_each_byte_once_with_direct_data_and_twice_without() {
    if !can_mount() {
        return;
    }
    // The image must live where the host's page cache is a cache: on tmpfs
    // its pages are the file itself.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut sfs: libc::statfs = unsafe_zeroed_statfs();
    let cpath = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
    // SAFETY: statfs fills a live struct for a NUL-terminated path.
    #[allow(unsafe_code)]
    let r = unsafe { libc::statfs(cpath.as_ptr(), &mut sfs) };
    assert_eq!(r, 0);
    if sfs.f_type == libc::TMPFS_MAGIC {
        eprintln!("SKIPPED: /var/tmp is tmpfs, whose pages are the image itself");
        return;
    }
    std::fs::create_dir(dir.path().join("mnt")).unwrap();
    mkfs(&dir.path().join("d.img"), "256M");
    let data: Vec<u8> = (0..32 * MIB).map(|i| (i * 7 + i / 4093) as u8).collect();
    let direct = image_cache_after_a_cold_read(dir.path(), "1", &data);
    let buffered = image_cache_after_a_cold_read(dir.path(), "0", &data);
    eprintln!("image bytes cached by a cold read of 32 MiB: {direct} with direct_data, {buffered} without");
    // Metadata (inodes, extent nodes, the journal's head) may be cached; the
    // file's 32 MiB must not be, unless direct_data is off.
    assert!(direct < 4 * MIB, "direct_data=1 cached {direct} bytes of the image");
    assert!(buffered >= 32 * MIB, "direct_data=0 cached only {buffered} bytes: the test cannot tell the two apart");
}

fn unsafe_zeroed_statfs() -> libc::statfs {
    // SAFETY: statfs is plain old data, valid zeroed.
    #[allow(unsafe_code)]
    unsafe {
        std::mem::zeroed()
    }
}
