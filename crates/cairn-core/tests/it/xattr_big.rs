//! Xattr values up to 64 KiB (Linux's `XATTR_SIZE_MAX`): values longer than
//! a quarter of a block live in chains of value blocks owned by the xattr
//! block. Round trips of every size class, the errors Linux users expect,
//! ENOSPC that changes nothing, sharing and freeing with the block, and
//! damage found by the engine (EUCLEAN, no panic) and by fsck.

use crate::common::*;
use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::{Ctx, Fs, FsError, MountOptions, XATTR_CREATE, XATTR_REPLACE};
use cairn_format::inode::{DiskInode, INODE_SIZE};
use cairn_format::layout::Geometry;
use cairn_format::superblock::Superblock;
use cairn_format::xattr::{ExtValue, XattrBlock, XATTR_EXTERNAL_MAX, XVAL_HEADER};
use std::time::Duration;

fn opts() -> MountOptions {
    MountOptions { commit_interval: Duration::from_secs(3600), ..Default::default() }
}

/// `len` bytes of a pattern that differs per `seed`.
fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(u32::from(seed) * 7 + i as u32 / 251) as u8).collect()
}

fn file(fs: &Fs, dir: u64, name: &str) -> u64 {
    fs.names().mknod(&Ctx::root(), dir, name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap().ino
}

fn errno<T: std::fmt::Debug>(r: cairn_core::Result<T>) -> i32 {
    match r {
        Err(FsError::Errno(e)) => e,
        other => panic!("expected an errno, got {other:?}"),
    }
}

/// Free blocks once every free has left the journal's hold.
fn settled_free(fs: &Fs) -> u64 {
    fs.files().sync_fs().unwrap();
    fs.files().sync_fs().unwrap();
    fs.statfs().unwrap().blocks_free
}

/// Blocks an inode counts (st_blocks is in 512-byte units).
fn fs_blocks(fs: &Fs, ino: u64) -> u64 {
    fs.inodes().getattr(ino).unwrap().blocks / 8
}

/// Value blocks of a `len`-byte value with 4 KiB blocks.
fn vblocks(len: usize) -> u64 {
    if len > 1024 {
        len.div_ceil(4096 - XVAL_HEADER) as u64
    } else {
        0
    }
}

/// Size classes around every boundary, for 4 KiB blocks: inline (up to a
/// quarter block), one value block (4056 bytes), two, and 64 KiB.
const SIZES: [usize; 9] = [1, 100, 1024, 1025, 4056, 4057, 20_000, 65_535, 65_536];

#[test]
fn values_of_every_size_round_trip_and_free_their_blocks() {
    let dev = new_image(64);
    let mut fs = mount_with(&dev, opts());
    let f = file(&fs, 1, "f");
    fs.setxattr(f, b"user.small", b"s", 0).unwrap();
    let free0 = settled_free(&fs);
    for (i, &len) in SIZES.iter().enumerate() {
        let want = value(len, i as u8);
        fs.setxattr(f, b"user.v", &want, XATTR_CREATE).unwrap();
        assert_eq!(fs.getxattr(f, b"user.v").unwrap(), want, "{len} bytes");
        // Replaced by every other size, growing and shrinking, then back.
        for (j, &len2) in SIZES.iter().enumerate().rev() {
            let w = value(len2, j as u8 + 50);
            fs.setxattr(f, b"user.v", &w, XATTR_REPLACE).unwrap();
            assert_eq!(fs.getxattr(f, b"user.v").unwrap(), w, "{len} then {len2} bytes");
        }
        fs.setxattr(f, b"user.v", &want, 0).unwrap();
        assert_eq!(fs_blocks(&fs, f), 1 + vblocks(len), "{len} bytes: the xattr block and its value blocks");
        unmount_clean(&fs, dev.as_ref(), &format!("a {len}-byte value"));

        fs = mount_with(&dev, opts());
        assert_eq!(fs.getxattr(f, b"user.v").unwrap(), want, "{len} bytes after a remount");
        assert_eq!(fs.getxattr(f, b"user.small").unwrap(), b"s");
        assert_eq!(fs.listxattr(f).unwrap(), b"user.small\0user.v\0");
        // The same value again changes nothing (the same-value shortcut).
        let before = settled_free(&fs);
        fs.setxattr(f, b"user.v", &want, 0).unwrap();
        assert_eq!(settled_free(&fs), before, "{len} bytes: setting the same value took blocks");
        fs.removexattr(f, b"user.v").unwrap();
        assert_eq!(errno(fs.getxattr(f, b"user.v")), libc::ENODATA);
        assert_eq!(settled_free(&fs), free0, "{len} bytes: removexattr left blocks behind");
        assert_eq!(fs_blocks(&fs, f), 1);
    }
    unmount_clean(&fs, dev.as_ref(), "every size removed");
}

#[test]
fn linux_errors_for_large_values() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts());
    let f = file(&fs, 1, "f");
    let big = value(65_536, 1);
    assert_eq!(errno(fs.setxattr(f, b"user.x", &value(65_537, 1), 0)), libc::E2BIG);
    assert_eq!(errno(fs.setxattr(f, b"user.x", &big, XATTR_REPLACE)), libc::ENODATA);
    fs.setxattr(f, b"user.x", &big, XATTR_CREATE).unwrap();
    assert_eq!(errno(fs.setxattr(f, b"user.x", &big, XATTR_CREATE)), libc::EEXIST);
    assert_eq!(errno(fs.setxattr(f, b"user.x", &value(65_537, 2), XATTR_REPLACE)), libc::E2BIG);
    assert_eq!(fs.getxattr(f, b"user.x").unwrap(), big, "a refused set changed the value");
    // trusted. and security. take large values too.
    fs.setxattr(f, b"trusted.t", &value(30_000, 3), 0).unwrap();
    fs.setxattr(f, b"security.s", &value(5_000, 4), 0).unwrap();
    assert_eq!(fs.getxattr(f, b"trusted.t").unwrap(), value(30_000, 3));
    assert_eq!(fs.listxattr(f).unwrap(), b"user.x\0trusted.t\0security.s\0");
    unmount_clean(&fs, dev.as_ref(), "large values in three namespaces");
}

