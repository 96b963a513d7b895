//! `cairn key list IMAGE`: the key slots of an encrypted image (#54), read
//! from its header without a key (as `cryptsetup luksDump`): each used
//! slot's number, kind and Argon2id cost. Only reads. Adding, removing and
//! changing slots are the next stage.

use cairn_core::crypt::{self, CryptError};
use cairn_core::dev::FileDevice;
use cairn_format::crypt_header::{Copy, SlotKind, CIPHER};
use std::fmt::Write;
use std::path::Path;

/// The listing `cairn key list` prints.
pub fn list(image: &Path) -> Result<String, String> {
    let shown = image.display();
    let raw = FileDevice::open(image, true).map_err(|e| format!("cannot open {shown}: {e}"))?;
    let (header, from) = crypt::read_header(&raw).map_err(|e| match e {
        CryptError::NotEncrypted => format!("{shown} is not an encrypted image: it has no key slots"),
        e => format!("{shown}: {e}"),
    })?;
    let mut out = format!(
        "{shown}: {CIPHER}, blocks of {} bytes from byte {}, header generation {}",
        header.block_size, header.data_offset, header.generation
    );
    if from == Copy::Backup {
        out.push_str(" (read from its copy: the primary header is damaged)");
    }
    for (i, slot) in header.used_slots() {
        let kind = match slot.kind {
            SlotKind::Passphrase => "passphrase",
            SlotKind::KeyFile => "key file",
        };
        let c = slot.cost;
        let _ = write!(
            out,
            "\nslot {i}: {kind}, Argon2id {} KiB, {} passes, {} lane{}",
            c.memory_kib,
            c.passes,
            c.lanes,
            if c.lanes == 1 { "" } else { "s" }
        );
    }
    Ok(out)
}
