//! What a mount of an encrypted image (#54) does beyond a plain one.
//!
//! * **Default mount options.** `cairn tune -o` stores them in the
//!   superblock, which on an encrypted image is ciphertext until the key
//!   opens it: the options are read through the decrypting device once the
//!   daemon has unlocked it, and the settings parsed again with them first
//!   ([`apply`]). So an encrypted image's defaults hold for everything the
//!   daemon decides (the engine's options, FUSE's); the background parent
//!   never sees them (`-o log=` among the defaults is not honoured for
//!   an encrypted image: give it to the mount).
//! * **Discards**, off unless asked for (as LUKS' `allow-discards`): a
//!   discard punches a hole that reads back as zeros, no block's
//!   ciphertext, and so shows which blocks are free. Without `-o
//!   allow_discards` the device drops every discard, `-o discard` is turned
//!   off with a note, and `fstrim` is answered EOPNOTSUPP ("the discard
//!   operation is not supported", as dm-crypt answers it). `allow_discards`
//!   on a plain image changes nothing.
//! * **The passphrase prompt** of a background mount: the parent asks on its
//!   terminal and hands the passphrase to the daemon through the pipe that
//!   `--passphrase-stdin` uses ([`prompted_passphrase`]).

use crate::unlock::{KeyArgs, Opener};
use cairn_core::crypt::Discards;
use cairn_core::dev::FileDevice;
use std::path::Path;
use zeroize::Zeroizing;

/// Why an encrypted image's free space is not discarded.
pub const DISCARDS_REFUSED: &str = "an encrypted image's free space is not discarded unless asked for: a discard \
    shows which blocks are free (`-o allow_discards` at mount, `cairn trim --allow-discards`; see docs/encryption.md)";

/// How the device of an image opened by `opener` treats discards.
pub fn discards(settings: &cairn_fuse::Settings) -> Discards {
    if settings.allow_discards {
        Discards::Allowed
    } else {
        Discards::Refused
    }
}

/// For an encrypted `image` that `opener` unlocked: the settings parsed
/// again with the image's default options before `own` (the mount's), and
/// the discard policy applied. Nothing for a plain image.
pub fn apply(
    opener: &Opener,
    image: &Path,
    own: &[String],
    settings: &mut cairn_fuse::Settings,
    note: &dyn Fn(&str),
) -> Result<(), String> {
    if !opener.encrypted() {
        return Ok(());
    }
    let view = FileDevice::open(image, true).map(|raw| opener.device(raw));
    let sb = view.ok().and_then(|dev| cairn_core::dev::read_superblock(dev.as_ref()).ok());
    let defaults = sb.map(|sb| cairn_core::tune::default_options(&sb)).unwrap_or_default();
    if !defaults.is_empty() {
        let keep = (settings.key_file.clone(), settings.log_file.clone());
        *settings = cairn_fuse::parse_options(&[defaults, own.to_vec()].concat())?;
        (settings.key_file, settings.log_file) = keep;
    }
    if !settings.allow_discards {
        if settings.engine.discard {
            note(&format!("-o discard is off: {DISCARDS_REFUSED}"));
            settings.engine.discard = false;
        }
        settings.adapter.trim_refused = true;
    }
    Ok(())
}

/// The passphrase a background mount asks for on its terminal: when no key
/// is given (`keys`, with `-o keyfile=` folded in), standard input is a
/// terminal and the image is encrypted; else none.
pub fn prompted_passphrase(image: &Path, keys: &KeyArgs) -> Result<Option<Zeroizing<Vec<u8>>>, String> {
    use std::io::IsTerminal;
    if keys.given() || !std::io::stdin().is_terminal() {
        return Ok(None);
    }
    let Ok(raw) = FileDevice::open(image, true) else { return Ok(None) };
    if !cairn_core::crypt::is_encrypted(&raw) {
        return Ok(None);
    }
    crate::unlock::typed(&format!("Passphrase for {}: ", image.display())).map(Some)
}

/// `cairn trim IMAGE` on an encrypted image without `--allow-discards`:
/// refused before any key is asked for.
pub fn refuse_trim(image: &Path, allow_discards: bool) -> Result<(), String> {
    let Ok(raw) = FileDevice::open(image, true) else { return Ok(()) };
    if !allow_discards && cairn_core::crypt::is_encrypted(&raw) {
        return Err(format!("{}: {DISCARDS_REFUSED}", image.display()));
    }
    Ok(())
}
