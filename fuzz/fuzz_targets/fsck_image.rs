//! fsck of a damaged image: check, repair, check again. fsck may find
//! anything, but never panic, hang or run out of memory, and a repair it
//! reports as verified must leave an image its own check finds clean.
//! Input: byte edits of the golden image's metadata.
#![no_main]

use cairn_fsck::{check_image, Options};
use cairn_fuzz::{mutated, MemImage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let img = mutated(data);
    let _ = check_image(&img, &Options::default());
    let mem = MemImage(std::sync::Mutex::new(img));
    let Ok(report) = check_image(&mem, &Options { repair: true, ..Default::default() }) else { return };
    let after = check_image(&mem, &Options::default()).expect("a repaired image can be checked");
    if report.verified_after_repair {
        assert!(after.is_clean(), "fsck verified its repair, then found: {:?}", after.problems);
    }
});
