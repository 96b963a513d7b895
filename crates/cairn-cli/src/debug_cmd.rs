//! # `cairn debug`: test-only tools, hidden from `--help`
//!
//! Two tools that the allocator experiment of seed 002 (ext4's
//! `mb_optimize_scan`: 2 MiB writes on a disk with no free 2 MiB run) needs
//! and that no user should reach for. Both live behind a hidden subcommand
//! so that `cairn --help` stays what users need.
//!
//! ## `cairn debug fragment IMAGE [--used SIZE] [--period SIZE]`
//! Builds the fragmented disk offline, in one pass over the group descriptor
//! table, with nothing but the format crate (the engine is not involved, so
//! a 64 TiB image with half a million groups takes seconds, not the hours a
//! fill-and-delete through a mount would). In every group it marks as used
//! each free block whose offset inside the group (in blocks) satisfies
//! `offset % period >= period - used`: with the defaults (1 MiB used in every
//! 2 MiB) every other MiB of every group is taken and no group keeps a free
//! run of 2 MiB, aligned or not. Blocks already in use stay so, so the
//! group's own metadata only adds to the pattern.
//!
//! The blocks are marked used **without being written or owned by any
//! file**: `cairn fsck` reports them as leaked ("marked used, owned by
//! nothing") and `--repair` would free them again. That is the point — the
//! image is a benchmark fixture, not a file system to keep data on.
//!
//! Per group it reads the bitmap (or synthesises it while the descriptor
//! says `GD_BLOCK_UNINIT`, [`synth_block_bitmap`]), checks it against the
//! descriptor's checksum and free count, ORs the pattern in and writes the
//! block back with one `pwrite`; the descriptor gets the new free count, no
//! `GD_BLOCK_UNINIT`, and the bitmap's checksum. Descriptor-table blocks are
//! read and written once each, in chunks. The superblock is first written as
//! *not clean* (a tool killed half way leaves an image that fsck is asked to
//! look at), then, after an fsync of everything, with the new free-block
//! total and *clean* again.
//!
//! It refuses an image that is in use (the engine and fsck hold an exclusive
//! `flock` on it: we try to take the same lock), one that was not cleanly
//! unmounted or whose journal still holds records to replay (the bitmaps on
//! disk would not be the truth), and one that recorded errors.
//!
//! ## `cairn debug dd IMAGE --path NAME --bs SIZE --count N [--fsync] [--repeat R] [-o OPTIONS]`
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

use crate::size::{human, parse_size};
use cairn_core::dev::{BlockDevice, FileDevice};
use cairn_format::bitmap::synth_block_bitmap;
use cairn_format::checksum::crc;
use cairn_format::group_desc::{gd_loc, GroupDesc, GD_BLOCK_UNINIT, GD_SIZE};
use cairn_format::journal::{read_record, JournalRegion, JournalSuper, LogPos, Walk};
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_CLEAN, STATE_ERRORS};
use clap::Subcommand;
use std::fs::File;
use std::io::IsTerminal;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `cairn debug ...`: tools for tests and benchmarks only.
#[derive(Subcommand)]
pub enum DebugCmd {
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
}

/// Runs `cairn debug ...`.
pub fn run(cmd: &DebugCmd) -> Result<(), String> {
    match cmd {
        DebugCmd::Fragment { image, used, period } => {
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
        DebugCmd::Dd { image, path, bs, count, fsync, repeat, options } => {
            let bs = parse_size(bs).map_err(|e| format!("--bs: {e}"))?;
            let a = crate::debug_dd::DdArgs {
                image,
                name: path,
                bs,
                count: *count,
                fsync: *fsync,
                repeat: *repeat,
                options,
            };
            crate::debug_dd::run(&a)
        }
        DebugCmd::Overwrite { image, files, size, bs, jobs, seconds, ramp, options } => {
            let a = crate::debug_overwrite::OverwriteArgs {
                image,
                files: *files,
                size: parse_size(size).map_err(|e| format!("--size: {e}"))?,
                bs: parse_size(bs).map_err(|e| format!("--bs: {e}"))?,
                jobs: jobs.clone(),
                seconds: *seconds,
                ramp: *ramp,
                options,
            };
            crate::debug_overwrite::run(&a)
        }
        DebugCmd::Fsmark { image, files, threads, dirs, per_dir, rows, keep, options } => {
            let a = crate::debug_fsmark::FsmarkArgs {
                image,
                files: *files,
                threads: *threads,
                dirs: *dirs,
                per_dir: *per_dir,
                rows: *rows,
                keep: *keep,
                options,
            };
            crate::debug_fsmark::run(&a)
        }
    }
}

// ------------------------------------------------------------- fragment

/// `used` bytes taken in every `period` bytes of each group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    pub used: u64,
    pub period: u64,
}

