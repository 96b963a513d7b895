//! `cairn inspect IMAGE WHAT`: look inside an unmounted image, as debugfs,
//! xfs_db and logdump do, without changing a byte of it.
//!
//! * `super` — every superblock field, features by name;
//! * `groups` — per group: where its bitmaps and inode table are, free
//!   blocks and inodes, flags (descriptors verified as the engine does);
//! * `stat FILE`, `ls [DIR]`, `cat FILE` — an inode, a directory, a file's
//!   bytes. FILE is a path from the root (`/a/b`) or an inode number
//!   (`#12` or `12`). These read through the engine, mounted read-only in
//!   this process (no FUSE): an image whose journal still holds records to
//!   replay is refused (mount it once, or `cairn fsck --repair`);
//! * `journal` — the journal superblock and each record from the tail, as
//!   replay would walk them (`cairn_format::journal::read_record`): sequence
//!   number, ring position, length, blocks it changes; then why the log
//!   ends there.
//!
//! The image's exclusive lock is taken, so a mounted image is refused (a
//! mount's figures are in `cairn stats MOUNTPOINT`). An encrypted image is
//! read through its decrypting device, given its key (`crate::unlock`).

use crate::unlock::KeyArgs;
use cairn_core::dev::BlockDevice;
use cairn_core::{Fs, MountOptions};
use cairn_format::group_desc::{gd_loc, GroupDesc, GD_BLOCK_UNINIT, GD_INODE_UNINIT, GD_SIZE};
use cairn_format::journal::{read_record, JournalRegion, JournalSuper, LogPos, Walk};
use cairn_format::layout::Geometry;
use cairn_format::superblock::*;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// What to show.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum What {
    /// Every superblock field.
    Super,
    /// Group descriptors: bitmaps, inode table, free counts, flags.
    Groups,
    /// One inode: FILE is /path or an inode number (#12 or 12).
    Stat { file: String },
    /// A directory's entries (default /): inode, type, name.
    Ls { dir: Option<String> },
    /// A file's bytes to standard output.
    Cat { file: String },
    /// The journal: its superblock, each record from the tail, where the log ends.
    Journal,
}

struct Image {
    dev: Arc<dyn BlockDevice>,
    sb: Superblock,
    geo: Geometry,
}

impl Image {
    fn open(path: &Path, keys: &KeyArgs) -> Result<Image, String> {
        let shown = path.display();
        let in_use = "(mounted or being checked); `cairn stats MOUNTPOINT` shows a mount";
        let dev = crate::unlock::open_image(path, true, keys, Some(in_use))?;
        let sb = cairn_core::dev::read_superblock(dev.as_ref()).map_err(|e| format!("{shown}: {e}"))?;
        let geo = Geometry::new(&sb).map_err(|e| format!("{shown}: {e}"))?;
        Ok(Image { dev, sb, geo })
    }

    fn block(&self, b: u64) -> std::io::Result<Vec<u8>> {
        let bs = self.sb.block_size() as usize;
        let mut v = vec![0u8; bs];
        self.dev.read_at(&mut v, b * bs as u64)?;
        Ok(v)
    }
}

/// Runs `cairn inspect IMAGE WHAT`, writing to `out`.
pub fn run(image: &Path, what: &What, keys: &KeyArgs, out: &mut dyn Write) -> Result<(), String> {
    let img = Image::open(image, keys)?;
    let w = |r: std::io::Result<()>| r.map_err(|e| format!("writing the output: {e}"));
    match what {
        What::Super => w(print_super(&img.sb, out)),
        What::Groups => print_groups(&img, out),
        What::Journal => print_journal(&img, out),
        What::Stat { file } | What::Cat { file } => {
            let fs = engine(&img, image)?;
            let ino = resolve(&fs, file)?;
            let r = if let What::Stat { .. } = what { print_stat(&fs, &img, ino, out) } else { cat(&fs, ino, out) };
            let _ = fs.unmount();
            r
        }
        What::Ls { dir } => {
            let fs = engine(&img, image)?;
            let ino = resolve(&fs, dir.as_deref().unwrap_or("/"))?;
            let r = ls(&fs, ino, out);
            let _ = fs.unmount();
            r
        }
    }
}

