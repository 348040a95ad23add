# SPDX-License-Identifier: MIT
"""Distributed checkpoints (DCP): a directory of .metadata + *.distcp.

Two sources of test data (docs/FORMATS.md, "Distributed checkpoint files"):

* Debian's torch 1.13 prototype, torch.distributed._shard.checkpoint, run
  in a subprocess (its dataclasses need a shim on Python 3.11, and its
  ShardedTensors need a one-process gloo group).  It writes plain tensors,
  scalars, nested dicts (as one pickled blob: 1.13 does not flatten) and
  ShardedTensors split into several chunks (rows, and a 2-D grid).
* Synthetic torch 2.x layouts: .metadata pickled from stand-in dataclasses
  whose module and qualname are torch.distributed.checkpoint's, chunks
  written as torch.save blobs (or raw bytes) concatenated into .distcp
  files, flattened dotted FQNs, non-tensor values as torch.save blobs or raw
  io.BytesIO bytes.  Hostile variants of these must fail with one line.

Every tensor is compared with what torch says it is.
"""
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import mounted, needs_fuse, run

SHIM = r'''
import dataclasses
_orig = dataclasses._get_field
def _gf(cls, name, type, kw_only):
    # torch 1.13's sharded_tensor metadata uses a mutable dataclass
    # default that Python 3.11 rejects; give it a default_factory
    try:
        return _orig(cls, name, type, kw_only)
    except ValueError:
        d = cls.__dict__.get(name)
        setattr(cls, name, dataclasses.field(default_factory=lambda d=d: d))
        return _orig(cls, name, type, kw_only)
dataclasses._get_field = _gf
'''

GEN_113 = SHIM + r'''
import os, sys, tempfile, torch
import torch.distributed as dist
import torch.distributed._shard.checkpoint as dcp
from torch.distributed._shard import sharded_tensor
from torch.distributed._shard.sharding_spec import (
    ChunkShardingSpec, EnumerableShardingSpec, ShardMetadata)

out, ref = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", rank=0, world_size=1,
                        init_method="file://" + tempfile.mktemp())

def fill(st, full):
    for s in st.local_shards():
        o, z = s.metadata.shard_offsets, s.metadata.shard_sizes
        idx = tuple(slice(a, a + b) for a, b in zip(o, z))
        s.tensor.copy_(full[idx])

rows = torch.arange(35, dtype=torch.float32).reshape(7, 5)
st = sharded_tensor.empty(ChunkShardingSpec(
    dim=0, placements=["rank:0/cpu"] * 3), 7, 5)
fill(st, rows)
grid = (torch.arange(36, dtype=torch.int16) * 7).reshape(6, 6)
g = sharded_tensor.empty(EnumerableShardingSpec([
    ShardMetadata([0, 0], [2, 3], "rank:0/cpu"),
    ShardMetadata([0, 3], [2, 3], "rank:0/cpu"),
    ShardMetadata([2, 0], [4, 3], "rank:0/cpu"),
    ShardMetadata([2, 3], [4, 3], "rank:0/cpu")]), 6, 6, dtype=torch.int16)
fill(g, grid)
cols = torch.randn(4, 9, dtype=torch.float64)
c = sharded_tensor.empty(ChunkShardingSpec(
    dim=1, placements=["rank:0/cpu"] * 4), 4, 9, dtype=torch.float64)
fill(c, cols)
plain = {
    "model.weight": torch.randn(3, 4),
    "model.bias": torch.arange(4, dtype=torch.int64),
    "flag": torch.tensor([True, False, True]),
    "half": torch.randn(2, 2).to(torch.bfloat16),
    "scalar": torch.tensor(2.5),
    "empty": torch.zeros(0, 3),
    "view": torch.arange(20.0).reshape(4, 5)[1:3, ::2],
}
values = {"step": 12, "lr": 0.001, "name": "adam", "none": None,
          "on": True, "big": 2 ** 70, "raw": b"\x00\x01bytes"}
sd = dict(plain)
sd.update(values)
sd.update({"rows": st, "grid": g, "cols": c,
           "nested": {"inner": torch.ones(2), "k": 3}})
dcp.save_state_dict(sd, storage_writer=dcp.FileSystemWriter(out))
expect = dict(plain)
expect.update({"rows": rows, "grid": grid, "cols": cols})
torch.save({"tensors": expect, "values": values}, ref)
'''

