//! The superblock decoder, the geometry derived from it, and the backup
//! superblock search: raw and with a valid checksum.
#![no_main]

use cairn_format::backup;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, SB_SIZE};
use cairn_fuzz::{le_u64, padded, restamp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let image_bytes = match le_u64(data.get(SB_SIZE..).unwrap_or(&[])) {
        0 => u64::MAX,
        n => n,
    };
    let _ = Superblock::decode(data, image_bytes);
    let mut b = padded(data, SB_SIZE);
    b[..8].copy_from_slice(cairn_format::superblock::MAGIC);
    restamp(&mut b, 508, 0xffff_ffff);
    let Ok(sb) = Superblock::decode(&b, image_bytes) else { return };
    let probe = le_u64(data.get(SB_SIZE + 8..).unwrap_or(&[]));
    let _ = backup::decode_copy(&b, image_bytes % (1 << 40), image_bytes);
    if probe & 0xff == 0 {
        // Tens of thousands of offsets: not every time.
        let _ = backup::search_offsets(Some((sb.block_size(), sb.blocks_per_group)), image_bytes.min(1 << 30)).len();
    }
    let Ok(geo) = Geometry::new(&sb) else { return };
    // The geometry answers for any group, block and inode it is asked about.
    for g in [0, 1, probe % geo.group_count, geo.group_count - 1] {
        let _ = (geo.meta_start(g), geo.initially_used(g), geo.has_backup_superblock(g));
    }
    let _ = geo.backup_groups().take(64).count();
    let _ = geo.valid_data_range(probe, probe >> 40);
    if geo.valid_ino(probe) {
        let _ = geo.inode_location(probe);
    }
    let mut again = vec![0u8; SB_SIZE];
    sb.encode(&mut again);
    assert_eq!(Superblock::decode(&again, image_bytes).as_ref(), Ok(&sb), "encode/decode round trip");
});
