//! `cairn tune IMAGE [--label L] [--uuid U]`: names of an unmounted file
//! system (see `cairn_core::tune`). With no change it prints them.

use cairn_core::dev::FileDevice;
use cairn_core::tune::{self, Changes};
use std::path::Path;

/// Applies the changes and returns what to print: the label and UUID now.
pub fn run(image: &Path, label: Option<String>, uuid: Option<&str>) -> Result<String, String> {
    let shown = image.display();
    let uuid = uuid.map(tune::parse_uuid).transpose().map_err(|e| e.to_string())?;
    let changes = Changes { label, uuid };
    let read_only = changes.label.is_none() && changes.uuid.is_none();
    let dev = FileDevice::open(image, read_only).map_err(|e| format!("cannot open {shown}: {e}"))?;
    dev.lock_exclusive().map_err(|_| format!("{shown} is in use (mounted or being checked); unmount it first"))?;
    let sb = if read_only { tune::read_superblock(&dev) } else { tune::tune(&dev, &changes) }
        .map_err(|e| format!("{shown}: {e}"))?;
    Ok(format!("label: {}\nuuid:  {}", tune::label_text(&sb), tune::format_uuid(&sb.uuid)))
}
