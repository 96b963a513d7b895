//! [`CryptDevice`]: a [`BlockDevice`] whose every block is encrypted on
//! the device beneath it with AES-256-XTS.
//!
//! ## Purpose
//! The engine, fsck and mkfs see an ordinary device: block 0 is the file
//! system's superblock block, the size is the file system's. Beneath, the
//! file system's block `n` is the inner device's bytes `data_offset + n *
//! block_size ..`, encrypted with the master key as one XTS data unit whose
//! tweak is `n` as a little-endian 128-bit number (dm-crypt's
//! `aes-xts-plain64` with a sector size of one cairn block). The header
//! region in front (`cairn_format::crypt_header`) is out of reach.
//!
//! ## I/O shapes
//! The engine reads and writes whole blocks; fsck and the superblock reader
//! also read pieces. A read of a piece reads, decrypts and copies out of the
//! whole blocks around it; a write of a piece (no caller does one today)
//! reads, patches and rewrites them, so it is not atomic with a concurrent
//! write of the same block. Writes encrypt into a buffer of their own (the
//! caller's bytes are never changed); reads decrypt in place. File data goes
//! through the inner device's `read_data`/`write_data`, so `O_DIRECT` keeps
//! working (its bounce buffers handle any alignment).
//!
//! ## Holes
//! A punched hole reads as zeros, which is no block's ciphertext: so
//! [`BlockDevice::zero_range`] writes encrypted zeros instead (mkfs and
//! resize zero the inode tables through it, 1/64 of the image at the
//! default inode ratio, and the engine may then skip reading a table block
//! before its first inode is taken, as on a plain image), and
//! [`BlockDevice::discard`] is refused unless the device was made with
//! discards allowed (they tell whoever reads the image which blocks are
//! free, as LUKS' `allow-discards`).

use super::xts::BlockCipher;
use crate::dev::BlockDevice;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Whether an encrypted device passes discards down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discards {
    Refused,
    Allowed,
}

/// An encrypted view of `D` (see the module's essay).
pub struct CryptDevice<D> {
    inner: D,
    /// Shared by every handle on the same image (see `crypt::Unlocked`).
    cipher: Arc<BlockCipher>,
    data_offset: u64,
    /// The file system's bytes: the inner device past `data_offset`, whole blocks.
    size: AtomicU64,
    discards: Discards,
}

fn whole_blocks(bytes: u64, bs: u64) -> u64 {
    bytes / bs * bs
}

impl<D: BlockDevice> CryptDevice<D> {
    /// Encrypted blocks on `inner` from byte `data_offset` on.
    pub fn new(inner: D, cipher: Arc<BlockCipher>, data_offset: u64, discards: Discards) -> CryptDevice<D> {
        let bs = cipher.block_size() as u64;
        let size = whole_blocks(inner.size().saturating_sub(data_offset), bs);
        CryptDevice { inner, cipher, data_offset, size: size.into(), discards }
    }

    /// The device beneath.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn bs(&self) -> u64 {
        self.cipher.block_size() as u64
    }

    fn check_range(&self, off: u64, len: usize) -> io::Result<()> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "access past the end of the device")),
        }
    }

    /// The whole blocks around `len` bytes at `off`: (first byte, length).
    fn span(&self, off: u64, len: usize) -> (u64, usize) {
        let bs = self.bs();
        let start = off / bs * bs;
        let end = (off + len as u64).div_ceil(bs) * bs;
        (start, (end - start) as usize)
    }

    fn read_with(&self, buf: &mut [u8], off: u64, data: bool) -> io::Result<()> {
        self.check_range(off, buf.len())?;
        let read = |b: &mut [u8], at: u64| {
            let at = self.data_offset + at;
            if data {
                self.inner.read_data(b, at)
            } else {
                self.inner.read_at(b, at)
            }
        };
        let bs = self.bs();
        if off.is_multiple_of(bs) && (buf.len() as u64).is_multiple_of(bs) {
            read(buf, off)?;
            self.cipher.decrypt(buf, off / bs);
            return Ok(());
        }
        let (start, len) = self.span(off, buf.len());
        let mut whole = vec![0u8; len];
        read(&mut whole, start)?;
        self.cipher.decrypt(&mut whole, start / bs);
        let skip = (off - start) as usize;
        buf.copy_from_slice(&whole[skip..skip + buf.len()]);
        Ok(())
    }

    fn write_with(&self, buf: &[u8], off: u64, data: bool) -> io::Result<()> {
        self.check_range(off, buf.len())?;
        let bs = self.bs();
        let (start, len) = self.span(off, buf.len());
        // Whole blocks (every engine write) are copied once; a piece is
        // patched into the blocks around it, read first.
        let mut whole = if start == off && len == buf.len() {
            buf.to_vec()
        } else {
            let mut around = vec![0u8; len];
            self.read_with(&mut around, start, data)?;
            let skip = (off - start) as usize;
            around[skip..skip + buf.len()].copy_from_slice(buf);
            around
        };
        self.cipher.encrypt(&mut whole, start / bs);
        let at = self.data_offset + start;
        if data {
            self.inner.write_data(&whole, at)
        } else {
            self.inner.write_at(&whole, at)
        }
    }
}

