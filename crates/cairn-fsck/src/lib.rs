//! # cairn-fsck: cairn's independent checker and repairer
//!
//! ## Purpose
//! fsck decides whether an unmounted cairn image is consistent, and with
//! `--repair` fixes what can be fixed safely. It depends on the format crate
//! (`cairn-format`) and plain `pread`/`pwrite` only — never on the engine —
//! so an engine bug cannot hide itself from the checker: the two share the
//! on-disk format and nothing else (as xfs_repair shares only libxfs with
//! the kernel).
//!
//! ## Organisation (e2fsck's passes)
//! ```text
//! image       a file (read-only, read-write to repair, flock like a mount) or memory
//! superblock  pass 0: magic, checksum, geometry, fits the image
//! journal     replay committed checkpoints (in memory unless repairing)
//! groups      descriptors: checksums, locations, flags
//! inodes      pass 1: live inodes, extents, trees, xattr blocks → claims
//! links       the orphan list (walked with pass 1: its nodes are claims)
//! dirs        pass 2: entries, hashes, targets, types, parents, reachability
//! blocks      pass 1b: blocks claimed twice (after pass 2, which may add claims)
//! clone       its repair: the second claimant of data blocks gets a copy
//! release     or, without room for a copy, gives up the blocks it shares
//! links       passes 3/4: link counts, orphans, xattr refcounts
//! repair      write the object repairs decided so far
//! bitmaps     pass 5: bitmaps, descriptor and superblock counters
//! ```
//! Shared state lives in `ctx::Ctx`; findings in [`Report`], each under a
//! [`Code`] of the problem table (`problems`, which also names the
//! [`Pass`]). Why a check could not run at all is a [`FsckError`] (`error`);
//! the caller's [`ProgressHook`] lives in `progress`. The passes import
//! those modules, never this root: the root only runs the passes in order
//! and writes the report.
//!
//! ## Robustness
//! Nothing on disk is trusted before it is checked: every decoder of the
//! format crate verifies checksums and bounds, every block pointer is checked
//! against the geometry before it is read, trees are depth-bounded and
//! loop-checked, and allocations are sized by the geometry (validated in pass
//! 0) or by what was actually found, never by a count read from disk.
//!
//! ## Exit codes (fsck(8))
//! 0 clean; 1 errors corrected (repair, and a verification check afterwards
//! found the image clean); 4 errors left uncorrected; 8 operational error
//! (cannot open or read the image, a directory, not a cairn image,
//! truncated — an image file shorter than its file system is extended by a
//! repair, see [`check`] —, mounted).

mod bitmaps;
mod blocks;
mod btree;
mod clone;
mod ctx;
mod dirs;
mod error;
mod groups;
mod image;
mod inodes;
mod journal;
mod links;
mod problems;
mod progress;
mod release;
mod repair;
mod report;
mod salvage;
mod superblock;

pub use error::FsckError;
pub use image::{ImageFile, ImageSource};
pub use problems::{Code, Pass};
pub use progress::{ProgressFn, ProgressHook};
pub use report::{num, Problem, Report};

use ctx::Ctx;
use report::bytes;
use std::io::Write;
use std::path::Path;

/// Most repair rounds one `--repair` runs (see [`check_image`]).
const MAX_REPAIR_ROUNDS: u32 = 3;

/// Options of a check.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Fix what can be fixed (the image is opened read-write).
    pub repair: bool,
    /// Read the superblock from the backup copy at this block (`-b`, as
    /// e2fsck's) instead of block 0; any block size.
    pub backup_superblock: Option<u64>,
    /// Preen (`-p`, fsck(8)'s automatic mode): repair only when every
    /// problem a check finds is one preen may fix
    /// ([`Problem::preen_safe`]); otherwise change nothing, and the report
    /// has `preen_refused` set (exit 4).
    pub preen: bool,
    /// Told how each long pass goes on (`cairn fsck`'s progress bar).
    pub progress: Option<ProgressHook>,
}

