//! The state one check builds up, pass by pass.
//!
//! ## Purpose
//! fsck is a pipeline of passes over one image (e2fsck's organisation):
//!
//! ```text
//! superblock ─ journal replay ─ groups ─ pass 1 inodes ─ orphan list
//!   ─ pass 2 directories ─ pass 1b duplicate blocks ─ pass 3 salvage
//!   (repair: rebuild damaged directories, reconnect to /lost+found)
//!   ─ passes 3/4 links
//!   ─ repairs of objects ─ pass 5 bitmaps and counters
//! ```
//!
//! Each pass reads the image through [`Ctx::img`] and leaves its conclusions
//! here for the later ones: each group's descriptor ([`Group`], loaded and
//! checked by `groups`), the in-use inodes and what is known of each
//! ([`InodeInfo`]), every claim of a block by an owner ([`Claim`]), the
//! directory entries found in directory trees ([`DirentRec`]), the xattr
//! blocks and who points at them ([`XattrInfo`]), the orphan list, and the
//! repairs decided so far ([`InodeFix`] and friends).
//!
//! ## Memory
//! Everything is proportional to what is *in use* — in-use inodes, extents,
//! entries — never to the size of the file system, so a 16 TiB image that is
//! mostly uninitialised groups costs no more than the few groups it uses.
//!
//! ## Invariants
//! * `inodes` holds exactly the inodes pass 1 found marked in use (plus any
//!   that pass 2 proved in use despite a clear bitmap bit: `resurrected`),
//!   excluding the reserved inodes `2..FIRST_INO`.
//! * `incomplete` is set as soon as any owner's blocks could not all be
//!   enumerated (an unreadable inode or tree node): from then on, a block
//!   marked used that nobody claims may belong to the damaged object, so
//!   pass 5 never frees such blocks.

use crate::image::Image;
use crate::report::Report;
use cairn_format::group_desc::{GroupDesc, GD_BLOCK_UNINIT, GD_INODE_UNINIT};
use cairn_format::layout::Geometry;
use cairn_format::superblock::Superblock;
use std::collections::{BTreeMap, HashMap};

/// Who claims a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// File data (or long symlink target) of an inode.
    Data(u64),
    /// A node of an inode's extent tree.
    ExtentNode(u64),
    /// A node of a directory's entry tree.
    DirNode(u64),
    /// An xattr block (shared by the inodes listed in `Ctx::xattrs`).
    Xattr(u64),
    /// A value block of an external value held by this xattr block.
    XattrValue(u64),
    /// A node of the orphan list.
    Orphans,
}

impl Owner {
    /// The inode this claim belongs to, if any.
    pub fn ino(&self) -> Option<u64> {
        match self {
            Owner::Data(i) | Owner::ExtentNode(i) | Owner::DirNode(i) => Some(*i),
            _ => None,
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Data(i) => write!(f, "inode {i} (file data)"),
            Owner::ExtentNode(i) => write!(f, "inode {i} (extent tree)"),
            Owner::DirNode(i) => write!(f, "directory {i} (entry tree)"),
            Owner::Xattr(b) => write!(f, "xattr block {b}"),
            Owner::XattrValue(b) => write!(f, "xattr block {b} (external values)"),
            Owner::Orphans => write!(f, "the orphan list"),
        }
    }
}

/// One group's descriptor and what pass 0 concluded about it.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub gd: GroupDesc,
    /// The descriptor must be rewritten (bad checksum or fields).
    pub gd_dirty: bool,
}

impl Group {
    /// The block bitmap was never written.
    pub fn block_uninit(&self) -> bool {
        self.gd.flags & GD_BLOCK_UNINIT != 0
    }

    /// The inode bitmap was never written.
    pub fn inode_uninit(&self) -> bool {
        self.gd.flags & GD_INODE_UNINIT != 0
    }
}

/// A run of blocks claimed by one owner.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    pub start: u64,
    pub len: u64,
    pub owner: Owner,
}

/// What pass 1 learnt about one in-use inode.
#[derive(Debug, Clone, Default)]
pub struct InodeInfo {
    /// The inode could not be decoded (checksum, type): nothing else is known.
    pub bad: bool,
    /// Some of its structure is damaged beyond what fsck repairs (bad extent,
    /// unreadable tree node): its block count is not checked or rewritten.
    pub damaged: bool,
    /// A repair clears it (pass 1 decided: an unreadable symlink, a special
    /// file owning blocks); it never joins the live set.
    pub clear: bool,
    pub mode: u32,
    pub nlink: u32,
    pub flags: u32,
    pub parent: u64,
    /// The `entries` field (directories).
    pub entries: u64,
    /// Entries found in its tree (directories).
    pub dirents_found: u64,
    /// Directory entries pointing at it (pass 2).
    pub refs: u64,
    /// Entries in it that point at directories (pass 2).
    pub subdirs: u64,
    /// Directories holding an entry for it (directories only; pass 2).
    pub parents: Vec<u64>,
    /// Reachable from the root (pass 2).
    pub reachable: bool,
    /// Its xattr block (0 = none).
    pub xattr_block: u64,
    /// Marked free in the inode bitmap but proven in use (pass 2).
    pub resurrected: bool,
    /// A repair frees it.
    pub freed: bool,
    /// Its tree (a directory's entries, a file's extents) could not be read
    /// in full (some node is damaged). A repair rebuilds the tree from what
    /// could be read (`salvage`), if nothing else in the inode is damaged.
    pub tree_damaged: bool,
    /// Blocks pass 1 counted for it, and how many of them are nodes of its
    /// own tree (a rebuild replaces those).
    pub counted: u64,
    pub tree_nodes: u64,
    /// The extents that could be read of a damaged extent tree, as (key,
    /// value) pairs.
    pub tree_entries: Vec<(u64, Vec<u8>)>,
}

