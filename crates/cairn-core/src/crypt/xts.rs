//! [`BlockCipher`]: AES-256-XTS over whole file-system blocks, one XTS data
//! unit per block, the block number as the tweak (dm-crypt's
//! `aes-xts-plain64`).
//!
//! ## Purpose
//! XTS (IEEE 1619) encrypts the 16-byte pieces `P_j` of data unit `n` as
//! `C_j = E_K1(P_j ^ T_j) ^ T_j`, where `T_0 = E_K2(n)` and each `T_{j+1}`
//! is `T_j` times α in GF(2^128). `xts-mode` does exactly that, one piece
//! at a time: every piece is a separate call into the `aes` crate, which
//! picks and sets up its backend anew per call and runs one AES whose 14
//! rounds wait on each other. Measured (`examples/xts_speed.rs`): about
//! 450 MB per CPU second on this machine, slower than the file system
//! around it.
//!
//! The pieces of a unit are independent once the masks `T_j` are known, so
//! here each block is done in three passes: its masks are computed (one AES
//! of the block number with K2, then a doubling per piece), XORed into the
//! data, the data is encrypted with one `encrypt_blocks` call of the `aes`
//! crate (which pipelines 8 pieces with AES-NI), and the masks are XORed in
//! again. AES is the `aes` crate's, nothing of it is written here.
//!
//! ## The doubling
//! Multiplying by α (IEEE 1619 §5.2) is a shift left of the mask as a
//! little-endian 128-bit number and, when a bit falls off the top, an XOR
//! with 0x87: [`times_alpha`], one line. `xts-mode` does the same
//! privately; no published field crate has XTS's bit order (`polyval` and
//! `ghash` have their own). Having `xts-mode` itself compute the masks (by
//! giving `Xts128` a "cipher" that outputs zeros as K1, so that each output
//! piece is its mask) was tried first: it spent 3 to 4 times the AES's own
//! time on them, one trait call per piece (see `examples/xts_speed.rs` and
//! the commit that replaced it). The IEEE 1619 vectors and a property test
//! against `xts-mode`'s own encryption, over block sizes, block counts and
//! block numbers, hold this to the standard.
//!
//! ## Invariants
//! The block size is a multiple of 16 bytes, so no data unit needs
//! ciphertext stealing. The key schedules live in locked memory
//! ([`Locked`]). The masks are secret (they are K2's encryptions of block
//! numbers): their buffer is zeroed before it is freed.

