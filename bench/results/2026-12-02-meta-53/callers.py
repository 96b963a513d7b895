#!/usr/bin/env python3
"""Who called LEAF: ARGS FILE LEAF REGEX. For each sample whose stack holds LEAF, the
first frame above it matching REGEX, counted (used for the page faults of the create)."""
import sys, collections, re
samples=[]; cur=[]
for ln in open(sys.argv[1]):
    ln=ln.rstrip('\n')
    if not ln.strip():
        if cur: samples.append(cur); cur=[]
        continue
    if not ln.startswith((' ','\t')):
        cur=[]; continue
    parts=ln.strip().split(' ',1)
    sym=parts[1] if len(parts)>1 else '?'
    sym=re.sub(r'\+0x[0-9a-f]+$','',sym); sym=re.sub(r' \(inlined\)','',sym)
    cur.append(sym)
if cur: samples.append(cur)
leaf=sys.argv[2]; pat=sys.argv[3]
c=collections.Counter()
for s in samples:
    i=next((i for i,f in enumerate(s) if leaf in f),None)
    if i is None: continue
    # first frame above i matching pat
    j=next((f for f in s[i:] if re.search(pat,f)),'?')
    c[j]+=1
for k,v in c.most_common(25): print(v,k[:150])
