//! The encrypting device's cipher speed, without I/O: AES-256-XTS over
//! 4 KiB blocks in 1 MiB requests (the size of a big FUSE write), one
//! thread, `xts-mode` alone (one AES call per 16 bytes, as cairn did before
//! issue #54's speed work) beside cairn's `BlockCipher`. Timed by the
//! thread's own CPU time (/proc/thread-self/schedstat), so a loaded machine
//! changes the figures less than it would wall-clock ones.
//! Also decryption in calls of one block and of 16 (a cold walk's reads).
//! `cargo run --release -p cairn-core --example xts_speed -- [MIB]`

use aes::cipher::KeyInit;
use aes::Aes256;
use cairn_core::crypt::{BlockCipher, MasterKey};
use xts_mode::{get_tweak_default, Xts128};

/// Nanoseconds this thread has run on a CPU.
fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    s.split_whitespace().next().and_then(|x| x.parse().ok()).expect("schedstat's first field")
}

/// MB/s of CPU time for `mib` calls of `f` on a 1 MiB buffer.
fn measure(mib: u64, buf: &mut [u8], mut f: impl FnMut(&mut [u8], u64)) -> f64 {
    let start = cpu_ns();
    for r in 0..mib {
        f(buf, r * 256);
    }
    (mib << 20) as f64 / ((cpu_ns() - start) as f64 / 1e9) / 1e6
}

fn main() {
    let mib: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let key: [u8; 64] = std::array::from_fn(|i| (i * 7 + 1) as u8);
    let master = MasterKey::random().expect("master key");
    let ours = BlockCipher::new(&master, 4096).expect("cipher");
    let theirs = Xts128::new(Aes256::new_from_slice(&key[..32]).unwrap(), Aes256::new_from_slice(&key[32..]).unwrap());
    let mut buf: Vec<u8> = (0..1 << 20).map(|i| (i * 31 % 251) as u8).collect();
    let per_piece = [
        measure(mib, &mut buf, |b, n| theirs.encrypt_area(b, 4096, u128::from(n), get_tweak_default)),
        measure(mib, &mut buf, |b, n| theirs.decrypt_area(b, 4096, u128::from(n), get_tweak_default)),
    ];
    let batched =
        [measure(mib, &mut buf, |b, n| ours.encrypt(b, n)), measure(mib, &mut buf, |b, n| ours.decrypt(b, n))];
    // A cold walk's reads: one block, and a readahead run of 16, per call.
    let small = [4096usize, 16 * 4096].map(|len| {
        measure(mib, &mut buf, |b, n| b[..(1 << 20) / len * len].chunks_exact_mut(len).for_each(|c| ours.decrypt(c, n)))
    });
    println!("decrypt in calls of 4 KiB: {:.0} MB/s, of 64 KiB: {:.0} MB/s", small[0], small[1]);
    for (what, i) in [("encrypt", 0), ("decrypt", 1)] {
        println!(
            "{what}: xts-mode per 16 bytes {:.0} MB/s, BlockCipher {:.0} MB/s ({:.1}x), MB per CPU second",
            per_piece[i],
            batched[i],
            batched[i] / per_piece[i]
        );
    }
}
