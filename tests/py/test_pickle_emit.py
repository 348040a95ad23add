# SPDX-License-Identifier: MIT
"""The pickle writer (core/decode/pickle_emit.c), against CPython and torch.

Pickles made here by CPython (pickle.dumps, protocols 0 to 5) and by
torch.save (its data.pkl) go through build/tests/pkemit_roundtrip, which
decodes one, writes the graph back with pt_pickle_emit() and checks that
the result decodes to the same graph.  Then, in Python: the written pickle
loads to an equal object whose identities (`a is b`) pair one to one with
the original's; it names only globals the original named; at protocols 2
and 3 it is byte for byte what CPython writes once the memo entries no GET
reads are dropped (pickletools.optimize); and a torch.save ZIP whose
data.pkl is replaced by it loads with torch.load, full and weights_only
where the original loads weights_only, to equal objects with the same
tensors sharing the same storages.
"""
import argparse
import collections
import io
import math
import os
import pickle
import pickletools
import struct
import subprocess
import zipfile

import pytest
import torch

from conftest import PTFS

TOOL = os.path.join(os.path.dirname(PTFS), "tests", "pkemit_roundtrip")


class Kw:
    """Made with keyword arguments: NEWOBJ_EX at protocol 4 and up."""

    def __new__(cls, a, *, k):
        self = object.__new__(cls)
        self.args = (a, k)
        return self

    def __getnewargs_ex__(self):
        return (self.args[0],), {"k": self.args[1]}


