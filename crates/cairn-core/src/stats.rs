//! Live counters for `cairn stats` (the daemon serves them; see cairn-cli).
//!
//! Each subsystem publishes its own counters by implementing [`Publish`]
//! next to its code; this module only gathers them, in a fixed order.

use crate::fs::Fs;

/// A subsystem that has counters: calls `put(dotted_name, value)` for each.
pub trait Publish {
    fn publish(&self, put: &mut dyn FnMut(&str, u64));
}

/// The value at quantile `p` (0..=1) of `sorted`.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
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
    fs.txm.publish(&mut put);
    fs.meta.bufs.publish(&mut put);
    fs.icache.publish(&mut put);
    fs.dcache.publish(&mut put);
    fs.ow.publish(&mut put);
    fs.reaper.publish(&mut put);
    fs.meta.xattrs.cache.publish(&mut put);
    fs.meta.alloc.publish(&mut put);
    v
}
