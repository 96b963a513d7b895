//! Which groups hold a backup superblock: ext4's `sparse_super` set.
//!
//! ## Purpose
//! A backup copy of the superblock sits in group 1 and in the groups whose
//! number is a power of 3, 5 or 7 (1, 3, 5, 7, 9, 25, 27, 49, ...): a
//! handful of copies however large the image, spread across it. Three
//! modules ask which groups those are: the superblock's own validation (a
//! copy's `backup_group` must be one), the layout (a group with a copy has
//! its bitmaps and inode table one block later) and the backups themselves
//! ([`crate::backup`]: writing and finding the copies).
//!
//! ## Layout
//! Pure arithmetic on group numbers, below all three: it imports nothing,
//! so that the superblock, the layout and the backups can share it without
//! importing one another in a circle. Whether an image keeps copies at all
//! (`INCOMPAT_BACKUP_SUPERBLOCKS`), and which of these groups the journal
//! fills, is the layout's to say ([`crate::layout::Geometry`]).

/// True if group `g` is in ext4's sparse_super set: 0, 1, and the powers of
/// 3, 5 and 7.
pub fn is_sparse_group(g: u64) -> bool {
    if g <= 1 {
        return true;
    }
    [3u64, 5, 7].iter().any(|&base| {
        let mut p = base;
        while p < g {
            match p.checked_mul(base) {
                Some(next) => p = next,
                None => return false,
            }
        }
        p == g
    })
}

/// The sparse groups from 1 up to (not including) `group_count`, in
/// increasing order.
pub fn sparse_groups(group_count: u64) -> impl Iterator<Item = u64> {
    let mut v: Vec<u64> = vec![1];
    for base in [3u64, 5, 7] {
        let mut p = Some(base);
        while let Some(q) = p.filter(|&q| q < group_count) {
            v.push(q);
            p = q.checked_mul(base);
        }
    }
    v.retain(|&g| g < group_count);
    v.sort_unstable();
    v.dedup();
    v.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sparse_groups_are_ext4s() {
        let want = [0u64, 1, 3, 5, 7, 9, 25, 27, 49, 81, 125, 243, 343];
        let got: Vec<u64> = (0..400).filter(|&g| is_sparse_group(g)).collect();
        assert_eq!(got, want);
        assert_eq!(sparse_groups(400).collect::<Vec<_>>(), want[1..]);
        assert_eq!(sparse_groups(1).count(), 0);
        assert_eq!(sparse_groups(4).collect::<Vec<_>>(), [1, 3]);
        assert!(is_sparse_group(3u64.pow(40)) && !is_sparse_group(u64::MAX));
    }
}
