//! Block and inode allocation over the per-group bitmaps.
//!
//! ## On disk
//! Each group has a block bitmap and an inode bitmap (one block each; bit
//! `i` = byte `i/8`, bit `i%8`; bits past the group's end are set), whose
//! crc32c sits in the group descriptor, and the descriptor's free counters.
//! A group whose descriptor says `GD_BLOCK_UNINIT`/`GD_INODE_UNINIT` has never
//! had that bitmap written: it is synthesised from the layout on first use
//! (`cairn_format::bitmap`, the definition fsck checks against too).
//! Every bitmap and descriptor change goes through the buffer cache inside the
//! running transaction.
//!
//! ## In memory
//! Each group keeps an *allocatable* bitmap, loaded lazily: the on-disk bitmap
//! plus blocks freed by checkpoints that may still be replayed. Freeing clears
//! the on-disk bit at once (so the checkpoint records it) but the block joins
//! the allocatable map only when the journal's durable tail has passed the
//! freeing checkpoint ([`Allocator::release_pending`]): an old journal image can
//! then never be replayed over a block that was reused for file data, and a
//! crash never exposes a block that a durable checkpoint still references.
//! This is the room left for the buddy allocator and its group lists (a later
//! stage builds them from exactly these bitmaps).
//!
//! Inode numbers follow Tux3's "next inode number": an atomic hint where the
//! search starts, so creates in a row take consecutive numbers without
//! searching from the start.
//!
//! ## Locking
//! One mutex per group (bitmaps and its descriptor fields); the free counters
//! are atomics read without it. The pending-free list has its own mutex.
//! Callers hold the transaction gate shared.

use crate::buffer::BufferCache;
use crate::error::{FsError, Result};
use crate::journal::Tx;
use crate::stats::Publish;
use cairn_format::bitmap::{synth_block_bitmap, synth_inode_bitmap};
use cairn_format::checksum::crc;
use cairn_format::group_desc::*;
use cairn_format::layout::Geometry;
use cairn_format::FormatError;
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

struct GroupAlloc {
    /// Allocatable blocks (1 = in use or pending free).
    blocks: Option<Vec<u64>>,
    /// Inode bitmap (1 = in use).
    inodes: Option<Vec<u64>>,
}

struct GroupMem {
    lock: Mutex<GroupAlloc>,
    /// Allocatable free blocks.
    free: AtomicU32,
    free_inodes: AtomicU32,
}

/// Allocator counters.
#[derive(Default)]
pub struct AllocStats {
    pub alloc_calls: AtomicU64,
    pub blocks_allocated: AtomicU64,
    pub blocks_freed: AtomicU64,
    pub groups_scanned: AtomicU64,
    pub goal_hits: AtomicU64,
    pub inodes_allocated: AtomicU64,
    pub inodes_freed: AtomicU64,
    pub enospc: AtomicU64,
}

/// Block and inode allocator.
pub struct Allocator {
    geo: Geometry,
    seed: u32,
    gdt_start: u64,
    groups: Vec<GroupMem>,
    pending: Mutex<Vec<(u64, u64, u32)>>,
    /// Free blocks as the on-disk bitmaps say (superblock counter).
    pub disk_free_blocks: AtomicU64,
    /// Free blocks that can be allocated now (excludes pending frees).
    alloc_free: AtomicU64,
    /// Blocks only metadata may take, so that a tree split or an xattr block
    /// never fails halfway on a file system that file data has filled.
    reserve: u64,
    /// Free inodes (superblock counter).
    pub free_inodes: AtomicU64,
    /// Where the next inode search starts.
    pub next_ino: AtomicU64,
    pub stats: AllocStats,
}

