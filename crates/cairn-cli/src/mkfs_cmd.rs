//! `cairn mkfs`: create (sparse) and format an image file or block device.
//!
//! Refuses to overwrite a file system it recognises (cairn's own, or any
//! format `cairn_format::foreign` names: ext2/3/4, XFS, btrfs, LUKS, a
//! partition table, ...) unless `--force`: formatting the wrong file is the
//! one mistake mkfs cannot undo.

use cairn_core::crypt::{self, measure_cost};
use cairn_core::dev::{BlockDevice, FileDevice};
use cairn_core::mkfs::{create_lost_found, format, MkfsOptions};
use cairn_core::{human_bytes as human, parse_size};
use cairn_format::crypt_header::{CIPHER, DATA_OFFSET};
use cairn_format::foreign::{identify, Content, HEAD_BYTES};
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;

/// Arguments of `cairn mkfs`.
pub struct MkfsArgs<'a> {
    pub image: &'a Path,
    pub size: Option<&'a str>,
    pub block_size: u32,
    pub group_size: Option<&'a str>,
    pub inode_ratio: Option<&'a str>,
    pub journal_size: Option<&'a str>,
    pub label: Option<&'a str>,
    /// `--root-owner UID:GID`.
    pub root_owner: Option<&'a str>,
    pub force: bool,
    pub quiet: bool,
    /// `--encrypt`: an encrypted image (#54) opened by `keys`' secret.
    pub encrypt: bool,
    pub keys: &'a crate::unlock::KeyArgs,
}

/// What `head` holds that mkfs must not overwrite unasked: a cairn file
/// system or any format [`cairn_format::foreign`] knows.
fn occupant(head: &[u8]) -> Option<&'static str> {
    match identify(head) {
        Content::Cairn => Some("a cairn file system"),
        Content::Encrypted => Some("an encrypted cairn file system"),
        Content::Foreign(f) => Some(f.name()),
        Content::Empty | Content::Zeros | Content::Unknown => None,
    }
}

fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let mut head = vec![0u8; HEAD_BYTES];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..])? {
            0 => break,
            k => n += k,
        }
    }
    head.truncate(n);
    Ok(head)
}

/// `UID:GID`, two numbers (as mke2fs's `-E root_owner`).
fn parse_owner(o: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--root-owner {o:?}: give UID:GID as numbers, e.g. 1000:1000");
    let (u, g) = o.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

/// Runs `cairn mkfs`.
pub fn run(a: &MkfsArgs) -> Result<(), String> {
    let shown = a.image.display();
    if a.encrypt && !a.keys.available() {
        return Err("--encrypt needs the secret that will open the image: --key-file FILE or --passphrase-stdin \
                    (or a terminal to type a passphrase at)"
            .into());
    }
    if !a.encrypt && a.keys.given() {
        return Err("--key-file and --passphrase-stdin are for an encrypted image: add --encrypt".into());
    }
    let meta = std::fs::metadata(a.image).ok();
    let is_blockdev = meta.as_ref().is_some_and(|m| m.file_type().is_block_device());
    if meta.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(format!("{shown} is a directory, not an image file"));
    }
    let size = match a.size {
        Some(s) => Some(parse_size(s).map_err(|e| format!("--size: {e}"))?),
        None if is_blockdev || meta.as_ref().is_some_and(|m| m.len() > 0) => None,
        None => return Err(format!("{shown} does not exist or is empty: give its size with --size (e.g. --size 1G)")),
    };
    if let Some(m) = &meta {
        if m.len() > 0 || is_blockdev {
            let head = read_head(a.image).map_err(|e| format!("cannot read {shown}: {e}"))?;
            if let Some(what) = occupant(&head) {
                if !a.force {
                    let no_conversion =
                        if a.encrypt { " (--encrypt makes a new file system; it does not convert one)" } else { "" };
                    return Err(format!(
                        "{shown} already holds {what}; refusing to overwrite it{no_conversion} (use --force to format anyway)"
                    ));
                }
                if !a.quiet {
                    eprintln!("cairn mkfs: overwriting {what} in {shown} (--force)");
                }
            }
        }
    }
    // The root directory and /lost+found belong to whoever makes the file
    // system (as mke2fs does), so an ordinary user can use an image they
    // formatted; or to `--root-owner`.
    let (uid, gid) = match a.root_owner {
        Some(o) => parse_owner(o)?,
        None => crate::whoami::ids().unwrap_or((0, 0)),
    };
    let mut opts = MkfsOptions { block_size: a.block_size, root_uid: uid, root_gid: gid, ..MkfsOptions::default() };
    if let Some(g) = a.group_size {
        let bytes = parse_size(g).map_err(|e| format!("--group-size: {e}"))?;
        let blocks = bytes / u64::from(a.block_size);
        opts.blocks_per_group =
            Some(u32::try_from(blocks).map_err(|_| format!("--group-size {g}: too large for one bitmap block"))?);
    }
    if let Some(r) = a.inode_ratio {
        opts.bytes_per_inode = parse_size(r).map_err(|e| format!("--inode-ratio: {e}"))?;
        if opts.bytes_per_inode < u64::from(a.block_size) {
            return Err(format!("--inode-ratio {r}: must be at least one block ({} bytes)", a.block_size));
        }
    }
    if let Some(j) = a.journal_size {
        opts.journal_blocks =
            Some(parse_size(j).map_err(|e| format!("--journal-size: {e}"))? / u64::from(a.block_size));
    }
    if let Some(l) = a.label {
        if l.len() > 32 {
            return Err(format!("--label '{l}': at most 32 bytes"));
        }
        opts.label = l.to_string();
    }
    // Validate the geometry before touching the file.
    let planned_size = size.unwrap_or_else(|| meta.as_ref().map(|m| m.len()).unwrap_or(0));
    // An encrypted image's file system starts after the header region.
    let planned_size = if a.encrypt { planned_size.saturating_sub(DATA_OFFSET) } else { planned_size };
    if !is_blockdev {
        cairn_core::mkfs::plan(planned_size, &opts)
            .map_err(|e| format!("cannot format {}: {e}", human(planned_size)))?;
    }
    // Nothing changes before the image's lock is ours: a mounted image (its
    // daemon holds the lock) must be refused before it is resized. A missing
    // file is created empty first; it cannot be in use.
    let created = !is_blockdev && meta.is_none();
    if !is_blockdev {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(a.image)
            .map_err(|e| format!("cannot create {shown}: {e}"))?;
    }
    // A file this command created goes again if formatting fails (a size
    // the host file system cannot hold, a full host disk).
    let result = format_locked(a, &mut opts, is_blockdev, size);
    if result.is_err() && created {
        let _ = std::fs::remove_file(a.image);
    }
    result
}