impl Pattern {
    fn parse(used: &str, period: &str) -> Result<Pattern, String> {
        let used = parse_size(used).map_err(|e| format!("--used: {e}"))?;
        let period = parse_size(period).map_err(|e| format!("--period: {e}"))?;
        if used == 0 || used >= period {
            return Err(format!(
                "--used {} must be above 0 and below --period {} (something must stay free)",
                human(used),
                human(period)
            ));
        }
        Ok(Pattern { used, period })
    }

    /// The pattern as bitmap words for a whole bitmap block of `block_size`
    /// bytes: bit `o` set when `o % period_blocks >= period_blocks - used_blocks`.
    fn mask(&self, block_size: u64) -> Result<Vec<u64>, String> {
        if !self.used.is_multiple_of(block_size) || !self.period.is_multiple_of(block_size) {
            return Err(format!(
                "--used {} and --period {} must be multiples of the block size ({block_size})",
                self.used, self.period
            ));
        }
        let (ub, pb) = (self.used / block_size, self.period / block_size);
        let bits = block_size * 8;
        let mut m = vec![0u64; (bits / 64) as usize];
        for o in 0..bits {
            if o % pb >= pb - ub {
                m[(o / 64) as usize] |= 1 << (o % 64);
            }
        }
        Ok(m)
    }
}

/// What a fragment pass did.
#[derive(Debug, Default)]
pub struct FragmentSummary {
    pub block_size: u64,
    pub groups_changed: u64,
    pub marked: u64,
    pub free_before: u64,
    pub free_after: u64,
    pub seconds: f64,
}

fn io_err<'a>(what: &'a str, image: &'a Path) -> impl Fn(std::io::Error) -> String + 'a {
    move |e| format!("{}: {what}: {e}", image.display())
}

/// Opens `image` read-write and takes the exclusive lock the engine and fsck
/// take, so a mounted image (or one under check) is refused.
fn open_locked(image: &Path) -> Result<FileDevice, String> {
    let dev = FileDevice::open(image, false).map_err(|e| format!("cannot open {}: {e}", image.display()))?;
    dev.lock_exclusive()
        .map_err(|_| format!("{} is in use: mounted (or being checked) by another process", image.display()))?;
    Ok(dev)
}