fn test_bit(map: &[u64], i: u64) -> bool {
    map[(i / 64) as usize] >> (i % 64) & 1 == 1
}
fn set_bit(map: &mut [u64], i: u64) {
    map[(i / 64) as usize] |= 1 << (i % 64);
}
fn clear_bit(map: &mut [u64], i: u64) {
    map[(i / 64) as usize] &= !(1 << (i % 64));
}
fn disk_bit(b: &[u8], i: u64) -> bool {
    b[(i / 8) as usize] >> (i % 8) & 1 == 1
}
fn disk_set(b: &mut [u8], i: u64, v: bool) {
    let m = 1u8 << (i % 8);
    if v {
        b[(i / 8) as usize] |= m;
    } else {
        b[(i / 8) as usize] &= !m;
    }
}
fn words_from_bytes(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(a)
        })
        .collect()
}

/// First clear bit at or after `from` and before `end`.
fn find_zero(map: &[u64], from: u64, end: u64) -> Option<u64> {
    let mut i = from;
    while i < end {
        let w = map[(i / 64) as usize] | ((1u64 << (i % 64)) - 1);
        if w != u64::MAX {
            let bit = (i / 64) * 64 + u64::from((!w).trailing_zeros());
            return (bit < end).then_some(bit);
        }
        i = (i / 64 + 1) * 64;
    }
    None
}

impl Allocator {
    /// Loads every group descriptor and builds the allocator.
    pub fn load(geo: Geometry, seed: u32, gdt_start: u64, bufs: &BufferCache, next_ino: u64) -> Result<Allocator> {
        let mut groups = Vec::with_capacity(geo.group_count as usize);
        let (mut fb, mut fi) = (0u64, 0u64);
        for g in 0..geo.group_count {
            let gd = Self::read_gd(geo, seed, gdt_start, bufs, g)?;
            if u64::from(gd.free_blocks) > geo.group_len(g) || u64::from(gd.free_inodes) > geo.inodes_per_group {
                return Err(FormatError::corrupt("group descriptor", g, "free counts exceed group size").into());
            }
            fb += u64::from(gd.free_blocks);
            fi += u64::from(gd.free_inodes);
            groups.push(GroupMem {
                lock: Mutex::new(GroupAlloc { blocks: None, inodes: None }),
                free: AtomicU32::new(gd.free_blocks),
                free_inodes: AtomicU32::new(gd.free_inodes),
            });
        }
        Ok(Allocator {
            geo,
            seed,
            gdt_start,
            groups,
            pending: Mutex::new(Vec::new()),
            disk_free_blocks: AtomicU64::new(fb),
            alloc_free: AtomicU64::new(fb),
            reserve: (geo.total_blocks / 512).clamp(64, 16384),
            free_inodes: AtomicU64::new(fi),
            next_ino: AtomicU64::new(next_ino.clamp(cairn_format::FIRST_INO, geo.total_inodes())),
            stats: AllocStats::default(),
        })
    }

    fn gd_loc(&self, g: u64) -> (u64, usize) {
        gd_loc(self.gdt_start, self.geo.block_size, g)
    }

    fn read_gd(geo: Geometry, seed: u32, gdt_start: u64, bufs: &BufferCache, g: u64) -> Result<GroupDesc> {
        let (blk, off) = gd_loc(gdt_start, geo.block_size, g);
        let buf = bufs.get(blk, |_, _| Ok(()))?;
        let d = buf.data.read();
        let gd = GroupDesc::decode(seed, g, &d[off..off + GD_SIZE])?;
        if gd.block_bitmap != geo.block_bitmap(g)
            || gd.inode_bitmap != geo.inode_bitmap(g)
            || gd.inode_table != geo.inode_table(g)
        {
            return Err(
                FormatError::corrupt("group descriptor", g, "metadata locations do not match the layout").into()
            );
        }
        Ok(gd)
    }