GEN_2X_MODULES = r'''
import enum, sys, types, pickle, io, torch

def module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m

md = module("torch.distributed.checkpoint.metadata")
fs = module("torch.distributed.checkpoint.filesystem")

def dataclass_like(mod, name, fields):
    def init(self, *a, **kw):
        for f, v in zip(fields, a):
            setattr(self, f, v)
        for f, v in kw.items():
            setattr(self, f, v)
    cls = type(name, (), {"__init__": init})
    cls.__module__ = mod.__name__
    cls.__qualname__ = name
    setattr(mod, name, cls)
    return cls

class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2
_MEM_FORMAT_ENCODING.__module__ = md.__name__
md._MEM_FORMAT_ENCODING = _MEM_FORMAT_ENCODING

Metadata = dataclass_like(md, "Metadata", ["state_dict_metadata",
                          "planner_data", "storage_data", "storage_meta",
                          "version"])
TensorStorageMetadata = dataclass_like(md, "TensorStorageMetadata",
                                       ["properties", "size", "chunks"])
BytesStorageMetadata = dataclass_like(md, "BytesStorageMetadata", [])
ChunkStorageMetadata = dataclass_like(md, "ChunkStorageMetadata",
                                      ["offsets", "sizes"])
MetadataIndex = dataclass_like(md, "MetadataIndex", ["fqn", "offset", "index"])
TensorProperties = dataclass_like(md, "TensorProperties",
                                  ["dtype", "requires_grad"])
def _tp_getstate(self):
    # torch 2.x: (dtype, layout, requires_grad, memory format, pin_memory)
    return (self.dtype, None, self.requires_grad,
            _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, False)
def _tp_setstate(self, st):
    self.dtype, _, self.requires_grad, _, _ = st
TensorProperties.__getstate__ = _tp_getstate
TensorProperties.__setstate__ = _tp_setstate
_StorageInfo = dataclass_like(fs, "_StorageInfo",
                              ["relative_path", "offset", "length"])
'''