fn print_super(sb: &Superblock, out: &mut dyn Write) -> std::io::Result<()> {
    let names = |bits: u32, known: &[(u32, &str)]| {
        let mut v: Vec<String> = known.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| n.to_string()).collect();
        let rest = bits & !known.iter().fold(0, |a, (b, _)| a | b);
        if rest != 0 {
            v.push(format!("{rest:#x}"));
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(" ")
        }
    };
    let incompat = [
        (INCOMPAT_XATTR_EXTERNAL, "xattr_external"),
        (INCOMPAT_JOURNAL_GROUPS, "journal_groups"),
        (INCOMPAT_JOURNAL_ZSTD, "journal_zstd"),
        (INCOMPAT_BACKUP_SUPERBLOCKS, "backup_superblocks"),
        (INCOMPAT_CSUM_SEED, "csum_seed"),
    ];
    let state = names(sb.state, &[(STATE_CLEAN, "clean"), (STATE_ERRORS, "errors")]);
    writeln!(out, "version              {}", sb.version)?;
    writeln!(out, "label                {}", cairn_core::tune::label_text(sb))?;
    writeln!(out, "uuid                 {}", cairn_core::tune::format_uuid(&sb.uuid))?;
    writeln!(out, "state                {state}")?;
    writeln!(out, "features incompat    {}", names(sb.feature_incompat, &incompat))?;
    writeln!(out, "features compat      {}", names(sb.feature_compat, &[(COMPAT_ITABLES_ZEROED, "itables_zeroed")]))?;
    writeln!(out, "features ro_compat   {}", names(sb.feature_ro_compat, &[]))?;
    writeln!(out, "block size           {}", sb.block_size())?;
    writeln!(out, "blocks               {} ({} free)", sb.total_blocks, sb.free_blocks)?;
    writeln!(out, "inodes               {} ({} free)", sb.total_inodes(), sb.free_inodes)?;
    writeln!(
        out,
        "groups               {} of {} blocks, {} inodes",
        sb.group_count, sb.blocks_per_group, sb.inodes_per_group
    )?;
    writeln!(out, "group descriptors    blocks {}..{}", sb.gdt_start, sb.gdt_start + sb.gdt_blocks)?;
    writeln!(
        out,
        "journal              blocks {}, {} long, continuing into {} group(s)",
        sb.journal_start, sb.journal_blocks, sb.journal_groups
    )?;
    writeln!(out, "orphan list root     {}", sb.orphan_root)?;
    writeln!(out, "next inode hint      {}", sb.next_ino)?;
    writeln!(out, "checksum seed        {:#010x}", sb.csum_seed())?;
    writeln!(
        out,
        "errors default       {}",
        cairn_core::tune::errors_text(sb.default_errors).unwrap_or("unset (remount-ro)")
    )?;
    writeln!(out, "mount options        {}", sb.mount_opts_text())?;
    writeln!(out, "mount count          {}", sb.mount_count)?;
    for (what, t) in
        [("made", sb.mkfs_time), ("last mounted", sb.last_mount_time), ("last written", sb.last_write_time)]
    {
        writeln!(out, "{what:<20} {}", time_text(t))?;
    }
    Ok(())
}

fn time_text(secs: u64) -> String {
    if secs == 0 {
        return "never".into();
    }
    let o = std::process::Command::new("date").args(["-u", "-d", &format!("@{secs}"), "+%F %T UTC"]).output();
    match o {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => format!("{secs} s after the epoch"),
    }
}

fn print_groups(img: &Image, out: &mut dyn Write) -> Result<(), String> {
    let seed = img.sb.csum_seed();
    let w = |r: std::io::Result<()>| r.map_err(|e| format!("writing the output: {e}"));
    w(writeln!(out, "group  start        block-bitmap inode-bitmap inode-table  free-blocks free-inodes dirs  flags"))?;
    let mut cached: Option<(u64, Vec<u8>)> = None;
    for g in 0..img.sb.group_count {
        let (blk, off) = gd_loc(img.sb.gdt_start, img.sb.block_size(), g);
        if cached.as_ref().is_none_or(|(b, _)| *b != blk) {
            cached = Some((blk, img.block(blk).map_err(|e| format!("reading block {blk}: {e}"))?));
        }
        let buf = &cached.as_ref().expect("just read").1[off..off + GD_SIZE];
        let line = match GroupDesc::decode(seed, g, buf) {
            Ok(d) => {
                let mut flags = Vec::new();
                if d.flags & GD_BLOCK_UNINIT != 0 {
                    flags.push("block_uninit");
                }
                if d.flags & GD_INODE_UNINIT != 0 {
                    flags.push("inode_uninit");
                }
                if img.geo.has_backup_superblock(g) && g > 0 {
                    flags.push("backup_sb");
                }
                if img.geo.is_journal_group(g) {
                    flags.push("journal");
                }
                format!(
                    "{g:<6} {:<12} {:<12} {:<12} {:<12} {:<11} {:<11} {:<5} {}",
                    img.geo.group_start(g),
                    d.block_bitmap,
                    d.inode_bitmap,
                    d.inode_table,
                    d.free_blocks,
                    d.free_inodes,
                    d.used_dirs,
                    flags.join(",")
                )
            }
            Err(e) => format!("{g:<6} {:<12} DAMAGED: {e}", img.geo.group_start(g)),
        };
        w(writeln!(out, "{line}"))?;
    }
    Ok(())
}

