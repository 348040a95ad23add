# SPDX-License-Identifier: MIT
"""Processes reading one remote object at once share its downloads through
the cache (core/remote/cache.c, "One download per block"): two mounts on
one cache_dir, or a mount and `ptfs cat`, reading a 256 MiB tensor at the
same time fetch it once (bytes counted in nginx's access log) and both get
its bytes; a reader killed mid-fetch leaves its blocks to the other at
once; a stopped one is outwaited after the deadline (-o timeout); a cache
on a read-only or full filesystem still reads, each process fetching
alone."""
import hashlib
import json
import os
import signal
import subprocess
import tempfile
import shutil
import threading
import time

import pytest
import torch

import remote_servers as rs
from conftest import PTFS, mounted, needs_curl, needs_fuse
from test_remote import o
from test_remote_guard import fill, small_fs  # noqa: F401  (the fixture)

pytestmark = needs_curl

KiB, MiB = 1 << 10, 1 << 20
BLOCK = 64 * KiB                # the cache's block (core/remote/remote_i.h)
HDR = 1 * KiB                   # an answer's status line and headers, at most


@pytest.fixture(scope="module")
def served():
    """nginx serving big.pt (one 256 MiB tensor), small.pt (16 MiB) and
    two.pt (two of 16 MiB),
    and a proxy in a process of its own adding 5 ms each way, so that
    the two readers' requests overlap as over a network."""
    d = tempfile.mkdtemp(prefix="ptfs-shared-")
    os.chmod(d, 0o755)          # nginx's worker reads it
    g = torch.Generator().manual_seed(11)
    torch.save({"w": torch.randn(64 * MiB, generator=g)}, os.path.join(d, "big.pt"))
    torch.save({"w": torch.randn(4 * MiB, generator=g)}, os.path.join(d, "small.pt"))
    torch.save({"a": torch.randn(4 * MiB, generator=g),
                "b": torch.randn(4 * MiB, generator=g)}, os.path.join(d, "two.pt"))
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    try:
        with rs.Nginx(d) as n, rs.ProxyProcess(n.port, delay=0.005) as p:
            yield n, p
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def ptfs(*args, timeout=300):
    return subprocess.run([PTFS, *args], capture_output=True, timeout=timeout)


