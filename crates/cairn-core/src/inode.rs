//! In-core inodes and the inode cache.
//!
//! An in-core inode ([`InodeState`]) is the decoded [`DiskInode`] plus the
//! FUSE lookup count. Every change is written back into its inode-table
//! buffer at once ([`Tx::store_inode`]), inside the running transaction, so
//! the in-core copy is never dirtier than the buffer cache and eviction never
//! loses anything — with one exception, the *dirty times*.
//!
//! ## Dirty times
//! A write on the overwrite fast path (see `overwrite`) changes no metadata
//! but the file's mtime and ctime, and takes no transaction: it records the
//! new time in [`InodeState::lazy_time`] (under the inode's *shared* lock,
//! hence the mutex) and queues the inode once on the file system's dirty-times
//! list. The time reaches the inode-table buffer at the next commit, which
//! logs every queued inode first (as ext4's lazytime does at writeback), or
//! earlier, whenever the inode is stored for another reason (`Fs::store`
//! writes `max(d.mtime, lazy_time)`). Readers see the merged times
//! (`Fs::attr`). An explicit time (utimens) folds the lazy time in first, so
//! it is never overridden. A queued inode is held by the list (one `Arc`), so
//! eviction cannot drop it before its times are logged.
//!
//! ## Invariants
//! * At most one in-core copy of an inode exists: the cache hands out clones
//!   of one `Arc`, and evicts an entry only when nobody else holds it.
//! * An inode with `nlink == 0` stays allocated while its lookup count is
//!   above 0 (an open, unlinked file); it sits on the on-disk orphan list
//!   meanwhile, so a crash frees it at the next mount.
//!
//! ## Locking
//! One `RwLock` per inode. Operations that need several lock them in
//! ascending inode-number order ([`lock_many`]). The cache map is sharded.

