//! Preen (`-p`, fsck(8)'s automatic mode at boot): it fixes what is safe
//! without asking (summary counters, bitmaps, backup superblocks) and
//! changes nothing when it finds anything else.

use crate::common::*;

fn preen(path: &std::path::Path) -> (i32, String) {
    let mut out = Vec::new();
    let opts = cairn_fsck::Options { preen: true, ..Default::default() };
    let code = cairn_fsck::run(path, &opts, &mut out);
    (code, String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn preen_fixes_counters_and_backup_copies() {
    let (mut bytes, _) = populated_image();
    let (mut sb, geo, _) = sb_geo(&bytes);
    sb.free_blocks -= 1;
    sb.encode(&mut bytes[..4096]);
    let b = geo.backup_groups().next().unwrap();
    bytes[(geo.group_start(b) * u64::from(geo.block_size)) as usize + 100] ^= 1;
    let f = to_file(&bytes);
    let (code, out) = preen(f.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("free block count") && out.contains("backup superblock"), "{out}");
    assert_clean(f.path());
    // A clean image: nothing to do, exit 0, nothing written.
    let before = std::fs::read(f.path()).unwrap();
    assert_eq!(preen(f.path()).0, 0);
    assert_eq!(std::fs::read(f.path()).unwrap(), before);
}

#[test]
fn preen_changes_nothing_when_a_problem_needs_a_decision() {
    let (mut bytes, m) = populated_image();
    let (mut sb, _, _) = sb_geo(&bytes);
    sb.free_blocks -= 1;
    sb.encode(&mut bytes[..4096]);
    // A wrong link count beside the counter: not for preen.
    edit_inode(&mut bytes, m["f1"], |d| d.nlink += 1);
    let f = to_file(&bytes);
    let (code, out) = preen(f.path());
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("UNEXPECTED INCONSISTENCY: 1 problem(s) preen may not fix; nothing was changed"), "{out}");
    assert_eq!(std::fs::read(f.path()).unwrap(), bytes, "preen wrote to an image it refused");
    // --repair then fixes both.
    assert_eq!(fsck(f.path(), true).0, 1);
    assert_clean(f.path());
}
