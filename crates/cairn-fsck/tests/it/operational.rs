//! Images fsck cannot check at all: exit 8 (or 4 for a damaged cairn
//! superblock) with a clear message, never a panic.

use crate::common::*;
use cairn_core::dev::FileDevice;

fn expect(bytes: &[u8], code: i32, want: &str) {
    let f = to_file(bytes);
    let (c, out) = fsck(f.path(), false);
    assert_eq!(c, code, "{out}");
    assert!(out.contains(want), "expected {want:?} in {out:?}");
    let (c, out) = fsck(f.path(), true);
    assert_eq!(c, code, "{out}");
    // The same image in memory fails the same way.
    let e = cairn_fsck::check_image(&bytes, &cairn_fsck::Options::default()).unwrap_err();
    assert_eq!(e.exit_code(), code, "{e}");
    assert!(e.to_string().contains(want), "expected {want:?} in {e:?}");
}

#[test]
fn zero_length_file() {
    expect(&[], 8, "not a cairn file system: the image is empty");
}

#[test]
fn garbage_file() {
    let g: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    expect(&g, 8, "not a cairn file system");
    expect(&g[..100], 8, "not a cairn file system");
}

#[test]
fn ext4_signature_is_named() {
    let mut g = vec![0u8; 8192];
    g[1080] = 0x53;
    g[1081] = 0xef;
    expect(&g, 8, "ext2/3/4");
}

#[test]
fn truncated_images() {
    let (bytes, _) = populated_image();
    // A sound superblock: the check says by how much the image is short
    // (a repair would extend it: `repair_extends_a_truncated_image_file`).
    for cut in [bytes.len() / 2, 4096] {
        let f = to_file(&bytes[..cut]);
        let (c, out) = fsck(f.path(), false);
        assert_eq!(c, 8, "{out}");
        let short = cairn_fsck::num((bytes.len() - cut) as u64);
        assert!(out.contains(&format!("image is truncated: the file is {}", cairn_fsck::num(cut as u64))), "{out}");
        assert!(out.contains(&format!("{short} bytes")) && out.contains("shorter than the file system"), "{out}");
        assert_eq!(std::fs::metadata(f.path()).unwrap().len(), cut as u64, "a check changed the size");
    }
    expect(&bytes[..300], 8, "image is truncated");
}

#[test]
fn repair_extends_a_truncated_image_file() {
    // As `truncate -s SIZE` by hand: the image file gets its size back, and
    // the check that follows finds what the lost tail held (here nothing).
    let (bytes, _) = populated_image();
    let cut = bytes.len() - (256 << 10);
    let f = to_file(&bytes[..cut]);
    let (c, out) = fsck(f.path(), true);
    assert_eq!(c, 1, "{out}");
    assert!(out.contains("S05 the image file is 262,144 bytes shorter than the file system"), "{out}");
    assert!(out.contains("[fixed]") && out.contains("now clean"), "{out}");
    assert_eq!(std::fs::metadata(f.path()).unwrap().len(), bytes.len() as u64);
    assert_clean(f.path());
}

#[test]
fn a_directory_is_not_an_image() {
    let dir = tempfile::tempdir().unwrap();
    for repair in [false, true] {
        let (c, out) = fsck(dir.path(), repair);
        assert_eq!(c, 8, "{out}");
        let want = format!("cairn fsck: {} is a directory, not an image file or block device", dir.path().display());
        assert!(out.contains(&want), "{out}");
    }
}

#[test]
fn corrupt_superblock_and_every_copy() {
    let (mut bytes, _) = populated_image();
    let (_, geo, _) = sb_geo(&bytes);
    bytes[50] ^= 1;
    for g in geo.backup_groups() {
        bytes[(geo.group_start(g) * u64::from(geo.block_size)) as usize + 50] ^= 1;
    }
    expect(&bytes, 4, "superblock is corrupt: checksum mismatch");
}

#[test]
fn missing_file() {
    let (c, out) = fsck(std::path::Path::new("/nonexistent/cairn.img"), false);
    assert_eq!(c, 8);
    assert!(out.contains("cannot open"), "{out}");
}

#[test]
fn mounted_image_is_refused() {
    let (bytes, _) = populated_image();
    let f = to_file(&bytes);
    let dev = FileDevice::open(f.path(), false).unwrap();
    dev.lock_exclusive().unwrap();
    let (c, out) = fsck(f.path(), false);
    assert_eq!(c, 8, "{out}");
    assert!(out.contains("appears to be mounted"), "{out}");
    drop(dev);
    assert_eq!(fsck(f.path(), false).0, 0);
}