#[test]
fn many_large_values_until_enospc_lose_nothing() {
    // 8 MiB: room for a few dozen 64 KiB values.
    let dev = new_image(8);
    let fs = mount_with(&dev, opts());
    let mut set: Vec<(u64, String, Vec<u8>)> = Vec::new();
    let mut enospc = 0;
    let mut per_inode_limit = false;
    'files: for n in 0..64 {
        let f = file(&fs, 1, &format!("f{n}"));
        for k in 0..=XATTR_EXTERNAL_MAX {
            let name = format!("user.big{k:02}");
            let v = value(60_000 + k * 100, (n * 17 + k) as u8);
            let free = settled_free(&fs);
            match fs.setxattr(f, name.as_bytes(), &v, 0) {
                Ok(()) => {
                    assert!(k < XATTR_EXTERNAL_MAX, "more than {XATTR_EXTERNAL_MAX} external values in one block");
                    set.push((f, name, v));
                }
                Err(FsError::Errno(libc::ENOSPC)) => {
                    assert_eq!(settled_free(&fs), free, "a failed set changed the free count");
                    assert_eq!(errno(fs.getxattr(f, name.as_bytes())), libc::ENODATA);
                    if k == XATTR_EXTERNAL_MAX {
                        per_inode_limit = true;
                        continue 'files;
                    }
                    enospc += 1;
                    if enospc == 3 {
                        break 'files;
                    }
                    // Smaller values still fit for a while.
                    continue 'files;
                }
                Err(e) => panic!("{name}: {e}"),
            }
        }
    }
    assert!(enospc > 0, "the disk never filled");
    assert!(per_inode_limit, "never reached the per-block limit of external values");
    assert!(set.len() > 20, "only {} values fit", set.len());
    for (f, name, v) in &set {
        assert_eq!(&fs.getxattr(*f, name.as_bytes()).unwrap(), v, "{name} of {f}");
    }
    unmount_clean(&fs, dev.as_ref(), "a full disk of large xattrs");
    let fs = mount_with(&dev, opts());
    for (f, name, v) in &set {
        assert_eq!(&fs.getxattr(*f, name.as_bytes()).unwrap(), v, "{name} of {f} after a remount");
    }
    // Removing them all gives every block back.
    for (f, name, _) in &set {
        fs.removexattr(*f, name.as_bytes()).unwrap();
    }
    fs.unmount().unwrap();
    let report = fsck_clean_mem(dev.as_ref(), "all large xattrs removed");
    let fs = mount_with(&dev, opts());
    assert!(settled_free(&fs) + 200 > report.total_blocks - report.blocks_used, "blocks leaked");
    fs.unmount().unwrap();
}

