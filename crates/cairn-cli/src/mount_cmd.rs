//! `cairn mount`: open and lock the image, mount the engine, serve FUSE.
//!
//! Without `--foreground` the command starts the daemon (itself again, with
//! `--foreground` and a readiness pipe on its standard output, in its own
//! process group so that a terminal's Ctrl-C does not reach it) and returns
//! 0 only once the daemon says the file system is mounted and answering; any
//! failure before that is printed by the parent and returns 1. The daemon's
//! log goes to `--log FILE` or `-o log=FILE`, else to syslog, else to a file
//! (`daemon_log`).
//!
//! The daemon holds an exclusive `flock` on the image for its whole life, so
//! a second mount, a `cairn fsck` or a `cairn mkfs` of a mounted image is
//! refused. It exits after the kernel ends the session (`umount`,
//! `fusermount3 -u`) *and* the engine has committed, checkpointed and marked
//! the image clean; SIGTERM, SIGINT and SIGHUP unmount the mount point first.
//! `cairn umount` (`umount_cmd`) waits for that exit through the image lock.

use crate::{control, daemon_log, image_lock, loopdev, whoami};
use cairn_core::dev::FileDevice;
use cairn_core::Fs;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Arguments of `cairn mount`.
pub struct MountArgs {
    pub image: PathBuf,
    pub mountpoint: PathBuf,
    pub options: Vec<String>,
    pub foreground: bool,
    pub log: Option<PathBuf>,
    /// Internal: tell the parent on stdout when mounted.
    pub notify_ready: bool,
    /// The secret of an encrypted image (`-o keyfile=FILE` also gives a key file).
    pub keys: crate::unlock::KeyArgs,
}

impl MountArgs {
    /// `--key-file`, else `-o keyfile=`; `--passphrase-stdin`.
    fn keys(&self, settings: &cairn_fuse::Settings) -> crate::unlock::KeyArgs {
        let mut keys = self.keys.clone();
        if keys.key_file.is_none() && !keys.passphrase_stdin {
            keys.key_file.clone_from(&settings.key_file);
        }
        keys
    }
}

const READY: &str = "cairn-ready";
const FAILED: &str = "cairn-error: ";
const NOTE: &str = "cairn-note: ";

/// Checks what can be checked before starting a daemon, with clear errors.
fn precheck(a: &MountArgs) -> Result<cairn_fuse::Settings, String> {
    let settings = cairn_fuse::parse_options(&options_with_defaults(a))?;
    let mp = &a.mountpoint;
    match std::fs::metadata(mp) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("mount point {} is not a directory", mp.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("mount point {} does not exist (create it with mkdir)", mp.display()))
        }
        Err(e) => return Err(format!("mount point {}: {e}", mp.display())),
    }
    match std::fs::metadata(&a.image) {
        Ok(m) if m.is_dir() => return Err(format!("{} is a directory, not an image", a.image.display())),
        Ok(_) => {}
        Err(e) => return Err(format!("image {}: {e}", a.image.display())),
    }
    crate::image_check::check_keyed(&a.image, a.keys(&settings).available())?;
    if !whoami::is_root() && !crate::remount_cmd::is_remount(&a.options) {
        fuse_device_usable()?;
    }
    Ok(settings)
}

/// An ordinary user mounts through `fusermount3`, which opens `/dev/fuse`
/// as that user: where it may not, say why and what to do (fusermount3's
/// own "failed to open /dev/fuse: Permission denied" gave no hint).
fn fuse_device_usable() -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err("/dev/fuse does not exist: load the fuse module (`sudo modprobe fuse`) or, in a container, pass the device in (`--device /dev/fuse`)".into())
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let mode = std::fs::metadata("/dev/fuse").map_or(0, |m| m.permissions().mode() & 0o777);
            Err(format!(
                "/dev/fuse is not open to you (mode {mode:04o}): ordinary users mount through it; \
                 `sudo chmod 0666 /dev/fuse` (the mode Debian's fuse3 package gives it), or mount as root"
            ))
        }
        Err(e) => Err(format!("/dev/fuse: {e}")),
    }
}

