//! A journaled write copies at most `-o write_step_kib` of file data into
//! the image per transaction handle (see `file`): a larger write goes on in
//! further handles (`tx.steps`), and every byte lands where it belongs,
//! through holes, unwritten (fallocated) ranges and a remount alike.

use crate::common::*;
use cairn_core::{Ctx, MountOptions};

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8).collect()
}

/// Writes 1 MiB into a hole and 300,000 bytes across a fallocated range
/// at an unaligned offset; returns the steps counted and checks the bytes.
fn write_and_check(opts: MountOptions) -> u64 {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts.clone());
    let c = Ctx::root();
    let f = fs.names().mknod(&c, 1, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
    let big = pattern(1 << 20, 1);
    let steps0 = stat(&fs, "tx.steps");
    assert_eq!(fs.files().write(f, 0, &big).unwrap() as usize, big.len());
    let g = fs.names().mknod(&c, 1, b"g", libc::S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().fallocate(g, 0, 1 << 20, libc::FALLOC_FL_KEEP_SIZE).unwrap();
    let mid = pattern(300_000, 7);
    assert_eq!(fs.files().write(g, 12_345, &mid).unwrap() as usize, mid.len());
    let steps = stat(&fs, "tx.steps") - steps0;
    let check = |fs: &cairn_core::Fs| {
        assert_eq!(fs.files().read(f, 0, 1 << 20).unwrap(), big);
        let back = fs.files().read(g, 0, 12_345 + 300_000).unwrap();
        assert!(back[..12_345].iter().all(|&b| b == 0), "the unwritten range before the write reads zeros");
        assert_eq!(&back[12_345..], &mid[..]);
    };
    check(&fs);
    fs.unmount().unwrap();
    let fs = mount_with(&dev, opts);
    check(&fs);
    unmount_clean(&fs, dev.as_ref(), "journaled writes in steps");
    steps
}

#[test]
fn a_large_journaled_write_is_copied_in_steps_and_reads_back_whole() {
    let stepped = write_and_check(MountOptions::default());
    // 1 MiB in 128 KiB steps, and 300,000 bytes in three.
    assert!(stepped >= 7 + 2, "{stepped} steps");
    let whole = write_and_check(MountOptions { write_step_kib: 0, ..Default::default() });
    assert!(whole < stepped, "write_step_kib=0: {whole} steps, against {stepped}");
}
