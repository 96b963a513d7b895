//! The corruption catalogue on an encrypted image (#54): every kind of
//! damage of `catalogue`, made to the plaintext of the golden image "4 KiB
//! blocks, small groups", which is then encrypted (header, its copy,
//! AES-XTS blocks) as `cairn mkfs --encrypt` lays it out. fsck runs through
//! the decrypting device (`cairn_fsck::run_on`, as `cairn fsck --key-file`
//! does): it must find each kind with its code, and its repair and the check
//! after it must print exactly what they print on the plain image (the
//! golden outputs); the repaired image, decrypted, must mount with every
//! untouched file as it was. Then the encryption header itself: a damaged
//! primary is repaired from its copy by a repairing fsck given the key, a
//! check alone leaves it, and an image with both copies damaged is an
//! error, not a panic.

use crate::catalogue::{kinds, shapes, Kind};
use crate::common::*;
use crate::golden;
use cairn_core::crypt::{self, Discards, Secret};
use cairn_core::dev::{BlockDevice, FileDevice};
use cairn_core::fsck_source::DeviceSource;
use cairn_format::crypt_header::{Argon2Cost, COPY_OFFSET};
use std::collections::BTreeMap;
use std::path::Path;
use zeroize::Zeroizing;

/// Where the file system's block 0 lies in an encrypted image.
const DATA_OFFSET: u64 = 1 << 20;

fn secret() -> Secret {
    Secret::key_file(Zeroizing::new(b"the catalogue's key".to_vec())).unwrap()
}

/// A cheap key derivation (the slot's cost is not under test here).
const COST: Argon2Cost = Argon2Cost { memory_kib: 64, passes: 1, lanes: 1 };

/// The image `plain` encrypted under a new header, in a temporary file.
fn encrypt(plain: &[u8], block_size: u32) -> tempfile::NamedTempFile {
    let f = to_file(&[]);
    f.as_file().set_len(DATA_OFFSET + plain.len() as u64).unwrap();
    let raw = FileDevice::open(f.path(), false).unwrap();
    let dev = crypt::create(raw, block_size, &secret(), COST).unwrap();
    dev.write_at(plain, 0).unwrap();
    dev.flush().unwrap();
    f
}

/// The decrypting device of the encrypted image at `path`.
fn open(path: &Path, writable: bool) -> Result<crypt::CryptDevice<FileDevice>, crypt::CryptError> {
    crypt::open(FileDevice::open(path, !writable).unwrap(), &secret(), Discards::Refused)
}

/// The plaintext of the encrypted image at `path`.
fn decrypt(path: &Path) -> Vec<u8> {
    let dev = open(path, false).unwrap();
    let mut plain = vec![0u8; dev.size() as usize];
    dev.read_at(&mut plain, 0).unwrap();
    plain
}

/// fsck through the decrypting device, as `cairn fsck --key-file`.
fn fsck_encrypted(path: &Path, repair: bool) -> (i32, String) {
    let source = DeviceSource(Box::new(open(path, repair).unwrap()));
    let mut out = Vec::new();
    let opts = cairn_fsck::Options { repair, ..Default::default() };
    let code = cairn_fsck::run_on(&source, &path.display().to_string(), &opts, &mut out);
    (code, golden::normalise(&String::from_utf8_lossy(&out), path))
}

#[test]
fn every_kind_is_found_and_repaired_through_the_decrypting_device() {
    let (shape, build) = shapes()[0];
    let (image, names) = golden::image(shape, build);
    let (sb, _, _) = sb_geo(&image);
    let (before, _) = tree_hashes(&image).unwrap();
    let clean = encrypt(&image, sb.block_size());
    assert_eq!(fsck_encrypted(clean.path(), false).0, 0, "the encrypted golden image is clean");
    let mut failures = Vec::new();
    for k in kinds() {
        let mut bytes = image.clone();
        (k.damage)(&mut bytes, &names);
        let f = encrypt(&bytes, sb.block_size());
        let checked = check_kind(&k, f.path(), &before).and_then(|outs| {
            outs.iter().enumerate().try_for_each(|(i, o)| golden::compare(shape, k.name, i as u32 + 1, o))
        });
        if let Err(why) = checked {
            failures.push(format!("{}: {why}", k.name));
        }
    }
    assert!(failures.is_empty(), "{} of the encrypted catalogue failed:\n{}", failures.len(), failures.join("\n"));
}

