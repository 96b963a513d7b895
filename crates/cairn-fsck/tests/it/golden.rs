//! Golden images and expected fsck output, kept in the repository as
//! e2fsprogs keeps its `tests/f_*` cases (`image.gz`, `expect.1`,
//! `expect.2`).
//!
//! A golden image is built once by the engine (`cairn mkfs`'s layout, with
//! `/lost+found`), populated, compressed with zstd and committed under
//! `tests/golden/<shape>.img.zst`, with the inode numbers of its named
//! objects in `<shape>.names`. Tests damage a copy in memory. Because the
//! image is fixed, fsck's messages (inode and block numbers included) are
//! the same on every run, so the whole output of the repair run and of the
//! check after it can be compared with `tests/golden/expect/<shape>/<kind>.1`
//! and `.2`.
//!
//! `CAIRN_BLESS=1 cargo test -p cairn-fsck --test it catalogue` rewrites
//! the expected output (a new kind of damage, a changed message: review the
//! diff before committing it); `CAIRN_BLESS=images` also rebuilds the images
//! (after a change of the format; every expected output then changes).

use crate::common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The names tests use for objects of a golden image → inode numbers.
pub type Names = HashMap<&'static str, u64>;

/// Whether this run rewrites the expected output (`CAIRN_BLESS=1`, or
/// `images`: the golden images too).
pub fn blessing() -> bool {
    std::env::var_os("CAIRN_BLESS").is_some_and(|v| v != "0")
}

/// Whether this run rebuilds the golden images (`CAIRN_BLESS=images`; or
/// blessing and the image is missing, for a new shape).
fn rebuilding(img: &Path) -> bool {
    std::env::var_os("CAIRN_BLESS").is_some_and(|v| v == "images") || blessing() && !img.exists()
}

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// A file-name form of a description: "4 KiB blocks, small groups" →
/// "4-kib-blocks-small-groups".
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// The golden image `shape` (built by `build` when blessing).
pub fn image(shape: &str, build: impl FnOnce() -> (Vec<u8>, Names)) -> (Vec<u8>, Names) {
    let base = dir().join(slug(shape));
    let (img, names) = (base.with_extension("img.zst"), base.with_extension("names"));
    if rebuilding(&img) {
        let (bytes, m) = build();
        std::fs::create_dir_all(dir()).unwrap();
        std::fs::write(&img, zstd::bulk::compress(&bytes, 19).unwrap()).unwrap();
        let mut lines: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        lines.sort();
        std::fs::write(&names, lines.concat()).unwrap();
        return (bytes, m);
    }
    let packed = std::fs::read(&img)
        .unwrap_or_else(|e| panic!("{}: {e} (CAIRN_BLESS=1 builds the golden images)", img.display()));
    let bytes = zstd::stream::decode_all(&packed[..]).unwrap();
    let text = std::fs::read_to_string(&names).unwrap();
    let m = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').expect("name inode");
            (&*Box::leak(k.to_string().into_boxed_str()), v.parse().unwrap())
        })
        .collect();
    (bytes, m)
}

/// Compares `got` with the expected output `expect/<shape>/<kind>.<n>`
/// (or writes it, when blessing); `Err` holds both, line by line.
pub fn compare(shape: &str, kind: &str, n: u32, got: &str) -> Result<(), String> {
    let path = dir().join("expect").join(slug(shape)).join(format!("{}.{n}", slug(kind)));
    if blessing() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return Ok(());
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if want == got {
        return Ok(());
    }
    let mut diff = String::new();
    for line in diff_lines(&want, got) {
        diff.push_str(&line);
        diff.push('\n');
    }
    Err(format!("fsck output differs from {} (- expected, + got):\n{diff}", path.display()))
}

/// A plain line diff: lines only in `want` with `-`, only in `got` with `+`
/// (order kept; enough for outputs of a few dozen lines).
fn diff_lines(want: &str, got: &str) -> Vec<String> {
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    let mut out: Vec<String> = w.iter().filter(|l| !g.contains(l)).map(|l| format!("- {l}")).collect();
    out.extend(g.iter().filter(|l| !w.contains(l)).map(|l| format!("+ {l}")));
    if out.is_empty() {
        out.push("(the same lines in another order)".into());
    }
    out
}

/// fsck output with the temporary image path replaced by `IMAGE`.
pub fn normalise(out: &str, path: &Path) -> String {
    out.replace(&*path.to_string_lossy(), "IMAGE")
}

/// A populated image as `cairn mkfs` makes it (with `/lost+found`), cleanly
/// unmounted.
pub fn populated(mib: u64, opts: &cairn_core::mkfs::MkfsOptions) -> (Vec<u8>, Names) {
    let dev = new_image(mib, opts);
    let lf = cairn_core::mkfs::create_lost_found(dev.clone()).unwrap();
    let fs = mount(dev.clone());
    let mut m = populate(&fs);
    m.insert("lost+found", lf);
    fs.unmount().unwrap();
    (dev.snapshot(), m)
}

/// A populated image whose last mount crashed with files open after their
/// unlink: after fsck's replay of the journal (`--repair`, which changes
/// nothing else), its orphan list holds them.
pub fn with_open_orphans(opts: &cairn_core::mkfs::MkfsOptions) -> (Vec<u8>, Names) {
    let dev = new_image(48, opts);
    let lf = cairn_core::mkfs::create_lost_found(dev.clone()).unwrap();
    let (bytes, mut m) = crashed_with_orphans(dev);
    m.insert("lost+found", lf);
    let f = to_file(&bytes);
    let (code, out) = fsck(f.path(), true);
    assert!(code <= 1 && !out.contains(", 0 orphans)"), "the replay of the crashed image: {code}\n{out}");
    assert_clean(f.path());
    (std::fs::read(f.path()).unwrap(), m)
}
