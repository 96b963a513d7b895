//! # cairn-bench-driver: cairn's engine driven in-process, for the benchmarks
//!
//! The benchmark suite's tools that no user should reach for, kept out of
//! the `cairn` command users install: `fragment` builds seed 002's
//! fragmented disk offline (`fragment`), and `dd`, `overwrite` and `fsmark`
//! mount an image in this process (no FUSE) and run seed 002's, 004's and
//! 001's workloads on the engine itself, so `bench/` can put the engine
//! beside the same work through FUSE and the kernel. `bench/run` and
//! `bench/mballoc` find this binary beside the `cairn` they measure.
//!
//! ## `fragment`
//! See [`fragment`].
//!
//! ## `cairn-bench-driver nullfs MOUNTPOINT [-o OPTIONS] [--counters FILE] [--data FILE]`
//! The FUSE floor: a null server over cairn's own transport; see [`nullfs`].
//!
//! ## `cairn-bench-driver dd IMAGE --path NAME --bs SIZE --count N [--fsync] [--repeat R] [-o OPTIONS]`
//! The engine without FUSE: mounts IMAGE in this process (`Fs::mount`, the
//! same `-o` options as `cairn mount`, so `-o mb_optimize_scan=0|1`),
//! creates or truncates NAME in the root directory and writes N blocks of
//! SIZE bytes from a xorshift generator (so the time measured is the file
//! system's, not `/dev/urandom`'s), then optionally commits (fsync). With
//! `--repeat R` it does that R times in the same mount, as the seed ran its
//! `dd` three times in a row. It prints one JSON document on stdout: mount
//! and unmount times, per run the seconds of the file-system calls (data
//! generation excluded) and every `alloc.*` counter after the run, and the
//! counters at mount; a one-line summary per run goes to stderr, with `-`
//! for the buddy allocator's `alloc.mb.*` counters while they do not exist.

use cairn_core::{human_bytes as human, parse_size};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod dd;
mod fragment;
mod fsmark;
mod nullfs;
mod overwrite;

use fragment::{fragment, Pattern};

/// The allocator the `cairn` daemon runs with (see cairn-cli's main.rs), so
/// that the engine is measured here as it runs there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "cairn-bench-driver",
    version,
    about = "cairn's engine driven in-process, for the benchmark suite (bench/)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The tools.
