# SPDX-License-Identifier: MIT
"""What a remote checkpoint fetches (README "Remote checkpoints": fetch
what is read): metadata costs what it is, a tensor read costs its bytes and
at most a block at each end, a random read one block, and a sequential
reader still gets the whole read-ahead window.  Bytes and requests are
counted in nginx's access log ($bytes_sent: the bodies and the headers)."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest
import torch

import remote_servers as rs
import test_safetensors as sts
from conftest import PTFS, mounted, needs_curl, needs_fuse

pytestmark = needs_curl

KiB, MiB = 1 << 10, 1 << 20
BLOCK = 64 * KiB                # the cache's block (core/remote/remote_i.h)
HDR = 1 * KiB                   # an answer's status line and headers, at most


def ptfs(*args):
    return subprocess.run([PTFS, *args], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def served():
    d = tempfile.mkdtemp(prefix="ptfs-fetch-")
    os.chmod(d, 0o755)          # nginx's worker reads it
    g = torch.Generator().manual_seed(21)
    torch.save({"small": torch.randn(MiB, generator=g),          # 4 MiB
                "big": torch.randn(16 * MiB, generator=g),       # 64 MiB
                "step": 3}, os.path.join(d, "m.pt"))
    raw = np.arange(MiB, dtype=np.float32).tobytes()
    # 4.7 MB, a small header; and a header of ~150 KiB (more than a block)
    sts.write_st(os.path.join(d, "m.safetensors"),
                 [("t%d" % i, "F32", (MiB // 4,), raw[:MiB]) for i in range(4)] +
                 [("x", "F32", (180 * KiB,), raw[:720 * KiB])])
    sts.write_st(os.path.join(d, "wide.safetensors"),
                 [("layer.%d.weight" % i, "F32", (4,), raw[:16]) for i in range(3000)])
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    xdg = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, ".xdg-cache")  # never ~
    try:
        with rs.Nginx(d, tls=True) as n:
            yield n
    finally:
        if xdg is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = xdg
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def fetched(n, mark, name):
    reqs = n.since(mark, name)
    return sum(e["bytes"] for e in reqs), reqs


def st_header(path):
    with open(path, "rb") as f:
        return 8 + int.from_bytes(f.read(8), "little")


@pytest.mark.parametrize("name", ["m.safetensors", "wide.safetensors"])
def test_ls_safetensors_fetches_its_header_and_at_most_a_block(served, cache, name):
    n = served
    m = n.mark()
    r = ptfs("ls", "--max", "100000", "-o", "cache_dir=" + cache, n.url(name))
    assert r.returncode == 0, r.stderr
    got, reqs = fetched(n, m, name)
    hdr = st_header(os.path.join(n.root, name))
    assert got <= hdr + BLOCK + len(reqs) * HDR, ([e["range"] for e in reqs], hdr)
    assert len(reqs) <= 2


def test_ls_pt_fetches_no_tensor_data(served, cache):
    """The open's two requests (the ZIP's tail and head) and nothing
    more: no read-ahead from the metadata reads into the 64 MiB tensor."""
    n = served
    m = n.mark()
    r = ptfs("ls", "-o", "cache_dir=" + cache, n.url("m.pt"))
    assert r.returncode == 0, r.stderr
    got, reqs = fetched(n, m, "m.pt")
    assert len(reqs) <= 3, [e["range"] for e in reqs]
    assert got <= 3 * MiB + BLOCK + len(reqs) * HDR, [e["range"] for e in reqs]


def tensor_at(n, cache, key):
    r = ptfs("cat", "-o", "cache_dir=" + cache, n.url("m.pt"), key + ".json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    return j["file_offset"], j["nbytes"]


@needs_fuse
def test_one_tensor_costs_its_bytes_and_two_blocks(served, cache):
    n = served
    _, nbytes = tensor_at(n, cache + "-probe", "small")
    with mounted(n.url("m.pt"), "-o", "cache_dir=" + cache) as mnt:
        os.listdir(mnt)
        m = n.mark()
        with open(os.path.join(mnt, "small"), "rb") as f:
            data = f.read()
        assert len(data) == nbytes
        got, reqs = fetched(n, m, "m.pt")
        assert got <= nbytes + 2 * BLOCK + len(reqs) * HDR, \
            (got, [e["range"] for e in reqs])
        # the 64 MiB tensor beside it: whole, but no further (the end of
        # the file is the ZIP's directory, held since the open)
        m = n.mark()
        with open(os.path.join(mnt, "big"), "rb") as f:
            while f.read(MiB):
                pass
        got, reqs = fetched(n, m, "m.pt")
        assert got <= 64 * MiB + 2 * BLOCK + len(reqs) * HDR, got
        # the window grew to whole RM_CHUNK (8 MiB) ranges: not one
        # request per read
        sizes = [int(e["range"].split("-")[1]) - int(e["range"].split("=")[1].split("-")[0]) + 1
                 for e in reqs]
        assert max(sizes) == 8 * MiB and len(reqs) <= 24, sizes


@needs_fuse
def test_random_4k_reads_cost_one_block_each(served, cache):
    n = served
    off, nbytes = tensor_at(n, cache + "-probe", "big")
    rng = np.random.default_rng(7)
    with mounted(n.url("m.pt"), "-o", "cache_dir=" + cache) as mnt:
        os.listdir(mnt)
        want = open(os.path.join(n.root, "m.pt"), "rb")
        fd = os.open(os.path.join(mnt, "big"), os.O_RDONLY)
        try:
            # no kernel read-ahead: the reads reach ptfs as they are made
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            for i in range(20):
                # a page of the tensor whose two pages (the kernel may
                # read 8 KiB) lie inside one block of the file
                at = int(rng.integers(0, nbytes // (4 * KiB) - 1)) * 4 * KiB
                while (off + at) % BLOCK > BLOCK - 8 * KiB:
                    at += 4 * KiB
                m = n.mark()
                got = os.pread(fd, 4 * KiB, at)
                want.seek(off + at)
                assert got == want.read(4 * KiB)
                b, reqs = fetched(n, m, "m.pt")
                assert b <= BLOCK + len(reqs) * HDR, (i, b, [e["range"] for e in reqs])
        finally:
            os.close(fd)
            want.close()


@needs_fuse
def test_a_read_a_little_past_the_last_continues_the_stream(served, cache):
    """The kernel sends a sequential reader's reads several at once and
    they may come out of order: a read up to 1 MiB past the end of the
    last one continues the stream (the read-ahead starts), it is not a
    jump that fetches its own blocks only."""
    n = served
    off, nbytes = tensor_at(n, cache + "-probe", "big")
    with mounted(n.url("m.pt"), "-o", "cache_dir=" + cache) as mnt:
        os.listdir(mnt)
        fd = os.open(os.path.join(mnt, "big"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            at = 4 * MiB
            m = n.mark()
            os.pread(fd, 64 * KiB, at)
            os.pread(fd, 64 * KiB, at + 192 * KiB)      # the one between: later
            end = time.time() + 20
            while time.time() < end:
                sizes = [e["bytes"] for e in n.since(m, "m.pt")]
                if max(sizes, default=0) >= 4 * MiB:
                    break
                time.sleep(0.05)
            assert max(sizes, default=0) >= 4 * MiB, sizes
        finally:
            os.close(fd)


@needs_fuse
def test_https_streams_over_parallel_connections(served, cache):
    """Over TLS the read-ahead's parallel ranges go over connections of
    their own, HTTP/1.1 (core/remote/engine.c says why), not multiplexed on
    one HTTP/2 connection; the tensor's bytes are the file's."""
    n = served
    off, nbytes = tensor_at(n, cache + "-probe", "big")
    with mounted(n.url("m.pt", tls=True), "-o", "cache_dir=%s,cafile=%s"
                 % (cache, n.cert)) as mnt:
        m = n.mark()
        got = bytearray()
        with open(os.path.join(mnt, "big"), "rb") as f:
            while True:
                b = f.read(MiB)
                if not b:
                    break
                got += b
        reqs = n.since(m, "m.pt")
    with open(os.path.join(n.root, "m.pt"), "rb") as f:
        f.seek(off)
        assert got == f.read(nbytes)
    assert all(e["proto"] == "HTTP/1.1" for e in reqs), reqs
    conns = {e["connection"] for e in reqs}
    assert len(conns) > 1, [(e["connection"], e["range"]) for e in reqs]