    /// Reads, changes and rewrites group `g`'s descriptor in the transaction.
    fn update_gd(&self, tx: &Tx<'_>, g: u64, f: impl FnOnce(&mut GroupDesc)) -> Result<()> {
        let (blk, off) = self.gd_loc(g);
        let buf = tx.bufs.get(blk, |_, _| Ok(()))?;
        {
            let mut d = buf.data.write();
            let mut gd = GroupDesc::decode(self.seed, g, &d[off..off + GD_SIZE])?;
            f(&mut gd);
            gd.encode(self.seed, g, &mut d[off..off + GD_SIZE]);
        }
        tx.dirty(&buf);
        Ok(())
    }

    /// Makes sure group `g`'s allocatable block map is loaded.
    fn load_blocks(&self, bufs: &BufferCache, g: u64, ga: &mut GroupAlloc) -> Result<()> {
        if ga.blocks.is_some() {
            return Ok(());
        }
        let gd = Self::read_gd(self.geo, self.seed, self.gdt_start, bufs, g)?;
        let bytes = if gd.flags & GD_BLOCK_UNINIT != 0 {
            synth_block_bitmap(&self.geo, g)
        } else {
            let seed = self.seed;
            let want = gd.block_bitmap_csum;
            let buf = bufs.get(gd.block_bitmap, |blk, d| {
                let c = crc(seed, d);
                if c != want {
                    return Err(
                        FormatError::Checksum { what: "block bitmap", at: blk, stored: want, computed: c }.into()
                    );
                }
                Ok(())
            })?;
            let d = buf.data.read().to_vec();
            d
        };
        let mut map = words_from_bytes(&bytes);
        for &(_, blk, len) in self.pending.lock().iter() {
            for b in blk..blk + u64::from(len) {
                if self.geo.group_of_block(b) == g {
                    set_bit(&mut map, b - self.geo.group_start(g));
                }
            }
        }
        ga.blocks = Some(map);
        Ok(())
    }

    fn load_inodes(&self, bufs: &BufferCache, g: u64, ga: &mut GroupAlloc) -> Result<()> {
        if ga.inodes.is_some() {
            return Ok(());
        }
        let gd = Self::read_gd(self.geo, self.seed, self.gdt_start, bufs, g)?;
        let bytes = if gd.flags & GD_INODE_UNINIT != 0 {
            synth_inode_bitmap(&self.geo)
        } else {
            let seed = self.seed;
            let want = gd.inode_bitmap_csum;
            let buf = bufs.get(gd.inode_bitmap, |blk, d| {
                let c = crc(seed, d);
                if c != want {
                    return Err(
                        FormatError::Checksum { what: "inode bitmap", at: blk, stored: want, computed: c }.into()
                    );
                }
                Ok(())
            })?;
            let d = buf.data.read().to_vec();
            d
        };
        ga.inodes = Some(words_from_bytes(&bytes));
        Ok(())
    }

    /// Applies `f` to group `g`'s on-disk block bitmap (initialising it if
    /// needed), then stores its checksum and free-count delta in the descriptor.
    fn change_disk_bitmap(
        &self,
        tx: &Tx<'_>,
        g: u64,
        inode_map: bool,
        f: impl FnOnce(&mut [u8]),
        free_delta: i64,
        dirs_delta: i64,
    ) -> Result<()> {
        let gd = Self::read_gd(self.geo, self.seed, self.gdt_start, &tx.bufs, g)?;
        let (blk, uninit_flag) =
            if inode_map { (gd.inode_bitmap, GD_INODE_UNINIT) } else { (gd.block_bitmap, GD_BLOCK_UNINIT) };
        let buf = if gd.flags & uninit_flag != 0 {
            let b = tx.bufs.get_new(blk);
            let init = if inode_map { synth_inode_bitmap(&self.geo) } else { synth_block_bitmap(&self.geo, g) };
            debug_assert_eq!(init.len(), tx.bufs.block_size());
            b.data.write().copy_from_slice(&init);
            b
        } else {
            tx.bufs.get(blk, |_, _| Ok(()))?
        };
        let csum = {
            let mut d = buf.data.write();
            f(&mut d);
            crc(self.seed, &d)
        };
        tx.dirty(&buf);
        self.update_gd(tx, g, |gd| {
            gd.flags &= !uninit_flag;
            if inode_map {
                gd.inode_bitmap_csum = csum;
                gd.free_inodes = (i64::from(gd.free_inodes) + free_delta) as u32;
                gd.used_dirs = (i64::from(gd.used_dirs) + dirs_delta) as u32;
            } else {
                gd.block_bitmap_csum = csum;
                gd.free_blocks = (i64::from(gd.free_blocks) + free_delta) as u32;
            }
        })
    }

