#!/usr/bin/env python3
"""Inclusive time per frame under ROOT, in µs per file: ARGS FILE ROOT FILES HZ [SUBSTRING].
Input: `perf script -F comm,tid,ip,sym` of a `perf record --call-graph dwarf -F HZ` run
that made FILES files."""
import sys, collections
from perfstacks import read_samples
samples=read_samples(sys.argv[1])
root=sys.argv[2]; n=float(sys.argv[3]); hz=float(sys.argv[4]); pat=sys.argv[5] if len(sys.argv)>5 else ''
c=collections.Counter(); selfc=collections.Counter(); k=0
for s in samples:
    if not any(root in f for f in s): continue
    k+=1
    idx=max(i for i,f in enumerate(s) if root in f)
    for f in set(s[:idx]): c[f]+=1
    selfc[s[0]]+=1
us=lambda v: v/hz/n*1e6
print(f"under {root}: {k} samples = {us(k):.2f} us/file")
for f,v in c.most_common(400):
    if pat in f: print(f"{us(v):6.2f} us  self {us(selfc[f]):5.2f}  {f[:150]}")
