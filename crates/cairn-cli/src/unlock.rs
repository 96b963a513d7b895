//! Opening an encrypted image (#54): where the secret comes from, and the
//! device a command runs on.
//!
//! Every command that opens an image takes `--key-file FILE` and
//! `--passphrase-stdin` ([`KeyArgs`]). A command opens the raw image as
//! usual (its lock, `O_DIRECT`), then hands it to an [`Opener`]: a plain image
//! is used as it is; an encrypted one (`cairn_core::crypt`) is unlocked with
//! the secret and the command runs on the decrypting device. An encrypted
//! image without a secret, a secret for a plain image, and a wrong secret
//! are refused with a message that says which, and nothing is written.
//!
//! The secret is read once, into zeroed-on-drop memory, and never printed.

use cairn_core::crypt::{self, CryptError, Discards, Secret, Unlocked};
use cairn_core::dev::BlockDevice;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// How the secret of an encrypted image is given.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KeyArgs {
    /// Open (or, with mkfs --encrypt, protect) the encrypted image with the key in FILE
    /// (its whole contents; up to 8 MiB).
    #[arg(long, value_name = "FILE", conflicts_with = "passphrase_stdin")]
    pub key_file: Option<PathBuf>,
    /// Read the encrypted image's passphrase from standard input (one trailing newline is
    /// not part of it).
    #[arg(long)]
    pub passphrase_stdin: bool,
}

impl KeyArgs {
    /// Whether a secret was given at all.
    pub fn given(&self) -> bool {
        self.key_file.is_some() || self.passphrase_stdin
    }

    /// Reads the secret, if one was given.
    pub fn secret(&self) -> Result<Option<Secret>, String> {
        if let Some(path) = &self.key_file {
            return Secret::read_key_file(path).map(Some).map_err(|e| e.to_string());
        }
        if !self.passphrase_stdin {
            return Ok(None);
        }
        let mut bytes = Zeroizing::new(Vec::new());
        std::io::stdin()
            .take(crypt::keys::MAX_KEY_FILE)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read the passphrase from standard input: {e}"))?;
        Secret::passphrase(bytes).map(Some).map_err(|e| e.to_string())
    }
}

/// The secret of a new key slot (`cairn key add|change`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NewKeyArgs {
    /// The new slot opens with the key in FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "new_passphrase_stdin")]
    pub new_key_file: Option<PathBuf>,
    /// The new slot opens with a passphrase read from standard input.
    #[arg(long, conflicts_with = "passphrase_stdin")]
    pub new_passphrase_stdin: bool,
}

impl NewKeyArgs {
    /// Reads the new secret; one of the two must be given.
    pub fn secret(&self) -> Result<Secret, String> {
        let as_key = KeyArgs { key_file: self.new_key_file.clone(), passphrase_stdin: self.new_passphrase_stdin };
        as_key.secret()?.ok_or_else(|| "give the new key: --new-key-file FILE or --new-passphrase-stdin".into())
    }
}

/// What turns a raw handle on the image into the device a command runs
/// on: nothing for a plain image, the unlocked key for an encrypted one.
pub enum Opener {
    Plain,
    Encrypted(Unlocked),
}

impl Opener {
    /// Looks at the image on `raw`: a plain one needs no secret (and is
    /// refused one); an encrypted one is unlocked with `keys`' secret (a
    /// wrong one changes nothing).
    pub fn for_image(raw: &dyn BlockDevice, image: &Path, keys: &KeyArgs) -> Result<Opener, String> {
        if !crypt::is_encrypted(raw) {
            if keys.given() {
                return Err(format!("{} is not an encrypted image: it needs no key", image.display()));
            }
            return Ok(Opener::Plain);
        }
        let Some(secret) = keys.secret()? else { return Err(crate::image_check::encrypted(image)) };
        crypt::unlock(raw, &secret).map(Opener::Encrypted).map_err(|e| match e {
            CryptError::WrongKey => format!("cannot open {}: {e}; nothing was changed", image.display()),
            e => format!("cannot open encrypted image {}: {e}", image.display()),
        })
    }

    /// The device over `raw`, a handle on the image this opener looked at.
    /// Discards never reach an encrypted image's file (they would show
    /// which blocks are free).
    pub fn device<D: BlockDevice + 'static>(&self, raw: D) -> Arc<dyn BlockDevice> {
        match self {
            Opener::Plain => Arc::new(raw),
            Opener::Encrypted(u) => Arc::new(u.device(raw, Discards::Refused)),
        }
    }
}
