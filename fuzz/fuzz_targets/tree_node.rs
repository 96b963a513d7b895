//! B+tree nodes (directory and extent trees, the orphan list): the node
//! decoder and the read-only view, then every leaf value as a directory
//! entry and as an extent.
#![no_main]

use cairn_format::btree::{Node, NodeView, NODE_MAGIC};
use cairn_format::codec::put_u32;
use cairn_format::dirent::Dirent;
use cairn_format::extent::Extent;
use cairn_fuzz::{padded, restamp, SEED};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let blocknr = 77;
    let _ = Node::decode(SEED, blocknr, data);
    // Block sizes 1 and 4 KiB.
    let size = if data.first().is_some_and(|b| b & 1 == 1) { 4096 } else { 1024 };
    let mut b = padded(data.get(1..).unwrap_or(&[]), size);
    put_u32(&mut b, 0, NODE_MAGIC);
    restamp(&mut b, 28, SEED);
    if let Ok(v) = NodeView::parse(blocknr, &b) {
        for i in 0..v.len() {
            let _ = v.key(i);
            if v.level() == 0 {
                let val = v.value(i);
                let _ = Dirent::decode(1, val);
                if val.len() >= 16 {
                    let _ = Extent::decode_value(v.key(i), val);
                }
            } else {
                let _ = v.child(i);
            }
        }
    }
    if let Ok(n) = Node::decode(SEED, blocknr, &b) {
        assert_eq!(Node::parse(blocknr, &b), Ok(n));
    }
});