    /// Allocates up to `want` contiguous blocks for file data, as near
    /// `goal` as possible, leaving the metadata reserve alone.
    pub fn alloc_data(&self, tx: &Tx<'_>, goal: u64, want: u32) -> Result<(u64, u32)> {
        let free = self.alloc_free.load(Ordering::Relaxed);
        if free <= self.reserve {
            self.stats.enospc.fetch_add(1, Ordering::Relaxed);
            return Err(FsError::Errno(libc::ENOSPC));
        }
        let want = u64::from(want).min(free - self.reserve) as u32;
        self.alloc_blocks(tx, goal, want)
    }

    /// Allocates up to `want` contiguous blocks, as near `goal` as possible
    /// (metadata may use the reserve). Returns (first block, count >= 1) or ENOSPC.
    pub fn alloc_blocks(&self, tx: &Tx<'_>, goal: u64, want: u32) -> Result<(u64, u32)> {
        self.stats.alloc_calls.fetch_add(1, Ordering::Relaxed);
        let n = self.geo.group_count;
        let goal = if goal >= self.geo.total_blocks { 0 } else { goal };
        let g0 = self.geo.group_of_block(goal);
        for i in 0..n {
            let g = (g0 + i) % n;
            let gm = &self.groups[g as usize];
            if gm.free.load(Ordering::Relaxed) == 0 {
                continue;
            }
            self.stats.groups_scanned.fetch_add(1, Ordering::Relaxed);
            let mut ga = gm.lock.lock();
            self.load_blocks(&tx.bufs, g, &mut ga)?;
            let map = ga.blocks.as_mut().expect("loaded above");
            let len = self.geo.group_len(g);
            let from = if i == 0 { goal - self.geo.group_start(g) } else { 0 };
            let Some(first) = find_zero(map, from, len).or_else(|| find_zero(map, 0, len)) else { continue };
            let mut cnt = 1u64;
            while cnt < u64::from(want) && first + cnt < len && !test_bit(map, first + cnt) {
                cnt += 1;
            }
            for b in first..first + cnt {
                set_bit(map, b);
            }
            gm.free.fetch_sub(cnt as u32, Ordering::Relaxed);
            self.alloc_free.fetch_sub(cnt, Ordering::Relaxed);
            self.change_disk_bitmap(
                tx,
                g,
                false,
                |d| {
                    for b in first..first + cnt {
                        disk_set(d, b, true);
                    }
                },
                -(cnt as i64),
                0,
            )?;
            drop(ga);
            let start = self.geo.group_start(g) + first;
            if start == goal {
                self.stats.goal_hits.fetch_add(1, Ordering::Relaxed);
            }
            self.disk_free_blocks.fetch_sub(cnt, Ordering::Relaxed);
            self.stats.blocks_allocated.fetch_add(cnt, Ordering::Relaxed);
            return Ok((start, cnt as u32));
        }
        self.stats.enospc.fetch_add(1, Ordering::Relaxed);
        Err(FsError::Errno(libc::ENOSPC))
    }

