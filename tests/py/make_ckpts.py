# SPDX-License-Identifier: MIT
"""Checkpoints saved with torch during the tests: one function per case.

Each maker returns the object it saved; tests load the file back with
torch.load (these are our own files) and compare the tree with it.
"""
import argparse
import collections

import numpy as np
import torch

torch.manual_seed(0)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
          torch.bool, torch.complex64, torch.complex128]


def every_dtype():
    d = collections.OrderedDict()
    for dt in DTYPES:
        name = str(dt).replace("torch.", "")
        if dt == torch.bool:
            d[name] = torch.randn(3, 5) > 0
        elif dt.is_complex:
            d[name] = torch.randn(3, 5, dtype=dt)
        elif dt.is_floating_point:
            d[name] = torch.randn(3, 5).to(dt)
        else:
            d[name] = torch.randint(-100 if dt != torch.uint8 else 0, 100, (3, 5), dtype=dt)
    d["scalar"] = torch.tensor(3.25)
    d["empty"] = torch.zeros(0, 4)
    d["big"] = torch.arange(100000, dtype=torch.float32)
    return d


def views():
    w = torch.randn(6, 8)
    return {"w": w, "row": w[2], "col": w[:, 3], "t": w.t(), "slice": w[1:5, 2:7],
            "step": w[::2, ::3], "expand": torch.randn(3, 1).expand(3, 4),
            "offset": w.view(-1)[5:17], "narrow_t": w.t()[2:5]}


def tied():
    emb = torch.nn.Parameter(torch.randn(10, 4))
    return collections.OrderedDict([("embed.weight", emb), ("lm_head.weight", emb),
                                    ("other", torch.ones(2))])


def optimizer():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 7,
            "best": 0.1 + 0.2, "name": "run-1"}


def nested():
    return {"a": [1, 2.5, "x", None, True, False, -(2 ** 70), 10 ** 30],
            "b": {"c": {"d": [torch.ones(2), (torch.zeros(1), 3)]}},
            "tup": (1, "two", 3.0), "size": torch.Size([2, 3]),
            "dev": torch.device("cuda", 1), "cpu": torch.device("cpu"),
            "dtype": torch.float16, "bytes": b"\x00\x01\xffab",
            "floats": [0.1, 2.0, 1e-05, 1e16, 1e15, -0.0, float("inf"), float("-inf"),
                       float("nan"), 1.5e300, 123456789.125, 5e-324],
            "text": "héllo\nwörld", "empty_list": [], "empty_dict": {}}


def odd_keys():
    long_key = "k" * 300
    utf_long = "é" * 200
    return {"a/b": 1, "100%": 2, "": 3, ".": 4, "..": 5, "nul\x00byte": 6,
            long_key: 7, long_key + "x": 8, utf_long: 9, 1: 10, "1": 11,
            (1, "a"): 12, b"raw": 13, None: 14, False: 15, 2.5: 16,
            "w": torch.ones(1), "w.json": 17, "x.json": 18, "x": torch.zeros(1),
            "tab\there": 19, "ünï": 20, "%2F": 21, "y" * 100000: 22,
            "\udcff-lone-surrogate": 23, "ctl\x01\x7f\x1b": 24, "a/../..": 25}


def single_tensor():
    return torch.arange(12, dtype=torch.int32).reshape(3, 4)


def single_int():
    return 42


def module():
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))


def namespace():
    return {"args": argparse.Namespace(lr=0.1, layers=[1, 2], name="x"),
            "w": torch.ones(3)}


def numpy_arrays():
    return {"f": np.arange(6, dtype=np.float32).reshape(2, 3),
            "i": np.arange(4, dtype=np.int64), "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
            "b": np.array([True, False]), "big_endian": np.arange(3, dtype=">i4"),
            "t": torch.ones(2)}


def quantized():
    x = torch.quantize_per_tensor(torch.randn(4, 4), scale=0.1, zero_point=3, dtype=torch.quint8)
    return {"q": x, "plain": torch.ones(2)}


def wide(n=20000):
    return collections.OrderedDict(("layer.%d.weight" % i, torch.full((2,), float(i)))
                                   for i in range(n))


def multiplying(depth=40):
    x = [torch.ones(1)]
    for _ in range(depth):
        x = [x, x]
    return {"root": x}


def cycle():
    a = []
    a.append(a)
    d = {"self": None, "list": a}
    d["self"] = d
    return d


MAKERS = {f.__name__: f for f in [every_dtype, views, tied, optimizer, nested, odd_keys,
                                  single_tensor, single_int, module, namespace,
                                  numpy_arrays, quantized]}


def save(obj, path, protocol=2, legacy=False):
    torch.save(obj, path, pickle_protocol=protocol,
               _use_new_zipfile_serialization=not legacy)
