"""The call stacks of `perf script -F comm,tid,ip,sym` output (dwarf call graphs), shared by
fold.py, incl.py and callers.py: a header line per sample, then its frames "ip sym", leaf
first, a blank line between samples."""
import re


def read_samples(path, strip_inlined=True):
    """Each sample's frames (symbols without their +0x offset), leaf first."""
    samples, cur = [], []
    for ln in open(path):
        ln = ln.rstrip('\n')
        if not ln.strip():
            if cur:
                samples.append(cur)
                cur = []
            continue
        if not ln.startswith((' ', '\t')):
            cur = []
            continue
        parts = ln.strip().split(' ', 1)
        sym = re.sub(r'\+0x[0-9a-f]+$', '', parts[1] if len(parts) > 1 else '?')
        if strip_inlined:
            sym = re.sub(r' \(inlined\)', '', sym)
        cur.append(sym)
    if cur:
        samples.append(cur)
    return samples
