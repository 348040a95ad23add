#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Benchmarks of statistics, diffs and previews, side by side in one run (docs/BENCHMARKS.md,
"Statistics, diff, previews"):

  stat     ptfs stat of a >= 1 GiB checkpoint against the same statistics
           with torch (torch.load + per-tensor min/max/mean/std, zero/NaN/
           Inf counts, hashlib.sha256 of the bytes); wall time and peak RSS.
  diff     ptfs diff of two 1.5 GB checkpoints differing in one tensor
           against torch (load both, torch.equal per tensor, max |a-b| and
           relative L2 where they differ).
  previews first `ls -l` of a 200-tensor folder with -o previews, then
           stat of every NAME.png (what a file manager does before it asks
           for thumbnails), and the reads of one picture of a 4 GiB tensor.

Contenders alternate within each repetition; the table quotes medians.
Page cache warm for both (each file is read once first).

    /usr/bin/python3 contrib/bench/view.py --ptfs build/ptfs [--reps N] [--quick]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lib  # noqa: E402  (mount helpers that always unmount)

TORCH_STAT = r'''
import hashlib, sys, torch
sd = torch.load(sys.argv[1])
nan = 0
for k, t in sd.items():
    fin = t[torch.isfinite(t)].double()
    r = (fin.min().item(), fin.max().item(), fin.mean().item(),
         fin.std(unbiased=False).item(), int((t == 0).sum()),
         int(torch.isnan(t).sum()), int(torch.isposinf(t).sum()),
         int(torch.isneginf(t).sum()),
         hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest())
    nan += r[5] > 0
print(len(sd), nan)
'''

TORCH_DIFF = r'''
import sys, torch
a = torch.load(sys.argv[1]); b = torch.load(sys.argv[2])
changed = 0
for k in sorted(set(a) | set(b)):
    if k not in a or k not in b or a[k].shape != b[k].shape or a[k].dtype != b[k].dtype:
        changed += 1
        continue
    if not torch.equal(a[k], b[k]):
        d = (a[k].double() - b[k].double())
        mx = d.abs().max().item(); rel = (d.norm() / a[k].double().norm()).item()
        changed += 1
print(changed)
'''


