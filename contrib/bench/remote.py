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
          vs `curl -o /dev/null` of the same byte range, over http and
          https, with DELAY and straight from nginx (the daemon's own
          ceiling); then through links of --rates
          (bytes a second, all connections together: a network slower
          than this machine's loopback) with DELAY, of the 256 MiB tensor
          at the first rate and of the 1 GiB one at the others
  memmap  numpy.memmap full pass over a 256 MiB tensor vs curl of its
          range, over http and https
  again   a second mount of the unchanged file: requests

https (nginx's TLS port, HTTP/2 offered) goes through
remote_servers.DelayRelay instead, which delays every byte, not only the
requests and the answers' heads: FaultProxy cannot read TLS.  Both proxies
run a process per connection (a thread per connection in one Python
process made the proxy, not ptfs, the limit of 16 parallel ranges: the
machine was 44% busy while https crawled).  --before
OLD/ptfs adds that binary's sequential reads, alternated rep by rep.
The ptfs daemon's CPU seconds (all threads, and its busiest thread: the
engine's) and how busy the machine was are printed for every sequential
read.

  /usr/bin/python3 contrib/bench/remote.py [--ptfs build/ptfs] [--reps 3]
      [--delay 0.025] [--gib 1] [--before OLD/ptfs]
"""
import argparse
import contextlib
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


def curl_range(url, off, n, cafile=None):
    t = time.monotonic()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", "-r", "%d-%d" % (off, off + n - 1)]
                   + (["--cacert", cafile] if cafile else []) + [url], check=True)
    return time.monotonic() - t


def cpu_seconds(pid):
    """(all threads, the busiest thread) of process @pid, in CPU seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    per = []
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
            x = f.read().rsplit(")", 1)[1].split()
        per.append((int(x[11]) + int(x[12])) / tick)
    return sum(per), max(per)


def machine_cpu():
    """(busy, all) jiffies of every CPU of the machine so far."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)       # idle and iowait are not busy


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
    ap.add_argument("--before", help="another ptfs binary for the sequential rows")
    ap.add_argument("--rates", default="125e6,500e6",
                    help="link rates to read through, bytes a second ('' for none)")
    a = ap.parse_args()
    ptfs = os.path.abspath(a.ptfs)
    before = os.path.abspath(a.before) if a.before else None
    work = tempfile.mkdtemp(prefix="ptfs-bench-remote-")
    os.chmod(work, 0o755)
    res = {}
    try:
        print("generating checkpoints in %s ..." % work, flush=True)
        make(work, a.gib)
        rates = [float(x) for x in a.rates.split(",") if x]
        with contextlib.ExitStack() as st:
            n = st.enter_context(rs.Nginx(work, tls=True))
            # a process per connection: relaying 16 connections on threads
            # of one Python process, the proxy set the pace, not ptfs
            p, p0, t = [st.enter_context(rs.ProxyProcess(port, delay=d, kind=k, fork=True))
                        for port, d, k in ((n.port, a.delay, "proxy"),
                                           (n.port, 0.0, "proxy"),
                                           (n.tls_port, a.delay, "relay"))]
            links = [(rate,
                      st.enter_context(rs.ProxyProcess(n.port, delay=a.delay, rate=rate,
                                                       fork=True)),
                      st.enter_context(rs.ProxyProcess(n.tls_port, delay=a.delay,
                                                       kind="relay", rate=rate, fork=True)))
                     for rate in rates]
            rtt = 2 * a.delay
            res.update(bench_ls(ptfs, n, p, p0, work, a.reps, rtt))
            res.update(bench_read(ptfs, before, n, p, t, links, work, a.reps))
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


def mount_argv(ptfs, cache, url, cafile):
    o = "cache_dir=" + cache + (",cafile=" + cafile if cafile else "")
    return [ptfs, "-f", "-o", o, url]


def seq_once(ptfs, work, tag, url, cafile, key):
    """A cold sequential read of tensor @key through a mount: (seconds,
    CPU s, busiest thread's CPU s)."""
    cache = fresh(work, tag)
    with Mount(mount_argv(ptfs, cache, url, cafile),
               os.path.join(work, "mnt"), foreground=True) as m:
        b0, a0 = machine_cpu()
        dt = read_seq(os.path.join(work, "mnt", key))
        b1, a1 = machine_cpu()
        cpu = cpu_seconds(m.pid)
    # gone before its pages are written back: the kernel's writeback of
    # a run's GiB would take CPU from the next ones
    shutil.rmtree(cache, ignore_errors=True)
    return (dt,) + cpu + ((b1 - b0) / max(a1 - a0, 1),)


def bench_read(ptfs, before, n, p, t, links, work, reps):
    cert = n.cert
    url = p.url("big.pt")
    cache0 = fresh(work, "meta")
    span = {k: tensor_range(ptfs, url, cache0, k) for k in ("big", "mid")}
    mid_off, mid_n = span["mid"]
    # (name, url, cafile, binaries, tensor): every row alternates ptfs
    # and curl
    bins = [ptfs] + ([before] if before else [])
    rows = [("http", url, None, bins, "big"),
            ("http0", n.url("big.pt"), None, bins, "big"),
            ("https", t.url("big.pt", tls=True), cert, bins, "big"),
            ("https0", n.url("big.pt", tls=True), cert, bins, "big")]
    for i, (rate, lp, lt) in enumerate(links):
        key = "mid" if i == 0 else "big"
        rows += [("http@%g" % rate, lp.url("big.pt"), None, bins, key),
                 ("https@%g" % rate, lt.url("big.pt", tls=True), cert, bins, key)]
    seq = {(r[0], b): [] for r in rows for b in r[3]}
    curl = {r[0]: [] for r in rows}
    # memmap: unlimited, and through the first link
    mm_url = {r[0]: r[1] for r in rows if r[0] in ("http", "https") or
              (links and r[0].endswith("@%g" % links[0][0]))}
    mm_ca = {k: (cert if k.startswith("https") else None) for k in mm_url}
    mm = {k: [] for k in mm_url}
    mm_curl = {k: [] for k in mm_url}
    for i in range(reps):
        for name, u, ca, bins, key in rows:
            curl[name].append(curl_range(u, *span[key], ca))
            for b in bins:
                seq[(name, b)].append(seq_once(b, work, "seq-" + name, u, ca, key))
        for k in mm:
            mm_curl[k].append(curl_range(mm_url[k], mid_off, mid_n, mm_ca[k]))
            with Mount(mount_argv(ptfs, fresh(work, "mm"), mm_url[k], mm_ca[k]),
                       os.path.join(work, "mnt"), foreground=True):
                dt, total = memmap_pass(os.path.join(work, "mnt", "mid"))
                assert total == float(mid_n // 4), total
                mm[k].append(dt)
            shutil.rmtree(os.path.join(work, "cache-mm"), ignore_errors=True)
        print("rep %d: %s" % (i, ", ".join(
            "%s %s %.2f s" % (k[0], "ptfs" if k[1] == ptfs else "before", v[-1][0])
            for k, v in seq.items())), flush=True)
    # a second mount of the unchanged file
    cache = fresh(work, "again")
    for _ in range(2):          # the first fills the cache
        m = n.mark()
        with Mount(mount_argv(ptfs, cache, url, None), os.path.join(work, "mnt"),
                   foreground=True):
            os.listdir(os.path.join(work, "mnt"))
    med = statistics.median
    nbytes = {r[0]: span[r[4]][1] for r in rows}
    return {"memmap_bytes": mid_n,
            "again_requests": len(n.since(m, "big.pt")),
            "seq": [(name, "ptfs" if b == ptfs else "before",
                     med(x[0] for x in v), med(x[1] for x in v), med(x[2] for x in v),
                     med(curl[name]), [x[0] for x in v], nbytes[name],
                     med(x[3] for x in v))
                    for (name, b), v in seq.items()],
            "mm": [(k, med(mm[k]), med(mm_curl[k])) for k in mm]}


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
    each = "%.0f ms each way" % (a.delay * 1e3)
    where = {"http": "http, " + each, "http0": "http, 0 ms (nginx itself, no proxy)",
             "https": "https, " + each, "https0": "https, 0 ms (nginx itself, no relay)"}
    for name in [x[0] for x in r["seq"]] + [x[0] for x in r["mm"]]:
        if "@" in name:         # PROTO@RATE: through a link
            proto, rate = name.split("@")
            where[name] = "%s, %s, link of %.2g Gbit/s" % (proto, each, float(rate) * 8e-9)
    for name, who, t, cpu, busy, tc, every, nb, machine in r["seq"]:
        print("| sequential read, %.0f MiB tensor (mount), %s%s | %.2f s, %.0f MB/s "
              "(CPU %.2f s, engine thread %.2f s, machine %.0f%% busy; reps %s) "
              "| curl %.2f s, %.0f MB/s | %.2fx (target >= 0.9x) |" % (
                  nb / MiB, where[name], "" if who == "ptfs" else ", --before",
                  t, mb(nb, t), cpu, busy, 100 * machine,
                  " ".join("%.2f" % x for x in every), tc, mb(nb, tc), tc / t))
    for name, t, tc in r["mm"]:
        print("| numpy.memmap pass, %.0f MiB tensor, %s | %.2f s, %.0f MB/s | curl %.2f s, "
              "%.0f MB/s | %.2fx (target >= 0.7x) |" % (
                  r["memmap_bytes"] / MiB, where[name], t, mb(r["memmap_bytes"], t),
                  tc, mb(r["memmap_bytes"], tc), tc / t))
    print("| second mount of the unchanged file | %d request(s) | | target 1 |"
          % r["again_requests"])


if __name__ == "__main__":
    main()
