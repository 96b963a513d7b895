//! The superblock: block 0, the first 512 bytes.
//!
//! ```text
//! off  size field
//!   0     8 magic "CAIRNFS\0"
//!   8     4 version (1)
//!  12     4 block_size_log2
//!  16     4 state (STATE_CLEAN | STATE_ERRORS)
//!  20     4 feature_compat   24 4 feature_incompat   28 4 feature_ro_compat
//!  32    16 uuid
//!  48     8 total_blocks
//!  56     4 blocks_per_group  60 4 inodes_per_group
//!  64     8 group_count
//!  72     8 gdt_start         80 8 gdt_blocks (the groups' descriptors,
//!           and up to `max_gdt_reserve` blocks more that mkfs reserves
//!           for `cairn resize` to describe new groups in; zero until used)
//!  88     8 journal_start     96 8 journal_blocks
//! 104     8 free_blocks      112 8 free_inodes   (summary; exact after clean unmount)
//! 120     8 next_ino (allocation hint)
//! 128     8 orphan_root (B+tree of inodes unlinked while open; 0 = empty)
//! 136     8 mkfs_time        144 8 last_mount_time  152 8 last_write_time
//! 160     4 mount_count      164 4 reserved
//! 168    16 hash_seed (directory name hash seed)
//! 184    32 label
//! 216     4 journal_groups (groups after group 0 the journal continues
//!           into, INCOMPAT_JOURNAL_GROUPS; 0 without it)
//! 220     4 backup_group (0 in the primary; in a backup copy, the group
//!           whose first block holds it: see `backup`)
//! 224     4 csum_seed (INCOMPAT_CSUM_SEED: the metadata checksums' seed,
//!           kept when `cairn tune` gave the file system a new UUID; 0
//!           without it: the seed is derived from the UUID)
//! 228     4 default_errors (0 unset, else ERRORS_*: what `-o errors=` is
//!           when a mount does not say; `cairn tune --errors`)
//! 232    64 mount_opts (default `-o` options, NUL-padded text, put before
//!           a mount's own; `cairn tune --mount-options`)
//! 296   212 reserved, zero
//! 508     4 crc32c of bytes 0..512 with this field zero (seed 0xffffffff)
//! ```
//! The superblock checksum is seeded with a constant, not the UUID, because
//! the UUID lives inside it.

use crate::checksum::crc_skipping;
use crate::codec::*;
use crate::error::{FormatError, Result};

/// Magic bytes at offset 0 of every cairn image.
pub const MAGIC: &[u8; 8] = b"CAIRNFS\0";
/// The format version this build writes and reads.
pub const VERSION: u32 = 2;
/// Bytes of block 0 the superblock occupies.
pub const SB_SIZE: usize = 512;
const CSUM_OFF: usize = 508;
const CSUM_SEED: u32 = 0xffff_ffff;

