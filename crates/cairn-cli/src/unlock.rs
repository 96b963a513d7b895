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
//! Without either option, a command whose standard input is a terminal asks
//! for the passphrase there (echo off, `rpassword`); `mkfs --encrypt` asks
//! twice. Elsewhere (a script, a pipe) no prompt: the command says which
//! options give the key.
//!
//! A key option given for a plain image is an error, not ignored: whoever
//! passes a key believes the image encrypted, and a plain image mistaken
//! for an encrypted one is the mistake worth hearing about.
//!
//! The secret is read once, into zeroed-on-drop memory, and never printed.

use cairn_core::crypt::{self, CryptError, Discards, Secret, Unlocked};
use cairn_core::dev::{BlockDevice, FileDevice};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// How the secret of an encrypted image is given.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KeyArgs {
    /// Open (or, with mkfs --encrypt, protect) the encrypted image with the key in FILE
    /// (its whole contents; up to 8 MiB).
    #[arg(long, value_name = "FILE", conflicts_with = "passphrase_stdin", global = true)]
    pub key_file: Option<PathBuf>,
    /// Read the encrypted image's passphrase from standard input (one trailing newline is
    /// not part of it).
    #[arg(long, global = true)]
    pub passphrase_stdin: bool,
}

impl KeyArgs {
    /// Whether a secret was given at all.
    pub fn given(&self) -> bool {
        self.key_file.is_some() || self.passphrase_stdin
    }

    /// The secret of `image`: the one given, else (standard input a
    /// terminal) a passphrase typed at a prompt, else none.
    pub fn secret_or_prompt(&self, image: &Path) -> Result<Option<Secret>, String> {
        if self.given() || !std::io::stdin().is_terminal() {
            return self.secret();
        }
        let bytes = typed(&format!("Passphrase for {}: ", image.display()))?;
        Secret::passphrase(bytes).map(Some).map_err(|e| e.to_string())
    }

    /// The secret a new image's one key slot opens with: the one given,
    /// else a passphrase typed twice at a terminal, else none.
    pub fn new_secret_or_prompt(&self, image: &Path) -> Result<Option<Secret>, String> {
        if self.given() || !std::io::stdin().is_terminal() {
            return self.secret();
        }
        let first = typed(&format!("New passphrase for {}: ", image.display()))?;
        let again = typed("The same passphrase again: ")?;
        if first != again {
            return Err("the two passphrases differ; nothing was written".into());
        }
        Secret::passphrase(first).map(Some).map_err(|e| e.to_string())
    }

    /// Whether a secret can be had: given, or asked for at a terminal.
    pub fn available(&self) -> bool {
        self.given() || std::io::stdin().is_terminal()
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

/// A passphrase typed at the terminal, echo off.
pub fn typed(question: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    let text =
        Zeroizing::new(rpassword::prompt_password(question).map_err(|e| format!("cannot read the passphrase: {e}"))?);
    Ok(Zeroizing::new(text.as_bytes().to_vec()))
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
    /// Reads the new secret: one of the two, else a passphrase typed twice
    /// at the terminal.
    pub fn secret(&self, image: &Path) -> Result<Secret, String> {
        let as_key = KeyArgs { key_file: self.new_key_file.clone(), passphrase_stdin: self.new_passphrase_stdin };
        as_key
            .new_secret_or_prompt(image)?
            .ok_or_else(|| "give the new key: --new-key-file FILE or --new-passphrase-stdin".into())
    }
}

/// Whether the image at `path` is an encrypted one (its header or the
/// header's copy); false when it cannot be read.
pub fn is_encrypted_image(path: &Path) -> bool {
    FileDevice::open(path, true).is_ok_and(|raw| crypt::is_encrypted(&raw))
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
        let Some(secret) = keys.secret_or_prompt(image)? else { return Err(crate::image_check::encrypted(image)) };
        crypt::unlock(raw, &secret).map(Opener::Encrypted).map_err(|e| match e {
            CryptError::WrongKey => format!("cannot open {}: {e}; nothing was changed", image.display()),
            e => format!("cannot open encrypted image {}: {e}", image.display()),
        })
    }

    /// The device over `raw`, a handle on the image this opener looked at.
    /// Discards never reach an encrypted image's file (they would show
    /// which blocks are free); see [`Opener::device_with`].
    pub fn device<D: BlockDevice + 'static>(&self, raw: D) -> Arc<dyn BlockDevice> {
        self.device_with(raw, Discards::Refused)
    }

    /// As [`Opener::device`], an encrypted image's discards as `discards`
    /// says (`-o allow_discards`, `cairn trim --allow-discards`).
    pub fn device_with<D: BlockDevice + 'static>(&self, raw: D, discards: Discards) -> Arc<dyn BlockDevice> {
        match self {
            Opener::Plain => Arc::new(raw),
            Opener::Encrypted(u) => Arc::new(u.device(raw, discards)),
        }
    }

    /// Whether the image is encrypted.
    pub fn encrypted(&self) -> bool {
        matches!(self, Opener::Encrypted(_))
    }
}

/// Opens `image` for a command (inspect, tune, resize, stats): the device
/// it reads and writes through: what it is checked ([`crate::image_check`]),
/// the raw handle opened (`read_only`) and, unless `in_use` is `None`,
/// locked exclusively (when another process holds it, refused with "IMAGE
/// is in use " and `in_use`), then unlocked when encrypted.
pub fn open_image(
    image: &Path,
    read_only: bool,
    keys: &KeyArgs,
    in_use: Option<&str>,
) -> Result<Arc<dyn BlockDevice>, String> {
    let shown = image.display();
    crate::image_check::check_keyed(image, keys.available())?;
    let raw = FileDevice::open(image, read_only).map_err(|e| format!("cannot open {shown}: {e}"))?;
    if let Some(why) = in_use {
        raw.lock_exclusive().map_err(|_| format!("{shown} is in use {why}"))?;
    }
    Ok(Opener::for_image(&raw, image, keys)?.device(raw))
}
