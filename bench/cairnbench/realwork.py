"""Real work (issue #37): what users judge a file system by, timed on a real
source tree rather than on synthetic files.

The tree is Linux 6.1 as Debian ships it (`linux-source-6.1`: about 78,600
files, 1.3 GB), made once into a git repository of two commits and kept as a
plain tar (with its .git) in a cache directory, so every cell untars the same
bytes and the untar measures the file system, not xz. Then, on that tree:
the first `git status` (the index came from elsewhere, so git reads and
hashes every file: its clean answer also proves the untarred bytes), `git
status` cold (the file system's caches dropped) and warm, `git checkout` of
the second commit (a few thousand files changed, added and deleted), a real
build (`make tinyconfig && make -j2` of that kernel), and `rm -rf` of it all.
Seconds per phase, lower is better; cairn / ext4 per phase. The build is
mostly CPU on this 2-core machine, as it is for users: what the file system
adds to it is the point.

The cache (`CAIRN_BENCH_CACHE`, default /var/tmp/cairn-bench-cache) is made
by `prepare` before the first cell, from the package fetched by `apt-get
download` (the only network access); a second run reuses it.
"""

import glob
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import time

from .experiments import Experiment, Metric
from .fs import run

CACHE = os.environ.get("CAIRN_BENCH_CACHE", "/var/tmp/cairn-bench-cache")
PACKAGE = "linux-source-6.1"
# Bump when the recipe below changes: a cache made by another recipe is remade.
RECIPE = 1
TOP = "linux"  # the tree's directory in the tar and on the mount
BRANCH_B = "second"
# Fixed names and dates: the commits (and so the repositories) are the same
# wherever the cache is made from the same package version.
GIT_ID = {
    "GIT_AUTHOR_NAME": "cairn bench", "GIT_AUTHOR_EMAIL": "bench@cairn.invalid",
    "GIT_COMMITTER_NAME": "cairn bench", "GIT_COMMITTER_EMAIL": "bench@cairn.invalid",
}
# The build: make's own timestamps and names fixed, so the kernel image is
# the same bytes on every file system (a cross-check of what each one served).
KBUILD_ENV = {
    "KBUILD_BUILD_TIMESTAMP": "Thu Jan  1 00:00:00 UTC 2026",
    "KBUILD_BUILD_USER": "bench", "KBUILD_BUILD_HOST": "bench", "KBUILD_BUILD_VERSION": "1",
}
BUILD = {
    False: [["make", "-s", "tinyconfig"], ["make", "-s", "-j2"]],
    True: [["make", "-s", "-C", "tools/lib/subcmd", "-j2"], ["make", "-s", "-C", "tools/lib/api", "-j2"]],
}
PRODUCT = {False: "arch/x86/boot/bzImage", True: "tools/lib/subcmd/libsubcmd.a"}

PHASES = [
    ("untar", "untar of the repository, then `sync -f`"),
    ("refresh", "first `git status` (reads and hashes every file)"),
    ("status_cold", "`git status`, cold"),
    ("status_warm", "`git status`, warm"),
    ("checkout", "`git checkout` of the second commit"),
    ("build", "build"),
    ("rm", "`rm -rf` of the tree"),
    ("rm_sync", "`sync -f` after the `rm -rf`"),
    ("total", "all phases"),
]


def cache_paths(quick):
    name = "quick" if quick else "full"
    return os.path.join(CACHE, f"realwork-{name}.tar"), os.path.join(CACHE, f"realwork-{name}.json")


def sh(script, **kw):
    """Runs a bash pipeline with pipefail (a failing stage fails it)."""
    return run(["bash", "-o", "pipefail", "-c", script], **kw)


