//! The tools that work on an unmounted image, at its edges (issue 51):
//! `inspect` of an inode that is not in use changes nothing and says so;
//! the smallest size mkfs states is one that formats, checks clean and
//! takes a file; images that are not cairn's (ext4, XFS, btrfs, swap,
//! zeros, random bytes) are named by every command that opens an image;
//! the root directory and `/lost+found` belong to mkfs's caller or to
//! `--root-owner`.

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// The image's SHA-256, from sha256sum (an image here may be 300 MiB).
fn digest(img: &Path) -> String {
    let o = Command::new("sha256sum").arg(img).output().expect("sha256sum");
    assert!(o.status.success());
    stdout(&o).split_whitespace().next().unwrap().to_string()
}

#[test]
fn inspect_of_an_inode_not_in_use_says_so_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("i.img");
    mkfs(&img, "16M");
    let before = digest(&img);
    for (ino, want) in [
        ("#2", "inode 2: not in use (inodes 2 to 7 are reserved)"),
        ("#9", "inode 9: not in use"),
        ("100", "inode 100: not in use"),
        ("#0", "inode 0: not in use (out of range)"),
        ("#99999999", "inode 99999999: not in use (out of range)"),
    ] {
        let o = run(&["inspect", p(&img), "stat", ino]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "stat {ino}: {}", stdout(&o));
        assert!(err.contains(want), "stat {ino}: {err}");
        for never in ["corrupt", "checksum", "marked", "journal", "superblock", "descriptor"] {
            assert!(!err.contains(never), "stat {ino} says {never:?}: {err}");
        }
    }
    // The root and /lost+found (the first inode mkfs hands out) are in use.
    let o = run(&["inspect", p(&img), "stat", "#1"]);
    assert!(o.status.success() && stdout(&o).starts_with("inode 1 "), "{}", stderr(&o));
    let o = run(&["inspect", p(&img), "stat", "#8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(digest(&img), before, "inspect changed the image");
    assert_fsck_clean(&img, "after inspect");
    // Damage in an inode in use is reported, and still not written to the
    // image (it is open read-only: no error state recorded).
    let o = run(&["inspect", p(&img), "stat", "#8"]);
    let out = stdout(&o);
    let loc = out.split_once("(block ").and_then(|(_, r)| r.split_once(')')).unwrap().0;
    let (blk, byte) = loc.split_once(", byte ").unwrap();
    let at = blk.parse::<u64>().unwrap() * 4096 + byte.parse::<u64>().unwrap() + 40;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    let mut b = [0u8];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, at).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[b[0] ^ 0xff], at).unwrap();
    drop(f);
    let damaged = digest(&img);
    let o = run(&["inspect", p(&img), "stat", "#8"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("checksum mismatch") && err.contains("not recorded"), "{err}");
    assert!(!err.contains("Bad file descriptor") && !err.contains("could not record"), "{err}");
    assert_eq!(digest(&img), damaged, "inspect wrote to a damaged image");
}

/// The minimum `cairn mkfs --size 64K` states, in bytes.
fn stated_minimum(dir: &Path, extra: &[&str]) -> u64 {
    let img = dir.join("tiny.img");
    let o = run(&[&["mkfs", p(&img), "--size", "64K"], extra].concat());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("too small") && err.contains("needs at least"), "{err}");
    let bytes = err.rsplit_once('(').and_then(|(_, b)| b.split(' ').next()).and_then(|n| n.parse().ok());
    bytes.unwrap_or_else(|| panic!("no byte count in {err}"))
}

#[test]
fn mkfs_states_the_true_minimum_and_every_size_above_it_works() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("m.img");
    for (bs, extra) in [(4096u64, &[][..]), (1024, &["--block-size", "1024"][..])] {
        let min = stated_minimum(dir.path(), extra);
        let o = run(&[&["mkfs", p(&img), "--size", &(min - bs).to_string(), "--quiet"], extra].concat());
        assert_eq!(o.status.code(), Some(1), "one block below the minimum {min} formatted");
        assert!(stderr(&o).contains("too small"), "{}", stderr(&o));
        assert!(!img.exists(), "a refused mkfs left a file");
        let o = run(&[&["mkfs", p(&img), "--size", &min.to_string(), "--quiet"], extra].concat());
        assert!(o.status.success(), "the stated minimum {min} ({bs}-byte blocks): {}", stderr(&o));
        assert_fsck_clean(&img, "the smallest image");
        std::fs::remove_file(&img).unwrap();
    }
    // Sizes from the minimum to 7 MiB (before: /lost+found failed with ENOSPC).
    for size in ["4M", "5M", "6M"] {
        let o = run(&["mkfs", p(&img), "--size", size, "--quiet", "--force"]);
        assert!(o.status.success(), "{size}: {}", stderr(&o));
        assert_fsck_clean(&img, size);
    }
    if !can_mount() {
        return;
    }
    std::fs::remove_file(&img).unwrap();
    let min = stated_minimum(dir.path(), &[]);
    let o = run(&["mkfs", p(&img), "--size", &min.to_string(), "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let g = Guard(mp.clone());
    let pid = mount(&img, &mp, &[], "mount");
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(mp.join("f"), &data).unwrap();
    std::fs::create_dir(mp.join("d")).unwrap();
    unmount(&mp, pid);
    drop(g);
    assert_fsck_clean(&img, "the smallest image after a write");
    let o = run(&["inspect", p(&img), "cat", "/f"]);
    assert!(o.status.success() && o.stdout == data, "{}", stderr(&o));
}

/// Makes `img` of `size` bytes (sparse) with `tool args... img`; false
/// (and says so) if the tool is missing or fails.
fn foreign_image(img: &Path, size: u64, tool: &str, args: &[&str]) -> bool {
    std::fs::File::create(img).unwrap().set_len(size).unwrap();
    match Command::new(tool).args(args).arg(img).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!("SKIPPED {tool}: {}", stderr(&o));
            false
        }
        Err(e) => {
            eprintln!("SKIPPED {tool}: {e}");
            false
        }
    }
}