    /// Frees `[start, start+len)` in checkpoint `seq` (see the module essay).
    pub fn free_blocks(&self, tx: &Tx<'_>, seq: u64, start: u64, len: u64) -> Result<()> {
        if !self.geo.valid_data_range(start, len) {
            return Err(FormatError::corrupt("extent", start, format!("freeing invalid range {start}+{len}")).into());
        }
        let mut b = start;
        let end = start + len;
        while b < end {
            let g = self.geo.group_of_block(b);
            let gend = (self.geo.group_start(g) + self.geo.group_len(g)).min(end);
            let (s, n) = (b, gend - b);
            let gm = &self.groups[g as usize];
            let ga = gm.lock.lock();
            let base = self.geo.group_start(g);
            let mut double = false;
            self.change_disk_bitmap(
                tx,
                g,
                false,
                |d| {
                    for x in s..s + n {
                        double |= !disk_bit(d, x - base);
                        disk_set(d, x - base, false);
                    }
                },
                n as i64,
                0,
            )?;
            if double {
                // The bitmap and counters just changed are wrong: the error
                // (corruption) aborts the journal before they are committed.
                return Err(FormatError::corrupt(
                    "block bitmap",
                    s,
                    format!("freeing {n} block(s) of which some are already free"),
                )
                .into());
            }
            self.pending.lock().push((seq, s, n as u32));
            drop(ga);
            self.disk_free_blocks.fetch_add(n, Ordering::Relaxed);
            self.stats.blocks_freed.fetch_add(n, Ordering::Relaxed);
            b = gend;
        }
        Ok(())
    }

    /// Makes blocks freed by checkpoints below `durable_tail_seq` allocatable.
    pub fn release_pending(&self, durable_tail_seq: u64) {
        let ready: Vec<(u64, u64, u32)> = {
            let mut p = self.pending.lock();
            let (r, keep): (Vec<_>, Vec<_>) = p.drain(..).partition(|e| e.0 < durable_tail_seq);
            *p = keep;
            r
        };
        for (_, blk, len) in ready {
            let g = self.geo.group_of_block(blk);
            let gm = &self.groups[g as usize];
            let mut ga = gm.lock.lock();
            if let Some(map) = ga.blocks.as_mut() {
                let base = self.geo.group_start(g);
                for b in blk..blk + u64::from(len) {
                    clear_bit(map, b - base);
                }
            }
            gm.free.fetch_add(len, Ordering::Relaxed);
            self.alloc_free.fetch_add(u64::from(len), Ordering::Relaxed);
        }
    }

    /// Checks the allocator's in-memory invariants; panics with what is
    /// wrong: free blocks as the disk counts them = allocatable + pending;
    /// the groups' allocatable counts add up; a loaded group's map has as
    /// many clear bits as its count says.
    pub fn debug_check_consistency(&self) {
        let pending = self.pending_blocks();
        let alloc_free = self.alloc_free.load(Ordering::Relaxed);
        let disk_free = self.disk_free_blocks.load(Ordering::Relaxed);
        assert_eq!(alloc_free + pending, disk_free, "allocatable {alloc_free} + pending {pending} != free {disk_free}");
        let mut sum = 0u64;
        for (g, gm) in self.groups.iter().enumerate() {
            let ga = gm.lock.lock();
            let free = gm.free.load(Ordering::Relaxed);
            sum += u64::from(free);
            if let Some(map) = &ga.blocks {
                let len = self.geo.group_len(g as u64);
                let clear = (0..len).filter(|&i| !test_bit(map, i)).count() as u32;
                assert_eq!(clear, free, "group {g}: {clear} clear bits in the allocatable map, count says {free}");
            }
        }
        assert_eq!(sum, alloc_free, "groups' allocatable counts add up to {sum}, total says {alloc_free}");
    }

    /// Blocks waiting for the journal before they can be reused.
    pub fn pending_blocks(&self) -> u64 {
        self.pending.lock().iter().map(|e| u64::from(e.2)).sum()
    }

