//! The header of an encrypted image (#54): what a reader needs to turn a
//! passphrase or key file into the master key, and where the encrypted
//! blocks start.
//!
//! ## Purpose
//! `cairn mkfs --encrypt` puts this header in front of a cairn file system
//! whose every block (superblock, journal, trees, data) is encrypted with
//! AES-256-XTS under a random 512-bit master key, the block number as the
//! tweak (dm-crypt's `aes-xts-plain64`). The header holds that master key
//! only wrapped, once per key slot (as LUKS2's keyslots): each slot records
//! the Argon2id cost and salt that turn its secret (a passphrase, or the
//! bytes of a key file) into a 256-bit key-encryption key, and the master
//! key wrapped under it with AES-KW (RFC 3394, whose integrity check
//! rejects a wrong key). A digest of the master key (Argon2id at a small
//! cost, its own salt) confirms an unwrapped key before any block is
//! decrypted. This module only encodes and decodes; the cryptography lives
//! in `cairn_core::crypt`.
//!
//! ## On-disk layout
//! The header is [`HEADER_BYTES`] long, little-endian, at byte 0 of the
//! image, with an identical copy at [`COPY_OFFSET`]; the encrypted file
//! system starts at `data_offset` ([`DATA_OFFSET`], 1 MiB, a multiple of
//! every block size cairn supports), and its block `n` is the image's
//! bytes `data_offset + n * block_size ..`. The copy sits inside the same
//! head region rather than at the image's end so that growing or shrinking
//! the file system never moves it.
//!
//! | bytes      | field |
//! |------------|-------|
//! | 0..8       | magic `CAIRNCRY` |
//! | 8..12      | version (1) |
//! | 12..16     | header bytes (4096) |
//! | 16..48     | cipher name, NUL-padded (`aes-xts-plain64`) |
//! | 48..52     | master key bytes (64) |
//! | 52..56     | block size (the XTS sector size) |
//! | 56..64     | data offset in bytes |
//! | 64..72     | generation (bumped at every rewrite of the header) |
//! | 72..88     | image id (random, made at mkfs) |
//! | 88..100    | digest cost: Argon2id memory KiB, passes, lanes |
//! | 100..132   | digest salt |
//! | 132..164   | digest: Argon2id(master key, digest salt) |
//! | 164..168   | slot count ([`SLOTS`]) |
//! | 168..1192  | [`SLOTS`] slots of [`SLOT_BYTES`]: kind (0 empty, 1 passphrase, 2 key file), 3 zero bytes, cost (memory KiB, passes, lanes), salt (32), wrapped master key (72), 8 zero bytes |
//! | 1192..4092 | zero |
//! | 4092..4096 | crc32c of bytes 0..4092 |
//!
//! ## Invariants
//! [`CryptHeader::decode`] accepts only what [`CryptHeader::encode`] can
//! write: a known version and cipher, a block size cairn supports, a data
//! offset past both copies and aligned to the block size, slot kinds it
//! knows, Argon2id costs within bounds (so a damaged header cannot ask for
//! terabytes of memory), zero reserved bytes, and a matching checksum.
//! Damaged bytes give a [`FormatError`], never a panic.

use crate::FormatError;

/// Magic number at byte 0 of an encrypted image.
pub const MAGIC: &[u8; 8] = b"CAIRNCRY";
/// The only version written and read.
pub const VERSION: u32 = 1;
/// Bytes of one copy of the header.
pub const HEADER_BYTES: usize = 4096;
/// Byte offset of the header's copy.
pub const COPY_OFFSET: u64 = 512 << 10;
/// Byte offset of the encrypted file system's block 0, as mkfs makes it.
pub const DATA_OFFSET: u64 = 1 << 20;
/// The one cipher: AES-256 in XTS mode, the block number as the tweak.
pub const CIPHER: &str = "aes-xts-plain64";
/// Bytes of the master key (two AES-256 keys, as XTS needs).
pub const MASTER_KEY_BYTES: usize = 64;
/// Bytes of a master key wrapped with AES-KW (the key and its 8-byte check).
pub const WRAPPED_BYTES: usize = MASTER_KEY_BYTES + 8;
/// Bytes of a salt.
pub const SALT_BYTES: usize = 32;
/// Bytes of the master key's digest.
pub const DIGEST_BYTES: usize = 32;
/// Number of key slots.
pub const SLOTS: usize = 8;
/// Bytes of one key slot.
pub const SLOT_BYTES: usize = 128;

