//! Several threads at once on one file system: creates, writes, renames and
//! unlinks in shared and private directories must neither deadlock nor lose
//! anything, and the result must survive a remount.

use crate::common::*;
use cairn_core::Ctx;
use std::sync::Arc;

#[test]
fn parallel_namespace_and_data_ops() {
    let (dev, fs) = mounted_image(128);
    let c = Ctx::root();
    let shared = fs.names().mkdir(&c, 1, b"shared", 0o755).unwrap().ino;
    let other = fs.names().mkdir(&c, 1, b"other", 0o755).unwrap().ino;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let fs = Arc::clone(&fs);
            std::thread::spawn(move || {
                let own = fs.names().mkdir(&c, 1, format!("t{t}").as_bytes(), 0o755).unwrap().ino;
                for i in 0..400u64 {
                    let name = format!("f{t}-{i}");
                    let f = fs.names().mknod(&c, shared, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
                    fs.files().write(f.ino, 0, &vec![(t * 31 + i) as u8; (i as usize % 7) * 1500 + 1]).unwrap();
                    if i % 3 == 0 {
                        fs.names().rename(shared, name.as_bytes(), own, name.as_bytes(), 0).unwrap();
                    } else if i % 3 == 1 {
                        // Cross-directory renames in both directions race with the other threads.
                        fs.names().rename(shared, name.as_bytes(), other, name.as_bytes(), 0).unwrap();
                        fs.names().rename(other, name.as_bytes(), shared, name.as_bytes(), 0).unwrap();
                    } else {
                        fs.names().unlink(shared, name.as_bytes()).unwrap();
                    }
                    if i % 50 == 0 {
                        fs.files().sync_fs().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    fs.unmount().unwrap();
    let fs = mount(&dev);
    for t in 0..4u64 {
        let own = fs.lookup(1, format!("t{t}").as_bytes()).unwrap().ino;
        for i in 0..400u64 {
            let name = format!("f{t}-{i}");
            let dir = match i % 3 {
                0 => own,
                1 => shared,
                _ => {
                    assert!(fs.lookup(shared, name.as_bytes()).is_err());
                    continue;
                }
            };
            let a = fs.lookup(dir, name.as_bytes()).unwrap();
            let want = vec![(t * 31 + i) as u8; (i as usize % 7) * 1500 + 1];
            assert_eq!(fs.files().read(a.ino, 0, 20000).unwrap(), want, "{name}");
        }
    }
    fs.unmount().unwrap();
}

/// The conflict probe (`-o debug.conflict_probe`, step S0 of
/// docs/gate-plan.md) counts every handle, and handles that run one after
/// another (deletes included: `sync_delete`) never meet each other's
/// changes; with the probe off it adds no counter.
#[test]
fn the_conflict_probe_counts_handles_and_no_conflict_without_overlap() {
    let counter = |fs: &cairn_core::Fs, key: &str| fs.stats().into_iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let dev = new_image(64);
    // Deletes on this thread: the reaper's handles would run beside ours.
    let opts = cairn_core::MountOptions { conflict_probe: true, sync_delete: true, ..Default::default() };
    let fs = mount_with(&dev, opts);
    let c = Ctx::root();
    let dir = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    for i in 0..200u32 {
        let f = fs.names().mknod(&c, dir, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
        fs.files().write(f.ino, 0, &[i as u8; 3000]).unwrap();
    }
    for i in 0..200u32 {
        fs.names().unlink(dir, format!("f{i}").as_bytes()).unwrap();
    }
    assert!(counter(&fs, "probe.handles").unwrap() >= 600, "every create, write and unlink is a handle");
    assert_eq!(counter(&fs, "probe.handles_conflicting"), Some(0));
    assert_eq!(counter(&fs, "probe.handles_shared_only"), Some(0));
    fs.unmount().unwrap();
    let fs = mount(&dev);
    assert_eq!(counter(&fs, "probe.handles"), None, "off unless asked");
    fs.unmount().unwrap();
}
