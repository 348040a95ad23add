# SPDX-License-Identifier: MIT
"""Checkpoints of many files over HTTP: a 100-shard safetensors index,
torch.save .bin shards and a DCP directory opened by the URL of its
.metadata, served by nginx (tests/py/remote_servers.py) from files torch and
the safetensors writer of test_safetensors.py make here.

What is checked: the mount over HTTP shows what the local mount shows (the
same names, the same bytes, the same metadata); the shards open together
(a proxy holds every request until as many as there are shards have
arrived at once: opened one after another, only one ever would); a shard's
tensor bytes are fetched when read, not at open (nginx's access log: the
open's ranges only); a shard that is missing or corrupt gives one line
naming it, the first in index order when several fail.
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import torch

import remote_servers as rs
import test_dcp
import test_safetensors as sts
from conftest import PTFS, mounted, needs_curl, needs_fuse

pytestmark = needs_curl

N_ST = 100              # safetensors shards
N_BIN = 3               # torch.save shards, each past the open's 3 MiB
N_DCP = 20              # .distcp files
BLOCK = 64 << 10        # the remote cache's block: a safetensors open's range


def ptfs(*args, timeout=180):
    return subprocess.run([PTFS, *args], capture_output=True, timeout=timeout)


def o(cache, *more):
    return ["-o", ",".join(["cache_dir=" + cache] + list(more))]


def st_shards(d):
    """N_ST safetensors shards of 160 KiB of tensors each, and their index
    (weight_map in an order of its own); {name: array}."""
    rng = np.random.default_rng(5)
    want, wm = {}, {}
    for i in range(N_ST):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, N_ST)
        ts = [("layers.%d.w" % i, "F32", (160, 256),
               rng.standard_normal((160, 256)).astype(np.float32)),
              ("layers.%d.b" % i, "F16", (7,),
               rng.standard_normal(7).astype(np.float16))]
        sts.write_st(os.path.join(d, fname),
                     [(k, dt, shape, a.tobytes()) for k, dt, shape, a in ts],
                     metadata={"format": "pt"})
        for k, _, _, a in ts:
            want[k] = a
            wm[k] = fname
    order = sorted(wm, key=lambda k: (k.endswith(".b"), k))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(a.nbytes for a in want.values())},
                   "weight_map": {k: wm[k] for k in order}}, f)
    return want


def bin_shards(d):
    """N_BIN torch.save shards of 5 MiB each (a tensor between the open's
    first MiB and last 2 MiB), and pytorch_model.bin.index.json."""
    g = torch.Generator().manual_seed(9)
    want, wm = {}, {}
    for i in range(N_BIN):
        fname = "pytorch_model-%05d-of-%05d.bin" % (i + 1, N_BIN)
        sd = {"h.%d.first" % i: torch.randn(64, generator=g),
              "h.%d.big" % i: torch.randn(5 << 18, generator=g),
              "h.%d.last" % i: torch.arange(10, dtype=torch.int64) * i}
        torch.save(sd, os.path.join(d, fname))
        for k, t in sd.items():
            want[k] = t
            wm[k] = fname
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)
    return want


def dcp_dir(d):
    """A DCP directory of N_DCP .distcp files (a tensor in three row chunks
    spread over them, a value), by test_dcp.py's generator (torch 2.x
    layout); {fqn: tensor}."""
    torch.manual_seed(3)
    want, entries = {}, []
    for i in range(N_DCP):
        t = torch.randn(6, 5)
        want["w.%d" % i] = t
        entries.append(test_dcp.tentry(
            "w.%d" % i, t,
            [dict(c, file="__%d_0.distcp" % ((i + j) % N_DCP))
             for j, c in enumerate(test_dcp.rows_of(t, [2, 4]))]))
    entries.append(test_dcp.ventry("step", 7))
    os.makedirs(d)
    spec = os.path.join(os.path.dirname(d), "dcp-spec.json")
    with open(spec, "w") as f:
        json.dump({"entries": entries, "protocol": 4}, f)
    # the spec is longer than a command line may be: read from a file
    code = "import sys\nsys.argv[1] = open(sys.argv[1]).read()\n" + test_dcp.GEN_2X
    r = subprocess.run([sys.executable, "-c", code, spec, d], capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return want


def dcp_big(d):
    """A DCP directory of two 6 MiB .distcp files, each holding six tensors
    of 1 MiB in two row chunks: chunks past the first MiB and before the
    last 2 MiB (what opening a file fetches), whose metadata (a torch.save
    blob's first and last 64 KiB) must be fetched; {fqn: tensor}."""
    torch.manual_seed(4)
    want, entries = {}, []
    for i in range(12):
        t = torch.randn(512, 512)
        want["big.%d" % i] = t
        entries.append(test_dcp.tentry(
            "big.%d" % i, t, [dict(c, file="__%d_0.distcp" % (i % 2))
                              for c in test_dcp.rows_of(t, [256])]))
    os.makedirs(d)
    spec = os.path.join(os.path.dirname(d), "dcp-big-spec.json")
    with open(spec, "w") as f:
        json.dump({"entries": entries, "protocol": 4}, f)
    code = "import sys\nsys.argv[1] = open(sys.argv[1]).read()\n" + test_dcp.GEN_2X
    r = subprocess.run([sys.executable, "-c", code, spec, d], capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return want


def bad_index(d, broken):
    """An index of 10 one-tensor shards, in @d, the shards named in
    @broken ({i: "missing" | "corrupt"}) broken that way."""
    os.makedirs(d)
    wm = {}
    for i in range(10):
        fname = "s-%02d.safetensors" % i
        wm["t%d" % i] = fname
        if broken.get(i) == "missing":
            continue
        if broken.get(i) == "corrupt":
            with open(os.path.join(d, fname), "wb") as f:
                f.write(b"\x07" * 300)      # a header length past the end
            continue
        sts.write_st(os.path.join(d, fname),
                     [("t%d" % i, "F32", (4,), np.arange(4, dtype=np.float32).tobytes())])
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": wm}, f)


@pytest.fixture(scope="module")
def served():
    # nginx's worker must read it: not under pytest's private tmp
    d = tempfile.mkdtemp(prefix="ptfs-served-shards-")
    os.chmod(d, 0o755)
    want = {}
    for sub in ("st", "bin"):
        os.mkdir(os.path.join(d, sub))
    want["st"] = st_shards(os.path.join(d, "st"))
    want["bin"] = bin_shards(os.path.join(d, "bin"))
    want["dcp"] = dcp_dir(os.path.join(d, "dcp"))
    want["dcp-big"] = dcp_big(os.path.join(d, "dcp-big"))
    bad_index(os.path.join(d, "missing"), {7: "missing"})
    bad_index(os.path.join(d, "corrupt"), {4: "corrupt"})
    bad_index(os.path.join(d, "two"), {3: "corrupt", 8: "missing"})
    bad_index(os.path.join(d, "two-late"), {8: "corrupt", 9: "missing"})
    os.chmod(d, 0o755)
    for root, dirs, files in os.walk(d):
        for x in dirs:
            os.chmod(os.path.join(root, x), 0o755)
        for x in files:
            os.chmod(os.path.join(root, x), 0o644)
    try:
        with rs.Nginx(d) as n:
            yield n, d, want
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def per_file(reqs):
    """{file name: [access log entries]}"""
    out = {}
    for e in reqs:
        out.setdefault(os.path.basename(e["path"].split("?")[0]), []).append(e)
    return out


def walk(mnt):
    """Every path under @mnt with its kind and size (`ls -lR`; /.ptfs,
    which names the source, not looked into), and every NAME.json, its
    "file" (where the bytes lie, so its size too) left out."""
    tree, meta = [], {}
    for root, dirs, files in os.walk(mnt):
        dirs.sort()
        for x in sorted(dirs) + sorted(files):
            p = os.path.join(root, x)
            st = os.lstat(p)
            rel = os.path.relpath(p, mnt)
            if x.endswith(".json"):
                with open(p) as f:
                    m = json.load(f)
                m.pop("file", None)
                meta[rel] = m
            tree.append((rel, st.st_mode & 0o170000,
                         st.st_size if x in files and rel not in meta else 0))
        if root == mnt:
            dirs.remove(".ptfs")
    return tree, meta


def test_100_shards_lazy_and_like_the_local_mount(served, cache):
    """A 100-shard index: `ls -lR` and every NAME.json of the mount over
    HTTP fetch each shard's first block only (its header and the start of
    its data: one range request of 64 KiB), nothing of the rest; then every
    tensor reads the bytes the local mount reads."""
    n, d, want = served
    local = os.path.join(d, "st", "model.safetensors.index.json")
    with mounted(local) as lm:
        ltree, lmeta = walk(lm)
        lbytes = {k: open(os.path.join(lm, k), "rb").read() for k in want["st"]}
    m = n.mark()
    with mounted(n.url("st/model.safetensors.index.json"), *o(cache)) as mnt:
        tree, meta = walk(mnt)
        opened = per_file(n.since(m))
        assert (tree, meta) == (ltree, lmeta)
        assert len(opened) == N_ST + 1, sorted(opened)
        for name, reqs in opened.items():
            if name.endswith(".json"):
                continue
            size = os.path.getsize(os.path.join(d, "st", name))
            assert size > 2 * BLOCK
            assert [e["range"] for e in reqs] == ["bytes=0-%d" % (BLOCK - 1)], \
                (name, reqs)
            assert reqs[0]["bytes"] <= BLOCK + 1024
        m = n.mark()
        for k, a in want["st"].items():
            with open(os.path.join(mnt, k), "rb") as f:
                got = f.read()
            assert got == lbytes[k] == a.tobytes(), k
        # now the tensors' bytes: the rest of every shard, once
        later = per_file(n.since(m))
        assert len(later) == N_ST
        assert all(e["range"] and not e["range"].startswith("bytes=0-")
                   for reqs in later.values() for e in reqs)


def test_100_shards_open_together(served, cache):
    """Every shard's open request is in flight before any is answered: the
    proxy holds each (after the index's) until all 100 have arrived.  Shards
    opened one after another would send the second only once the first was
    answered, and the wait would run out."""
    n, _, want = served
    with rs.FaultProxy(n.port) as p:
        p.faults = [None] + ["gate"] * N_ST
        proc = subprocess.Popen([PTFS, "ls", *o(cache),
                                 p.url("st/model.safetensors.index.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 60
            while p.seen < 1 + N_ST and time.time() < deadline:
                time.sleep(0.05)
            seen = p.seen
        finally:
            p.gate.set()
            out, err = proc.communicate(timeout=120)
        assert seen == 1 + N_ST, seen
        assert proc.returncode == 0, err
        names = [line.split()[2] for line in out.decode().splitlines()]
        assert sorted(names) == sorted(want["st"])
        assert names[0] == "layers.0.w" and names[-1] == "layers.99.b"
        assert p.seen == 1 + N_ST          # one request a shard, no more


def test_bin_shards_fetch_metadata_until_a_tensor_is_read(served, cache):
    """torch.save shards of 5 MiB: the open fetches a ZIP's last 2 MiB (end
    records, central directory) and first MiB (data.pkl), and no byte in
    between until a tensor there is read; then only that shard's."""
    n, d, want = served
    url = n.url("bin/pytorch_model.bin.index.json")
    m = n.mark()
    with mounted(url, *o(cache)) as mnt:
        _, meta = walk(mnt)
        assert sorted(k[:-5] for k in meta) == sorted(want["bin"])
        opened = per_file(n.since(m))
        for i in range(N_BIN):
            name = "pytorch_model-%05d-of-%05d.bin" % (i + 1, N_BIN)
            assert sorted(e["range"] for e in opened[name]) == \
                ["bytes=-2097152", "bytes=0-1048575"], opened[name]
        m = n.mark()
        with open(os.path.join(mnt, "h.1.big"), "rb") as f:
            assert f.read() == want["bin"]["h.1.big"].numpy().tobytes()
        later = per_file(n.since(m))
        assert list(later) == ["pytorch_model-00002-of-00003.bin"], later
        for k, t in want["bin"].items():
            with open(os.path.join(mnt, k), "rb") as f:
                assert f.read() == t.numpy().tobytes(), k


def test_dcp_by_its_metadata_url_like_local(served, cache):
    """A DCP directory opened by the URL of its .metadata: the same tree and
    bytes as the local directory, chunks assembled across files."""
    n, d, want = served
    with mounted(os.path.join(d, "dcp")) as lm:
        ltree, lmeta = walk(lm)
    with mounted(n.url("dcp/.metadata"), *o(cache)) as mnt:
        tree, meta = walk(mnt)
        assert (tree, meta) == (ltree, lmeta)
        for k, t in want["dcp"].items():
            with open(os.path.join(mnt, k), "rb") as f:
                assert f.read() == t.numpy().tobytes(), k
        with open(os.path.join(mnt, "step")) as f:
            assert f.read().strip() == "7"


def test_dcp_files_open_together(served, cache):
    """The .distcp files open together: after .metadata's two requests,
    the two of every file's open are in flight at once."""
    n, _, want = served
    with rs.FaultProxy(n.port) as p:
        p.faults = [None, None] + ["gate"] * (2 * N_DCP)
        proc = subprocess.Popen([PTFS, "ls", *o(cache), p.url("dcp/.metadata")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 60
            while p.seen < 2 + 2 * N_DCP and time.time() < deadline:
                time.sleep(0.05)
            seen = p.seen
        finally:
            p.gate.set()
            out, err = proc.communicate(timeout=120)
        assert seen == 2 + 2 * N_DCP, seen
        assert proc.returncode == 0, err
        assert len(out.splitlines()) == N_DCP + 1


def test_dcp_chunk_metadata_fetched_together(served, cache):
    """.distcp files larger than what their open fetches: the metadata of
    the chunks in between is asked for all at once (after the opens' six
    requests, eight more are in flight before any is answered; one chunk
    after the other, one would be), and the tensors are the local ones."""
    n, d, want = served
    with rs.FaultProxy(n.port) as p:
        p.faults = [None] * 6 + ["gate"] * 8
        proc = subprocess.Popen([PTFS, "ls", *o(cache), p.url("dcp-big/.metadata")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 60
            while p.seen < 6 + 8 and time.time() < deadline:
                time.sleep(0.05)
            seen = p.seen
        finally:
            p.gate.set()
            out, err = proc.communicate(timeout=120)
        assert seen >= 6 + 8, seen
        assert proc.returncode == 0, err
        assert len(out.splitlines()) == len(want["dcp-big"])
    with mounted(os.path.join(d, "dcp-big")) as lm:
        ltree, lmeta = walk(lm)
    m = n.mark()
    with mounted(n.url("dcp-big/.metadata"), *o(cache)) as mnt:
        assert walk(mnt) == (ltree, lmeta)
        # .metadata's open and the files' (two requests each), and at most
        # one for each end of each of the 24 chunks' blobs
        assert len(n.since(m)) <= 2 + 2 * 2 + 2 * 24, n.since(m)
        for k, t in want["dcp-big"].items():
            with open(os.path.join(mnt, k), "rb") as f:
                assert f.read() == t.numpy().tobytes(), k


@pytest.mark.parametrize("case, shard, why", [
    ("missing", "s-07.safetensors", "not found"),
    ("corrupt", "s-04.safetensors", ""),
    ("two", "s-03.safetensors", ""),            # the first of two, in order
    ("two-late", "s-08.safetensors", ""),
])
def test_a_failing_shard_gives_one_line_naming_it(served, cache, case, shard, why):
    n, _, _ = served
    msgs = set()
    for _ in range(3):      # the same line whichever open ends first
        r = ptfs("ls", *o(cache), n.url(case + "/model.safetensors.index.json"))
        assert r.returncode == 1
        err = r.stderr.decode()
        assert err.count("\n") == 1, err
        assert "shard '%s'" % shard in err and why in err, err
        msgs.add(err)
    assert len(msgs) == 1, msgs
