//! crc32c checksums, seeded per file system.
//!
//! Every checksum is `crc32c(seed, bytes-with-checksum-field-zeroed)` where the
//! seed is `crc32c(0, uuid)`. Seeding with the UUID means a block copied from
//! another cairn image (or left over from a previous mkfs) fails verification.
//! Inode checksums also fold in the inode number, and block checksums the
//! block number (stored in the block header), so a misdirected write is caught.

/// The per-file-system seed: crc32c of the UUID.
pub fn seed_from_uuid(uuid: &[u8; 16]) -> u32 {
    crc32c::crc32c(uuid)
}

/// crc32c of `data` with the 4 bytes at `csum_off` treated as zero.
pub fn crc_skipping(seed: u32, data: &[u8], csum_off: usize) -> u32 {
    if csum_off + 4 > data.len() {
        return crc32c::crc32c_append(seed, data);
    }
    let c = crc32c::crc32c_append(seed, &data[..csum_off]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &data[csum_off + 4..])
}

/// Plain crc32c continuing from `seed`.
pub fn crc(seed: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(seed, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipping_equals_zeroed_field() {
        let mut d = vec![7u8; 64];
        d[10..14].copy_from_slice(&[1, 2, 3, 4]);
        let a = crc_skipping(5, &d, 10);
        d[10..14].copy_from_slice(&[0; 4]);
        assert_eq!(a, crc(5, &d));
    }
}