/// The image's default mount options (`cairn tune -o/-e`) before the
/// mount's own, which win; none when the superblock cannot be read (the
/// mount then says why).
fn options_with_defaults(a: &MountArgs) -> Vec<String> {
    let mut v = FileDevice::open(&a.image, true)
        .ok()
        .and_then(|d| cairn_core::dev::read_superblock(&d).ok())
        .map(|sb| cairn_core::tune::default_options(&sb))
        .unwrap_or_default();
    v.extend(a.options.iter().cloned());
    v
}

/// Runs `cairn mount`.
pub fn run(a: &MountArgs) -> Result<(), String> {
    if crate::remount_cmd::is_remount(&a.options) {
        return crate::remount_cmd::run(&a.mountpoint, &a.options);
    }
    let settings = precheck(a)?;
    if a.foreground {
        serve(a, settings)
    } else {
        start_daemon(a, &settings)
    }
}

fn start_daemon(a: &MountArgs, settings: &cairn_fuse::Settings) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the cairn executable: {e}"))?;
    let image = std::path::absolute(&a.image).unwrap_or_else(|_| a.image.clone());
    let mp = std::path::absolute(&a.mountpoint).unwrap_or_else(|_| a.mountpoint.clone());
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg(&image).arg(&mp).arg("--foreground").arg("--notify-ready");
    for o in &a.options {
        cmd.arg("-o").arg(o);
    }
    if let Some(k) = &a.keys.key_file {
        cmd.arg("--key-file").arg(std::path::absolute(k).unwrap_or_else(|_| k.clone()));
    }
    // A passphrase, read or typed at the prompt, goes to the daemon through
    // a pipe on its standard input.
    let passphrase = if a.keys.passphrase_stdin {
        Some(read_all_stdin()?)
    } else {
        crate::encrypted_mount::prompted_passphrase(&image, &a.keys(settings))?
    };
    if passphrase.is_some() {
        cmd.arg("--passphrase-stdin");
    }
    let asked = a.log.clone().or_else(|| settings.log_file.clone());
    let dest = daemon_log::destination(asked.as_deref(), &image);
    let stderr = daemon_log::open(&dest)?;
    if let daemon_log::Destination::Syslog = dest {
        cmd.arg("--syslog");
    }
    // The log file is the daemon's stderr, opened here: the daemon itself
    // needs no --log.
    let stdin = if passphrase.is_some() { Stdio::piped() } else { Stdio::null() };
    cmd.stdin(stdin).stdout(Stdio::piped()).stderr(stderr).process_group(0).current_dir("/");
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the cairn daemon: {e}"))?;
    if let (Some(p), Some(mut pipe)) = (passphrase, child.stdin.take()) {
        pipe.write_all(&p).map_err(|e| format!("cannot hand the passphrase to the cairn daemon: {e}"))?;
    }
    let out = child.stdout.take().expect("stdout is piped");
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        if line == READY {
            return Ok(());
        }
        if let Some(msg) = line.strip_prefix(NOTE) {
            eprintln!("cairn: {msg}");
            continue;
        }
        if let Some(msg) = line.strip_prefix(FAILED) {
            let _ = child.wait();
            return Err(msg.to_string());
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    Err(format!("the cairn daemon exited before the file system was mounted ({status})"))
}

/// Standard input, whole, in memory that is zeroed when dropped.
fn read_all_stdin() -> Result<zeroize::Zeroizing<Vec<u8>>, String> {
    use std::io::Read;
    let mut bytes = zeroize::Zeroizing::new(Vec::new());
    std::io::stdin()
        .take(cairn_core::crypt::keys::MAX_KEY_FILE)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the passphrase from standard input: {e}"))?;
    Ok(bytes)
}

