//! A directory whose B+tree is several levels deep, grown and emptied in
//! random order against a model: every insert and remove path of the tree
//! (in-place leaf edits, leaf and internal splits, a first key lowered,
//! freed leaves and internal nodes, the root collapsing level by level) is
//! taken, and the names, the listing and fsck must agree with the model.

use crate::common::{mount_with, new_image_with, unmount_clean};
use cairn_core::mkfs::MkfsOptions;
use cairn_core::{Ctx, Fs, MountOptions};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;

const ROOT: u64 = 1;

/// A 200-byte name: with 1 KiB blocks a leaf holds 4 of them, so 2,000
/// names make a tree of three levels.
fn name(i: u32) -> Vec<u8> {
    let mut n = format!("{i:07}-").into_bytes();
    n.resize(200, b'a' + (i % 26) as u8);
    n
}

fn listing(fs: &Fs, dir: u64) -> BTreeSet<Vec<u8>> {
    let mut names = BTreeSet::new();
    let mut off = 0;
    loop {
        let mut more = false;
        fs.readdir(dir, off, &mut |e| {
            off = e.next_offset;
            more = true;
            if e.name != b"." && e.name != b".." {
                assert!(names.insert(e.name.clone()), "name listed twice");
            }
            true
        })
        .unwrap();
        if !more {
            return names;
        }
    }
}

fn check(fs: &Fs, dir: u64, model: &BTreeSet<Vec<u8>>, gone: &[Vec<u8>], what: &str) {
    assert_eq!(&listing(fs, dir), model, "{what}: listing");
    for n in model {
        fs.lookup(dir, n).unwrap_or_else(|e| panic!("{what}: lookup of a live name: {e}"));
    }
    for n in gone {
        assert!(fs.lookup(dir, n).is_err(), "{what}: a removed name is found");
    }
}

#[test]
fn a_three_level_directory_grown_and_emptied_in_random_order_matches_its_model() {
    let dev = new_image_with(64, &MkfsOptions { block_size: 1024, ..Default::default() });
    let fs = mount_with(&dev, MountOptions { cache_blocks: 256, ..Default::default() });
    let ctx = Ctx::root();
    let dir = fs.names().mkdir(&ctx, ROOT, b"d", 0o755).unwrap().ino;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut model = BTreeSet::new();
    let mut ids: Vec<u32> = (0..2400).collect();
    ids.shuffle(&mut rng);

    // Grow, with a remove now and then (the tree changes under both).
    let mut gone = Vec::new();
    for (k, &i) in ids.iter().enumerate() {
        fs.names().mknod(&ctx, dir, &name(i), libc::S_IFREG | 0o644, 0).unwrap();
        model.insert(name(i));
        if rng.gen_ratio(1, 5) {
            let victim = model.iter().nth(rng.gen_range(0..model.len())).unwrap().clone();
            fs.names().unlink(dir, &victim).unwrap();
            model.remove(&victim);
            gone.push(victim);
        }
        if k % 600 == 599 {
            check(&fs, dir, &model, &gone, "growing");
        }
    }
    check(&fs, dir, &model, &gone, "grown");
    let blocks_full = fs.inodes().getattr(dir).unwrap().blocks;
    // Attr blocks are 512-byte units: more nodes than two levels can hold
    // (an internal node of 1 KiB has 62 children) means three levels.
    assert!(blocks_full / 2 > 63, "the tree has {} nodes: not three levels", blocks_full / 2);

    // Empty it in random order, checking as the levels go.
    let mut left: Vec<Vec<u8>> = model.iter().cloned().collect();
    left.shuffle(&mut rng);
    for (k, n) in left.iter().enumerate() {
        fs.names().unlink(dir, n).unwrap();
        model.remove(n);
        gone.push(n.clone());
        if k % 400 == 399 || model.len() < 6 {
            check(&fs, dir, &model, &gone[gone.len().saturating_sub(50)..], "emptying");
        }
    }
    assert!(model.is_empty());
    assert!(listing(&fs, dir).is_empty());
    assert!(fs.inodes().getattr(dir).unwrap().blocks < blocks_full, "the emptied tree kept its nodes");
    fs.names().rmdir(ROOT, b"d").unwrap();
    unmount_clean(&fs, dev.as_ref(), "after the directory was emptied");
}
