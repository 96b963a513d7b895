//! The conflict probe: how often would handles that keep their changes
//! private until their end (issue #52's gate, `docs/gate-plan.md`) meet
//! each other's unfinished changes?
//!
//! ## Purpose
//! Step S0 of the gate plan, instrumentation only. A handle that changes a
//! journal chunk which another handle changed and has not finished yet is a
//! *conflict*: under private change sets the two would have to merge (join
//! together), and one might wait for the other. The plan's go/no-go asks
//! that, outside the structures every allocation shares (bitmaps, group
//! descriptors, the superblock), conflicts stay rare and come from the known
//! windows (an inode or directory leaf handed from one operation to the
//! next between its unlock and its end). The private handles were then
//! built, measured slower on two cores and deleted (gate plan §7.6, §7.7);
//! the probe stays, to tell how often handles would meet where the design
//! is tried again.
//!
//! ## What is recorded
//! Per buffer, the chunks each handle changed since the buffer's last change
//! by another, with a mark that says whether that handle has ended
//! ([`HandleMark`]). A change meets a conflict when it overlaps the chunks of
//! a handle that is still running. Conflicts are counted by the role of the
//! block (from the geometry, and for tree nodes from their kind byte), and
//! every handle that met one is counted once, split by whether it met only
//! shared allocator structures (`probe.handles_shared_only`, which the
//! plan's step S1 removed while it lasted) or anything else (`probe.handles_conflicting`).
//!
//! ## Cost and switch
//! Off unless the mount asks (`-o debug.conflict_probe`): the change path
//! then pays one load. On, each handle allocates a mark and each change
//! walks the buffer's short owner list under the buffer's log lock, which
//! the change holds anyway. Nothing here is durable; nothing changes
//! behaviour.

use cairn_format::btree::{KIND_DIRENTS, KIND_EXTENTS, KIND_ORPHANS, NODE_MAGIC};
use cairn_format::codec::get_u32;
use cairn_format::layout::Geometry;
use cairn_format::xattr::XATTR_MAGIC;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::Arc;

/// What a block is, for counting conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// The superblock, the group descriptor table, or a backup superblock.
    Fixed,
    BlockBitmap,
    InodeBitmap,
    InodeTable,
    ExtentNode,
    DirNode,
    OrphanNode,
    Xattr,
    Other,
}

const ROLES: [Role; 9] = [
    Role::Fixed,
    Role::BlockBitmap,
    Role::InodeBitmap,
    Role::InodeTable,
    Role::ExtentNode,
    Role::DirNode,
    Role::OrphanNode,
    Role::Xattr,
    Role::Other,
];

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Fixed => "fixed",
            Role::BlockBitmap => "block_bitmap",
            Role::InodeBitmap => "inode_bitmap",
            Role::InodeTable => "inode_table",
            Role::ExtentNode => "extent_node",
            Role::DirNode => "dir_node",
            Role::OrphanNode => "orphan_node",
            Role::Xattr => "xattr",
            Role::Other => "other",
        }
    }

    /// Structures every allocation changes (the plan's step S1 moved their
    /// changes to the handle's end).
    fn shared(self) -> bool {
        matches!(self, Role::Fixed | Role::BlockBitmap | Role::InodeBitmap)
    }

    fn bit(self) -> u32 {
        1 << self as u8
    }
}

/// One handle, as the probe knows it.
#[derive(Debug)]
pub struct HandleMark {
    id: u64,
    ended: AtomicBool,
    /// Roles of the blocks where this handle met a running handle's chunks.
    met: AtomicU32,
}

/// The handles that changed a buffer's chunks (kept in its log state).
pub(crate) type Owners = Vec<(Arc<HandleMark>, u64)>;

/// The probe of one mounted file system (see the module essay).
pub struct Probe {
    geo: Geometry,
    next_id: AtomicU64,
    handles: AtomicU64,
    handles_conflicting: AtomicU64,
    handles_shared_only: AtomicU64,
    conflicts: [AtomicU64; ROLES.len()],
}

impl Probe {
    pub fn new(geo: Geometry) -> Probe {
        Probe {
            geo,
            next_id: AtomicU64::new(1),
            handles: AtomicU64::new(0),
            handles_conflicting: AtomicU64::new(0),
            handles_shared_only: AtomicU64::new(0),
            conflicts: Default::default(),
        }
    }

    /// A mark for a handle that begins.
    pub fn begin(&self) -> Arc<HandleMark> {
        let id = self.next_id.fetch_add(1, Relaxed);
        Arc::new(HandleMark { id, ended: AtomicBool::new(false), met: AtomicU32::new(0) })
    }

    /// The handle of `mark` has ended: counts it by what it met.
    pub fn end(&self, mark: &HandleMark) {
        mark.ended.store(true, std::sync::atomic::Ordering::Release);
        self.handles.fetch_add(1, Relaxed);
        let met = mark.met.load(Relaxed);
        let shared: u32 = ROLES.iter().filter(|r| r.shared()).map(|r| r.bit()).sum();
        if met & !shared != 0 {
            self.handles_conflicting.fetch_add(1, Relaxed);
        } else if met != 0 {
            self.handles_shared_only.fetch_add(1, Relaxed);
        }
    }