/// Reads the superblock and refuses an image whose bitmaps on disk are not
/// the whole truth: not cleanly unmounted, errors recorded, or a journal with
/// records still to replay.
fn clean_superblock(f: &File, size: u64, image: &Path) -> Result<Superblock, String> {
    let mut head = vec![0u8; SB_SIZE];
    f.read_exact_at(&mut head, 0).map_err(|_| format!("{} is not a cairn file system (too short)", image.display()))?;
    if !Superblock::has_magic(&head) {
        return Err(format!("{} is not a cairn file system (no cairn superblock)", image.display()));
    }
    let sb = Superblock::decode(&head, size).map_err(|e| format!("{}: damaged superblock: {e}", image.display()))?;
    if sb.state & STATE_ERRORS != 0 {
        return Err(format!("{} recorded errors while mounted: run `cairn fsck` first", image.display()));
    }
    if sb.state & STATE_CLEAN == 0 {
        return Err(format!(
            "{} was not cleanly unmounted (mounted, or its journal needs replay): mount and unmount it, \
             or run `cairn fsck --repair`, first",
            image.display()
        ));
    }
    let seed = sb.csum_seed();
    let region = JournalRegion::of(&sb);
    let bs = u64::from(sb.block_size());
    let mut jb = vec![0u8; bs as usize];
    f.read_exact_at(&mut jb, region.start * bs).map_err(io_err("journal superblock", image))?;
    let jsb = JournalSuper::decode(seed, region.start, &jb, region.blocks)
        .map_err(|e| format!("{}: journal: {e} (run `cairn fsck`)", image.display()))?;
    let pos = LogPos { seq: jsb.tail_seq, off: jsb.tail_off };
    let walk = read_record(seed, &region, pos, |off| {
        let mut b = vec![0u8; bs as usize];
        f.read_exact_at(&mut b, region.block_of(off) * bs).map(|()| b)
    })
    .map_err(io_err("journal", image))?;
    if matches!(walk, Walk::Record(_)) {
        return Err(format!(
            "{}: the journal holds committed changes that need replay: mount and unmount it, or run \
             `cairn fsck --repair`, first",
            image.display()
        ));
    }
    Ok(sb)
}

fn write_superblock(f: &File, sb: &Superblock, image: &Path) -> Result<(), String> {
    let mut head = vec![0u8; SB_SIZE];
    f.read_exact_at(&mut head, 0).map_err(io_err("superblock", image))?;
    sb.encode(&mut head);
    f.write_all_at(&head, 0).map_err(io_err("superblock", image))?;
    f.sync_data().map_err(io_err("fsync", image))
}

/// Free blocks of a bitmap block (padding bits past the group are set, so
/// they never count).
fn zeros(words: &[u64]) -> u64 {
    words.iter().map(|w| u64::from(w.count_zeros())).sum()
}

fn to_words(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8 bytes"))).collect()
}

fn to_bytes(words: &[u64], out: &mut [u8]) {
    for (c, w) in out.chunks_exact_mut(8).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
}

/// Descriptor-table blocks handled per read/write.
const GDT_CHUNK: u64 = 64;