fn print_journal(img: &Image, out: &mut dyn Write) -> Result<(), String> {
    let w = |r: std::io::Result<()>| r.map_err(|e| format!("writing the output: {e}"));
    let seed = img.sb.csum_seed();
    let region = JournalRegion::of(&img.sb);
    let jb = img.block(region.start).map_err(|e| format!("reading the journal superblock: {e}"))?;
    let jsb = JournalSuper::decode(seed, region.start, &jb, region.blocks)
        .map_err(|e| format!("the journal superblock at block {} is damaged: {e}", region.start))?;
    w(writeln!(
        out,
        "journal: blocks {}, {} long (ring positions 1..{}); tail: sequence {} at position {}",
        region.start,
        region.blocks,
        region.blocks.saturating_sub(1),
        jsb.tail_seq,
        jsb.tail_off
    ))?;
    let mut pos = LogPos { seq: jsb.tail_seq, off: jsb.tail_off };
    let mut n = 0u64;
    loop {
        let walk = read_record(seed, &region, pos, |off| img.block(region.block_of(off)))
            .map_err(|e| format!("reading the journal: {e}"))?;
        match walk {
            Walk::Record(rec) if n < region.blocks => {
                let len = cairn_format::journal::ring_used(region.blocks, pos.off, rec.next.off);
                let mut homes: Vec<u64> = rec.patches.iter().map(|p| p.home).collect();
                homes.sort_unstable();
                homes.dedup();
                let shown: Vec<String> = homes.iter().take(8).map(u64::to_string).collect();
                let more = if homes.len() > 8 { format!(" and {} more", homes.len() - 8) } else { String::new() };
                w(writeln!(
                    out,
                    "record {}: position {}, {} ring blocks, {} changes to {} blocks: {}{more}",
                    pos.seq,
                    pos.off,
                    len,
                    rec.patches.len(),
                    homes.len(),
                    shown.join(" ")
                ))?;
                n += 1;
                pos = rec.next;
            }
            Walk::Record(_) => {
                w(writeln!(out, "the log is longer than the ring: damaged"))?;
                break;
            }
            Walk::End(why) => {
                w(writeln!(out, "end of the log at sequence {}, position {}: {why:?}", pos.seq, pos.off))?;
                break;
            }
        }
    }
    let state = if n == 0 { "nothing to replay" } else { "committed, not yet applied: the next mount replays them" };
    w(writeln!(out, "{n} record(s) {state}"))
}

fn engine(img: &Image, path: &Path) -> Result<Arc<Fs>, String> {
    let opts = MountOptions { read_only: true, ..MountOptions::default() };
    Fs::mount(img.dev.clone(), opts).map_err(|e| {
        format!(
            "{}: cannot read its files: {e} (`cairn inspect {} journal` lists the records; mount it once or run `cairn fsck --repair` to apply them)",
            path.display(),
            path.display()
        )
    })
}

/// FILE as an inode number: `#N`, `N`, or a path from the root.
fn resolve(fs: &Fs, file: &str) -> Result<u64, String> {
    let num = file.strip_prefix('#').unwrap_or(file);
    if let Ok(n) = num.parse::<u64>() {
        // Asked of the inode bitmap first: a free slot holds no inode (its
        // bytes need not even verify) and is no corruption.
        let reserved = (2..cairn_format::FIRST_INO).contains(&n);
        if reserved || !fs.inodes().inode_in_use(n).map_err(|e| format!("inode {n}: {e}"))? {
            let why = if reserved {
                format!(" (inodes 2 to {} are reserved)", cairn_format::FIRST_INO - 1)
            } else if n == 0 || n > fs.statfs().map_or(u64::MAX, |s| s.files) {
                " (out of range)".to_string()
            } else {
                String::new()
            };
            return Err(format!("inode {n}: not in use{why}"));
        }
        return fs.inodes().getattr(n).map(|a| a.ino).map_err(|e| format!("inode {n}: {e}"));
    }
    if !file.starts_with('/') {
        return Err(format!("{file:?}: give a path from the root (/a/b) or an inode number (#12)"));
    }
    let mut ino = cairn_format::ROOT_INO;
    for part in file.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes()).map_err(|e| format!("{file}: {part}: {e}"))?.ino;
    }
    Ok(ino)
}