const _: () = {
    // The last field (mount_opts, 232..296) ends before the reserved area and the
    // checksum, which ends the structure; the superblock fits the smallest block.
    assert!(232 + 64 <= CSUM_OFF && CSUM_OFF + 4 == SB_SIZE);
    assert!(SB_SIZE <= crate::MIN_BLOCK_SIZE as usize);
};
/// The file system was unmounted cleanly (journal empty, counters exact).
pub const STATE_CLEAN: u32 = 1;
/// An error was detected while mounted; fsck should run.
pub const STATE_ERRORS: u32 = 2;
/// Incompatible feature: xattr values may be external (value blocks, see
/// `xattr`). mkfs sets it; on an image without it the engine keeps every
/// value inside its xattr block, as builds before it did.
pub const INCOMPAT_XATTR_EXTERNAL: u32 = 1;
/// Compatible feature: mkfs left every inode table but group 0's reading as
/// zeros. A group whose inode bitmap has never been written (`GD_INODE_UNINIT`)
/// then has an all-zero table, so the engine may start a table block it
/// takes its first inode from as zeros instead of reading it. Builds that do
/// not know the flag ignore it and read.
pub const COMPAT_ITABLES_ZEROED: u32 = 1;
/// Compatible feature: some inode has had chattr's immutable or append-only
/// flag (`inode::ATTR_IMMUTABLE`, `ATTR_APPEND`). The FUSE daemon then
/// answers OPEN, to refuse opening such a file for writing (see
/// `cairn_core::inode_flags`). Builds that do not know it ignore it.
pub const COMPAT_INODE_FLAGS: u32 = 2;
/// Incompatible feature: the journal does not fit group 0 and continues
/// through groups `1 ..= journal_groups`, each past its own bitmaps and inode
/// table (see `journal::JournalRegion`). Those groups hold no data blocks.
/// A build without it would take their blocks for data.
pub const INCOMPAT_JOURNAL_GROUPS: u32 = 2;
/// Incompatible feature: journal records may carry compressed region
/// descriptors (`journal`: `"CJDZ"`, the logged chunks as one zstd frame).
/// mkfs sets it; on an image without it the engine logs the chunks as they
/// are, so that builds before it can replay the log.
pub const INCOMPAT_JOURNAL_ZSTD: u32 = 4;
/// Incompatible feature: groups 1, 3, 5, 7, 9, 25, 27, 49, ... (ext4's
/// sparse_super set, less the journal's groups) begin with a backup copy of
/// the superblock, and their bitmaps and inode table follow it (see
/// `backup`). A build without it would look for the bitmaps one block early.
pub const INCOMPAT_BACKUP_SUPERBLOCKS: u32 = 8;
/// Incompatible feature: metadata checksums are seeded with `csum_seed`, not
/// with a hash of the UUID (ext4's metadata_csum_seed): `cairn tune --uuid`
/// sets it, so that a new UUID needs no block rewritten. A build without it
/// would find every checksum wrong.
pub const INCOMPAT_CSUM_SEED: u32 = 16;
/// `default_errors`: go on.
pub const ERRORS_CONTINUE: u32 = 1;
/// `default_errors`: abort the journal, read-only from then on.
pub const ERRORS_REMOUNT_RO: u32 = 2;
/// `default_errors`: fail every request.
pub const ERRORS_SHUTDOWN: u32 = 3;
/// Bytes of `mount_opts`.
pub const MOUNT_OPTS_LEN: usize = 64;
/// Smallest journal region a superblock may name (`journal_blocks`); the
/// journal module hands it on as `journal::MIN_JOURNAL_BLOCKS`.
pub const MIN_JOURNAL_BLOCKS: u64 = 64;

/// The most descriptor-table blocks beyond what the groups need that a file
/// system of block size `bs` may reserve for growth (ext4's cap on
/// `s_reserved_gdt_blocks`: a quarter of the block size in blocks).
pub fn max_gdt_reserve(bs: u64) -> u64 {
    bs / 4
}
/// Incompatible features this build understands.
pub const INCOMPAT_SUPPORTED: u32 = INCOMPAT_XATTR_EXTERNAL
    | INCOMPAT_JOURNAL_GROUPS
    | INCOMPAT_JOURNAL_ZSTD
    | INCOMPAT_BACKUP_SUPERBLOCKS
    | INCOMPAT_CSUM_SEED;

/// The decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub block_size_log2: u32,
    pub state: u32,
    pub feature_compat: u32,
    pub feature_incompat: u32,
    pub feature_ro_compat: u32,
    pub uuid: [u8; 16],
    pub total_blocks: u64,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub group_count: u64,
    pub gdt_start: u64,
    pub gdt_blocks: u64,
    pub journal_start: u64,
    pub journal_blocks: u64,
    pub free_blocks: u64,
    pub free_inodes: u64,
    pub next_ino: u64,
    pub orphan_root: u64,
    pub mkfs_time: u64,
    pub last_mount_time: u64,
    pub last_write_time: u64,
    pub mount_count: u32,
    pub hash_seed: [u8; 16],
    pub label: [u8; 32],
    pub journal_groups: u32,
    /// 0 in the primary; the group a backup copy sits at the start of.
    pub backup_group: u32,
    /// The checksum seed under `INCOMPAT_CSUM_SEED` (see [`Superblock::csum_seed`]).
    pub csum_seed: u32,
    /// 0, or `ERRORS_*`: the error behaviour of a mount that names none.
    pub default_errors: u32,
    /// Default mount options, NUL-padded.
    pub mount_opts: [u8; MOUNT_OPTS_LEN],
}