#[test]
fn a_block_with_large_values_is_shared_and_freed_with_its_last_inode() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts());
    let c = Ctx::root();
    let d = fs.names().mkdir(&c, 1, b"d", 0o755).unwrap().ino;
    let inos: Vec<u64> = (0..40).map(|i| file(&fs, d, &format!("f{i}"))).collect();
    let big = value(65_536, 9);
    let mid = value(9_000, 8);
    let free0 = settled_free(&fs);
    for &i in &inos {
        fs.setxattr(i, b"user.big", &big, 0).unwrap();
        fs.setxattr(i, b"user.mid", &mid, 0).unwrap();
        fs.setxattr(i, b"user.tag", b"same", 0).unwrap();
    }
    let one_set = 1 + vblocks(big.len()) + vblocks(mid.len());
    assert_eq!(fs_blocks(&fs, inos[0]), one_set);
    let used = free0 - settled_free(&fs);
    assert_eq!(used, one_set, "40 identical sets with large values took {used} blocks");
    unmount_clean(&fs, dev.as_ref(), "40 inodes sharing large values");

    // One inode changes a small attribute: its block is copied, values too.
    let fs = mount_with(&dev, opts());
    fs.setxattr(inos[0], b"user.tag", b"mine", 0).unwrap();
    assert_eq!(fs.getxattr(inos[0], b"user.big").unwrap(), big);
    assert_eq!(fs.getxattr(inos[1], b"user.tag").unwrap(), b"same");
    assert_eq!(free0 - settled_free(&fs), 2 * one_set);
    // ... and back: it shares the first block again; its copy is freed.
    fs.setxattr(inos[0], b"user.tag", b"same", 0).unwrap();
    assert_eq!(free0 - settled_free(&fs), one_set);
    unmount_clean(&fs, dev.as_ref(), "copied and shared again");

    // Deleting the inodes: the block and its values go with the last one.
    let fs = mount_with(&dev, opts());
    for (n, &i) in inos.iter().enumerate() {
        assert_eq!(fs.getxattr(i, b"user.mid").unwrap(), mid);
        fs.names().unlink(d, format!("f{n}").as_bytes()).unwrap();
        fs.inodes().forget(i, 1);
        let now = settled_free(&fs);
        if n + 1 < inos.len() {
            assert_eq!(free0 - now, one_set, "after {} deletes", n + 1);
        } else {
            // (The emptied directory's leaf goes too.)
            assert!(now >= free0, "the last delete did not free the block and its values: {now} < {free0}");
        }
    }
    unmount_clean(&fs, dev.as_ref(), "every sharer deleted");
}

/// The image's geometry and seed, read from the superblock.
fn geometry(dev: &MemDevice) -> (Geometry, u32) {
    let mut b = vec![0u8; 4096];
    dev.read_at(&mut b, 0).unwrap();
    let sb = Superblock::decode(&b, dev.size()).unwrap();
    (Geometry::new(&sb).unwrap(), sb.csum_seed())
}

/// The external values of inode `ino`'s xattr block: (block, descriptors).
fn externals(dev: &MemDevice, ino: u64) -> (u64, Vec<ExtValue>) {
    let (geo, seed) = geometry(dev);
    let bs = geo.block_size as usize;
    let (blk, off) = geo.inode_location(ino);
    let mut b = vec![0u8; bs];
    dev.read_at(&mut b, blk * bs as u64).unwrap();
    let d = DiskInode::decode(seed, ino, &b[off..off + INODE_SIZE]).unwrap();
    dev.read_at(&mut b, d.xattr_block * bs as u64).unwrap();
    let x = XattrBlock::decode(seed, d.xattr_block, &b).unwrap();
    (d.xattr_block, XattrBlock::externals(&x.entries).copied().collect())
}

#[test]
fn damaged_value_blocks_are_euclean_and_fsck_finds_them() {
    let dev = new_image(64);
    let fs = mount_with(&dev, opts());
    let f = file(&fs, 1, "f");
    let big = value(50_000, 5);
    fs.setxattr(f, b"user.big", &big, 0).unwrap();
    fs.setxattr(f, b"user.ok", b"fine", 0).unwrap();
    unmount_clean(&fs, dev.as_ref(), "before the damage");
    let (xblk, ext) = externals(&dev, f);
    assert_eq!(ext.len(), 1);
    let bs = 4096u64;
    // Flip one value byte in the first block of the chain.
    let mut b = [0u8; 1];
    let at = ext[0].first * bs + XVAL_HEADER as u64 + 10;
    dev.read_at(&mut b, at).unwrap();
    dev.write_at(&[b[0] ^ 0x20], at).unwrap();

    let report = fsck_mem(dev.as_ref(), "a damaged value block");
    let text: Vec<&str> = report.problems.iter().map(|p| p.message.as_str()).collect();
    assert!(
        text.iter().any(|m| m.contains(&format!("xattr block {xblk}: the 50000-byte value of user.big is damaged"))),
        "{text:#?}"
    );

    let fs = mount_with(&dev, MountOptions { errors: cairn_core::ErrorPolicy::Continue, ..opts() });
    assert_eq!(fs.getxattr(f, b"user.big").unwrap_err().errno(), libc::EUCLEAN);
    assert_eq!(fs.getxattr(f, b"user.ok").unwrap(), b"fine", "the rest of the set is still readable");
    fs.unmount().unwrap();
}

