//! In-process create benchmark (no FUSE): creates N empty files in D
//! directories on an image file and reports files/s and journal bytes per
//! file. `cargo run --release -p cairn-core --example create_files -- IMAGE N D`

use cairn_core::dev::FileDevice;
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Ctx, Fs, MountOptions};
use std::sync::Arc;
use std::time::Instant;

/// As the `cairn` binary (see its `main.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).map_or("/tmp/cairn-bench.img", |s| s.as_str());
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let dirs: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16);
    let f = std::fs::File::create(path).expect("create image");
    f.set_len(4 << 30).expect("size image");
    drop(f);
    let dev = Arc::new(FileDevice::open(std::path::Path::new(path), false).expect("open"));
    format(dev.as_ref(), &MkfsOptions::default(), &mut |_, _| {}).expect("mkfs");
    let fs = Fs::mount(dev, MountOptions::default()).expect("mount");
    let c = Ctx::root();
    let ds: Vec<u64> =
        (0..dirs).map(|d| fs.names().mkdir(&c, 1, format!("d{d}").as_bytes(), 0o755).unwrap().ino).collect();
    let get = |fs: &Fs, k: &str| fs.stats().into_iter().find(|(n, _)| n == k).map_or(0, |(_, v)| v);
    let before = get(&fs, "journal.bytes_logged");
    let t = Instant::now();
    for i in 0..n {
        let a = fs
            .names()
            .mknod(
                &c,
                ds[(i % dirs) as usize],
                format!("file-{i:08}-abcdefghijklmnopqrstuvwxyz").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
            )
            .unwrap();
        fs.inodes().forget(a.ino, 1);
    }
    fs.files().sync_fs().unwrap();
    let secs = t.elapsed().as_secs_f64();
    let logged = get(&fs, "journal.bytes_logged") - before;
    println!(
        "{n} files in {dirs} dirs: {secs:.2} s, {:.0} files/s, {:.0} journal bytes/file, {} commits",
        n as f64 / secs,
        logged as f64 / n as f64,
        get(&fs, "journal.commits")
    );
    fs.unmount().unwrap();
}
