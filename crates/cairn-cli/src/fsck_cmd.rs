//! `cairn fsck`: exit codes as e2fsck's (0 clean, 1 corrected, 4 errors
//! left, 8 operational error).
//!
//! A plain image goes to `cairn_fsck::run`, which opens and locks it. An
//! encrypted one (#54) is opened here: locked as a mount locks it
//! (`FileDevice::lock_exclusive`, the lock fsck itself takes), unlocked with
//! the secret (`unlock`), and checked through the decrypting device
//! (`cairn_core::fsck_source::DeviceSource`), so every pass reads plaintext
//! and a repair writes ciphertext. A wrong secret exits 8 and writes nothing. Without a key
//! option, an encrypted image checked from a terminal asks for its
//! passphrase.

use crate::unlock::{KeyArgs, Opener};
use cairn_core::dev::{BlockDevice, FileDevice};
use cairn_core::fsck_source::DeviceSource;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// Runs `cairn fsck`.
pub fn run(image: &Path, opts: cairn_fsck::Options, keys: &KeyArgs) -> ExitCode {
    crate::init_logging("warn");
    // An image that was never cairn's is named, not checked (a backup
    // superblock named with -b says it is cairn's).
    // A key given, or an encrypted image and a terminal to type its
    // passphrase at: the decrypting path.
    let keyed = keys.given() || (keys.available() && crate::unlock::is_encrypted_image(image));
    if opts.backup_superblock.is_none() || keyed {
        if let Err(m) = crate::image_check::check_keyed(image, keyed) {
            eprintln!("cairn fsck: {m}");
            return ExitCode::from(8);
        }
    }
    let mut out = std::io::stdout();
    let code = if keyed {
        match open_encrypted(image, &opts, keys) {
            Ok(source) => cairn_fsck::run_on(&source, &image.display().to_string(), &opts, &mut out),
            Err(m) => {
                eprintln!("cairn fsck: {m}");
                8
            }
        }
    } else {
        cairn_fsck::run(image, &opts, &mut out)
    };
    ExitCode::from(u8::try_from(code).unwrap_or(8))
}

/// The decrypting device of the encrypted image, locked and unlocked.
fn open_encrypted(
    image: &Path,
    opts: &cairn_fsck::Options,
    keys: &KeyArgs,
) -> Result<DeviceSource<Arc<dyn BlockDevice>>, String> {
    let shown = image.display();
    let writable = opts.repair || opts.preen;
    let raw = FileDevice::open(image, !writable).map_err(|e| format!("cannot open {shown}: {e}"))?;
    raw.lock_exclusive().map_err(|_| format!("{shown} is in use (mounted?); not checking it"))?;
    let opener = Opener::for_image(&raw, image, keys)?;
    Ok(DeviceSource(opener.device(raw)))
}
