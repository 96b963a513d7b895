//! # cairn: the command
//!
//! `cairn mkfs | mount | umount | fsck | stats | trim | tune | resize | inspect
//! | bench | completions | manpages`. Each subcommand lives in its own module
//! (the benchmark suite's in-process tools are a binary of their own,
//! `bench/driver`); this file parses the command line and maps outcomes to exit
//! codes: 0 success, 1 failure with a message on stderr, 2 bad usage (clap),
//! and for `fsck` the fsck(8) codes (0 clean, 1 corrected, 4 uncorrected,
//! 8 operational error, 16 usage or syntax error: a bad option or argument
//! of `cairn fsck` exits 16, not clap's 2, as boot scripts read fsck(8)'s).

mod control;
mod daemon_log;
mod encrypted_mount;
mod fsck_cmd;
mod image_check;
mod image_lock;
mod inspect_cmd;
mod key_cmd;
mod loopdev;
mod mkfs_cmd;
mod mount_cmd;
mod remount_cmd;
mod resize_cmd;
mod stats_cmd;
mod stats_summary;
mod syslog;
mod tune_cmd;
mod umount_cmd;
mod unlock;
mod whoami;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: the engine allocates and frees many
/// small objects per operation (decoded B+tree nodes, buffers); under glibc a
/// profile of 300,000 in-process creates spent 30-44% of its time in
/// `_int_malloc`/`malloc_consolidate`, and 250,000 creates into 50
/// directories ran at a median of 60,100 files/s with glibc and 73,600 with
/// mimalloc (3 runs each, `examples/create_files.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A journaling file system in user space: one image file, served through FUSE.
#[derive(Parser)]
#[command(name = "cairn", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// What `cairn key` does.
#[derive(Subcommand)]
enum KeyAction {
    /// List the used key slots (kind and key derivation cost); needs no key.
    List {
        /// The encrypted image.
        image: PathBuf,
    },
    /// Add a key slot for a new key file or passphrase (given an existing key).
    Add {
        image: PathBuf,
        #[command(flatten)]
        keys: unlock::KeyArgs,
        #[command(flatten)]
        new: unlock::NewKeyArgs,
    },
    /// Replace the key of the slot the given key opens.
    Change {
        image: PathBuf,
        #[command(flatten)]
        keys: unlock::KeyArgs,
        #[command(flatten)]
        new: unlock::NewKeyArgs,
    },
    /// Remove a key slot (--slot N, or the one the given key opens); never the last.
    Remove {
        image: PathBuf,
        #[command(flatten)]
        keys: unlock::KeyArgs,
        /// The slot to remove (`cairn key list` shows them).
        #[arg(long, value_name = "N")]
        slot: Option<usize>,
    },
}

