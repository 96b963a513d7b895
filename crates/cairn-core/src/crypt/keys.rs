//! Keys of an encrypted image: the master key, the key slots that wrap it,
//! and the Argon2id cost measured on this machine.
//!
//! ## Purpose
//! mkfs makes a random 512-bit [`MasterKey`] and a header
//! ([`cairn_format::crypt_header`]) with one slot for the secret it was
//! given; a mount, fsck or any other command turns a secret back into the
//! master key with [`unlock`]. A secret is a passphrase or the bytes of a
//! key file ([`Secret`]); each slot derives a 256-bit key-encryption key
//! from it with Argon2id (its own salt and cost) and unwraps the master key
//! with AES-KW, whose integrity check fails for a wrong secret; the header's
//! digest (Argon2id of the master key at a small cost) confirms the result.
//!
//! ## Cost
//! [`measure_cost`] times Argon2id on this machine and picks a cost that
//! takes about [`TARGET`] (0.5–1 s): 64 MiB of memory, one lane, and as many
//! passes as fit (on this 2-core machine: 15 passes, an unlock in about 0.85 s). It is recorded in the slot, so a slower machine still
//! opens the image, only more slowly.
//!
//! ## Hygiene
//! Every key is in [`Locked`] memory; secrets read from files or standard
//! input are `Zeroizing`. No type here prints key bytes, and no error
//! carries them.

use super::locked::Locked;
use super::CryptError;
use aes_kw::KwAes256;
use argon2::{Algorithm, Argon2, Params, Version};
use cairn_format::crypt_header::{
    Argon2Cost, CryptHeader, KeyDigest, KeySlot, SlotKind, DATA_OFFSET, DIGEST_BYTES, MASTER_KEY_BYTES, SALT_BYTES,
    SLOTS, WRAPPED_BYTES,
};
use rand::RngCore;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// How long a slot's key derivation should take on the machine that made it.
pub const TARGET: Duration = Duration::from_millis(750);
/// Memory for a slot's Argon2id, KiB (64 MiB).
const SLOT_MEMORY_KIB: u32 = 64 << 10;
/// The digest's cost: small (it protects a 512-bit random key).
const DIGEST_COST: Argon2Cost = Argon2Cost { memory_kib: 64, passes: 1, lanes: 1 };
/// The longest key file read (as cryptsetup's default, 8 MiB).
pub const MAX_KEY_FILE: u64 = 8 << 20;

/// The master key: two AES-256 keys for XTS.
pub struct MasterKey(Locked<[u8; MASTER_KEY_BYTES]>);

impl MasterKey {
    /// A fresh random master key (the operating system's generator).
    pub fn random() -> Result<MasterKey, CryptError> {
        let mut k = Locked::zeroed()?;
        rand::rngs::OsRng.fill_bytes(k.get_mut());
        Ok(MasterKey(k))
    }

    /// A master key already in locked memory (tests of the cipher).
    #[cfg(test)]
    pub(super) fn from_locked(k: Locked<[u8; MASTER_KEY_BYTES]>) -> MasterKey {
        MasterKey(k)
    }

    /// The key bytes (for the cipher only).
    pub(super) fn bytes(&self) -> &[u8; MASTER_KEY_BYTES] {
        &self.0
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(<secret>)")
    }
}

/// What the user gives to open a slot.
pub struct Secret {
    pub kind: SlotKind,
    bytes: Zeroizing<Vec<u8>>,
}

impl Secret {
    /// A passphrase (one trailing newline, as `echo` adds, is not part of it).
    pub fn passphrase(mut bytes: Zeroizing<Vec<u8>>) -> Result<Secret, CryptError> {
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        if bytes.is_empty() {
            return Err(CryptError::EmptySecret("passphrase"));
        }
        Ok(Secret { kind: SlotKind::Passphrase, bytes })
    }

    /// Every byte of a key file.
    pub fn key_file(bytes: Zeroizing<Vec<u8>>) -> Result<Secret, CryptError> {
        if bytes.is_empty() {
            return Err(CryptError::EmptySecret("key file"));
        }
        Ok(Secret { kind: SlotKind::KeyFile, bytes })
    }

