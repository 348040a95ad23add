#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Checkpoint surgery against the same edit in Python (docs/BENCHMARKS.md,
"Surgery").

1. Strip the optimizer from a training checkpoint: a state dict of N
   float32 [1024, 1024] weights and Adam's state for each (exp_avg,
   exp_avg_sq, step), about 3 x N x 4 MiB.  `ptfs rm CK optimizer`
   against `d = torch.load(CK); del d['optimizer']; torch.save(d, CK)`.
2. `ptfs rename CK --strip-prefix module.` of a state dict of K small
   tensors against torch.load + consume_prefix_in_state_dict_if_present
   + torch.save.

Each repetition copies the original to a fresh file (the copy is in the
page cache for both: warm; synced, so its writeback is not timed), then
runs each contender on its own copy,
alternating which goes first; wall time and peak RSS come from wait4()
of the child.  The table prints medians and the ratio Python / ptfs.
Everything is made in a mktemp -d directory (--dir picks its parent)
and removed at the end.

    /usr/bin/python3 contrib/bench/surgery.py --ptfs build/ptfs [--reps 3]
        [--n 128] [--k 20000] [--dir /var/tmp]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MAKE_TRAIN = r"""
import sys, torch
n = int(sys.argv[2])
sd = {'layers.%d.weight' % i: torch.randn(1024, 1024) for i in range(n)}
state = {i: {'step': torch.tensor(10.0), 'exp_avg': torch.randn(1024, 1024),
             'exp_avg_sq': torch.rand(1024, 1024)} for i in range(n)}
opt = {'state': state, 'param_groups': [{'lr': 1e-3, 'betas': (0.9, 0.999),
        'eps': 1e-8, 'weight_decay': 0.0, 'amsgrad': False,
        'params': list(range(n))}]}
torch.save({'model': sd, 'optimizer': opt, 'epoch': 3}, sys.argv[1])
"""

MAKE_DP = r"""
import sys, torch, collections
k = int(sys.argv[2])
sd = collections.OrderedDict(('module.blocks.%d.w' % i, torch.randn(16))
                             for i in range(k))
sd._metadata = collections.OrderedDict([('', {'version': 1}), ('module', {'version': 1})])
torch.save(sd, sys.argv[1])
"""

PY_STRIP = r"""
import sys, torch
d = torch.load(sys.argv[1])
del d['optimizer']
torch.save(d, sys.argv[1])
"""

PY_RENAME = r"""
import sys, torch
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
sd = torch.load(sys.argv[1])
consume_prefix_in_state_dict_if_present(sd, 'module.')
torch.save(sd, sys.argv[1])
"""


def timed(argv):
    """Wall seconds and peak RSS (MiB) of one child."""
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t
    err = p.stderr.read().decode()
    p.stderr.close()
    if status != 0:
        sys.exit("%s failed: %s" % (argv[:3], err))
    return wall, ru.ru_maxrss / 1024.0


def compare(name, orig, work, contenders, reps):
    res = {c: ([], []) for c in contenders}
    for r in range(reps):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for c in order:
            dst = os.path.join(work, c + ".pt")
            shutil.copyfile(orig, dst)
            os.sync()   # the copy's writeback does not land in the timing
            wall, rss = timed([a.replace("CK", dst) for a in contenders[c]])
            res[c][0].append(wall)
            res[c][1].append(rss)
            os.unlink(dst)
    print("%s (%d reps, medians; file %.2f GB)" % (name, reps, os.path.getsize(orig) / 1e9))
    med = {c: (statistics.median(w), statistics.median(m)) for c, (w, m) in res.items()}
    for c, (w, m) in med.items():
        print("  %-8s %8.2f s   peak RSS %8.1f MiB   (runs: %s)" %
              (c, w, m, " ".join("%.2f" % x for x in res[c][0])))
    a, b = list(med)
    print("  %s / %s: %.1fx the time, %.1fx the memory" %
          (b, a, med[b][0] / med[a][0], med[b][1] / med[a][1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--k", type=int, default=20000)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    ptfs = os.path.abspath(a.ptfs)
    work = tempfile.mkdtemp(prefix="ptfs-bench-surgery-", dir=a.dir)
    try:
        train = os.path.join(work, "train.orig")
        subprocess.run(["/usr/bin/python3", "-c", MAKE_TRAIN, train, str(a.n)], check=True)
        compare("strip the optimizer", train, work, {
            "ptfs": [ptfs, "rm", "CK", "optimizer"],
            "python": ["/usr/bin/python3", "-c", PY_STRIP, "CK"],
        }, a.reps)
        os.unlink(train)
        dp = os.path.join(work, "dp.orig")
        subprocess.run(["/usr/bin/python3", "-c", MAKE_DP, dp, str(a.k)], check=True)
        compare("strip 'module.' from %d keys" % a.k, dp, work, {
            "ptfs": [ptfs, "rename", "CK", "--strip-prefix", "module."],
            "python": ["/usr/bin/python3", "-c", PY_RENAME, "CK"],
        }, a.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
