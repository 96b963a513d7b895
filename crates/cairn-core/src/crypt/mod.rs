//! Encrypted images (#54): the header's two copies on the raw device, the
//! keys, and the encrypting device the engine runs on.
//!
//! ## Purpose
//! An encrypted image is a header region ([`cairn_format::crypt_header`]:
//! the header at byte 0, its copy at 512 KiB) followed by an ordinary cairn
//! file system whose every block is encrypted with AES-256-XTS
//! ([`device::CryptDevice`]). Nothing above the device knows: layout,
//! superblock, journal and fsck are those of a plain image. This module
//! puts the header on a raw device ([`create`]), reads it back, picking the
//! copy when the primary is damaged ([`read_header`]), and opens the
//! encrypted device with a secret ([`open`]).
//!
//! ## What it protects
//! Confidentiality at rest: without a secret the image's bytes after the
//! header show nothing of names, contents or metadata. Not integrity: XTS
//! has no tag, so whoever can write the image can replace a block with
//! garbage (the metadata checksums may notice, file data will not) or with
//! an older copy of itself (rollback), undetected. See docs/encryption.md.
//!
//! ## Durability
//! [`create`] writes the copy, flushes, then the primary, and flushes: a
//! crash leaves at least one verifying copy once either was complete.

pub mod device;
pub mod keys;
pub mod locked;
pub mod xts;

use crate::dev::BlockDevice;
use cairn_format::crypt_header::{self, Argon2Cost, Copy, CryptHeader, COPY_OFFSET, HEADER_BYTES};
use cairn_format::FormatError;
pub use device::{CryptDevice, Discards};
pub use keys::{measure_cost, MasterKey, Secret};
use std::sync::Arc;
use thiserror::Error;
pub use xts::BlockCipher;

/// Why an encrypted image could not be made or opened.
#[derive(Debug, Error)]
pub enum CryptError {
    #[error("wrong passphrase or key file (no key slot opens with it)")]
    WrongKey,
    #[error("the encryption header has no key slot in use")]
    NoSlots,
    #[error("the {0} is empty")]
    EmptySecret(&'static str),
    #[error("key file {0}: {1}")]
    KeyFile(String, std::io::Error),
    #[error("key file {0} is longer than 8 MiB")]
    KeyFileTooLong(String),
    #[error("damaged encryption header (and its copy): {0}")]
    Header(#[from] FormatError),
    #[error("not an encrypted cairn image")]
    NotEncrypted,
    #[error("key derivation: {0}")]
    Cost(String),
    #[error("every key slot is in use (at most {})", crypt_header::SLOTS)]
    NoFreeSlot,
    #[error("key slot {0} is not in use")]
    NoSuchSlot(usize),
    #[error("slot {0} is the last key slot: removing it would lock the image for good")]
    LastSlot(usize),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Whether either copy of the encrypted header on the raw device starts
/// with its magic number (damaged or not).
pub fn is_encrypted(raw: &dyn BlockDevice) -> bool {
    [0, COPY_OFFSET].into_iter().any(|at| {
        let mut head = [0u8; 8];
        raw.read_at(&mut head, at).is_ok() && crypt_header::has_magic(&head)
    })
}

fn read_copy(raw: &dyn BlockDevice, at: u64) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_BYTES];
    if raw.read_at(&mut b, at).is_err() {
        b.fill(0);
    }
    b
}

/// The header of the encrypted image on `raw`, and which copy it came
/// from; [`CryptError::NotEncrypted`] when neither copy has the magic
/// number.
pub fn read_header(raw: &dyn BlockDevice) -> Result<(CryptHeader, Copy), CryptError> {
    let primary = read_copy(raw, 0);
    let copy = read_copy(raw, COPY_OFFSET);
    if !crypt_header::has_magic(&primary) && !crypt_header::has_magic(&copy) {
        return Err(CryptError::NotEncrypted);
    }
    Ok(crypt_header::pick(&primary, &copy)?)
}

/// Writes both copies of `header` (the copy first, each flushed).
pub fn write_header(raw: &dyn BlockDevice, header: &CryptHeader) -> Result<(), CryptError> {
    let bytes = header.encode();
    raw.write_at(&bytes, COPY_OFFSET)?;
    raw.flush()?;
    raw.write_at(&bytes, 0)?;
    raw.flush()?;
    Ok(())
}

/// Makes `raw` an encrypted image for a file system of `block_size`
/// blocks, openable with `secret` (its slot derived at `cost`), and returns
/// the device to format.
pub fn create<D: BlockDevice>(
    raw: D,
    block_size: u32,
    secret: &Secret,
    cost: Argon2Cost,
) -> Result<CryptDevice<D>, CryptError> {
    let (header, master) = keys::new_header(block_size, secret, cost)?;
    if raw.size() < header.data_offset + u64::from(block_size) {
        return Err(CryptError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the image is too small for the encryption header",
        )));
    }
    write_header(&raw, &header)?;
    let cipher = Arc::new(BlockCipher::new(&master, block_size)?);
    Ok(CryptDevice::new(raw, cipher, header.data_offset, Discards::Refused))
}

