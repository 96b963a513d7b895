//! What a check found, in words a user understands, plus summary figures.
//!
//! ## Purpose
//! Every pass reports through one [`Report`]: each inconsistency becomes a
//! [`Problem`] — which pass found it, a sentence naming the object ("inode
//! 1234: link count is 2, but 1 directory entry points to it"), and whether a
//! repair fixed it. Problems are e2fsck's `problem.c` table in spirit, but
//! the sentences are built where the facts are, so they can name blocks,
//! inodes, names and counts.
//!
//! ## Bounds
//! A badly damaged image can produce millions of findings (a garbage bitmap
//! differs in every bit). The report keeps the first [`MAX_PROBLEMS`] in full
//! and only counts the rest, so memory and output stay bounded; passes also
//! coalesce runs of blocks into ranges before reporting.
//!
//! ## What it concludes
//! [`Report::errors_left`] and [`Report::fixed`] decide the fsck(8) exit code
//! (see `run` in the crate root).

use crate::problems::{Code, Pass};
use serde::Serialize;

/// Problems kept in full; later ones are only counted.
pub const MAX_PROBLEMS: usize = 10_000;

/// One inconsistency.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// What kind it is (the problem table, `problems`).
    pub code: Code,
    /// Which pass found it.
    pub pass: Pass,
    /// What is wrong, in words.
    pub message: String,
    /// A repair corrected it.
    pub fixed: bool,
    /// `-p` (preen) may fix it without asking (`Code::preen_safe`).
    pub preen_safe: bool,
}

/// Everything a check found, and summary figures of the image.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Problems found (the first [`MAX_PROBLEMS`]).
    pub problems: Vec<Problem>,
    /// Problems found beyond [`MAX_PROBLEMS`] (not kept).
    pub problems_dropped: u64,
    /// Notes that are not errors (e.g. "journal replayed").
    pub notes: Vec<String>,
    /// Block size in bytes.
    pub block_size: u32,
    /// Blocks in the file system.
    pub total_blocks: u64,
    /// Blocks in use (metadata, journal, data).
    pub blocks_used: u64,
    /// Inodes in the file system.
    pub total_inodes: u64,
    /// Inodes in use (including the reserved ones).
    pub inodes_used: u64,
    /// Directories.
    pub directories: u64,
    /// Regular files.
    pub regular_files: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Device nodes, FIFOs and sockets.
    pub special_files: u64,
    /// Inodes on the orphan list.
    pub orphans: u64,
    /// Journal records replayed (in memory, or written with repair).
    pub journal_records_replayed: u64,
    /// Journal blocks replayed.
    pub journal_blocks_replayed: u64,
    /// Groups whose bitmaps were never initialised.
    pub uninit_groups: u64,
    /// Bytes read from the image.
    pub bytes_read: u64,
    /// Blocks written by repairs.
    pub blocks_written: u64,
    /// Set when the repair wrote changes and a second, read-only check then
    /// found the image clean.
    pub verified_after_repair: bool,
    /// Preen (`-p`) found a problem it may not fix and changed nothing.
    pub preen_refused: bool,
}

impl Report {
    /// Records a problem, not fixed.
    pub fn problem(&mut self, code: Code, message: impl Into<String>) {
        self.push(code, message.into(), false);
    }

    /// Records a problem and whether it was fixed.
    pub fn push(&mut self, code: Code, message: String, fixed: bool) {
        self.push_in(code.pass(), code, message, fixed);
    }

    /// Records a problem found by `pass` (a tree walk reports for the pass
    /// that walks it).
    pub fn push_in(&mut self, pass: Pass, code: Code, message: String, fixed: bool) {
        if self.problems.len() >= MAX_PROBLEMS {
            self.problems_dropped += 1;
            return;
        }
        self.problems.push(Problem { code, pass, message, fixed, preen_safe: code.preen_safe() });
    }

    /// Records `p` again (a later round's finding). A later round that
    /// fixed what an earlier one reported and left (same code, the earlier
    /// message a prefix of the later one) replaces that earlier line: the
    /// problem is corrected, not left.
    pub fn repeat(&mut self, p: Problem) {
        if p.fixed {
            self.problems.retain(|q| q.fixed || q.code != p.code || !p.message.starts_with(&q.message));
        }
        self.push_in(p.pass, p.code, p.message, p.fixed);
    }

