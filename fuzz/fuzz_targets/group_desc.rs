//! The group descriptor decoder: raw and with a valid checksum.
#![no_main]

use cairn_format::group_desc::{GroupDesc, GD_SIZE};
use cairn_fuzz::{padded, restamp, SEED};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let group = u64::from(data.first().copied().unwrap_or(0));
    let _ = GroupDesc::decode(SEED, group, data);
    let mut b = padded(data.get(1..).unwrap_or(&[]), GD_SIZE);
    restamp(&mut b, 60, SEED ^ group as u32);
    if let Ok(gd) = GroupDesc::decode(SEED, group, &b) {
        let mut again = vec![0u8; GD_SIZE];
        gd.encode(SEED, group, &mut again);
        assert_eq!(GroupDesc::decode(SEED, group, &again), Ok(gd), "encode/decode round trip");
    }
});