def tensor(n, url, cache, name):
    """(offset, bytes, sha256) of tensor w of @name; its metadata is in
    @cache afterwards (a later open is one conditional request)."""
    r = ptfs("cat", *o(cache), url, "w.json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    with open(os.path.join(n.root, name), "rb") as f:
        f.seek(j["file_offset"])
        sha = hashlib.sha256(f.read(j["nbytes"])).hexdigest()
    return j["file_offset"], j["nbytes"], sha


def file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(MiB)
            if not b:
                return h.hexdigest()
            h.update(b)


def cat(url, cache, *more):
    return subprocess.Popen([PTFS, "cat", *o(cache, *more), url, "w"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def cat_sha(proc, timeout=300):
    """The sha256 of what @proc writes, its stderr, its exit status."""
    h = hashlib.sha256()
    err = []
    t = threading.Thread(target=lambda: err.append(proc.stderr.read()))
    t.start()
    while True:
        b = proc.stdout.read(MiB)
        if not b:
            break
        h.update(b)
    rc = proc.wait(timeout=timeout)
    t.join()
    return h.hexdigest(), err[0], rc


def at_once(*fns):
    """Run @fns in threads started together; their results in order."""
    out = [None] * len(fns)
    go = threading.Barrier(len(fns))

    def run(i):
        go.wait()
        out[i] = fns[i]()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def fetched(n, mark):
    reqs = [e for e in n.since(mark) if e["path"].endswith(".pt")]
    return sum(e["bytes"] for e in reqs), reqs


@needs_fuse
def test_two_mounts_fetch_a_tensor_once(served, cache):
    n, p = served
    url = p.url("big.pt")
    _, nbytes, want = tensor(n, url, cache, "big.pt")
    with mounted(url, *o(cache)) as m1, mounted(url, *o(cache)) as m2:
        os.listdir(m1)
        os.listdir(m2)
        mark = n.mark()
        shas = at_once(lambda: file_sha(os.path.join(m1, "w")),
                       lambda: file_sha(os.path.join(m2, "w")))
        got, reqs = fetched(n, mark)
    assert shas == [want, want]
    assert got <= nbytes + 2 * BLOCK + len(reqs) * HDR, (got / nbytes, len(reqs))


@needs_fuse
def test_a_mount_and_cat_fetch_a_tensor_once(served, cache):
    n, p = served
    url = p.url("big.pt")
    _, nbytes, want = tensor(n, url, cache, "big.pt")
    with mounted(url, *o(cache)) as mnt:
        os.listdir(mnt)
        mark = n.mark()
        shas = at_once(lambda: file_sha(os.path.join(mnt, "w")),
                       lambda: cat_sha(cat(url, cache)))
        got, reqs = fetched(n, mark)
    sha, err, rc = shas[1]
    assert rc == 0, err
    assert shas[0] == want and sha == want
    # the cat's open: one conditional request more
    assert got <= nbytes + 2 * BLOCK + len(reqs) * HDR, (got / nbytes, len(reqs))


@needs_fuse
def test_readers_in_opposite_orders_do_not_deadlock(served, cache):
    """One mount reads tensor a then b while another reads b then a: both
    end with the right bytes, and each tensor is fetched once."""
    n, p = served
    url = p.url("two.pt")
    r = ptfs("cat", *o(cache), url, "a.json")
    assert r.returncode == 0, r.stderr
    with open(os.path.join(n.root, "two.pt"), "rb") as f:
        raw = f.read()
    want = {}
    for k in "ab":
        j = json.loads(ptfs("cat", *o(cache), url, k + ".json").stdout)
        want[k] = hashlib.sha256(raw[j["file_offset"]:j["file_offset"] + j["nbytes"]]).hexdigest()
    with mounted(url, *o(cache)) as m1, mounted(url, *o(cache)) as m2:
        os.listdir(m1)
        os.listdir(m2)
        mark = n.mark()
        got = at_once(lambda: [file_sha(os.path.join(m1, k)) for k in "ab"],
                      lambda: [file_sha(os.path.join(m2, k)) for k in "ba"])
        fetched_bytes, reqs = fetched(n, mark)
    assert got == [[want["a"], want["b"]], [want["b"], want["a"]]]
    assert fetched_bytes <= 32 * MiB + 4 * BLOCK + len(reqs) * HDR, \
        (fetched_bytes / (32 * MiB), len(reqs))


def stalled_owner(n, cache, name):
    """A `ptfs cat` of @name whose first block fetch the proxy holds
    without an answer (its open passes): it claimed the blocks of its first
    read.  Returns the proxy, the process, and the tensor's facts."""
    p = rs.FaultProxy(n.port).__enter__()
    url = p.url(name)
    facts = tensor(n, url, cache, name)
    p.stall_s = 120
    p.faults = [None, "stall"]      # the conditional open, then the tensor
    seen = p.seen
    a = cat(url, cache)
    end = time.time() + 30
    while p.seen < seen + 2 and time.time() < end and a.poll() is None:
        time.sleep(0.01)
    assert p.seen == seen + 2, "the owner's first fetch was not sent"
    return p, a, facts


def test_killed_reader_leaves_its_blocks_to_the_other(served, cache):
    """A reader whose fetch is in flight is killed (-9): the other, which
    waited for those blocks instead of fetching them, fetches them within
    a fraction of a second (the kernel dropped the claim with the process)
    and gets every byte right; the tensor is fetched once."""
    n, _ = served
    p, a, (_, nbytes, want) = stalled_owner(n, cache, "small.pt")
    try:
        mark = n.mark()
        seen = p.seen
        b = cat(p.url("small.pt"), cache)
        deadline = time.monotonic() + 10
        while p.seen == seen and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)
        # its open went through; the claimed blocks were not asked for
        assert b.poll() is None and p.seen == seen + 1, p.seen - seen
        t0 = time.monotonic()
        a.send_signal(signal.SIGKILL)
        a.wait()
        while p.seen == seen + 1 and time.monotonic() < t0 + 10:
            time.sleep(0.005)
        waited = time.monotonic() - t0
        sha, err, rc = cat_sha(b)
        assert rc == 0, err
        assert sha == want
        assert waited < 0.5, waited     # looks every 2-16 ms
        got, reqs = fetched(n, mark)
        assert got <= nbytes + 2 * BLOCK + len(reqs) * HDR, (got / nbytes, len(reqs))
    finally:
        a.kill()
        p.__exit__(None, None, None)


@needs_fuse
def test_reader_waiting_for_another_process_can_be_killed(served, cache):
    """A program reading a mount waits for blocks another process claimed
    and is killed: the daemon ends that wait (the kernel's interrupt,
    core/base/cancel.h), so the program is gone within moments, not when
    the blocks come; the mount then serves the tensor."""
    n, _ = served
    p, a, (_, _, want) = stalled_owner(n, cache, "small.pt")
    try:
        with mounted(p.url("small.pt"), *o(cache)) as mnt:
            reader = subprocess.Popen(["cat", os.path.join(mnt, "w")],
                                      stdout=subprocess.DEVNULL)
            time.sleep(1.0)
            assert reader.poll() is None, "it did not wait"
            t0 = time.monotonic()
            reader.kill()
            reader.wait(timeout=30)
            assert time.monotonic() - t0 < 1.5
            a.kill()
            a.wait()
            assert file_sha(os.path.join(mnt, "w")) == want
    finally:
        a.kill()
        p.__exit__(None, None, None)


def test_stopped_reader_is_outwaited_after_the_deadline(served, cache):
    """A reader holding a claim is stopped (SIGSTOP): the other waits for
    it no longer than its deadline (-o timeout=3), then fetches the blocks
    itself, with one warning line, and gets every byte right."""
    n, _ = served
    p, a, (_, _, want) = stalled_owner(n, cache, "small.pt")
    try:
        a.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        sha, err, rc = cat_sha(cat(p.url("small.pt"), cache, "timeout=3"))
        took = time.monotonic() - t0
        assert rc == 0, err
        assert sha == want
        assert 3 <= took < 15, took
        assert err.count(b"\n") == 1 and b"another process" in err, err
    finally:
        a.send_signal(signal.SIGCONT)
        a.kill()
        p.__exit__(None, None, None)


@needs_fuse
def test_read_only_cache_reads_alone(served, small_fs):  # noqa: F811
    """The cache's filesystem is read-only (remounted so after a first
    reader filled it, and with no cache at all there): two readers at once
    get every byte, with one warning line each; what the cache holds is
    read from it (a shared cache made read-only), the rest from the
    network."""
    n, p = served
    url = p.url("small.pt")
    cache = os.path.join(small_fs, "cache")
    empty = os.path.join(small_fs, "empty")
    os.mkdir(empty)
    _, nbytes, want = tensor(n, url, cache, "small.pt")
    sha, err, rc = cat_sha(cat(url, cache))
    assert rc == 0 and sha == want, err
    subprocess.run(["mount", "-o", "remount,ro", small_fs], check=True)
    for where in (cache, empty):
        m = n.mark()
        outs = at_once(lambda: cat_sha(cat(url, where)),
                       lambda: cat_sha(cat(url, where)))
        for sha, err, rc in outs:
            assert rc == 0, err
            assert sha == want
            assert err.count(b"\n") == 1 and b"not cached" in err, err
        got = sum(e["bytes"] for e in n.since(m, "small.pt"))
        if where == cache:
            assert all(b"is read-only" in e for _, e, _ in outs), outs
            assert got < MiB, got       # the two opens' conditional requests
        else:
            assert got >= 2 * nbytes, got
    # a mount splices the held blocks from the read-only file
    m = n.mark()
    with mounted(url, *o(cache)) as mnt:
        assert file_sha(os.path.join(mnt, "w")) == want
    assert sum(e["bytes"] for e in n.since(m, "small.pt")) < MiB


def test_full_cache_serves_what_it_holds(served, small_fs):  # noqa: F811
    """The cache's filesystem fills up after a reader stored a tensor
    there: the next reader gets it from the cache (ptfs.1: a cache that
    cannot be written is read from for the blocks it holds), fetching
    only its open's conditional request."""
    n, p = served
    url = p.url("small.pt")
    cache = os.path.join(small_fs, "cache")
    _, _, want = tensor(n, url, cache, "small.pt")
    sha, err, rc = cat_sha(cat(url, cache))
    assert rc == 0 and sha == want, err
    fill(small_fs)
    m = n.mark()
    sha, err, rc = cat_sha(cat(url, cache))
    assert rc == 0 and sha == want, err
    got = sum(e["bytes"] for e in n.since(m, "small.pt"))
    assert got < MiB, got


def test_full_cache_reads_alone(served, small_fs):  # noqa: F811
    """The cache's filesystem is full before two readers start (the
    object's directory made by a first open): both get every byte."""
    n, p = served
    url = p.url("small.pt")
    cache = os.path.join(small_fs, "cache")
    _, _, want = tensor(n, url, cache, "small.pt")
    fill(small_fs)
    outs = at_once(lambda: cat_sha(cat(url, cache)),
                   lambda: cat_sha(cat(url, cache)))
    for sha, err, rc in outs:
        assert rc == 0, err
        assert sha == want
