//! Helpers: build and populate images with the engine, run fsck on them.

#![allow(dead_code)]

use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Ctx, Fs, MountOptions, FALLOC_FL_KEEP_SIZE};
use cairn_format::inode::{S_IFCHR, S_IFIFO, S_IFREG};
use cairn_format::layout::Geometry;
use cairn_format::superblock::Superblock;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const ROOT: u64 = 1;

/// Small groups, so that images have several of them.
pub fn small_groups() -> MkfsOptions {
    MkfsOptions { blocks_per_group: Some(2048), journal_blocks: Some(512), bytes_per_inode: 4096, ..Default::default() }
}

/// A formatted in-memory image.
pub fn new_image(mib: u64, opts: &MkfsOptions) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(mib << 20));
    format(dev.as_ref(), opts, &mut |_, _| {}).expect("mkfs");
    dev
}

/// Mounts with a commit interval long enough that the backend never commits on its own.
pub fn mount(dev: Arc<dyn BlockDevice>) -> Arc<Fs> {
    Fs::mount(dev, MountOptions { commit_interval: Duration::from_secs(3600), ..Default::default() }).expect("mount")
}

/// Fills a file system with every kind of object; returns name -> inode.
pub fn populate(fs: &Fs) -> HashMap<&'static str, u64> {
    let c = Ctx::root();
    let mut m = HashMap::new();
    let a = fs.names().mkdir(&c, ROOT, b"a", 0o755).unwrap().ino;
    let b = fs.names().mkdir(&c, a, b"b", 0o755).unwrap().ino;
    let cdir = fs.names().mkdir(&c, b, b"c", 0o700).unwrap().ino;
    m.insert("a", a);
    m.insert("b", b);
    m.insert("c", cdir);
    let f1 = fs.names().mknod(&c, a, b"f1", S_IFREG | 0o644, 0).unwrap().ino;
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 13 % 251) as u8).collect();
    fs.files().write(f1, 0, &data).unwrap();
    m.insert("f1", f1);
    fs.names().link(f1, b, b"f1link").unwrap();
    fs.names().link(f1, ROOT, b"f1root").unwrap();
    let big = fs.names().mknod(&c, ROOT, b"big", S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(big, 0, &vec![7u8; 1 << 20]).unwrap();
    m.insert("big", big);
    // Many extents: every other block, so nothing merges (an extent tree).
    let frag = fs.names().mknod(&c, ROOT, b"frag", S_IFREG | 0o644, 0).unwrap().ino;
    for i in 0..80u64 {
        fs.files().write(frag, i * 2 * 4096, &[i as u8 + 1; 100]).unwrap();
    }
    fs.files().fallocate(frag, 400 * 4096, 8 * 4096, FALLOC_FL_KEEP_SIZE).unwrap();
    m.insert("frag", frag);
    let s = fs.names().symlink(&c, ROOT, b"short", b"a/f1").unwrap().ino;
    m.insert("short", s);
    let long = vec![b'y'; 3000];
    let l = fs.names().symlink(&c, a, b"long", &long).unwrap().ino;
    m.insert("long", l);
    fs.setxattr(f1, b"user.colour", b"blue", 0).unwrap();
    fs.setxattr(f1, b"security.label", &[9u8; 200], 0).unwrap();
    fs.setxattr(a, b"user.dir", b"yes", 0).unwrap();
    m.insert("fifo", fs.names().mknod(&c, b, b"fifo", S_IFIFO | 0o600, 0).unwrap().ino);
    m.insert("chr", fs.names().mknod(&c, b, b"tty", S_IFCHR | 0o600, 0x0501).unwrap().ino);
    // A large directory: forces leaf and internal node splits.
    let many = fs.names().mkdir(&c, ROOT, b"many", 0o755).unwrap().ino;
    for i in 0..3000u32 {
        let name = format!("entry-with-a-longish-name-{i:05}");
        fs.names().mknod(&c, many, name.as_bytes(), S_IFREG | 0o644, 0).unwrap();
    }
    for i in (0..3000u32).step_by(3) {
        let name = format!("entry-with-a-longish-name-{i:05}");
        fs.names().unlink(many, name.as_bytes()).unwrap();
    }
    m.insert("many", many);
    // Renames, removals.
    let tmpd = fs.names().mkdir(&c, ROOT, b"gone", 0o755).unwrap().ino;
    fs.names().mknod(&c, tmpd, b"x", S_IFREG | 0o644, 0).unwrap();
    fs.names().rename(tmpd, b"x", a, b"moved", 0).unwrap();
    fs.names().rmdir(ROOT, b"gone").unwrap();
    fs.names().rename(ROOT, b"many", b, b"many2", 0).unwrap();
    // Large xattr values: chains of value blocks owned by the xattr block.
    let xbig = fs.names().mknod(&c, a, b"xbig", S_IFREG | 0o644, 0).unwrap().ino;
    let v: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 253) as u8).collect();
    fs.setxattr(xbig, b"user.big", &v, 0).unwrap();
    fs.setxattr(xbig, b"user.mid", &v[..3000], 0).unwrap();
    m.insert("xbig", xbig);
    m
}

