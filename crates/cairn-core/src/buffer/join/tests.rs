//! Claims, captures that restore them, merges and sealed groups, on a
//! buffer cache over memory.

use super::*;
use crate::buffer::{BufferCache, Change};
use crate::dev::{BlockDevice, MemDevice};
use crate::error::Result;
use crate::journal::ail::Ail;
use std::sync::atomic::Ordering::Relaxed;

const BS: usize = 1024;
const CHUNK: usize = BS / 64;

/// A writer: a handle of `group`, or direct.
struct Writer<'a> {
    bufs: &'a BufferCache,
    group: Option<Arc<JoinGroup>>,
}

impl Change for Writer<'_> {
    fn bufs(&self) -> &BufferCache {
        self.bufs
    }
    fn charge(&self, _: u64) {}
    fn touch(&self) {}
    fn group(&self) -> Option<&Arc<JoinGroup>> {
        self.group.as_ref()
    }
    fn as_direct(&self, f: &mut dyn FnMut(&dyn Change) -> Result<()>) -> Result<()> {
        f(&Writer { bufs: self.bufs, group: None })
    }
}

fn cache() -> BufferCache {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * BS as u64));
    BufferCache::new(dev, BS, 64, Arc::new(Ail::new(u64::MAX, true)), true)
}

fn handle(bufs: &BufferCache) -> Writer<'_> {
    Writer { bufs, group: Some(JoinGroup::new()) }
}

fn direct(bufs: &BufferCache) -> Writer<'_> {
    Writer { bufs, group: None }
}

fn set(w: &Writer<'_>, buf: &Arc<Buf>, chunk: usize, byte: u8) {
    w.bufs.modify(w, buf, chunk * CHUNK..(chunk + 1) * CHUNK, |d| d.fill(byte));
}

/// The group's end: the last member joins (direct), the others wait.
fn end(w: &Writer<'_>) -> Option<Sealed> {
    match w.group.as_ref().unwrap().finish(EndWork::default()) {
        Finish::Last(sealed) => Some(sealed),
        Finish::Wait => None,
    }
}

/// What a push of the running checkpoint logs: (block, map, first byte of
/// each chunk in the map).
fn push(bufs: &BufferCache) -> Vec<(u64, u64, Vec<u8>)> {
    let batch = bufs.cil.swap();
    let snap = bufs.cil.capture(batch, BS);
    let out = snap
        .items
        .iter()
        .map(|(blk, map, img)| (*blk, *map, (0..64).filter(|k| map >> k & 1 == 1).map(|k| img[k * CHUNK]).collect()))
        .collect();
    bufs.cil.unpin(snap);
    out
}

#[test]
fn a_running_handles_change_reaches_no_checkpoint_before_its_join() {
    let bufs = cache();
    let buf = bufs.get(5, |_, _| Ok(())).unwrap();
    set(&direct(&bufs), &buf, 0, 1);
    let h = handle(&bufs);
    set(&h, &buf, 0, 2);
    set(&h, &buf, 3, 2);
    assert_eq!(bufs.dirty_count(), 1, "the handle's claims are not on the list");
    assert_eq!(push(&bufs), vec![(5, 1, vec![1])], "the capture restored the handle's chunk");
    assert_eq!(buf.read()[0], 2, "readers see the handle's bytes");
    assert_eq!(bufs.cil.stats.capture_restores.load(Relaxed), 1);
    let sealed = end(&h).expect("a group of one");
    bufs.join_group(&sealed);
    sealed.done(true);
    assert_eq!(push(&bufs), vec![(5, 0b1001, vec![2, 2])], "joined: both chunks, in the next checkpoint");
    assert!(buf.log.lock().claims.is_empty());
}

#[test]
fn a_committing_buffer_is_frozen_at_the_join_without_running_claims() {
    let bufs = cache();
    let buf = bufs.get(5, |_, _| Ok(())).unwrap();
    set(&direct(&bufs), &buf, 0, 1);
    let batch = bufs.cil.swap();
    let (a, b) = (handle(&bufs), handle(&bufs));
    set(&a, &buf, 1, 2);
    set(&b, &buf, 2, 3);
    // `a` joins before the capture: the push must get chunk 0 only, with
    // neither `a`'s bytes (next checkpoint) nor `b`'s (running).
    let sealed = end(&a).unwrap();
    bufs.join_group(&sealed);
    sealed.done(true);
    let snap = bufs.cil.capture(batch, BS);
    let (_, map, img) = &snap.items[0];
    assert_eq!((*map, img[0], img[CHUNK], img[2 * CHUNK]), (1, 1, 0, 0));
    bufs.cil.unpin(snap);
    assert_eq!(push(&bufs), vec![(5, 0b10, vec![2])], "b still runs");
}

#[test]
fn two_handles_changing_one_chunk_join_as_one_group() {
    let bufs = cache();
    let (x, y) = (bufs.get(5, |_, _| Ok(())).unwrap(), bufs.get(6, |_, _| Ok(())).unwrap());
    let (a, b) = (handle(&bufs), handle(&bufs));
    set(&a, &x, 0, 1);
    set(&b, &y, 0, 2);
    set(&b, &x, 0, 3);
    assert!(JoinGroup::same(a.group.as_ref().unwrap(), b.group.as_ref().unwrap()), "merged");
    assert_eq!(push(&bufs), vec![], "nothing joined yet");
    assert!(end(&b).is_none(), "b waits for a");
    let sealed = end(&a).expect("a joins for both");
    bufs.join_group(&sealed);
    sealed.done(true);
    assert!(b.group.as_ref().unwrap().wait_joined());
    assert_eq!(push(&bufs), vec![(5, 1, vec![3]), (6, 1, vec![2])]);
}

#[test]
fn a_chunk_of_a_sealed_group_is_claimed_again_and_restored_oldest_first() {
    let bufs = cache();
    let buf = bufs.get(5, |_, _| Ok(())).unwrap();
    let (a, b) = (handle(&bufs), handle(&bufs));
    set(&a, &buf, 0, 1);
    let sealed = end(&a).unwrap();
    // a's join has begun but not reached this buffer: b claims over it.
    set(&b, &buf, 0, 2);
    assert!(!JoinGroup::same(a.group.as_ref().unwrap(), b.group.as_ref().unwrap()));
    assert_eq!(buf.log.lock().claims.len(), 2);
    let mut image = buf.read().to_vec();
    restore(&mut image, &buf.log.lock().claims);
    assert_eq!(image[0], 0, "before a's join, neither change");
    bufs.join_group(&sealed);
    sealed.done(true);
    assert_eq!(push(&bufs), vec![(5, 1, vec![1])], "a's bytes, not b's");
    let sealed = end(&b).unwrap();
    bufs.join_group(&sealed);
    sealed.done(true);
    assert_eq!(push(&bufs), vec![(5, 1, vec![2])]);
}
