//! An administrator's commands against a live mount: `cairn mkfs --force`
//! of the mounted image is refused before anything changes.

mod common;

use common::*;

#[test]
fn mkfs_of_a_mounted_image_is_refused_before_anything_changes() {
    if !can_mount() {
        return;
    }
    let (dir, _g, pid) = fresh_mount("m.img", "256M");
    let (img, mp) = (dir.path().join("m.img"), dir.path().join("mnt"));
    std::fs::write(mp.join("f"), vec![7u8; 1 << 20]).unwrap();
    std::fs::File::open(mp.join("f")).unwrap().sync_all().unwrap();
    for size in ["512M", "128M"] {
        let o = run(&["mkfs", p(&img), "--force", "--size", size, "--quiet"]);
        assert_eq!(o.status.code(), Some(1), "mkfs --size {size} of a mounted image: {}", stderr(&o));
        assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
        assert_eq!(std::fs::metadata(&img).unwrap().len(), 256 << 20, "a refused mkfs --size {size} resized the image");
    }
    assert_eq!(std::fs::read(mp.join("f")).unwrap(), vec![7u8; 1 << 20]);
    unmount(&mp, pid);
    assert_fsck_clean(&img, "fsck after the refused mkfs");
}
