//! `cairn tune`: renaming an unmounted file system — its label and its
//! UUID — as `tune2fs -L` / `tune2fs -U` and `xfs_admin -L` / `-U` do, and
//! its defaults for mounts: the error behaviour (`tune2fs -e`) and default
//! mount options (`tune2fs -o` / `-E mount_opts=`), which a mount puts
//! before its own `-o`.
//!
//! ## What changes on disk
//! Only the superblock: the primary in block 0 and every backup copy
//! (`cairn_format::backup`), which must keep sharing the primary's static
//! fields. The label is 32 bytes, NUL-padded.
//!
//! Every metadata checksum but the superblock's is seeded from the UUID.
//! As ext4's `metadata_csum_seed`, the first UUID change stores the seed the
//! old UUID gave in the superblock (`csum_seed`) and sets
//! `INCOMPAT_CSUM_SEED`: no other block is rewritten, however large the
//! file system, and later changes only write the UUID. A build that does
//! not know the feature refuses the image instead of finding every checksum
//! wrong.
//!
//! ## Crash safety
//! The copies are written and flushed first, the primary last, as mkfs
//! does. A crash in between leaves a primary with the old names and copies
//! with the new ones: both seed checksums alike (the seed is kept, not
//! recomputed), so the file system mounts as it was, and `cairn fsck`
//! reports the copies that differ from the primary and `--repair` rewrites
//! them from it. Running `tune` again finishes the change.
//!
//! ## Refused
//! An image that was not cleanly unmounted (its journal may hold records
//! to replay, and a repair may rewrite the superblock): mount and unmount
//! it, or run `cairn fsck --repair`, first. The caller holds the image's
//! exclusive lock, so no mount or fsck runs meanwhile.

use crate::dev::BlockDevice;
use crate::error::{FsError, Result, TuneError};
use cairn_format::backup;
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, INCOMPAT_CSUM_SEED, STATE_CLEAN};

/// Bytes a label may have.
pub const LABEL_MAX: usize = 32;

/// A new UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewUuid {
    /// A random (version 4) UUID.
    Random,
    /// This UUID.
    Exactly([u8; 16]),
}

/// What to change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    pub label: Option<String>,
    pub uuid: Option<NewUuid>,
    /// `ERRORS_*`, or 0 to unset.
    pub errors: Option<u32>,
    /// Default mount options ("" clears them); the caller checks they parse.
    pub mount_opts: Option<String>,
}

/// `continue|remount-ro|shutdown|default` as `default_errors`.
pub fn parse_errors(s: &str) -> Result<u32> {
    use cairn_format::superblock::{ERRORS_CONTINUE, ERRORS_REMOUNT_RO, ERRORS_SHUTDOWN};
    Ok(match s {
        "continue" => ERRORS_CONTINUE,
        "remount-ro" => ERRORS_REMOUNT_RO,
        "shutdown" | "panic" => ERRORS_SHUTDOWN,
        "default" => 0,
        _ => return Err(TuneError::Errors(s.to_owned()).into()),
    })
}

/// `default_errors` as `-o errors=` spells it (None when unset).
pub fn errors_text(v: u32) -> Option<&'static str> {
    use cairn_format::superblock::{ERRORS_CONTINUE, ERRORS_REMOUNT_RO, ERRORS_SHUTDOWN};
    match v {
        ERRORS_CONTINUE => Some("continue"),
        ERRORS_REMOUNT_RO => Some("remount-ro"),
        ERRORS_SHUTDOWN => Some("shutdown"),
        _ => None,
    }
}

/// The options a mount of `sb` starts from, before its own `-o`: the
/// default mount options and the default error behaviour.
pub fn default_options(sb: &Superblock) -> Vec<String> {
    let mut v = Vec::new();
    let opts = sb.mount_opts_text();
    if !opts.is_empty() {
        v.push(opts);
    }
    if let Some(e) = errors_text(sb.default_errors) {
        v.push(format!("errors={e}"));
    }
    v
}