def _run_py(code, *args):
    r = subprocess.run([sys.executable, "-c", code, *args],
                       capture_output=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(r.stderr.decode(errors="replace")[-3000:])
    return r


def check_tensor(ck, name, want):
    """`ptfs cat` of NAME and NAME.json against torch tensor @want."""
    r = run("cat", ck, name)
    assert r.returncode == 0, r.stderr.decode()
    want = want.contiguous()
    assert r.stdout == want.numpy().tobytes() if want.dtype != torch.bfloat16 \
        else r.stdout == want.view(torch.int16).numpy().tobytes(), name
    r = run("cat", ck, name + ".json")
    assert r.returncode == 0, r.stderr.decode()
    meta = json.loads(r.stdout)
    assert meta["dtype"] == str(want.dtype).replace("torch.", "")
    assert meta["shape"] == list(want.shape)
    assert meta["nbytes"] == want.numel() * want.element_size()
    return meta


def cat(ck, name):
    r = run("cat", ck, name)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


# ---- torch 1.13's prototype ----

@pytest.fixture(scope="module")
def dcp113(tmp_path_factory):
    d = tmp_path_factory.mktemp("dcp113")
    out = str(d / "ckpt")
    ref = str(d / "ref.pt")
    os.makedirs(out)
    # The writer is torch 1.13's prototype (torch.distributed._shard
    # .checkpoint, gloo): Debian's torch has it, so under that torch any
    # failure to write is the test's failure.
    if not torch.__version__.startswith("1.13."):
        pytest.skip("needs torch 1.13: the DCP prototype writer (this is "
                    "torch %s)" % torch.__version__)
    _run_py(GEN_113, out, ref)
    return out, torch.load(ref)


def test_113_info_and_listing(dcp113):
    ck, ref = dcp113
    r = run("info", ck)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "format: torch.distributed.checkpoint (DCP)" in out
    assert "pickle .metadata" in out
    r = run("ls", "-a", ck)
    assert r.returncode == 0, r.stderr.decode()
    names = [line.split()[2] for line in r.stdout.decode().splitlines()]
    # dotted FQNs stay single names at the root
    assert "model.weight" in names and "model.weight.json" in names
    assert "nested" in names and "nested.json" not in names


def test_113_tensors(dcp113):
    ck, ref = dcp113
    for name, want in ref["tensors"].items():
        meta = check_tensor(ck, name, want)
        if name in ("rows", "grid", "cols"):
            assert meta["zero_copy"] is False      # assembled from chunks
        elif want.numel():
            assert meta["zero_copy"] is True
            assert meta["file"].endswith(".distcp")


def test_113_values(dcp113):
    ck, ref = dcp113
    v = ref["values"]
    assert cat(ck, "step") == b"12\n"
    assert cat(ck, "lr") == b"0.001\n"
    assert cat(ck, "name") == b"adam\n"
    assert cat(ck, "none") == b"None\n"
    assert cat(ck, "on") == b"True\n"
    assert cat(ck, "big") == b"%d\n" % v["big"]
    assert cat(ck, "raw") == v["raw"]
    # a dict with a tensor is not simple: its torch.save blob as bytes
    blob = cat(ck, "nested")
    got = torch.load(io.BytesIO(blob))
    assert got["k"] == 3 and torch.equal(got["inner"], torch.ones(2))


@needs_fuse
def test_113_mount(dcp113):
    ck, ref = dcp113
    with mounted(ck) as mnt:
        for name, want in ref["tensors"].items():
            with open(os.path.join(mnt, name), "rb") as f:
                data = f.read()
            want = want.contiguous()
            if want.dtype == torch.bfloat16:
                want = want.view(torch.int16)
            assert data == want.numpy().tobytes(), name
        # reads at odd offsets and lengths across chunk borders
        want = ref["tensors"]["grid"].numpy().tobytes()
        with open(os.path.join(mnt, "grid"), "rb") as f:
            for off in range(0, len(want), 5):
                for n in (1, 3, 13, 40):
                    f.seek(off)
                    assert f.read(n) == want[off:off + n]
        with open(os.path.join(mnt, "step")) as f:
            assert f.read() == "12\n"
        with pytest.raises(OSError):
            open(os.path.join(mnt, "model.weight"), "r+b")


# ---- synthetic torch 2.x layouts ----

GEN_2X = GEN_2X_MODULES + r'''
import json, os
spec = json.loads(sys.argv[1])
out = sys.argv[2]
proto = spec.get("protocol", 4)

def blob(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()

files = {}
def put(fname, data):
    buf = files.setdefault(fname, bytearray())
    off = len(buf)
    buf += data
    return off

sdm, sdata = {}, {}
for e in spec["entries"]:
    fqn = e["fqn"]
    if e["kind"] == "tensor":
        t = torch.load(io.BytesIO(bytes.fromhex(e["tensor"])))
        chunks = []
        for c in e["chunks"]:
            off, sz = c["offsets"], c["sizes"]
            piece = t[tuple(slice(a, a + b) for a, b in zip(off, sz))].clone()
            data = piece.numpy().tobytes() if c.get("raw") else blob(piece)
            fname = c.get("file", "__0_0.distcp")
            foff = put(fname, data)
            length = c.get("length", len(data))
            foff = c.get("foff", foff)
            chunks.append(ChunkStorageMetadata(torch.Size(c.get("moffsets", off)),
                                               torch.Size(c.get("msizes", sz))))
            if not c.get("nodata"):
                sdata[MetadataIndex(fqn, torch.Size(c.get("moffsets", off)), 0)] = \
                    _StorageInfo(c.get("path", fname), foff, length)
        size = torch.Size(e.get("size", list(t.shape)))
        dtype = getattr(torch, e["dtype"]) if "dtype" in e else t.dtype
        sdm[fqn] = TensorStorageMetadata(TensorProperties(dtype, False), size, chunks)
    else:
        if "raw" in e:
            data = bytes.fromhex(e["raw"])
        else:
            data = blob(pickle.loads(bytes.fromhex(e["value"])))
        fname = e.get("file", "__0_0.distcp")
        foff = put(fname, data)
        sdm[fqn] = BytesStorageMetadata()
        sdata[MetadataIndex(fqn, None, None)] = _StorageInfo(fname, foff, len(data))
for fname, data in files.items():
    if fname not in spec.get("drop_files", []):
        with open(os.path.join(out, fname), "wb") as f:
            f.write(data)
meta = Metadata(sdm, {k: (k,) for k in sdm}, sdata, None, "1.0.0")
if spec.get("root"):
    meta = spec["root"]
with open(os.path.join(out, ".metadata"), "wb") as f:
    pickle.dump(meta, f, protocol=proto)
'''


def tensor_hex(t):
    b = io.BytesIO()
    torch.save(t, b)
    return b.getvalue().hex()


def tentry(fqn, t, chunks=None, **kw):
    if chunks is None:
        chunks = [{"offsets": [0] * t.dim(), "sizes": list(t.shape)}]
    e = {"fqn": fqn, "kind": "tensor", "tensor": tensor_hex(t), "chunks": chunks}
    e.update(kw)
    return e


def ventry(fqn, value):
    return {"fqn": fqn, "kind": "bytes", "value": pickle.dumps(value).hex()}


def make_2x(path, entries, **kw):
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    spec = {"entries": entries}
    spec.update(kw)
    _run_py(GEN_2X, json.dumps(spec), path)
    return path


def rows_of(t, cuts):
    """Chunks splitting dim 0 at @cuts, in order."""
    out, prev = [], 0
    for c in list(cuts) + [t.shape[0]]:
        out.append({"offsets": [prev] + [0] * (t.dim() - 1),
                    "sizes": [c - prev] + list(t.shape[1:])})
        prev = c
    return out


def grid_of(t, r, c, **kw):
    return [dict({"offsets": [i, j], "sizes": [min(r, t.shape[0] - i),
                                                 min(c, t.shape[1] - j)]}, **kw)
            for i in range(0, t.shape[0], r) for j in range(0, t.shape[1], c)]


torch.manual_seed(0)
T = {
    "model.layers.0.attn.weight": torch.randn(10, 6),
    "model.layers.0.attn.bias": torch.randn(6).to(torch.float16),
    "optim.state.0.exp_avg": torch.randn(5, 7, 3),
    "optim.state.0.step": torch.tensor(3.0),
    "embed/tok": torch.arange(24, dtype=torch.int32).reshape(4, 6),
    "mask": torch.tensor([[True, False], [False, True]]),
    "c64": torch.randn(3, 2, dtype=torch.complex64),
    "bf": torch.randn(4, 4).to(torch.bfloat16),
    "zero": torch.zeros(0, 4),
}


@pytest.fixture(scope="module")
def dcp2x(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("dcp2x") / "ck")
    t = T
    entries = [
        tentry("model.layers.0.attn.weight", t["model.layers.0.attn.weight"],
               rows_of(t["model.layers.0.attn.weight"], [3, 4, 9]),
               ),
        tentry("model.layers.0.attn.bias", t["model.layers.0.attn.bias"],
               [{"offsets": [0], "sizes": [4], "file": "__1_0.distcp"},
                {"offsets": [4], "sizes": [2], "file": "__0_0.distcp"}]),
        tentry("optim.state.0.exp_avg", t["optim.state.0.exp_avg"],
               [{"offsets": [i, j, 0], "sizes": [min(2, 5 - i), min(4, 7 - j), 3],
                 "file": "__%d_0.distcp" % (i % 2)}
                for i in range(0, 5, 2) for j in range(0, 7, 4)]),
        tentry("optim.state.0.step", t["optim.state.0.step"]),
        tentry("embed/tok", t["embed/tok"], grid_of(t["embed/tok"], 3, 4, raw=True)),
        tentry("mask", t["mask"]),
        tentry("c64", t["c64"], rows_of(t["c64"], [1])),
        tentry("bf", t["bf"], grid_of(t["bf"], 2, 2)),
        tentry("zero", t["zero"]),
        ventry("optim.param_groups.0.lr", 0.01),
        ventry("optim.param_groups.0.name", "grp"),
        ventry("optim.param_groups.0.params", [0, 1]),
        {"fqn": "extra.io", "kind": "bytes", "raw": b"\x89raw\x00".hex()},
        ventry("extra.bytes", b"abc"),
    ]
    return make_2x(d, entries, protocol=4), entries


def test_2x_tensors(dcp2x):
    ck, _ = dcp2x
    for name, want in T.items():
        meta = check_tensor(ck, name.replace("/", "%2F"), want)
        if name in ("optim.state.0.step", "mask"):
            assert meta["zero_copy"] is True


def test_2x_values_and_names(dcp2x):
    ck, _ = dcp2x
    assert cat(ck, "optim.param_groups.0.lr") == b"0.01\n"
    assert cat(ck, "optim.param_groups.0.name") == b"grp\n"
    assert cat(ck, "extra.io") == b"\x89raw\x00"
    assert cat(ck, "extra.bytes") == b"abc"
    blob = cat(ck, "optim.param_groups.0.params")
    assert torch.load(io.BytesIO(blob)) == [0, 1]
    r = run("ls", "-a", ck)
    names = [line.split()[2] for line in r.stdout.decode().splitlines()
             if not line.split()[2].startswith(".ptfs")]
    want = []
    for e in dcp2x[1]:
        n = e["fqn"].replace("/", "%2F")
        want += [n, n + ".json"] if e["kind"] == "tensor" else [n]
    assert names == want


@pytest.mark.parametrize("proto", [2, 5])
def test_2x_protocols(tmp_path, proto):
    t = torch.randn(6, 3)
    ck = make_2x(str(tmp_path / "ck"), [tentry("w", t, rows_of(t, [2, 5])),
                                        ventry("n", 7)],
                 protocol=proto)
    check_tensor(ck, "w", t)
    assert cat(ck, "n") == b"7\n"


@needs_fuse
def test_2x_mount(dcp2x):
    ck, _ = dcp2x
    with mounted(ck) as mnt:
        for name, want in T.items():
            want = want.contiguous()
            if want.dtype == torch.bfloat16:
                want = want.view(torch.int16)
            with open(os.path.join(mnt, name.replace("/", "%2F")), "rb") as f:
                assert f.read() == want.numpy().tobytes(), name
        w = T["optim.state.0.exp_avg"].numpy().tobytes()
        fd = os.open(os.path.join(mnt, "optim.state.0.exp_avg"), os.O_RDONLY)
        try:
            for off in range(0, len(w), 7):
                assert os.pread(fd, 29, off) == w[off:off + 29]
        finally:
            os.close(fd)


# ---- hostile directories: one line naming the checkpoint, exit 1 ----

def bad(tmp_path, entries, **kw):
    return make_2x(str(tmp_path / "bad"), entries, **kw)


def expect_fail(ck, *words):
    r = run("ls", ck)
    assert r.returncode == 1, r.stdout.decode()
    err = r.stderr.decode()
    assert err.count("\n") == 1, err
    assert ck in err
    for w in words:
        assert w in err, err
    assert "Sanitizer" not in err


W = torch.arange(12.0).reshape(4, 3)


def test_bad_missing_file(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, rows_of(W, [2]))],
             drop_files=["__0_0.distcp"])
    expect_fail(ck, "__0_0.distcp", "No such file")


