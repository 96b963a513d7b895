//! `cairn resize IMAGE SIZE`: grow an unmounted file system (see
//! `cairn_core::resize`). An image file is made longer first (sparse); a
//! block device must already hold SIZE. `cairn resize MOUNTPOINT SIZE`
//! grows a mounted one through its daemon's control socket (see
//! `cairn_core`'s `online_resize`). An encrypted image is grown through its
//! decrypting device, given its key; a mounted one by its daemon, which
//! holds the key already.

use crate::unlock::KeyArgs;
use cairn_core::parse_size;
use std::path::Path;

/// Grows IMAGE (or the file system mounted at a directory) to SIZE; what
/// to print.
pub fn run(image: &Path, size: &str, keys: &KeyArgs) -> Result<String, String> {
    let shown = image.display();
    let want = parse_size(size)?;
    if image.is_dir() {
        if keys.given() {
            return Err(format!("{shown} is a mount point: its daemon holds the key, give none"));
        }
        return grow_mounted(image, want);
    }
    let in_use = "(mounted or being checked); give its mount point to grow it while mounted";
    let dev = crate::unlock::open_image(image, false, keys, Some(in_use))?;
    let sb = cairn_core::dev::read_superblock(dev.as_ref()).map_err(|e| format!("{shown}: {e}"))?;
    if want / u64::from(sb.block_size()) == sb.total_blocks {
        return Ok(grown(&shown.to_string(), &cairn_core::resize::unchanged(&sb), ""));
    }
    // Refused before the image file changes length.
    let bytes = cairn_core::resize::plan(&sb, want).map_err(|e| format!("{shown}: {e}"))?;
    let meta = std::fs::metadata(image).ok();
    let old_len = meta.as_ref().filter(|m| m.is_file()).map(|m| m.len());
    // An image file is lengthened (sparse); on an encrypted one, past its
    // header (`grow_to` of the decrypting device).
    if old_len.is_some() && dev.size() < bytes {
        dev.grow_to(bytes).map_err(|e| format!("{shown}: cannot make the image long enough: {e}"))?;
    }
    match cairn_core::resize::grow(dev.as_ref(), bytes) {
        Ok(g) => Ok(grown(&shown.to_string(), &g, "")),
        Err(e) => {
            if let Some(l) = old_len {
                let _ = std::fs::OpenOptions::new().write(true).open(image).and_then(|f| f.set_len(l));
            }
            Err(format!("{shown}: {e}"))
        }
    }
}

/// Asks the daemon serving `mountpoint` to grow its file system to `bytes`.
fn grow_mounted(mountpoint: &Path, bytes: u64) -> Result<String, String> {
    let shown = mountpoint.display();
    let canon = std::fs::canonicalize(mountpoint).map_err(|e| format!("{shown}: {e}"))?;
    let answer = crate::control::ask(&canon, &format!("grow {bytes}"))?;
    if let Some(e) = answer.get("error").and_then(|e| e.as_str()) {
        return Err(format!("{shown}: {e}"));
    }
    let n = |k: &str| answer.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let g = cairn_core::resize::Grown {
        old_blocks: n("old_blocks"),
        new_blocks: n("new_blocks"),
        old_groups: n("old_groups"),
        new_groups: n("new_groups"),
        block_size: u32::try_from(n("block_size")).unwrap_or(0),
    };
    Ok(grown(&shown.to_string(), &g, " while mounted"))
}

/// The line a grow prints: from and to, or, at the size it has already,
/// that there was nothing to do (as resize2fs: exit 0).
fn grown(shown: &str, g: &cairn_core::resize::Grown, how: &str) -> String {
    let b = |n: u64| cairn_core::human_bytes(n * u64::from(g.block_size));
    if g.old_blocks == g.new_blocks {
        return format!("{shown}: already {}; nothing to do", b(g.new_blocks));
    }
    format!(
        "{shown}: grown from {} to {} ({} to {} groups){how}",
        b(g.old_blocks),
        b(g.new_blocks),
        g.old_groups,
        g.new_groups
    )
}