def timed(cmd):
    """Wall seconds of one child process, and its result."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit("%s failed: %s" % (cmd[:3], r.stderr.decode()[-500:]))
    return dt, r


def peak_rss(cmd):
    """Peak RSS in MiB of @cmd, from /usr/bin/time when present."""
    if os.path.exists("/usr/bin/time"):
        r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return int(r.stderr.decode().strip().splitlines()[-1]) / 1024
    return float("nan")


def warm(*paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def make_ckpts(d, quick):
    import torch
    torch.manual_seed(0)
    n_stat = 16 if quick else 64                    # x 16 MiB float32
    sd = {"layers.%d.weight" % i: torch.randn(4096, 1024) for i in range(n_stat)}
    sd["layers.3.weight"][5, 7] = float("nan")
    stat_ck = os.path.join(d, "stat.pt")
    torch.save(sd, stat_ck)
    del sd
    n_diff = 24 if quick else 96                    # x 16 MiB = 1.5 GiB
    sd = {"w.%d" % i: torch.randn(4096, 1024) for i in range(n_diff)}
    a = os.path.join(d, "a.pt")
    torch.save(sd, a)
    sd["w.%d" % (n_diff // 2)][100, 100] += 1.0
    b = os.path.join(d, "b.pt")
    torch.save(sd, b)
    del sd
    sd = {"blocks.%d.%s" % (i // 4, ["q", "k", "v", "o"][i % 4]): torch.randn(256, 256)
          for i in range(200)}
    many = os.path.join(d, "many.pt")
    torch.save(sd, many)
    return stat_ck, a, b, many


def side_by_side(name, ours, theirs, reps):
    t_ours, t_theirs = [], []
    for i in range(reps):
        pair = [(ours, t_ours), (theirs, t_theirs)]
        if i % 2:
            pair.reverse()
        for cmd, acc in pair:
            acc.append(timed(cmd)[0])
    mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
    return {"name": name, "ptfs": mo, "torch": mt, "speed": mt / mo}


def previews(ptfs, many, d):
    """A file manager's first visit: list, stat every entry (the NAME.png
    ones render then), then read every picture."""
    mnt = os.path.join(d, "mnt-previews")
    with lib.Mount([ptfs, "-o", "previews", many], mnt):
        t0 = time.perf_counter()
        names = os.listdir(mnt)
        for n in names:
            if not n.endswith(".png"):
                os.lstat(os.path.join(mnt, n))
        t_ls = time.perf_counter() - t0
        pngs = [n for n in names if n.endswith(".png")]
        t0 = time.perf_counter()
        for n in pngs:
            os.stat(os.path.join(mnt, n))
        t_png = time.perf_counter() - t0
        t0 = time.perf_counter()
        for n in pngs:
            with open(os.path.join(mnt, n), "rb") as f:
                f.read()
        t_again = time.perf_counter() - t0
    return len(pngs), t_ls, t_png, t_again


def big_preview(ptfs, d):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "py"))
    p = os.path.join(d, "big.safetensors")
    from viewutil import st_sparse
    st_sparse(p, "w", "F32", [32768, 32768], 4 << 30)
    t0 = time.perf_counter()
    r = subprocess.run([ptfs, "preview", "-v", p, "w", "--output", os.devnull],
                       capture_output=True, check=True)
    dt = time.perf_counter() - t0
    m = re.search(r"read (\d+) bytes in (\d+) reads", r.stderr.decode())
    return dt, int(m[1]), int(m[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", default=os.path.join(HERE, "..", "..", "build", "ptfs"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    ptfs = os.path.abspath(a.ptfs)
    d = tempfile.mkdtemp(prefix="ptfs-bench-view-", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        stat_ck, ca, cb, many = make_ckpts(d, a.quick)
        warm(stat_ck, ca, cb)
        py = "/usr/bin/python3"
        rows = [side_by_side("stat %.2f GiB" % (os.path.getsize(stat_ck) / (1 << 30)),
                             [ptfs, "stat", stat_ck], [py, "-c", TORCH_STAT, stat_ck], a.reps),
                side_by_side("diff 2 x %.2f GB" % (os.path.getsize(ca) / 1e9),
                             [ptfs, "diff", "-q", ca, cb], [py, "-c", TORCH_DIFF, ca, cb], a.reps)]
        rss = {"stat": (peak_rss([ptfs, "stat", stat_ck]), peak_rss([py, "-c", TORCH_STAT, stat_ck])),
               "diff": (peak_rss([ptfs, "diff", "-q", ca, cb]), peak_rss([py, "-c", TORCH_DIFF, ca, cb]))}
        print("%-22s %10s %10s %8s %14s %14s" % ("measurement", "ptfs s", "torch s", "speed",
                                              "ptfs RSS MiB", "torch RSS MiB"))
        for r, k in zip(rows, ("stat", "diff")):
            print("%-22s %10.3f %10.3f %7.2fx %14.1f %14.1f" % (r["name"], r["ptfs"], r["torch"],
                                                            r["speed"], rss[k][0], rss[k][1]))
        n, t_ls, t_png, t_again = previews(ptfs, many, d)
        print("previews, 200 tensors of 256x256: listing + lstat of the 400 other entries"
              " %.3f s; first stat of the %d NAME.png (renders) %.3f s = %.1f ms each;"
              " reading them all then (cached) %.3f s" %
              (t_ls, n, t_png, 1000 * t_png / n, t_again))
        dt, nbytes, nreads = big_preview(ptfs, d)
        print("preview of a 4 GiB float32 tensor (sparse file): %.3f s, read %d bytes in %d reads"
              % (dt, nbytes, nreads))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
