#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Remote checkpoints, measured side by side in one run.

nginx serves checkpoints made here by torch.save on 127.0.0.1; every client
goes through tests/py/remote_servers.FaultProxy (its own process) with DELAY added each way
(default 25 ms: a 50 ms round trip, on connect too), so ptfs and curl see
the same network.  Prints a table (medians of --reps) and the ratios:

  ls      `ptfs ls` of a 20,000-tensor .pt, cold cache: requests, seconds,
          against 4 round trips + the bytes at curl's speed
  seq     sequential read (1 MiB reads) of a 1 GiB tensor through a mount
          vs `curl -o /dev/null` of the same byte range
  memmap  numpy.memmap full pass over a 256 MiB tensor vs curl of its range
  again   a second mount of the unchanged file: requests

  /usr/bin/python3 contrib/bench/remote.py [--ptfs build/ptfs] [--reps 3]
      [--delay 0.025] [--gib 1]
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
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, HERE)

import numpy as np      # noqa: E402
import torch            # noqa: E402

import remote_servers as rs     # noqa: E402
from lib import Mount           # noqa: E402

MiB = 1 << 20


def make(d, gib):
    torch.save({"t%d" % i: torch.full((3,), float(i)) for i in range(20000)},
               os.path.join(d, "wide.pt"))
    n = int(gib * (1 << 30)) // 4
    torch.save({"big": torch.ones(n), "mid": torch.ones(64 * MiB)},
               os.path.join(d, "big.pt"))


def tensor_range(ptfs, url, cache, key):
    """(file offset, bytes) of tensor @key, from `ptfs cat KEY.json`."""
    import json
    r = subprocess.run([ptfs, "cat", "-o", "cache_dir=" + cache, url, key + ".json"],
                       capture_output=True, check=True)
    m = json.loads(r.stdout)
    return m["file_offset"], m["nbytes"]


def curl_range(url, off, n):
    t = time.monotonic()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", "-r",
                    "%d-%d" % (off, off + n - 1), url], check=True)
    return time.monotonic() - t


def read_seq(path):
    t = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while f.read(MiB):
            pass
    return time.monotonic() - t


def memmap_pass(path):
    t = time.monotonic()
    a = np.memmap(path, dtype=np.float32, mode="r")
    s = float(a.sum(dtype=np.float64))
    del a
    return time.monotonic() - t, s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", default=os.path.join(ROOT, "build", "ptfs"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.025)
    ap.add_argument("--gib", type=float, default=1.0)
    a = ap.parse_args()
    ptfs = os.path.abspath(a.ptfs)
    work = tempfile.mkdtemp(prefix="ptfs-bench-remote-")
    os.chmod(work, 0o755)
    res = {}
    try:
        print("generating checkpoints in %s ..." % work, flush=True)
        make(work, a.gib)
        with rs.Nginx(work) as n, rs.ProxyProcess(n.port, delay=a.delay) as p, \
                rs.ProxyProcess(n.port, delay=0.0) as p0:
            rtt = 2 * a.delay
            res.update(bench_ls(ptfs, n, p, p0, work, a.reps, rtt))
            res.update(bench_read(ptfs, n, p, work, a.reps))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(res, a)


def fresh(work, tag):
    d = os.path.join(work, "cache-" + tag)
    shutil.rmtree(d, ignore_errors=True)
    return d


def ls_once(ptfs, n, url, cache):
    m = n.mark()
    t = time.monotonic()
    r = subprocess.run([ptfs, "ls", "--max", "100000", "-o", "cache_dir=" + cache, url],
                       capture_output=True)
    dt = time.monotonic() - t
    assert r.returncode == 0, r.stderr
    log = n.since(m, "wide.pt")
    return dt, len(log), sum(e["bytes"] for e in log)


def bench_ls(ptfs, n, p, p0, work, reps, rtt):
    """Cold `ptfs ls` through the delaying proxy and, alternated, through
    one without delay: the difference is what the round trips cost."""
    url = p.url("wide.pt")
    size = os.path.getsize(os.path.join(work, "wide.pt"))
    t_ls, t_ls0, reqs, sent = [], [], [], []
    for i in range(reps):
        dt, k, b = ls_once(ptfs, n, url, fresh(work, "ls%d" % i))
        t_ls.append(dt)
        reqs.append(k)
        sent.append(b)
        t_ls0.append(ls_once(ptfs, n, p0.url("wide.pt"), fresh(work, "ls0%d" % i))[0])
    # the same bytes fetched by curl in one request: transfer time + 1 RTT
    t_curl = [curl_range(url, size - 3 * MiB, 3 * MiB) for _ in range(reps)]
    t_local = []
    for _ in range(reps):
        t = time.monotonic()
        subprocess.run([ptfs, "ls", "--max", "100000", os.path.join(work, "wide.pt")],
                       capture_output=True, check=True)
        t_local.append(time.monotonic() - t)
    bw = 3 * MiB / max(statistics.median(t_curl) - 2 * rtt, 1e-3)
    return {"ls_s": statistics.median(t_ls), "ls_requests": max(reqs),
            "ls_nodelay_s": statistics.median(t_ls0),
            "ls_bytes": statistics.median(sent), "ls_local_s": statistics.median(t_local),
            "ls_budget_s": 4 * rtt + statistics.median(sent) / bw, "rtt": rtt,
            "wide_size": size}


