"""Shared by every part of tests/external/fulldisk.py: sizes, errno names, the log line
on stderr, and the deterministic content of the files (a function of seed, file name and
offset) with the reading and comparing of it."""

import errno
import functools
import os
import random
import sys
import time

MiB = 1 << 20
KiB = 1 << 10
BLOCK = 1 << 16  # content is generated in 64 KiB blocks


def errname(e):
    if isinstance(e, OSError):
        e = e.errno
    if e is None:
        return "E?"
    return errno.errorcode.get(e, str(e))


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": KiB, "M": MiB, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def fmt_bytes(n):
    if n >= MiB:
        return f"{n / MiB:.1f}MiB"
    if n >= KiB:
        return f"{n / KiB:.1f}KiB"
    return f"{n}B"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Deterministic content
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=48)
def _block(seed, name, k):
    return random.Random(f"{seed}:{name}:{k}").randbytes(BLOCK)


def content(seed, name, off, n):
    """Bytes [off, off+n) of file `name` for `seed`."""
    out = bytearray()
    pos, end = off, off + n
    while pos < end:
        k = pos // BLOCK
        s = pos - k * BLOCK
        e = min(BLOCK, end - k * BLOCK)
        out += _block(seed, name, k)[s:e]
        pos = k * BLOCK + e
    return bytes(out)


def pread_full(fd, n, off):
    parts = []
    got = 0
    while got < n:
        b = os.pread(fd, min(n - got, 4 * MiB), off + got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def describe_mismatch(off, want, got):
    """Why `got` (read at off) is not `want`."""
    if len(got) < len(want) and got == want[: len(got)]:
        return f"short: the file ends at {off + len(got)}"
    i = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), len(got))
    at = off + i
    tail = got[i:]
    where = f"byte {at}" + (" (a 4 KiB boundary)" if at % 4096 == 0 else "")
    if tail and tail.count(0) == len(tail):
        return f"zeros from {where}" + ("" if len(got) == len(want) else f", the file ends at {off + len(got)}")
    return f"differs from {where}"
