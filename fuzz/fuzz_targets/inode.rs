//! The inode decoder (with and without its checksum), and what fsck and
//! the engine do with a decoded inode's extents and inline data.
#![no_main]

use cairn_format::inode::{DiskInode, INODE_FLAG_ORPHAN, INODE_SIZE};
use cairn_fuzz::{padded, restamp, SEED};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ino = u64::from(data.first().copied().unwrap_or(1)).max(1);
    let _ = DiskInode::decode(SEED, ino, data);
    let _ = DiskInode::decode_ignoring_checksum(SEED, ino, data);
    let mut b = padded(data.get(1..).unwrap_or(&[]), INODE_SIZE);
    let seed = SEED ^ ino as u32 ^ (ino >> 32) as u32;
    restamp(&mut b, 120, seed);
    if let Ok(d) = DiskInode::decode(SEED, ino, &b) {
        // The encoder writes the flags the data area implies and the orphan
        // flag; unknown bits (which fsck reports) are not kept.
        let mut again = vec![0u8; INODE_SIZE];
        d.encode(SEED, ino, &mut again);
        let back = DiskInode::decode(SEED, ino, &again).expect("an encoded inode decodes");
        assert_eq!(back.flags & INODE_FLAG_ORPHAN, d.flags & INODE_FLAG_ORPHAN);
        assert_eq!(DiskInode { flags: 0, ..back }, DiskInode { flags: 0, ..d }, "encode/decode round trip");
    }
});
