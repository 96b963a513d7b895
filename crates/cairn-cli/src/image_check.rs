//! Is this image cairn's at all? Asked by every command that opens an
//! existing image (mount, fsck, inspect, tune, resize, stats, trim) before
//! it reads the image as cairn's, so that an ext4 image, a partition table,
//! random bytes or a file of zeros get a message that says what they are,
//! not "bad magic number ... (run `cairn fsck`)".
//!
//! An image with cairn's magic number at byte 0 passes, damaged or not: the
//! command's own messages (and `cairn fsck`) deal with it. So does one with
//! no known signature at all (zeros, unknown bytes) where a backup cairn
//! superblock is found ([`cairn_format::backup::search_offsets`], as fsck
//! searches): a cairn image whose first block was overwritten, which fsck
//! can restore. Anything else is refused with what it is
//! ([`cairn_format::foreign`]). Only reads, never writes.

use cairn_format::backup::{decode_copy, search_offsets};
use cairn_format::foreign::{identify, Content, HEAD_BYTES};
use cairn_format::superblock::SB_SIZE;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// `Ok` if `image` holds a cairn file system, possibly damaged, or cannot
/// be read here (the command then reports that itself); otherwise why it
/// is not one. An encrypted image passes when the command can have its
/// secret (`keyed`: given, or to be typed at a terminal) and unlocks it.
pub fn check_keyed(image: &Path, keyed: bool) -> Result<(), String> {
    let Ok(mut f) = std::fs::File::open(image) else { return Ok(()) };
    // A block device's length is where its end is.
    let Ok(size) = f.seek(SeekFrom::End(0)) else { return Ok(()) };
    let mut head = Vec::with_capacity(HEAD_BYTES);
    if f.seek(SeekFrom::Start(0)).is_err() || (&f).take(HEAD_BYTES as u64).read_to_end(&mut head).is_err() {
        return Ok(());
    }
    let shown = image.display();
    let what = match identify(&head) {
        Content::Cairn => return Ok(()),
        Content::Encrypted if keyed => return Ok(()),
        Content::Encrypted => return Err(encrypted(image)),
        Content::Foreign(f) => {
            let hint = f.hint().map(|h| format!(" ({h})")).unwrap_or_default();
            return Err(format!("{shown} is not a cairn file system: it holds {}{hint}", f.name()));
        }
        Content::Empty => return Err(format!("{shown} is empty: not a cairn file system (`cairn mkfs` makes one)")),
        // The primary encryption header overwritten: its copy says what this is.
        _ if has_encrypted_copy(&f) && keyed => return Ok(()),
        _ if has_encrypted_copy(&f) => return Err(encrypted(image)),
        _ if has_backup_superblock(&f, size) => return Ok(()),
        Content::Zeros if head.len() as u64 == size => "it is all zeros (`cairn mkfs` makes one)".to_string(),
        Content::Zeros => format!("its first {} KiB are all zeros (`cairn mkfs` makes one)", HEAD_BYTES / 1024),
        Content::Unknown => "it holds no cairn superblock, nor a backup copy, nor the signature of another format \
                             cairn knows (random or overwritten data?)"
            .to_string(),
    };
    Err(format!("{shown} is not a cairn file system: {what}"))
}

/// Whether the copy of an encrypted image's header is where mkfs puts it.
fn has_encrypted_copy(f: &std::fs::File) -> bool {
    let mut magic = [0u8; 8];
    f.read_exact_at(&mut magic, cairn_format::crypt_header::COPY_OFFSET).is_ok()
        && cairn_format::crypt_header::has_magic(&magic)
}

/// What every command says of an encrypted image it was given no key for.
pub fn encrypted(image: &Path) -> String {
    format!("{} is an encrypted cairn image: give --key-file FILE or --passphrase-stdin", image.display())
}

/// Whether a backup superblock sits where mkfs puts one, under any
/// geometry it makes.
fn has_backup_superblock(f: &std::fs::File, size: u64) -> bool {
    let mut buf = vec![0u8; SB_SIZE];
    search_offsets(None, size)
        .into_iter()
        .any(|off| f.read_exact_at(&mut buf, off).is_ok() && decode_copy(&buf, off, size).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_cairn_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("x");
        let try_with = |bytes: &[u8]| {
            std::fs::write(&img, bytes).unwrap();
            check_keyed(&img, false)
        };
        assert!(try_with(&[]).unwrap_err().contains("is empty"));
        assert!(try_with(&[0u8; 4096]).unwrap_err().contains("all zeros"));
        let mut xfs = vec![0u8; 8192];
        xfs[..4].copy_from_slice(b"XFSB");
        let e = try_with(&xfs).unwrap_err();
        assert!(e.contains("holds an XFS file system") && !e.contains("cairn fsck"), "{e}");
        let noise: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        assert!(try_with(&noise).unwrap_err().contains("no cairn superblock"));
        let mut cairn = vec![0u8; 4096];
        cairn[..8].copy_from_slice(b"CAIRNFS\0");
        assert_eq!(try_with(&cairn), Ok(()), "a damaged cairn superblock is cairn's");
        assert_eq!(check_keyed(&dir.path().join("missing"), false), Ok(()), "the command says it is missing");
        let mut enc = vec![0u8; 4096];
        enc[..8].copy_from_slice(b"CAIRNCRY");
        let e = try_with(&enc).unwrap_err();
        assert!(e.contains("is an encrypted cairn image: give --key-file"), "{e}");
        assert_eq!(check_keyed(&img, true), Ok(()));
        let mut lost_primary = vec![0u8; 600 << 10];
        lost_primary[512 << 10..(512 << 10) + 8].copy_from_slice(b"CAIRNCRY");
        assert!(try_with(&lost_primary).unwrap_err().contains("is an encrypted cairn image"));
    }
}