    /// `mark`'s handle changed `chunks` of block `blk` (now `bytes`); the
    /// caller holds the buffer's log state, whose owner list is `owners`.
    pub(crate) fn note(
        &self,
        owners: &mut Option<Box<Owners>>,
        mark: &Arc<HandleMark>,
        blk: u64,
        bytes: &[u8],
        chunks: u64,
    ) {
        let list = owners.get_or_insert_with(Default::default);
        list.retain(|(m, _)| m.id == mark.id || !m.ended.load(std::sync::atomic::Ordering::Acquire));
        let met = list.iter().any(|(m, c)| m.id != mark.id && c & chunks != 0);
        if met {
            let role = self.role(blk, bytes);
            self.conflicts[role as usize].fetch_add(1, Relaxed);
            mark.met.fetch_or(role.bit(), Relaxed);
        }
        match list.iter_mut().find(|(m, _)| m.id == mark.id) {
            Some((_, c)) => *c |= chunks,
            None => list.push((mark.clone(), chunks)),
        }
    }

    fn role(&self, blk: u64, bytes: &[u8]) -> Role {
        let geo = &self.geo;
        let g = geo.group_of_block(blk);
        if blk < geo.reserved_end || (geo.has_backup_superblock(g) && blk == geo.group_start(g)) {
            return Role::Fixed;
        }
        if blk == geo.block_bitmap(g) {
            return Role::BlockBitmap;
        }
        if blk == geo.inode_bitmap(g) {
            return Role::InodeBitmap;
        }
        if (geo.inode_table(g)..geo.inode_table(g) + geo.itable_blocks).contains(&blk) {
            return Role::InodeTable;
        }
        match (bytes.len() >= 8).then(|| get_u32(bytes, 0)) {
            Some(NODE_MAGIC) => match bytes[4] {
                KIND_EXTENTS => Role::ExtentNode,
                KIND_DIRENTS => Role::DirNode,
                KIND_ORPHANS => Role::OrphanNode,
                _ => Role::Other,
            },
            Some(XATTR_MAGIC) => Role::Xattr,
            _ => Role::Other,
        }
    }

    /// The probe's counters (`probe.*`).
    pub fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        put("probe.handles", self.handles.load(Relaxed));
        put("probe.handles_conflicting", self.handles_conflicting.load(Relaxed));
        put("probe.handles_shared_only", self.handles_shared_only.load(Relaxed));
        for r in ROLES {
            put(&format!("probe.conflicts.{}", r.name()), self.conflicts[r as usize].load(Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            block_size: 4096,
            total_blocks: 1 << 16,
            blocks_per_group: 1 << 15,
            inodes_per_group: 8192,
            group_count: 2,
            itable_blocks: 512,
            reserved_end: 100,
            journal_groups: 0,
            backup_superblocks: false,
        }
    }

    #[test]
    fn a_change_over_a_running_handles_chunk_conflicts_and_over_an_ended_one_does_not() {
        let p = Probe::new(geometry());
        let itable = geometry().inode_table(1);
        let block = vec![0u8; 4096];
        let (a, b) = (p.begin(), p.begin());
        let mut owners = None;
        p.note(&mut owners, &a, itable, &block, 0b0011);
        p.note(&mut owners, &b, itable, &block, 0b1100);
        p.note(&mut owners, &a, itable, &block, 0b0001);
        assert_eq!(p.conflicts[Role::InodeTable as usize].load(Relaxed), 0, "disjoint chunks and one's own");
        p.note(&mut owners, &b, itable, &block, 0b0010);
        assert_eq!(p.conflicts[Role::InodeTable as usize].load(Relaxed), 1);
        p.end(&a);
        p.note(&mut owners, &b, itable, &block, 0b0001);
        assert_eq!(p.conflicts[Role::InodeTable as usize].load(Relaxed), 1, "a has ended");
        p.end(&b);
        assert_eq!(p.handles.load(Relaxed), 2);
        assert_eq!(p.handles_conflicting.load(Relaxed), 1);
    }

    #[test]
    fn bitmap_conflicts_count_as_shared_only_and_nodes_by_their_kind() {
        let p = Probe::new(geometry());
        let (a, b) = (p.begin(), p.begin());
        let mut owners = None;
        let bitmap = geometry().block_bitmap(1);
        p.note(&mut owners, &a, bitmap, &[0; 4096], 1);
        p.note(&mut owners, &b, bitmap, &[0; 4096], 1);
        let mut node = vec![0u8; 4096];
        node[..4].copy_from_slice(&NODE_MAGIC.to_le_bytes());
        node[4] = KIND_DIRENTS;
        assert_eq!(p.role(5000, &node), Role::DirNode);
        assert_eq!(p.role(3, &node), Role::Fixed);
        p.end(&a);
        p.end(&b);
        assert_eq!(p.handles_shared_only.load(Relaxed), 1);
        assert_eq!(p.handles_conflicting.load(Relaxed), 0);
    }
}
