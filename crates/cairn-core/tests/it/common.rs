//! Helpers: images in RAM, mounting, remounting.

use cairn_core::dev::{BlockDevice, MemDevice};
use cairn_core::mkfs::{format, MkfsOptions};
use cairn_core::{Fs, MountOptions};
use std::sync::Arc;

/// A freshly formatted in-memory image of `mib` MiB.
pub fn new_image(mib: u64) -> Arc<MemDevice> {
    new_image_with(mib, &MkfsOptions::default())
}

/// A freshly formatted in-memory image with options.
pub fn new_image_with(mib: u64, opts: &MkfsOptions) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(mib << 20));
    format(dev.as_ref(), opts, &mut |_, _| {}).expect("mkfs");
    dev
}

/// Mounts `dev` with default options.
pub fn mount(dev: &Arc<MemDevice>) -> Arc<Fs> {
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mount(d, MountOptions::default()).expect("mount")
}
