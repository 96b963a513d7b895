//! Backup superblocks: a damaged primary is repaired from a copy with no
//! loss; `-b` reads a named copy; damaged copies are found and rewritten.

use crate::common::*;
use cairn_format::backup;
use cairn_format::superblock::Superblock;

/// Runs fsck with `-b block`.
fn fsck_b(path: &std::path::Path, repair: bool, block: u64) -> (i32, String) {
    let mut out = Vec::new();
    let opts = cairn_fsck::Options { repair, backup_superblock: Some(block), ..Default::default() };
    let code = cairn_fsck::run(path, &opts, &mut out);
    (code, String::from_utf8_lossy(&out).into_owned())
}

/// A populated image, its file tree's hashes and its backup groups' first blocks.
fn image() -> (Vec<u8>, std::collections::BTreeMap<Vec<u8>, u32>, Vec<u64>) {
    let (bytes, _) = populated_image();
    let (_, geo, _) = sb_geo(&bytes);
    let backups: Vec<u64> = geo.backup_groups().map(|g| geo.group_start(g)).collect();
    assert!(backups.len() >= 2, "the test image has groups {:?} with backups", backups);
    let (hashes, errors) = tree_hashes(&bytes).unwrap();
    assert_eq!(errors, 0);
    (bytes, hashes, backups)
}

/// Repairs `bytes` with one `--repair`, then asserts a clean check, a mount,
/// and every file as it was.
fn repairs_with_no_loss(bytes: &[u8], want: &std::collections::BTreeMap<Vec<u8>, u32>, expect_in_output: &str) {
    let f = to_file(bytes);
    let (code, out) = fsck(f.path(), false);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains(expect_in_output), "expected {expect_in_output:?} in:\n{out}");
    let (code, out) = fsck(f.path(), true);
    assert_eq!(code, 1, "{out}");
    assert_clean(f.path());
    let repaired = std::fs::read(f.path()).unwrap();
    let (after, errors) = tree_hashes(&repaired).unwrap();
    assert_eq!((errors, &after), (0, want), "files changed by the repair");
}

#[test]
fn mkfs_writes_copies_that_match_the_primary() {
    let (bytes, _, backups) = image();
    let (sb, geo, _) = sb_geo(&bytes);
    for (b, g) in backups.iter().zip(geo.backup_groups()) {
        let at = (b * u64::from(geo.block_size)) as usize;
        let copy = backup::decode_copy(&bytes[at..at + 512], at as u64, bytes.len() as u64).expect("a copy verifies");
        assert_eq!(u64::from(copy.backup_group), g);
        assert_eq!(backup::static_fields(&backup::primary_from_copy(&copy)), backup::static_fields(&sb));
    }
}

#[test]
fn a_primary_with_a_bad_checksum_is_repaired_from_the_first_copy() {
    let (mut bytes, want, backups) = image();
    bytes[50] ^= 1;
    repairs_with_no_loss(&bytes, &want, &format!("using the backup superblock in group 1 (block {})", backups[0]));
}

#[test]
fn a_wiped_primary_is_found_again_without_any_hint() {
    let (mut bytes, want, _) = image();
    // Magic, geometry, everything: the search must try group sizes mkfs
    // does not default to (this image has 2,048-block groups).
    bytes[..512].fill(0);
    repairs_with_no_loss(&bytes, &want, "the primary superblock has no cairn signature");
}

#[test]
fn when_the_first_copy_is_damaged_too_the_next_one_serves() {
    let (mut bytes, want, backups) = image();
    let bs = sb_geo(&bytes).1.block_size as usize;
    bytes[100] ^= 0x40;
    bytes[backups[0] as usize * bs + 60] ^= 1;
    repairs_with_no_loss(&bytes, &want, "using the backup superblock in group 3");
}

#[test]
fn a_damaged_or_stale_copy_is_rewritten() {
    let (mut bytes, want, backups) = image();
    let (sb, geo, _) = sb_geo(&bytes);
    let bs = geo.block_size as usize;
    // One copy with a flipped byte, one that verifies but names another label.
    bytes[backups[0] as usize * bs + 200] ^= 4;
    let stale =
        Superblock { label: *b"someone else's label\0\0\0\0\0\0\0\0\0\0\0\0", ..backup::copy_for_group(&sb, 3) };
    stale.encode(&mut bytes[backups[1] as usize * bs..]);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), false);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains(&format!("the backup superblock in group 1 (block {}) does not verify", backups[0])), "{out}");
    assert!(out.contains(&format!("in group 3 (block {}) does not match the primary", backups[1])), "{out}");
    drop(f);
    repairs_with_no_loss(&bytes, &want, "does not match the primary");
}

#[test]
fn dash_b_reads_the_named_copy_and_refuses_a_block_without_one() {
    let (bytes, want, backups) = image();
    let f = to_file(&bytes);
    let (code, out) = fsck_b(f.path(), false, backups[1]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("using the backup superblock in group 3"), "{out}");
    let (code, out) = fsck_b(f.path(), true, backups[1]);
    assert_eq!(code, 1, "{out}");
    assert_clean(f.path());
    assert_eq!(tree_hashes(&std::fs::read(f.path()).unwrap()).unwrap().0, want);
    let (code, out) = fsck_b(f.path(), false, backups[0] + 1);
    assert_eq!(code, 8, "{out}");
    assert!(out.contains(&format!("no backup superblock at block {}", backups[0] + 1)), "{out}");
}