    /// Reads a key file (at most [`MAX_KEY_FILE`] bytes).
    pub fn read_key_file(path: &std::path::Path) -> Result<Secret, CryptError> {
        use std::io::Read;
        let f = std::fs::File::open(path).map_err(|e| CryptError::KeyFile(path.display().to_string(), e))?;
        let mut bytes = Zeroizing::new(Vec::new());
        f.take(MAX_KEY_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| CryptError::KeyFile(path.display().to_string(), e))?;
        if bytes.len() as u64 > MAX_KEY_FILE {
            return Err(CryptError::KeyFileTooLong(path.display().to_string()));
        }
        Secret::key_file(bytes)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({:?}, <{} bytes>)", self.kind, self.bytes.len())
    }
}

fn argon2(cost: Argon2Cost, out_len: usize) -> Result<Argon2<'static>, CryptError> {
    let params = Params::new(cost.memory_kib, cost.passes, cost.lanes, Some(out_len))
        .map_err(|e| CryptError::Cost(e.to_string()))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// Argon2id of `input` under `salt` at `cost`, into locked memory.
fn derive<const N: usize>(input: &[u8], salt: &[u8], cost: Argon2Cost) -> Result<Locked<[u8; N]>, CryptError> {
    let mut out = Locked::<[u8; N]>::zeroed()?;
    argon2(cost, N)?.hash_password_into(input, salt, out.get_mut()).map_err(|e| CryptError::Cost(e.to_string()))?;
    Ok(out)
}

/// A cost that takes about [`TARGET`] here: one timed pass over 64 MiB
/// (the second of two, so the first's page faults are not counted) gives
/// the speed; then as many passes as fit, or less memory at one pass on a
/// machine (or a build) too slow for one pass over 64 MiB.
pub fn measure_cost() -> Result<Argon2Cost, CryptError> {
    let one_pass = Argon2Cost { memory_kib: SLOT_MEMORY_KIB, passes: 1, lanes: 1 };
    let argon = argon2(one_pass, 32)?;
    let mut memory = vec![argon2::Block::default(); one_pass.memory_kib as usize];
    let mut out = Zeroizing::new([0u8; 32]);
    let mut time_one = || -> Result<f64, CryptError> {
        let t0 = Instant::now();
        argon
            .hash_password_into_with_memory(b"calibration", &[0u8; SALT_BYTES], &mut out[..], &mut memory[..])
            .map_err(|e| CryptError::Cost(e.to_string()))?;
        Ok(t0.elapsed().as_secs_f64().max(1e-6))
    };
    time_one()?;
    let seconds = time_one()?;
    let passes = TARGET.as_secs_f64() / seconds;
    if passes < 1.0 {
        let memory_kib = ((f64::from(SLOT_MEMORY_KIB) * passes) as u32).max(1 << 10);
        return Ok(Argon2Cost { memory_kib, passes: 1, lanes: 1 });
    }
    Ok(Argon2Cost { memory_kib: SLOT_MEMORY_KIB, passes: (passes.round() as u32).clamp(1, 100), lanes: 1 })
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b
}

/// The master key wrapped for `secret` in a new slot with `cost`.
pub fn make_slot(master: &MasterKey, secret: &Secret, cost: Argon2Cost) -> Result<KeySlot, CryptError> {
    let salt = random_bytes::<SALT_BYTES>();
    let kek = derive::<32>(&secret.bytes, &salt, cost)?;
    let kw = <KwAes256 as aes_kw::KeyInit>::new_from_slice(&kek[..]).map_err(|_| CryptError::Cost("kek".into()))?;
    let mut wrapped = [0u8; WRAPPED_BYTES];
    kw.wrap_key(master.bytes(), &mut wrapped).map_err(|e| CryptError::Cost(e.to_string()))?;
    Ok(KeySlot { kind: secret.kind, cost, salt, wrapped })
}

fn digest(master: &MasterKey, salt: &[u8; SALT_BYTES], cost: Argon2Cost) -> Result<[u8; DIGEST_BYTES], CryptError> {
    Ok(*derive::<DIGEST_BYTES>(master.bytes(), salt, cost)?)
}

