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
//! a cairn superblock whose checksum or geometry is wrong). A superblock
//! that is sound but for an image shorter than the file system it describes
//! is [`FsckError::Short`], with both sizes: a repair extends an image file
//! (`crate::check`).
//!
//! ## What it reads
//! The first 512 bytes of the image (and, after journal replay, block 0 again:
//! the superblock may be among the replayed blocks). When they do not verify,
//! the backup copies (`cairn_format::backup`): the first that verifies stands
//! in for the primary, and a repair writes the primary back from it. Every
//! copy is compared with the primary, and a repair rewrites any that differ.
//!
//! ## What it concludes
//! A [`Superblock`] and its [`Geometry`], trusted by every later pass, or an
//! error that stops the check. Softer problems that do not stop the check
//! (orphan-list root out of range, the engine's "errors" state) are reported
//! by [`check_fields`].

use crate::error::FsckError;
use crate::image::Image;
use crate::problems::Code;
use crate::report::{num, Report};
use cairn_format::backup;
use cairn_format::codec::get_u32;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_CLEAN, STATE_ERRORS};
use cairn_format::{FormatError, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};

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
            // Sound but for the image's size: say by how much.
            Some(rest) => match Superblock::decode(head, u64::MAX) {
                Ok(sb) => FsckError::Short {
                    fs_bytes: sb.total_blocks.saturating_mul(u64::from(sb.block_size())),
                    image_bytes: image_size,
                    block_device: false,
                },
                Err(_) => FsckError::Truncated(rest.to_string()),
            },
            None => FsckError::CorruptSuperblock(detail),
        },
        FormatError::Incompatible(s) => FsckError::Incompatible(s),
    })?;
    let geo = geometry(&sb)?;
    Ok((sb, geo))
}

/// The geometry of a verified superblock, within what this fsck handles.
fn geometry(sb: &Superblock) -> Result<Geometry, FsckError> {
    let geo = Geometry::new(sb).map_err(|e| FsckError::CorruptSuperblock(e.to_string()))?;
    if sb.group_count > MAX_GROUPS {
        return Err(FsckError::TooLarge(format!(
            "{} groups (this fsck handles at most {})",
            num(sb.group_count),
            num(MAX_GROUPS)
        )));
    }
    Ok(geo)
}

/// A superblock fsck can work from, and where it came from.
pub struct Loaded {
    pub sb: Superblock,
    pub geo: Geometry,
    /// The primary did not verify and this is a backup copy: the group it
    /// was read from, and why the primary was passed over.
    pub fallback: Option<(u64, String)>,
}

/// Reads and validates the superblock: the primary at the start of the
/// image or, with `backup_block`, the backup copy at that block (of any
/// block size). When the primary does not verify (no magic, a checksum or
/// a geometry that fails), the backup copies are searched for (see
/// `cairn_format::backup::search_offsets`) and the first that verifies is
/// used, as e2fsck does.
pub fn load(img: &mut Image, backup_block: Option<u64>) -> Result<Loaded, FsckError> {
    let size = img.size();
    if size == 0 {
        return Err(FsckError::NotCairn("the image is empty (0 bytes)".into()));
    }
    if let Some(b) = backup_block {
        let offsets: Vec<u64> = (MIN_BLOCK_SIZE.trailing_zeros()..=MAX_BLOCK_SIZE.trailing_zeros())
            .filter_map(|l| b.checked_mul(1 << l))
            .collect();
        let Some((sb, g)) = find_copy(img, &offsets)? else {
            return Err(FsckError::NoBackup(format!("no backup superblock at block {b} (of any block size)")));
        };
        return loaded(img, sb, Some((g, format!("the backup at block {b} was asked for"))));
    }
    let n = size.min(SB_SIZE as u64) as usize;
    let mut head = vec![0u8; SB_SIZE];
    img.read_at(&mut head[..n], 0)?;
    let primary = if !Superblock::has_magic(&head) {
        if let Some(other) = other_signature(img) {
            return Err(FsckError::NotCairn(other.to_string()));
        }
        Err(FsckError::NotCairn("no cairn signature at the start of the image".into()))
    } else if n < SB_SIZE {
        return Err(FsckError::Truncated(format!(
            "the image has only {size} bytes; the superblock alone needs {SB_SIZE}"
        )));
    } else {
        decode(&head, size)
    };
    let err = match primary {
        Ok((sb, geo)) => {
            img.set_block_size(sb.block_size());
            return Ok(Loaded { sb, geo, fallback: None });
        }
        Err(e @ (FsckError::NotCairn(_) | FsckError::CorruptSuperblock(_))) => e,
        Err(e) => return Err(e),
    };
    // The damaged primary's block size and group size are often still
    // right: they say where to look first.
    let hint = Some((1u32.checked_shl(get_u32(&head, 12)).unwrap_or(0), get_u32(&head, 56)));
    match find_copy(img, &backup::search_offsets(hint, size))? {
        Some((sb, g)) => {
            let why = match &err {
                FsckError::NotCairn(_) => "the primary superblock has no cairn signature".to_string(),
                e => format!("the primary {e}"),
            };
            loaded(img, sb, Some((g, why)))
        }
        None => Err(err),
    }
}

