#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ONNX at 1 GiB: ptfs against onnx.load, alternated, medians.

    /usr/bin/python3 contrib/bench/onnx_load.py PTFS [REPS]

Writes a model of 16 float32 tensors of 64 MiB (onnx.helper, raw_data)
twice under $TMPDIR: in the model, and as external data in one file
beside it.  Then, REPS times (default 5), for each model in turn: `ptfs
ls`, `ptfs cat` of one tensor, a mount with every tensor read whole, and
onnx.load (which reads the external data too).  Prints the medians.
Needs python3-onnx, fusermount3 and 2 GiB of disk; removes what it wrote.
Warm page cache: the files were just written.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper


def write_models(d):
    inits = [numpy_helper.from_array(np.full((4096, 4096), i, np.float32),
                                     "layer.%d.weight" % i) for i in range(16)]
    model = helper.make_model(helper.make_graph([], "big", [], [], initializer=inits))
    onnx.save(model, os.path.join(d, "inline.onnx"))
    onnx.save_model(model, os.path.join(d, "external.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="external.data",
                    size_threshold=0)


def main():
    ptfs = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    d = tempfile.mkdtemp(prefix="ptfs-onnx-bench-")

    def ls(m):
        subprocess.run([ptfs, "ls", m], check=True, stdout=subprocess.DEVNULL)

    def cat_one(m):
        subprocess.run([ptfs, "cat", m, "layer.7.weight"], check=True,
                       stdout=subprocess.DEVNULL)

    def mount_read(m):
        mnt = tempfile.mkdtemp(prefix="ptfs-mnt-")
        subprocess.run([ptfs, m, mnt], check=True)
        try:
            for n in sorted(x for x in os.listdir(mnt) if not x.startswith(".")):
                with open(os.path.join(mnt, n), "rb") as f:
                    while f.read(1 << 20):
                        pass
        finally:
            subprocess.run(["fusermount3", "-u", mnt], check=True)
            os.rmdir(mnt)

    def onnx_load(m):
        subprocess.run([sys.executable, "-c", "import onnx, sys; onnx.load(sys.argv[1])", m],
                       check=True)

    try:
        write_models(d)
        runs = {}
        for _ in range(reps):
            for m in ("inline.onnx", "external.onnx"):
                path = os.path.join(d, m)
                for name, f in (("ptfs ls", ls), ("ptfs cat (one 64 MiB tensor)", cat_one),
                                ("mount, read all 1 GiB", mount_read),
                                ("onnx.load", onnx_load)):
                    t0 = time.perf_counter()
                    f(path)
                    runs.setdefault((m, name), []).append(time.perf_counter() - t0)
        for (m, name), v in runs.items():
            print("%-14s %-30s %.3f s (min %.3f, max %.3f)"
                  % (m, name, statistics.median(v), min(v), max(v)))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
