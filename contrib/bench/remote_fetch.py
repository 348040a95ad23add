#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What a remote checkpoint fetches, and sequential speed, for two ptfs
binaries side by side (before/after a change of the fetch policy).

nginx serves checkpoints made here by torch.save on 127.0.0.1; bytes and
requests are counted in its access log ($bytes_sent).  Every client goes
through tests/py/remote_servers.FaultProxy (its own process) adding DELAY
each way (default 25 ms).  Each binary, cold cache each time:

  ls-st   `ptfs ls` of a 4.7 MB .safetensors (its header: 8 + N bytes)
  tensor  a mount, then `cat` of one 4 MiB tensor of a .pt (between a
          4 MiB tensor and the 1 GiB one)
  rand1   a mount, then one 4 KiB read (POSIX_FADV_RANDOM) of a 1 GiB tensor
  rand20  a mount, then 20 such reads
  dd      `dd bs=1M` of the 1 GiB tensor through a mount: seconds, the two
          binaries alternated rep by rep, medians
  two     two readers at once of a 256 MiB tensor on one cache_dir (two
          mounts; a mount and `ptfs cat`), its metadata cached first:
          bytes fetched over the tensor's size, and seconds

  /usr/bin/python3 contrib/bench/remote_fetch.py --before OLD/ptfs
      [--after build/ptfs] [--reps 5] [--delay 0.025] [--gib 1] [--only two]
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, HERE)

import numpy as np      # noqa: E402
import torch            # noqa: E402

import remote_servers as rs     # noqa: E402
import test_safetensors as sts  # noqa: E402
from lib import Mount           # noqa: E402

MiB = 1 << 20


