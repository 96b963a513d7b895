//! The summary `cairn stats MOUNTPOINT` opens with: what a person wants to
//! know at a glance (size and use as df gives them, state, journal use,
//! cache hit rates, one headline figure per mechanism, errors), computed
//! from the same document `--json` prints. `--all` adds every raw counter.

use cairn_core::human_bytes as human;
use cairn_fsck::num;
use serde_json::Value;

/// A counter of the stats document (0 when absent).
fn c(doc: &Value, key: &str) -> u64 {
    doc["counters"][key].as_u64().unwrap_or(0)
}

/// `part` of `whole` as a percentage with one decimal, or "-" for 0/0.
fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// The summary lines of a mounted file system's stats document.
pub fn lines(doc: &Value) -> Vec<String> {
    let mut v = Vec::new();
    let state = if doc["read_only"].as_bool() == Some(true) { "read-only" } else { "read-write" };
    let errors = c(doc, "errors.latched") + c(doc, "errors.flagged") + c(doc, "errors.journal_aborted");
    v.push(format!(
        "cairn on {} (image {}, daemon pid {}), {state}{}",
        doc["mountpoint"].as_str().unwrap_or("?"),
        doc["image"].as_str().unwrap_or("?"),
        doc["pid"],
        if errors > 0 { ", ERRORS recorded: run `cairn fsck` after unmounting" } else { "" }
    ));
    let s = &doc["statfs"];
    if let (Some(bs), Some(blocks)) = (s["block_size"].as_u64(), s["blocks"].as_u64()) {
        let free = s["blocks_free"].as_u64().unwrap_or(0);
        let avail = s["blocks_avail"].as_u64().unwrap_or(0);
        let (files, ffree) = (s["files"].as_u64().unwrap_or(0), s["files_free"].as_u64().unwrap_or(0));
        v.push(format!(
            "space     {} in {} blocks of {bs} bytes: {} used ({}), {} available",
            human(blocks * bs),
            num(blocks),
            human((blocks - free.min(blocks)) * bs),
            pct(blocks - free.min(blocks), blocks),
            human(avail * bs)
        ));
        v.push(format!(
            "inodes    {} of {} used ({})",
            num(files - ffree.min(files)),
            num(files),
            pct(files - ffree.min(files), files)
        ));
    }
    v.push(format!(
        "journal   {} of {} blocks in use; {} commits, {} flushes, {} logged; replayed {} records at mount",
        num(c(doc, "journal.log_used_blocks")),
        num(c(doc, "journal.log_size_blocks")),
        num(c(doc, "journal.commits")),
        num(c(doc, "journal.flushes")),
        human(c(doc, "journal.bytes_logged")),
        num(c(doc, "journal.replayed_records_at_mount"))
    ));
    let hits = |k: &str| {
        let (h, m) = (c(doc, &format!("{k}.hits")), c(doc, &format!("{k}.misses")));
        format!("{} hits", pct(h, h + m))
    };
    v.push(format!(
        "caches    blocks {} ({} cached), inodes {} ({} cached), dentries {} ({} cached)",
        hits("cache"),
        num(c(doc, "cache.buffers")),
        hits("icache"),
        num(c(doc, "icache.entries")),
        hits("dcache"),
        num(c(doc, "dcache.entries"))
    ));
    let (ahead, used) = (c(doc, "cache.readahead_blocks"), c(doc, "cache.readahead_used"));
    v.push(format!(
        "readahead {} blocks read ahead, {} used, {} evicted unused; window {} blocks",
        num(ahead),
        pct(used, ahead),
        num(c(doc, "cache.readahead_wasted")),
        num(c(doc, "cache.readahead_window"))
    ));
    let on_off = |k: &str| if c(doc, k) == 1 { "on" } else { "off" };
    v.push(format!(
        "xattrs    mbcache {}: {} blocks shared instead of written",
        on_off("mbcache.enabled"),
        num(c(doc, "mbcache.blocks_saved_since_mount"))
    ));
    v.push(format!(
        "overwrite fast path {}: {} writes without a transaction, {} journaled",
        on_off("overwrite.enabled"),
        num(c(doc, "overwrite.fast_writes")),
        num(c(doc, "overwrite.journaled_writes"))
    ));
    v.push(format!(
        "alloc     {} allocations scanned {} groups; {} blocks allocated, {} freed",
        num(c(doc, "alloc.calls")),
        num(c(doc, "alloc.groups_scanned")),
        num(c(doc, "alloc.blocks_allocated")),
        num(c(doc, "alloc.blocks_freed"))
    ));
    v.push(format!(
        "backend   {} pushes of the CIL; reaper {} deletes done, {} blocks waiting",
        num(c(doc, "cil.pushes")),
        num(c(doc, "reaper.done")),
        num(c(doc, "reaper.backlog_blocks"))
    ));
    v.push(format!("fuse      {} requests", num(c(doc, "fuse.requests"))));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_summary_reads_the_document() {
        let doc = json!({
            "mountpoint": "/m", "image": "/i.img", "pid": 7, "read_only": false,
            "statfs": {"block_size": 4096, "blocks": 1000, "blocks_free": 750, "blocks_avail": 700,
                       "files": 100, "files_free": 90},
            "counters": {"cache.hits": 99, "cache.misses": 1, "journal.log_size_blocks": 1024,
                         "journal.log_used_blocks": 6, "errors.latched": 0, "fuse.requests": 12345,
                         "cache.readahead_blocks": 200, "cache.readahead_used": 150,
                         "cache.readahead_wasted": 50, "cache.readahead_window": 40,
                         "overwrite.enabled": 1}
        });
        let text = lines(&doc).join("\n");
        assert!(text.starts_with("cairn on /m (image /i.img, daemon pid 7), read-write\n"), "{text}");
        assert!(text.contains("1,000 blocks of 4096 bytes: 1000.0 KiB used (25.0%)"), "{text}");
        assert!(text.contains("inodes    10 of 100 used (10.0%)"), "{text}");
        assert!(text.contains("journal   6 of 1,024 blocks"), "{text}");
        assert!(text.contains("blocks 99.0% hits"), "{text}");
        assert!(text.contains("inodes - hits"), "{text}");
        assert!(text.contains("fuse      12,345 requests"), "{text}");
        assert!(text.contains("xattrs    mbcache off:"), "{text}");
        assert!(text.contains("overwrite fast path on:"), "{text}");
        assert!(
            text.contains("readahead 200 blocks read ahead, 75.0% used, 50 evicted unused; window 40 blocks"),
            "{text}"
        );
        let bad = json!({"read_only": true, "counters": {"errors.latched": 1}});
        assert!(lines(&bad)[0].contains("read-only, ERRORS recorded"));
    }
}
