//! Encrypted images (#54) through the CLI, mounted for real: what the
//! image file shows of the files written into it (nothing), the round trip
//! through unmount and remount, fsck with the key, and the refusals (a
//! wrong key, no key, a key for a plain image, `mkfs --encrypt` over a plain
//! image) that leave the image's bytes as they were.

mod common;

use common::*;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

const MARKER: &str = "plaintext-marker-7f3a91c2";
const NAMES: [&str; 3] = ["confidential-dir-q8z", "tax-return-2026-w4k.txt", "diary-entry-m2v"];

/// Which of `needles` the file at `path` holds (grep: a byte-wise scan
/// of a debug build would take a minute).
fn found_in(path: &Path, needles: &[&str]) -> Vec<String> {
    let mut grep = std::process::Command::new("grep");
    grep.args(["-a", "-F", "-o"]);
    for n in needles {
        grep.arg("-e").arg(n);
    }
    let o = grep.arg(path).output().expect("run grep");
    assert!(o.status.code().is_some_and(|c| c < 2), "grep: {}", stderr(&o));
    let mut found: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    found.sort();
    found.dedup();
    found
}

fn mount(img: &Path, mp: &Path, args: &[&str]) -> u64 {
    let o = run(&[&["mount", p(img), p(mp)], args].concat());
    assert!(o.status.success(), "mount: {}", stderr(&o));
    daemon_pid(mp)
}

/// Runs cairn with `input` on its standard input.
fn run_with_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child =
        cairn().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn write_tree(mp: &Path) {
    let dir = mp.join(NAMES[0]);
    std::fs::create_dir(&dir).unwrap();
    // A small file, and one large enough for the O_DIRECT data path.
    std::fs::write(dir.join(NAMES[1]), MARKER.repeat(10)).unwrap();
    std::fs::write(mp.join(NAMES[2]), MARKER.repeat(40_000)).unwrap();
    std::os::unix::fs::symlink(MARKER, mp.join("link")).unwrap();
}

fn check_tree(mp: &Path) {
    let small = std::fs::read_to_string(mp.join(NAMES[0]).join(NAMES[1])).unwrap();
    assert_eq!(small, MARKER.repeat(10));
    let large = std::fs::read_to_string(mp.join(NAMES[2])).unwrap();
    assert!(large == MARKER.repeat(40_000), "the large file reads back");
    assert_eq!(std::fs::read_link(mp.join("link")).unwrap().to_str(), Some(MARKER));
}

