//! POSIX ACLs, as ext4 keeps them: in the xattrs `system.posix_acl_access`
//! and `system.posix_acl_default`, kept in step with the file mode.
//!
//! ## Format
//! The kernel's xattr form (`posix_acl_xattr_header` + entries): a
//! little-endian u32 version (2), then 8-byte entries `{u16 tag, u16 perm,
//! u32 id}`, sorted by tag then id. cairn stores the value as given; it is
//! parsed and checked whenever cairn has to read or change it.
//!
//! ## Who does what
//! With FUSE's POSIX ACL support the kernel caches ACLs and enforces them
//! (`default_permissions`); the file system keeps them true: setting an
//! access ACL sets the mode's permission bits from it (and stores no ACL at
//! all when it says no more than the mode, as `posix_acl_update_mode`);
//! `chmod` rewrites the ACL's owner, mask (or group) and other entries; a
//! new inode in a directory with a default ACL inherits it (the create
//! mode masks the inherited entries, `posix_acl_create_masq`; the umask is
//! not applied), and a new directory inherits the default ACL itself.
//! Inherited ACLs are ordinary xattrs, so files created in one directory
//! share one xattr block (see `xattr`).

use crate::error::{FsError, Result};

pub const ACCESS: &[u8] = b"system.posix_acl_access";
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// The id of entries that have none.
const UNDEFINED_ID: u32 = u32::MAX;

/// One entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A parsed, checked ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl(pub Vec<AclEntry>);

fn invalid() -> FsError {
    FsError::Errno(libc::EINVAL)
}

impl Acl {
    /// Parses and checks the kernel's xattr form (EINVAL if malformed): one
    /// owner, owning-group and other entry, a mask if there are named
    /// entries, perms within rwx, tags sorted and named ids unique.
    pub fn parse(v: &[u8]) -> Result<Acl> {
        if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) || u32::from_le_bytes(v[..4].try_into().unwrap()) != VERSION
        {
            return Err(invalid());
        }
        let entries: Vec<AclEntry> = v[4..]
            .chunks_exact(8)
            .map(|c| AclEntry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        let count = |t: u16| entries.iter().filter(|e| e.tag == t).count();
        let named = count(USER) + count(GROUP);
        let ok_tags = entries.iter().all(|e| matches!(e.tag, USER_OBJ | USER | GROUP_OBJ | GROUP | MASK | OTHER));
        let ok_perm = entries.iter().all(|e| e.perm & !7 == 0);
        let unique_named = entries
            .windows(2)
            .all(|w| !(w[0].tag == w[1].tag && matches!(w[0].tag, USER | GROUP) && w[0].id >= w[1].id));
        let tags_ordered = entries.windows(2).all(|w| w[0].tag <= w[1].tag);
        if !ok_tags
            || !ok_perm
            || !unique_named
            || !tags_ordered
            || count(USER_OBJ) != 1
            || count(GROUP_OBJ) != 1
            || count(OTHER) != 1
            || count(MASK) > 1
            || (named > 0 && count(MASK) != 1)
        {
            return Err(invalid());
        }
        Ok(Acl(entries))
    }

    /// The xattr form.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for e in &self.0 {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            let id = if matches!(e.tag, USER | GROUP) { e.id } else { UNDEFINED_ID };
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    fn perm(&self, tag: u16) -> Option<u16> {
        self.0.iter().find(|e| e.tag == tag).map(|e| e.perm)
    }

    fn set(&mut self, tag: u16, perm: u16) {
        if let Some(e) = self.0.iter_mut().find(|e| e.tag == tag) {
            e.perm = perm;
        }
    }

    /// Whether the ACL says no more than a mode (three base entries).
    pub fn is_mode_equivalent(&self) -> bool {
        self.0.len() == 3
    }

    /// The permission bits (0o777) the ACL implies: owner, mask (or owning
    /// group), other.
    pub fn mode_bits(&self) -> u32 {
        let p = |t| u32::from(self.perm(t).unwrap_or(0));
        let group = self.perm(MASK).map_or(p(GROUP_OBJ), u32::from);
        (p(USER_OBJ) << 6) | (group << 3) | p(OTHER)
    }

    /// chmod: the owner, mask (or owning group) and other entries follow
    /// the new permission bits.
    pub fn chmod(&mut self, mode: u32) {
        let bits = |s: u32| ((mode >> s) & 7) as u16;
        self.set(USER_OBJ, bits(6));
        if self.perm(MASK).is_some() {
            self.set(MASK, bits(3));
        } else {
            self.set(GROUP_OBJ, bits(3));
        }
        self.set(OTHER, bits(0));
    }

