//! Helpers shared by the fuzz targets.
//!
//! Every on-disk structure carries a crc32c, so random bytes almost never
//! get past a decoder's checksum test. Each decoder target therefore decodes
//! its input twice: as it is (the checksum path) and *restamped*, with the
//! checksum recomputed where the format puts it (the parsing behind it).
//! The offsets and seeds here are the format's documented layout
//! (`cairn-format`'s module headers), as a test would state them.
//!
//! The whole-image targets mutate a small populated image built once per
//! process: the input is a list of byte edits of its metadata blocks.

use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Ctx, Fs, MountOptions};
use cairn_format::btree::NODE_MAGIC;
use cairn_format::checksum::crc_skipping;
use cairn_format::codec::{get_u32, put_u32};
use cairn_format::layout::Geometry;
use cairn_format::superblock::Superblock;
use cairn_format::xattr::{XATTR_MAGIC, XVAL_MAGIC};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The checksum seed the decoder targets use (any value works: the
/// restamped copy is stamped with it).
pub const SEED: u32 = 0x5eed_cafe;

/// Writes the crc32c of `buf` (with the field at `off` taken as zero,
/// seeded with `seed`) into that field; `buf` must hold it.
pub fn restamp(buf: &mut [u8], off: usize, seed: u32) {
    if buf.len() >= off + 4 {
        let c = crc_skipping(seed, buf, off);
        put_u32(buf, off, c);
    }
}

/// The first `n` bytes of `data`, zero-padded to `n`.
pub fn padded(data: &[u8], n: usize) -> Vec<u8> {
    let mut v = data[..data.len().min(n)].to_vec();
    v.resize(n, 0);
    v
}

/// A little-endian u64 from the first bytes of `data` (0 if short).
pub fn le_u64(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

/// A populated image and the blocks that hold its metadata.
pub struct Golden {
    pub bytes: Vec<u8>,
    pub block_size: usize,
    pub meta: Vec<u64>,
}

/// The image every whole-image target mutates: 4 MiB of 1 KiB blocks in
/// four groups (three backup superblocks), with directories, a file of
/// many extents, hard links, a symlink, a device node and xattrs in a
/// shared block. Built once per process.
pub fn golden() -> &'static Golden {
    static G: OnceLock<Golden> = OnceLock::new();
    G.get_or_init(|| {
        let dev = Arc::new(MemDevice::new(4 << 20));
        let opts = MkfsOptions {
            block_size: 1024,
            blocks_per_group: Some(1024),
            bytes_per_inode: 4096,
            journal_blocks: Some(300),
            ..Default::default()
        };
        format(dev.as_ref(), &opts, &mut |_, _| {}).expect("mkfs");
        let fs = Fs::mount(dev.clone(), quiet()).expect("mount");
        let c = Ctx::root();
        let a = fs.names().mkdir(&c, 1, b"a", 0o755).unwrap().ino;
        let b = fs.names().mkdir(&c, a, b"b", 0o700).unwrap().ino;
        let f = fs.names().mknod(&c, a, b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.files().write(f, 0, &vec![3u8; 20_000]).unwrap();
        fs.names().link(f, b, b"hard").unwrap();
        let frag = fs.names().mknod(&c, 1, b"frag", libc::S_IFREG | 0o600, 0).unwrap().ino;
        for i in 0..40u64 {
            fs.files().write(frag, i * 2048, &[i as u8; 100]).unwrap();
        }
        fs.names().symlink(&c, b, b"link", b"../f").unwrap();
        fs.names().mknod(&c, 1, b"null", libc::S_IFCHR | 0o666, 0x103).unwrap();
        for i in 0..60 {
            let name = format!("entry-{i:03}");
            let ino = fs.names().mknod(&c, b, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino;
            fs.setxattr(ino, b"user.tag", b"shared value", 0).unwrap();
        }
        fs.setxattr(f, b"user.big", &vec![9u8; 3000], 0).unwrap();
        fs.unmount().unwrap();
        let bytes = dev.snapshot();
        let meta = metadata_blocks(&bytes);
        Golden { bytes, block_size: 1024, meta }
    })
}

/// Mount options for fuzzing: no background commits during a run.
pub fn quiet() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), ..Default::default() }
}

/// Superblock, descriptors, journal superblock, backup superblocks,
/// bitmaps, inode tables and every tree node, xattr block and value block.
fn metadata_blocks(bytes: &[u8]) -> Vec<u64> {
    let sb = Superblock::decode(bytes, bytes.len() as u64).expect("golden superblock");
    let geo = Geometry::new(&sb).expect("golden geometry");
    let bs = geo.block_size as usize;
    let mut v: Vec<u64> = (0..1 + sb.gdt_blocks).collect();
    v.push(sb.journal_start);
    v.extend(geo.backup_groups().map(|g| geo.group_start(g)));
    for g in 0..geo.group_count {
        v.push(geo.block_bitmap(g));
        v.push(geo.inode_bitmap(g));
        v.extend((0..geo.itable_blocks.min(4)).map(|b| geo.inode_table(g) + b));
    }
    for b in sb.journal_start + sb.journal_blocks..geo.total_blocks {
        let m = get_u32(&bytes[b as usize * bs..], 0);
        if m == NODE_MAGIC || m == XATTR_MAGIC || m == XVAL_MAGIC {
            v.push(b);
        }
    }
    v
}

/// The golden image with the edits `data` describes: each 5 bytes are a
/// metadata block (u16 index into the list), a byte offset in it (u16) and
/// a value to XOR there. At most 64 edits.
pub fn mutated(data: &[u8]) -> Vec<u8> {
    let g = golden();
    let mut img = g.bytes.clone();
    for e in data.chunks_exact(5).take(64) {
        let blk = g.meta[usize::from(u16::from_le_bytes([e[0], e[1]])) % g.meta.len()];
        let off = usize::from(u16::from_le_bytes([e[2], e[3]])) % g.block_size;
        img[blk as usize * g.block_size + off] ^= e[4].max(1);
    }
    img
}

/// An in-memory image fsck may repair.
pub struct MemImage(pub std::sync::Mutex<Vec<u8>>);

impl cairn_fsck::ImageSource for MemImage {
    fn size(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        let d = self.0.lock().unwrap();
        let s = usize::try_from(off).ok().filter(|&s| s.checked_add(buf.len()).is_some_and(|e| e <= d.len()));
        let Some(s) = s else { return Err(std::io::ErrorKind::UnexpectedEof.into()) };
        buf.copy_from_slice(&d[s..s + buf.len()]);
        Ok(())
    }

    fn writable(&self) -> bool {
        true
    }

    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        let mut d = self.0.lock().unwrap();
        let s = usize::try_from(off).ok().filter(|&s| s.checked_add(buf.len()).is_some_and(|e| e <= d.len()));
        let Some(s) = s else { return Err(std::io::ErrorKind::UnexpectedEof.into()) };
        d[s..s + buf.len()].copy_from_slice(buf);
        Ok(())
    }
}

/// The image mounted from `bytes`, or `None` if the engine refuses it.
pub fn mount(bytes: Vec<u8>) -> Option<Arc<Fs>> {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(bytes));
    Fs::mount(dev, quiet()).ok()
}