/// Checks (and with `opts.repair`, repairs) the image at `path`.
///
/// With repair, when anything was written, a second read-only check verifies
/// the result; while it finds problems and a repair round still fixes some,
/// up to three rounds run. The returned report then has
/// `verified_after_repair` set if the last check found the image clean, and
/// otherwise lists the remaining problems too (marked not fixed).
///
/// An image file shorter than its file system (cut by `truncate`, a copy
/// that stopped early) is, with repair, extended to the file system's size
/// first (the missing tail reads as zeros, as after `truncate -s SIZE`),
/// then checked and repaired as any other; a block device that is too
/// short is reported and left alone.
pub fn check(path: &Path, opts: &Options) -> Result<Report, FsckError> {
    let mut file = ImageFile::open(path, opts.repair || opts.preen)?;
    match check_image(&file, opts) {
        Err(FsckError::Short { fs_bytes, image_bytes, .. }) if file.is_block_device() => {
            Err(FsckError::Short { fs_bytes, image_bytes, block_device: true })
        }
        Err(FsckError::Short { fs_bytes, image_bytes, .. }) if opts.repair => {
            file.extend(fs_bytes)?;
            let mut report = check_image(&file, opts)?;
            if report.is_clean() {
                report.verified_after_repair = true;
            }
            let msg = format!(
                "the image file is {} shorter than the file system it holds: extended from {} to {} bytes \
                 (the missing tail reads as zeros)",
                bytes(fs_bytes - image_bytes),
                num(image_bytes),
                num(fs_bytes)
            );
            let (code, fixed) = (Code::SbImageShort, true);
            report.problems.insert(0, Problem { code, pass: code.pass(), message: msg, fixed, preen_safe: false });
            Ok(report)
        }
        r => r,
    }
}

/// Checks (and with `opts.repair`, repairs) the image that `source` holds:
/// an [`ImageFile`], an image in memory (`[u8]`, `Vec<u8>`), or any other
/// [`ImageSource`]. Repair needs a [writable](ImageSource::writable) source;
/// asking it of a read-only one fails with a permission error and reads
/// nothing. Otherwise exactly as [`check`].
pub fn check_image(source: &dyn ImageSource, opts: &Options) -> Result<Report, FsckError> {
    let r = check_rounds(source, opts);
    if let Some(p) = &opts.progress {
        p.tell("", 0, 0);
    }
    r
}

fn check_rounds(source: &dyn ImageSource, opts: &Options) -> Result<Report, FsckError> {
    let p = opts.progress.as_ref();
    if (opts.repair || opts.preen) && !source.writable() {
        return Err(FsckError::Io(image::read_only()));
    }
    if opts.preen && !opts.repair {
        let first = check_once(source, Round::Check, opts.backup_superblock, p)?;
        if first.is_clean() {
            return Ok(first);
        }
        if !first.preen_may_fix() {
            return Ok(Report { preen_refused: true, ..first });
        }
        return check_rounds(source, &Options { repair: true, ..opts.clone() });
    }
    let first_round = if opts.repair { Round::Repair } else { Round::Check };
    let mut report = check_once(source, first_round, opts.backup_superblock, p)?;
    if opts.repair && (report.fixed() > 0 || report.blocks_written > 0) {
        let mut verify = check_once(source, Round::Check, None, p)?;
        // What one repair makes readable (a rebuilt directory, a dropped
        // extent) can show what it could not yet fix (a file that only the
        // rebuilt directory's loss disconnected): as e2fsck restarts, the
        // repair runs again while each round still fixes something.
        for round in 2..=MAX_REPAIR_ROUNDS {
            if verify.is_clean() {
                break;
            }
            let again = check_once(source, Round::Repair, None, p)?;
            if again.fixed() == 0 {
                break;
            }
            report.note(format!("repair round {round}: the first round's changes showed more to repair"));
            for p in again.problems {
                report.repeat(p);
            }
            report.problems_dropped += again.problems_dropped;
            report.blocks_written += again.blocks_written;
            verify = check_once(source, Round::Check, None, p)?;
        }
        if verify.is_clean() {
            report.verified_after_repair = true;
        } else {
            for p in verify.problems {
                report.repeat(Problem {
                    message: format!("still wrong after repair: {}", p.message),
                    fixed: false,
                    ..p
                });
            }
            report.problems_dropped += verify.problems_dropped;
        }
        // The figures of the repaired image.
        report.blocks_used = verify.blocks_used;
        report.inodes_used = verify.inodes_used;
        report.orphans = verify.orphans;
    }
    Ok(report)
}