const SLOTS_AT: usize = 168;
const CRC_AT: usize = HEADER_BYTES - 4;
/// Argon2id memory cost bounds, KiB (8 KiB is Argon2's least; 4 GiB a sane most).
const MAX_MEMORY_KIB: u32 = 4 << 20;
const MIN_MEMORY_KIB: u32 = 8;
const MAX_PASSES: u32 = 1000;
const MAX_LANES: u32 = 64;
/// The largest data offset a reader accepts (16 MiB, as LUKS2's largest header).
const MAX_DATA_OFFSET: u64 = 16 << 20;

/// An Argon2id cost, as recorded in a slot or for the digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Argon2Cost {
    /// Memory in KiB.
    pub memory_kib: u32,
    /// Passes over the memory.
    pub passes: u32,
    /// Lanes (parallelism).
    pub lanes: u32,
}

/// What kind of secret opens a slot (only a label: both go through Argon2id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// A passphrase typed or piped in.
    Passphrase,
    /// The bytes of a key file.
    KeyFile,
}

/// A used key slot: the master key wrapped under a key derived from a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySlot {
    pub kind: SlotKind,
    pub cost: Argon2Cost,
    pub salt: [u8; SALT_BYTES],
    /// The master key wrapped with AES-KW under Argon2id(secret, salt).
    pub wrapped: [u8; WRAPPED_BYTES],
}

/// Confirms an unwrapped master key: Argon2id(master key, salt) at `cost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDigest {
    pub cost: Argon2Cost,
    pub salt: [u8; SALT_BYTES],
    pub digest: [u8; DIGEST_BYTES],
}

/// The decoded header of an encrypted image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptHeader {
    /// The XTS sector size: the file system's block size.
    pub block_size: u32,
    /// Byte offset of the file system's block 0.
    pub data_offset: u64,
    /// Bumped each time the header is rewritten.
    pub generation: u64,
    /// Random, made at mkfs.
    pub image_id: [u8; 16],
    pub digest: KeyDigest,
    /// Slot `i` is `slots[i]`; `None` is an empty slot.
    pub slots: [Option<KeySlot>; SLOTS],
}