/// Parses a UUID as `cairn tune --uuid` takes it: `random`, or 32 hex
/// digits, with or without the usual dashes.
pub fn parse_uuid(s: &str) -> Result<NewUuid> {
    if s.eq_ignore_ascii_case("random") {
        return Ok(NewUuid::Random);
    }
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let bad = || FsError::from(TuneError::Uuid(s.to_owned()));
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(NewUuid::Exactly(out))
}

/// The UUID in its usual form, `8-4-4-4-12` hex digits.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The label as text (up to its first NUL).
pub fn label_text(sb: &Superblock) -> String {
    let end = sb.label.iter().position(|b| *b == 0).unwrap_or(LABEL_MAX);
    String::from_utf8_lossy(&sb.label[..end]).into_owned()
}

fn random_uuid() -> [u8; 16] {
    let mut u: [u8; 16] = rand::random();
    u[6] = (u[6] & 0x0f) | 0x40; // version 4
    u[8] = (u[8] & 0x3f) | 0x80; // RFC 4122 variant
    u
}

/// Applies `changes` to the unmounted file system on `dev` (see the module
/// essay) and returns the new superblock. The caller holds the image's
/// exclusive lock.
pub fn tune(dev: &dyn BlockDevice, changes: &Changes) -> Result<Superblock> {
    let old = crate::dev::read_superblock(dev)?;
    if old.state & STATE_CLEAN == 0 {
        return Err(TuneError::NotClean.into());
    }
    let mut sb = old.clone();
    if let Some(label) = &changes.label {
        if label.len() > LABEL_MAX || label.as_bytes().contains(&0) {
            return Err(TuneError::Label { label: label.clone(), max: LABEL_MAX }.into());
        }
        sb.label = [0; LABEL_MAX];
        sb.label[..label.len()].copy_from_slice(label.as_bytes());
    }
    if let Some(e) = changes.errors {
        sb.default_errors = e;
    }
    if let Some(o) = &changes.mount_opts {
        let max = cairn_format::superblock::MOUNT_OPTS_LEN;
        if o.len() > max || o.as_bytes().contains(&0) {
            return Err(TuneError::MountOpts { opts: o.clone(), max }.into());
        }
        sb.mount_opts = [0; cairn_format::superblock::MOUNT_OPTS_LEN];
        sb.mount_opts[..o.len()].copy_from_slice(o.as_bytes());
    }
    if let Some(u) = changes.uuid {
        let uuid = match u {
            NewUuid::Random => random_uuid(),
            NewUuid::Exactly(u) => u,
        };
        if sb.feature_incompat & INCOMPAT_CSUM_SEED == 0 && uuid != sb.uuid {
            sb.csum_seed = sb.csum_seed();
            sb.feature_incompat |= INCOMPAT_CSUM_SEED;
        }
        sb.uuid = uuid;
    }
    if sb == old {
        return Ok(sb);
    }
    debug_assert_eq!(sb.csum_seed(), old.csum_seed());
    write_superblocks(dev, &sb, &Geometry::new(&sb)?)?;
    Ok(sb)
}

/// Writes `sb`'s copies to the backup groups of `geo` and flushes (the
/// primary is not touched: a grow while mounted logs it).
pub(crate) fn write_backups(dev: &dyn BlockDevice, sb: &Superblock, geo: &Geometry) -> Result<()> {
    let bs = sb.block_size() as usize;
    let mut block = vec![0u8; bs];
    for g in geo.backup_groups() {
        block.fill(0);
        backup::copy_for_group(sb, g).encode(&mut block);
        dev.write_at(&block, geo.group_start(g) * bs as u64)?;
    }
    dev.flush()?;
    Ok(())
}

/// Writes `sb` to the backup groups of `geo`, flushes, then writes it to
/// block 0 (keeping whatever follows it there) and flushes: the copies
/// first, the primary last, as mkfs and fsck do.
pub(crate) fn write_superblocks(dev: &dyn BlockDevice, sb: &Superblock, geo: &Geometry) -> Result<()> {
    write_backups(dev, sb, geo)?;
    let mut block = vec![0u8; sb.block_size() as usize];
    dev.read_at(&mut block, 0)?;
    sb.encode(&mut block);
    dev.write_at(&block, 0)?;
    dev.flush()?;
    Ok(())
}