def emit(tmp_path, data, proto=None):
    """data written back by pkemit_roundtrip (which also compares the
    graphs, as the C test does)."""
    src, dst = tmp_path / "in.pkl", tmp_path / "out.pkl"
    src.write_bytes(data)
    cmd = [TOOL] + (["--proto", str(proto)] if proto else []) + [str(src), str(dst)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return dst.read_bytes()


def globals_named(data):
    """(module, name) of every GLOBAL, INST and STACK_GLOBAL of a pickle,
    as written (before Python 2 names are translated)."""
    out, memo, strs, last = set(), {}, [], None
    for op, arg, _ in pickletools.genops(data):
        n = op.name
        if n in ("GLOBAL", "INST"):
            out.add(tuple(arg.split(" ", 1)))
            last = None
        elif "UNICODE" in n or n in ("STRING", "BINSTRING", "SHORT_BINSTRING"):
            last = arg
            strs.append(arg)
        elif n == "MEMOIZE":
            memo[len(memo)] = last
        elif n in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = last
        elif n in ("GET", "BINGET", "LONG_BINGET"):
            last = memo.get(arg)
            strs.append(last)
        elif n == "STACK_GLOBAL":
            out.add((strs[-2], strs[-1]))
            last = None
        elif n not in ("FRAME", "PROTO"):
            last = None
    return out


def has_identity(x):
    if isinstance(x, (type, int, float, bool, complex)) or x is None:
        return False
    if isinstance(x, (tuple, str, bytes)):
        return len(x) > 1
    return True


def same_shape(a, b):
    """a equals b, and the objects of a pair one to one with those of b:
    x is y in a exactly where their partners are in b; tensors are equal
    and share storages exactly where a's do."""
    pair, back, keep, stor = {}, {}, [], {}
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        assert type(x) is type(y), (x, y)
        if has_identity(x):
            if id(x) in pair or id(y) in back:
                assert pair.get(id(x)) is y and back.get(id(y)) is x, \
                    "shared differently: %r" % (x,)
                continue
            pair[id(x)], back[id(y)] = y, x
            keep += [x, y]
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.stride() == y.stride()
            assert x.storage_offset() == y.storage_offset()
            assert x.requires_grad == y.requires_grad
            assert torch.equal(x, y)
            px, py = x.storage().data_ptr(), y.storage().data_ptr()
            assert stor.setdefault(px, py) == py, "storage shared differently"
        elif isinstance(x, dict):
            assert len(x) == len(y)
            for (kx, vx), (ky, vy) in zip(x.items(), y.items()):
                stack += [(kx, ky), (vx, vy)]
            if hasattr(x, "__dict__"):
                stack.append((vars(x), vars(y)))
        elif isinstance(x, (list, tuple)):
            assert len(x) == len(y)
            stack += zip(x, y)
        elif isinstance(x, (set, frozenset)):
            assert len(x) == len(y)
            by_value = {e: e for e in y}
            stack += [(e, by_value[e]) for e in x]
        elif isinstance(x, float):
            assert struct.pack(">d", x) == struct.pack(">d", y) or \
                (math.isnan(x) and math.isnan(y))
        elif isinstance(x, type):
            assert x is y
        elif hasattr(x, "__dict__") and not callable(x):
            stack.append((vars(x), vars(y)))
        else:
            assert x == y, (x, y)
    assert len(set(stor.values())) == len(stor), "storages merged"


def plain_data():
    shared = [1, "two"]
    d = {"x": shared, "y": shared, "big": 2 ** 100, "neg": -2 ** 70,
         "huge": 7 ** 1000, "f": [-0.0, math.inf, -math.inf, math.nan, 0.1],
         "b": b"\x00\xff" * 3, "ba": bytearray(b"abc"), "s": {1, 2, "three"},
         "fs": frozenset({3, (4, 5)}), "u": "h\u00e9llo \U0001f600",
         "none": None, "bools": (True, False), "empty": ((), [], {}),
         "od": collections.OrderedDict([("b", 1), ("a", 2)]),
         "ns": argparse.Namespace(lr=0.5, layers=[1, 2]),
         "counter": collections.Counter("abracadabra"),
         "kw": Kw(1, k="key"), "long": list(range(2500)),
         "wide": {i: str(i) for i in range(1001)}}
    d["self"] = d
    d["od"]["me"] = d["od"]
    loop = []
    loop.append((loop, "tuple around a list"))
    d["loop"] = loop
    return d


@pytest.mark.parametrize("proto", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_pickles(tmp_path, proto):
    old = pickle.dumps(plain_data(), protocol=proto)
    new = emit(tmp_path, old)
    same_shape(pickle.loads(old), pickle.loads(new))
    assert globals_named(new) <= globals_named(old)
    if proto in (2, 3):
        assert new == pickletools.optimize(old)


def test_recursive_tuple(tmp_path):
    loop = []
    t = (loop, 1)
    loop.append(t)
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        old = pickle.dumps(t, protocol=proto)
        new = emit(tmp_path, old)
        got = pickle.loads(new)
        assert got[0][0] is got
        same_shape(pickle.loads(old), got)
        if proto in (2, 3):
            assert new == pickletools.optimize(old)


def test_inst_and_python2_names(tmp_path):
    # protocol 0 INST, which Python 3 no longer writes: OBJ keeps its
    # meaning (klass(*args)); the Python 2 name stays as it was spelled
    old = b"((I3\nibuiltins\nrange\n(I1\nI5\nI2\ni__builtin__\nslice\nt."
    new = emit(tmp_path, old)
    assert pickle.loads(new) == pickle.loads(old) == (range(3), slice(1, 5, 2))
    assert globals_named(new) == globals_named(old)
    assert b"c__builtin__\nslice\n" in new


def save_zip(obj, path):
    torch.save(obj, path)
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        return name, z.read(name)


def repack(src, dst, member, data):
    """src with member's bytes replaced, the other records copied."""
    with zipfile.ZipFile(src) as zin, \
            zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename,
                          data if info.filename == member else zin.read(info))


def torch_objects():
    tied = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    tied[1].weight = tied[0].weight
    sd = tied.state_dict()
    base = torch.arange(12, dtype=torch.int64)
    me = {"t": base[2:6], "u": base.view(3, 4)}
    me["self"] = me
    return {
        "tied state dict": sd,
        "ints only": {"w": base.view(3, 4), "step": 3, "names": ["a", "b"],
                      "same": [base, base]},
        "namespace": {"args": argparse.Namespace(lr=0.1, layers=[1, 2]),
                      "model": sd, "epoch": 7},
        "nested": {"a": [sd["0.weight"], {"b": (1, "x", None, True)}],
                   "c": [[], {}, ()], "big": 2 ** 70, "f": -0.0},
        "self": me,
        "parameter": {"p": torch.nn.Parameter(torch.ones(2, 2))},
    }


@pytest.mark.parametrize("name", sorted(torch_objects()))
def test_torch_save(tmp_path, name):
    obj = torch_objects()[name]
    src, dst = tmp_path / "old.pt", tmp_path / "new.pt"
    member, old = save_zip(obj, src)
    new = emit(tmp_path, old)
    assert new == pickletools.optimize(old)
    assert globals_named(new) <= globals_named(old)
    repack(src, dst, member, new)
    same_shape(torch.load(src), torch.load(dst))
    try:
        wonly = torch.load(src, weights_only=True)
    except Exception:   # the original does not load weights-only either
        assert name in ("namespace", "nested")
        return
    same_shape(wonly, torch.load(dst, weights_only=True))