#[derive(Subcommand)]
enum Cmd {
    /// Fragment the free space of an unmounted image (test fixture for the allocator experiment).
    ///
    /// In every group, marks as used each free block whose offset in the group satisfies
    /// `offset % PERIOD >= PERIOD - USED`: with the defaults every other MiB is taken and no
    /// group keeps a free 2 MiB run. The blocks are marked used WITHOUT being written or owned
    /// by any file: `cairn fsck` will then report them as leaked (marked used in the bitmap, owned
    /// by nothing; each group's free count off by as many) and `cairn fsck --repair` frees them. This exists only to build the fragmented-disk
    /// experiment of seed 002 (bench/mballoc); never use it on an image whose data matters.
    /// Refuses an image that is mounted, not cleanly unmounted, or whose journal needs replay.
    Fragment {
        /// A cleanly unmounted cairn image.
        image: PathBuf,
        /// Bytes used in every PERIOD (a multiple of the block size, below PERIOD).
        #[arg(long, default_value = "1M")]
        used: String,
        /// Length of the repeating pattern, from each group's first block.
        #[arg(long, default_value = "2M")]
        period: String,
    },
    /// Mount IMAGE in this process (no FUSE) and write COUNT blocks of BS bytes to /NAME, like dd.
    ///
    /// Creates or truncates NAME in the root directory, writes pseudo-random data (xorshift, so
    /// the time is the file system's), optionally fsyncs, and prints JSON on stdout: mount and
    /// unmount seconds, per run the seconds and every alloc.* counter, and the counters at mount.
    Dd {
        /// A cairn image (not mounted elsewhere).
        image: PathBuf,
        /// File name in the root directory.
        #[arg(long)]
        path: String,
        /// Bytes per write: 4096, 2M, ...
        #[arg(long)]
        bs: String,
        /// Number of writes.
        #[arg(long)]
        count: u64,
        /// Commit (fsync) after the writes of each run.
        #[arg(long)]
        fsync: bool,
        /// Runs in the same mount (each truncates the file first, as dd does).
        #[arg(long, default_value_t = 1)]
        repeat: u32,
        /// Mount options, as for `cairn mount` (the engine's: mb_optimize_scan=0|1, cache_mb=N, commit=S, ...).
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
    },
    /// Mount IMAGE in this process (no FUSE) and run seed 004's fio job against the engine.
    ///
    /// Writes FILES files of SIZE bytes in all under /overwrite in full, then for each job count
    /// runs that many threads writing BS bytes at random aligned offsets of random files for
    /// SECONDS (after a RAMP): every write is an overwrite. Prints JSON (IOPS per job count and
    /// the overwrite.* counters); `-o overwrite_fastpath=0` measures the journaled path.
    Overwrite {
        /// A cairn image (not mounted elsewhere).
        image: PathBuf,
        /// Number of files (fio's nrfiles).
        #[arg(long, default_value_t = 32)]
        files: u32,
        /// Bytes of all the files together.
        #[arg(long, default_value = "1G")]
        size: String,
        /// Bytes per write.
        #[arg(long, default_value = "4K")]
        bs: String,
        /// Job (thread) counts, comma-separated: one run each, in this order.
        #[arg(long, default_value = "1,2,4,8,16", value_delimiter = ',')]
        jobs: Vec<u32>,
        /// Seconds counted per job count.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Seconds run before counting starts.
        #[arg(long, default_value_t = 1.0)]
        ramp: f64,
        /// Mount options, as for `cairn mount` (overwrite_fastpath=0|1, ...).
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
    },
    /// Mount IMAGE in this process (no FUSE) and run seed 001's fs_mark create, cold walk and unlink.
    ///
    /// THREADS threads each make a top directory with DIRS subdirectories and create their share
    /// of FILES empty files in them (fs_mark's 40-byte names), commit and unmount; then a new
    /// mount (caches dropped) walks the tree looking up every entry (the stat), and THREADS
    /// threads remove the top directories as `rm -rf` does. Prints JSON: seconds, files/s, peak
    /// RSS, journal bytes and image bytes written per phase, and per-row create rates.
    Fsmark {
        /// A freshly made cairn image (not mounted elsewhere).
        image: PathBuf,
        /// Number of empty files in all.
        #[arg(long)]
        files: u64,
        /// Create and unlink threads (one top directory each, as fs_mark's -d per thread).
        #[arg(long, default_value_t = 2)]
        threads: u32,
        /// Subdirectories per top directory (fs_mark's -D).
        #[arg(long, default_value_t = 100)]
        dirs: u32,
        /// Files created in one subdirectory before moving to the next (fs_mark's -N; default:
        /// each subdirectory filled in one go).
        #[arg(long)]
        per_dir: Option<u64>,
        /// Create-rate rows to print (each covers FILES/ROWS files, like fs_mark's loops).
        #[arg(long, default_value_t = 10)]
        rows: u32,
        /// Leave the files in place (skip the unlink phase).
        #[arg(long)]
        keep: bool,
        /// Mount options, as for `cairn mount` (cache_mb=N, commit=S, ...).
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
    },
    /// Serve a null FUSE file system at MOUNTPOINT (the FUSE floor) until it is unmounted.
    ///
    /// cairn's transport, INIT, mount options and TTLs with no engine behind them: a tree
    /// in memory, file bytes not kept (reads answer zeros). Runs in the foreground; unmount
    /// with `umount MOUNTPOINT`. See `nullfs`.
    Nullfs {
        /// An empty directory.
        mountpoint: PathBuf,
        /// Mount options, as for `cairn mount` (io_uring=0, writeback_cache=0, threads=N, ...).
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Write the request counters (JSON, as `cairn stats`'s `fuse.*`) here at unmount.
        #[arg(long)]
        counters: Option<PathBuf>,
        /// Keep file bytes in this file (made if missing): READs copy them out of it, as a
        /// server with data does (`nullfs-data`).
        #[arg(long)]
        data: Option<PathBuf>,
    },
}

/// Runs one tool.
fn run(cmd: &Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Fragment { image, used, period } => {
            let pat = Pattern::parse(used, period)?;
            let s = fragment(image, pat)?;
            println!(
                "{}: {} groups fragmented ({} used in every {} of each group), {} blocks marked used \
                 (leaked on purpose: fsck will report them); free {} -> {}; {:.2} s",
                image.display(),
                s.groups_changed,
                human(pat.used),
                human(pat.period),
                s.marked,
                human(s.free_before * s.block_size),
                human(s.free_after * s.block_size),
                s.seconds
            );
            Ok(())
        }
        Cmd::Dd { image, path, bs, count, fsync, repeat, options } => {
            let bs = parse_size(bs).map_err(|e| format!("--bs: {e}"))?;
            let a = dd::DdArgs { image, name: path, bs, count: *count, fsync: *fsync, repeat: *repeat, options };
            dd::run(&a)
        }
        Cmd::Overwrite { image, files, size, bs, jobs, seconds, ramp, options } => {
            let a = overwrite::OverwriteArgs {
                image,
                files: *files,
                size: parse_size(size).map_err(|e| format!("--size: {e}"))?,
                bs: parse_size(bs).map_err(|e| format!("--bs: {e}"))?,
                jobs: jobs.clone(),
                seconds: *seconds,
                ramp: *ramp,
                options,
            };
            overwrite::run(&a)
        }
        Cmd::Fsmark { image, files, threads, dirs, per_dir, rows, keep, options } => {
            let a = fsmark::FsmarkArgs {
                image,
                files: *files,
                threads: *threads,
                dirs: *dirs,
                per_dir: *per_dir,
                rows: *rows,
                keep: *keep,
                options,
            };
            fsmark::run(&a)
        }
        Cmd::Nullfs { mountpoint, options, counters, data } => {
            nullfs::run(mountpoint, options, counters.as_deref(), data.as_deref())
        }
    }
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).try_init();
    match run(&Cli::parse().cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(m) => {
            eprintln!("cairn-bench-driver: {m}");
            ExitCode::FAILURE
        }
    }
}