/// Writes `bytes` to a fresh temporary file.
pub fn to_file(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

/// Runs fsck; returns (exit code, output).
pub fn fsck(path: &Path, repair: bool) -> (i32, String) {
    let mut out = Vec::new();
    let code = cairn_fsck::run(path, &cairn_fsck::Options { repair, ..Default::default() }, &mut out);
    (code, String::from_utf8_lossy(&out).into_owned())
}

/// Asserts fsck finds the image clean.
pub fn assert_clean(path: &Path) -> String {
    let (code, out) = fsck(path, false);
    assert_eq!(code, 0, "fsck should find the image clean:\n{out}");
    out
}

/// Superblock, geometry and checksum seed of an image.
pub fn sb_geo(bytes: &[u8]) -> (Superblock, Geometry, u32) {
    let sb = Superblock::decode(&bytes[..4096], bytes.len() as u64).unwrap();
    let geo = Geometry::new(&sb).unwrap();
    let seed = sb.csum_seed();
    (sb, geo, seed)
}

/// A populated, cleanly unmounted image (bytes) and its inode numbers.
pub fn populated_image() -> (Vec<u8>, HashMap<&'static str, u64>) {
    populated_image_of(48, &small_groups())
}

/// A populated, cleanly unmounted image of `mib` MiB made with `opts`.
pub fn populated_image_of(mib: u64, opts: &MkfsOptions) -> (Vec<u8>, HashMap<&'static str, u64>) {
    let dev = new_image(mib, opts);
    let fs = mount(dev.clone());
    let m = populate(&fs);
    fs.unmount().unwrap();
    (dev.snapshot(), m)
}

/// Byte range of inode `ino` in the image.
pub fn inode_range(bytes: &[u8], ino: u64) -> std::ops::Range<usize> {
    let (_, geo, _) = sb_geo(bytes);
    let (blk, off) = geo.inode_location(ino);
    let s = blk as usize * geo.block_size as usize + off;
    s..s + 256
}

/// Decodes inode `ino`.
pub fn read_inode(bytes: &[u8], ino: u64) -> cairn_format::inode::DiskInode {
    let (_, _, seed) = sb_geo(bytes);
    cairn_format::inode::DiskInode::decode(seed, ino, &bytes[inode_range(bytes, ino)]).unwrap()
}

/// Re-encodes inode `ino` after `f` (valid checksum).
pub fn edit_inode(bytes: &mut [u8], ino: u64, f: impl FnOnce(&mut cairn_format::inode::DiskInode)) {
    let (_, _, seed) = sb_geo(bytes);
    let mut d = read_inode(bytes, ino);
    f(&mut d);
    let r = inode_range(bytes, ino);
    d.encode(seed, ino, &mut bytes[r]);
}

/// Changes committed with sync_fs, then the process "dies" (no unmount): the
/// journal must be replayed and the open-unlinked files are orphans.
pub fn unreplayed_image() -> Vec<u8> {
    crashed_with_orphans(new_image(48, &small_groups())).0
}

/// [`unreplayed_image`] of the formatted image `dev`, and its names.
pub fn crashed_with_orphans(dev: Arc<MemDevice>) -> (Vec<u8>, HashMap<&'static str, u64>) {
    let c = Ctx::root();
    let fs = mount(dev.clone());
    let m = populate(&fs);
    let o = fs.names().mknod(&c, ROOT, b"open-then-unlinked", S_IFREG | 0o644, 0).unwrap().ino;
    fs.files().write(o, 0, &[1u8; 50_000]).unwrap();
    fs.setxattr(o, b"user.x", b"y", 0).unwrap();
    fs.names().unlink(ROOT, b"open-then-unlinked").unwrap();
    let t = fs.names().tmpfile(&c, ROOT, 0o600).unwrap().ino;
    fs.files().write(t, 0, b"temporary").unwrap();
    fs.names().mkdir(&c, ROOT, b"open-dir", 0o755).unwrap();
    fs.names().rmdir(ROOT, b"open-dir").unwrap();
    fs.files().sync_fs().unwrap();
    // A commit that finds the log 7/8 full writes every block home
    // and empties the log (`journal::log`), and how full it is depends on how
    // the backend's commits fell. After that, one small change leaves a
    // record to replay: an empty log cannot be 7/8 full again.
    for _ in 0..2 {
        let bytes = dev.snapshot();
        let r = cairn_fsck::check_image(&bytes, &cairn_fsck::Options::default()).expect("fsck");
        if r.journal_records_replayed > 0 {
            drop(fs);
            return (bytes, m);
        }
        fs.files().setattr(&c, ROOT, &cairn_core::SetAttr { mode: Some(0o755), ..Default::default() }).unwrap();
        fs.files().sync_fs().unwrap();
    }
    panic!("the image has no journal record left to replay");
}

/// Every file reachable from the root of a mounted image: path -> crc32c
/// (chained) of its contents (directories and special files: of nothing; symlinks: of
/// the target). Errors are counted, never fatal.
pub fn tree_hashes(bytes: &[u8]) -> Result<(std::collections::BTreeMap<Vec<u8>, u32>, u32), String> {
    use cairn_core::dev::{BlockDevice, MemDevice};
    let dev: std::sync::Arc<dyn BlockDevice> = std::sync::Arc::new(MemDevice::from_bytes(bytes.to_vec()));
    let opts = cairn_core::MountOptions { commit_interval: std::time::Duration::from_secs(3600), ..Default::default() };
    let fs = cairn_core::Fs::mount(dev, opts).map_err(|e| e.to_string())?;
    let (mut out, mut errors) = (std::collections::BTreeMap::new(), 0u32);
    let mut queue = vec![(1u64, b"".to_vec())];
    while let Some((dir, path)) = queue.pop() {
        let mut ents = Vec::new();
        if fs
            .readdir(dir, 0, &mut |e| {
                ents.push(e.clone());
                true
            })
            .is_err()
        {
            errors += 1;
            continue;
        }
        for e in ents {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let mut p = path.clone();
            p.push(b'/');
            p.extend_from_slice(&e.name);
            let Ok(a) = fs.inodes().getattr(e.ino) else {
                errors += 1;
                continue;
            };
            let mut crc = 0u32;
            match a.mode & cairn_format::inode::S_IFMT {
                cairn_format::inode::S_IFDIR => queue.push((e.ino, p.clone())),
                cairn_format::inode::S_IFREG => {
                    // At most 64 MiB: a flipped size bit makes a huge
                    // sparse file, which reads as zeros for ever.
                    let mut off = 0;
                    while off < a.size.min(64 << 20) {
                        match fs.files().read(e.ino, off, 1 << 20) {
                            Ok(d) if !d.is_empty() => {
                                crc = cairn_format::checksum::crc(crc, &d);
                                off += d.len() as u64;
                            }
                            Ok(_) => break,
                            Err(_) => {
                                errors += 1;
                                break;
                            }
                        }
                    }
                }
                cairn_format::inode::S_IFLNK => match fs.readlink(e.ino) {
                    Ok(t) => crc = cairn_format::checksum::crc(0, &t),
                    Err(_) => errors += 1,
                },
                _ => {}
            }
            out.insert(p, crc);
        }
    }
    fs.unmount().map_err(|e| e.to_string())?;
    Ok((out, errors))
}