/// An unlocked image: its key and layout, which make decrypting devices
/// over any handle on the image (a read-only mount's second, writable
/// handle for its journal replay uses the same key without asking again).
pub struct Unlocked {
    cipher: Arc<BlockCipher>,
    data_offset: u64,
    /// The key slot the secret opened.
    pub slot: usize,
}

impl Unlocked {
    /// The decrypting device over `raw`, a handle on the unlocked image.
    pub fn device<D: BlockDevice>(&self, raw: D, discards: Discards) -> CryptDevice<D> {
        CryptDevice::new(raw, self.cipher.clone(), self.data_offset, discards)
    }
}

/// Unlocks the encrypted image on `raw` with `secret`. Nothing is written
/// unless the secret opened a slot; then a damaged primary header is
/// rewritten from its copy (where the device is writable).
pub fn unlock(raw: &dyn BlockDevice, secret: &Secret) -> Result<Unlocked, CryptError> {
    let (header, from) = read_header(raw)?;
    let (master, slot) = keys::unlock(&header, secret)?;
    if from == Copy::Backup && raw.writable() {
        tracing::warn!("the encryption header was damaged; restored from its copy");
        raw.write_at(&header.encode(), 0)?;
        raw.flush()?;
    }
    let cipher = Arc::new(BlockCipher::new(&master, header.block_size)?);
    Ok(Unlocked { cipher, data_offset: header.data_offset, slot })
}

/// [`unlock`], then the decrypting device over `raw`.
pub fn open<D: BlockDevice>(raw: D, secret: &Secret, discards: Discards) -> Result<CryptDevice<D>, CryptError> {
    Ok(unlock(&raw, secret)?.device(raw, discards))
}

