#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Sharded checkpoints over HTTP: the round trips a cold `ptfs ls` pays.

nginx serves, from a temp dir, a 100-shard safetensors index
(model.safetensors.index.json), the same tensors as a 100-shard torch.save
index (pytorch_model.bin.index.json) and as a DCP directory of 100 .distcp
files (torch.distributed.checkpoint, when this torch has it).  `ptfs ls`
of each URL goes through tests/py/remote_servers.ProxyProcess with DELAY
added each way (default 25 ms: a 50 ms round trip, one more per new
connection), and again through the same proxy without delay; the round
trips paid are (with delay - without) / RTT, and, less disturbed by a
busy machine, the span of the requests (from the first one's start to the
last one's end, PTFS_REMOTE_TRACE) / RTT.  Cold cache every time (a fresh
-o cache_dir=), medians of --reps; `ptfs ls` of the local files too.  With --before OLD/ptfs the same
is measured for another binary, side by side.

  /usr/bin/python3 contrib/bench/remote_shards.py [--ptfs build/ptfs]
      [--before OLD/ptfs] [--shards 100] [--reps 3] [--delay 0.025]
"""
import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

import numpy as np      # noqa: E402
import torch            # noqa: E402

import remote_servers as rs     # noqa: E402


def write_st(path, tensors):
    """A safetensors file of {name: float32 array}."""
    header, data = {}, b""
    for k, a in tensors.items():
        raw = a.tobytes()
        header[k] = {"dtype": "F32", "shape": list(a.shape),
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)


def make(d, shards):
    """The three layouts, each in its own directory; their ls URLs' paths."""
    rng = np.random.default_rng(1)
    per = [{"layers.%d.%s" % (i, w): rng.standard_normal((64, 256)).astype(np.float32)
            for w in ("q", "k", "v", "o")} for i in range(shards)]
    out = {}
    st, pt = os.path.join(d, "st"), os.path.join(d, "pt")
    os.mkdir(st)
    os.mkdir(pt)
    wm_st, wm_pt = {}, {}
    for i, ts in enumerate(per):
        name = "model-%05d-of-%05d" % (i + 1, shards)
        write_st(os.path.join(st, name + ".safetensors"), ts)
        torch.save({k: torch.from_numpy(a) for k, a in ts.items()},
                   os.path.join(pt, name + ".bin"))
        for k in ts:
            wm_st[k] = name + ".safetensors"
            wm_pt[k] = name + ".bin"
    with open(os.path.join(st, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm_st}, f)
    with open(os.path.join(pt, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm_pt}, f)
    out["safetensors"] = "st/model.safetensors.index.json"
    out["torch .bin"] = "pt/pytorch_model.bin.index.json"
    if make_dcp(os.path.join(d, "dcp"), per):
        out["DCP"] = "dcp/.metadata"
    return out


def make_dcp(d, per):
    """A DCP directory: one .distcp file per shard (as a save by as many
    ranks writes them), each chunk a torch.save blob (torch 2.x layout,
    written by tests/py/test_dcp.py's generator)."""
    import test_dcp
    entries = [test_dcp.tentry(k, torch.from_numpy(a),
                               [{"offsets": [0, 0], "sizes": list(a.shape),
                                 "file": "__%d_0.distcp" % i}])
               for i, ts in enumerate(per) for k, a in ts.items()]
    os.mkdir(d)
    spec = os.path.join(os.path.dirname(d), "dcp-spec.json")
    with open(spec, "w") as f:
        json.dump({"entries": entries, "protocol": 4}, f)
    # the spec is too long for a command line: the generator reads a file
    code = "import sys\nsys.argv[1] = open(sys.argv[1]).read()\n" + test_dcp.GEN_2X
    subprocess.run([sys.executable, "-c", code, spec, d], check=True)
    os.unlink(spec)
    return True


def ls_once(ptfs, url):
    """(seconds, entries listed, seconds from the first request's start to
    the last one's end, from PTFS_REMOTE_TRACE; 0 for a local file)."""
    cache = tempfile.mkdtemp(prefix="ptfs-bench-cache-")
    env = dict(os.environ, PTFS_REMOTE_TRACE="1")
    try:
        t = time.monotonic()
        r = subprocess.run([ptfs, "ls", "-o", "cache_dir=" + cache, url],
                           capture_output=True, env=env)
        dt = time.monotonic() - t
        if r.returncode:
            raise SystemExit("%s ls %s: %s" % (ptfs, url, r.stderr.decode()))
        starts, ends = [], []
        for line in r.stderr.decode().splitlines():
            w = line.split()
            if len(w) >= 3 and w[0] == "remote:" and w[2] in ("start", "done"):
                (starts if w[2] == "start" else ends).append(float(w[1]))
        span = max(ends) - min(starts) if starts and ends else 0.0
        return dt, len(r.stdout.splitlines()), span
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def measure(ptfs, n, path, delay, reps):
    """Medians of: seconds with delay, without, the requests' span with
    delay; and the requests, their bytes, the entries listed."""
    with rs.ProxyProcess(n.port, delay=delay) as p, \
            rs.ProxyProcess(n.port, delay=0.0) as p0:
        slow, fast, span = [], [], []
        for _ in range(reps):
            m = n.mark()
            dt, lines, sp = ls_once(ptfs, p.url(path))
            reqs = n.since(m)
            slow.append(dt)
            span.append(sp)
            fast.append(ls_once(ptfs, p0.url(path))[0])
    return (statistics.median(slow), statistics.median(fast),
            statistics.median(span), len(reqs),
            sum(e["bytes"] for e in reqs), lines)


def local(ptfs, path, reps):
    """Median seconds of `ptfs ls` of a local file."""
    return statistics.median(ls_once(ptfs, path)[0] for _ in range(reps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", default=os.path.join(ROOT, "build", "ptfs"))
    ap.add_argument("--before", help="another ptfs binary (main's) to compare")
    ap.add_argument("--shards", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.025)
    ap.add_argument("--only", help="one layout: safetensors, bin, DCP")
    a = ap.parse_args()
    rtt = 2 * a.delay
    d = tempfile.mkdtemp(prefix="ptfs-bench-shards-")
    os.chmod(d, 0o755)
    try:
        paths = make(d, a.shards)
        bins = [("after", a.ptfs)] + ([("before", a.before)] if a.before else [])
        print("%d shards, 4 tensors of 64 KiB each; delay %.0f ms each way "
              "(RTT %.0f ms); %d reps, medians; cold cache" %
              (a.shards, a.delay * 1e3, rtt * 1e3, a.reps))
        print("| layout | binary | ls with delay | without | round trips "
              "(with - without) / RTT | requests' span | requests | bytes | "
              "entries | ls of the local files |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        with rs.Nginx(d) as n:
            for layout, path in paths.items():
                if a.only and a.only.lower() not in layout.lower():
                    continue
                for label, ptfs in bins:
                    s, f, sp, nreq, nbytes, lines = measure(ptfs, n, path,
                                                            a.delay, a.reps)
                    loc = local(ptfs, os.path.join(d, path), a.reps)
                    print("| %s | %s | %.3f s | %.3f s | **%.1f RTT** | "
                          "%.1f RTT | %d | %.1f MB | %d | %.3f s |" %
                          (layout, label, s, f, (s - f) / rtt, sp / rtt, nreq,
                           nbytes / 1e6, lines, loc), flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