fn print_stat(fs: &Fs, img: &Image, ino: u64, out: &mut dyn Write) -> Result<(), String> {
    let a = fs.inodes().getattr(ino).map_err(|e| format!("inode {ino}: {e}"))?;
    let (blk, off) = img.geo.inode_location(ino);
    let raw = img.block(blk).map_err(|e| format!("reading block {blk}: {e}"))?;
    let d = cairn_format::inode::DiskInode::decode(
        img.sb.csum_seed(),
        ino,
        &raw[off..off + cairn_format::inode::INODE_SIZE],
    )
    .map_err(|e| format!("inode {ino} on disk: {e}"))?;
    let t = |t: cairn_format::inode::Timestamp| format!("{}.{:09}", t.sec, t.nsec);
    let mut s = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(s, "inode {ino} (block {blk}, byte {off}), generation {}", a.generation);
    let _ = writeln!(s, "mode {:o}  links {}  uid {}  gid {}  rdev {}", a.mode, a.nlink, a.uid, a.gid, a.rdev);
    let _ = writeln!(s, "size {}  blocks {} (512-byte units)  flags {:#x}", a.size, a.blocks, d.flags);
    let _ = writeln!(s, "atime {}  mtime {}  ctime {}  born {}", t(a.atime), t(a.mtime), t(a.ctime), t(a.crtime));
    if d.xattr_block != 0 {
        let _ = writeln!(s, "xattr block {}", d.xattr_block);
    }
    if d.is_dir() {
        let _ = writeln!(s, "parent {}  entries {}", d.parent, d.entries);
    }
    match &d.data {
        cairn_format::inode::DataArea::Extents(v) => {
            let _ = writeln!(s, "extents (inline): {}", v.len());
            for e in v {
                let u = if e.unwritten { " unwritten" } else { "" };
                let _ = writeln!(s, "  file block {} -> disk block {}, {} blocks{u}", e.lblk, e.pblk, e.len);
            }
        }
        cairn_format::inode::DataArea::Tree(root) => {
            let _ = writeln!(s, "B+tree root block {root}");
        }
        cairn_format::inode::DataArea::Inline(b) => {
            let _ = writeln!(s, "inline symlink target {:?}", String::from_utf8_lossy(b));
        }
    }
    out.write_all(s.as_bytes()).map_err(|e| format!("writing the output: {e}"))
}

fn ls(fs: &Fs, ino: u64, out: &mut dyn Write) -> Result<(), String> {
    let mut entries = Vec::new();
    fs.readdir(ino, 0, &mut |e| {
        entries.push((e.ino, e.dtype, e.name.clone()));
        true
    })
    .map_err(|e| format!("inode {ino}: {e}"))?;
    let mut s = String::new();
    for (i, t, name) in entries {
        let kind = match t {
            4 => "dir",
            8 => "file",
            10 => "symlink",
            2 => "chardev",
            6 => "blockdev",
            1 => "fifo",
            12 => "socket",
            _ => "?",
        };
        s.push_str(&format!("{i:<10} {kind:<8} {}\n", String::from_utf8_lossy(&name)));
    }
    out.write_all(s.as_bytes()).map_err(|e| format!("writing the output: {e}"))
}

fn cat(fs: &Fs, ino: u64, out: &mut dyn Write) -> Result<(), String> {
    let a = fs.inodes().getattr(ino).map_err(|e| format!("inode {ino}: {e}"))?;
    if a.mode & libc::S_IFMT == libc::S_IFDIR {
        return Err(format!("inode {ino} is a directory: use `ls`"));
    }
    let mut off = 0u64;
    while off < a.size {
        let n = (a.size - off).min(1 << 20) as u32;
        let buf = fs.files().read(ino, off, n).map_err(|e| format!("inode {ino} at byte {off}: {e}"))?;
        if buf.is_empty() {
            break;
        }
        out.write_all(&buf).map_err(|e| format!("writing the output: {e}"))?;
        off += buf.len() as u64;
    }
    Ok(())
}