def test_bad_chunk_outside_file(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, [{"offsets": [0, 0], "sizes": [4, 3],
                                         "foff": 10 ** 6}])])
    expect_fail(ck, "'w'", "outside __0_0.distcp")
    ck = bad(tmp_path, [tentry("w", W, [{"offsets": [0, 0], "sizes": [4, 3],
                                         "length": 2 ** 62}])])
    expect_fail(ck, "'w'", "outside")


def test_bad_overlap(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, [
        {"offsets": [0, 0], "sizes": [3, 3]},
        {"offsets": [1, 0], "sizes": [2, 3], "msizes": [1, 3]}])])
    expect_fail(ck, "'w'", "overlap")


def test_bad_incomplete(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, [{"offsets": [0, 0], "sizes": [2, 3]}])])
    expect_fail(ck, "'w'", "chunks hold 6 elements")


def test_bad_chunk_past_tensor(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, [{"offsets": [0, 0], "sizes": [4, 3],
                                         "moffsets": [1, 0]}])])
    expect_fail(ck, "'w'", "past the tensor")


def test_bad_huge(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, size=[2 ** 40, 2 ** 40])])
    expect_fail(ck, "'w'")
    ck = bad(tmp_path, [tentry("w", W, size=[2 ** 31, 2 ** 31, 2 ** 31])])
    expect_fail(ck, "'w'", "overflows")


def test_bad_no_storage_item(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, [{"offsets": [0, 0], "sizes": [4, 3],
                                         "nodata": True}])])
    expect_fail(ck, "'w'", "no storage_data item")


def test_bad_path_escape(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, [{"offsets": [0, 0], "sizes": [4, 3],
                                         "path": "../x.distcp"}])])
    expect_fail(ck, "not a plain file name")


def test_bad_dtype_mismatch(tmp_path):
    ck = bad(tmp_path, [tentry("w", W, dtype="float64")])
    expect_fail(ck, "'w'", "float32", "float64")


def test_bad_not_metadata(tmp_path):
    ck = bad(tmp_path, [tentry("w", W)], root={"not": "metadata"})
    expect_fail(ck, "not a torch.distributed.checkpoint Metadata")


def test_bad_garbage_metadata(tmp_path):
    d = tmp_path / "garbage"
    d.mkdir()
    (d / ".metadata").write_bytes(b"\x80\x04garbage")
    expect_fail(str(d), ".metadata")
