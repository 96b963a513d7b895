//! `cairn-bench-driver fragment IMAGE [--used SIZE] [--period SIZE]`: seed
//! 002's fragmented disk, made offline.
//!
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

use cairn_core::dev::{BlockDevice, FileDevice};
use cairn_core::{human_bytes as human, parse_size};
use cairn_format::bitmap::synth_block_bitmap;
use cairn_format::checksum::crc;
use cairn_format::group_desc::{gd_loc, GroupDesc, GD_BLOCK_UNINIT, GD_SIZE};
use cairn_format::journal::{read_record, JournalRegion, JournalSuper, LogPos, Walk};
use cairn_format::layout::Geometry;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_CLEAN, STATE_ERRORS};
use std::fs::File;
use std::io::IsTerminal;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// `used` bytes taken in every `period` bytes of each group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    pub used: u64,
    pub period: u64,
}

impl Pattern {
    pub fn parse(used: &str, period: &str) -> Result<Pattern, String> {
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
