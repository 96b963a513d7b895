#!/usr/bin/env python3
"""A long-lived NFS client for tests/external/nfs.sh: Debian's libnfs (the
library behind nfs-cp, nfs-cat and nfs-ls) through ctypes, so that one
process can hold NFS file handles across a restart of the server side.

    nfs-client.py URL        e.g. nfs://127.0.0.1/export/path?version=3&nfsport=2049&mountport=20048

Mounts once (the root file handle is kept for the whole run; libnfs
reconnects by itself when the server restarts) and then reads commands from
stdin, one per line, answering one line each on stdout (first: "ready"):
    hold ID PATH   open PATH and keep the NFS file handle as ID   -> ok | err ERRNO MSG
    sum ID         sha256 of the whole file, read through handle ID -> SHA256 | err ERRNO MSG
    cat PATH       open PATH (looked up from the held root), sha256 -> SHA256 | err ERRNO MSG
    ls PATH        the names in directory PATH, sorted              -> N name,name,... | err ...
    mkdir PATH     make directory PATH                              -> ok | err ...
    drop ID        close handle ID                                  -> ok
Errors carry the positive errno libnfs returned (ESTALE 116, ENOENT 2).
"""
import ctypes
import ctypes.util
import hashlib
import sys


class NfsUrl(ctypes.Structure):
    _fields_ = [("server", ctypes.c_char_p), ("path", ctypes.c_char_p), ("file", ctypes.c_char_p)]


class Dirent(ctypes.Structure):
    _fields_ = [("next", ctypes.c_void_p), ("name", ctypes.c_char_p)]


class Stat64(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "dev", "ino", "mode", "nlink", "uid", "gid", "rdev", "size", "blksize", "blocks",
        "atime", "mtime", "ctime", "atime_nsec", "mtime_nsec", "ctime_nsec", "used")]


def load():
    name = ctypes.util.find_library("nfs") or "libnfs.so.13"
    lib = ctypes.CDLL(name)
    vp, cp, i, u64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64
    sig = {
        "nfs_init_context": ([], vp),
        "nfs_parse_url_dir": ([vp, cp], ctypes.POINTER(NfsUrl)),
        "nfs_mount": ([vp, cp, cp], i),
        "nfs_get_error": ([vp], cp),
        "nfs_set_dircache": ([vp, i], None),
        "nfs_open": ([vp, cp, i, ctypes.POINTER(vp)], i),
        "nfs_close": ([vp, vp], i),
        "nfs_fstat64": ([vp, vp, ctypes.POINTER(Stat64)], i),
        "nfs_pread": ([vp, vp, u64, u64, ctypes.c_char_p], i),
        "nfs_opendir": ([vp, cp, ctypes.POINTER(vp)], i),
        "nfs_readdir": ([vp, vp], ctypes.POINTER(Dirent)),
        "nfs_closedir": ([vp, vp], None),
        "nfs_mkdir": ([vp, cp], i),
    }
    for f, (args, res) in sig.items():
        fn = getattr(lib, f)
        fn.argtypes, fn.restype = args, res
    return lib


def main():
    lib = load()
    nfs = lib.nfs_init_context()
    url = lib.nfs_parse_url_dir(nfs, sys.argv[1].encode())
    if not url:
        print(f"bad url: {lib.nfs_get_error(nfs).decode()}", file=sys.stderr)
        return 1
    lib.nfs_set_dircache(nfs, 0)
    if lib.nfs_mount(nfs, url.contents.server, url.contents.path) != 0:
        print(f"mount: {lib.nfs_get_error(nfs).decode()}", file=sys.stderr)
        return 1
    held = {}

    def err(r):
        return f"err {-r} {lib.nfs_get_error(nfs).decode(errors='replace')}"

    def digest(fh):
        st = Stat64()
        r = lib.nfs_fstat64(nfs, fh, ctypes.byref(st))
        if r < 0:
            return err(r)
        h, off, buf = hashlib.sha256(), 0, ctypes.create_string_buffer(1 << 20)
        while off < st.size:
            r = lib.nfs_pread(nfs, fh, off, min(len(buf), st.size - off), buf)
            if r < 0:
                return err(r)
            if r == 0:
                return f"err 5 short read at {off} of {st.size}"
            h.update(buf.raw[:r])
            off += r
        return h.hexdigest()

    def open_path(path):
        fh = ctypes.c_void_p()
        r = lib.nfs_open(nfs, path.encode(), 0, ctypes.byref(fh))
        return (fh, None) if r == 0 else (None, err(r))

    print("ready", flush=True)
    for line in sys.stdin:
        cmd, _, rest = line.strip().partition(" ")
        if cmd == "hold":
            ident, _, path = rest.partition(" ")
            fh, e = open_path(path)
            if fh is not None:
                held[ident] = fh
            out = e or "ok"
        elif cmd == "sum":
            out = digest(held[rest]) if rest in held else "err 9 no such handle"
        elif cmd == "cat":
            fh, e = open_path(rest)
            out = e if fh is None else digest(fh)
            if fh is not None:
                lib.nfs_close(nfs, fh)
        elif cmd == "ls":
            d = ctypes.c_void_p()
            r = lib.nfs_opendir(nfs, rest.encode(), ctypes.byref(d))
            if r != 0:
                out = err(r)
            else:
                names = []
                while True:
                    ent = lib.nfs_readdir(nfs, d)
                    if not ent:
                        break
                    n = ent.contents.name.decode(errors="replace")
                    if n not in (".", ".."):
                        names.append(n)
                lib.nfs_closedir(nfs, d)
                out = f"{len(names)} {','.join(sorted(names))}"
        elif cmd == "mkdir":
            r = lib.nfs_mkdir(nfs, rest.encode())
            out = "ok" if r == 0 else err(r)
        elif cmd == "drop":
            fh = held.pop(rest, None)
            if fh is not None:
                lib.nfs_close(nfs, fh)
            out = "ok"
        elif cmd == "quit":
            break
        else:
            out = f"err 22 unknown command {cmd!r}"
        print(out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
