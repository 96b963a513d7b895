//! Crash states with a damaged journal record (issue 32, item 2).
//!
//! At each barrier of a recorded workload the crash state's log is walked;
//! where it holds two records or more, one byte of one record (in its
//! descriptor or in its body, by turns) is flipped:
//! * a record with a later one after it: the log is damaged in the middle.
//!   Mount must refuse and write nothing; fsck must report the damage;
//!   `fsck --repair` must replay the records before it, restart the log, and
//!   leave an image that checks clean and mounts consistent;
//! * the last record: that is a torn end, not damage. The state must mount
//!   consistent and show one of the workload's states no newer than the
//!   undamaged crash state's.

use super::*;
use cairn_format::journal::{read_record, JournalSuper, LogPos, Walk};

/// The records of the log in `img`, from the tail, and what is needed to
/// find their blocks.
fn log_records(img: &OverlayDevice) -> (JournalRegion, usize, Vec<LogPos>) {
    let mut b = vec![0u8; SB_SIZE];
    img.read_at(&mut b, 0).unwrap();
    let sb = Superblock::decode(&b, img.size()).unwrap();
    let region = JournalRegion::of(&sb);
    let bs = sb.block_size() as usize;
    let seed = sb.csum_seed();
    let read = |off: u64| -> std::io::Result<Vec<u8>> {
        let mut blk = vec![0u8; bs];
        img.read_at(&mut blk, region.block_of(off) * bs as u64)?;
        Ok(blk)
    };
    let jsb = JournalSuper::decode(seed, region.start, &read(0).unwrap(), region.blocks).unwrap();
    let mut pos = LogPos { seq: jsb.tail_seq, off: jsb.tail_off };
    let mut out = Vec::new();
    while let Walk::Record(rec) = read_record(seed, &region, pos, read).unwrap() {
        out.push(pos);
        pos = rec.next;
    }
    (region, bs, out)
}

/// Flips one byte of the record at `pos`: of its descriptor, or of the
/// block after it (its body).
fn damage(img: &OverlayDevice, region: &JournalRegion, bs: usize, pos: LogPos, in_body: bool) {
    let blk = region.block_of(region.next(pos.off, u64::from(in_body)));
    let at = blk * bs as u64 + 200;
    let mut b = [0u8; 1];
    img.read_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    img.write_at(&b, at).unwrap();
}

/// The whole image of `img`.
fn bytes_of(img: &OverlayDevice) -> Vec<u8> {
    let mut all = vec![0u8; img.size() as usize];
    img.read_at(&mut all, 0).unwrap();
    all
}

/// Counts of the damaged crash states checked.
#[derive(Default)]
struct DamageChecked {
    middle: usize,
    last: usize,
}

fn check_damaged(label: &str, r: &Recording, cfg: &Config, limit: usize) -> DamageChecked {
    let mut done = DamageChecked::default();
    for (n, upto) in r.plan.flushes().into_iter().map(|f| f + 1).enumerate() {
        if upto < r.marks[0] || done.middle >= limit {
            continue;
        }
        let probe = r.plan.image(upto, &[], None);
        let (region, bs, records) = log_records(&probe);
        if records.len() < 2 {
            continue;
        }
        let in_body = n % 2 == 1;
        // A record in the middle: refused, reported, repaired.
        let i = n % (records.len() - 1);
        let img = Arc::new(r.plan.image(upto, &[], None));
        damage(&img, &region, bs, records[i], in_body);
        let what = format!(
            "{label} ({}): crash state at op {upto}, record {i} of {} damaged in its {}",
            cfg.name,
            records.len(),
            if in_body { "body" } else { "descriptor" }
        );
        let before = bytes_of(&img);
        let d: Arc<dyn BlockDevice> = img.clone();
        let err = Fs::mount(d, opts(cfg)).err().unwrap_or_else(|| panic!("{what}: mounted"));
        assert!(err.to_string().contains("journal damaged"), "{what}: {err}");
        assert!(bytes_of(&img) == before, "{what}: the refused mount wrote to the image");
        let report = cairn_fsck::check_image(&DeviceSource(&*img), &cairn_fsck::Options::default()).unwrap();
        assert!(
            report.problems.iter().any(|p| p.message.contains("journal damaged")),
            "{what}: fsck does not report the damage: {:?}",
            report.problems
        );
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, &before).unwrap();
        let mut out = Vec::new();
        let code = cairn_fsck::run(f.path(), &cairn_fsck::Options { repair: true, ..Default::default() }, &mut out);
        let out = String::from_utf8_lossy(&out);
        assert!(code <= 1, "{what}: repair exit {code}:\n{out}");
        let mut out2 = Vec::new();
        let code = cairn_fsck::run(f.path(), &cairn_fsck::Options::default(), &mut out2);
        assert_eq!(code, 0, "{what}: not clean after repair:\n{}", String::from_utf8_lossy(&out2));
        let repaired: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(std::fs::read(f.path()).unwrap()));
        let fs =
            Fs::mount(repaired, opts(cfg)).unwrap_or_else(|e| panic!("{what}: repaired image does not mount: {e}"));
        fs.debug_check_consistency();
        fs.unmount().unwrap();
        done.middle += 1;

        // The last record: a torn end.
        let img = Arc::new(r.plan.image(upto, &[], None));
        damage(&img, &region, bs, *records.last().unwrap(), in_body);
        let what = format!("{label} ({}): crash state at op {upto}, last record damaged", cfg.name);
        fsck_clean(&*img, &what);
        let d: Arc<dyn BlockDevice> = img.clone();
        let fs = Fs::mount(d, opts(cfg)).unwrap_or_else(|e| panic!("{what} does not mount: {e}"));
        fs.debug_check_consistency();
        let got = snapshot(&fs);
        let hi = r.marks.iter().rposition(|m| *m < upto).map_or(0, |u| u + 1);
        assert!(
            acceptable(&got, &r.snaps, 0, hi, hi).is_some(),
            "{what}: the state matches none of the workload's states up to unit {hi}"
        );
        fs.unmount().unwrap();
        done.last += 1;
    }
    done
}

fn damaged_records(cfg: &Config) {
    assert!(!cfg.encrypted, "the damage is made to plain bytes");
    let r = record(cfg, "named workload", &named_steps());
    let n = check_damaged("named workload", &r, cfg, 60);
    eprintln!(
        "crash harness ({}): {} crash states with a record damaged in the middle of the log (refused, reported, repaired), {} with the last record damaged (mounted consistent)",
        cfg.name, n.middle, n.last
    );
    assert!(n.middle >= 5, "too few crash states held two records or more ({})", n.middle);
}

#[test]
fn damaged_records_in_crash_states_are_refused_or_taken_as_the_end() {
    damaged_records(&NORMAL);
}

#[test]
fn damaged_records_in_crash_states_are_refused_or_taken_as_the_end_tiny_journal() {
    damaged_records(&tiny_journal());
}
