//! The encrypted image's header (#54): decoding either copy, raw and with
//! a valid checksum, and picking between two copies on a device. Damaged
//! bytes give an error, never a panic; what decodes encodes back to the
//! same bytes.
#![no_main]

use cairn_core::dev::MemDevice;
use cairn_format::crypt_header::{pick, CryptHeader, COPY_OFFSET, HEADER_BYTES, MAGIC};
use cairn_fuzz::padded;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = CryptHeader::decode(data);
    let mut b = padded(data, HEADER_BYTES);
    b[..8].copy_from_slice(MAGIC);
    let crc = crc32c::crc32c(&b[..HEADER_BYTES - 4]);
    b[HEADER_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    let second = padded(data.get(HEADER_BYTES..).unwrap_or(&[]), HEADER_BYTES);
    let _ = pick(&second, &b);
    if let Ok(h) = CryptHeader::decode(&b) {
        assert_eq!(h.encode(), b, "decode then encode gives the same bytes");
        for (_, slot) in h.used_slots() {
            slot.cost.check().expect("a decoded slot's cost is within bounds");
        }
    }
    // The same bytes as the primary and as the copy on a device.
    let mut image = vec![0u8; COPY_OFFSET as usize + HEADER_BYTES];
    image[..HEADER_BYTES].copy_from_slice(&second);
    image[COPY_OFFSET as usize..].copy_from_slice(&b);
    let _ = cairn_core::crypt::read_header(&MemDevice::from_bytes(image));
});