/// Whether `head` starts with an encrypted image's magic number.
pub fn has_magic(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

fn corrupt(detail: impl Into<String>) -> FormatError {
    FormatError::corrupt("encryption header", 0, detail)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | (u64::from(u32_at(b, at + 4)) << 32)
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

impl Argon2Cost {
    fn decode(b: &[u8], at: usize) -> Result<Argon2Cost, FormatError> {
        let cost = Argon2Cost { memory_kib: u32_at(b, at), passes: u32_at(b, at + 4), lanes: u32_at(b, at + 8) };
        cost.check().map(|()| cost)
    }

    /// `Err` unless every figure is within what a reader will spend.
    pub fn check(&self) -> Result<(), FormatError> {
        let ok = (1..=MAX_LANES).contains(&self.lanes)
            && (1..=MAX_PASSES).contains(&self.passes)
            && (MIN_MEMORY_KIB.max(8 * self.lanes)..=MAX_MEMORY_KIB).contains(&self.memory_kib);
        if ok {
            Ok(())
        } else {
            Err(corrupt(format!(
                "Argon2id cost out of bounds ({} KiB, {} passes, {} lanes)",
                self.memory_kib, self.passes, self.lanes
            )))
        }
    }

    fn encode(&self, b: &mut [u8], at: usize) {
        b[at..at + 4].copy_from_slice(&self.memory_kib.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&self.passes.to_le_bytes());
        b[at + 8..at + 12].copy_from_slice(&self.lanes.to_le_bytes());
    }
}

impl KeySlot {
    fn decode(b: &[u8], index: usize) -> Result<Option<KeySlot>, FormatError> {
        let s = &b[SLOTS_AT + index * SLOT_BYTES..SLOTS_AT + (index + 1) * SLOT_BYTES];
        let kind = match s[0] {
            0 if s.iter().all(|&x| x == 0) => return Ok(None),
            0 => return Err(corrupt(format!("empty key slot {index} holds data"))),
            1 => SlotKind::Passphrase,
            2 => SlotKind::KeyFile,
            k => return Err(corrupt(format!("key slot {index} has unknown kind {k}"))),
        };
        if s[1..4].iter().chain(&s[120..]).any(|&x| x != 0) {
            return Err(corrupt(format!("key slot {index}: reserved bytes are not zero")));
        }
        let cost = Argon2Cost::decode(s, 4).map_err(|e| corrupt(format!("key slot {index}: {e}")))?;
        Ok(Some(KeySlot { kind, cost, salt: array(s, 16), wrapped: array(s, 48) }))
    }

    fn encode(&self, s: &mut [u8]) {
        s[0] = match self.kind {
            SlotKind::Passphrase => 1,
            SlotKind::KeyFile => 2,
        };
        self.cost.encode(s, 4);
        s[16..48].copy_from_slice(&self.salt);
        s[48..120].copy_from_slice(&self.wrapped);
    }
}

impl CryptHeader {
    /// Decodes and verifies one copy of the header (`b` at least
    /// [`HEADER_BYTES`] long).
    pub fn decode(b: &[u8]) -> Result<CryptHeader, FormatError> {
        if b.len() < HEADER_BYTES {
            return Err(corrupt(format!("{} bytes, shorter than a header ({HEADER_BYTES})", b.len())));
        }
        let b = &b[..HEADER_BYTES];
        if !has_magic(b) {
            return Err(FormatError::bad_magic("encryption header", 0));
        }
        let (stored, computed) = (u32_at(b, CRC_AT), crc32c::crc32c(&b[..CRC_AT]));
        if stored != computed {
            return Err(FormatError::Checksum { what: "encryption header", at: 0, stored, computed });
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(FormatError::Incompatible(format!(
                "encryption header version {version} (this build reads {VERSION})"
            )));
        }
        let name_end = b[16..48].iter().position(|&x| x == 0).unwrap_or(32);
        let cipher = &b[16..16 + name_end];
        if cipher != CIPHER.as_bytes() || b[16 + name_end..48].iter().any(|&x| x != 0) {
            return Err(FormatError::Incompatible(format!("cipher {:?}", String::from_utf8_lossy(cipher))));
        }
        if u32_at(b, 12) as usize != HEADER_BYTES || u32_at(b, 48) as usize != MASTER_KEY_BYTES {
            return Err(corrupt("header or key length is not version 1's"));
        }
        let block_size = u32_at(b, 52);
        if !block_size.is_power_of_two() || !(crate::MIN_BLOCK_SIZE..=crate::MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(corrupt(format!("block size {block_size}")));
        }
        let data_offset = u64_at(b, 56);
        let past_copy = COPY_OFFSET + HEADER_BYTES as u64;
        if data_offset < past_copy
            || data_offset > MAX_DATA_OFFSET
            || !data_offset.is_multiple_of(u64::from(block_size))
        {
            return Err(corrupt(format!("data offset {data_offset}")));
        }
        if u32_at(b, 164) as usize != SLOTS || b[SLOTS_AT + SLOTS * SLOT_BYTES..CRC_AT].iter().any(|&x| x != 0) {
            return Err(corrupt("slot count or reserved bytes"));
        }
        let digest = KeyDigest { cost: Argon2Cost::decode(b, 88)?, salt: array(b, 100), digest: array(b, 132) };
        let mut slots: [Option<KeySlot>; SLOTS] = Default::default();
        for (i, slot) in slots.iter_mut().enumerate() {
            *slot = KeySlot::decode(b, i)?;
        }
        Ok(CryptHeader { block_size, data_offset, generation: u64_at(b, 64), image_id: array(b, 72), digest, slots })
    }

    /// One copy of the header, [`HEADER_BYTES`] long, checksum included.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_BYTES];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        b[16..16 + CIPHER.len()].copy_from_slice(CIPHER.as_bytes());
        b[48..52].copy_from_slice(&(MASTER_KEY_BYTES as u32).to_le_bytes());
        b[52..56].copy_from_slice(&self.block_size.to_le_bytes());
        b[56..64].copy_from_slice(&self.data_offset.to_le_bytes());
        b[64..72].copy_from_slice(&self.generation.to_le_bytes());
        b[72..88].copy_from_slice(&self.image_id);
        self.digest.cost.encode(&mut b, 88);
        b[100..132].copy_from_slice(&self.digest.salt);
        b[132..164].copy_from_slice(&self.digest.digest);
        b[164..168].copy_from_slice(&(SLOTS as u32).to_le_bytes());
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some(s) = slot {
                s.encode(&mut b[SLOTS_AT + i * SLOT_BYTES..SLOTS_AT + (i + 1) * SLOT_BYTES]);
            }
        }
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The used slots, with their numbers.
    pub fn used_slots(&self) -> impl Iterator<Item = (usize, &KeySlot)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }
}

