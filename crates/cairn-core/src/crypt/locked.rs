//! Memory for keys: pages of their own, locked in RAM, left out of core
//! dumps, zeroed before they are given back.
//!
//! ## Purpose
//! The master key, the keys derived from passphrases and key files, and the
//! AES key schedules built from them live in a [`Locked`] value: an
//! anonymous mapping (`mmap`) of whole pages that `mlock` keeps out of swap
//! and `madvise(MADV_DONTDUMP)` keeps out of core dumps. On drop the value
//! is dropped in place, then every byte of the mapping is zeroed (with
//! `zeroize`, which the compiler cannot elide), unlocked and unmapped.
//!
//! ## Limits
//! `mlock` can fail (RLIMIT_MEMLOCK exhausted): the value is still held, and
//! a warning says so once; `MADV_DONTDUMP` does not fail on a private
//! anonymous mapping. A value built on the stack and then moved in (an AES
//! key schedule) leaves its bytes on the stack until they are overwritten;
//! raw key bytes are written straight into the mapping instead
//! ([`Locked::zeroed`] and [`Locked::get_mut`]). No `Debug` prints the
//! contents.
//!
//! ## Unsafe
//! The mapping is owned by one [`Locked`], holds exactly one `T` from
//! construction to drop, and is page-aligned (so aligned for any `T` whose
//! alignment is at most a page, checked at construction).

use std::io;
use std::ptr::NonNull;
use zeroize::Zeroize;

/// A `T` in locked, undumpable memory that is zeroed when dropped.
pub struct Locked<T> {
    ptr: NonNull<T>,
    /// Bytes of the mapping (whole pages).
    len: usize,
}

// SAFETY: `Locked<T>` owns its `T` exclusively (as a `Box<T>` does), so it
// may cross threads and be shared exactly when `T` may.
#[allow(unsafe_code)]
unsafe impl<T: Send> Send for Locked<T> {}
// SAFETY: as above; `&Locked<T>` only gives `&T`.
#[allow(unsafe_code)]
unsafe impl<T: Sync> Sync for Locked<T> {}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    #[allow(unsafe_code)]
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(4096)
}

impl<T> Locked<T> {
    /// Moves `value` into locked memory.
    pub fn new(value: T) -> io::Result<Locked<T>> {
        let page = page_size();
        assert!(std::mem::align_of::<T>() <= page, "a key type aligned beyond a page");
        let len = std::mem::size_of::<T>().max(1).div_ceil(page) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        #[allow(unsafe_code)]
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `p` is the mapping just made, `len` bytes long; mlock and
        // madvise change only how the kernel treats those pages.
        #[allow(unsafe_code)]
        let locked = unsafe {
            libc::madvise(p, len, libc::MADV_DONTDUMP);
            libc::mlock(p, len) == 0
        };
        if !locked {
            warn_once();
        }
        let ptr = NonNull::new(p.cast::<T>()).expect("mmap does not return null on success");
        // SAFETY: the mapping is writable, page-aligned (aligned for T, asserted
        // above) and at least size_of::<T>() bytes; nothing is there to drop.
        #[allow(unsafe_code)]
        unsafe {
            ptr.as_ptr().write(value)
        };
        Ok(Locked { ptr, len })
    }

    /// The value, mutably (to fill key bytes in place).
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: the mapping holds an initialised T owned by `self`, borrowed
        // mutably through `&mut self`.
        #[allow(unsafe_code)]
        unsafe {
            self.ptr.as_mut()
        }
    }
}

impl<const N: usize> Locked<[u8; N]> {
    /// `N` zero bytes in locked memory (key bytes are then written in place).
    pub fn zeroed() -> io::Result<Locked<[u8; N]>> {
        Locked::new([0u8; N])
    }
}

impl<T> std::ops::Deref for Locked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mapping holds an initialised T owned by `self`.
        #[allow(unsafe_code)]
        unsafe {
            self.ptr.as_ref()
        }
    }
}

impl<T> Drop for Locked<T> {
    fn drop(&mut self) {
        // SAFETY: the T is initialised and dropped exactly once, here; then the
        // mapping's `len` bytes (ours alone) are zeroed, unlocked and unmapped,
        // and `self.ptr` is never used again.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            let bytes = std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<u8>(), self.len);
            bytes.zeroize();
            let p = self.ptr.as_ptr().cast::<libc::c_void>();
            libc::munlock(p, self.len);
            libc::munmap(p, self.len);
        }
    }
}

impl<T> std::fmt::Debug for Locked<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Locked(<secret>)")
    }
}

fn warn_once() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "cannot mlock key memory ({}): keys may be swapped out (raise RLIMIT_MEMLOCK)",
            io::Error::last_os_error()
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_a_value_and_hides_it_from_debug() {
        let mut k = Locked::<[u8; 64]>::zeroed().unwrap();
        k.get_mut().copy_from_slice(&[0x5a; 64]);
        assert_eq!(k[..], [0x5a; 64]);
        assert_eq!(format!("{k:?}"), "Locked(<secret>)");
        let addr = k.ptr.as_ptr() as usize;
        assert_eq!(addr % page_size(), 0, "the key sits on a page of its own");
    }

    #[test]
    fn the_page_is_locked() {
        let k = Locked::<[u8; 32]>::zeroed().unwrap();
        let addr = k.ptr.as_ptr() as usize;
        let status = std::fs::read_to_string("/proc/self/smaps").unwrap();
        // The mapping's entry begins with its start address in hex; its Locked: line follows.
        let start = format!("{addr:x}-");
        let entry = status.split('\n').skip_while(|l| !l.starts_with(&start)).take(30).collect::<Vec<_>>();
        assert!(!entry.is_empty(), "the mapping is listed");
        let locked = entry.iter().find(|l| l.starts_with("Locked:")).unwrap();
        assert!(!locked.ends_with(" 0 kB"), "mlock took: {locked}");
        let flags = entry.iter().find(|l| l.starts_with("VmFlags:")).unwrap();
        assert!(flags.contains(" dd"), "MADV_DONTDUMP set: {flags}");
    }
}
