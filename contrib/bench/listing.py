#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`ls -l` of a flat folder of large tensors, cold, with -o previews against
without (docs/BENCHMARKS.md, "Listing a folder with previews").

The checkpoint: N float32 tensors of SHAPE in one flat state dict, made
with torch.save in a mktemp -d dir (removed at the end).  Each run mounts
afresh (the daemon knows nothing yet), evicts the checkpoint's pages from
the page cache (posix_fadvise DONTNEED on that file only), then times
`ls -l` of the mount root.  The contenders alternate within each
repetition; the table quotes medians, and what the daemon read: bytes by
/proc/PID/io (rchar) and, where the binary counts them, its reads of
tensor bytes (the root's user.ptfs.tensor_reads).  --before BINARY adds
another build's -o previews (e.g. one that drew every picture to know
its size) as a third contender.

    /usr/bin/python3 contrib/bench/listing.py --ptfs build/ptfs [--before OLD]
        [--reps N] [--n 66] [--shape 4096x1024]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lib  # noqa: E402  (mount helpers that always unmount)


def make_ckpt(path, n, shape):
    code = ("import sys, torch\n"
            "torch.manual_seed(0)\n"
            "n, shape = int(sys.argv[2]), [int(x) for x in sys.argv[3].split('x')]\n"
            "torch.save({'model.layers.%d.weight' % i: torch.randn(shape) for i in range(n)},"
            " sys.argv[1])\n")
    subprocess.run(["/usr/bin/python3", "-c", code, path, str(n), shape], check=True)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def rchar(pid):
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def tensor_reads(mnt):
    try:
        return int(os.getxattr(mnt, "user.ptfs.tensor_reads"))
    except OSError:
        return None


def one(argv, ckpt, mnt):
    """Mount, evict, time ls -l: (seconds, bytes read, tensor reads)."""
    with lib.Mount(argv + [ckpt], mnt, foreground=True) as m:
        evict(ckpt)
        r0, n0 = rchar(m.pid), tensor_reads(mnt)
        t0 = time.perf_counter()
        out = subprocess.run(["ls", "-l", mnt], capture_output=True, check=True).stdout
        dt = time.perf_counter() - t0
        r1, n1 = rchar(m.pid), tensor_reads(mnt)
    lines = out.count(b"\n")
    return dt, r1 - r0, None if n0 is None else n1 - n0, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", default="build/ptfs")
    ap.add_argument("--before", help="another build's ptfs, with -o previews as well")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=66)
    ap.add_argument("--shape", default="4096x1024")
    a = ap.parse_args()
    ptfs = os.path.abspath(a.ptfs)
    contenders = [("without previews", [ptfs, "-f"]),
                  ("-o previews", [ptfs, "-f", "-o", "previews"])]
    if a.before:
        contenders.append(("-o previews, --before build",
                           [os.path.abspath(a.before), "-f", "-o", "previews"]))
    d = tempfile.mkdtemp(prefix="ptfs-bench-listing-")
    try:
        ckpt = os.path.join(d, "flat.pt")
        make_ckpt(ckpt, a.n, a.shape)
        print("%d float32 tensors [%s] in one folder, %.2f GB" %
              (a.n, a.shape.replace("x", ", "), os.path.getsize(ckpt) / 1e9))
        res = {name: [] for name, _ in contenders}
        for rep in range(a.reps):
            order = contenders if rep % 2 == 0 else contenders[::-1]
            for name, argv in order:
                res[name].append(one(argv, ckpt, os.path.join(d, "mnt")))
        base = statistics.median(r[0] for r in res[contenders[0][0]])
        print("| ls -l, cold | median | vs without | daemon read | tensor reads | lines |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, _ in contenders:
            rs = res[name]
            t = statistics.median(r[0] for r in rs)
            nb = statistics.median(r[1] for r in rs)
            tr = rs[-1][2]
            print("| %s | %.3f s | %.2fx | %.1f MB | %s | %d |" %
                  (name, t, t / base, nb / 1e6, "-" if tr is None else tr, rs[-1][3]))
        print("runs:", {k: [round(r[0], 3) for r in v] for k, v in res.items()})
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