    /// Allocates an inode number (near the next-inode hint).
    pub fn alloc_inode(&self, tx: &Tx<'_>, is_dir: bool) -> Result<u64> {
        let n = self.geo.group_count;
        let hint = self.next_ino.load(Ordering::Relaxed).max(cairn_format::FIRST_INO);
        let hint = if hint > self.geo.total_inodes() { cairn_format::FIRST_INO } else { hint };
        let g0 = self.geo.group_of_ino(hint);
        for i in 0..=n {
            let g = (g0 + i) % n;
            let gm = &self.groups[g as usize];
            if gm.free_inodes.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut ga = gm.lock.lock();
            self.load_inodes(&tx.bufs, g, &mut ga)?;
            let map = ga.inodes.as_mut().expect("loaded above");
            let from = if i == 0 { self.geo.index_in_group(hint) } else { 0 };
            let ipg = self.geo.inodes_per_group;
            let Some(idx) = find_zero(map, from, ipg).or_else(|| find_zero(map, 0, ipg)) else { continue };
            set_bit(map, idx);
            gm.free_inodes.fetch_sub(1, Ordering::Relaxed);
            self.change_disk_bitmap(tx, g, true, |d| disk_set(d, idx, true), -1, i64::from(is_dir))?;
            drop(ga);
            let ino = g * ipg + idx + 1;
            self.next_ino.store(ino + 1, Ordering::Relaxed);
            self.free_inodes.fetch_sub(1, Ordering::Relaxed);
            self.stats.inodes_allocated.fetch_add(1, Ordering::Relaxed);
            return Ok(ino);
        }
        Err(FsError::Errno(libc::ENOSPC))
    }

    /// Whether inode `ino` is marked in use in its group's bitmap.
    pub fn inode_in_use(&self, bufs: &BufferCache, ino: u64) -> Result<bool> {
        let g = self.geo.group_of_ino(ino);
        let idx = self.geo.index_in_group(ino);
        let mut ga = self.groups[g as usize].lock.lock();
        self.load_inodes(bufs, g, &mut ga)?;
        Ok(ga.inodes.as_ref().is_none_or(|map| test_bit(map, idx)))
    }

    /// Frees inode number `ino`.
    pub fn free_inode(&self, tx: &Tx<'_>, ino: u64, was_dir: bool) -> Result<()> {
        let g = self.geo.group_of_ino(ino);
        let idx = self.geo.index_in_group(ino);
        let gm = &self.groups[g as usize];
        let mut ga = gm.lock.lock();
        self.load_inodes(&tx.bufs, g, &mut ga)?;
        if let Some(map) = ga.inodes.as_mut() {
            // Freeing a free inode (a damaged orphan list, a stale entry) must
            // not inflate the free counters: refuse it as corruption.
            if !test_bit(map, idx) {
                return Err(
                    cairn_format::FormatError::corrupt("inode", ino, "freeing an inode that is not in use").into()
                );
            }
            clear_bit(map, idx);
        }
        self.change_disk_bitmap(tx, g, true, |d| disk_set(d, idx, false), 1, -i64::from(was_dir))?;
        gm.free_inodes.fetch_add(1, Ordering::Relaxed);
        self.free_inodes.fetch_add(1, Ordering::Relaxed);
        self.stats.inodes_freed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Publish for Allocator {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        let s = &self.stats;
        put("alloc.calls", s.alloc_calls.load(Relaxed));
        put("alloc.blocks_allocated", s.blocks_allocated.load(Relaxed));
        put("alloc.blocks_freed", s.blocks_freed.load(Relaxed));
        put("alloc.groups_scanned", s.groups_scanned.load(Relaxed));
        put("alloc.goal_hits", s.goal_hits.load(Relaxed));
        put("alloc.enospc", s.enospc.load(Relaxed));
        put("alloc.pending_free_blocks", self.pending_blocks());
        put("alloc.free_blocks", self.disk_free_blocks.load(Relaxed));
        put("alloc.free_inodes", self.free_inodes.load(Relaxed));
        put("alloc.inodes_allocated", s.inodes_allocated.load(Relaxed));
        put("alloc.inodes_freed", s.inodes_freed.load(Relaxed));
        put("alloc.next_ino", self.next_ino.load(Relaxed));
    }
}
