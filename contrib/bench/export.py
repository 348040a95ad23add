# SPDX-License-Identifier: MIT
"""Benchmarks of export and the pickle-free loader.

    /usr/bin/python3 contrib/bench/export.py [--ptfs build/ptfs] [--reps 5]
                                             [--gib 1.25] [--train-gb 1.5]

1. `ptfs export --to safetensors` of a >= 1 GiB torch.save checkpoint,
   against `cp` of the same file, `cp` followed by `sync -f` (the same
   durability as the export, which fsyncs before its rename), and
   torch.load + a hand-written safetensors writer in Python (the usual
   conversion script); contenders alternated in every repetition, page
   cache warm, medians; peak RSS of each (GNU time's %M).
2. contrib/python/ptfs_load.load() against torch.load on a training
   checkpoint (model + Adam state): time to a usable dict and peak RSS,
   each in a fresh process (RSS at that point, from /proc/self/status);
   then the same plus reading every tensor once (peak RSS: file pages of
   the memmaps count as resident once touched).
   torch 1.13's weights_only=True refuses the floats such a checkpoint
   holds (lr, betas), so its row is torch.load(weights_only=False).
Everything lives in a mktemp dir that is removed at the end.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"

TORCH_ST = r'''
import json, struct, sys, torch
names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
         torch.int64: "I64", torch.float64: "F64", torch.int32: "I32", torch.uint8: "U8"}
sd = torch.load(sys.argv[1], map_location="cpu")
head, off, order = {}, 0, sorted(sd)
for k in order:
    t = sd[k]
    n = t.numel() * t.element_size()
    head[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
    off += n
text = json.dumps(head, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for k in order:
        f.write(sd[k].contiguous().numpy().tobytes())
'''

LOAD_PTFS = r'''
import sys, time
sys.path.insert(0, sys.argv[3])
t0 = time.perf_counter()
import ptfs_load
sd = ptfs_load.load(sys.argv[1], ptfs=sys.argv[2])
t1 = time.perf_counter()
rss = [l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]
s = 0.0
def walk(v):
    global s
    if isinstance(v, dict):
        for x in v.values(): walk(x)
    elif isinstance(v, (list, tuple)):
        for x in v: walk(x)
    elif hasattr(v, "dtype") and v.size:
        s += float(v.reshape(-1)[:: max(1, v.size // 4096)].sum()) + float(v.sum())
walk(sd)
t2 = time.perf_counter()
print(t1 - t0, t2 - t0, rss)
'''

LOAD_TORCH = r'''
import sys, time
t0 = time.perf_counter()
import torch
sd = torch.load(sys.argv[1], map_location="cpu")
t1 = time.perf_counter()
rss = [l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]
s = 0.0
def walk(v):
    global s
    if isinstance(v, dict):
        for x in v.values(): walk(x)
    elif isinstance(v, (list, tuple)):
        for x in v: walk(x)
    elif torch.is_tensor(v) and v.numel():
        s += float(v.sum())
walk(sd)
t2 = time.perf_counter()
print(t1 - t0, t2 - t0, rss)
'''


def run(cmd):
    """(seconds, peak RSS in KiB, stdout) of a child process.  The RSS comes
    from GNU time run as the child: ru_maxrss of a process forked from this
    Python would count the Python image it had before exec."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), p.stderr.decode()))
    return dt, int(p.stderr.decode().split()[-1]), p.stdout


def gen(work, gib, train_gb):
    code = r'''
import sys, torch
gib, train_gb, a, b = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.manual_seed(0)
n = int(gib * (1 << 30) / (32 << 20))
torch.save({"layer.%d.weight" % i: torch.randn(2048, 4096) for i in range(n)}, a)
# training checkpoint: model (1/3) + Adam exp_avg and exp_avg_sq (2/3)
params = int(train_gb * 1e9 / 4 / 3 / (1 << 20))
model = torch.nn.ModuleList([torch.nn.Linear(1024, 1024, bias=False) for _ in range(params)])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for p in model.parameters():
    p.grad = torch.ones_like(p)
opt.step()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
            "best_loss": 0.25}, b)
'''
    a, b = os.path.join(work, "big.pt"), os.path.join(work, "train.pt")
    subprocess.run([PY, "-c", code, str(gib), str(train_gb), a, b], check=True)
    return a, b