impl<D: BlockDevice> BlockDevice for CryptDevice<D> {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.read_with(buf, off, false)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.write_with(buf, off, false)
    }
    fn read_data(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.read_with(buf, off, true)
    }
    fn write_data(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.write_with(buf, off, true)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    fn zero_range(&self, off: u64, len: u64) -> io::Result<bool> {
        const CHUNK: u64 = 1 << 20;
        let zeros = vec![0u8; CHUNK.min(len) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK) as usize;
            self.write_at(&zeros[..n], off + done)?;
            done += n as u64;
        }
        Ok(true)
    }
    fn discard(&self, off: u64, len: u64) -> io::Result<bool> {
        match self.discards {
            Discards::Refused => Ok(false),
            Discards::Allowed => self.inner.discard(self.data_offset + off, len),
        }
    }
    fn make_writable(&self) -> io::Result<()> {
        self.inner.make_writable()
    }
    fn writable(&self) -> bool {
        self.inner.writable()
    }
    fn publish(&self, put: &mut dyn FnMut(&str, u64)) {
        self.inner.publish(put);
        put("dev.encrypted", 1);
    }
    fn grow_to(&self, bytes: u64) -> io::Result<()> {
        self.inner.grow_to(self.data_offset + bytes)?;
        let now = whole_blocks(self.inner.size().saturating_sub(self.data_offset), self.bs());
        self.size.fetch_max(now, Ordering::AcqRel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypt::keys::MasterKey;
    use crate::crypt::locked::Locked;
    use crate::dev::MemDevice;

    fn cipher_from(key: &[u8; 64], bs: u32) -> Arc<BlockCipher> {
        let mut m = Locked::<[u8; 64]>::zeroed().unwrap();
        m.get_mut().copy_from_slice(key);
        Arc::new(BlockCipher::new(&MasterKey::from_locked(m), bs).unwrap())
    }

    #[test]
    fn blocks_are_stored_encrypted_after_the_header_region() {
        let inner = MemDevice::new(1 << 20);
        let dev = CryptDevice::new(inner, cipher_from(&[9; 64], 4096), 64 << 10, Discards::Refused);
        assert_eq!(dev.size(), (1 << 20) - (64 << 10));
        let block = vec![b'x'; 4096];
        dev.write_at(&block, 8192).unwrap();
        let raw = dev.inner().snapshot();
        assert!(raw[..64 << 10].iter().all(|&b| b == 0), "the header region is untouched");
        let stored = &raw[(64 << 10) + 8192..][..4096];
        assert_ne!(stored, &block[..]);
        let mut back = vec![0u8; 4096];
        dev.read_at(&mut back, 8192).unwrap();
        assert_eq!(back, block);
        // The same plaintext in another block is another ciphertext (the tweak).
        dev.write_at(&block, 12288).unwrap();
        let raw = dev.inner().snapshot();
        assert_ne!(&raw[(64 << 10) + 12288..][..4096], stored);
    }

    #[test]
    fn pieces_read_and_write_through_whole_blocks() {
        let dev = CryptDevice::new(MemDevice::new(64 << 10), cipher_from(&[3; 64], 1024), 4096, Discards::Refused);
        let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        dev.write_at(&pattern, 0).unwrap();
        let mut piece = vec![0u8; 1500];
        dev.read_at(&mut piece, 1000).unwrap();
        assert_eq!(piece, pattern[1000..2500]);
        dev.write_data(b"hello", 2040).unwrap();
        let mut around = vec![0u8; 4096];
        dev.read_data(&mut around, 0).unwrap();
        assert_eq!(&around[2040..2045], b"hello");
        assert_eq!(&around[..2040], &pattern[..2040]);
        assert_eq!(&around[2045..], &pattern[2045..4096]);
        assert!(dev.read_at(&mut [0u8; 2], dev.size() - 1).is_err(), "past the end");
    }

    #[test]
    fn zeroing_writes_encrypted_zeros_and_discards_are_refused_by_default() {
        let dev = CryptDevice::new(MemDevice::new(64 << 10), cipher_from(&[3; 64], 1024), 4096, Discards::Refused);
        dev.write_at(&[1u8; 3072], 0).unwrap();
        assert!(!dev.discard(0, 1024).unwrap());
        let mut b = [0u8; 1024];
        dev.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [1u8; 1024], "nothing was discarded");
        assert!(dev.zero_range(1024, 2048).unwrap());
        let mut b = [9u8; 3072];
        dev.read_at(&mut b, 0).unwrap();
        assert_eq!((&b[..1024], &b[1024..]), (&[1u8; 1024][..], &[0u8; 2048][..]));
        let raw = dev.inner().snapshot();
        assert!(raw[4096 + 1024..4096 + 3072].iter().any(|&x| x != 0), "the zeros are stored encrypted");
        let allowed = CryptDevice::new(MemDevice::new(64 << 10), cipher_from(&[3; 64], 1024), 4096, Discards::Allowed);
        assert!(allowed.discard(0, 1024).unwrap());
    }

    #[test]
    fn growing_moves_the_end_not_the_start() {
        let dev = CryptDevice::new(MemDevice::new(64 << 10), cipher_from(&[5; 64], 1024), 4096, Discards::Refused);
        dev.write_at(&[7u8; 1024], 1024).unwrap();
        dev.grow_to(120 << 10).unwrap();
        assert_eq!(dev.size(), 120 << 10);
        assert_eq!(dev.inner().size(), (120 << 10) + 4096);
        let mut b = [0u8; 1024];
        dev.read_at(&mut b, 1024).unwrap();
        assert_eq!(b, [7u8; 1024]);
    }
}
