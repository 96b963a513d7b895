//! Random damage to metadata must never crash fsck (with or without repair).

use crate::common::*;
use cairn_format::btree::NODE_MAGIC;
use cairn_format::codec::get_u32;
use cairn_format::xattr::{XATTR_MAGIC, XVAL_MAGIC};
use std::os::unix::fs::FileExt;

/// A small deterministic PRNG (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Blocks holding metadata: superblock, descriptors, journal superblock
/// (and with `journal`, the used part of the ring), bitmaps and inode tables
/// of initialised groups, tree nodes, xattr blocks and their value blocks.
fn metadata_blocks(bytes: &[u8], journal: bool) -> Vec<u64> {
    let (sb, geo, _) = sb_geo(bytes);
    let bs = geo.block_size as usize;
    let mut v: Vec<u64> = (0..1 + sb.gdt_blocks).collect();
    v.push(sb.journal_start);
    if journal {
        for b in sb.journal_start + 1..sb.journal_start + sb.journal_blocks {
            if bytes[b as usize * bs..(b as usize + 1) * bs].iter().any(|x| *x != 0) {
                v.push(b);
            }
        }
    }
    v.extend(geo.backup_groups().map(|g| geo.group_start(g)));
    for g in 0..geo.group_count {
        v.push(geo.block_bitmap(g));
        v.push(geo.inode_bitmap(g));
        for b in 0..geo.itable_blocks.min(8) {
            v.push(geo.inode_table(g) + b);
        }
    }
    for b in sb.journal_start + sb.journal_blocks..geo.total_blocks {
        let d = &bytes[b as usize * bs..(b as usize + 1) * bs];
        let m = get_u32(d, 0);
        if m == NODE_MAGIC || m == XATTR_MAGIC || m == XVAL_MAGIC {
            v.push(b);
        }
    }
    v
}