def med(xs):
    return statistics.median(xs)


def bench_export(ptfs, ck, work, reps):
    out = os.path.join(work, "out")
    rows = {"cp": [], "cp + sync": [], "ptfs export": [], "ptfs export --no-fsync": [],
            "torch.load + writer": []}
    rss = {k: [] for k in rows}
    cmds = {"cp": ["cp", ck, out],
            "cp + sync": ["sh", "-c", 'cp "$0" "$1" && sync -f "$1"', ck, out],
            "ptfs export": [ptfs, "export", ck, "--to", "safetensors", out],
            "ptfs export --no-fsync": [ptfs, "export", ck, "--to", "safetensors", "--no-fsync",
                                       out],
            "torch.load + writer": [PY, "-c", TORCH_ST, ck, out]}
    with open(ck, "rb") as f:               # warm
        while f.read(1 << 24):
            pass
    names = list(rows)
    for r in range(reps):
        for name in (names if r % 2 == 0 else names[::-1]):
            if os.path.exists(out):
                os.unlink(out)
            # no writeback of the previous run's output pending (untimed)
            subprocess.run(["sync", "-f", work], check=True)
            dt, kib, _ = run(cmds[name])
            rows[name].append(dt)
            rss[name].append(kib)
    os.unlink(out)
    return {k: (med(v), max(rss[k])) for k, v in rows.items()}


def bench_loader(ptfs, ck, reps):
    rows = {"ptfs_load.load": [], "torch.load": []}
    touch = {k: [] for k in rows}
    rss = {k: [] for k in rows}
    rss_dict = {k: [] for k in rows}
    cmds = {"ptfs_load.load": [PY, "-c", LOAD_PTFS, ck, ptfs, os.path.join(ROOT, "contrib", "python")],
            "torch.load": [PY, "-c", LOAD_TORCH, ck]}
    with open(ck, "rb") as f:
        while f.read(1 << 24):
            pass
    names = list(rows)
    for r in range(reps):
        for name in (names if r % 2 == 0 else names[::-1]):
            _, kib, out = run(cmds[name])
            t_load, t_all, at_dict = out.split()
            rows[name].append(float(t_load))
            touch[name].append(float(t_all))
            rss[name].append(kib)
            rss_dict[name].append(int(at_dict))
    return {k: (med(rows[k]), med(touch[k]), max(rss_dict[k]), max(rss[k])) for k in rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", default=os.path.join(ROOT, "build", "ptfs"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gib", type=float, default=1.25)
    ap.add_argument("--train-gb", type=float, default=1.5)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ptfs-bench-export-")
    try:
        ck, train = gen(work, a.gib, a.train_gb)
        size = os.path.getsize(ck)
        e = bench_export(os.path.abspath(a.ptfs), ck, work, a.reps)
        print("== export of a %.2f GiB torch.save checkpoint (%d tensors) to safetensors, "
              "warm cache, median of %d" % (size / (1 << 30), int(a.gib * 32), a.reps))
        print("%-24s %9s %10s %14s %12s" % ("", "seconds", "vs cp", "vs cp + sync",
                                             "peak RSS"))
        for k, (t, kib) in e.items():
            print("%-24s %9.3f %9.2fx %13.2fx %9.1f MiB" % (
                k, t, e["cp"][0] / t, e["cp + sync"][0] / t, kib / 1024))
        l = bench_loader(os.path.abspath(a.ptfs), train, a.reps)
        print("== loading a %.2f GB training checkpoint (model + Adam state), fresh process, "
              "median of %d" % (os.path.getsize(train) / 1e9, a.reps))
        print("%-16s %12s %14s %14s %16s %18s" % ("", "usable dict", "vs torch.load",
                                                   "RSS then", "+ read all", "peak RSS"))
        for k, (t, tall, kib_d, kib) in l.items():
            print("%-16s %11.3fs %13.1fx %10.1f MiB %15.3fs %14.1f MiB" % (
                k, t, l["torch.load"][0] / t, kib_d / 1024, tall, kib / 1024))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"export": e, "loader": l}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