impl InodeInfo {
    /// `S_IFMT` bits.
    pub fn file_type(&self) -> u32 {
        self.mode & cairn_format::inode::S_IFMT
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        !self.bad && self.file_type() == cairn_format::inode::S_IFDIR
    }
}

/// One directory entry as found in a directory's tree.
#[derive(Debug, Clone)]
pub struct DirentRec {
    pub dir: u64,
    /// The leaf block holding it.
    pub leaf: u64,
    pub key: u64,
    pub value: Vec<u8>,
    /// From a leaf whose checksum failed (repair only): kept only if it
    /// passes every entry check, dropped otherwise.
    pub salvaged: bool,
}

/// An xattr block and the inodes pointing at it.
#[derive(Debug, Clone, Default)]
pub struct XattrInfo {
    /// Decoded and verified.
    pub ok: bool,
    /// Its refcount field (when ok).
    pub refcount: u32,
    pub inodes: Vec<u64>,
    /// Blocks each inode pointing here counts: the block and the value
    /// blocks of its verified external values (`None`: not known, the
    /// block or one of its values is damaged and not repaired).
    pub footprint: Option<u64>,
}

/// Field rewrites decided for one inode.
#[derive(Debug, Clone, Default)]
pub struct InodeFix {
    pub nlink: Option<u32>,
    pub blocks: Option<u64>,
    pub parent: Option<u64>,
    pub entries: Option<u64>,
    /// A new xattr block pointer (0: its damaged block is dropped).
    pub xattr_block: Option<u64>,
    /// A new root for its tree (a rebuilt directory).
    pub tree_root: Option<u64>,
    /// Its inline extents less the invalid ones.
    pub inline_extents: Option<Vec<cairn_format::extent::Extent>>,
    pub set_flags: u32,
    pub clear_flags: u32,
}

/// A change to one directory entry.
#[derive(Debug, Clone, Copy)]
pub enum DirentFix {
    /// Rewrite its file type.
    Dtype(u8),
    /// Remove it.
    Remove,
}

/// The state of one check.
pub struct Ctx<'a> {
    pub img: Image<'a>,
    pub sb: Superblock,
    pub geo: Geometry,
    pub seed: u32,
    pub repair: bool,
    pub report: Report,
    pub groups: Vec<Group>,
    pub inodes: HashMap<u64, InodeInfo>,
    pub claims: Vec<Claim>,
    pub dirents: Vec<DirentRec>,
    pub xattrs: HashMap<u64, XattrInfo>,
    /// Inodes on the orphan list → the leaf holding each.
    pub orphans: BTreeMap<u64, u64>,
    /// Some owner's blocks could not all be enumerated.
    pub incomplete: bool,
    /// Directories whose entry tree could not be read in full: ownership is
    /// incomplete while one is left unrebuilt (see `ownership_incomplete`).
    pub incomplete_trees: std::collections::BTreeSet<u64>,
    /// Directories whose entry tree a repair rewrites, with the entries to
    /// add to it (`salvage`).
    pub rebuilds: BTreeMap<u64, Vec<(u64, Vec<u8>)>>,
    /// Inodes whose only fault is their checksum: a repair rewrites it.
    pub checksum_fixes: Vec<u64>,
    /// Inodes that do not decode: a repair zeroes their slot (pass 5 clears
    /// their bit and frees what nobody else claims).
    pub cleared: Vec<u64>,
    /// Xattr blocks that do not decode, dropped from their inodes (repair).
    pub dropped_xattrs: std::collections::BTreeSet<u64>,
    /// The superblock must be rewritten (repair).
    pub sb_dirty: bool,
    pub inode_fixes: BTreeMap<u64, InodeFix>,
    pub dirent_fixes: Vec<(u64, u64, u64, DirentFix)>,
    pub xattr_fixes: BTreeMap<u64, u32>,
    /// Entries (namespace, name) to drop from xattr blocks: their external
    /// values are damaged.
    pub xattr_drops: BTreeMap<u64, Vec<(u8, Vec<u8>)>>,
    /// Orphan-list keys to remove: (leaf, ino).
    pub orphan_removals: Vec<(u64, u64)>,
    /// The caller's progress callback (`Options::progress`).
    pub progress: Option<crate::progress::ProgressHook>,
}

impl Ctx<'_> {
    /// The fix record of `ino`, created on first use.
    pub fn fix(&mut self, ino: u64) -> &mut InodeFix {
        self.inode_fixes.entry(ino).or_default()
    }

    /// Whether some owner's blocks could not all be enumerated, so that a
    /// block marked used that nobody claims may still be someone's.
    pub fn ownership_incomplete(&self) -> bool {
        self.incomplete || !self.incomplete_trees.is_empty()
    }

    /// Records a claim.
    pub fn claim(&mut self, start: u64, len: u64, owner: Owner) {
        self.claims.push(Claim { start, len, owner });
    }
}

impl Ctx<'_> {
    /// Tells the progress callback, if any, that `done` of `total` steps of
    /// `what` are done.
    pub fn progress(&self, what: &str, done: u64, total: u64) {
        if let Some(p) = &self.progress {
            p.tell(what, done, total);
        }
    }
}