fn iterations(default: u32) -> u32 {
    std::env::var("FSCK_FUZZ_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn random_metadata_damage_never_panics() {
    let (bytes, _) = populated_image();
    fuzz(&bytes, false, iterations(300), 0x9e37_79b9_7f4a_7c15);
}

#[test]
fn random_journal_damage_never_panics() {
    let bytes = unreplayed_image();
    fuzz(&bytes, true, iterations(150), 0x1234_5678_9abc_def1);
}

fn fuzz(bytes: &[u8], journal: bool, iters: u32, seed: u64) {
    let meta = metadata_blocks(bytes, journal);
    assert!(meta.len() > 20);
    let bs = sb_geo(bytes).1.block_size as u64;
    let f = to_file(bytes);
    let mut rng = Rng(seed);
    let (mut failed, mut clean) = (0, 0);
    for iter in 0..iters {
        let n = 1 + rng.below(4);
        let mut edits = Vec::new();
        for _ in 0..n {
            let blk = meta[rng.below(meta.len() as u64) as usize];
            // Half the time hit the header area, where the interesting fields are.
            let off = if rng.below(2) == 0 { rng.below(128) } else { rng.below(bs) };
            let pos = blk * bs + off;
            let old = bytes[pos as usize];
            let new = if rng.below(3) == 0 { rng.next() as u8 } else { old ^ (1 << rng.below(8)) };
            edits.push((pos, old, new));
        }
        for &(pos, _, new) in &edits {
            f.as_file().write_all_at(&[new], pos).unwrap();
        }
        let repair = iter % 5 == 0;
        let (code, out) = fsck(f.path(), repair);
        assert!([0, 1, 4, 8].contains(&code), "exit {code}: {out}");
        assert!(!out.contains("internal error"), "fsck panicked: {out}");
        if code == 0 {
            clean += 1;
        } else {
            failed += 1;
        }
        if repair {
            // A repair may have written anywhere: restore the whole image.
            f.as_file().write_all_at(bytes, 0).unwrap();
            // And a repaired image must never make a second check panic.
        } else {
            for &(pos, old, _) in &edits {
                f.as_file().write_all_at(&[old], pos).unwrap();
            }
        }
    }
    // Damage to journal records mostly just ends the log early (a torn
    // record), which is not an error; elsewhere most damage must be found.
    if !journal {
        assert!(failed > iters / 3, "most random damage should be detected ({failed} failed, {clean} clean)");
    }
}

/// Survey (ignored, so run by CI's `--include-ignored`; `FSCK_FUZZ_ITERS=N
/// cargo test ... -- --ignored --nocapture repair_survey`): damage 1..20
/// metadata bytes, repair once, check again, mount what is clean and read
/// every file; prints what the second check still finds and how many paths
/// kept their contents (`SURVEY_MIB=256`: on an image of 256 MiB made with
/// mkfs's defaults). Fails on a panic, on a clean image that does not
/// mount or read, and when more than one in a hundred stays unclean.
#[test]
#[ignore]
fn repair_survey() {
    // SURVEY_MIB=256: an image of that size made with mkfs's defaults.
    let (bytes, _) = match std::env::var("SURVEY_MIB").ok().and_then(|m| m.parse().ok()) {
        Some(mib) => populated_image_of(mib, &Default::default()),
        None => populated_image(),
    };
    let meta = metadata_blocks(&bytes, false);
    let bs = sb_geo(&bytes).1.block_size as u64;
    let f = to_file(&bytes);
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let iters = iterations(100);
    let mut left: std::collections::BTreeMap<String, u32> = Default::default();
    let mut unclean = 0;
    let (original, _) = tree_hashes(&bytes).expect("the undamaged image mounts");
    let (mut mounted, mut intact, mut found, mut read_errors) = (0u32, 0usize, 0usize, 0u32);
    let verbose = std::env::var("SURVEY_VERBOSE").is_ok();
    for iter in 0..iters {
        if verbose {
            eprintln!("iteration {iter}");
        }
        f.as_file().write_all_at(&bytes, 0).unwrap();
        for _ in 0..1 + rng.below(20) {
            let blk = meta[rng.below(meta.len() as u64) as usize];
            let off = if rng.below(2) == 0 { rng.below(128) } else { rng.below(bs) };
            let pos = blk * bs + off;
            let old = bytes[pos as usize];
            let new = if rng.below(3) == 0 { rng.next() as u8 } else { old ^ (1 << rng.below(8)) };
            f.as_file().write_all_at(&[new], pos).unwrap();
        }
        let (rcode, rout) = fsck(f.path(), true);
        let (code, out) = fsck(f.path(), false);
        for (c, o) in [(rcode, &rout), (code, &out)] {
            assert!([0, 1, 4, 8].contains(&c) && !o.contains("internal error"), "exit {c}: {o}");
        }
        if let Ok(pat) = std::env::var("SURVEY_DUMP") {
            if code != 0 && out.contains(&pat) {
                println!("=== REPAIR\n{rout}\n=== CHECK\n{out}");
            }
        }
        if verbose {
            eprintln!("  checked: {code}");
        }
        if std::env::var("SURVEY_SAVE").ok().and_then(|v| v.parse::<u32>().ok()) == Some(iter) {
            std::fs::copy(f.path(), "/tmp/survey-repaired.img").unwrap();
            println!("REPAIR OUTPUT\n{rout}");
            return;
        }
        if code == 0 {
            match tree_hashes(&std::fs::read(f.path()).unwrap()) {
                Ok((after, errors)) => {
                    mounted += 1;
                    read_errors += errors;
                    intact += original.iter().filter(|(p, h)| after.get(*p) == Some(h)).count();
                    found += after.keys().filter(|p| p.starts_with(b"/lost+found/")).count();
                }
                Err(e) => panic!("a repaired image that fsck calls clean does not mount: {e}\n{rout}"),
            }
        }
        if code != 0 {
            unclean += 1;
            for l in out.lines().filter(|l| l.starts_with("  ") || l.contains("inode") || l.contains("block")).take(3) {
                if std::env::var("SURVEY_FULL").is_ok() {
                    println!("FULL {l}");
                }
                let l = l.split(" (").next().unwrap_or(l);
                let key: String = l.chars().map(|c| if c.is_ascii_digit() { 'N' } else { c }).collect();
                let key = key.replace("NN", "N").replace("NN", "N").replace("NN", "N");
                *left.entry(key).or_default() += 1;
            }
        }
    }
    println!("{unclean} of {iters} images not clean after one repair");
    // What fsck calls clean, the engine mounts and reads in full.
    assert_eq!(read_errors, 0, "read errors in repaired images that fsck calls clean");
    // Measured: 3 to 5 of 100 (a damaged primary superblock has no backup
    // yet); a bound with room for the randomness of each image's uuid.
    // Measured since backup superblocks and repeated repair rounds: 0 of
    // 900 (3 runs of 300), 1 of 1,500; 3 to 8 of 100 before. One in a
    // hundred is let pass so that a rare residue does not fail CI at random.
    assert!(unclean * 100 <= iters, "{unclean} of {iters} images not clean after one repair");
    let clean = iters - unclean;
    println!(
        "{mounted} of the {clean} clean ones mounted and were walked: on average {:.1} of {} paths intact (same path, same contents), {:.1} entries in /lost+found, {read_errors} read errors in all",
        intact as f64 / f64::from(mounted.max(1)),
        original.len(),
        found as f64 / f64::from(mounted.max(1)),
    );
    for (k, n) in left {
        println!("{n:4}  {k}");
    }
}
