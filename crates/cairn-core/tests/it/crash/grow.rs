//! Crash states of a grow while mounted (`Fs::grow`): before, during and
//! after it, and while the new groups take their first files. Every state
//! must replay to a tree of the workload, pass fsck (a backup copy may still
//! name the old size: the copies are rewritten after the grow commits), and
//! after the grow's commit show the grown size.

use super::*;

/// 1 KiB blocks in groups of 4 MiB; a 6 MiB file system (a short second
/// group) on the 16 MiB device, grown to all of it: the short group fills
/// up, and two groups come (group 3 with a backup copy).
const GROW: Config = Config {
    name: "grow while mounted",
    block_size: 1024,
    blocks_per_group: Some(4096),
    fs_mib: Some(6),
    fsck_allows: &[cairn_fsck::Code::SbBackupCopy],
    ..NORMAL
};

fn grow_steps() -> Vec<Step> {
    let c = Ctx::root();
    let ino = |fs: &Fs, name: &[u8]| fs.lookup(1, name).unwrap().ino;
    let mut fill: Step = step![move |fs: &Fs| {
        let big = fs.names().mknod(&c, 1, b"big", libc::S_IFREG | 0o644, 0).unwrap().ino;
        // More than the old file system had free: the new groups hold it.
        for i in 0..9u64 {
            fs.files().write(big, i << 20, &vec![i as u8 + 1; 1 << 20]).unwrap();
        }
    }];
    fill.push(Box::new(move |fs: &Fs| {
        fs.names().mkdir(&c, 1, b"d", 0o755).unwrap();
    }));
    for i in 0..40 {
        fill.push(Box::new(move |fs: &Fs| {
            let d = ino(fs, b"d");
            let f = fs.names().mknod(&c, d, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
            fs.files().write(f, 0, &[i as u8; 2000]).unwrap();
        }));
    }
    vec![
        step![move |fs: &Fs| {
            let a = fs.names().mknod(&c, 1, b"a", libc::S_IFREG | 0o644, 0).unwrap().ino;
            fs.files().write(a, 0, &[9u8; 100_000]).unwrap();
        }],
        step![|fs: &Fs| {
            let g = fs.grow(16 << 20).unwrap();
            assert_eq!((g.old_groups, g.new_groups), (2, 4));
        }],
        fill,
        step![move |fs: &Fs| fs.names().unlink(1, b"a").unwrap(), move |fs: &Fs| fs
            .setxattr(ino(fs, b"big"), b"user.grown", b"yes", 0)
            .unwrap(),],
    ]
}

#[test]
fn a_grow_while_mounted_survives_every_crash_point() {
    let r = record(&GROW, "grow", &grow_steps());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let n = check_all("grow", &r, &GROW, &mut rng, 12);
    eprintln!(
        "crash harness ({}): {} crash states ({} commits), each fsck'd and mounted consistent",
        GROW.name, n.states, r.stats["journal.commits"]
    );
    assert!(n.states > 50);
    // The last state is the grown file system.
    let fs = Fs::mount(r.state(r.plan.image(r.plan.ops.len(), &[], None)), opts(&GROW)).unwrap();
    assert_eq!(fs.statfs().unwrap().blocks, 16384);
    fs.unmount().unwrap();
}