/// What one round of [`check_once`] does with what it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    /// Reports it; the image is not written.
    Check,
    /// Reports it and repairs what it can.
    Repair,
}

fn check_once(
    source: &dyn ImageSource,
    round: Round,
    backup: Option<u64>,
    progress: Option<&ProgressHook>,
) -> Result<Report, FsckError> {
    let repair = round == Round::Repair;
    let mut img = image::Image::new(source, repair);
    let superblock::Loaded { mut sb, mut geo, fallback } = superblock::load(&mut img, backup)?;
    let seed = sb.csum_seed();
    let mut report = Report::default();
    let mut sb_dirty = false;
    if let Some((g, why)) = &fallback {
        let fix = if repair { "; the primary is rewritten from it" } else { "" };
        let msg = format!("{why}: using the backup superblock in group {g} (block {}){fix}", geo.group_start(*g));
        report.push(Code::SbPrimaryDamaged, msg, repair);
        sb_dirty = repair;
    }
    if journal::replay(&mut img, &sb, seed, &mut report)? {
        // The error state is set in place, outside the journal (as ext4's):
        // a replayed superblock image must not clear it.
        let errors = sb.state & cairn_format::superblock::STATE_ERRORS;
        match superblock::reload(&mut img) {
            Ok(r) => (sb, geo) = r,
            // A damaged primary the log does not hold: the backup stands.
            Err(_) if fallback.is_some() => {}
            Err(e) => return Err(e),
        }
        sb.state |= errors;
    }
    sb_dirty |= superblock::check_fields(&mut sb, &geo, repair, &mut report);
    sb_dirty |= superblock::check_backups(&mut img, &sb, &geo, repair, &mut report)?;
    report.block_size = sb.block_size();
    report.total_blocks = sb.total_blocks;
    report.total_inodes = geo.total_inodes();
    let mut ctx = Ctx {
        img,
        sb,
        geo,
        seed,
        repair,
        report,
        groups: Vec::new(),
        inodes: Default::default(),
        claims: Vec::new(),
        dirents: Vec::new(),
        xattrs: Default::default(),
        orphans: Default::default(),
        incomplete: false,
        incomplete_trees: Default::default(),
        rebuilds: Default::default(),
        checksum_fixes: Vec::new(),
        cleared: Vec::new(),
        dropped_xattrs: Default::default(),
        sb_dirty,
        inode_fixes: Default::default(),
        dirent_fixes: Vec::new(),
        xattr_fixes: Default::default(),
        xattr_drops: Default::default(),
        orphan_removals: Vec::new(),
        progress: progress.cloned(),
    };
    groups::load(&mut ctx)?;
    inodes::run(&mut ctx)?;
    links::walk_orphans(&mut ctx);
    if repair {
        salvage::recover_leaves(&mut ctx)?;
        // Pass 2 takes each directory's entries as one run.
        ctx.dirents.sort_by_key(|r| r.dir);
    }
    dirs::run(&mut ctx)?;
    blocks::run(&mut ctx)?;
    if repair {
        salvage::run(&mut ctx)?;
    }
    links::run(&mut ctx);
    if repair {
        repair::apply(&mut ctx)?;
    }
    bitmaps::run(&mut ctx)?;
    if repair && ctx.sb_dirty && ctx.report.fixed() > 0 {
        superblock::write(&mut ctx.img, &ctx.sb, &ctx.geo)?;
    }
    ctx.img.sync()?;
    summarize(&mut ctx);
    ctx.report.bytes_read = ctx.img.bytes_read;
    ctx.report.blocks_written = ctx.img.blocks_written;
    Ok(ctx.report)
}

fn summarize(ctx: &mut Ctx) {
    use cairn_format::inode::*;
    let r = &mut ctx.report;
    for i in ctx.inodes.values().filter(|i| !i.freed && !i.bad) {
        match i.file_type() {
            S_IFDIR => r.directories += 1,
            S_IFREG => r.regular_files += 1,
            S_IFLNK => r.symlinks += 1,
            _ => r.special_files += 1,
        }
    }
}