/// A new header for a file system of `block_size` blocks: a fresh master
/// key, its digest, and slot 0 for `secret` at `cost`.
pub fn new_header(block_size: u32, secret: &Secret, cost: Argon2Cost) -> Result<(CryptHeader, MasterKey), CryptError> {
    let master = MasterKey::random()?;
    let salt = random_bytes::<SALT_BYTES>();
    let digest = KeyDigest { cost: DIGEST_COST, salt, digest: digest(&master, &salt, DIGEST_COST)? };
    let mut slots: [Option<KeySlot>; SLOTS] = Default::default();
    slots[0] = Some(make_slot(&master, secret, cost)?);
    let header = CryptHeader {
        block_size,
        data_offset: DATA_OFFSET,
        generation: 1,
        image_id: random_bytes::<16>(),
        digest,
        slots,
    };
    Ok((header, master))
}

/// The master key from the first slot `secret` opens (slots of the
/// secret's kind first), confirmed by the header's digest; which slot.
pub fn unlock(header: &CryptHeader, secret: &Secret) -> Result<(MasterKey, usize), CryptError> {
    let mut order: Vec<(usize, &KeySlot)> = header.used_slots().collect();
    if order.is_empty() {
        return Err(CryptError::NoSlots);
    }
    order.sort_by_key(|(i, s)| (s.kind != secret.kind, *i));
    for (i, slot) in order {
        let kek = derive::<32>(&secret.bytes, &slot.salt, slot.cost)?;
        let kw = <KwAes256 as aes_kw::KeyInit>::new_from_slice(&kek[..]).map_err(|_| CryptError::Cost("kek".into()))?;
        let mut master = MasterKey(Locked::zeroed()?);
        if kw.unwrap_key(&slot.wrapped, master.0.get_mut()).is_err() {
            continue;
        }
        let d = digest(&master, &header.digest.salt, header.digest.cost)?;
        if d == header.digest.digest {
            return Ok((master, i));
        }
    }
    Err(CryptError::WrongKey)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cost small enough for tests.
    pub(crate) const CHEAP: Argon2Cost = Argon2Cost { memory_kib: 64, passes: 1, lanes: 1 };

    fn pass(s: &str) -> Secret {
        Secret::passphrase(Zeroizing::new(s.as_bytes().to_vec())).unwrap()
    }

    #[test]
    fn the_right_secret_unlocks_and_a_wrong_one_does_not() {
        let (h, master) = new_header(4096, &pass("correct horse\n"), CHEAP).unwrap();
        let (got, slot) = unlock(&h, &pass("correct horse")).unwrap();
        assert_eq!((got.bytes(), slot), (master.bytes(), 0), "the trailing newline is not the passphrase's");
        assert!(matches!(unlock(&h, &pass("correct horsf")), Err(CryptError::WrongKey)));
        let file = Secret::key_file(Zeroizing::new(b"correct horse".to_vec())).unwrap();
        assert_eq!(unlock(&h, &file).unwrap().0.bytes(), master.bytes(), "kinds are labels, the bytes open");
        let decoded = CryptHeader::decode(&h.encode()).unwrap();
        assert!(unlock(&decoded, &pass("correct horse")).is_ok(), "the encoded header opens too");
    }

    #[test]
    fn a_slot_that_unwraps_to_another_key_fails_the_digest() {
        let secret = pass("s");
        let (mut h, _) = new_header(4096, &secret, CHEAP).unwrap();
        let other = MasterKey::random().unwrap();
        h.slots[1] = Some(make_slot(&other, &secret, CHEAP).unwrap());
        h.slots[0] = None;
        assert!(matches!(unlock(&h, &secret), Err(CryptError::WrongKey)));
        h.slots[1] = None;
        assert!(matches!(unlock(&h, &secret), Err(CryptError::NoSlots)));
    }

    #[test]
    fn empty_secrets_and_debug_output() {
        assert!(Secret::passphrase(Zeroizing::new(b"\n".to_vec())).is_err());
        assert!(Secret::key_file(Zeroizing::new(Vec::new())).is_err());
        let s = pass("hunter2");
        assert!(!format!("{s:?}").contains("hunter2"));
        let m = MasterKey::random().unwrap();
        assert_eq!(format!("{m:?}"), "MasterKey(<secret>)");
    }

    #[test]
    fn measured_cost_is_recorded_within_bounds() {
        let c = measure_cost().unwrap();
        c.check().unwrap();
        assert!(c.memory_kib >= 1 << 10 && c.passes >= 1, "{c:?}");
    }
}
