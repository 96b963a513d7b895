//! Live counters: every subsystem's atomics, gathered into (name, value) pairs
//! for `cairn stats` (the daemon serves them; see cairn-cli).

use crate::fs::Fs;
use std::sync::atomic::Ordering::Relaxed;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// All counters of `fs`.
pub fn collect(fs: &Fs) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = Vec::new();
    let mut put = |k: &str, x: u64| v.push((k.to_string(), x));
    let j = &fs.txm.log.stats;
    put("journal.commits", j.commits.load(Relaxed));
    put("journal.blocks_logged", j.blocks_logged.load(Relaxed));
    put("journal.bytes_logged", j.bytes_logged.load(Relaxed));
    put("journal.flushes", j.flushes.load(Relaxed));
    put("journal.replayed_records_at_mount", j.replayed_records.load(Relaxed));
    put("journal.replayed_blocks_at_mount", j.replayed_blocks.load(Relaxed));
    put("journal.commit_us_total", j.commit_us_total.load(Relaxed));
    put("journal.commit_us_max", j.commit_us_max.load(Relaxed));
    let mut recent = j.recent_us.lock().clone();
    recent.sort_unstable();
    put("journal.commit_us_p50", percentile(&recent, 0.5));
    put("journal.commit_us_p99", percentile(&recent, 0.99));
    put("journal.next_seq", fs.txm.log.next_seq());
    put("journal.replays_at_mount", u64::from(fs.replayed.records > 0));
    let b = &fs.meta.bufs;
    put("cache.buffers", b.len() as u64);
    put("cache.dirty_buffers", b.dirty_count());
    put("cache.hits", b.stats.hits.load(Relaxed));
    put("cache.misses", b.stats.misses.load(Relaxed));
    put("cache.evictions", b.stats.evictions.load(Relaxed));
    put("journal.relogged_in_memory", b.stats.relogged.load(Relaxed));
    let t = &fs.txm.stats;
    put("journal.group_commit_joins", t.group_joins.load(Relaxed));
    put("tx.handles", t.handles.load(Relaxed));
    put("tx.reserve_waits", t.reserve_waits.load(Relaxed));
    put("tx.restarts", t.restarts.load(Relaxed));
    put("tx.credit_overruns", t.credit_overruns.load(Relaxed));
    put("tx.max_credits", t.max_credits.load(Relaxed));
    put("tx.steps", t.steps.load(Relaxed));
    put("tx.reserved_credits", fs.txm.reserved());
    put("tx.record_limit_blocks", fs.txm.limit());
    put("errors.latched", fs.txm.latch.errors());
    put("errors.flagged", u64::from(fs.txm.latch.flagged()));
    put("errors.journal_aborted", u64::from(fs.txm.latch.aborted()));
    put("cache.reread_races", b.stats.reread_races.load(Relaxed));
    put("cache.over_budget", b.stats.over_budget.load(Relaxed));
    put("journal.log_used_blocks", fs.txm.log.used_blocks());
    put("journal.log_size_blocks", fs.txm.log.size_blocks());
    put("icache.inodes", fs.icache.len() as u64);
    let a = &fs.meta.alloc;
    put("alloc.calls", a.stats.alloc_calls.load(Relaxed));
    put("alloc.blocks_allocated", a.stats.blocks_allocated.load(Relaxed));
    put("alloc.blocks_freed", a.stats.blocks_freed.load(Relaxed));
    put("alloc.groups_scanned", a.stats.groups_scanned.load(Relaxed));
    put("alloc.goal_hits", a.stats.goal_hits.load(Relaxed));
    put("alloc.enospc", a.stats.enospc.load(Relaxed));
    put("alloc.pending_free_blocks", a.pending_blocks());
    put("alloc.free_blocks", a.disk_free_blocks.load(Relaxed));
    put("alloc.free_inodes", a.free_inodes.load(Relaxed));
    put("alloc.inodes_allocated", a.stats.inodes_allocated.load(Relaxed));
    put("alloc.inodes_freed", a.stats.inodes_freed.load(Relaxed));
    put("alloc.next_ino", a.next_ino.load(Relaxed));
    v
}