/// A change to the key slots of the image on `raw`, made by whoever holds
/// a secret that opens one of them.
#[derive(Debug)]
pub enum SlotChange<'a> {
    /// A new slot for this secret, derived at this cost.
    Add(&'a Secret, Argon2Cost),
    /// The slot the secret opened now opens with this one instead.
    Change(&'a Secret, Argon2Cost),
    /// This slot, or with `None` the one the secret opened, is emptied.
    Remove(Option<usize>),
}

/// Applies `change` to the header on `raw`, unlocking it with `secret`;
/// the slot changed. The header is rewritten (copy first, generation
/// bumped) only once the secret opened a slot and the change is allowed.
pub fn change_slots(raw: &dyn BlockDevice, secret: &Secret, change: SlotChange) -> Result<usize, CryptError> {
    let (mut header, _) = read_header(raw)?;
    let (master, opened) = keys::unlock(&header, secret)?;
    let slot = match change {
        SlotChange::Add(new, cost) => {
            let free = header.slots.iter().position(Option::is_none).ok_or(CryptError::NoFreeSlot)?;
            header.slots[free] = Some(keys::make_slot(&master, new, cost)?);
            free
        }
        SlotChange::Change(new, cost) => {
            header.slots[opened] = Some(keys::make_slot(&master, new, cost)?);
            opened
        }
        SlotChange::Remove(which) => {
            let i = which.unwrap_or(opened);
            if header.slots.get(i).and_then(Option::as_ref).is_none() {
                return Err(CryptError::NoSuchSlot(i));
            }
            if header.used_slots().count() == 1 {
                return Err(CryptError::LastSlot(i));
            }
            header.slots[i] = None;
            i
        }
    };
    header.generation += 1;
    write_header(raw, &header)?;
    Ok(slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use zeroize::Zeroizing;

    const CHEAP: Argon2Cost = Argon2Cost { memory_kib: 64, passes: 1, lanes: 1 };

    fn key(b: &[u8]) -> Secret {
        Secret::key_file(Zeroizing::new(b.to_vec())).unwrap()
    }

    #[test]
    fn create_then_open_sees_the_same_blocks() {
        let dev = create(MemDevice::new(4 << 20), 4096, &key(b"k1"), CHEAP).unwrap();
        dev.write_at(&[0xab; 4096], 0).unwrap();
        let raw = MemDevice::from_bytes(dev.inner().snapshot());
        assert!(is_encrypted(&raw));
        assert!(matches!(
            open(MemDevice::from_bytes(raw.snapshot()), &key(b"k2"), Discards::Refused),
            Err(CryptError::WrongKey)
        ));
        let again = open(raw, &key(b"k1"), Discards::Refused).unwrap();
        let mut b = [0u8; 4096];
        again.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [0xab; 4096]);
        again.inner().write_at(&[0u8; HEADER_BYTES], 0).unwrap();
        assert!(is_encrypted(again.inner()), "the copy still says so");
        assert_eq!(again.size(), (4 << 20) - crypt_header::DATA_OFFSET);
    }

    #[test]
    fn a_damaged_primary_is_restored_from_its_copy_after_unlocking() {
        let dev = create(MemDevice::new(4 << 20), 4096, &key(b"k"), CHEAP).unwrap();
        let good = dev.inner().snapshot()[..HEADER_BYTES].to_vec();
        dev.inner().write_at(&[0xee; 64], 300).unwrap();
        let raw = MemDevice::from_bytes(dev.inner().snapshot());
        assert!(matches!(
            open(MemDevice::from_bytes(raw.snapshot()), &key(b"x"), Discards::Refused),
            Err(CryptError::WrongKey)
        ));
        let opened = open(raw, &key(b"k"), Discards::Refused).unwrap();
        assert_eq!(opened.inner().snapshot()[..HEADER_BYTES], good[..]);
        // Both copies damaged: a clear error, not a panic.
        let both = MemDevice::from_bytes(opened.inner().snapshot());
        both.write_at(&[0xee; 64], 300).unwrap();
        both.write_at(&[0xee; 64], COPY_OFFSET + 300).unwrap();
        assert!(matches!(open(both, &key(b"k"), Discards::Refused), Err(CryptError::Header(_))));
        assert!(matches!(read_header(&MemDevice::new(1 << 20)), Err(CryptError::NotEncrypted)));
    }

    #[test]
    fn slots_are_added_changed_and_removed_but_never_the_last() {
        let dev = create(MemDevice::new(2 << 20), 4096, &key(b"a"), CHEAP).unwrap();
        let raw = dev.inner();
        assert_eq!(change_slots(raw, &key(b"a"), SlotChange::Add(&key(b"b"), CHEAP)).unwrap(), 1);
        assert!(matches!(change_slots(raw, &key(b"x"), SlotChange::Add(&key(b"c"), CHEAP)), Err(CryptError::WrongKey)));
        assert_eq!(change_slots(raw, &key(b"b"), SlotChange::Change(&key(b"c"), CHEAP)).unwrap(), 1);
        assert!(matches!(unlock(raw, &key(b"b")), Err(CryptError::WrongKey)), "the changed key no longer opens");
        assert_eq!(unlock(raw, &key(b"c")).unwrap().slot, 1);
        assert!(matches!(change_slots(raw, &key(b"c"), SlotChange::Remove(Some(5))), Err(CryptError::NoSuchSlot(5))));
        assert_eq!(change_slots(raw, &key(b"c"), SlotChange::Remove(Some(0))).unwrap(), 0);
        assert!(matches!(unlock(raw, &key(b"a")), Err(CryptError::WrongKey)));
        assert!(matches!(change_slots(raw, &key(b"c"), SlotChange::Remove(None)), Err(CryptError::LastSlot(1))));
        let (h, _) = read_header(raw).unwrap();
        assert_eq!((h.generation, h.used_slots().count()), (4, 1));
        let copy = MemDevice::new(2 << 20);
        copy.write_at(&raw.snapshot()[COPY_OFFSET as usize..][..HEADER_BYTES], COPY_OFFSET).unwrap();
        assert_eq!(read_header(&copy).unwrap().0, h, "the copy was rewritten too");
        // Every slot in use: no room for another.
        for _ in 0..crypt_header::SLOTS - 1 {
            change_slots(raw, &key(b"c"), SlotChange::Add(&key(b"d"), CHEAP)).unwrap();
        }
        assert!(matches!(
            change_slots(raw, &key(b"c"), SlotChange::Add(&key(b"e"), CHEAP)),
            Err(CryptError::NoFreeSlot)
        ));
    }

    #[test]
    fn mkfs_and_fsck_run_on_an_encrypted_device() {
        let dev = create(MemDevice::new(64 << 20), 4096, &key(b"k"), CHEAP).unwrap();
        let opts = crate::mkfs::MkfsOptions { blocks_per_group: Some(4096), ..Default::default() };
        crate::mkfs::format(&dev, &opts, &mut |_, _| {}).unwrap();
        let sb = crate::dev::read_superblock(&dev).unwrap();
        assert_eq!((sb.block_size(), sb.group_count), (4096, 4));
        let zeroed = sb.feature_compat & cairn_format::superblock::COMPAT_ITABLES_ZEROED != 0;
        assert!(zeroed, "the inode tables were zeroed with encrypted zeros");
        let raw = dev.inner().snapshot();
        assert!(!raw.windows(8).any(|w| w == b"CAIRNFS\0"), "no plaintext superblock magic in the image");
        let dev = std::sync::Arc::new(dev);
        crate::mkfs::create_lost_found(dev.clone()).unwrap();
        let dev = open(MemDevice::from_bytes(dev.inner().snapshot()), &key(b"k"), Discards::Refused).unwrap();
        let mut plain = vec![0u8; dev.size() as usize];
        dev.read_at(&mut plain, 0).unwrap();
        let report = cairn_fsck::check_image(&plain, &cairn_fsck::Options::default()).unwrap();
        assert!(report.is_clean(), "{:?}", report.problems);
    }
}
