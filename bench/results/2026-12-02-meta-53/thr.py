"""Per-thread CPU, run-queue wait, read syscalls and context switches of a daemon per file:
`thr.py snap PID OUT.json` before, `thr.py diff OUT.json PID FILES` after (from
/proc/PID/task/*/{schedstat,io,status})."""
import os, sys, json
def snap(pid):
    out={}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            comm=open(f"/proc/{pid}/task/{t}/comm").read().strip()
            io=dict(l.split(": ") for l in open(f"/proc/{pid}/task/{t}/io").read().splitlines())
            ss=open(f"/proc/{pid}/task/{t}/schedstat").read().split()
            st=open(f"/proc/{pid}/task/{t}/status").read()
            vol=int(st.split("voluntary_ctxt_switches:")[1].split()[0]); nv=int(st.split("nonvoluntary_ctxt_switches:")[1].split()[0])
            out[f"{comm}/{t}"]=dict(syscr=int(io["syscr"]),syscw=int(io["syscw"]),cpu_ns=int(ss[0]),wait_ns=int(ss[1]),slices=int(ss[2]),vol=vol,nvol=nv)
        except Exception as e: pass
    return out
if sys.argv[1]=="snap":
    json.dump(snap(int(sys.argv[2])),open(sys.argv[3],"w"))
else:
    a=json.load(open(sys.argv[2])); b=snap(int(sys.argv[3])); n=float(sys.argv[4])
    tot={}
    for k in sorted(b):
        if k not in a: continue
        d={x:b[k][x]-a[k][x] for x in b[k]}
        print(f"{k:28s} cpu/file {d['cpu_ns']/n/1000:6.2f}us wait/file {d['wait_ns']/n/1000:6.2f}us reads/file {d['syscr']/n:5.2f} slices/file {d['slices']/n:5.2f} vol {d['vol']/n:5.2f} invol {d['nvol']/n:5.2f}")
        for x in d: tot[x]=tot.get(x,0)+d[x]
    print(f"{'TOTAL':28s} cpu/file {tot['cpu_ns']/n/1000:6.2f}us wait/file {tot['wait_ns']/n/1000:6.2f}us slices/file {tot['slices']/n:5.2f}")
