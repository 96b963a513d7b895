//! The problem table, as e2fsck's `problem.c`: every kind of inconsistency
//! fsck reports has a code, the pass that finds it, whether preen (`-p`)
//! may fix it without asking, and a line saying what it is. Reports print
//! the code before each message (`I05 inode 12 is damaged ...`), so tests
//! and people can tell kinds apart without parsing prose; `Report::codes`
//! lists what a check found.
//!
//! Codes are stable: a kind that goes away leaves its code unused, a new
//! kind takes the next free number of its pass. The letter is the pass:
//! S superblock, J journal, G group descriptors, I inodes (pass 1), B block
//! ownership (1b), D directories (2), L connectivity, link counts and the
//! orphan list (3/4), M bitmaps and summary counters (5).

use serde::Serialize;
use std::fmt;

/// The pass that found a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pass {
    /// Superblock and geometry.
    Superblock,
    /// Journal replay.
    Journal,
    /// Group descriptors.
    Groups,
    /// Inodes, extents, trees, xattr blocks (pass 1).
    Inodes,
    /// Block ownership: duplicates (pass 1b).
    Blocks,
    /// Directory structure (pass 2).
    Directories,
    /// Connectivity, link counts and the orphan list (passes 3 and 4).
    Links,
    /// Bitmaps and summary counters (pass 5).
    Bitmaps,
}

impl fmt::Display for Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pass::Superblock => "superblock",
            Pass::Journal => "journal",
            Pass::Groups => "group descriptors",
            Pass::Inodes => "inodes",
            Pass::Blocks => "block ownership",
            Pass::Directories => "directories",
            Pass::Links => "link counts",
            Pass::Bitmaps => "bitmaps and counters",
        })
    }
}

macro_rules! problems {
    ($($name:ident = $id:literal, $pass:ident, $preen:literal, $what:literal;)*) => {
        /// A kind of inconsistency (see the module essay).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        pub enum Code {
            $(
                #[doc = $what]
                $name,
            )*
        }

        impl Code {
            /// Every code, in table order.
            pub const ALL: &'static [Code] = &[$(Code::$name,)*];

            /// The code as printed (`I05`).
            pub fn id(self) -> &'static str {
                match self { $(Code::$name => $id,)* }
            }

            /// The pass that finds it.
            pub fn pass(self) -> Pass {
                match self { $(Code::$name => Pass::$pass,)* }
            }

            /// Preen may fix it without asking: a counter, a bitmap bit, a
            /// backup copy; nothing a file depends on.
            pub fn preen_safe(self) -> bool {
                match self { $(Code::$name => $preen,)* }
            }

            /// What it is, in a line.
            pub fn what(self) -> &'static str {
                match self { $(Code::$name => $what,)* }
            }
        }
    };
}

