//! Xattr blocks and external value blocks: raw and with a valid checksum.
#![no_main]

use cairn_format::codec::{put_u32, put_u64};
use cairn_format::xattr::{ValueBlock, XattrBlock, XATTR_MAGIC, XVAL_MAGIC};
use cairn_fuzz::{padded, restamp, SEED};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let blocknr = 99;
    let _ = XattrBlock::decode(SEED, blocknr, data);
    let _ = ValueBlock::decode(SEED, blocknr, data);
    let size = if data.first().is_some_and(|b| b & 1 == 1) { 4096 } else { 1024 };
    let mut b = padded(data.get(1..).unwrap_or(&[]), size);
    put_u32(&mut b, 0, XATTR_MAGIC);
    put_u64(&mut b, 16, blocknr);
    restamp(&mut b, 28, SEED);
    if let Ok(x) = XattrBlock::decode(SEED, blocknr, &b) {
        let _ = x.entries.len();
    }
    put_u32(&mut b, 0, XVAL_MAGIC);
    restamp(&mut b, 12, SEED);
    let _ = ValueBlock::decode(SEED, blocknr, &b);
});
