//! Helpers: images in RAM, mounting, remounting.

use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::fsck_source::DeviceSource;
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Fs, MountOptions};
use std::sync::Arc;

/// A freshly formatted in-memory image of `mib` MiB.
pub fn new_image(mib: u64) -> Arc<MemDevice> {
    new_image_with(mib, &MkfsOptions::default())
}

/// A freshly formatted in-memory image with options.
pub fn new_image_with(mib: u64, opts: &MkfsOptions) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(mib << 20));
    format(dev.as_ref(), opts, &mut |_, _| {}).expect("mkfs");
    dev
}

/// Mounts `dev` with default options.
pub fn mount(dev: &Arc<MemDevice>) -> Arc<Fs> {
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mount(d, MountOptions::default()).expect("mount")
}

/// A freshly formatted in-memory image of `mib` MiB, mounted with default
/// options: (the image, the mount).
pub fn mounted_image(mib: u64) -> (Arc<MemDevice>, Arc<Fs>) {
    let dev = new_image(mib);
    let fs = mount(&dev);
    (dev, fs)
}

/// Mounts `dev` with `opts`.
pub fn mount_with(dev: &Arc<MemDevice>, opts: MountOptions) -> Arc<Fs> {
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mount(d, opts).expect("mount")
}

/// Rewrites the superblock of the unmounted image `dev` after `edit` (as an
/// image made by an older build, say).
pub fn edit_superblock(dev: &MemDevice, edit: impl FnOnce(&mut cairn_format::superblock::Superblock)) {
    let mut b = vec![0u8; 4096];
    dev.read_at(&mut b, 0).unwrap();
    let mut sb = cairn_format::superblock::Superblock::decode(&b, dev.size()).unwrap();
    edit(&mut sb);
    sb.encode(&mut b);
    dev.write_at(&b, 0).unwrap();
}

/// A live counter of `fs` by name (panics if there is no such counter).
pub fn stat(fs: &Fs, name: &str) -> u64 {
    fs.stats().into_iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no counter {name}")).1
}

/// Runs the independent checker on `dev` (not mounted); returns its report.
pub fn fsck_mem(dev: &dyn BlockDevice, what: &str) -> cairn_fsck::Report {
    cairn_fsck::check_image(&DeviceSource(dev), &cairn_fsck::Options::default())
        .unwrap_or_else(|e| panic!("{what}: fsck cannot check it: {e}"))
}

/// Runs the independent checker on `dev` (not mounted) and panics with its
/// findings unless it is clean. Returns the report.
pub fn fsck_clean_mem(dev: &dyn BlockDevice, what: &str) -> cairn_fsck::Report {
    let report = fsck_mem(dev, what);
    if !report.is_clean() {
        let problems: Vec<String> =
            report.problems.iter().take(30).map(|p| format!("  [{}] {}", p.pass, p.message)).collect();
        panic!("{what}: fsck finds {} problem(s):\n{}", report.errors_left(), problems.join("\n"));
    }
    report
}

/// Unmounts `fs` and runs the independent checker on its image `dev`,
/// which must be clean (`what` names the moment). Returns the report.
pub fn unmount_clean(fs: &Fs, dev: &dyn BlockDevice, what: &str) -> cairn_fsck::Report {
    fs.unmount().unwrap();
    fsck_clean_mem(dev, what)
}

/// Creates `name` in the root and writes it 1 MiB at a time until the file
/// system is full (a write that writes nothing or fails with ENOSPC; any
/// other error fails the test); forgets it and returns the bytes written.
pub fn fill_up(fs: &Fs, name: &[u8]) -> u64 {
    let f = fs.names().mknod(&cairn_core::Ctx::root(), 1, name, libc::S_IFREG | 0o644, 0).unwrap();
    let chunk = vec![7u8; 1 << 20];
    let mut off = 0u64;
    loop {
        match fs.files().write(f.ino, off, &chunk) {
            Ok(n) if n > 0 => off += u64::from(n),
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "unexpected error {e}");
                break;
            }
        }
    }
    fs.inodes().forget(f.ino, 1);
    off
}

/// A POSIX ACL xattr value (version 2) of `(tag, perm, id)` entries.
pub fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(t, p, id) in entries {
        v.extend_from_slice(&t.to_le_bytes());
        v.extend_from_slice(&p.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// Waits (up to a minute) until the reaper has nothing queued or running.
pub fn wait_reaped(fs: &Fs) {
    let t0 = std::time::Instant::now();
    while stat(fs, "reaper.backlog_inodes") > 0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the reaper did not finish");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