/// The part of [`run`] after the image exists: lock, size, format.
fn format_locked(a: &MkfsArgs, opts: &mut MkfsOptions, is_blockdev: bool, size: Option<u64>) -> Result<(), String> {
    let shown = a.image.display();
    let mut dev = FileDevice::open(a.image, false).map_err(|e| format!("cannot open {shown}: {e}"))?;
    dev.lock_exclusive().map_err(|_| format!("{shown} is in use (mounted or being checked); not formatting it"))?;
    if let (false, Some(s)) = (is_blockdev, size) {
        dev.set_len(s).map_err(|e| format!("cannot size {shown} to {}: {e}", human(s)))?;
    }
    if let (true, Some(s)) = (is_blockdev, size) {
        if s > dev.size() {
            return Err(format!("--size {} is larger than the device ({})", human(s), human(dev.size())));
        }
        // The file system takes the first `s` bytes of the device.
        opts.size = Some(if a.encrypt { s.saturating_sub(DATA_OFFSET) } else { s });
    }
    let dev = secure(a, dev)?;
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} descriptor blocks ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("formatting");
    let t0 = std::time::Instant::now();
    let summary = format(&*dev, opts, &mut |done, total| {
        if t0.elapsed().as_millis() > 300 || bar.length() != Some(0) {
            bar.set_length(total);
            bar.set_position(done);
        }
    })
    .map_err(|e| format!("mkfs of {shown} failed: {e}"))?;
    bar.finish_and_clear();
    create_lost_found(dev).map_err(|e| format!("mkfs of {shown} failed creating /lost+found: {e}"))?;
    if !a.quiet {
        let uuid: String = summary.uuid.iter().map(|b| format!("{b:02x}")).collect();
        println!(
            "cairn mkfs: {shown}: {} in {} blocks of {} bytes, {} groups, {} inodes, journal {}; uuid {uuid}",
            human(summary.total_blocks * u64::from(summary.block_size)),
            summary.total_blocks,
            summary.block_size,
            summary.group_count,
            summary.inodes,
            human(summary.journal_blocks * u64::from(summary.block_size)),
        );
    }
    Ok(())
}

/// The device to format: the image itself, or with `--encrypt` the
/// encrypting device behind a new header whose one key slot `a.keys`'
/// secret opens (its Argon2id cost measured here).
fn secure(a: &MkfsArgs, dev: FileDevice) -> Result<Arc<dyn BlockDevice>, String> {
    if !a.encrypt {
        return Ok(Arc::new(dev));
    }
    let shown = a.image.display();
    let secret =
        a.keys.new_secret_or_prompt(a.image)?.ok_or("--encrypt needs --key-file FILE or --passphrase-stdin")?;
    let cost = measure_cost().map_err(|e| format!("cannot measure the key derivation: {e}"))?;
    let dev = crypt::create(dev, a.block_size, &secret, cost).map_err(|e| format!("cannot encrypt {shown}: {e}"))?;
    if !a.quiet {
        println!(
            "cairn mkfs: {shown}: encrypted with {CIPHER}; key slot 0 ({:?}): Argon2id, {} MiB, {} passes",
            secret.kind,
            cost.memory_kib >> 10,
            cost.passes
        );
    }
    Ok(Arc::new(dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_mkfs_will_not_overwrite_unasked() {
        let mut h = vec![0u8; HEAD_BYTES];
        assert_eq!(occupant(&h), None);
        h[1080] = 0x53;
        h[1081] = 0xef;
        assert_eq!(occupant(&h), Some("an ext2 file system"));
        let mut c = vec![0u8; 100];
        c[..8].copy_from_slice(b"CAIRNFS\0");
        assert_eq!(occupant(&c), Some("a cairn file system"));
        assert_eq!(occupant(&[]), None);
    }

    #[test]
    fn root_owner_is_two_numbers() {
        assert_eq!(parse_owner("1000:100"), Ok((1000, 100)));
        for bad in ["1000", "a:b", "1000:", ":5", "-1:0", "1:2:3"] {
            assert!(parse_owner(bad).unwrap_err().contains("UID:GID"), "{bad}");
        }
    }
}