def second_commit(root):
    """Changes the tree at `root` into the second commit, deterministically:
    every 20th C source or header (in name order) gets a comment line at its
    end, every 10th file below a Documentation directory is deleted, and
    every 40th C source is copied below `cairn-bench-added/`. Returns the
    counts. None of it changes what the build compiles to."""
    files = run(["git", "-C", root, "ls-files", "-z"], capture_output=True).stdout.decode().split("\0")
    files = sorted(f for f in files if f)
    csrc = [f for f in files if f.endswith((".c", ".h"))]
    modified = 0
    for f in csrc[::20]:
        p = os.path.join(root, f)
        if os.path.islink(p):
            continue
        with open(p, "rb") as fh:
            data = fh.read()
        # A last line continued by a backslash would swallow the comment.
        if data.rstrip(b"\n").endswith(b"\\"):
            continue
        with open(p, "ab") as fh:
            fh.write((b"" if data.endswith(b"\n") or not data else b"\n") + b"/* cairn bench: second commit */\n")
        modified += 1
    docs = [f for f in files if "Documentation" in f.split("/")[:-1]]
    for f in docs[::10]:
        os.unlink(os.path.join(root, f))
    added = 0
    for f in [f for f in files if f.endswith(".c")][::40]:
        src = os.path.join(root, f)
        if os.path.islink(src) or not os.path.exists(src):
            continue
        dst = os.path.join(root, "cairn-bench-added", f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        added += 1
    return {"modified": modified, "deleted": len(docs[::10]), "added": added}


def make_cache(quick, log):
    """Makes the repository tar of one mode in the cache: the full kernel
    tree, or (quick) its tools/ directory with the top-level notices."""
    tar, meta_path = cache_paths(quick)
    os.makedirs(CACHE, exist_ok=True)
    debs = sorted(glob.glob(os.path.join(CACHE, f"{PACKAGE}_*_all.deb")))
    if not debs:
        log(f"realwork: fetching {PACKAGE} with `apt-get download` into {CACHE}")
        r = run(["apt-get", "download", PACKAGE], cwd=CACHE, check=False, capture_output=True, text=True)
        debs = sorted(glob.glob(os.path.join(CACHE, f"{PACKAGE}_*_all.deb")))
        if r.returncode or not debs:
            raise RuntimeError(f"`apt-get download {PACKAGE}` failed: {r.stderr.strip()[-500:]}")
    deb = debs[-1]
    version = os.path.basename(deb).split("_")[1]
    work = os.path.join(CACHE, f"work-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        log(f"realwork: extracting {os.path.basename(deb)}")
        inner = f"./usr/src/{PACKAGE}.tar.xz"
        sh(f"dpkg-deb --fsys-tarfile '{deb}' | tar -xO '{inner}' | xz -dc | tar -x -C '{work}'")
        src = os.path.join(work, PACKAGE)
        root = os.path.join(work, TOP)
        if quick:
            os.makedirs(root)
            for f in ["tools", "COPYING", "README", "LICENSES"]:
                os.rename(os.path.join(src, f), os.path.join(root, f))
        else:
            os.rename(src, root)
        # No automatic gc in the background of a commit: the explicit one below packs.
        env = {**os.environ, **GIT_ID, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
               "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.auto", "GIT_CONFIG_VALUE_0": "0"}

        def git(*args, date="2026-01-01T00:00:00Z"):
            r = run(["git", "-C", root, *args], env={**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
                    check=False, capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"`git {' '.join(args)}` exited {r.returncode}: {(r.stderr or r.stdout)[-1000:]}")

        log(f"realwork: making the repository ({'tools/ only' if quick else 'the whole tree'})")
        git("init", "-q", "-b", "main")
        # -f: the tree's own .gitignore files name some of its sources.
        git("add", "-A", "-f")
        git("commit", "-q", "-m", f"{PACKAGE} {version}")
        git("checkout", "-q", "-b", BRANCH_B)
        changes = second_commit(root)
        git("add", "-A", "-f")
        git("commit", "-q", "-m", "second commit: comments, deletions, additions", date="2026-01-02T00:00:00Z")
        git("checkout", "-q", "main")
        log("realwork: packing the repository (git gc)")
        git("gc", "-q", "--prune=now")

        def rev(ref):
            return run(["git", "-C", root, "rev-parse", ref], capture_output=True, text=True).stdout.strip()

        diff = run(["git", "-C", root, "diff", "--shortstat", "main", BRANCH_B], capture_output=True,
                   text=True).stdout.strip()
        files = int(run(["git", "-C", root, "ls-files"], capture_output=True, text=True).stdout.count("\n"))
        count = sum(len(fs) for _, _, fs in os.walk(root))
        log(f"realwork: writing {tar}")
        tmp = f"{tar}.{os.getpid()}.tmp"
        run(["tar", "-cf", tmp, "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-C", work, TOP])
        os.replace(tmp, tar)
        meta = {"recipe": RECIPE, "package": f"{PACKAGE} {version}", "tracked_files": files,
                "files_in_tar": count, "tar_bytes": os.path.getsize(tar), "commit_a": rev("main"),
                "commit_b": rev(BRANCH_B), "second_commit": changes, "diff": diff,
                "git_bytes": sum(os.path.getsize(os.path.join(d, f))
                                 for d, _, fs in os.walk(os.path.join(root, ".git")) for f in fs)}
        with open(f"{meta_path}.{os.getpid()}.tmp", "w") as fh:
            json.dump(meta, fh, indent=1)
        os.replace(f"{meta_path}.{os.getpid()}.tmp", meta_path)
        return meta
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_cache(quick):
    tar, meta_path = cache_paths(quick)
    try:
        with open(meta_path) as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return None
    return meta if meta.get("recipe") == RECIPE and os.path.exists(tar) else None


def read_through(path):
    """Reads a file to /dev/null: the untar then reads its source from the
    page cache in every cell, not from this machine's disk in some."""
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass


class RealWork(Experiment):
    name = "realwork"
    seed = "— (issue #37)"
    title = "Real work: untar, git and a build on a Linux source tree"
    tools = [("git", "git"), ("make", "make"), ("gcc", "gcc"), ("flex", "flex"), ("bison", "bison"),
             ("bc", "bc"), ("xz", "xz-utils"), ("dpkg-deb", "dpkg")]
    in_default = False  # a download and a 1.3 GB tree: `bench/run realwork`
    # A cell is 3-10 minutes (a kernel build): one run per cell, also when
    # it shares a `bench/run` with experiments repeated more often.
    max_reps = 1
    extra_fs = []
    # cairn and fuse2fs serve their image files, as users run them: 1.3 GB of
    # file data through a loop device would be copied twice (fs.py).
    cairn_on = "file"
    metrics = [Metric(k, "s", False, label) for k, label in PHASES]

    def __init__(self):
        self.meta = {}

    def fs_size(self, quick):
        return None if quick else 6 << 30

    def prepare(self, quick, log):
        meta = load_cache(quick)
        if meta is None:
            t0 = time.time()
            meta = make_cache(quick, log)
            log(f"realwork: cache made in {time.time() - t0:.0f} s")
        self.meta[quick] = meta

    def describe(self, quick):
        m = self.meta.get(quick) or load_cache(quick) or {}
        what = ("its tools/ directory (with COPYING, README, LICENSES)" if quick else "the whole tree")
        build = ("`make -C tools/lib/subcmd -j2` and `make -C tools/lib/api -j2` (two of the kernel's "
                 "user-space libraries: a smoke test of the phase, seconds)" if quick else
                 "`make tinyconfig && make -j2` of the kernel (tinyconfig with this tree's default ARCH, "
                 "a 32-bit x86 kernel here: kconfig built with flex and bison, then the kernel's objects "
                 "compiled and linked into arch/x86/boot/bzImage)")
        sc = m.get("second_commit", {})
        return (
            f"A git repository of {what} of Debian's `{m.get('package', PACKAGE)}` "
            f"({m.get('tracked_files', 0):,} tracked files; the tar holds {m.get('files_in_tar', 0):,} files "
            f"with .git, {m.get('tar_bytes', 0) / 1e9:.2f} GB, a packed .git of {m.get('git_bytes', 0) / 1e6:.0f} MB), "
            f"made once in {CACHE} and kept as a plain tar. Per cell, on a fresh file system: `tar -xf "
            "REPO.tar --no-same-owner` then `sync -f MP` (the tar read beforehand, so it comes from the page "
            "cache); the first `git status --porcelain` (the index was written on another file system, so "
            "its stat data matches no file: git reads and hashes all of them, and its empty answer proves "
            "every byte untarred); then every cache dropped (unmount, `drop_caches`, mount) and `git "
            "status --porcelain` cold, and at once again warm; `git checkout -q` of the second commit "
            f"({m.get('diff', '')}: every 20th C file given a comment line ({sc.get('modified', 0):,}), every "
            f"10th file below a Documentation directory deleted ({sc.get('deleted', 0):,}), every 40th C "
            f"file copied to a new directory ({sc.get('added', 0):,})), checked by `git status` (untimed); "
            f"the build: {build}"
            + ("" if quick else ", with KBUILD_BUILD_TIMESTAMP/USER/HOST fixed so that the image is the same "
               "bytes on every file system (its sha256 is compared below)")
            + "; then `rm -rf` of the tree, and "
            "`sync -f MP` after it (timed apart: a file system may defer the freeing). git runs with no "
            "system or global configuration (default preloadIndex, no fsmonitor or untracked cache). "
            "Seconds, lower is better; `total` is the sum. `sync -f` is syncfs(2) of the mount alone (cairn "
            "and the kernel file systems commit on it; fuse2fs, a plain `fuse` mount, gets no SYNCFS). The "
            "build uses both cores, so it is mostly compile time: what a file system adds to it is the "
            "difference."
        )

    def run(self, fs, v):
        quick = v["quick"]
        meta = self.meta.get(quick) or load_cache(quick)
        if meta is None:
            raise RuntimeError("no realwork cache (prepare did not run)")
        tar, _ = cache_paths(quick)
        tree = os.path.join(fs.mp, TOP)
        home = os.path.join(fs.scratch.path, "realwork-home")
        os.makedirs(home, exist_ok=True)
        env = {**os.environ, "HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
               "LC_ALL": "C", **KBUILD_ENV}
        log = os.path.join(fs.scratch.path, f"realwork-{fs.name}.log")
        res = {}

        def timed(key, cmds, cwd=tree, check_empty=False):
            t0 = time.time()
            outs = []
            for cmd in cmds:
                r = subprocess.run(cmd, cwd=cwd, env=env,
                                   stdin=subprocess.DEVNULL, capture_output=True)
                if r.returncode:
                    with open(log, "ab") as fh:
                        fh.write(r.stdout + r.stderr)
                    tail = (r.stderr or r.stdout).decode(errors="replace").strip()[-1500:]
                    raise RuntimeError(f"{key}: `{' '.join(cmd)}` exited {r.returncode}: {tail}")
                outs.append(r.stdout)
            res[key] = time.time() - t0
            if check_empty and any(outs):
                lines = b"".join(outs).decode(errors="replace").splitlines()
                raise RuntimeError(f"{key}: `git status` is not clean after {key}: {len(lines)} paths, e.g. "
                                   + "; ".join(lines[:5]))

        status = ["git", "status", "--porcelain"]
        read_through(tar)
        timed("untar", [["tar", "-xf", tar, "-C", fs.mp, "--no-same-owner"], ["sync", "-f", fs.mp]], cwd=fs.mp)
        timed("refresh", [status], check_empty=True)
        fs.remount_cold()
        timed("status_cold", [status], check_empty=True)
        timed("status_warm", [status], check_empty=True)
        timed("checkout", [["git", "checkout", "-q", BRANCH_B]])
        head = run(["git", "rev-parse", "HEAD"], cwd=tree, env=env, capture_output=True, text=True).stdout.strip()
        if head != meta["commit_b"]:
            raise RuntimeError(f"checkout: HEAD is {head}, not {meta['commit_b']}")
        after = run(status, cwd=tree, env=env, capture_output=True, text=True).stdout
        if after:
            raise RuntimeError(f"checkout: `git status` after it lists {len(after.splitlines())} paths, e.g. "
                               + "; ".join(after.splitlines()[:5]))
        timed("build", BUILD[quick])
        with open(os.path.join(tree, PRODUCT[quick]), "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        # The quick build's objects carry debug info with the mount point's
        # path in it: only the kernel's image compares.
        if not quick:
            res["product_sha256"] = digest
        timed("rm", [["rm", "-rf", tree]], cwd=fs.mp)
        timed("rm_sync", [["sync", "-f", fs.mp]], cwd=fs.mp)
        left = [x for x in os.listdir(fs.mp) if x != "lost+found"]
        if left:
            raise RuntimeError(f"rm: {fs.mp} still holds {left[:5]} after `rm -rf`")
        res["total"] = sum(res[k] for k, _ in PHASES if k != "total" and k in res)
        return res

    def variants(self, quick):
        return [{"label": "tools/ subset" if quick else "whole tree", "quick": quick}]

    def summary(self, cells, fs_order, quick):
        lab = self.variants(quick)[0]["label"]

        def runs(fsname):
            return [r for r in cells.get((self.name, lab, fsname), []) if "error" not in r]

        def med(fsname, key):
            vals = [r[key] for r in runs(fsname) if isinstance(r.get(key), (int, float))]
            return statistics.median(vals) if vals else None

        def f(x):
            return "—" if x is None else f"{x:,.1f}" if x >= 10 else f"{x:.2f}"

        shown = [x for x in fs_order if runs(x)]
        if not shown:
            return []
        base = "cairn" if "cairn" in shown else None
        md = [f"**{lab}** (seconds, medians of runs; cairn / ext4 above 1× means cairn took longer):", "",
              "| phase | " + " | ".join(shown) + " | cairn / ext4 |", "|---|" + "---|" * (len(shown) + 1)]
        for key, label in PHASES:
            c, e = med(base, key) if base else None, med("ext4", key)
            md.append(f"| {label} | " + " | ".join(f(med(x, key)) for x in shown) + " | "
                      + (f"{c / e:.2f}×" if c and e else "—") + " |")
        shas = {x: {r.get("product_sha256") for r in runs(x)} - {None} for x in shown}
        every = set().union(*shas.values())
        md.append("")
        if len(every) == 1:
            md.append(f"The build's product (`{PRODUCT[quick]}`) is the same bytes on every file system "
                      f"(sha256 {next(iter(every))[:16]}…).")
        elif every:
            md.append(f"The build's product (`{PRODUCT[quick]}`) **differs** between file systems: "
                      + "; ".join(f"{x} {', '.join(s[:16] for s in sorted(v))}" for x, v in shas.items()))
        md.append("")
        return md