/// Which copy of the header [`pick`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copy {
    Primary,
    /// The copy at [`COPY_OFFSET`], because the primary did not verify.
    Backup,
}

/// The header to use given both copies' bytes: the primary if it verifies,
/// else the copy (if the primary still has the magic number, the image is
/// known to be encrypted even when neither verifies: the primary's error is
/// returned).
pub fn pick(primary: &[u8], copy: &[u8]) -> Result<(CryptHeader, Copy), FormatError> {
    match CryptHeader::decode(primary) {
        Ok(h) => Ok((h, Copy::Primary)),
        Err(first) => match CryptHeader::decode(copy) {
            Ok(h) => Ok((h, Copy::Backup)),
            Err(_) => Err(first),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cost() -> impl Strategy<Value = Argon2Cost> {
        (1u32..=4, 1u32..=10, 0u32..=1 << 20).prop_map(|(lanes, passes, extra)| Argon2Cost {
            memory_kib: 8 * lanes + extra,
            passes,
            lanes,
        })
    }

    fn slot() -> impl Strategy<Value = Option<KeySlot>> {
        let used = (any::<bool>(), cost(), any::<[u8; 32]>(), proptest::collection::vec(any::<u8>(), WRAPPED_BYTES))
            .prop_map(|(file, cost, salt, w)| KeySlot {
                kind: if file { SlotKind::KeyFile } else { SlotKind::Passphrase },
                cost,
                salt,
                wrapped: w.try_into().unwrap(),
            });
        proptest::option::of(used)
    }

    fn header() -> impl Strategy<Value = CryptHeader> {
        let slots = proptest::collection::vec(slot(), SLOTS);
        (10u32..=16, 0u64..16, any::<u64>(), any::<[u8; 16]>(), cost(), any::<[u8; 32]>(), any::<[u8; 32]>(), slots)
            .prop_map(|(shift, extra, generation, image_id, dcost, salt, digest, slots)| {
                let block_size = 1u32 << shift;
                let data_offset = (DATA_OFFSET + extra * u64::from(block_size)).min(MAX_DATA_OFFSET);
                let slots: [Option<KeySlot>; SLOTS] = slots.try_into().unwrap();
                CryptHeader {
                    block_size,
                    data_offset,
                    generation,
                    image_id,
                    digest: KeyDigest { cost: dcost, salt, digest },
                    slots,
                }
            })
    }

    proptest! {
        #[test]
        fn round_trip(h in header()) {
            let b = h.encode();
            prop_assert_eq!(b.len(), HEADER_BYTES);
            prop_assert_eq!(CryptHeader::decode(&b).unwrap(), h);
        }

        #[test]
        fn any_flipped_byte_is_caught(h in header(), at in 0usize..HEADER_BYTES, bit in 0u8..8) {
            let mut b = h.encode();
            b[at] ^= 1 << bit;
            prop_assert!(CryptHeader::decode(&b).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(mut b in proptest::collection::vec(any::<u8>(), 0..HEADER_BYTES + 8)) {
            if b.len() >= 8 {
                b[..8].copy_from_slice(MAGIC);
            }
            let _ = CryptHeader::decode(&b);
        }
    }

    #[test]
    fn damaged_primary_falls_back_to_the_copy() {
        let h = CryptHeader {
            block_size: 4096,
            data_offset: DATA_OFFSET,
            generation: 3,
            image_id: [7; 16],
            digest: KeyDigest {
                cost: Argon2Cost { memory_kib: 64, passes: 1, lanes: 1 },
                salt: [1; 32],
                digest: [2; 32],
            },
            slots: Default::default(),
        };
        let good = h.encode();
        let mut bad = good.clone();
        bad[200] ^= 0xff;
        assert!(matches!(CryptHeader::decode(&bad), Err(FormatError::Checksum { .. })));
        assert_eq!(pick(&bad, &good).unwrap(), (h.clone(), Copy::Backup));
        assert_eq!(pick(&good, &bad).unwrap(), (h, Copy::Primary));
        assert!(pick(&bad, &bad).is_err());
        assert!(matches!(CryptHeader::decode(&[0u8; HEADER_BYTES]), Err(FormatError::BadMagic { .. })));
        assert!(CryptHeader::decode(&good[..100]).is_err(), "a short buffer is an error, not a panic");
    }
}