problems! {
    SbOrphanRootRange = "S01", Superblock, false, "the orphan list's root lies outside the data area";
    SbUnknownState = "S02", Superblock, false, "the superblock's state has unknown bits";
    SbBackupCopy = "S03", Superblock, true, "a backup superblock does not verify or differs from the primary";
    SbPrimaryDamaged = "S04", Superblock, false, "the primary superblock does not verify: a backup copy stands in";
    SbImageShort = "S05", Superblock, false, "the image file is shorter than its file system (truncated): extended";
    JournalSuperDamaged = "J01", Journal, false, "the journal superblock is damaged";
    JournalRecordDamaged = "J02", Journal, false, "a journal record is damaged and verified records follow it";
    GdDamaged = "G01", Groups, false, "a group descriptor does not verify";
    GdLocations = "G02", Groups, false, "a group descriptor places bitmaps or inode table off the layout";
    GdUnknownFlags = "G03", Groups, false, "a group descriptor has unknown flags";
    GdGroup0Uninit = "G04", Groups, false, "group 0's inode bitmap is marked uninitialised";
    GdCountersRange = "G05", Groups, true, "a group descriptor's free counters exceed the group";
    RootMarkedFree = "I01", Inodes, false, "the root directory is marked free in the inode bitmap";
    EmptySlotMarkedUsed = "I02", Inodes, false, "an inode bitmap bit is set over an empty inode slot";
    InodeChecksumOnly = "I03", Inodes, false, "an inode whose only fault is its checksum";
    RootDamaged = "I04", Inodes, false, "the root directory's inode does not decode";
    InodeDamaged = "I05", Inodes, false, "an inode does not decode";
    RootMissing = "I06", Inodes, false, "the root directory is missing or not a directory";
    ExtentInvalid = "I07", Inodes, false, "an extent is out of range, overlaps another or lies outside the data area";
    InodeUnknownFlags = "I08", Inodes, false, "an inode has unknown flags";
    ExtentValueSize = "I09", Inodes, false, "an extent tree leaf holds a value of the wrong size";
    SymlinkLength = "I10", Inodes, false, "a symlink's target length is invalid";
    SpecialOwnsBlocks = "I11", Inodes, false, "a device, FIFO or socket owns data blocks";
    XattrPointerRange = "I12", Inodes, false, "an inode's xattr block pointer lies outside the data area";
    BlockCount = "I13", Inodes, false, "an inode's block count differs from what it owns";
    XattrBlockDamaged = "I14", Inodes, false, "an xattr block is damaged or unreadable";
    XattrValueDamaged = "I15", Inodes, false, "an external xattr value is damaged";
    TreeDamaged = "I16", Inodes, false, "a B+tree node is damaged, misplaced, out of order or reached twice";
    DirLeafRecovered = "I17", Inodes, false, "directory entries recovered from a leaf the damaged tree no longer reaches";
    ExtentLeafRecovered = "I18", Inodes, false, "extents recovered from a leaf the damaged tree no longer reaches";
    TreeRebuilt = "I19", Links, false, "a damaged tree rebuilt from what could be read";
    RebuildNoSpace = "I20", Links, false, "no free block is left to rebuild a damaged tree";
    BlockClaimedTwice = "B01", Blocks, false, "blocks claimed by two owners, or twice by one";
    DirentDamaged = "D01", Directories, false, "a directory entry does not decode";
    DirentHashMismatch = "D02", Directories, false, "a directory entry is stored under a key its name does not hash to";
    DirentDuplicateName = "D03", Directories, false, "a name appears twice in one directory";
    DirentBadTarget = "D04", Directories, false, "a directory entry points to an invalid or free inode";
    DirentPointsToRoot = "D05", Directories, false, "a directory entry points to the root directory";
    DirentType = "D06", Directories, false, "a directory entry's file type differs from its inode's";
    DirentTargetMarkedFree = "D07", Directories, false, "a named inode is marked free in the inode bitmap";
    DirentSalvageDropped = "D08", Directories, false, "an entry of a damaged leaf fails a check and is dropped";
    DirEntryCount = "D09", Directories, false, "a directory's entry count differs from its tree";
    RootParent = "D10", Directories, false, "the root directory's '..' does not point to itself";
    DirMultipleParents = "D11", Directories, false, "a directory is named in more than one directory";
    DirParentPointer = "D12", Directories, false, "a directory's '..' differs from the directory that names it";
    DirUnreachable = "D13", Directories, false, "a directory is not reachable from the root";
    LeafRewriteFailed = "D14", Directories, false, "a directory leaf could not be rewritten";
    OrphanValueSize = "L01", Links, false, "an orphan list entry has a value of the wrong size";
    OrphanListedButLinked = "L02", Links, false, "an inode on the orphan list has links but no entry";
    InodeLost = "L03", Links, false, "an inode in use that no entry names";
    UnlinkedNotOrphan = "L04", Links, false, "an inode without links that is not on the orphan list";
    LinkCount = "L05", Links, false, "an inode's link count differs from the entries naming it";
    OrphanFlagMissing = "L06", Links, false, "an inode on the orphan list lacks the orphan flag";
    OrphanFlagStray = "L07", Links, false, "an inode has the orphan flag but is not on the orphan list";
    OrphanNotInUse = "L08", Links, false, "the orphan list names an inode not in use";
    XattrRefcount = "L09", Links, false, "an xattr block's refcount differs from the inodes pointing to it";
    Reconnected = "L10", Links, false, "an inode in no directory, reconnected to /lost+found";
    LostFoundNoInode = "L11", Links, false, "/lost+found is missing and no inode is free to create it";
    LostFoundCreated = "L12", Links, false, "/lost+found was missing";
    RepairNotApplied = "L13", Links, false, "a repair could not be applied to an inode that no longer decodes";
    OrphanRemovalFailed = "L14", Links, false, "stale orphan list entries could not be removed";
    BlockBitmapChecksum = "M01", Bitmaps, true, "a block bitmap's checksum differs from its descriptor's";
    BlocksUsedMarkedFree = "M02", Bitmaps, true, "blocks in use marked free in the block bitmap";
    BlockBitmapMetadata = "M03", Bitmaps, true, "a block bitmap leaves fixed metadata or padding clear";
    BlocksMarkedUsedUnowned = "M04", Bitmaps, true, "blocks marked used that nothing owns";
    GdFreeBlocks = "M05", Bitmaps, true, "a descriptor's free block count differs from its bitmap";
    InodeBitmapChecksum = "M06", Bitmaps, true, "an inode bitmap's checksum differs from its descriptor's";
    InodeUsedMarkedFree = "M07", Bitmaps, true, "an inode in use marked free in the inode bitmap";
    ReservedInodeFree = "M08", Bitmaps, true, "a reserved inode is not marked in use";
    InodeBitmapPadding = "M09", Bitmaps, true, "an inode bitmap's padding bits are not set";
    GdFreeInodes = "M10", Bitmaps, true, "a descriptor's free inode count differs from its bitmap";
    GdUsedDirs = "M11", Bitmaps, true, "a descriptor's directory count differs from its group";
    SbFreeBlocks = "M12", Bitmaps, true, "the superblock's free block count differs from the bitmaps";
    SbFreeInodes = "M13", Bitmaps, true, "the superblock's free inode count differs from the bitmaps";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_lettered_by_pass() {
        let mut ids: Vec<&str> = Code::ALL.iter().map(|c| c.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Code::ALL.len(), "a code is used twice");
        for c in Code::ALL {
            let letter = match c.pass() {
                Pass::Superblock => 'S',
                Pass::Journal => 'J',
                Pass::Groups => 'G',
                Pass::Inodes => 'I',
                Pass::Blocks => 'B',
                Pass::Directories => 'D',
                // Tree rebuilds are reported with the reconnections they
                // come with, and keep their pass-1 letter.
                Pass::Links if matches!(c, Code::TreeRebuilt | Code::RebuildNoSpace) => 'I',
                Pass::Links => 'L',
                Pass::Bitmaps => 'M',
            };
            assert!(c.id().starts_with(letter), "{c:?} is {} in pass {}", c.id(), c.pass());
            assert_eq!(
                c.preen_safe(),
                matches!(letter, 'M') || matches!(c, Code::SbBackupCopy | Code::GdCountersRange)
            );
        }
    }
}
