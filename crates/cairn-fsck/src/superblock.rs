//! Pass 0: is this a cairn image at all, and is its superblock sane?
//!
//! ## Purpose
//! Everything else fsck does is computed from the superblock's geometry, so
//! it is checked first and most strictly. The format crate's decoder already
//! verifies the magic, the checksum (seeded with a constant, since the UUID
//! lives inside the superblock) and every geometric bound: block size,
//! blocks and inodes per group, group count, descriptor table and journal
//! placement, and that the image holds every block the superblock claims.
//! This module turns its verdicts into messages a user can act on and sorts
//! them into *operational* failures (exit 8: "not a cairn file system",
//! "image is truncated", an incompatible version) and *corruption* (exit 4:
//! a cairn superblock whose checksum or geometry is wrong).
//!
//! ## What it reads
//! The first 512 bytes of the image (and, after journal replay, block 0 again:
//! the superblock may be among the replayed blocks).
//!
//! ## What it concludes
//! A [`Superblock`] and its [`Geometry`], trusted by every later pass, or an
//! error that stops the check. Softer problems that do not stop the check
//! (orphan-list root out of range, the engine's "errors" state) are reported
//! by [`check_fields`].

use crate::image::Image;
use crate::report::{num, Pass, Report};
use crate::FsckError;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_CLEAN, STATE_ERRORS};
use cairn_format::FormatError;

/// Most groups fsck accepts (bounds its per-group memory: 2 PiB at 4 KiB blocks).
pub const MAX_GROUPS: u64 = 1 << 24;

/// Guesses what else the image might be, for the "not a cairn file system" message.
fn other_signature(img: &mut Image) -> Option<&'static str> {
    let mut b = [0u8; 2];
    if img.read_at(&mut b, 1080).is_ok() && b == [0x53, 0xef] {
        return Some("it looks like an ext2/3/4 file system");
    }
    let mut x = [0u8; 4];
    if img.read_at(&mut x, 0).is_ok() && &x == b"XFSB" {
        return Some("it looks like an XFS file system");
    }
    let mut m = [0u8; 8];
    if img.read_at(&mut m, 65536 + 64).is_ok() && &m == b"_BHRfS_M" {
        return Some("it looks like a btrfs file system");
    }
    None
}

/// Decodes a superblock from `head` (at least [`SB_SIZE`] bytes).
pub fn decode(head: &[u8], image_size: u64) -> Result<(Superblock, Geometry), FsckError> {
    let sb = Superblock::decode(head, image_size).map_err(|e| match e {
        FormatError::BadMagic { .. } => FsckError::NotCairn("no cairn signature at the start of the image".into()),
        FormatError::Checksum { stored, computed, .. } => FsckError::CorruptSuperblock(format!(
            "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        )),
        FormatError::Corrupt { detail, .. } => match detail.strip_prefix("image is truncated: ") {
            Some(rest) => FsckError::Truncated(rest.to_string()),
            None => FsckError::CorruptSuperblock(detail),
        },
        FormatError::Incompatible(s) => FsckError::Incompatible(s),
    })?;
    let geo = Geometry::new(&sb).map_err(|e| FsckError::CorruptSuperblock(e.to_string()))?;
    if sb.group_count > MAX_GROUPS {
        return Err(FsckError::TooLarge(format!(
            "{} groups (this fsck handles at most {})",
            num(sb.group_count),
            num(MAX_GROUPS)
        )));
    }
    Ok((sb, geo))
}

/// Reads and validates the superblock at the start of the image.
pub fn load(img: &mut Image) -> Result<(Superblock, Geometry), FsckError> {
    let size = img.size();
    if size == 0 {
        return Err(FsckError::NotCairn("the image is empty (0 bytes)".into()));
    }
    let n = size.min(SB_SIZE as u64) as usize;
    let mut head = vec![0u8; SB_SIZE];
    img.read_at(&mut head[..n], 0)?;
    if !Superblock::has_magic(&head) {
        let why = other_signature(img).unwrap_or("no cairn signature at the start of the image");
        return Err(FsckError::NotCairn(why.to_string()));
    }
    if n < SB_SIZE {
        return Err(FsckError::Truncated(format!(
            "the image has only {size} bytes; the superblock alone needs {SB_SIZE}"
        )));
    }
    let (sb, geo) = decode(&head, size)?;
    img.set_block_size(sb.block_size());
    Ok((sb, geo))
}

/// Re-reads block 0 through the journal overlay (after replay).
pub fn reload(img: &mut Image) -> Result<(Superblock, Geometry), FsckError> {
    let b0 = img.read_block(0)?;
    let size = img.size();
    decode(&b0, size)
}

/// Field checks that do not stop the check.
pub fn check_fields(sb: &mut Superblock, geo: &Geometry, repair: bool, report: &mut Report) -> bool {
    let mut dirty = false;
    if sb.orphan_root != 0 && !geo.valid_data_range(sb.orphan_root, 1) {
        let msg = format!(
            "superblock: the orphan list's root points to block {}, outside the data area; the orphan list is lost",
            sb.orphan_root
        );
        if repair {
            sb.orphan_root = 0;
            dirty = true;
        }
        report.push(Pass::Superblock, msg, repair);
    }
    if sb.state & !(STATE_CLEAN | STATE_ERRORS) != 0 {
        let msg = format!("superblock: unknown state bits {:#x}", sb.state & !(STATE_CLEAN | STATE_ERRORS));
        if repair {
            sb.state &= STATE_CLEAN | STATE_ERRORS;
            dirty = true;
        }
        report.push(Pass::Superblock, msg, repair);
    }
    if sb.state & STATE_ERRORS != 0 {
        report.note("the file system recorded an error while it was mounted; checking everything");
    }
    if sb.state & STATE_CLEAN == 0 {
        report.note("the file system was not cleanly unmounted");
    }
    dirty
}

/// Writes the superblock to block 0 (repair), keeping the rest of block 0.
pub fn write(img: &mut Image, sb: &Superblock) -> std::io::Result<()> {
    let mut b0 = img.read_block(0)?;
    sb.encode(&mut b0);
    img.write_block(0, &b0)
}
