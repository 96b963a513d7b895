//! A damaged record in the middle of the journal (issue 32, item 2): eight
//! synced batches of files, a crash, one byte flipped in the body of the
//! second record. Before the fix, fsck said clean, mount replayed the first
//! record only and dropped seven synced checkpoints, and new records landed
//! exactly on the old ones so that stale records verified again at the next
//! mount. Now mount refuses with a clear message and writes nothing, fsck
//! reports the damage, and `--repair` replays the records before it and
//! restarts the log so that nothing stale can be replayed later.

use crate::common::*;
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::{Ctx, Fs, MountOptions};
use cairn_format::inode::S_IFREG;
use cairn_format::journal::{read_record, JournalRegion, JournalSuper, LogPos, Walk};
use std::sync::Arc;
use std::time::Duration;

/// Ring positions of the records in the log of `bytes`, from its tail.
fn log_records(bytes: &[u8]) -> Vec<LogPos> {
    let (sb, _, seed) = sb_geo(bytes);
    let bs = sb.block_size() as usize;
    let region = JournalRegion::of(&sb);
    let at = region.start as usize * bs;
    let jsb = JournalSuper::decode(seed, region.start, &bytes[at..at + bs], region.blocks).unwrap();
    let mut pos = LogPos { seq: jsb.tail_seq, off: jsb.tail_off };
    let mut out = Vec::new();
    let read = |off: u64| -> Result<Vec<u8>, ()> {
        let b = region.block_of(off) as usize * bs;
        Ok(bytes[b..b + bs].to_vec())
    };
    while let Walk::Record(rec) = read_record(seed, &region, pos, read).unwrap() {
        out.push(pos);
        pos = rec.next;
    }
    out
}

/// Eight batches of files, each followed by `sync_fs`, then a crash: the
/// image as the device holds it, with at least three records to replay.
fn crashed_after_synced_batches() -> Vec<u8> {
    let dev = new_image(48, &small_groups());
    let opts = MountOptions { commit_interval: Duration::from_secs(3600), ..Default::default() };
    let fs = Fs::mount(dev.clone(), opts).expect("mount");
    let c = Ctx::root();
    for batch in 0..8 {
        let d = fs.names().mkdir(&c, ROOT, format!("batch{batch}").as_bytes(), 0o755).unwrap().ino;
        for i in 0..20 {
            let f = fs.names().mknod(&c, d, format!("f{i}").as_bytes(), S_IFREG | 0o644, 0).unwrap().ino;
            fs.files().write(f, 0, format!("batch {batch} file {i}").as_bytes()).unwrap();
        }
        fs.files().sync_fs().unwrap();
    }
    let bytes = dev.snapshot();
    drop(fs);
    assert!(log_records(&bytes).len() >= 3, "the crash image should hold several records to replay");
    bytes
}

#[test]
fn a_damaged_record_in_the_middle_of_the_log_is_refused_reported_and_repaired() {
    let mut bytes = crashed_after_synced_batches();
    let records = log_records(&bytes);
    let (sb, _, _) = sb_geo(&bytes);
    let bs = sb.block_size() as usize;
    let region = JournalRegion::of(&sb);
    // One byte of the second record's body (the block after its descriptor).
    let body = region.block_of(region.next(records[1].off, 1)) as usize * bs;
    bytes[body + 100] ^= 0x40;

    // Mount refuses and writes nothing.
    let dev = Arc::new(MemDevice::from_bytes(bytes.clone()));
    let d: Arc<dyn BlockDevice> = dev.clone();
    let err = Fs::mount(d, MountOptions::default()).err().expect("a damaged log must not mount");
    let msg = err.to_string();
    assert!(msg.contains("journal damaged"), "{msg}");
    assert!(msg.contains(&format!("record {} at ring block {}", records[1].seq, records[1].off)), "{msg}");
    assert!(msg.contains("cairn fsck --repair"), "{msg}");
    assert!(dev.snapshot() == bytes, "a refused mount wrote to the image");

    // fsck reports it and writes nothing.
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), false);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("journal damaged"), "{out}");
    assert_eq!(std::fs::read(f.path()).unwrap(), bytes, "a check must not write");

    // Repair replays the first record, drops the rest, restarts the log.
    let (code, out) = fsck(f.path(), true);
    assert!(out.contains("replayed the 1 record(s) before the damage"), "{out}");
    assert!(code == 1 || code == 0, "repair exit {code}:\n{out}");
    let repaired = std::fs::read(f.path()).unwrap();
    let (code2, out) = fsck(f.path(), false);
    assert_eq!(code2, 0, "the repaired image checks clean:\n{out}");
    assert!(log_records(&repaired).is_empty(), "the repaired log is empty");

    // The repaired image mounts; new records never line up with the stale
    // ones after the damage: after more synced work and another crash, the
    // log replays and fsck finds no journal problem.
    let dev = Arc::new(MemDevice::from_bytes(repaired));
    let d: Arc<dyn BlockDevice> = dev.clone();
    let opts = MountOptions { commit_interval: Duration::from_secs(3600), ..Default::default() };
    let fs = Fs::mount(d, opts).expect("the repaired image mounts");
    let c = Ctx::root();
    for batch in 0..4 {
        let dir = fs.names().mkdir(&c, ROOT, format!("after{batch}").as_bytes(), 0o755).unwrap().ino;
        for i in 0..20 {
            fs.names().mknod(&c, dir, format!("g{i}").as_bytes(), S_IFREG | 0o644, 0).unwrap();
        }
        fs.files().sync_fs().unwrap();
    }
    let crashed = dev.snapshot();
    drop(fs);
    let f = to_file(&crashed);
    let (_, out) = fsck(f.path(), false);
    assert!(!out.contains("journal damaged"), "{out}");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(crashed));
    let fs = Fs::mount(dev, MountOptions::default()).expect("mount after the second crash");
    for batch in 0..4 {
        let dir = fs.lookup(ROOT, format!("after{batch}").as_bytes()).expect("every synced batch is there").ino;
        for i in 0..20 {
            fs.lookup(dir, format!("g{i}").as_bytes()).expect("every synced file is there");
        }
    }
    fs.unmount().unwrap();
}