/// The first verified backup copy at one of the byte `offsets`, as the
/// primary it stands for, and its group.
fn find_copy(img: &mut Image, offsets: &[u64]) -> Result<Option<(Superblock, u64)>, FsckError> {
    let size = img.size();
    let mut buf = vec![0u8; SB_SIZE];
    for &off in offsets {
        if off.saturating_add(SB_SIZE as u64) > size {
            continue;
        }
        img.read_at(&mut buf[..8], off)?;
        if !Superblock::has_magic(&buf) {
            continue;
        }
        img.read_at(&mut buf, off)?;
        if let Some(copy) = backup::decode_copy(&buf, off, size) {
            let g = u64::from(copy.backup_group);
            return Ok(Some((backup::primary_from_copy(&copy), g)));
        }
    }
    Ok(None)
}

fn loaded(img: &mut Image, sb: Superblock, fallback: Option<(u64, String)>) -> Result<Loaded, FsckError> {
    let geo = geometry(&sb)?;
    img.set_block_size(sb.block_size());
    Ok(Loaded { sb, geo, fallback })
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
        report.push(Code::SbOrphanRootRange, msg, repair);
    }
    if sb.state & !(STATE_CLEAN | STATE_ERRORS) != 0 {
        let msg = format!("superblock: unknown state bits {:#x}", sb.state & !(STATE_CLEAN | STATE_ERRORS));
        if repair {
            sb.state &= STATE_CLEAN | STATE_ERRORS;
            dirty = true;
        }
        report.push(Code::SbUnknownState, msg, repair);
    }
    if sb.state & STATE_ERRORS != 0 {
        report.note("the file system recorded an error while it was mounted; checking everything");
    }
    if sb.state & STATE_CLEAN == 0 {
        report.note("the file system was not cleanly unmounted");
    }
    dirty
}

/// Writes the superblock to block 0 (repair), keeping the rest of block 0,
/// and a fresh copy to every backup group.
pub fn write(img: &mut Image, sb: &Superblock, geo: &Geometry) -> std::io::Result<()> {
    let mut b0 = img.read_block(0)?;
    sb.encode(&mut b0);
    img.write_block(0, &b0)?;
    for g in geo.backup_groups() {
        b0.fill(0);
        backup::copy_for_group(sb, g).encode(&mut b0);
        img.write_block(geo.group_start(g), &b0)?;
    }
    Ok(())
}

/// Checks every backup copy against the primary: it must verify, sit where
/// it says, and share the primary's static fields (`backup::static_fields`).
/// With repair, a copy that does not is rewritten with the primary
/// (`write`, at the end of the check).
pub fn check_backups(
    img: &mut Image,
    sb: &Superblock,
    geo: &Geometry,
    repair: bool,
    report: &mut Report,
) -> Result<bool, FsckError> {
    let mut dirty = false;
    let want = backup::static_fields(sb);
    for g in geo.backup_groups() {
        let blk = geo.group_start(g);
        let buf = img.read_block(blk)?;
        let problem = match backup::decode_copy(&buf, blk * u64::from(geo.block_size), img.size()) {
            None => Some("does not verify"),
            Some(copy) if backup::static_fields(&copy) != want => Some("does not match the primary"),
            Some(_) => None,
        };
        if let Some(p) = problem {
            let fix = if repair { "; rewritten from the primary" } else { "" };
            report.push(
                Code::SbBackupCopy,
                format!("the backup superblock in group {g} (block {blk}) {p}{fix}"),
                repair,
            );
            dirty |= repair;
        }
    }
    Ok(dirty)
}
