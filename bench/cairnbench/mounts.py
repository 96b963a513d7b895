"""Host-side checks around a mount, shared by the bench suite (fs.py), the
xattr grid (xattr_grid.py) and tests/external's full-disk suite
(fulldisk_mount.py): is a path a mount point, does anything still hold an
image's flock, and waiting until a condition holds.

Standard library only, importing nothing else from cairnbench: the
self-contained tools load it by path (`sys.path` gets `bench/`), and it
keeps working while the main suite's modules change.
"""

import fcntl
import os
import time


def is_mounted(path):
    """`path` is a mount point (the mount table's escapes, `\\040` for a
    space, decoded)."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split(" ")[4].encode().decode("unicode_escape") == path for line in f)


def image_free(img):
    """Nothing holds the image's flock (a cairn daemon holds it as long as it
    has the image open; `cairn fsck` and `cairn umount` test the same). A
    missing image is free."""
    try:
        fd = os.open(img, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def wait_until(pred, timeout, what, step=0.05):
    """Polls `pred` every `step` seconds until it holds; RuntimeError naming
    `what` after `timeout` seconds."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
