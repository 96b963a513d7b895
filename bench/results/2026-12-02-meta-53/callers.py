#!/usr/bin/env python3
"""Who called LEAF: ARGS FILE LEAF REGEX. For each sample whose stack holds LEAF, the
first frame above it matching REGEX, counted (used for the page faults of the create)."""
import sys, collections, re
from perfstacks import read_samples
samples=read_samples(sys.argv[1])
leaf=sys.argv[2]; pat=sys.argv[3]
c=collections.Counter()
for s in samples:
    i=next((i for i,f in enumerate(s) if leaf in f),None)
    if i is None: continue
    # first frame above i matching pat
    j=next((f for f in s[i:] if re.search(pat,f)),'?')
    c[j]+=1
for k,v in c.most_common(25): print(v,k[:150])