use crate::error::{FsError, Result};
use crate::journal::Tx;
use crate::meta::Meta;
use crate::stats::Publish;
use cairn_format::inode::Timestamp;
use cairn_format::inode::{DataArea, DiskInode};
use cairn_format::FormatError;
use parking_lot::lock_api::ArcRwLockWriteGuard;
use parking_lot::{Mutex, RawRwLock, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// An in-core inode.
pub struct InodeState {
    pub ino: u64,
    pub d: DiskInode,
    /// FUSE lookup references.
    pub lookups: u64,
    /// The inode was freed; the number may already belong to a new file.
    pub freed: bool,
    /// mtime and ctime of fast-path writes not yet stored (see "Dirty
    /// times" above); `None` when the buffer has them.
    pub lazy_time: Mutex<Option<Timestamp>>,
    /// The inode is on the file system's dirty-times list.
    pub times_queued: AtomicBool,
    /// The checkpoint that last stored this inode (0: loaded from disk, so
    /// durable): `fdatasync` commits only when that one is not yet.
    pub stored_seq: AtomicU64,
}

impl InodeState {
    pub(crate) fn new(ino: u64, d: DiskInode) -> InodeState {
        InodeState {
            ino,
            d,
            lookups: 0,
            freed: false,
            lazy_time: Mutex::new(None),
            times_queued: AtomicBool::new(false),
            stored_seq: AtomicU64::new(0),
        }
    }

    /// mtime and ctime with the dirty times merged in.
    pub fn times(&self) -> (Timestamp, Timestamp) {
        match *self.lazy_time.lock() {
            Some(t) => (self.d.mtime.max(t), self.d.ctime.max(t)),
            None => (self.d.mtime, self.d.ctime),
        }
    }

    /// Moves the dirty times into `d` (the caller holds the inode
    /// exclusively and stores it, or is about to set the times itself).
    pub fn fold_lazy_time(&mut self) {
        if let Some(t) = self.lazy_time.get_mut().take() {
            self.d.mtime = self.d.mtime.max(t);
            self.d.ctime = self.d.ctime.max(t);
        }
    }
}

/// A shared reference to an in-core inode.
pub type InodeRef = Arc<RwLock<InodeState>>;
/// A write guard that owns its reference.
pub type InodeGuard = ArcRwLockWriteGuard<RawRwLock, InodeState>;

const SHARDS: usize = 64;

#[derive(Default)]
struct Shard {
    map: HashMap<u64, InodeRef>,
    /// Bumped whenever an inode leaves the map: a load that raced with it
    /// is redone (it may have read the inode before its last store).
    epoch: u64,
}

/// The sharded inode cache.
pub struct InodeCache {
    shards: Vec<Mutex<Shard>>,
}

impl Default for InodeCache {
    fn default() -> Self {
        InodeCache { shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect() }
    }
}

impl InodeCache {
    fn shard(&self, ino: u64) -> &Mutex<Shard> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// The in-core inode `ino`, read from disk if needed.
    pub fn get(&self, meta: &Meta, ino: u64) -> Result<InodeRef> {
        let mut epoch = {
            let sh = self.shard(ino).lock();
            if let Some(i) = sh.map.get(&ino) {
                return Ok(i.clone());
            }
            sh.epoch
        };
        loop {
            let d = meta.load_inode(ino)?;
            let mut sh = self.shard(ino).lock();
            if let Some(i) = sh.map.get(&ino) {
                return Ok(i.clone());
            }
            if sh.epoch != epoch {
                epoch = sh.epoch;
                continue;
            }
            let r = Arc::new(RwLock::new(InodeState::new(ino, d)));
            sh.map.insert(ino, r.clone());
            return Ok(r);
        }
    }

    /// Inserts a freshly created inode.
    pub fn insert(&self, ino: u64, d: DiskInode) -> InodeRef {
        let r = Arc::new(RwLock::new(InodeState::new(ino, d)));
        self.shard(ino).lock().map.insert(ino, r.clone());
        r
    }

    /// Drops `ino` from the cache if nobody uses it.
    pub fn evict_if_unused(&self, ino: u64) {
        let mut sh = self.shard(ino).lock();
        let unused = sh
            .map
            .get(&ino)
            .is_some_and(|r| Arc::strong_count(r) == 1 && r.try_read().is_some_and(|g| g.lookups == 0 || g.freed));
        if unused {
            sh.map.remove(&ino);
            sh.epoch += 1;
        }
    }

    /// Removes `ino` unconditionally (it was freed).
    pub fn remove(&self, ino: u64) {
        let mut sh = self.shard(ino).lock();
        sh.map.remove(&ino);
        sh.epoch += 1;
    }

    /// Number of cached inodes.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }
}

/// Write-locks several inodes in ascending number order (deduplicated).
pub fn lock_many(refs: &[&InodeRef]) -> Vec<InodeGuard> {
    let mut v: Vec<&InodeRef> = refs.to_vec();
    v.sort_by_key(|r| Arc::as_ptr(r) as usize);
    v.dedup_by_key(|r| Arc::as_ptr(r) as usize);
    // Order by inode number: read it without locking via a brief read lock.
    let mut keyed: Vec<(u64, &InodeRef)> = v.into_iter().map(|r| (r.read().ino, r)).collect();
    keyed.sort_by_key(|(i, _)| *i);
    keyed.into_iter().map(|(_, r)| r.write_arc()).collect()
}

impl Meta {
    /// Reads and verifies inode `ino` (checksum, file type, block pointers).
    pub fn load_inode(&self, ino: u64) -> Result<DiskInode> {
        if !self.geo.valid_ino(ino) {
            return Err(FsError::Errno(libc::ESTALE));
        }
        let (blk, off) = self.geo.inode_location(ino);
        let buf = self.bufs.get(blk, |_, _| Ok(()))?;
        let d = DiskInode::decode(self.seed, ino, &buf.read()[off..off + cairn_format::inode::INODE_SIZE])?;
        match &d.data {
            DataArea::Extents(list) => {
                for e in list {
                    if e.len == 0 || !self.geo.valid_data_range(e.pblk, u64::from(e.len)) {
                        return Err(FormatError::corrupt("inode", ino, format!("extent {e:?} out of range")).into());
                    }
                }
            }
            DataArea::Tree(root) if *root != 0 && !self.geo.valid_data_range(*root, 1) => {
                return Err(FormatError::corrupt("inode", ino, "tree root out of range").into());
            }
            _ => {}
        }
        if d.xattr_block != 0 && !self.geo.valid_data_range(d.xattr_block, 1) {
            return Err(FormatError::corrupt("inode", ino, "xattr block out of range").into());
        }
        Ok(d)
    }
}

impl Tx<'_> {
    /// Writes inode `ino` into its inode-table buffer (running transaction).
    pub fn store_inode(&self, ino: u64, d: &DiskInode) -> Result<()> {
        let (blk, off) = self.geo.inode_location(ino);
        let buf = self.bufs.get(blk, |_, _| Ok(()))?;
        self.modify(&buf, off..off + cairn_format::inode::INODE_SIZE, |slot| d.encode(self.seed, ino, slot));
        Ok(())
    }
}

impl Publish for InodeCache {
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        put("icache.inodes", self.len() as u64);
    }
}
