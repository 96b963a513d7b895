//! Journal records as recovery reads them (`read_record`): descriptors of
//! every kind, body blocks, zstd-compressed bodies, commit blocks; and the
//! journal superblock.
//!
//! Input: a flags byte, the record's sequence number (8 bytes), then ring
//! blocks of 1 KiB. With flag bit 0 the harness restamps what the reader
//! verifies (descriptors' sequence number and checksum, each commit's
//! length, body checksum and checksum), so that mutations reach the parsing
//! behind the checksums.
#![no_main]

use cairn_format::codec::{get_u32, put_u32, put_u64};
use cairn_format::journal::*;
use cairn_fuzz::{le_u64, restamp, SEED};
use libfuzzer_sys::fuzz_target;

const BS: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let seq = le_u64(rest);
    let body = rest.get(8..).unwrap_or(&[]);
    let mut blocks: Vec<Vec<u8>> = body.chunks(BS).take(24).map(|c| cairn_fuzz::padded(c, BS)).collect();
    if blocks.is_empty() {
        return;
    }
    let _ = JournalSuper::decode(SEED, 100, &blocks[0], blocks.len() as u64 + 1);
    if flags & 1 == 1 {
        for b in blocks.iter_mut() {
            let m = get_u32(b, 0);
            if [DESC_MAGIC, REGION_DESC_MAGIC, ZREGION_DESC_MAGIC, JSB_MAGIC].contains(&m) {
                if m != JSB_MAGIC {
                    put_u64(b, 8, seq);
                }
                restamp(b, 28, SEED);
            }
        }
        let mut crc = body_seed(SEED, seq);
        for i in 0..blocks.len() {
            if get_u32(&blocks[i], 0) == COMMIT_MAGIC {
                let b = &mut blocks[i];
                put_u32(b, 4, i as u32 + 1);
                put_u64(b, 8, seq);
                put_u32(b, 16, crc);
                restamp(b, 28, SEED);
            }
            crc = body_crc_append(crc, &blocks[i]);
        }
    }
    let _ = JournalSuper::decode(SEED, 100, &blocks[0], blocks.len() as u64 + 1);
    let n = blocks.len() as u64;
    // The ring: blocks at positions 1..=n; homes anywhere but the journal.
    let region = JournalRegion::contiguous(100, n + 1, 1 << 20);
    let walk = read_record(SEED, &region, LogPos { seq, off: 1 }, |off| {
        Ok::<_, ()>(blocks.get(off as usize - 1).cloned().unwrap_or_else(|| vec![0u8; BS]))
    });
    if let Ok(Walk::Record(rec)) = walk {
        let mut home = vec![0u8; BS];
        for p in &rec.patches {
            assert!(region.valid_home(p.home), "a verified record names a home block in the journal");
            p.apply(&mut home);
        }
    }
});
