//! The crash-point harness on encrypted images (#54).
//!
//! The image is made as `cairn mkfs --encrypt` makes it: the header and its
//! copy on the raw device ([`crypt::create`]), then mkfs through the
//! encrypting device. The workload runs on a `CryptDevice` over the
//! recorder, so what is recorded, and what every crash state is built from,
//! is ciphertext: writes, random subsets of the writes in flight and torn
//! writes land on the raw bytes as they would on the disk beneath. Each
//! crash state is then unlocked with the key from its own header
//! ([`crypt::open`], as `cairn mount --key-file`), checked by fsck through
//! the decrypting device and mounted on it, and compared with the
//! workload's snapshots as a plain image's.
//!
//! ## Torn writes
//! XTS encrypts each block as one unit: a block torn at sector granularity
//! holds sectors of two ciphertexts and decrypts to neither the old nor the
//! new bytes, as over dm-crypt with a sector size of one cairn block. The
//! journal's records, commit blocks and journal superblock carry checksums
//! (a garbled one ends the log, as a torn one does on a plain image), and
//! checkpointed metadata goes home only while its record is still in the
//! log (replay rewrites it). File data overwritten in place (the overwrite
//! fast path) has no checksum and no record: a torn block of it reads as
//! garbage. [`super::acceptable`] lets exactly that through on an encrypted
//! image (one whole file block, of a state with a torn write, that a later
//! operation overwrote), and counts it; docs/encryption.md says so.
//!
//! ## Cost
//! A fraction of the plain configurations' crash states (see the tests), so
//! that the whole of this file stays well under the harness's other runs.

use super::*;
use cairn_format::crypt_header::{Argon2Cost, DATA_OFFSET};
use cairn_format::journal::COMMIT_MAGIC;
use zeroize::Zeroizing;

/// A cheap key derivation: the slot's cost is not under test here.
const COST: Argon2Cost = Argon2Cost { memory_kib: 64, passes: 1, lanes: 1 };

/// The images' key file.
pub(super) fn secret() -> crypt::Secret {
    crypt::Secret::key_file(Zeroizing::new(b"the crash harness's key".to_vec())).unwrap()
}

/// A new encrypted image of 16 MiB of file system (the plain
/// configurations' size) and the header region in front, opened for mkfs.
pub(super) fn create(block_size: u32) -> CryptDevice<MemDevice> {
    crypt::create(MemDevice::new((16 << 20) + DATA_OFFSET), block_size, &secret(), COST).unwrap()
}

/// The encrypted image on `raw`, unlocked with the harness's key.
pub(super) fn open<D: BlockDevice>(raw: D) -> CryptDevice<D> {
    crypt::open(raw, &secret(), Discards::Refused).unwrap_or_else(|e| panic!("the crash state does not unlock: {e}"))
}

/// What every recording on an encrypted image must show: the header region
/// is never written (so each crash state has the header it was made with),
/// every write is of whole blocks past it, and none is plaintext (no commit
/// block's magic at a block's start, though every workload commits).
pub(super) fn check_recording(cfg: &Config, plan: &CrashPlan) {
    let bs = cfg.block_size as usize;
    let mut writes = 0;
    for op in &plan.ops {
        let Op::Write(off, data) = op else { continue };
        assert!(*off >= DATA_OFFSET, "a write at byte {off}, in the header region");
        assert!((off - DATA_OFFSET).is_multiple_of(bs as u64) && data.len().is_multiple_of(bs), "a write of a piece");
        let magic = COMMIT_MAGIC.to_le_bytes();
        assert!(!data.chunks(bs).any(|b| b.starts_with(&magic)), "a commit block written in plaintext");
        writes += 1;
    }
    assert!(writes > 0);
}

const ENCRYPTED: Config = Config { name: "encrypted", encrypted: true, ..NORMAL };

fn tiny_journal_encrypted() -> Config {
    Config { name: "tiny journal, encrypted", encrypted: true, ..tiny_journal() }
}

/// The 1 KiB blocks of the tiny cache: a torn write (up to 3.5 KiB of it)
/// spans whole XTS blocks and garbles only the last one it reaches.
const TINY_CACHE_ENCRYPTED: Config = Config { name: "tiny cache, encrypted", encrypted: true, ..TINY_CACHE };

#[test]
fn named_workload_survives_every_crash_point_encrypted() {
    named_workload(&ENCRYPTED);
}

#[test]
fn named_workload_survives_every_crash_point_tiny_journal_encrypted() {
    named_workload(&tiny_journal_encrypted());
}

#[test]
fn overwrite_workload_survives_every_crash_point_encrypted() {
    let n = overwrite_workload(&ENCRYPTED);
    eprintln!("crash harness (encrypted): {} states showed a torn file block", n.torn_blocks);
    assert!(n.torn_blocks > 0, "no torn overwrite garbled a block: the torn writes are not reaching the data");
}

#[test]
fn overwrite_workload_survives_every_crash_point_tiny_cache_encrypted() {
    let n = overwrite_workload(&TINY_CACHE_ENCRYPTED);
    eprintln!("crash harness (tiny cache, encrypted): {} states showed a torn file block", n.torn_blocks);
}

#[test]
fn random_workloads_survive_every_crash_point_encrypted() {
    let n = random_workloads_share(&ENCRYPTED, 10);
    eprintln!("crash harness (encrypted): {} states showed a torn file block", n.torn_blocks);
}

#[test]
fn random_workloads_survive_every_crash_point_tiny_journal_encrypted() {
    let n = random_workloads_share(&tiny_journal_encrypted(), 10);
    eprintln!("crash harness (tiny journal, encrypted): {} states showed a torn file block", n.torn_blocks);
}