#[test]
fn images_without_the_feature_keep_values_inline() {
    let dev = new_image(16);
    // Clear INCOMPAT_XATTR_EXTERNAL, as an image made before it.
    edit_superblock(&dev, |sb| sb.feature_incompat = 0);
    let fs = mount_with(&dev, opts());
    let f = file(&fs, 1, "f");
    fs.setxattr(f, b"user.a", &value(3000, 1), 0).unwrap();
    assert_eq!(errno(fs.setxattr(f, b"user.b", &value(5000, 1), 0)), libc::E2BIG);
    assert_eq!(errno(fs.setxattr(f, b"user.b", &value(2000, 1), 0)), libc::ENOSPC);
    assert_eq!(fs_blocks(&fs, f), 1);
    unmount_clean(&fs, dev.as_ref(), "an image without external values");
}

#[test]
fn concurrent_setters_on_shared_large_values_keep_everything_exact() {
    use rand::{Rng, SeedableRng};
    let dev = new_image(128);
    let fs = mount_with(&dev, opts());
    const P: u64 = 4;
    const F: usize = 20;
    const V: u8 = 5;
    let big = value(20_000, 77);
    let sets: Vec<Vec<u64>> = (0..P)
        .map(|p| {
            let d = fs.names().mkdir(&Ctx::root(), 1, format!("p{p}").as_bytes(), 0o755).unwrap().ino;
            (0..F).map(|i| file(&fs, d, &format!("f{i}"))).collect()
        })
        .collect();
    let free0 = settled_free(&fs);
    for &f in sets.iter().flatten() {
        fs.setxattr(f, b"user.big", &big, 0).unwrap();
    }
    let threads: Vec<_> = (0..P)
        .map(|p| {
            let fs = fs.clone();
            let mine = sets[p as usize].clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(p + 100);
                let mut last = vec![None; mine.len()];
                for n in 0..400 {
                    let f = rng.gen_range(0..mine.len());
                    let v = rng.gen_range(0..V);
                    // Small values, and now and then a large one: every set
                    // change copies or shares the block with its big value.
                    let len = if v == 0 { 3000 } else { 10 };
                    fs.setxattr(mine[f], b"user.x", &value(len, v), 0).unwrap();
                    last[f] = Some((len, v));
                    if n % 100 == 0 {
                        fs.files().sync_fs().unwrap();
                    }
                }
                last
            })
        })
        .collect();
    let lasts: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (p, last) in lasts.iter().enumerate() {
        for (f, v) in last.iter().enumerate() {
            let ino = sets[p][f];
            assert_eq!(fs.getxattr(ino, b"user.big").unwrap(), big, "process {p} file {f}");
            match v {
                Some((len, v)) => assert_eq!(fs.getxattr(ino, b"user.x").unwrap(), value(*len, *v)),
                None => assert_eq!(errno(fs.getxattr(ino, b"user.x")), libc::ENODATA),
            }
        }
    }
    // At most V + 1 distinct sets, each one block and its values, all
    // shared (a set at the refcount limit never happens with 80 inodes).
    let bound: u64 = (0..=u64::from(V)).map(|_| 1 + vblocks(20_000) + vblocks(3000)).sum();
    fs.debug_check_consistency();
    let free = settled_free(&fs);
    assert!(free0 - free <= bound, "{} blocks for at most {} distinct sets", free0 - free, V + 1);
    fs.unmount().unwrap();
    let report = fsck_clean_mem(dev.as_ref(), "after concurrent setters on large values");
    assert_eq!(report.total_blocks - report.blocks_used, free);
}

#[test]
fn nombcache_gives_every_inode_its_own_values() {
    let dev = new_image(64);
    let fs = mount_with(&dev, MountOptions { mbcache: false, ..opts() });
    let inos: Vec<u64> = (0..3).map(|i| file(&fs, 1, &format!("f{i}"))).collect();
    let free0 = settled_free(&fs);
    let big = value(65_536, 3);
    for &i in &inos {
        fs.setxattr(i, b"user.big", &big, 0).unwrap();
        fs.setxattr(i, b"user.s", b"1", 0).unwrap();
    }
    assert_eq!(free0 - settled_free(&fs), 3 * (1 + vblocks(65_536)));
    for (n, &i) in inos.iter().enumerate() {
        assert_eq!(fs.getxattr(i, b"user.big").unwrap(), big);
        fs.names().unlink(1, format!("f{n}").as_bytes()).unwrap();
        fs.inodes().forget(i, 1);
    }
    // (The emptied root directory's leaf goes too.)
    let free = settled_free(&fs);
    assert!((free0..=free0 + 1).contains(&free), "{free} free, {free0} before");
    unmount_clean(&fs, dev.as_ref(), "nombcache with large values");
}