use super::keys::MasterKey;
use super::locked::Locked;
use super::CryptError;
use aes::cipher::consts::U16;
use aes::cipher::{Array, Block, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use aes::Aes256;
use zeroize::{Zeroize, Zeroizing};

/// The two AES-256 key schedules of XTS: K1 encrypts the data, K2 the tweaks.
struct XtsKeys {
    data: Aes256,
    tweak: Aes256,
}

/// AES-256-XTS keyed by a master key, its key schedules in locked memory.
pub struct BlockCipher {
    keys: Locked<XtsKeys>,
    block_size: usize,
}

impl BlockCipher {
    /// The cipher for `master`, encrypting data units of `block_size` bytes.
    pub fn new(master: &MasterKey, block_size: u32) -> Result<BlockCipher, CryptError> {
        let block_size = block_size as usize;
        if block_size == 0 || !block_size.is_multiple_of(16) {
            return Err(CryptError::Cost(format!("block size {block_size} is no multiple of 16")));
        }
        let k = master.bytes();
        let (k1, k2) = k.split_at(32);
        let data = Aes256::new_from_slice(k1).map_err(|_| CryptError::Cost("xts key".into()))?;
        let tweak = Aes256::new_from_slice(k2).map_err(|_| CryptError::Cost("xts key".into()))?;
        Ok(BlockCipher { keys: Locked::new(XtsKeys { data, tweak })?, block_size })
    }

    /// The bytes of one data unit (one file-system block).
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Encrypts whole blocks in place, the first being block `first`.
    pub fn encrypt(&self, buf: &mut [u8], first: u64) {
        let data = &self.keys.data;
        self.each_unit(buf, first, |pieces| data.encrypt_blocks(pieces));
    }

    /// Decrypts whole blocks in place, the first being block `first`.
    pub fn decrypt(&self, buf: &mut [u8], first: u64) {
        let data = &self.keys.data;
        self.each_unit(buf, first, |pieces| data.decrypt_blocks(pieces));
    }

    /// Runs `cipher` over each data unit of `buf` between two XORs with the
    /// unit's masks (see the module's essay), [`PASS`] pieces at a time.
    fn each_unit(&self, buf: &mut [u8], first: u64, cipher: impl Fn(&mut [Block<Aes256>])) {
        assert!(buf.len().is_multiple_of(self.block_size), "XTS on a piece of a block");
        let mut masks = Zeroizing::new([0u8; PASS * 16]);
        for (unit, data) in (first..).zip(buf.chunks_exact_mut(self.block_size)) {
            let mut t0 = Array(u128::from(unit).to_le_bytes());
            self.keys.tweak.encrypt_block(&mut t0);
            let mut t = u128::from_le_bytes(t0.0);
            t0.0.zeroize();
            for part in data.chunks_mut(PASS * 16) {
                let masks = &mut masks[..part.len()];
                for m in masks.chunks_exact_mut(16) {
                    m.copy_from_slice(&t.to_le_bytes());
                    t = times_alpha(t);
                }
                xor_into(part, masks);
                let (pieces, rest) = Array::<u8, U16>::slice_as_chunks_mut(part);
                debug_assert!(rest.is_empty());
                cipher(pieces);
                xor_into(part, masks);
            }
            t.zeroize();
        }
    }
}

/// Pieces of 16 bytes whose masks are computed, applied and ciphered in one
/// pass. The masks live on the stack, 512 bytes zeroed per call (the
/// zeroing is byte by byte, volatile): a block-sized buffer, allocated
/// zeroed and zeroed again per call, cost a one-block read a third of its
/// time (`examples/xts_speed.rs`, decrypt in 4 KiB calls: about 1.3 GB/s
/// with it, 1.9-2.2 without; 4 KiB on the stack was as slow). 32 pieces
/// keep AES-NI's 8-piece pipeline full: calls of 64 KiB run as fast as
/// before (about 2.0-2.4 GB/s on this loaded machine, either way).
const PASS: usize = 32;

/// `t` times α in XTS's GF(2^128), `t` as a little-endian number (IEEE
/// 1619-2007 §5.2): shift left, and fold the bit shifted out back in as
/// x^7 + x^2 + x + 1 (0x87), without a branch on the secret bit.
fn times_alpha(t: u128) -> u128 {
    (t << 1) ^ ((t >> 127) * 0x87)
}

fn xor_into(data: &mut [u8], masks: &[u8]) {
    for (d, m) in data.iter_mut().zip(masks) {
        *d ^= m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use xts_mode::{get_tweak_default, Xts128};

    fn cipher_from(key: &[u8; 64], bs: u32) -> BlockCipher {
        let mut m = Locked::<[u8; 64]>::zeroed().unwrap();
        m.get_mut().copy_from_slice(key);
        BlockCipher::new(&MasterKey::from_locked(m), bs).unwrap()
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// IEEE 1619-2007 Annex B, XTS-AES-256 vectors 10 (data unit 0xff) and
    /// 11 (0xffff): 512-byte data units, plaintext 00..ff twice.
    #[test]
    fn ieee_1619_vectors() {
        let key: [u8; 64] = hex(concat!(
            "2718281828459045235360287471352662497757247093699959574966967627",
            "3141592653589793238462643383279502884197169399375105820974944592"
        ))
        .try_into()
        .unwrap();
        let plain: Vec<u8> = (0..512).map(|i| i as u8).collect();
        let c = cipher_from(&key, 512);
        for (unit, want) in [(0xffu64, include_str!("xts_vector10.hex")), (0xffff, include_str!("xts_vector11.hex"))] {
            let mut b = plain.clone();
            c.encrypt(&mut b, unit);
            assert_eq!(b, hex(want.trim()), "vector for data unit {unit:#x}");
            c.decrypt(&mut b, unit);
            assert_eq!(b, plain);
        }
    }

    /// The reference: `xts-mode`'s own encryption, one piece at a time.
    fn reference(key: &[u8; 64], bs: usize, buf: &mut [u8], first: u64, encrypt: bool) {
        let xts = Xts128::new(Aes256::new_from_slice(&key[..32]).unwrap(), Aes256::new_from_slice(&key[32..]).unwrap());
        if encrypt {
            xts.encrypt_area(buf, bs, u128::from(first), get_tweak_default);
        } else {
            xts.decrypt_area(buf, bs, u128::from(first), get_tweak_default);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Same bytes as `xts-mode`'s encryption for any key, block size,
        /// block count and first block number (masks that carry out of the
        /// top bit included), and decryption undoes it.
        #[test]
        fn matches_xts_mode(
            key in prop::array::uniform32(any::<u8>()),
            key2 in prop::array::uniform32(any::<u8>()),
            bs_shift in 4u32..14,
            units in 1usize..5,
            first in any::<u64>(),
            seed in any::<u8>(),
        ) {
            let mut full = [0u8; 64];
            full[..32].copy_from_slice(&key);
            full[32..].copy_from_slice(&key2);
            let bs = 1usize << bs_shift;
            let first = first.min(u64::MAX - units as u64);
            let plain: Vec<u8> = (0..bs * units).map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed)).collect();
            let c = cipher_from(&full, bs as u32);
            let (mut ours, mut theirs) = (plain.clone(), plain.clone());
            c.encrypt(&mut ours, first);
            reference(&full, bs, &mut theirs, first, true);
            prop_assert_eq!(&ours, &theirs);
            c.decrypt(&mut ours, first);
            prop_assert_eq!(&ours, &plain);
            reference(&full, bs, &mut theirs, first, false);
            prop_assert_eq!(&theirs, &plain);
        }
    }

    #[test]
    fn block_sizes_that_are_no_multiple_of_16_are_refused() {
        let mut m = Locked::<[u8; 64]>::zeroed().unwrap();
        m.get_mut().copy_from_slice(&[1; 64]);
        let master = MasterKey::from_locked(m);
        assert!(BlockCipher::new(&master, 1000).is_err());
        assert!(BlockCipher::new(&master, 0).is_err());
        assert!(BlockCipher::new(&master, 1024).is_ok());
    }
}
