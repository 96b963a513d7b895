//! `cairn key list|add|change|remove IMAGE`: the key slots of an encrypted
//! image (#54).
//!
//! `list` reads the header without a key (as `cryptsetup luksDump`): each
//! used slot's number, kind and Argon2id cost. The others take a secret that
//! opens a slot (`--key-file`, `--passphrase-stdin`) and rewrite both copies
//! of the header (`cairn_core::crypt::change_slots`): `add` fills a free
//! slot with a new secret (`--new-key-file`, `--new-passphrase-stdin`),
//! `change` replaces the secret of the slot that opened, `remove` empties
//! `--slot N` or the slot that opened, never the last one. They take the
//! image's lock, so a mounted image is refused; the master key, and so every
//! encrypted block, stays as it was.

use crate::unlock::{KeyArgs, NewKeyArgs};
use cairn_core::crypt::{self, CryptError, SlotChange};
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

/// What `add`, `change` and `remove` do.
pub enum Edit<'a> {
    Add(&'a NewKeyArgs),
    Change(&'a NewKeyArgs),
    Remove(Option<usize>),
}

/// Runs `cairn key add|change|remove`; what it did, in words.
pub fn edit(image: &Path, keys: &KeyArgs, edit: Edit) -> Result<String, String> {
    let shown = image.display();
    let raw = FileDevice::open(image, false).map_err(|e| format!("cannot open {shown}: {e}"))?;
    raw.lock_exclusive().map_err(|_| format!("{shown} is in use (mounted?); unmount it first"))?;
    if !crypt::is_encrypted(&raw) {
        return Err(format!("{shown} is not an encrypted image: it has no key slots"));
    }
    let secret = keys.secret_or_prompt(image)?.ok_or_else(|| crate::image_check::encrypted(image))?;
    let new = match &edit {
        Edit::Add(n) | Edit::Change(n) => Some(n.secret(image)?),
        Edit::Remove(_) => None,
    };
    let cost = || crypt::measure_cost().map_err(|e| format!("cannot measure the key derivation: {e}"));
    let (change, verb) = match (&edit, &new) {
        (Edit::Add(_), Some(n)) => (SlotChange::Add(n, cost()?), "added"),
        (Edit::Change(_), Some(n)) => (SlotChange::Change(n, cost()?), "changed"),
        (Edit::Remove(which), _) => (SlotChange::Remove(*which), "removed"),
        _ => unreachable!("a new secret was read for add and change"),
    };
    let slot = crypt::change_slots(&raw, &secret, change).map_err(|e| match e {
        CryptError::WrongKey => format!("cannot open {shown}: {e}; nothing was changed"),
        e => format!("{shown}: {e}; nothing was changed"),
    })?;
    Ok(format!("cairn key: {shown}: key slot {slot} {verb}"))
}