/// The daemon proper (also `--foreground`).
fn serve(a: &MountArgs, settings: cairn_fuse::Settings) -> Result<(), String> {
    let r = serve_inner(a, settings);
    if let Err(msg) = &r {
        if a.notify_ready {
            let mut so = std::io::stdout();
            let _ = writeln!(so, "{FAILED}{msg}");
            let _ = so.flush();
        }
    }
    r
}

/// A read-only mount of an image whose journal holds committed changes
/// replays them first, through a second, writable handle, as ext4 does
/// while the device is writable (see `cairn_core`'s `ro_recovery`). Where
/// the image cannot be written, the mount goes on and refuses with the
/// reason.
fn recover_for_read_only(
    image: &Path,
    dev: Arc<dyn cairn_core::dev::BlockDevice>,
    opener: &crate::unlock::Opener,
) -> Result<(), String> {
    let pending = match Fs::pending_replay(dev) {
        Ok(n) => n,
        // The mount reports it, with the same words as always.
        Err(_) => return Ok(()),
    };
    if pending == 0 {
        return Ok(());
    }
    let Ok(rw) = FileDevice::open(image, false) else {
        tracing::warn!(pending, "the journal needs recovery, but the image cannot be opened for writing");
        return Ok(());
    };
    tracing::warn!(
        pending,
        "recovery required on a read-only mount of {}: replaying the journal (the image is written for the replay only)",
        image.display()
    );
    Fs::replay_journal(opener.device(rw))
        .map_err(|e| format!("cannot mount {}: the journal replay failed: {e}", image.display()))?;
    Ok(())
}

/// `cairn trim IMAGE`: mounts the engine alone (no FUSE), discards every
/// free extent, unmounts; the bytes discarded. An encrypted image is
/// trimmed only with `allow_discards` (`--allow-discards`): a discard
/// shows which blocks are free.
pub fn trim_image(image: &Path, keys: &crate::unlock::KeyArgs, allow_discards: bool) -> Result<u64, String> {
    crate::image_check::check_keyed(image, keys.available())?;
    crate::encrypted_mount::refuse_trim(image, allow_discards)?;
    let mut settings = cairn_fuse::Settings { allow_discards, ..cairn_fuse::Settings::default() };
    let fs = open_engine(image, &mut settings, &[], keys, &|m| eprintln!("cairn: {m}"))?;
    let trimmed = fs.trim(0, u64::MAX, 0).map_err(|e| format!("{}: {e}", image.display()));
    let unmounted = fs.unmount().map_err(|e| format!("{}: unmount: {e}", image.display()));
    let bytes = trimmed?;
    unmounted?;
    Ok(bytes)
}

/// Opens, locks, unlocks (an encrypted image: `settings` then hold its
/// default options and discard policy, see `encrypted_mount`) and mounts
/// the engine; `own` are the mount's options as given.
fn open_engine(
    image: &Path,
    settings: &mut cairn_fuse::Settings,
    own: &[String],
    keys: &crate::unlock::KeyArgs,
    note: &dyn Fn(&str),
) -> Result<Arc<Fs>, String> {
    let ro = settings.engine.read_only;
    let mut dev = FileDevice::open(image, ro).map_err(|e| format!("cannot open image {}: {e}", image.display()))?;
    image_lock::lock_for_mount(&dev, image, note)?;
    if settings.direct_data {
        if let Err(e) = dev.use_direct_data() {
            tracing::warn!(
                "{}: no O_DIRECT for file data ({e}); it goes through the host's page cache (-o direct_data=0 silences this)",
                image.display()
            );
        }
    }
    let opener = crate::unlock::Opener::for_image(&dev, image, keys)?;
    crate::encrypted_mount::apply(&opener, image, own, settings, note)?;
    let dev = opener.device_with(dev, crate::encrypted_mount::discards(settings));
    if ro {
        recover_for_read_only(image, dev.clone(), &opener)?;
    }
    Fs::mount(dev, settings.engine.clone()).map_err(|e| match e {
        cairn_core::FsError::Corrupt(cairn_format::FormatError::Incompatible(why)) => {
            format!("cannot mount {}: {why}", image.display())
        }
        cairn_core::FsError::Corrupt(c) => {
            format!("{} is not a usable cairn file system: {c} (run `cairn fsck {}`)", image.display(), image.display())
        }
        e => format!("cannot mount {}: {e}", image.display()),
    })
}

