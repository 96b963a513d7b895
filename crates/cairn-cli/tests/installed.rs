//! The `cairn` command as installed (issue 51, item 12): `cairn bench`
//! away from a source tree, the man pages' tagline and SYNOPSIS, and
//! `cairn resize` to the size a file system has already, what `-o fsname=`
//! says of root's fuseblk mounts.

mod common;

use common::*;
use std::process::Command;

/// A copy of the binary outside any source tree, as `/usr/bin/cairn`.
fn installed_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("cairn");
    std::fs::copy(env!("CARGO_BIN_EXE_cairn"), &bin).unwrap();
    (dir, bin)
}

#[test]
fn bench_help_works_without_a_source_tree_and_says_what_bench_needs() {
    let (_dir, bin) = installed_copy();
    let run = |args: &[&str]| Command::new(&bin).args(args).env_remove("CAIRN_BENCH").output().unwrap();
    for help in ["--help", "-h"] {
        let o = run(&["bench", help]);
        assert!(o.status.success(), "bench {help}: {}", stderr(&o));
        assert!(stdout(&o).contains("Usage: cairn bench"), "bench {help}: {}", stdout(&o));
    }
    let o = run(&["bench", "--quick"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("needs a source checkout") && e.contains("CAIRN_BENCH"), "{e}");
}

#[test]
fn man_pages_describe_cairn_and_show_option_values_in_the_synopsis() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["manpages", p(dir.path())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = |name: &str| std::fs::read_to_string(dir.path().join(format!("{name}.1"))).unwrap();
    let synopsis = |name: &str| {
        let t = page(name);
        t.split(".SH SYNOPSIS\n").nth(1).unwrap().lines().next().unwrap().to_string()
    };
    let name_line = page("cairn").lines().find(|l| l.starts_with("cairn \\-")).unwrap().to_string();
    assert!(name_line.contains("journaling file system"), "{name_line}");
    assert!(!name_line.contains("mkfs, mount"), "a partial command list: {name_line}");
    let mount = synopsis("cairn-mount");
    assert!(mount.contains("[\\fB\\-o\\fR \\fIOPTIONS\\fR]"), "{mount}");
    let tune = synopsis("cairn-tune");
    assert!(tune.contains("\\fB\\-\\-mount\\-options\\fR \\fIOPTIONS\\fR]"), "{tune}");
    let fsck = synopsis("cairn-fsck");
    assert!(fsck.contains("[\\fB\\-n\\fR]") && fsck.contains("\\fB\\-b\\fR \\fIN\\fR]"), "{fsck}");
    for name in ["cairn-mount", "cairn-tune", "cairn-fsck", "cairn-mkfs", "cairn-umount"] {
        assert!(!synopsis(name).contains(" \\fR]"), "{name}: an option without its value: {}", synopsis(name));
    }
    let o = run(&["tune", "--help"]);
    assert!(stdout(&o).contains("--mount-options <OPTIONS>"), "{}", stdout(&o));
}

#[test]
fn resize_to_the_current_size_has_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("r.img");
    mkfs(&img, "64M");
    for size in ["64M", "67108864"] {
        let o = run(&["resize", p(&img), size]);
        assert_eq!(o.status.code(), Some(0), "resize to {size}: {}", stderr(&o));
        assert!(stdout(&o).contains("already 64.0 MiB; nothing to do"), "{}", stdout(&o));
    }
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 << 20);
    let o = run(&["resize", p(&img), "32M"]);
    assert_eq!(o.status.code(), Some(1), "a shrink: {}", stdout(&o));
    assert!(stderr(&o).contains("only grows"), "{}", stderr(&o));
    assert_fsck_clean(&img, "after resizes that did nothing");
}

/// `df` shows /dev/loopN for root's fuseblk mounts whatever fsname= says:
/// `cairn mount --help` says so rather than "defaults to the image".
#[test]
fn mount_help_says_what_df_shows_for_fuseblk_mounts() {
    let o = run(&["mount", "--help"]);
    let help = stdout(&o);
    let line = help.lines().skip_while(|l| !l.contains("fsname=")).take(3).collect::<Vec<_>>().join(" ");
    assert!(line.contains("/dev/loopN") && line.contains("ignores fsname="), "{line}");
}