impl Default for Superblock {
    fn default() -> Self {
        Superblock {
            version: 0,
            block_size_log2: 0,
            state: 0,
            feature_compat: 0,
            feature_incompat: 0,
            feature_ro_compat: 0,
            uuid: [0; 16],
            total_blocks: 0,
            blocks_per_group: 0,
            inodes_per_group: 0,
            group_count: 0,
            gdt_start: 0,
            gdt_blocks: 0,
            journal_start: 0,
            journal_blocks: 0,
            free_blocks: 0,
            free_inodes: 0,
            next_ino: 0,
            orphan_root: 0,
            mkfs_time: 0,
            last_mount_time: 0,
            last_write_time: 0,
            mount_count: 0,
            hash_seed: [0; 16],
            label: [0; 32],
            journal_groups: 0,
            backup_group: 0,
            csum_seed: 0,
            default_errors: 0,
            mount_opts: [0; MOUNT_OPTS_LEN],
        }
    }
}

impl Superblock {
    /// The seed of every metadata checksum but the superblock's own: the
    /// stored seed under `INCOMPAT_CSUM_SEED`, else a hash of the UUID.
    pub fn csum_seed(&self) -> u32 {
        if self.feature_incompat & INCOMPAT_CSUM_SEED != 0 {
            self.csum_seed
        } else {
            crate::checksum::seed_from_uuid(&self.uuid)
        }
    }

    /// The default mount options as text (up to the first NUL).
    pub fn mount_opts_text(&self) -> String {
        let end = self.mount_opts.iter().position(|b| *b == 0).unwrap_or(MOUNT_OPTS_LEN);
        String::from_utf8_lossy(&self.mount_opts[..end]).into_owned()
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1u32 << self.block_size_log2
    }

    /// Journal blocks in each group after group 0 that the journal continues
    /// into: all of the group past its bitmaps and inode table.
    pub fn journal_segment_blocks(&self) -> u64 {
        let bs = u64::from(self.block_size());
        let itable = u64::from(self.inodes_per_group) * crate::inode::INODE_SIZE as u64 / bs;
        u64::from(self.blocks_per_group).saturating_sub(2 + itable)
    }

    /// Journal blocks in group 0, from `journal_start` on.
    pub fn journal_blocks_in_group0(&self) -> u64 {
        self.journal_blocks - u64::from(self.journal_groups) * self.journal_segment_blocks()
    }

    /// Total number of inodes.
    pub fn total_inodes(&self) -> u64 {
        self.group_count * u64::from(self.inodes_per_group)
    }

    /// True if `buf` starts with cairn's magic (no other check).
    pub fn has_magic(buf: &[u8]) -> bool {
        buf.len() >= 8 && &buf[..8] == MAGIC
    }

    /// Encodes into the first [`SB_SIZE`] bytes of `out` (which must be at least that long).
    pub fn encode(&self, out: &mut [u8]) {
        let b = &mut out[..SB_SIZE];
        b.fill(0);
        b[..8].copy_from_slice(MAGIC);
        put_u32(b, 8, self.version);
        put_u32(b, 12, self.block_size_log2);
        put_u32(b, 16, self.state);
        put_u32(b, 20, self.feature_compat);
        put_u32(b, 24, self.feature_incompat);
        put_u32(b, 28, self.feature_ro_compat);
        b[32..48].copy_from_slice(&self.uuid);
        put_u64(b, 48, self.total_blocks);
        put_u32(b, 56, self.blocks_per_group);
        put_u32(b, 60, self.inodes_per_group);
        put_u64(b, 64, self.group_count);
        put_u64(b, 72, self.gdt_start);
        put_u64(b, 80, self.gdt_blocks);
        put_u64(b, 88, self.journal_start);
        put_u64(b, 96, self.journal_blocks);
        put_u64(b, 104, self.free_blocks);
        put_u64(b, 112, self.free_inodes);
        put_u64(b, 120, self.next_ino);
        put_u64(b, 128, self.orphan_root);
        put_u64(b, 136, self.mkfs_time);
        put_u64(b, 144, self.last_mount_time);
        put_u64(b, 152, self.last_write_time);
        put_u32(b, 160, self.mount_count);
        b[168..184].copy_from_slice(&self.hash_seed);
        b[184..216].copy_from_slice(&self.label);
        put_u32(b, 216, self.journal_groups);
        put_u32(b, 220, self.backup_group);
        put_u32(b, 224, self.csum_seed);
        put_u32(b, 228, self.default_errors);
        b[232..232 + MOUNT_OPTS_LEN].copy_from_slice(&self.mount_opts);
        let c = crc_skipping(CSUM_SEED, b, CSUM_OFF);
        put_u32(b, CSUM_OFF, c);
    }