/// Applies `pat` to every group of the unmounted `image` (see the module essay).
pub fn fragment(image: &Path, pat: Pattern) -> Result<FragmentSummary, String> {
    let t0 = Instant::now();
    let dev = open_locked(image)?;
    let f = dev.file();
    let mut sb = clean_superblock(f, dev.size(), image)?;
    let geo = Geometry::new(&sb).map_err(|e| format!("{}: {e}", image.display()))?;
    let seed = sb.csum_seed();
    let bs = u64::from(geo.block_size);
    let mask = pat.mask(bs)?;
    let per_block = bs / GD_SIZE as u64;

    // From here until the end the image is "not clean": an interrupted run
    // leaves descriptors and bitmaps that may disagree, and says so.
    let free_in_sb = sb.free_blocks;
    sb.state &= !STATE_CLEAN;
    write_superblock(f, &sb, image)?;

    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(geo.group_count);
        b.set_style(
            indicatif::ProgressStyle::with_template("fragmenting [{bar:40}] {pos}/{len} groups ({eta})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut s = FragmentSummary { block_size: bs, ..Default::default() };
    let mut bitmap = vec![0u8; bs as usize];
    let mut first = 0u64;
    while first < sb.gdt_blocks {
        let n = GDT_CHUNK.min(sb.gdt_blocks - first);
        let mut gdt = vec![0u8; (n * bs) as usize];
        let gdt_off = (sb.gdt_start + first) * bs;
        f.read_exact_at(&mut gdt, gdt_off).map_err(io_err("group descriptor table", image))?;
        let mut changed = false;
        let g_end = ((first + n) * per_block).min(geo.group_count);
        for g in first * per_block..g_end {
            let (blk, off) = gd_loc(sb.gdt_start, geo.block_size, g);
            let off = ((blk - sb.gdt_start - first) * bs) as usize + off;
            let d = &mut gdt[off..off + GD_SIZE];
            let mut gd = GroupDesc::decode(seed, g, d).map_err(|e| format!("{}: {e}", image.display()))?;
            if gd.block_bitmap != geo.block_bitmap(g) {
                return Err(format!("{}: group {g}: descriptor does not match the layout", image.display()));
            }
            if gd.flags & GD_BLOCK_UNINIT != 0 {
                bitmap.copy_from_slice(&synth_block_bitmap(&geo, g));
            } else {
                f.read_exact_at(&mut bitmap, gd.block_bitmap * bs).map_err(io_err("block bitmap", image))?;
                let c = crc(seed, &bitmap);
                if c != gd.block_bitmap_csum {
                    return Err(format!(
                        "{}: group {g}: block bitmap checksum mismatch (run `cairn fsck`)",
                        image.display()
                    ));
                }
            }
            let mut words = to_words(&bitmap);
            let before = zeros(&words);
            if before != u64::from(gd.free_blocks) {
                return Err(format!(
                    "{}: group {g}: descriptor says {} free blocks, bitmap {before} (run `cairn fsck`)",
                    image.display(),
                    gd.free_blocks
                ));
            }
            for (w, m) in words.iter_mut().zip(&mask) {
                *w |= m;
            }
            let after = zeros(&words);
            s.free_before += before;
            s.free_after += after;
            if after != before || gd.flags & GD_BLOCK_UNINIT != 0 {
                to_bytes(&words, &mut bitmap);
                f.write_all_at(&bitmap, gd.block_bitmap * bs).map_err(io_err("block bitmap", image))?;
                gd.flags &= !GD_BLOCK_UNINIT;
                gd.free_blocks = after as u32;
                gd.block_bitmap_csum = crc(seed, &bitmap);
                gd.encode(seed, g, d);
                changed = true;
                s.groups_changed += u64::from(after != before);
                s.marked += before - after;
            }
        }
        if changed {
            f.write_all_at(&gdt, gdt_off).map_err(io_err("group descriptor table", image))?;
        }
        bar.inc(g_end - first * per_block);
        first += n;
    }
    bar.finish_and_clear();
    f.sync_data().map_err(io_err("fsync", image))?;
    if s.free_before != free_in_sb {
        tracing::warn!(superblock = free_in_sb, descriptors = s.free_before, "free-block total corrected");
    }
    sb.free_blocks = s.free_after;
    sb.state |= STATE_CLEAN;
    write_superblock(f, &sb, image)?;
    s.seconds = t0.elapsed().as_secs_f64();
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_marks_the_second_half_of_every_period() {
        let p = Pattern::parse("8K", "16K").unwrap();
        // 1 KiB blocks: 8 used in every 16, from offset 8.
        let m = p.mask(1024).unwrap();
        assert_eq!(m.len(), 1024 * 8 / 64);
        assert!(m.iter().all(|&w| w == 0xff00_ff00_ff00_ff00), "{:x}", m[0]);
        let d = Pattern::parse("1M", "2M").unwrap().mask(4096).unwrap();
        // 256 blocks free then 256 used: words 0..4 clear, 4..8 set, repeating.
        assert!(d.iter().enumerate().all(|(i, &w)| w == if i % 8 < 4 { 0 } else { u64::MAX }));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(Pattern::parse("2M", "2M").is_err());
        assert!(Pattern::parse("0", "2M").is_err());
        assert!(Pattern::parse("1x", "2M").is_err());
        assert!(Pattern::parse("6K", "16K").unwrap().mask(4096).is_err(), "not a multiple of the block size");
    }

    #[test]
    fn bitmap_words_round_trip() {
        let bytes: Vec<u8> = (0..64u8).collect();
        let w = to_words(&bytes);
        assert_eq!(w[0], u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]));
        assert_eq!(zeros(&[u64::MAX, 0]), 64);
        let mut back = vec![0u8; 64];
        to_bytes(&w, &mut back);
        assert_eq!(back, bytes);
    }
}
