//! `cairn stats`: live counters of a mounted file system (from its daemon's
//! control socket) or the static figures of an image (from its superblock).

use crate::control;
use crate::unlock::KeyArgs;
use cairn_core::human_bytes as human;
use cairn_format::superblock::{Superblock, SB_SIZE, STATE_CLEAN, STATE_ERRORS};
use serde_json::{json, Value};
use std::path::Path;

/// Runs `cairn stats TARGET`: for a mount, the summary (and with `all`
/// every counter); for an image, its figures.
pub fn run(target: &Path, as_json: bool, all: bool, keys: &KeyArgs) -> Result<(), String> {
    let meta = std::fs::metadata(target).map_err(|e| format!("{}: {e}", target.display()))?;
    let doc = if meta.is_dir() {
        if keys.given() {
            return Err(format!("{} is a mount point: its daemon holds the key, give none", target.display()));
        }
        let canon = std::fs::canonicalize(target).map_err(|e| format!("{}: {e}", target.display()))?;
        control::fetch(&canon)?
    } else {
        image_figures(target, keys)?
    };
    if as_json {
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        print_human(&doc, all);
    }
    Ok(())
}

/// The figures of an image (not locked: a mounted image's superblock is
/// as its daemon last wrote it), read through its decrypting device when
/// encrypted.
fn image_figures(path: &Path, keys: &KeyArgs) -> Result<Value, String> {
    let dev = crate::unlock::open_image(path, true, keys, None)?;
    let size = dev.size();
    let mut head = vec![0u8; SB_SIZE];
    dev.read_at(&mut head, 0)
        .map_err(|_| format!("{} is not a cairn file system (too short for a superblock)", path.display()))?;
    if !Superblock::has_magic(&head) {
        return Err(format!("{} is not a cairn file system (no cairn superblock)", path.display()));
    }
    let sb = Superblock::decode(&head, size).map_err(|e| format!("{}: damaged superblock: {e}", path.display()))?;
    let bs = u64::from(sb.block_size());
    let geo =
        cairn_format::layout::Geometry::new(&sb).map_err(|e| format!("{}: damaged superblock: {e}", path.display()))?;
    let backups: Vec<u64> = geo.backup_groups().map(|g| geo.group_start(g)).collect();
    let label = String::from_utf8_lossy(&sb.label).trim_end_matches('\0').to_string();
    let uuid: String = sb.uuid.iter().map(|b| format!("{b:02x}")).collect();
    let state = if sb.state & STATE_ERRORS != 0 {
        "errors recorded"
    } else if sb.state & STATE_CLEAN != 0 {
        "clean"
    } else {
        "not clean (mounted, or not unmounted cleanly: the journal will be replayed)"
    };
    Ok(json!({
        "image": path.display().to_string(),
        "figures": {
            "size_bytes": sb.total_blocks * bs,
            "block_size": bs,
            "blocks": sb.total_blocks,
            "free_blocks": sb.free_blocks,
            "inodes": sb.total_inodes(),
            "free_inodes": sb.free_inodes,
            "groups": sb.group_count,
            "blocks_per_group": sb.blocks_per_group,
            "inodes_per_group": sb.inodes_per_group,
            "journal_blocks": sb.journal_blocks,
            "mount_count": sb.mount_count,
            "mkfs_time": sb.mkfs_time,
            "last_mount_time": sb.last_mount_time,
            "last_write_time": sb.last_write_time,
        },
        "backup_superblocks": backups,
        "state": state,
        "label": label,
        "uuid": uuid,
    }))
}

fn print_human(doc: &Value, all: bool) {
    if let Some(c) = doc.get("counters").and_then(Value::as_object) {
        for l in crate::stats_summary::lines(doc) {
            println!("{l}");
        }
        if !all {
            println!(
                "({} counters: `cairn stats {} --all`, or --json)",
                c.len(),
                doc["mountpoint"].as_str().unwrap_or("?")
            );
            return;
        }
        let width = c.keys().map(String::len).max().unwrap_or(0);
        let mut last_group = "";
        for (k, v) in c {
            let group = k.split('.').next().unwrap_or("");
            if group != last_group {
                println!();
                last_group = group;
            }
            println!("  {k:<width$}  {v}");
        }
        return;
    }
    if let Some(f) = doc.get("figures").and_then(Value::as_object) {
        let n = |k: &str| f.get(k).and_then(Value::as_u64).unwrap_or(0);
        let bs = n("block_size");
        println!("image        {}", doc["image"].as_str().unwrap_or("?"));
        println!("state        {}", doc["state"].as_str().unwrap_or("?"));
        if let Some(l) = doc["label"].as_str().filter(|l| !l.is_empty()) {
            println!("label        {l}");
        }
        println!("uuid         {}", doc["uuid"].as_str().unwrap_or("?"));
        println!("size         {} ({} blocks of {bs} bytes)", human(n("size_bytes")), n("blocks"));
        println!("free         {} ({} blocks, as of the last commit)", human(n("free_blocks") * bs), n("free_blocks"));
        println!("inodes       {} ({} free)", n("inodes"), n("free_inodes"));
        println!(
            "groups       {} of {} blocks, {} inodes each",
            n("groups"),
            n("blocks_per_group"),
            n("inodes_per_group")
        );
        println!("journal      {} ({} blocks)", human(n("journal_blocks") * bs), n("journal_blocks"));
        if let Some(b) = doc["backup_superblocks"].as_array().filter(|b| !b.is_empty()) {
            let list: Vec<String> = b.iter().map(|v| v.to_string()).collect();
            println!("backup sb    at blocks {} (for `cairn fsck -b N`)", list.join(", "));
        }
        println!("mounts       {}", n("mount_count"));
    }
}