    /// Decodes and fully validates a superblock; `image_bytes` is the size of
    /// the image or device (the image must hold every block the superblock claims).
    pub fn decode(buf: &[u8], image_bytes: u64) -> Result<Superblock> {
        const W: &str = "superblock";
        if buf.len() < SB_SIZE || !Self::has_magic(buf) {
            return Err(FormatError::bad_magic(W, 0));
        }
        let b = &buf[..SB_SIZE];
        let stored = get_u32(b, CSUM_OFF);
        let computed = crc_skipping(CSUM_SEED, b, CSUM_OFF);
        if stored != computed {
            return Err(FormatError::Checksum { what: W, at: 0, stored, computed });
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[32..48]);
        let mut hash_seed = [0u8; 16];
        hash_seed.copy_from_slice(&b[168..184]);
        let mut label = [0u8; 32];
        label.copy_from_slice(&b[184..216]);
        let mut mount_opts = [0u8; MOUNT_OPTS_LEN];
        mount_opts.copy_from_slice(&b[232..232 + MOUNT_OPTS_LEN]);
        let sb = Superblock {
            version: get_u32(b, 8),
            block_size_log2: get_u32(b, 12),
            state: get_u32(b, 16),
            feature_compat: get_u32(b, 20),
            feature_incompat: get_u32(b, 24),
            feature_ro_compat: get_u32(b, 28),
            uuid,
            total_blocks: get_u64(b, 48),
            blocks_per_group: get_u32(b, 56),
            inodes_per_group: get_u32(b, 60),
            group_count: get_u64(b, 64),
            gdt_start: get_u64(b, 72),
            gdt_blocks: get_u64(b, 80),
            journal_start: get_u64(b, 88),
            journal_blocks: get_u64(b, 96),
            free_blocks: get_u64(b, 104),
            free_inodes: get_u64(b, 112),
            next_ino: get_u64(b, 120),
            orphan_root: get_u64(b, 128),
            mkfs_time: get_u64(b, 136),
            last_mount_time: get_u64(b, 144),
            last_write_time: get_u64(b, 152),
            mount_count: get_u32(b, 160),
            hash_seed,
            label,
            journal_groups: get_u32(b, 216),
            backup_group: get_u32(b, 220),
            csum_seed: get_u32(b, 224),
            default_errors: get_u32(b, 228),
            mount_opts,
        };
        sb.validate(image_bytes)?;
        Ok(sb)
    }

