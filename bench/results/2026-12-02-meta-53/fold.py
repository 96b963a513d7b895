#!/usr/bin/env python3
"""Folds `perf script -F comm,tid,ip,sym` output (dwarf call graphs): ARGS FILE ROOT DEPTH.
Prints, of the samples whose stack holds ROOT, the frames DEPTH below its outermost
occurrence, with their share of all samples and of ROOT's."""
import sys, collections, re
# perf script output: header line "comm tid", then frames "ip sym", blank between samples
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
    sym=re.sub(r'\+0x[0-9a-f]+$','',sym)
    cur.append(sym)
if cur: samples.append(cur)
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
