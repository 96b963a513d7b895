#!/usr/bin/env python3
"""Folds `perf script -F comm,tid,ip,sym` output (dwarf call graphs): ARGS FILE ROOT DEPTH.
Prints, of the samples whose stack holds ROOT, the frames DEPTH below its outermost
occurrence, with their share of all samples and of ROOT's."""
import sys, collections
from perfstacks import read_samples
samples=read_samples(sys.argv[1], strip_inlined=False)
root=sys.argv[2]; depth=int(sys.argv[3]) if len(sys.argv)>3 else 1
tot=len(samples)
inroot=[s for s in samples if any(root in f for f in s)]
print(f"samples {tot}, under {root}: {len(inroot)} ({100*len(inroot)/tot:.1f}%)")
# children: frame just below (callee side) the outermost root frame
c=collections.Counter()
for s in inroot:
    # s[0] is leaf; find outermost (highest index) frame matching root
    idx=max(i for i,f in enumerate(s) if root in f)
    path=tuple(s[max(0,idx-depth):idx][::-1]) if idx>0 else ('<self>',)
    c[path]+=1
for k,v in c.most_common(40):
    print(f"{100*v/tot:6.2f}% {100*v/len(inroot):6.1f}%  "+' > '.join(x[:90] for x in k))
