//! `cairn tune IMAGE [--label L] [--uuid U]`: names of an unmounted file
//! system (see `cairn_core::tune`). With no change it prints them. An
//! encrypted image is changed through its decrypting device, given its key.

use crate::unlock::KeyArgs;
use cairn_core::tune::{self, Changes};
use std::path::Path;

/// The changes asked for on the command line, as given.
pub struct Asked<'a> {
    pub label: Option<String>,
    pub uuid: Option<&'a str>,
    pub errors: Option<&'a str>,
    pub mount_opts: Option<String>,
}

/// Applies the changes and returns what to print: the names and defaults now.
pub fn run(image: &Path, asked: Asked, keys: &KeyArgs) -> Result<String, String> {
    let Asked { label, uuid, errors, mount_opts } = asked;
    let shown = image.display();
    let uuid = uuid.map(tune::parse_uuid).transpose().map_err(|e| e.to_string())?;
    let errors = errors.map(tune::parse_errors).transpose().map_err(|e| e.to_string())?;
    if let Some(o) = &mount_opts {
        // Refused now, not at the next mount.
        cairn_fuse::parse_options(&[o.as_str()]).map_err(|e| format!("default mount options: {e}"))?;
    }
    let changes = Changes { label, uuid, errors, mount_opts };
    let read_only =
        changes.label.is_none() && changes.uuid.is_none() && changes.errors.is_none() && changes.mount_opts.is_none();
    let dev = crate::unlock::open_image(image, read_only, keys, Some("(mounted or being checked); unmount it first"))?;
    let dev = dev.as_ref();
    let sb = if read_only { cairn_core::dev::read_superblock(dev) } else { tune::tune(dev, &changes) }
        .map_err(|e| format!("{shown}: {e}"))?;
    Ok(format!(
        "label: {}\nuuid:  {}\nerrors: {}\nmount options: {}",
        tune::label_text(&sb),
        tune::format_uuid(&sb.uuid),
        tune::errors_text(sb.default_errors).unwrap_or("default (remount-ro)"),
        sb.mount_opts_text()
    ))
}