def bench_read(ptfs, n, p, work, reps):
    url = p.url("big.pt")
    cache0 = fresh(work, "meta")
    big_off, big_n = tensor_range(ptfs, url, cache0, "big")
    mid_off, mid_n = tensor_range(ptfs, url, cache0, "mid")
    out = {"seq_bytes": big_n, "memmap_bytes": mid_n}
    seq, seq_curl, mm, mm_curl = [], [], [], []
    for i in range(reps):
        seq_curl.append(curl_range(url, big_off, big_n))
        cache = fresh(work, "seq%d" % i)
        with Mount([ptfs, "-f", "-o", "cache_dir=" + cache, url],
                   os.path.join(work, "mnt"), foreground=True):
            seq.append(read_seq(os.path.join(work, "mnt", "big")))
        mm_curl.append(curl_range(url, mid_off, mid_n))
        cache = fresh(work, "mm%d" % i)
        with Mount([ptfs, "-f", "-o", "cache_dir=" + cache, url],
                   os.path.join(work, "mnt"), foreground=True):
            t, s = memmap_pass(os.path.join(work, "mnt", "mid"))
            assert s == float(mid_n // 4), s
            mm.append(t)
    # a second mount of the unchanged file (cache of the last run)
    m = n.mark()
    with Mount([ptfs, "-f", "-o", "cache_dir=" + cache, url],
               os.path.join(work, "mnt"), foreground=True):
        os.listdir(os.path.join(work, "mnt"))
    out["again_requests"] = len(n.since(m, "big.pt"))
    out.update(seq_s=statistics.median(seq), seq_curl_s=statistics.median(seq_curl),
               mm_s=statistics.median(mm), mm_curl_s=statistics.median(mm_curl))
    return out


def report(r, a):
    mb = lambda nbytes, s: nbytes / s / 1e6     # noqa: E731
    print()
    print("remote checkpoints: loopback via a proxy adding %.0f ms each way "
          "(RTT %.0f ms), %d reps, medians" % (a.delay * 1e3, r["rtt"] * 1e3, a.reps))
    print("| measurement | ptfs | reference | ratio / target |")
    print("|---|---|---|---|")
    print("| ls, 20,000-tensor .pt (%.1f MB), cold cache | %.3f s, %d requests, %.2f MB "
          "| same without delay %.3f s; local file %.3f s; budget 4 RTT + transfer = %.3f s "
          "| round trips paid: %.1f RTT (target < 4); requests <= 3: %s; remote - local "
          "%.3f s |" % (
              r["wide_size"] / 1e6, r["ls_s"], r["ls_requests"], r["ls_bytes"] / 1e6,
              r["ls_nodelay_s"], r["ls_local_s"], r["ls_budget_s"],
              (r["ls_s"] - r["ls_nodelay_s"]) / r["rtt"], r["ls_requests"] <= 3,
              r["ls_s"] - r["ls_local_s"]))
    print("| sequential read, %.0f MiB tensor (mount) | %.2f s, %.0f MB/s | curl %.2f s, "
          "%.0f MB/s | %.2fx (target >= 0.8x) |" % (
              r["seq_bytes"] / MiB, r["seq_s"], mb(r["seq_bytes"], r["seq_s"]),
              r["seq_curl_s"], mb(r["seq_bytes"], r["seq_curl_s"]),
              r["seq_curl_s"] / r["seq_s"]))
    print("| numpy.memmap pass, %.0f MiB tensor | %.2f s, %.0f MB/s | curl %.2f s, "
          "%.0f MB/s | %.2fx (target >= 0.5x) |" % (
              r["memmap_bytes"] / MiB, r["mm_s"], mb(r["memmap_bytes"], r["mm_s"]),
              r["mm_curl_s"], mb(r["memmap_bytes"], r["mm_curl_s"]),
              r["mm_curl_s"] / r["mm_s"]))
    print("| second mount of the unchanged file | %d request(s) | | target 1 |"
          % r["again_requests"])


if __name__ == "__main__":
    main()