    /// A new inode's access ACL from its directory's default ACL (`self`)
    /// and the create mode: every entry that the mode's class allows keeps
    /// its bits, and the mode loses what the entries deny. Returns the new
    /// mode and the ACL, or `None` for the ACL if it says no more than the
    /// mode.
    pub fn inherit(&self, mode: u32) -> (u32, Option<Acl>) {
        let mut acl = self.clone();
        let mut m = mode & 0o777;
        let has_mask = acl.perm(MASK).is_some();
        for e in &mut acl.0 {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m = (m & !0o700) | (u32::from(e.perm) << 6);
                }
                OTHER => {
                    e.perm &= (m & 7) as u16;
                    m = (m & !0o007) | u32::from(e.perm);
                }
                MASK => {
                    e.perm &= ((m >> 3) & 7) as u16;
                    m = (m & !0o070) | (u32::from(e.perm) << 3);
                }
                GROUP_OBJ if !has_mask => {
                    e.perm &= ((m >> 3) & 7) as u16;
                    m = (m & !0o070) | (u32::from(e.perm) << 3);
                }
                _ => {}
            }
        }
        let mode = (mode & !0o777) | m;
        (mode, (!acl.is_mode_equivalent()).then_some(acl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(e: &[(u16, u16, u32)]) -> Acl {
        Acl(e.iter().map(|&(tag, perm, id)| AclEntry { tag, perm, id }).collect())
    }

    #[test]
    fn round_trips_and_rejects_malformed_acls() {
        let a = acl(&[
            (USER_OBJ, 7, UNDEFINED_ID),
            (USER, 5, 1000),
            (GROUP_OBJ, 5, UNDEFINED_ID),
            (MASK, 5, UNDEFINED_ID),
            (OTHER, 0, UNDEFINED_ID),
        ]);
        assert_eq!(Acl::parse(&a.encode()).unwrap(), a);
        let no_mask = acl(&[(USER_OBJ, 7, 0), (USER, 5, 1000), (GROUP_OBJ, 5, 0), (OTHER, 0, 0)]);
        assert!(Acl::parse(&no_mask.encode()).is_err());
        let no_other = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0)]);
        assert!(Acl::parse(&no_other.encode()).is_err());
        let bad_perm = acl(&[(USER_OBJ, 8, 0), (GROUP_OBJ, 5, 0), (OTHER, 0, 0)]);
        assert!(Acl::parse(&bad_perm.encode()).is_err());
        let dup = acl(&[(USER_OBJ, 7, 0), (USER, 5, 1), (USER, 5, 1), (GROUP_OBJ, 5, 0), (MASK, 7, 0), (OTHER, 0, 0)]);
        assert!(Acl::parse(&dup.encode()).is_err());
        assert!(Acl::parse(&[2, 0, 0, 0, 1]).is_err());
        assert!(Acl::parse(&[1, 0, 0, 0]).is_err());
    }

    #[test]
    fn mode_bits_use_the_mask_and_chmod_moves_it() {
        let mut a = acl(&[(USER_OBJ, 6, 0), (USER, 7, 1000), (GROUP_OBJ, 4, 0), (MASK, 7, 0), (OTHER, 4, 0)]);
        assert_eq!(a.mode_bits(), 0o674);
        a.chmod(0o640);
        assert_eq!(a.mode_bits(), 0o640);
        assert_eq!(a.perm(MASK), Some(4));
        assert_eq!(a.perm(GROUP_OBJ), Some(4), "the owning group entry keeps its bits under a mask");
        let mut b = acl(&[(USER_OBJ, 6, 0), (GROUP_OBJ, 4, 0), (OTHER, 4, 0)]);
        assert!(b.is_mode_equivalent());
        b.chmod(0o751);
        assert_eq!(b.mode_bits(), 0o751);
    }

    #[test]
    fn inheritance_masks_the_default_acl_with_the_create_mode() {
        let d = acl(&[(USER_OBJ, 7, 0), (USER, 7, 1000), (GROUP_OBJ, 5, 0), (MASK, 7, 0), (OTHER, 5, 0)]);
        let (mode, a) = d.inherit(libc::S_IFREG | 0o666);
        let a = a.unwrap();
        assert_eq!(mode, libc::S_IFREG | 0o664);
        assert_eq!(a.perm(USER_OBJ), Some(6));
        assert_eq!(a.perm(USER), Some(7), "named entries keep their bits; the mask limits them");
        assert_eq!(a.perm(MASK), Some(6));
        assert_eq!(a.perm(OTHER), Some(4));
        let plain = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 0, 0), (OTHER, 0, 0)]);
        let (mode, a) = plain.inherit(libc::S_IFDIR | 0o777);
        assert_eq!(mode, libc::S_IFDIR | 0o700);
        assert!(a.is_none());
    }
}
