//! Model-based property test: random operation sequences run on the engine
//! and on an in-memory model must agree, also after a remount.

use crate::common::*;
use cairn_core::dev::BlockDevice;
use cairn_core::mkfs::MkfsOptions;
use cairn_core::testdev::FaultDevice;
use cairn_core::{Ctx, Fs, MountOptions, SetAttr};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Where the model runs: today's image and mount, or the smallest cache
/// (64 blocks) with the smallest journal every operation of the mix fits in
/// (`crash::tiny_journal`; see `crash::min_journal_is_usable`) on a disk
/// whose flushes take 200 µs.
#[derive(Clone, Copy, Debug)]
struct Setup {
    journal_blocks: Option<u64>,
    cache_blocks: usize,
    flush_delay: Duration,
}

const NORMAL: Setup = Setup { journal_blocks: None, cache_blocks: 65536, flush_delay: Duration::ZERO };

fn mount_with(dev: &Arc<dyn BlockDevice>, setup: &Setup) -> Arc<Fs> {
    // The inode and dentry caches scale with the buffer cache (tiny with it).
    let opts = MountOptions {
        cache_blocks: setup.cache_blocks,
        inode_cache_bytes: setup.cache_blocks * 512,
        dentry_cache_bytes: setup.cache_blocks * 256,
        ..Default::default()
    };
    Fs::mount(dev.clone(), opts).expect("mount")
}

/// The engine's counter `name`.
fn stat(fs: &Fs, name: &str) -> u64 {
    fs.stats().into_iter().find(|(k, _)| k == name).map_or(0, |(_, v)| v)
}

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Mkdir(u8),
    Write(u8, u32, u16, u8),
    Truncate(u8, u32),
    Unlink(u8),
    Rmdir(u8),
    Rename(u8, u8),
    SetXattr(u8, u8),
    Remount,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::Create),
        2 => any::<u8>().prop_map(Op::Mkdir),
        6 => (any::<u8>(), 0u32..200_000, 1u16..20_000, any::<u8>()).prop_map(|(a, b, c, d)| Op::Write(a, b, c, d)),
        2 => (any::<u8>(), 0u32..200_000).prop_map(|(a, b)| Op::Truncate(a, b)),
        2 => any::<u8>().prop_map(Op::Unlink),
        1 => any::<u8>().prop_map(Op::Rmdir),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::SetXattr(a, b)),
        1 => Just(Op::Remount),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    File(Vec<u8>, BTreeMap<u8, u8>),
    Dir,
}

fn name(n: u8) -> Vec<u8> {
    format!("n{}", n % 24).into_bytes()
}