/// One kind on the encrypted image at `path`: found, repaired (or honestly
/// not), clean after, untouched files unchanged; the outputs to compare.
fn check_kind(k: &Kind, path: &Path, before: &BTreeMap<Vec<u8>, u32>) -> Result<Vec<String>, String> {
    let source = DeviceSource(Box::new(open(path, false).unwrap()));
    let report = cairn_fsck::check_image(&source, &Default::default()).map_err(|e| e.to_string())?;
    if !report.codes().contains(&k.code) {
        return Err(format!("expected {} ({:?}), found {:?}", k.code.id(), k.code, report.codes()));
    }
    let (code, repaired) = fsck_encrypted(path, true);
    if k.not_repaired.is_some() {
        return if code == 4 { Ok(vec![repaired]) } else { Err(format!("expected exit 4, got {code}:\n{repaired}")) };
    }
    if code != 1 {
        return Err(format!("repair exited {code}:\n{repaired}"));
    }
    let (code, checked) = fsck_encrypted(path, false);
    if code != 0 {
        return Err(format!("not clean after the repair:\n{checked}"));
    }
    let (after, errors) = tree_hashes(&decrypt(path)).map_err(|e| format!("does not mount: {e}"))?;
    let touched = |p: &[u8]| {
        k.touches
            .iter()
            .any(|t| *t == "/" || p.starts_with(t.as_bytes()) && matches!(p.get(t.len()), None | Some(b'/')))
    };
    let changed = before.iter().filter(|(p, h)| !touched(p) && after.get(*p) != Some(h)).count();
    if errors > 0 || changed > 0 {
        return Err(format!("{errors} read errors, {changed} untouched files changed after the repair"));
    }
    Ok(vec![repaired, checked])
}

#[test]
fn a_damaged_encryption_header_is_repaired_from_its_copy() {
    let (shape, build) = shapes()[0];
    let (image, _) = golden::image(shape, build);
    let (sb, _, _) = sb_geo(&image);
    let f = encrypt(&image, sb.block_size());
    let original = std::fs::read(f.path()).unwrap();
    let header = |bytes: &[u8]| bytes[..4096].to_vec();
    let write = |at: u64, bytes: &[u8]| std::os::unix::fs::FileExt::write_all_at(f.as_file(), bytes, at).unwrap();

    // A flipped byte in a key slot: the primary's checksum fails.
    write(200, &[original[200] ^ 0x40]);
    let (code, out) = fsck_encrypted(f.path(), false);
    assert_eq!(code, 0, "the copy opens the image; the file system is clean:\n{out}");
    assert_ne!(header(&std::fs::read(f.path()).unwrap()), header(&original), "a check alone writes nothing");
    let (code, out) = fsck_encrypted(f.path(), true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(header(&std::fs::read(f.path()).unwrap()), header(&original), "the primary is back from its copy");
    assert!(decrypt(f.path()) == image, "every block reads as before");

    // The primary wiped whole: the same.
    write(0, &[0u8; 4096]);
    assert_eq!(fsck_encrypted(f.path(), true).0, 0);
    assert_eq!(header(&std::fs::read(f.path()).unwrap()), header(&original));

    // Both copies damaged: a clear error, never a panic, nothing written.
    write(0, &[0u8; 4096]);
    write(COPY_OFFSET + 100, &[0xff; 8]);
    let damaged = std::fs::read(f.path()).unwrap();
    let e = open(f.path(), true).err().expect("no copy verifies");
    assert!(!e.to_string().is_empty());
    assert!(std::fs::read(f.path()).unwrap() == damaged, "a failed unlock wrote nothing");
}
