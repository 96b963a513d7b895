import os, sys, time, subprocess, statistics
mnt = sys.argv[1]
f = os.path.join(mnt, "f")
open(f, "w").close()
dd = subprocess.Popen(["dd", "if=/dev/zero", f"of={f}", "bs=1M", "count=1024", "conv=fsync,notrunc", "status=none"])
lat = []
while dd.poll() is None:
    t = time.perf_counter()
    try:
        os.getxattr(f, "user.none")
    except OSError:
        pass
    lat.append(time.perf_counter() - t)
lat.sort()
n = len(lat)
print(f"{n} getxattrs during the write: median {lat[n//2]*1e6:.0f} us, p99 {lat[int(n*0.99)]*1e6:.0f} us, max {lat[-1]*1e6:.0f} us, >200us {sum(1 for x in lat if x > 2e-4)}")
os.unlink(f)