    fn validate(&self, image_bytes: u64) -> Result<()> {
        let bad = |d: String| Err(FormatError::corrupt("superblock", 0, d));
        if self.version != VERSION {
            return Err(FormatError::Incompatible(format!(
                "format version {} (this build reads version {VERSION})",
                self.version
            )));
        }
        if self.feature_incompat & !INCOMPAT_SUPPORTED != 0 {
            return Err(FormatError::Incompatible(format!(
                "unknown incompatible features {:#x}",
                self.feature_incompat & !INCOMPAT_SUPPORTED
            )));
        }
        if !(10..=16).contains(&self.block_size_log2) {
            return bad(format!("block size 2^{} out of range", self.block_size_log2));
        }
        let bs = u64::from(self.block_size());
        let bpg = u64::from(self.blocks_per_group);
        if bpg < 64 || bpg > bs * 8 || bpg % 64 != 0 {
            return bad(format!("blocks per group {bpg} out of range"));
        }
        let ipb = bs / crate::inode::INODE_SIZE as u64;
        let ipg = u64::from(self.inodes_per_group);
        if ipg == 0 || ipg > bs * 8 || ipg % ipb != 0 {
            return bad(format!("inodes per group {ipg} out of range"));
        }
        if self.total_blocks < 16 || self.total_blocks > (1u64 << 48) {
            return bad(format!("block count {} out of range", self.total_blocks));
        }
        let groups = self.total_blocks.div_ceil(bpg);
        if self.group_count != groups {
            return bad(format!(
                "group count {} does not match {} blocks / {} per group",
                self.group_count, self.total_blocks, bpg
            ));
        }
        let gdt_need = (groups * crate::group_desc::GD_SIZE as u64).div_ceil(bs);
        if self.gdt_start != 1 || self.gdt_blocks < gdt_need || self.gdt_blocks > gdt_need + max_gdt_reserve(bs) {
            return bad(format!(
                "group descriptor table at {}+{} (want 1+{gdt_need}, up to {} more for growth)",
                self.gdt_start,
                self.gdt_blocks,
                max_gdt_reserve(bs)
            ));
        }
        let spans = self.feature_incompat & INCOMPAT_JOURNAL_GROUPS != 0;
        let k = u64::from(self.journal_groups);
        if spans != (k > 0) || (k > 0 && (k.saturating_add(1) >= groups || self.journal_segment_blocks() == 0)) {
            return bad(format!("journal continues into {k} groups (of {groups})"));
        }
        let in_group0 = self.journal_blocks.checked_sub(k.saturating_mul(self.journal_segment_blocks()));
        if self.journal_start != self.gdt_start + self.gdt_blocks
            || self.journal_blocks < MIN_JOURNAL_BLOCKS
            || in_group0.is_none_or(|j0| j0 == 0 || self.journal_start.saturating_add(j0) > bpg.min(self.total_blocks))
        {
            return bad(format!(
                "journal at {}+{} ({k} more groups) out of range",
                self.journal_start, self.journal_blocks
            ));
        }
        let backups = self.feature_incompat & INCOMPAT_BACKUP_SUPERBLOCKS != 0;
        let bg = u64::from(self.backup_group);
        if bg != 0 && (!backups || bg >= groups || !crate::sparse::is_sparse_group(bg) || bg <= k) {
            return bad(format!("a backup copy claims to sit in group {bg}, which holds none"));
        }
        if self.free_blocks > self.total_blocks || self.free_inodes > self.total_inodes() {
            return bad("free counters exceed totals".into());
        }
        if self.total_blocks.saturating_mul(bs) > image_bytes {
            return bad(format!(
                "image is truncated: superblock says {} bytes, image has {image_bytes}",
                u128::from(self.total_blocks) * u128::from(bs)
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Superblock {
        Superblock {
            version: VERSION,
            block_size_log2: 12,
            blocks_per_group: 32768,
            inodes_per_group: 8192,
            total_blocks: 65536,
            group_count: 2,
            gdt_start: 1,
            gdt_blocks: 1,
            journal_start: 2,
            journal_blocks: 1024,
            free_blocks: 1000,
            free_inodes: 100,
            uuid: [3; 16],
            ..Default::default()
        }
    }

    #[test]
    fn roundtrip() {
        let sb = sample();
        let mut buf = vec![0u8; 4096];
        sb.encode(&mut buf);
        assert_eq!(Superblock::decode(&buf, 65536 * 4096).unwrap(), sb);
    }

    #[test]
    fn the_descriptor_table_may_hold_a_reserve_for_growth_within_bounds() {
        let decode = |gdt_blocks: u64| {
            let sb = Superblock { gdt_blocks, journal_start: 1 + gdt_blocks, ..sample() };
            let mut buf = vec![0u8; 4096];
            sb.encode(&mut buf);
            Superblock::decode(&buf, u64::MAX)
        };
        assert!(decode(1).is_ok() && decode(1 + 1024).is_ok(), "no reserve and the largest");
        assert!(decode(0).is_err(), "a table too small for the groups");
        assert!(decode(1 + 1025).is_err(), "a reserve past a quarter of the block size");
    }

    #[test]
    fn detects_corruption_and_truncation() {
        let sb = sample();
        let mut buf = vec![0u8; 4096];
        sb.encode(&mut buf);
        assert!(Superblock::decode(&buf, 4096).is_err(), "truncated image accepted");
        buf[50] ^= 1;
        assert!(matches!(Superblock::decode(&buf, u64::MAX), Err(FormatError::Checksum { .. })));
        assert_eq!(Superblock::decode(&[0u8; 512], u64::MAX), Err(FormatError::BadMagic { what: "superblock", at: 0 }));
    }

    #[test]
    fn a_journal_across_groups_needs_its_feature_and_a_group_left_for_data() {
        let decode = |sb: &Superblock| {
            let mut buf = vec![0u8; 4096];
            sb.encode(&mut buf);
            Superblock::decode(&buf, u64::MAX)
        };
        // Four groups; the journal fills group 0's room (30,000 blocks) and
        // group 1 past its 514 blocks of metadata (bitmaps, inode table).
        let mut sb = Superblock { total_blocks: 4 * 32768, group_count: 4, ..sample() };
        assert_eq!(sb.journal_segment_blocks(), 32768 - 514);
        sb.journal_blocks = 30_000 + sb.journal_segment_blocks();
        sb.journal_groups = 1;
        assert!(decode(&sb).is_err(), "groups without the feature");
        sb.feature_incompat |= INCOMPAT_JOURNAL_GROUPS;
        let back = decode(&sb).unwrap();
        assert_eq!((back.journal_groups, back.journal_blocks_in_group0()), (1, 30_000));
        // The feature without groups, every group but the last, and more
        // than group 0 holds are all refused.
        assert!(decode(&Superblock { journal_groups: 0, ..sb.clone() }).is_err());
        assert!(decode(&Superblock { journal_groups: 3, ..sb.clone() }).is_err());
        assert!(decode(&Superblock { journal_blocks: sb.journal_blocks + 3000, ..sb.clone() }).is_err());
        assert!(decode(&Superblock { journal_blocks: sb.journal_segment_blocks(), ..sb.clone() }).is_err());
        // Groups whose metadata leaves no room for the journal (a damaged
        // geometry) would map every ring position to nothing.
        let full = Superblock {
            blocks_per_group: 512,
            inodes_per_group: 8192,
            total_blocks: 4 * 512,
            journal_blocks: 300,
            ..sb.clone()
        };
        assert_eq!(full.journal_segment_blocks(), 0);
        assert!(decode(&full).is_err());
    }

    /// The checksum seed follows the UUID until `INCOMPAT_CSUM_SEED` keeps
    /// it in the superblock (a UUID changed by `cairn tune`); it round-trips.
    #[test]
    fn the_checksum_seed_is_the_uuids_unless_kept() {
        let sb = sample();
        assert_eq!(sb.csum_seed(), crate::checksum::seed_from_uuid(&sb.uuid));
        let mut mount_opts = [0u8; MOUNT_OPTS_LEN];
        mount_opts[..11].copy_from_slice(b"commit=10,d");
        let kept = Superblock {
            uuid: [9; 16],
            csum_seed: sb.csum_seed(),
            feature_incompat: sb.feature_incompat | INCOMPAT_CSUM_SEED,
            default_errors: ERRORS_SHUTDOWN,
            mount_opts,
            ..sb.clone()
        };
        let mut b = vec![0u8; SB_SIZE];
        kept.encode(&mut b);
        let back = Superblock::decode(&b, u64::MAX).unwrap();
        assert_eq!(back, kept);
        assert_eq!(back.csum_seed(), sb.csum_seed());
        assert_ne!(back.csum_seed(), crate::checksum::seed_from_uuid(&back.uuid));
        assert_eq!(back.mount_opts_text(), "commit=10,d");
    }

    #[test]
    fn extreme_fields_are_refused_without_overflow() {
        // Found by the superblock fuzz target: a journal length near 2^64
        // overflowed the range sum (and, wrapped in a release build, passed).
        let decode = |sb: &Superblock, image_bytes| {
            let mut buf = vec![0u8; SB_SIZE];
            sb.encode(&mut buf);
            Superblock::decode(&buf, image_bytes)
        };
        let sb = Superblock { journal_blocks: u64::MAX - 1, ..sample() };
        assert!(decode(&sb, u64::MAX).is_err());
    }
}