    /// True if every problem found may be fixed by preen (see
    /// [`Code::preen_safe`]).
    pub fn preen_may_fix(&self) -> bool {
        self.problems_dropped == 0 && self.problems.iter().all(|p| p.preen_safe)
    }

    /// The distinct codes of the problems found, in table order.
    pub fn codes(&self) -> Vec<Code> {
        let mut v: Vec<Code> = self.problems.iter().map(|p| p.code).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Records a note.
    pub fn note(&mut self, message: impl Into<String>) {
        if self.notes.len() < 1000 {
            self.notes.push(message.into());
        }
    }

    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.problems_dropped == 0
    }

    /// Problems not fixed.
    pub fn errors_left(&self) -> u64 {
        self.problems.iter().filter(|p| !p.fixed).count() as u64 + self.problems_dropped
    }

    /// Problems fixed.
    pub fn fixed(&self) -> u64 {
        self.problems.iter().filter(|p| p.fixed).count() as u64
    }

    /// Marks every problem of `pass` whose message satisfies `pred` as fixed.
    pub fn mark_fixed(&mut self, pass: Pass, pred: impl Fn(&str) -> bool) {
        for p in &mut self.problems {
            if p.pass == pass && pred(&p.message) {
                p.fixed = true;
            }
        }
    }
}

/// `1234567` → `"1,234,567"`.
pub fn num(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` bytes in words: "1,048,576 bytes (1 MiB)".
pub fn bytes(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    if n >= MIB {
        format!("{} bytes ({:.1} MiB)", num(n), n as f64 / MIB as f64).replace(".0 MiB", " MiB")
    } else {
        format!("{} bytes", num(n))
    }
}

/// The end of a message whose repair is known: what was `done` when
/// repairing (": checksum rewritten"), else what a repair would `do_`, so
/// that a check that changes nothing never claims a fix (as e2fsck -n
/// answers "no" to every question).
pub fn action(repair: bool, done: &str, do_: &str) -> String {
    if repair {
        format!(": {done}")
    } else {
        format!(" (not fixed: checked only; --repair would {do_})")
    }
}

/// "block 5" or "blocks 5-9".
pub fn block_range(start: u64, len: u64) -> String {
    if len <= 1 {
        format!("block {start}")
    } else {
        format!("blocks {start}-{}", start + len - 1)
    }
}

/// "1 directory entry points" / "3 directory entries point".
pub fn entries_point(n: u64) -> String {
    if n == 1 {
        "1 directory entry points".into()
    } else {
        format!("{n} directory entries point")
    }
}

/// Printable form of a file name (invalid UTF-8 escaped).
pub fn name(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    format!("'{}'", s.escape_debug())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_round_that_fixes_a_problem_replaces_it() {
        let mut r = Report::default();
        r.problem(Code::BlockClaimedTwice, "inode 22 and inode 28 both claim 2 block(s)");
        r.problem(Code::BlockClaimedTwice, "inode 22 and inode 29 both claim 4 block(s)");
        let p = |m: &str, fixed| Problem {
            code: Code::BlockClaimedTwice,
            pass: Pass::Blocks,
            message: m.into(),
            fixed,
            preen_safe: false,
        };
        r.repeat(p("inode 22 and inode 28 both claim 2 block(s): inode 28 gives up the extents", true));
        assert_eq!(r.errors_left(), 1, "{:?}", r.problems);
        assert_eq!(r.fixed(), 1);
        // Not fixed again: kept beside the first.
        r.repeat(p("inode 22 and inode 29 both claim 4 block(s)", false));
        assert_eq!(r.errors_left(), 2);
    }

    #[test]
    fn thousands() {
        assert_eq!(num(0), "0");
        assert_eq!(num(999), "999");
        assert_eq!(num(1000), "1,000");
        assert_eq!(num(262144), "262,144");
        assert_eq!(num(1234567), "1,234,567");
    }

    #[test]
    fn bounded() {
        let mut r = Report::default();
        for i in 0..MAX_PROBLEMS + 5 {
            r.problem(Code::InodeDamaged, format!("p{i}"));
        }
        assert_eq!(r.problems.len(), MAX_PROBLEMS);
        assert_eq!(r.errors_left(), MAX_PROBLEMS as u64 + 5);
        assert_eq!(block_range(5, 1), "block 5");
        assert_eq!(block_range(5, 3), "blocks 5-7");
    }
}