def make(d, gib):
    g = torch.Generator().manual_seed(3)
    # "small" lies between two tensors, away from the open's probes
    torch.save({"a": torch.randn(MiB, generator=g),
                "small": torch.randn(MiB, generator=g),
                "big": torch.ones(int(gib * (1 << 30)) // 4),
                "quarter": torch.randn(64 * MiB, generator=g)},
               os.path.join(d, "m.pt"))
    raw = np.arange(MiB, dtype=np.float32).tobytes()
    sts.write_st(os.path.join(d, "m.safetensors"),
                 [("t%d" % i, "F32", (MiB // 4,), raw[:MiB]) for i in range(4)] +
                 [("x", "F32", (180 * 1024,), raw[:720 * 1024])])
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)


def fetched(n, mark, name):
    reqs = n.since(mark, name)
    return sum(e["bytes"] for e in reqs), len(reqs)


def mount(ptfs, url, cache, mnt):
    return Mount([ptfs, "-f", "-o", "cache_dir=" + cache, url], mnt, foreground=True)


def one(ptfs, n, p, work, tag, big):
    """The byte counts of one binary, cold caches."""
    out = {}
    cache = os.path.join(work, "cache-" + tag)
    mnt = os.path.join(work, "mnt")
    shutil.rmtree(cache, ignore_errors=True)
    m = n.mark()
    subprocess.run([ptfs, "ls", "-o", "cache_dir=" + cache, p.url("m.safetensors")],
                   check=True, capture_output=True)
    out["ls-st"] = fetched(n, m, "m.safetensors")
    for what in ("tensor", "rand1", "rand20"):
        shutil.rmtree(cache, ignore_errors=True)
        with mount(ptfs, p.url("m.pt"), cache, mnt):
            os.listdir(mnt)
            m = n.mark()
            if what == "tensor":
                with open(os.path.join(mnt, "small"), "rb") as f:
                    f.read()
            else:
                rng = np.random.default_rng(5)
                fd = os.open(os.path.join(mnt, "big"), os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for _ in range(1 if what == "rand1" else 20):
                    os.pread(fd, 4096, int(rng.integers(0, big // 4096)) * 4096)
                os.close(fd)
            out[what] = fetched(n, m, "m.pt")
    return out


def sha_of(stream):
    h = hashlib.sha256()
    while True:
        b = stream.read(MiB)
        if not b:
            return h.hexdigest()
        h.update(b)


def two_readers(ptfs, n, p, work, tag, how, want):
    """(bytes fetched, seconds) of two readers at once of "quarter" on
    one cold cache (its metadata cached first): two mounts, or a mount and
    `ptfs cat`.  Both must read its bytes (sha256 @want)."""
    cache = os.path.join(work, "cache-two-" + tag)
    shutil.rmtree(cache, ignore_errors=True)
    url = p.url("m.pt")
    subprocess.run([ptfs, "cat", "-o", "cache_dir=" + cache, url, "quarter.json"],
                   check=True, capture_output=True)
    mnts = [os.path.join(work, "mnt-two-%d" % i) for i in (1, 2)]
    with mount(ptfs, url, cache, mnts[0]), \
            (mount(ptfs, url, cache, mnts[1]) if how == "mounts" else Nothing()):
        for d in mnts[:2 if how == "mounts" else 1]:
            os.listdir(d)
        m = n.mark()
        go = threading.Barrier(2)
        shas = [None, None]

        def from_mount(i):
            go.wait()
            with open(os.path.join(mnts[i], "quarter"), "rb") as f:
                shas[i] = sha_of(f)

        def from_cat():
            go.wait()
            c = subprocess.Popen([ptfs, "cat", "-o", "cache_dir=" + cache, url, "quarter"],
                                 stdout=subprocess.PIPE)
            shas[1] = sha_of(c.stdout)
            if c.wait() != 0:
                shas[1] = "cat failed"
        ts = [threading.Thread(target=from_mount, args=(0,)),
              threading.Thread(target=from_mount, args=(1,)) if how == "mounts"
              else threading.Thread(target=from_cat)]
        t = time.monotonic()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        dt = time.monotonic() - t
        got = fetched(n, m, "m.pt")[0]
    shutil.rmtree(cache, ignore_errors=True)
    if shas != [want, want]:
        raise RuntimeError("%s, %s: wrong bytes %s" % (tag, how, shas))
    return got, dt


class Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def dd_once(ptfs, p, work, tag):
    cache = os.path.join(work, "cache-dd-" + tag)
    mnt = os.path.join(work, "mnt")
    shutil.rmtree(cache, ignore_errors=True)
    with mount(ptfs, p.url("m.pt"), cache, mnt):
        os.listdir(mnt)
        t = time.monotonic()
        subprocess.run(["dd", "if=" + os.path.join(mnt, "big"), "of=/dev/null",
                        "bs=1M"], check=True, capture_output=True)
        dt = time.monotonic() - t
    shutil.rmtree(cache, ignore_errors=True)
    return dt


def quarter_sha(ptfs, p, work):
    """The sha256 of tensor "quarter" in the served file, and its size."""
    r = subprocess.run([ptfs, "cat", "-o", "cache_dir=" + os.path.join(
        work, "cache-meta"), p.url("m.pt"), "quarter.json"],
        capture_output=True, check=True)
    q = json.loads(r.stdout)
    with open(os.path.join(work, "m.pt"), "rb") as f:
        f.seek(q["file_offset"])
        return hashlib.sha256(f.read(q["nbytes"])).hexdigest(), q["nbytes"]


def alternated(reps):
    """The binaries' order in each repetition: flipped every other one."""
    for i in range(reps):
        yield from (("before", "after") if i % 2 == 0 else ("after", "before"))


def print_two(two, reps):
    for how, label in (("mounts", "two mounts on one cache_dir"),
                       ("cat", "a mount and `ptfs cat`")):
        cells = []
        for k in ("before", "after"):
            xs = [x for x in two[k] if x[0] == how]
            cells.append("%.3fx (%s), %.2f s" % (
                statistics.median(x[1] for x in xs), " ".join("%.3f" % x[1] for x in xs),
                statistics.median(x[2] for x in xs)))
        print("| two concurrent readers' bytes fetched / tensor (256 MiB), %s, "
              "medians of %d | %s | %s |" % (label, reps, cells[0], cells[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=os.path.join(ROOT, "build", "ptfs"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--delay", type=float, default=0.025)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--only", choices=("two",), help="only the two-reader rows")
    a = ap.parse_args()
    bins = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    work = tempfile.mkdtemp(prefix="ptfs-bench-fetch-")
    os.chmod(work, 0o755)
    try:
        print("generating checkpoints in %s ..." % work, flush=True)
        make(work, a.gib)
        with rs.Nginx(work) as n, rs.ProxyProcess(n.port, delay=a.delay) as p:
            want, qbytes = quarter_sha(bins["after"], p, work)
            two = {k: [] for k in bins}
            for k in alternated(a.reps):
                for how in ("mounts", "cat"):
                    got, dt = two_readers(bins[k], n, p, work, k, how, want)
                    two[k].append((how, got / qbytes, dt))
                    print("two %s %s %.3fx %.2f s" % (k, how, got / qbytes, dt),
                          flush=True)
            if a.only != "two":
                r = subprocess.run([bins["after"], "cat", "-o", "cache_dir=" + os.path.join(
                    work, "cache-meta"), p.url("m.pt"), "big.json"],
                    capture_output=True, check=True)
                big = json.loads(r.stdout)["nbytes"]
                counts = {k: one(b, n, p, work, k, big) for k, b in bins.items()}
                dd = {k: [] for k in bins}
                for k in alternated(a.reps):
                    dd[k].append(dd_once(bins[k], p, work, k))
                    print("dd %s %.2f s" % (k, dd[k][-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| fetched (nginx's log: bytes, requests) | before | after |")
    print("|---|---|---|")
    print_two(two, a.reps)
    if a.only == "two":
        return
    for k, label in (("ls-st", "`ptfs ls` of a 4.7 MB .safetensors"),
                     ("tensor", "one 4 MiB tensor of a .pt (mount, cat)"),
                     ("rand1", "one 4 KiB read of a %g GiB tensor" % a.gib),
                     ("rand20", "20 random 4 KiB reads of it")):
        print("| %s | %.3f MB, %d | %.3f MB, %d |" % (
            label, counts["before"][k][0] / 1e6, counts["before"][k][1],
            counts["after"][k][0] / 1e6, counts["after"][k][1]))
    mb, ma = statistics.median(dd["before"]), statistics.median(dd["after"])
    print("| `dd bs=1M` of the %g GiB tensor, RTT %.0f ms, %d reps alternated, medians "
          "| %.2f s (%s) | %.2f s (%s); after/before %.3f |" % (
              a.gib, 2e3 * a.delay, a.reps, mb, " ".join("%.2f" % x for x in dd["before"]),
              ma, " ".join("%.2f" % x for x in dd["after"]), ma / mb))


if __name__ == "__main__":
    main()