/// Checks the unmounted image at `path`, writing human-readable findings to `out`;
/// returns the fsck(8) exit code: 0 clean, 1 errors corrected (only with repair), 4 errors left uncorrected, 8 operational error (cannot open/read the image, not a cairn image, etc).
pub fn run(path: &Path, opts: &Options, out: &mut dyn Write) -> i32 {
    run_with(&path.display().to_string(), opts, out, &|| check(path, opts))
}

/// As [`run`], on an image that `source` holds (an encrypted image's
/// decrypting device, say), named `shown` in the report.
pub fn run_on(source: &dyn ImageSource, shown: &str, opts: &Options, out: &mut dyn Write) -> i32 {
    run_with(shown, opts, out, &|| check_image(source, opts))
}

fn run_with(shown: &str, opts: &Options, out: &mut dyn Write, check: &dyn Fn() -> Result<Report, FsckError>) -> i32 {
    // Every read is bounds-checked and nothing panics on damaged input by
    // design; should a bug still panic, report it as an operational error
    // rather than abort the caller. (The progress callback is the caller's;
    // after a panic nothing of the check is used again.)
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
    let report = match result {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            // Some errors name the image themselves ("IMG is in use").
            let text = e.to_string();
            if text.starts_with(shown) {
                let _ = writeln!(out, "cairn fsck: {text}");
            } else {
                let _ = writeln!(out, "cairn fsck: {shown}: {text}");
            }
            return e.exit_code();
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let _ = writeln!(out, "cairn fsck: {shown}: internal error (a bug in fsck): {what}");
            return 8;
        }
    };
    let _ = write_report(&report, shown, opts, out);
    exit_code(&report, opts)
}

/// The exit code a report implies.
pub fn exit_code(report: &Report, opts: &Options) -> i32 {
    if report.is_clean() {
        0
    } else if (opts.repair || opts.preen) && report.errors_left() == 0 && report.verified_after_repair {
        1
    } else {
        4
    }
}

fn write_report(r: &Report, path: &str, opts: &Options, out: &mut dyn Write) -> std::io::Result<()> {
    use report::num;
    for n in &r.notes {
        writeln!(out, "{n}")?;
    }
    let mut last: Option<Pass> = None;
    for p in &r.problems {
        if last != Some(p.pass) {
            writeln!(out, "[{}]", p.pass)?;
            last = Some(p.pass);
        }
        let tag = if p.fixed { " [fixed]" } else { "" };
        writeln!(out, "  {} {}{tag}", p.code.id(), p.message)?;
    }
    if r.problems_dropped > 0 {
        writeln!(out, "  ... and {} more problems not shown", num(r.problems_dropped))?;
    }
    let verdict = if r.is_clean() {
        "clean".to_string()
    } else if r.preen_refused {
        let n = r.problems.iter().filter(|p| !p.preen_safe).count() as u64 + r.problems_dropped;
        format!(
            "UNEXPECTED INCONSISTENCY: {} problem(s) preen may not fix; nothing was changed: RUN `cairn fsck --repair` \
             MANUALLY",
            num(n)
        )
    } else if (opts.repair || opts.preen) && r.errors_left() == 0 && r.verified_after_repair {
        format!("{} error(s) corrected; the file system is now clean", num(r.fixed()))
    } else if opts.repair || opts.preen {
        format!("{} error(s) corrected, {} left uncorrected", num(r.fixed()), num(r.errors_left()))
    } else {
        format!("{} error(s) found, not corrected (run with --repair)", num(r.errors_left()))
    };
    writeln!(
        out,
        "cairn fsck: {path}: {} inodes used of {}, {} blocks used of {} ({} directories, {} files, {} symlinks, {} other, {} orphans); {verdict}.",
        num(r.inodes_used),
        num(r.total_inodes),
        num(r.blocks_used),
        num(r.total_blocks),
        num(r.directories),
        num(r.regular_files),
        num(r.symlinks),
        num(r.special_files),
        num(r.orphans),
    )
}
