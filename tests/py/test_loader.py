# SPDX-License-Identifier: MIT
"""contrib/python/ptfs_load.py: the pickle-free loader.  Its result is
compared with torch.load (weights_only=True for foreign files) value by
value: tensors as numpy memmaps over the checkpoint (or read through
`ptfs cat` when not contiguous), structure, keys and scalars."""
import collections
import os
import sys

import numpy as np
import pytest
import torch

import make_ckpts
import oracle
from conftest import FIXTURES, PTFS, ROOT, fixture_corpus, fixture_rows

sys.path.insert(0, os.path.join(ROOT, "contrib", "python"))
import ptfs_load  # noqa: E402


def load(path, **kw):
    return ptfs_load.load(path, ptfs=PTFS, **kw)


def as_np(t):
    t = oracle.as_tensor(t)
    if isinstance(t, np.ndarray):
        return t
    t = t.detach()
    if t.is_quantized:
        return t.int_repr().numpy()
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.numpy()


def same(a, b, path=""):
    if oracle.is_tensor(b):
        want = as_np(b)
        assert isinstance(a, np.ndarray), (path, type(a))
        assert a.shape == want.shape, path
        assert a.dtype.str[1:] == want.dtype.str[1:], (path, a.dtype, want.dtype)
        assert np.array_equal(a, want, equal_nan=True), path
        return
    if isinstance(b, dict):
        assert isinstance(a, dict), (path, type(a))
        assert len(a) == len(b), path
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            if isinstance(kb, (str, int, float, bool)) or kb is None:
                assert ka == kb, (path, ka, kb)
            same(va, vb, "%s/%s" % (path, kb))
        return
    if isinstance(b, (list, tuple, set, frozenset)):
        want = (list if isinstance(b, list) else tuple) if isinstance(b, (list, tuple)) else set
        assert isinstance(a, want) or isinstance(b, (set, frozenset)), (path, type(a))
        if isinstance(b, (set, frozenset)):
            return
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s/%d" % (path, i))
        return
    if isinstance(b, (bool, int, float, str, type(None))):
        assert a == b or (a != a and b != b), (path, a, b)
        assert type(a) is type(b), (path, type(a), type(b))
        return
    if isinstance(b, (bytes, bytearray)):
        assert a == bytes(b), path
        return
    if isinstance(b, (torch.device, torch.dtype)):
        assert a == str(b), path
        return
    # another object: a dict of its state
    assert isinstance(a, dict), (path, type(b))


GEN = ["every_dtype", "views", "tied", "optimizer", "nested", "single_tensor", "odd_keys",
       "single_int", "numpy_arrays", "namespace"]


@pytest.mark.parametrize("name", GEN)
def test_loader_generated(tmp_path, name):
    obj = getattr(make_ckpts, name)()
    p = str(tmp_path / (name + ".pt"))
    make_ckpts.save(obj, p)
    obj = torch.load(p)
    got = load(p)
    if name == "namespace":
        assert got["args"] == vars(obj["args"])
        obj = {"w": obj["w"]}
        got = {"w": got["w"]}
    same(got, obj)


def test_loader_zero_copy_and_torch(tmp_path):
    p = str(tmp_path / "o.pt")
    obj = make_ckpts.optimizer()
    make_ckpts.save(obj, p)
    got = load(p)
    w = got["model"]["0.weight"]
    assert isinstance(w, np.memmap) and not w.flags.writeable
    assert os.path.samefile(w.filename, p)
    assert list(got["optimizer"]["state"]) == [0, 1, 2, 3]      # int keys
    t = load(p, torch=True)
    assert torch.equal(t["model"]["0.weight"], obj["model"]["0.weight"])
    assert t["epoch"] == 7 and t["name"] == "run-1"
    v = str(tmp_path / "v.pt")
    make_ckpts.save(make_ckpts.views(), v)
    got = load(v, torch=True)
    assert torch.equal(got["t"], make_ckpts.views()["t"]) or got["t"].shape == (8, 6)


def test_loader_refuses_clearly(tmp_path):
    p = tmp_path / "bad.pt"
    p.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ptfs_load.PtfsLoadError) as e:
        load(str(p))
    assert str(p) in str(e.value)


ROWS = [r for r in fixture_rows() if "/malicious/" not in r["local_name"]
        and r["torch113_loads"] == "ok" and r["container"] in ("zip", "legacy-pickle")]


@fixture_corpus
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["local_name"] if isinstance(r, dict) else "none")
def test_loader_fixture(row):
    path = os.path.join(FIXTURES, row["local_name"])
    obj = torch.load(path, map_location="cpu", weights_only=True)
    same(load(path), obj)
