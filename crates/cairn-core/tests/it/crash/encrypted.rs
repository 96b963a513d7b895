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
//! A cairn block is one XTS data unit, but XTS is a narrow-block mode: each
//! 16-byte piece of the unit is enciphered on its own, under the unit's
//! tweak multiplied by its position. A block torn at sector granularity
//! (its first sectors new, the rest old) therefore decrypts to the new
//! plaintext of its first sectors and the old plaintext of the rest:
//! exactly what a torn write leaves on a plain image, not garbage (a
//! wide-block mode such as Adiantum, or CBC, would garble it). So the
//! harness compares the crash states of an encrypted image with the very
//! same rule as a plain image's ([`super::acceptable`]), and
//! [`a_torn_block_decrypts_to_its_old_and_new_sectors`] pins the property
//! it rests on. [`tear_each_home_write`] tears, one by one, every write
//! outside the journal's ring (the superblock's and the journal
//! superblock's included, whose fields a plain image keeps whole in their
//! first sector) rather than leaving them to the random draw.
//!
//! ## Cost
//! In a debug build an encrypted crash state costs about 20 times a plain
//! one (cairn's XTS layer runs unoptimised there; about 0.5 s of CPU a
//! state on the development machine): every barrier is visited, with
//! [`super::ENCRYPTED_PER_FLUSH`] random subsets each instead of 8-12, and
//! the random workloads stop at a two-hundredth of `CAIRN_CRASH_STATES`
//! (50 by default) instead of a third.

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

#[test]
fn named_workload_survives_every_crash_point_encrypted() {
    named_workload(&ENCRYPTED);
}

#[test]
fn overwrite_workload_survives_every_crash_point_encrypted() {
    overwrite_workload(&ENCRYPTED);
}

#[test]
fn random_workloads_survive_every_crash_point_encrypted() {
    random_workloads_share(&ENCRYPTED, 200);
}

#[test]
fn random_workloads_survive_every_crash_point_tiny_journal_encrypted() {
    random_workloads_share(&tiny_journal_encrypted(), 200);
}

/// Tears, one at a time, every write of the recording `r` that lands
/// outside the journal's ring: home writes of checkpointed metadata, the
/// superblock's block (mount reads it before any replay), the journal
/// superblock (the log's tail) and file data written in place. Each is
/// torn after its first sector, over the state of the barrier before it,
/// and the state must check clean, mount and match the workload as in
/// [`check_all`]. Returns the writes torn and, of them, those that tore a
/// block whose old and new bytes differ in the torn-off part.
fn tear_each_home_write(label: &str, r: &Recording, cfg: &Config) -> (usize, usize) {
    let first = r.state(r.plan.image(r.marks[0], &[], None));
    let sb = cairn_core::dev::read_superblock(&*first).unwrap();
    let region = JournalRegion::of(&sb);
    let bs = u64::from(sb.block_size());
    let started_before = |end: usize| r.marks.iter().rposition(|m| *m < end).map_or(0, |u| u + 1);
    let (mut upto, mut torn, mut changed) = (0, 0, 0);
    for (i, op) in r.plan.ops.iter().enumerate() {
        let Op::Write(off, data) = op else {
            upto = i + 1;
            continue;
        };
        let blk = (off - DATA_OFFSET) / bs;
        if upto < r.marks[0] || region.contains(blk) && blk != region.start {
            continue;
        }
        let lo = (0..r.marks.len()).rev().find(|&u| r.synced[u] && r.marks[u] <= upto).unwrap();
        let hi = started_before(upto).max(lo);
        let what = format!("{label} ({}): write {i} (block {blk}) torn after 512 bytes over op {upto}", cfg.name);
        let before = r.plan.image(upto, &[], None);
        let img = r.plan.image(upto, &[i], Some((i, 512)));
        let (mut old, mut now) = (vec![0u8; bs as usize], vec![0u8; bs as usize]);
        before.read_at(&mut old, *off).unwrap();
        img.read_at(&mut now, *off).unwrap();
        changed += usize::from(old[512..] != data[512..bs as usize] && now[..512] != old[..512]);
        let img = r.state(img);
        fsck_clean(&*img, &what);
        let fs = Fs::mount(img, opts(cfg)).unwrap_or_else(|e| panic!("{what}: does not mount: {e}"));
        fs.debug_check_consistency();
        let got = snapshot(&fs);
        let hi_bytes = started_before(i + 1).max(hi);
        assert!(
            acceptable(&got, &r.snaps, lo, hi, hi_bytes).is_some(),
            "{what}: matches no state from unit {lo} to {hi} (bytes up to {hi_bytes})"
        );
        fs.unmount().unwrap();
        torn += 1;
    }
    (torn, changed)
}

#[test]
fn every_home_write_of_the_named_workload_torn_encrypted() {
    let r = record(&ENCRYPTED, "named workload", &named_steps());
    let (torn, changed) = tear_each_home_write("named workload", &r, &ENCRYPTED);
    eprintln!(
        "crash harness (encrypted): named workload, {torn} home writes torn one by one ({changed} mixing two contents)"
    );
    assert!(torn >= 5 && changed > 0, "{torn} {changed}");
}

#[test]
fn every_home_write_of_the_overwrite_workload_torn_encrypted() {
    let cfg = Config { per_op: true, ..ENCRYPTED };
    let r = record(&cfg, "overwrite workload", &overwrite_steps());
    let (torn, changed) = tear_each_home_write("overwrite workload", &r, &cfg);
    eprintln!("crash harness (encrypted): overwrite workload, {torn} home writes torn one by one ({changed} mixing two contents)");
    assert!(torn > 30 && changed > 10, "{torn} {changed}");
}

/// What the harness's rule for torn writes rests on: a block torn after
/// its first sector decrypts to that sector's new bytes and the rest's old.
#[test]
fn a_torn_block_decrypts_to_its_old_and_new_sectors() {
    let dev = create(4096);
    let (old, new) = ([1u8; 4096], [2u8; 4096]);
    dev.write_at(&old, 8192).unwrap();
    let mut ciphertext = [0u8; 4096];
    let raw = MemDevice::from_bytes(dev.inner().snapshot());
    dev.write_at(&new, 8192).unwrap();
    dev.inner().read_at(&mut ciphertext, DATA_OFFSET + 8192).unwrap();
    raw.write_at(&ciphertext[..512], DATA_OFFSET + 8192).unwrap();
    let torn = open(raw);
    let mut back = [0u8; 4096];
    torn.read_at(&mut back, 8192).unwrap();
    assert_eq!((&back[..512], &back[512..]), (&new[..512], &old[512..]));
}