#[test]
fn an_encrypted_image_shows_nothing_and_reads_back_with_its_key() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mp, key) = (dir.path().join("enc.img"), dir.path().join("mnt"), dir.path().join("key"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(&key, b"a key file's bytes: 0123456789abcdef").unwrap();
    let o = run(&["mkfs", p(&img), "--size", "128M", "--encrypt", "--key-file", p(&key)]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    assert!(stdout(&o).contains("encrypted with aes-xts-plain64"), "{}", stdout(&o));
    let o = run(&["key", "list", p(&img)]);
    assert!(o.status.success(), "key list: {}", stderr(&o));
    let listing = stdout(&o);
    assert!(listing.contains("aes-xts-plain64, blocks of 4096 bytes from byte 1048576"), "{listing}");
    assert!(listing.contains("slot 0: key file, Argon2id "), "{listing}");
    assert_eq!(listing.lines().count(), 2, "one slot: {listing}");

    let pid = mount(&img, &mp, &["--key-file", p(&key)]);
    let _g = Guard(mp.clone());
    assert_eq!(counters(&mp).get("dev.encrypted"), Some(&1), "the daemon runs on the encrypting device");
    write_tree(&mp);
    std::fs::File::open(mp.join(NAMES[2])).unwrap().sync_all().unwrap();
    let c = counters(&mp);
    if c.get("dev.direct_data") == Some(&1) {
        assert!(c["dev.direct_write_bytes"] > 0, "file data went through O_DIRECT, encrypted: {c:?}");
    }
    check_tree(&mp);
    unmount(&mp, pid);

    let needles = [MARKER, NAMES[0], NAMES[1], NAMES[2], "lost+found", "CAIRNFS"];
    assert_eq!(found_in(&img, &needles), Vec::<String>::new(), "the image shows plaintext");
    // The scan itself finds what is there: the header's magic number.
    assert_eq!(found_in(&img, &["CAIRNCRY"]), ["CAIRNCRY"]);

    let o = run(&["fsck", p(&img), "--key-file", p(&key)]);
    assert_eq!(o.status.code(), Some(0), "fsck: {}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("clean"), "{}", stdout(&o));

    // Again, the key file given as a mount option (as fstab gives it).
    let pid = mount(&img, &mp, &["-o", &format!("keyfile={}", p(&key))]);
    check_tree(&mp);
    unmount(&mp, pid);
    assert_eq!(run(&["fsck", p(&img), "--key-file", p(&key)]).status.code(), Some(0));
}

#[test]
fn wrong_or_missing_keys_are_refused_and_change_nothing() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mp) = (dir.path().join("enc.img"), dir.path().join("mnt"));
    let (key, bad) = (dir.path().join("key"), dir.path().join("bad"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(&key, b"right").unwrap();
    std::fs::write(&bad, b"wrong").unwrap();
    let o = run(&["mkfs", p(&img), "--size", "64M", "--encrypt", "--key-file", p(&key), "--quiet"]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    let before = std::fs::read(&img).unwrap();

    let o = run(&["mount", p(&img), p(&mp), "--key-file", p(&bad)]);
    assert!(!o.status.success() && !is_mounted(&mp));
    assert!(stderr(&o).contains("wrong passphrase or key file"), "{}", stderr(&o));
    let o = run(&["fsck", p(&img), "--key-file", p(&bad), "-y"]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert!(stderr(&o).contains("wrong passphrase or key file"), "{}", stderr(&o));
    let o = run_with_stdin(&["fsck", p(&img), "--passphrase-stdin"], b"rights\n");
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));

    // Without a key every command says what the image is.
    let tries: [&[&str]; 7] = [
        &["mount", p(&img), p(&mp)],
        &["fsck", p(&img)],
        &["inspect", p(&img), "super"],
        &["stats", p(&img)],
        &["tune", p(&img), "--label", "x"],
        &["resize", p(&img), "128M"],
        &["trim", p(&img), "--allow-discards"],
    ];
    for args in tries {
        let o = run(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains("is an encrypted cairn image: give --key-file"), "{args:?}: {}", stderr(&o));
        // And with the wrong key, that it is the wrong key.
        let o = run(&[args, &["--key-file", p(&bad)]].concat());
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains("wrong passphrase or key file"), "{args:?}: {}", stderr(&o));
    }
    // mkfs (with or without --encrypt) will not overwrite it unasked.
    let o = run(&["mkfs", p(&img), "--encrypt", "--key-file", p(&bad)]);
    assert!(!o.status.success() && stderr(&o).contains("already holds an encrypted cairn file system"));
    assert!(std::fs::read(&img).unwrap() == before, "the image changed");
}

#[test]
fn passphrase_on_standard_input_and_no_conversion_of_plain_images() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mp, plain) = (dir.path().join("enc.img"), dir.path().join("mnt"), dir.path().join("plain.img"));
    std::fs::create_dir(&mp).unwrap();
    let pass = b"correct horse battery staple\n";
    let o = run_with_stdin(&["mkfs", p(&img), "--size", "64M", "--encrypt", "--passphrase-stdin", "--quiet"], pass);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    assert!(stdout(&run(&["key", "list", p(&img)])).contains("slot 0: passphrase, Argon2id "));
    let o = run_with_stdin(&["mount", p(&img), p(&mp), "--passphrase-stdin"], pass);
    assert!(o.status.success(), "mount: {}", stderr(&o));
    let _g = Guard(mp.clone());
    let pid = daemon_pid(&mp);
    std::fs::write(mp.join(NAMES[1]), MARKER).unwrap();
    unmount(&mp, pid);
    assert!(found_in(&img, &[MARKER]).is_empty());
    let o = run_with_stdin(&["fsck", p(&img), "--passphrase-stdin"], pass);
    assert_eq!(o.status.code(), Some(0), "fsck: {}{}", stdout(&o), stderr(&o));

    mkfs(&plain, "64M");
    let before = std::fs::read(&plain).unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, b"k").unwrap();
    let o = run(&["mkfs", p(&plain), "--encrypt", "--key-file", p(&key)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not convert one"), "{}", stderr(&o));
    let o = run(&["key", "list", p(&plain)]);
    assert!(!o.status.success() && stderr(&o).contains("not an encrypted image"), "{}", stderr(&o));
    let o = run(&["fsck", p(&plain), "--key-file", p(&key)]);
    assert_eq!(o.status.code(), Some(8));
    assert!(stderr(&o).contains("not an encrypted image"), "{}", stderr(&o));
    let o = run(&["mkfs", p(&plain), "--encrypt"]);
    assert!(!o.status.success() && stderr(&o).contains("--encrypt needs"), "{}", stderr(&o));
    assert!(std::fs::read(&plain).unwrap() == before, "the plain image changed");
}

#[test]
fn key_slots_are_added_changed_and_removed_but_not_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("enc.img");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"first key").unwrap();
    std::fs::write(&b, b"second key").unwrap();
    let o = run(&["mkfs", p(&img), "--size", "32M", "--encrypt", "--key-file", p(&a), "--quiet"]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    let opens = |args: &[&str], stdin: &[u8]| {
        let o = run_with_stdin(&[&["fsck", p(&img)], args].concat(), stdin);
        assert!(matches!(o.status.code(), Some(0 | 8)), "fsck: {}{}", stdout(&o), stderr(&o));
        o.status.code() == Some(0)
    };

    let o = run(&["key", "add", p(&img), "--key-file", p(&a), "--new-key-file", p(&b)]);
    assert!(stdout(&o).contains("key slot 1 added"), "{}{}", stdout(&o), stderr(&o));
    assert!(opens(&["--key-file", p(&b)], b"") && opens(&["--key-file", p(&a)], b""));

    let o = run_with_stdin(&["key", "change", p(&img), "--key-file", p(&b), "--new-passphrase-stdin"], b"pw\n");
    assert!(stdout(&o).contains("key slot 1 changed"), "{}{}", stdout(&o), stderr(&o));
    assert!(!opens(&["--key-file", p(&b)], b""), "the old key of a changed slot no longer opens");
    assert!(opens(&["--passphrase-stdin"], b"pw\n"));

    let o = run(&["key", "remove", p(&img), "--key-file", p(&a), "--slot", "1"]);
    assert!(stdout(&o).contains("key slot 1 removed"), "{}{}", stdout(&o), stderr(&o));
    assert!(!opens(&["--passphrase-stdin"], b"pw\n"));

    let before = std::fs::read(&img).unwrap();
    let o = run(&["key", "remove", p(&img), "--key-file", p(&a)]);
    assert!(!o.status.success() && stderr(&o).contains("last key slot"), "{}", stderr(&o));
    let o = run(&["key", "add", p(&img), "--key-file", p(&b), "--new-key-file", p(&b)]);
    assert!(!o.status.success() && stderr(&o).contains("wrong passphrase or key file"), "{}", stderr(&o));
    assert!(std::fs::read(&img).unwrap() == before, "a refused change wrote nothing");
    assert_eq!(stdout(&run(&["key", "list", p(&img)])).lines().count(), 2, "one slot left");

    // The primary header lost: the copy names and opens the image, and a
    // repairing fsck puts the primary back.
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 4096], 0).unwrap();
    let o = run(&["fsck", p(&img)]);
    assert!(stderr(&o).contains("is an encrypted cairn image"), "{}", stderr(&o));
    let o = run(&["fsck", p(&img), "--key-file", p(&a), "-y"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(&std::fs::read(&img).unwrap()[..8], b"CAIRNCRY", "the primary header is back");
}

/// `cairn` with `args` and the key file: its standard output, after
/// asserting it succeeded.
fn keyed(args: &[&str], key: &Path) -> String {
    let o = run(&[args, &["--key-file", p(key)]].concat());
    assert!(o.status.success(), "{args:?}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

#[test]
fn every_command_opens_an_encrypted_image_with_its_key() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mp, key) = (dir.path().join("enc.img"), dir.path().join("mnt"), dir.path().join("key"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(&key, b"every command's key").unwrap();
    let o = run(&["mkfs", p(&img), "--size", "64M", "--encrypt", "--key-file", p(&key), "--quiet"]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    let pid = mount(&img, &mp, &["--key-file", p(&key)]);
    let _g = Guard(mp.clone());
    std::fs::create_dir(mp.join(NAMES[0])).unwrap();
    std::fs::write(mp.join(NAMES[0]).join(NAMES[1]), MARKER).unwrap();
    unmount(&mp, pid);

    assert!(keyed(&["inspect", p(&img), "super"], &key).contains("block size"));
    assert!(keyed(&["inspect", p(&img), "groups"], &key).contains("block-bitmap"));
    assert!(keyed(&["inspect", p(&img), "ls", &format!("/{}", NAMES[0])], &key).contains(NAMES[1]));
    let path = format!("/{}/{}", NAMES[0], NAMES[1]);
    assert_eq!(keyed(&["inspect", p(&img), "cat", &path], &key), MARKER);
    let figures = keyed(&["stats", p(&img), "--json"], &key);
    assert!(figures.contains("\"state\": \"clean\""), "{figures}");

    let tuned = keyed(&["tune", p(&img), "-L", "secret-label", "-o", "noatime,allow_discards"], &key);
    assert!(tuned.contains("label: secret-label") && tuned.contains("noatime,allow_discards"), "{tuned}");
    assert!(keyed(&["tune", p(&img)], &key).contains("secret-label"));
    assert!(found_in(&img, &["secret-label"]).is_empty(), "the label is encrypted too");

    // The file system is the image less its 1 MiB of headers.
    let grown = keyed(&["resize", p(&img), "160M"], &key);
    assert!(grown.contains("grown from 63.0 MiB to 160.0 MiB"), "{grown}");
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 161 << 20, "lengthened past the header");
    let o = run(&["fsck", p(&img), "--key-file", p(&key)]);
    assert_eq!(o.status.code(), Some(0), "fsck after the grow: {}{}", stdout(&o), stderr(&o));

    // The image's default options hold on an encrypted mount: noatime, and
    // allow_discards lets fstrim through.
    let pid = mount(&img, &mp, &["--key-file", p(&key)]);
    let opts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = opts.lines().find(|l| l.contains(p(&mp))).unwrap_or_default().to_string();
    assert!(line.contains("noatime"), "the default noatime was applied: {line}");
    let o = std::process::Command::new("fstrim").arg("-v").arg(&mp).output().unwrap();
    assert!(o.status.success(), "fstrim with allow_discards: {}", stderr(&o));
    unmount(&mp, pid);

    // A key for a plain image is an error, whatever the command.
    let plain = dir.path().join("plain.img");
    mkfs(&plain, "32M");
    for args in [&["inspect", p(&plain), "super"][..], &["stats", p(&plain)], &["tune", p(&plain)]] {
        let o = run(&[args, &["--key-file", p(&key)]].concat());
        assert!(!o.status.success() && stderr(&o).contains("not an encrypted image: it needs no key"), "{args:?}");
    }
}

#[test]
fn discards_on_an_encrypted_image_need_allow_discards() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mp, key) = (dir.path().join("enc.img"), dir.path().join("mnt"), dir.path().join("key"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(&key, b"discard key").unwrap();
    let o = run(&["mkfs", p(&img), "--size", "64M", "--encrypt", "--key-file", p(&key), "--quiet"]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    let allocated = || {
        let o = std::process::Command::new("du").args(["-B1", p(&img)]).output().unwrap();
        stdout(&o).split_whitespace().next().unwrap().parse::<u64>().unwrap()
    };

    // -o discard alone: the mount goes on, says discards are off, and
    // freeing a file punches no hole; fstrim is refused.
    let o = run(&["mount", p(&img), p(&mp), "--key-file", p(&key), "-o", "discard"]);
    assert!(o.status.success(), "mount: {}", stderr(&o));
    assert!(
        stderr(&o).contains("-o discard is off: an encrypted image's free space is not discarded"),
        "{}",
        stderr(&o)
    );
    let _g = Guard(mp.clone());
    let pid = daemon_pid(&mp);
    write_synced(&mp.join("big"), &patterned(16 << 20));
    let full = allocated();
    std::fs::remove_file(mp.join("big")).unwrap();
    sh(&format!("sync -f {}", p(&mp)));
    let o = std::process::Command::new("fstrim").arg(&mp).output().unwrap();
    assert!(!o.status.success(), "fstrim without allow_discards");
    assert!(stderr(&o).contains("not supported"), "{}", stderr(&o));
    unmount(&mp, pid);
    assert!(allocated() >= full, "no hole was punched: {} < {full}", allocated());

    let before = std::fs::read(&img).unwrap();
    let o = run(&["trim", p(&img), "--key-file", p(&key)]);
    assert!(!o.status.success() && stderr(&o).contains("--allow-discards"), "{}", stderr(&o));
    assert!(std::fs::read(&img).unwrap() == before, "a refused trim wrote nothing");
    let o = run(&["trim", p(&img), "--key-file", p(&key), "--allow-discards"]);
    assert!(o.status.success(), "trim: {}", stderr(&o));
    assert!(allocated() + (8 << 20) < full, "--allow-discards punched the free space: {} vs {full}", allocated());
    let o = run(&["fsck", p(&img), "--key-file", p(&key)]);
    assert_eq!(o.status.code(), Some(0), "fsck: {}{}", stdout(&o), stderr(&o));
}

/// Runs `command` (cairn's binary and `args`) on a pseudo-terminal
/// (`script`), typing `typed` at it: a user at a terminal.
fn at_terminal(args: &[&str], typed: &str) -> std::process::Output {
    let line: Vec<String> =
        std::iter::once(env!("CARGO_BIN_EXE_cairn")).chain(args.iter().copied()).map(str::to_string).collect();
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line.join(" "), "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script(1)");
    child.stdin.take().unwrap().write_all(typed.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_terminal_is_asked_for_the_passphrase() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mp, other) = (dir.path().join("enc.img"), dir.path().join("mnt"), dir.path().join("other.img"));
    std::fs::create_dir(&mp).unwrap();
    let o = at_terminal(&["mkfs", p(&img), "--size", "64M", "--encrypt", "--quiet"], "typed pass\ntyped pass\n");
    assert!(o.status.success(), "mkfs: {}", stdout(&o));
    assert!(stdout(&o).contains("The same passphrase again: "), "asked twice: {}", stdout(&o));
    assert!(stdout(&run(&["key", "list", p(&img)])).contains("slot 0: passphrase"));
    let o = at_terminal(&["mkfs", p(&other), "--size", "64M", "--encrypt"], "one\ntwo\n");
    assert!(!o.status.success() && stdout(&o).contains("the two passphrases differ"), "{}", stdout(&o));
    assert!(!other.exists(), "nothing was made");

    // A background mount asks, and its daemon opens the image with it.
    let o = at_terminal(&["mount", p(&img), p(&mp)], "typed pass\n");
    assert!(o.status.success(), "mount: {}", stdout(&o));
    assert!(stdout(&o).contains(&format!("Passphrase for {}: ", p(&img))), "{}", stdout(&o));
    let _g = Guard(mp.clone());
    let pid = daemon_pid(&mp);
    std::fs::write(mp.join(NAMES[1]), MARKER).unwrap();
    unmount(&mp, pid);
    let o = at_terminal(&["fsck", p(&img)], "typed pass\n");
    assert_eq!(o.status.code(), Some(0), "fsck: {}", stdout(&o));
    let o = at_terminal(&["inspect", p(&img), "cat", &format!("/{}", NAMES[1])], "typed pass\n");
    assert!(o.status.success() && stdout(&o).ends_with(MARKER), "inspect: {}", stdout(&o));
    let o = at_terminal(&["fsck", p(&img)], "mistyped\n");
    assert_eq!(o.status.code(), Some(8), "a wrong passphrase: {}", stdout(&o));
    assert!(stdout(&o).contains("wrong passphrase or key file"), "{}", stdout(&o));
}

fn sha256(path: &Path) -> String {
    let o = std::process::Command::new("sha256sum").arg(path).output().unwrap();
    assert!(o.status.success());
    stdout(&o).split_whitespace().next().unwrap().to_string()
}

/// Issue 54's "done when", through the CLI: made, mounted with a key file
/// and with `-o keyfile=` through the fstab helper (as `mount -a` runs it), used, fsck'd, grown
/// while mounted (key changes refused while mounted), re-keyed; the old key then opens nothing and changes
/// nothing; the image holds none of the plaintext.
#[test]
fn an_encrypted_image_lives_its_life_through_the_cli() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mp) = (dir.path().join("enc.img"), dir.path().join("mnt"));
    let (old_key, new_key) = (dir.path().join("old.key"), dir.path().join("new.key"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(&old_key, b"the first key file").unwrap();
    std::fs::write(&new_key, b"the key file after the change").unwrap();
    let o = run(&["mkfs", p(&img), "--size", "96M", "--encrypt", "--key-file", p(&old_key), "--quiet"]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));

    let pid = mount(&img, &mp, &["--key-file", p(&old_key)]);
    let _g = Guard(mp.clone());
    write_tree(&mp);
    unmount(&mp, pid);
    assert_eq!(run(&["fsck", p(&img), "--key-file", p(&old_key)]).status.code(), Some(0));

    // As `mount -a` mounts an fstab line `IMG MP fuse.cairn keyfile=KEY,noatime`: mount(8)
    // runs the helper with the line's options.
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mount.fuse.cairn");
    let o = std::process::Command::new("sh")
        .arg(&helper)
        .args([p(&img), p(&mp), "-o", &format!("keyfile={},noatime", p(&old_key))])
        .env("CAIRN", env!("CARGO_BIN_EXE_cairn"))
        .output()
        .unwrap();
    assert!(o.status.success(), "mount.fuse.cairn: {}", stderr(&o));
    let pid = daemon_pid(&mp);
    check_tree(&mp);
    // Key slots change only offline: the mount holds the image's lock, and the header
    // region is left as it was (docs/encryption.md).
    let header = header_region(&img);
    for args in [
        &["key", "add", p(&img), "--key-file", p(&old_key), "--new-key-file", p(&new_key)][..],
        &["key", "change", p(&img), "--key-file", p(&old_key), "--new-key-file", p(&new_key)],
    ] {
        let o = run(args);
        assert!(
            !o.status.success() && stderr(&o).contains("unmount it first"),
            "{args:?} while mounted: {}",
            stderr(&o)
        );
    }
    assert!(header_region(&img) == header, "a refused key change wrote the header");
    let size = |mp: &Path| nix_statvfs_bytes(mp);
    let before = size(&mp);
    let o = run(&["resize", p(&mp), "300M"]);
    assert!(o.status.success(), "online grow: {}", stderr(&o));
    assert!(stdout(&o).contains("while mounted"), "{}", stdout(&o));
    assert!(size(&mp) > before + (150 << 20), "the mount grew: {before} -> {}", size(&mp));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), (300 << 20) + (1 << 20), "the image file grew past its header");
    // More than the old size holds: the new groups are used.
    let big = patterned(120 << 20);
    write_synced(&mp.join("past-the-old-end"), &big);
    unmount(&mp, pid);
    let o = run(&["fsck", p(&img), "--key-file", p(&old_key)]);
    assert_eq!(o.status.code(), Some(0), "fsck after the online grow: {}{}", stdout(&o), stderr(&o));

    let o = run(&["key", "change", p(&img), "--key-file", p(&old_key), "--new-key-file", p(&new_key)]);
    assert!(o.status.success(), "key change: {}", stderr(&o));
    let hash = sha256(&img);
    for args in [
        &["mount", p(&img), p(&mp), "--key-file", p(&old_key)][..],
        &["fsck", p(&img), "-y", "--key-file", p(&old_key)],
        &["resize", p(&img), "400M", "--key-file", p(&old_key)],
        &["tune", p(&img), "-L", "x", "--key-file", p(&old_key)],
    ] {
        let o = run(args);
        assert!(!o.status.success() && stderr(&o).contains("wrong passphrase or key file"), "{args:?}: {}", stderr(&o));
    }
    assert!(!is_mounted(&mp));
    assert_eq!(sha256(&img), hash, "the old key changed the image");

    let pid = mount(&img, &mp, &["--key-file", p(&new_key)]);
    check_tree(&mp);
    assert!(std::fs::read(mp.join("past-the-old-end")).unwrap() == big, "the file in the grown space reads back");
    unmount(&mp, pid);
    assert_eq!(run(&["fsck", p(&img), "--key-file", p(&new_key)]).status.code(), Some(0));

    let needles = [MARKER, NAMES[0], NAMES[1], NAMES[2], "past-the-old-end", "lost+found"];
    assert_eq!(found_in(&img, &needles), Vec::<String>::new(), "the image shows plaintext");
}

/// The first MiB of an encrypted image: both header copies.
fn header_region(img: &Path) -> Vec<u8> {
    let mut b = vec![0u8; 1 << 20];
    std::io::Read::read_exact(&mut std::fs::File::open(img).unwrap(), &mut b).unwrap();
    b
}

/// The bytes of the file system mounted at `mp` (statvfs).
fn nix_statvfs_bytes(mp: &Path) -> u64 {
    let o = std::process::Command::new("stat").args(["-f", "-c", "%b %S", p(mp)]).output().unwrap();
    let text = stdout(&o);
    let mut it = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    it.next().unwrap() * it.next().unwrap()
}