/// The space guard keeps this many dirty limits free (the kernel was
/// measured holding up to 2.3 times the limit; see `cairn_fuse::space`).
const SPACE_RESERVE_DIRTY_LIMITS: u64 = 4;

/// The bound on the kernel's dirty page cache for this mount: `-o
/// dirty_limit_mb`, or 1/16 of the file system between 8 and 64 MiB.
fn dirty_limit_bytes(settings: &cairn_fuse::Settings, fs: &Fs) -> u64 {
    if let Some(mb) = settings.dirty_limit_mb.filter(|mb| *mb > 0) {
        return mb << 20;
    }
    let size = fs.statfs().map_or(0, |s| s.blocks * u64::from(s.block_size));
    (size / 16).clamp(8 << 20, 64 << 20)
}

fn serve_inner(a: &MountArgs, settings: cairn_fuse::Settings) -> Result<(), String> {
    let image = std::path::absolute(&a.image).unwrap_or_else(|_| a.image.clone());
    let mp =
        std::fs::canonicalize(&a.mountpoint).map_err(|e| format!("mount point {}: {e}", a.mountpoint.display()))?;
    let notify = a.notify_ready;
    let note = move |m: &str| note(notify, m);
    let keys = a.keys(&settings);
    let mut settings = settings;
    let fs = open_engine(&image, &mut settings, &a.options, &keys, &note)?;
    let lo = match attach_loop(&image, &mut settings) {
        Ok(lo) => lo,
        Err(e) => {
            let _ = fs.unmount();
            return Err(e);
        }
    };
    let dirty_limit = dirty_limit_bytes(&settings, &fs);
    // A read-only mount too: it may turn read-write (`remount,rw`).
    if settings.adapter.writeback_cache {
        settings.adapter.space_reserve = SPACE_RESERVE_DIRTY_LIMITS * dirty_limit;
    }
    let metrics = Arc::new(cairn_fuse::Metrics::new());
    let mounted = cairn_fuse::mount(fs.clone(), &mp, &settings, &image.display().to_string(), metrics.clone());
    // Mounted: the loop device detaches itself when the mount goes. Not
    // mounted: it detaches now.
    if let Some(lo) = lo {
        lo.release();
    }
    let (mut session, space) = match mounted {
        Ok(s) => s,
        Err(e) => {
            let _ = fs.unmount();
            return Err(format!("cannot mount on {}: {e}", mp.display()));
        }
    };
    space.set_mountpoint(mp.clone());
    bound_dirty_pages(&settings, &space, &mp);
    raise_readahead(&settings, &mp);
    if settings.engine.read_only && whoami::is_root() {
        if let Err(e) = crate::remount_cmd::guard_read_only(mp.clone(), fs.clone()) {
            tracing::warn!(error = %e, "cannot watch the mount table: a bare remount,rw would go unnoticed");
        }
    }
    let _control = match control::serve(fs.clone(), metrics, image.clone(), mp.clone()) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "no control socket: `cairn stats {}` will not work", mp.display());
            None
        }
    };
    let mut unmounter = session.unmount_callable();
    let handle = unmount_on_signal(move || unmounter.unmount())?;
    tracing::info!(image = %image.display(), mountpoint = %mp.display(), "mounted");
    if a.notify_ready {
        tell_parent(READY);
    }
    let run = session.run();
    handle.close();
    // `destroy` unmounted the engine already when the kernel said goodbye;
    // this covers a session that ended any other way.
    let un = fs.unmount();
    if let Err(e) = run {
        tracing::error!(error = %e, "FUSE session ended with an error");
    }
    un.map_err(|e| format!("final commit failed: {e}"))?;
    tracing::info!("unmounted; image is clean");
    Ok(())
}