#[test]
fn images_that_are_not_cairn_are_named_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mut cases: Vec<(std::path::PathBuf, &str)> = Vec::new();
    let ext4 = dir.path().join("ext4.img");
    if foreign_image(&ext4, 32 << 20, "mkfs.ext4", &["-q", "-F"]) {
        cases.push((ext4, "it holds an ext4 file system"));
    }
    let xfs = dir.path().join("xfs.img");
    if foreign_image(&xfs, 300 << 20, "mkfs.xfs", &["-q", "-f"]) {
        cases.push((xfs, "it holds an XFS file system"));
    }
    let btrfs = dir.path().join("btrfs.img");
    if foreign_image(&btrfs, 128 << 20, "mkfs.btrfs", &["-q", "-f"]) {
        cases.push((btrfs, "it holds a btrfs file system"));
    }
    let swap = dir.path().join("swap.img");
    if foreign_image(&swap, 4 << 20, "mkswap", &[]) {
        cases.push((swap, "it holds Linux swap space"));
    }
    let zeros = dir.path().join("zeros.img");
    std::fs::File::create(&zeros).unwrap().set_len(64 << 20).unwrap();
    cases.push((zeros, "its first 128 KiB are all zeros"));
    // Bytes with no structure any file system would recognise.
    let random = dir.path().join("random.img");
    std::fs::write(&random, patterned(4 << 20)).unwrap();
    cases.push((random, "it holds no cairn superblock, nor a backup copy"));
    for (img, what) in &cases {
        let before = digest(img);
        let i = p(img);
        let commands: [(&[&str], i32); 7] = [
            (&["mount", i, p(&mp)], 1),
            (&["fsck", i], 8),
            (&["fsck", "-y", i], 8),
            (&["inspect", i, "stat", "/"], 1),
            (&["tune", i], 1),
            (&["stats", i], 1),
            (&["resize", i, "1G"], 1),
        ];
        for (args, code) in commands {
            let o = run(args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
            assert!(err.contains(&format!("{i} is not a cairn file system: {what}")), "{args:?}: {err}");
            assert!(!err.contains("`cairn fsck") && !err.contains("bad magic"), "{args:?}: {err}");
        }
        assert_eq!(digest(img), before, "a refused command changed {i}");
        assert!(!is_mounted(&mp));
    }
    // A cairn image whose first blocks were zeroed is still cairn's: fsck
    // finds a backup superblock, and mount sends the user to fsck.
    let img = dir.path().join("wiped.img");
    mkfs(&img, "300M");
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &vec![0u8; 128 << 10], 0).unwrap();
    let o = run(&["mount", p(&img), p(&mp)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("(run `cairn fsck"), "{}", stderr(&o));
    let o = run(&["fsck", p(&img)]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert!(said.contains("backup") && !said.contains("not a cairn file system"), "{said}");
}

#[test]
fn the_root_directory_and_lost_found_belong_to_the_caller_or_to_root_owner() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("o.img");
    let owners = |img: &Path| -> Vec<String> {
        ["/", "/lost+found"]
            .iter()
            .map(|f| {
                let o = run(&["inspect", p(img), "stat", f]);
                assert!(o.status.success(), "{}", stderr(&o));
                let out = stdout(&o);
                let line = out.lines().find(|l| l.starts_with("mode ")).unwrap().to_string();
                line.split("  ").filter(|w| w.starts_with("uid") || w.starts_with("gid")).collect::<Vec<_>>().join(" ")
            })
            .collect()
    };
    let o = run(&["mkfs", p(&img), "--size", "16M", "--quiet", "--root-owner", "1000:1001"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(owners(&img), ["uid 1000 gid 1001", "uid 1000 gid 1001"]);
    assert_fsck_clean(&img, "--root-owner");
    for bad in ["1000", "alice:staff", "1000:"] {
        let o = run(&["mkfs", p(&img), "--size", "16M", "--force", "--root-owner", bad]);
        assert_eq!(o.status.code(), Some(1), "--root-owner {bad}");
        assert!(stderr(&o).contains("--root-owner"), "{}", stderr(&o));
    }
    // Without it: whoever runs mkfs (as uid 1000 through setpriv, if root).
    let mine = dir.path().join("mine.img");
    let me = std::fs::metadata("/proc/self").unwrap();
    let mut as_1000 = Command::new("setpriv");
    as_1000.args(["--reuid", "1000", "--regid", "1000", "--clear-groups", env!("CARGO_BIN_EXE_cairn")]);
    let (mut cmd, want) = if me.uid() == 0 && Path::new("/usr/bin/setpriv").exists() {
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        (as_1000, "uid 1000 gid 1000".to_string())
    } else {
        (cairn(), format!("uid {} gid {}", me.uid(), me.gid()))
    };
    let o = cmd.args(["mkfs", p(&mine), "--size", "16M", "--quiet"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(owners(&mine), [want.clone(), want]);
    if !can_mount() {
        return;
    }
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let g = Guard(mp.clone());
    let pid = mount(&img, &mp, &[], "mount");
    for f in [mp.clone(), mp.join("lost+found")] {
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!((m.uid(), m.gid()), (1000, 1001), "{}", f.display());
    }
    assert_eq!(std::fs::metadata(mp.join("lost+found")).unwrap().mode() & 0o7777, 0o700);
    unmount(&mp, pid);
    drop(g);
}