/// Runs `ops` on the engine in `setup` and on the model; checks the engine's
/// invariants after each operation, that no handle overran its credits, and
/// that both agree after a remount.
fn run(ops: Vec<Op>, setup: &Setup) -> Result<(), TestCaseError> {
    let mem = new_image_with(64, &MkfsOptions { journal_blocks: setup.journal_blocks, ..Default::default() });
    let fault = Arc::new(FaultDevice::new(mem));
    fault.set_flush_delay(setup.flush_delay);
    let dev: Arc<dyn BlockDevice> = fault;
    let c = Ctx::root();
    let mut fs = mount_with(&dev, setup);
    let mut model: BTreeMap<Vec<u8>, Node> = BTreeMap::new();
    let mut overruns = 0;
    for o in ops {
        match o {
            Op::Create(n) => {
                let r = fs.names().mknod(&c, 1, &name(n), libc::S_IFREG | 0o644, 0);
                prop_assert_eq!(r.is_ok(), !model.contains_key(&name(n)));
                model.entry(name(n)).or_insert(Node::File(Vec::new(), BTreeMap::new()));
            }
            Op::Mkdir(n) => {
                let r = fs.names().mkdir(&c, 1, &name(n), 0o755);
                prop_assert_eq!(r.is_ok(), !model.contains_key(&name(n)));
                model.entry(name(n)).or_insert(Node::Dir);
            }
            Op::Write(n, off, len, v) => {
                if let Some(Node::File(data, _)) = model.get_mut(&name(n)) {
                    let ino = fs.lookup(1, &name(n)).unwrap().ino;
                    let buf = vec![v; len as usize];
                    prop_assert_eq!(fs.files().write(ino, u64::from(off), &buf).unwrap(), u32::from(len));
                    let end = off as usize + len as usize;
                    if data.len() < end {
                        data.resize(end, 0);
                    }
                    data[off as usize..end].copy_from_slice(&buf);
                }
            }
            Op::Truncate(n, size) => {
                if let Some(Node::File(data, _)) = model.get_mut(&name(n)) {
                    let ino = fs.lookup(1, &name(n)).unwrap().ino;
                    fs.files()
                        .setattr(&c, ino, &SetAttr { size: Some(u64::from(size)), ..Default::default() })
                        .unwrap();
                    data.resize(size as usize, 0);
                }
            }
            Op::Unlink(n) => {
                let is_file = matches!(model.get(&name(n)), Some(Node::File(..)));
                prop_assert_eq!(fs.names().unlink(1, &name(n)).is_ok(), is_file);
                if is_file {
                    model.remove(&name(n));
                }
            }
            Op::Rmdir(n) => {
                let is_dir = matches!(model.get(&name(n)), Some(Node::Dir));
                prop_assert_eq!(fs.names().rmdir(1, &name(n)).is_ok(), is_dir);
                if is_dir {
                    model.remove(&name(n));
                }
            }
            Op::Rename(a, b) => {
                let (na, nb) = (name(a), name(b));
                let src = model.get(&na).cloned();
                let dst = model.get(&nb).cloned();
                let ok = match (&src, &dst) {
                    (None, _) => false,
                    (Some(_), _) if na == nb => true,
                    (Some(Node::Dir), Some(Node::File(..))) | (Some(Node::File(..)), Some(Node::Dir)) => false,
                    _ => true,
                };
                let r = fs.names().rename(1, &na, 1, &nb, 0);
                prop_assert_eq!(r.is_ok(), ok, "rename {:?} -> {:?}: {:?}", src, dst, r);
                if ok && na != nb {
                    let s = model.remove(&na).unwrap();
                    model.insert(nb, s);
                }
            }
            Op::SetXattr(n, v) => {
                if let Some(Node::File(_, xa)) = model.get_mut(&name(n)) {
                    let ino = fs.lookup(1, &name(n)).unwrap().ino;
                    fs.setxattr(ino, format!("user.a{}", v % 5).as_bytes(), &[v], 0).unwrap();
                    xa.insert(v % 5, v);
                }
            }
            Op::Remount => {
                overruns += stat(&fs, "tx.credit_overruns");
                fs.unmount().unwrap();
                fs = mount_with(&dev, setup);
            }
        }
        fs.debug_check_consistency();
    }
    overruns += stat(&fs, "tx.credit_overruns");
    prop_assert_eq!(overruns, 0, "handles dirtied more buffers than their credits");
    fs.unmount().unwrap();
    let fs = mount_with(&dev, setup);
    let mut listed = Vec::new();
    fs.readdir(1, 0, &mut |e| {
        listed.push(e.name.clone());
        true
    })
    .unwrap();
    listed.retain(|n| n != b"." && n != b"..");
    listed.sort();
    prop_assert_eq!(listed, model.keys().cloned().collect::<Vec<_>>());
    for (n, node) in &model {
        let a = fs.lookup(1, n).unwrap();
        if let Node::File(data, xa) = node {
            prop_assert_eq!(a.size, data.len() as u64);
            let back = fs.files().read(a.ino, 0, data.len() as u32 + 10).unwrap();
            prop_assert!(back == *data, "content of {:?} differs", String::from_utf8_lossy(n));
            for (k, v) in xa {
                prop_assert_eq!(fs.getxattr(a.ino, format!("user.a{k}").as_bytes()).unwrap(), vec![*v]);
            }
        }
    }
    fs.unmount().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, &NORMAL)?;
    }

    /// The same with a tiny cache, a tiny journal (commits and log-full
    /// waits inside the sequence) and a slow-flush disk.
    #[test]
    fn engine_matches_model_tiny_cache_and_journal(ops in proptest::collection::vec(op(), 1..60)) {
        let tiny = Setup {
            journal_blocks: Some(crate::crash::tiny_journal().journal_blocks),
            cache_blocks: 64,
            flush_delay: Duration::from_micros(200),
        };
        run(ops, &tiny)?;
    }
}