#[derive(Subcommand)]
enum Cmd {
    /// Make a file system in IMAGE (created sparse if missing).
    Mkfs {
        /// Image file or block device.
        image: PathBuf,
        /// Size of the file system: 4096, 512M, 1G, 16T ... (required for a new file).
        #[arg(long)]
        size: Option<String>,
        /// Block size in bytes (1024..65536, a power of two).
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
        /// Bytes per allocation group (default: the most one bitmap block covers, 128 MiB at 4 KiB blocks).
        #[arg(long)]
        group_size: Option<String>,
        /// Bytes of space per inode (default 16K).
        #[arg(long)]
        inode_ratio: Option<String>,
        /// Journal size (default: from the image size).
        #[arg(long)]
        journal_size: Option<String>,
        /// Volume label (up to 32 bytes).
        #[arg(long)]
        label: Option<String>,
        /// Owner of the root directory and /lost+found, as numbers (like mke2fs -E root_owner);
        /// default: whoever runs mkfs (root under sudo).
        #[arg(long, value_name = "UID:GID")]
        root_owner: Option<String>,
        /// Overwrite an existing file system.
        #[arg(long, short)]
        force: bool,
        /// Print nothing on success.
        #[arg(long, short)]
        quiet: bool,
        /// Encrypt every block with AES-256-XTS under a random master key, kept in a key slot
        /// opened by --key-file FILE or --passphrase-stdin (see docs/encryption.md).
        #[arg(long)]
        encrypt: bool,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// Mount IMAGE at MOUNTPOINT; returns once it is mounted (the daemon stays in the background).
    Mount {
        image: PathBuf,
        mountpoint: PathBuf,
        /// Mount options, comma-separated: FUSE ones (allow_other, ro, noatime, ...) and cairn's
        /// (commit=SECONDS, cache_mb=N, discard, errors=..., ...); `--help` lists every one.
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Stay attached and log to stderr.
        #[arg(long, short)]
        foreground: bool,
        /// Append the daemon's log to FILE (also `-o log=FILE`). Without it the daemon logs to
        /// syslog (`journalctl -t cairn`), or where no syslog daemon listens on /dev/log to
        /// /var/log/cairn/IMAGE.log (root) or ~/.local/state/cairn/IMAGE.log (others).
        #[arg(long, value_name = "FILE")]
        log: Option<PathBuf>,
        /// Internal: report readiness on stdout (used by the background start).
        #[arg(long, hide = true)]
        notify_ready: bool,
        /// Internal: log to syslog (a background daemon started without --log).
        #[arg(long, hide = true)]
        syslog: bool,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// Unmount MOUNTPOINT and return once its daemon has committed, marked the image clean and
    /// released it (then `cairn fsck`, a copy or a new mount can use the image at once).
    Umount {
        mountpoint: PathBuf,
        /// Give up waiting for the daemon after SECONDS.
        #[arg(long, value_name = "SECONDS", default_value_t = 120)]
        timeout: u64,
    },
    /// Check an unmounted image (exit codes as fsck(8): 0 clean, 1 corrected, 4 errors left, 8 operational error).
    Fsck {
        image: PathBuf,
        /// Repair what can be repaired.
        #[arg(long, short = 'y', conflicts_with = "no_changes")]
        repair: bool,
        /// Preen, as fsck(8) -p/-a: fix only what is safe without asking (summary counters,
        /// bitmaps, backup superblocks); anything else changes nothing and exits 4.
        #[arg(long, short = 'p', visible_short_alias = 'a', conflicts_with_all = ["repair", "no_changes"])]
        preen: bool,
        /// Check only, open the image read-only (the default; as fsck(8) -n).
        #[arg(short = 'n')]
        no_changes: bool,
        /// Read the superblock from the backup copy at block N (of the image's block size;
        /// `cairn stats IMAGE` lists them) instead of block 0. Without it, fsck falls back to
        /// the first backup that verifies when the primary does not.
        #[arg(short = 'b', value_name = "N")]
        backup_superblock: Option<u64>,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// Run the benchmark suite (bench/run in the source tree): cairn beside tmpfs, ext4, XFS,
    /// btrfs and fuse2fs. Arguments go to bench/run: [EXPERIMENT...] [--quick] [--fs LIST]
    /// [--reps N] [--out DIR]. Needs a source checkout (a binary built in it, or
    /// CAIRN_BENCH=CHECKOUT/bench/run).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Live counters of a mounted file system, or the figures of an image.
    Stats {
        /// A cairn mount point or an image file.
        target: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// After the summary of a mount, every counter.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// Discard the free space of an unmounted image: holes punched in an image file
    /// (`fstrim` does the same on a mount point).
    Trim {
        /// The image file (or block device).
        image: PathBuf,
        /// Discard an encrypted image's free space too (refused without it: a discard shows
        /// which blocks are free; see docs/encryption.md).
        #[arg(long)]
        allow_discards: bool,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// The key slots of an encrypted image (see docs/encryption.md).
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
    /// Change the label, UUID, error behaviour or default mount options of an unmounted file system (as tune2fs -L / -U / -e / -o); with none, print them.
    Tune {
        /// The image file (or block device).
        image: PathBuf,
        /// New volume label (up to 32 bytes; "" clears it).
        #[arg(long, short = 'L')]
        label: Option<String>,
        /// New UUID: "random", or 32 hex digits (dashes optional). No metadata block is rewritten.
        #[arg(long, short = 'U')]
        uuid: Option<String>,
        /// What an error does when a mount does not say (-o errors=): continue, remount-ro, shutdown, or default.
        #[arg(long, short = 'e')]
        errors: Option<String>,
        /// Default mount options, put before a mount's own -o (up to 64 bytes; "" clears them).
        #[arg(long, short = 'o', value_name = "OPTIONS")]
        mount_options: Option<String>,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// Grow a file system to SIZE, unmounted or mounted (as resize2fs): an image file is lengthened; shrinking is refused.
    Resize {
        /// The image file (or block device, already that large) of an
        /// unmounted file system, or the mount point of a mounted one.
        #[arg(value_name = "IMAGE|MOUNTPOINT")]
        image: PathBuf,
        /// The new size: 2G, 512M, ... (up to what the group descriptor table holds).
        size: String,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// Look inside an unmounted image without changing it (as debugfs, xfs_db, logdump): super, groups, stat FILE, ls [DIR], cat FILE, journal.
    Inspect {
        /// The image file (or block device).
        image: PathBuf,
        #[command(subcommand)]
        what: inspect_cmd::What,
        #[command(flatten)]
        keys: unlock::KeyArgs,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell), e.g.
    /// `cairn completions bash > /etc/bash_completion.d/cairn`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write man pages, cairn.1 and one per command (cairn-mount.1, ...), into DIR,
    /// e.g. `cairn manpages /usr/local/share/man/man1`.
    Manpages {
        /// The directory to write them into (created if missing).
        dir: PathBuf,
    },
}

/// `$CAIRN_LOG`, or `default`.
fn log_filter(default: &str) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
}

fn init_logging(verbose_default: &str) {
    let filter = log_filter(verbose_default);
    // Colour only on a terminal (a `--log FILE` or a pipe gets plain text),
    // and never under NO_COLOR.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .try_init();
}

/// `cairn bench`: runs `bench/run` from the source tree this binary was built
/// in (`target/release/cairn` → `bench/run`), or `$CAIRN_BENCH`.
fn bench_cmd(args: &[String]) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let found = match std::env::var_os("CAIRN_BENCH") {
        Some(p) => Some(PathBuf::from(p)),
        None => exe.ancestors().map(|d| d.join("bench/run")).find(|p| p.is_file()),
    };
    let Some(script) = found else {
        // An installed binary: `--help` still helps (bench/run has the rest).
        if args.iter().any(|a| a == "--help" || a == "-h") {
            let mut c = command();
            let bench = c.find_subcommand_mut("bench").expect("bench is a subcommand");
            println!("{}", bench.clone().bin_name("cairn bench").render_long_help());
            return Ok(ExitCode::SUCCESS);
        }
        return Err(format!(
            "needs a source checkout: the benchmark suite is bench/run in cairn's source tree, which is not \
             above this binary ({}). Clone the cairn repository, build it (`cargo build --release`) and run \
             `sudo target/release/cairn bench` there, or set CAIRN_BENCH=CHECKOUT/bench/run",
            exe.display()
        ));
    };
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script);
    if !args.iter().any(|a| a == "--cairn") {
        cmd.arg("--cairn").arg(&exe);
    }
    let status = cmd.args(args).status().map_err(|e| format!("python3 {}: {e}", script.display()))?;
    Ok(ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8))
}

fn fail(cmd: &str, msg: &str) -> ExitCode {
    eprintln!("cairn {cmd}: {msg}");
    ExitCode::from(1)
}

/// Restores the default SIGPIPE action, so that `cairn stats | head` ends
/// quietly like any Unix tool instead of failing on a closed pipe. Not for
/// the daemon: a client that hangs up on the control socket must not kill it.
fn default_sigpipe() {
    // SAFETY: called first thing in `main`, before any thread exists;
    // setting a signal disposition to SIG_DFL touches no memory of ours.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The command line, with `cairn mount -o`'s long help printed from the
/// option table (`cairn_fuse::option_table`).
fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommand("mount", |c| c.mut_arg("options", |a| a.long_help(cairn_fuse::option_table::help())))
}

/// fsck(8)'s exit code for a usage or syntax error.
const FSCK_USAGE: i32 = 16;

/// Prints clap's message and exits: with clap's code (2; 0 for `--help`
/// and `--version`), but [`FSCK_USAGE`] for a bad `cairn fsck` command line.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let shown = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    // The subcommand is the first word that is not an option (`cairn` takes
    // no options of its own besides --help and --version).
    let fsck = std::env::args_os().skip(1).find(|a| !a.to_string_lossy().starts_with('-')).is_some_and(|a| a == "fsck");
    if shown || !fsck {
        e.exit();
    }
    let _ = e.print();
    std::process::exit(FSCK_USAGE);
}

fn main() -> ExitCode {
    use clap::FromArgMatches;
    let cli = match command().try_get_matches().and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    if !matches!(cli.cmd, Cmd::Mount { .. }) {
        default_sigpipe();
    }
    run(cli.cmd)
}

/// Runs one subcommand and gives its exit code.
fn run(cmd: Cmd) -> ExitCode {
    match cmd {
        Cmd::Mkfs {
            image,
            size,
            block_size,
            group_size,
            inode_ratio,
            journal_size,
            label,
            root_owner,
            force,
            quiet,
            encrypt,
            keys,
        } => {
            init_logging("warn");
            let a = mkfs_cmd::MkfsArgs {
                image: &image,
                size: size.as_deref(),
                block_size,
                group_size: group_size.as_deref(),
                inode_ratio: inode_ratio.as_deref(),
                journal_size: journal_size.as_deref(),
                label: label.as_deref(),
                root_owner: root_owner.as_deref(),
                force,
                quiet,
                encrypt,
                keys: &keys,
            };
            finish("mkfs", mkfs_cmd::run(&a))
        }
        Cmd::Mount { image, mountpoint, options, foreground, log, notify_ready, syslog, keys } => {
            if syslog {
                syslog::init(log_filter("info"));
            } else {
                init_logging(if foreground { "info" } else { "warn" });
            }
            let a = mount_cmd::MountArgs { image, mountpoint, options, foreground, log, notify_ready, keys };
            finish("mount", mount_cmd::run(&a))
        }
        Cmd::Fsck { image, repair, preen, no_changes: _, backup_superblock, keys } => {
            let opts = cairn_fsck::Options { repair, backup_superblock, preen, progress: fsck_progress() };
            fsck_cmd::run(&image, opts, &keys)
        }
        cmd => run_tool(cmd),
    }
}

/// Runs one of the subcommands that neither make, mount nor check.
fn run_tool(cmd: Cmd) -> ExitCode {
    match cmd {
        Cmd::Umount { mountpoint, timeout } => {
            init_logging("warn");
            finish("umount", umount_cmd::run(&mountpoint, std::time::Duration::from_secs(timeout)))
        }
        Cmd::Bench { args } => match bench_cmd(&args) {
            Ok(code) => code,
            Err(m) => fail("bench", &m),
        },
        Cmd::Stats { target, json, all, keys } => {
            init_logging("warn");
            finish("stats", stats_cmd::run(&target, json, all, &keys))
        }
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut command(), "cairn", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Cmd::Manpages { dir } => {
            let written =
                write_manpages(&dir).map(|n| format!("cairn manpages: {n} pages written to {}", dir.display()));
            finish_printing("manpages", written)
        }
        Cmd::Resize { image, size, keys } => {
            init_logging("warn");
            finish_printing("resize", resize_cmd::run(&image, &size, &keys))
        }
        Cmd::Inspect { image, what, keys } => {
            init_logging("warn");
            default_sigpipe();
            let stdout = std::io::stdout();
            finish("inspect", inspect_cmd::run(&image, &what, &keys, &mut stdout.lock()))
        }
        Cmd::Tune { image, label, uuid, errors, mount_options, keys } => {
            init_logging("warn");
            let changes =
                tune_cmd::Asked { label, uuid: uuid.as_deref(), errors: errors.as_deref(), mount_opts: mount_options };
            finish_printing("tune", tune_cmd::run(&image, changes, &keys))
        }
        Cmd::Key { action } => {
            init_logging("warn");
            let done = match &action {
                KeyAction::List { image } => key_cmd::list(image),
                KeyAction::Add { image, keys, new } => key_cmd::edit(image, keys, key_cmd::Edit::Add(new)),
                KeyAction::Change { image, keys, new } => key_cmd::edit(image, keys, key_cmd::Edit::Change(new)),
                KeyAction::Remove { image, keys, slot } => key_cmd::edit(image, keys, key_cmd::Edit::Remove(*slot)),
            };
            finish_printing("key", done)
        }
        Cmd::Trim { image, allow_discards, keys } => {
            init_logging("warn");
            let trimmed = mount_cmd::trim_image(&image, &keys, allow_discards)
                .map(|bytes| format!("cairn trim: {}: {} discarded", image.display(), cairn_core::human_bytes(bytes)));
            finish_printing("trim", trimmed)
        }
        Cmd::Mkfs { .. } | Cmd::Mount { .. } | Cmd::Fsck { .. } => unreachable!("run handles mkfs, mount and fsck"),
    }
}

/// Exit 0, or 1 with `cairn CMD: message` on stderr.
fn finish(cmd: &str, r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(m) => fail(cmd, &m),
    }
}

/// As [`finish`], printing what the command reports on success.
fn finish_printing(cmd: &str, r: Result<String, String>) -> ExitCode {
    finish(cmd, r.map(|out| println!("{out}")))
}

/// A progress bar for `cairn fsck` on a terminal (stderr), shown once a
/// check has run for half a second: the pass and its groups.
fn fsck_progress() -> Option<cairn_fsck::ProgressHook> {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("{msg:18} [{bar:40}] group {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = std::time::Instant::now();
    Some(cairn_fsck::ProgressHook(std::sync::Arc::new(move |what: &str, done: u64, total: u64| {
        if total == 0 {
            bar.finish_and_clear();
            return;
        }
        if bar.is_hidden() && t0.elapsed() > std::time::Duration::from_millis(500) {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        bar.set_message(what.to_string());
        bar.set_length(total);
        bar.set_position(done);
    })))
}

/// Writes `cairn.1` and a page per visible command (`cairn-mkfs.1`, ...)
/// into `dir`; returns how many.
fn write_manpages(dir: &std::path::Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let cmd = command();
    let mut pages = vec![("cairn".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("cairn-{}", sub.get_name());
        // The page's own name (clap keeps `&'static str` names; this runs once).
        let page_name: &'static str = Box::leak(name.clone().into_boxed_str());
        pages.push((name, sub.clone().name(page_name)));
    }
    for (name, page) in &pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page.clone()).render(&mut out).map_err(|e| format!("{name}: {e}"))?;
        let text = synopsis_values(&String::from_utf8_lossy(&out), page);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(pages.len())
}

/// clap_mangen's SYNOPSIS names an option without its value (`[-o ]`,
/// `[-L|--label]`, `[-n ]`): adds each value's placeholder (`[-o OPTIONS]`),
/// as `--help` and the OPTIONS section show it.
fn synopsis_values(page: &str, cmd: &clap::Command) -> String {
    let Some(at) = page.find(".SH SYNOPSIS\n") else { return page.to_string() };
    let start = at + ".SH SYNOPSIS\n".len();
    let end = page[start..].find('\n').map_or(page.len(), |n| start + n);
    let mut line = page[start..end].to_string();
    let mut cmd = cmd.clone();
    cmd.build();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_positional()) {
        let value = match arg.get_value_names() {
            _ if !arg.get_num_args().is_some_and(|r| r.takes_values()) => String::new(),
            Some(v) => format!(" \\fI{}\\fR", v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")),
            None => format!(" \\fI{}\\fR", arg.get_id().as_str().to_uppercase()),
        };
        let flag = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("\\fB\\-{s}\\fR|\\fB\\-\\-{}\\fR", l.replace('-', "\\-")),
            (Some(s), None) => format!("\\fB\\-{s} \\fR"),
            (None, Some(l)) => format!("\\fB\\-\\-{}\\fR", l.replace('-', "\\-")),
            (None, None) => continue,
        };
        let bare = flag.strip_suffix(" \\fR").or_else(|| flag.strip_suffix("\\fR")).unwrap_or(&flag);
        let with = format!("{bare}\\fR{value}");
        for close in ["]", ">"] {
            line = line.replace(&format!("{flag}{close}"), &format!("{with}{close}"));
        }
    }
    format!("{}{line}{}", &page[..start], &page[end..])
}
