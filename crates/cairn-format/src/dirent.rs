//! Directory entries, stored in a directory's B+tree.
//!
//! Key: `(hash31(name) << 32) | (collision_index + DIRENT_MIN_LOW)`, where
//! `hash31` is a crc32c seeded with the superblock's `hash_seed`, masked to 31
//! bits. Keys are therefore below 2^63 and at least `DIRENT_MIN_LOW`, so the
//! readdir cookie `key + 1` is a positive `off_t` above the two cookies that
//! `.` and `..` use. Entries whose names hash alike take the next free
//! collision index; a key, once given, never changes while the entry exists,
//! which keeps readdir offsets stable across concurrent create and unlink.
//!
//! Value: `ino u64 | file type u8 (DT_*) | name_len u8 | name bytes`.

use crate::codec::*;
use crate::error::{FormatError, Result};

/// Lowest collision index value (keeps every key above the `.`/`..` cookies).
pub const DIRENT_MIN_LOW: u64 = 16;

/// Bytes of a value before the name: ino u64, type u8, name length u8.
pub const DIRENT_HEADER: usize = 10;

const _: () = {
    assert!(DIRENT_HEADER == 8 + 1 + 1);
    // The name length is a u8.
    assert!(crate::NAME_MAX <= u8::MAX as usize);
};

/// `DT_*` values as in `<dirent.h>`.
pub const DT_UNKNOWN: u8 = 0;

/// Seeded 31-bit name hash.
pub fn name_hash(seed: &[u8; 16], name: &[u8]) -> u32 {
    let s = crc32c::crc32c(seed);
    crc32c::crc32c_append(s, name) & 0x7fff_ffff
}

/// The smallest key for `hash`.
pub fn hash_key_base(hash: u32) -> u64 {
    (u64::from(hash) << 32) | DIRENT_MIN_LOW
}

/// One past the largest key for `hash`.
pub fn hash_key_end(hash: u32) -> u64 {
    (u64::from(hash) + 1) << 32
}

/// A decoded directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirent {
    pub ino: u64,
    pub dtype: u8,
    pub name: Vec<u8>,
}

impl Dirent {
    /// Encodes the value.
    ///
    /// # Panics
    /// If the name is empty or longer than [`crate::NAME_MAX`] (callers
    /// return `ENAMETOOLONG` first).
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            (1..=crate::NAME_MAX).contains(&self.name.len()),
            "encoder bug: directory entry name of {} bytes",
            self.name.len()
        );
        let mut v = vec![0u8; 10 + self.name.len()];
        put_u64(&mut v, 0, self.ino);
        v[8] = self.dtype;
        v[9] = self.name.len() as u8;
        v[10..].copy_from_slice(&self.name);
        v
    }

    /// Decodes and validates a value found under `key` in directory `dir`.
    pub fn decode(dir: u64, v: &[u8]) -> Result<Dirent> {
        let bad = |d: &str| Err(FormatError::corrupt("directory entry", dir, d));
        if v.len() < 11 {
            return bad("value too short");
        }
        let n = usize::from(v[9]);
        if v.len() != 10 + n || n == 0 {
            return bad("name length does not match value length");
        }
        let name = v[10..].to_vec();
        if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
            return bad("invalid name");
        }
        Ok(Dirent { ino: get_u64(v, 0), dtype: v[8], name })
    }
}

/// The `DT_*` type for a mode's `S_IFMT` bits.
pub fn dtype_of_mode(mode: u32) -> u8 {
    ((mode & crate::inode::S_IFMT) >> 12) as u8
}