/// Shows `m` to the user: through the parent when it waits for the mount
/// (`notify`; it prints it, see `start_daemon`), else on stderr.
fn note(notify: bool, m: &str) {
    if notify {
        tell_parent(&format!("{NOTE}{m}"));
    } else {
        eprintln!("cairn: {m}");
    }
}

/// One line to the parent waiting in `start_daemon`.
fn tell_parent(line: &str) {
    let mut so = std::io::stdout();
    let _ = writeln!(so, "{line}");
    let _ = so.flush();
}

/// Attaches a loop device for a `fuseblk` mount of an image file (or names
/// the block device itself) in `settings.block_device`. The device, if
/// any, is returned for the caller to release once mounted; an error only
/// when `-o fuseblk` asked for one and none could be had.
fn attach_loop(image: &Path, settings: &mut cairn_fuse::Settings) -> Result<Option<loopdev::LoopDevice>, String> {
    let is_file = std::fs::metadata(image).is_ok_and(|m| m.is_file());
    let want_blk = settings.fuseblk.unwrap_or_else(whoami::is_root);
    if !(want_blk && is_file) {
        if want_blk {
            settings.block_device = Some(image.display().to_string());
        }
        return Ok(None);
    }
    match loopdev::LoopDevice::attach(image) {
        Ok(lo) => {
            settings.block_device = Some(lo.path.clone());
            Ok(Some(lo))
        }
        Err(e) if settings.fuseblk == Some(true) => Err(format!("-o fuseblk: {e}")),
        Err(e) => {
            tracing::warn!(error = %e, "no loop device: mounting as plain fuse; sync(1) will not reach cairn");
            Ok(None)
        }
    }
}

/// Bounds the kernel's dirty page cache for the mount at `mp` to what the
/// space guard reserves (root only). `dirty_limit_mb=0` leaves the
/// kernel's dirty pages unbounded; the guard keeps its default reserve, so
/// `write(2)` still says ENOSPC.
fn bound_dirty_pages(settings: &cairn_fuse::Settings, space: &cairn_fuse::SpaceGuard, mp: &Path) {
    if settings.adapter.space_reserve == 0 || settings.dirty_limit_mb == Some(0) {
        return;
    }
    let mib = space.base_limit() >> 20;
    if !whoami::is_root() {
        tracing::warn!(
            "not root: the kernel's dirty page cache for this mount is not bounded, so buffered writes to a nearly full disk may still fail only at fsync/close"
        );
        return;
    }
    match cairn_fuse::set_dirty_limit(mp, space.base_limit()) {
        Ok(max_bytes) => {
            tracing::info!(mib, path = %max_bytes.display(), "dirty page cache of the mount bounded");
            space.set_bdi_max_bytes(max_bytes);
        }
        Err(e) => tracing::warn!(
            error = %e,
            "could not bound the kernel's dirty page cache for this mount: buffered writes to a nearly full disk may fail only at fsync/close"
        ),
    }
}

/// Sets the mount's readahead window from `-o readahead_kb` (root only).
fn raise_readahead(settings: &cairn_fuse::Settings, mp: &Path) {
    if settings.readahead_kb == 0 || !whoami::is_root() {
        return;
    }
    match cairn_fuse::set_readahead(mp, settings.readahead_kb) {
        Ok(path) => tracing::info!(kb = settings.readahead_kb, path = %path.display(), "readahead window set"),
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the readahead window; reads stay at the kernel's 128 KiB")
        }
    }
}

/// Starts the thread that unmounts (through `unmount`) on the first
/// SIGTERM, SIGINT or SIGHUP; the handle closes the signal iterator.
fn unmount_on_signal<E: std::fmt::Display>(
    mut unmount: impl FnMut() -> Result<(), E> + Send + 'static,
) -> Result<signal_hook::iterator::Handle, String> {
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(|e| format!("signal setup: {e}"))?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("cairn-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::info!(signal = sig, "signal received: unmounting");
                if let Err(e) = unmount() {
                    tracing::error!(error = %e, "unmount after signal failed");
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(handle)
}
