# SPDX-License-Identifier: MIT
"""Load a PyTorch checkpoint without unpickling it, through ptfs.

    import ptfs_load
    sd = ptfs_load.load("model.pt")              # numpy.memmap per tensor
    sd = ptfs_load.load("model.pt", torch=True)  # torch tensors over them

`load(path)` runs `ptfs tree --json PATH` (ptfs reads the pickle with its
own decoder: nothing the file names is imported or run) and rebuilds the
checkpoint's structure from it: dicts, lists, tuples, sets, scalars, and
for every tensor a read-only `numpy.memmap` over the checkpoint file at the
tensor's `file_offset`: no copy, pages come from the page cache on first
touch.  Tensors whose bytes are not one contiguous range of a file (views,
deflated records, DCP chunks) are read with `ptfs cat`.

Conventions (see README.md, "Pickle-free loading"):
- dict keys are the checkpoint's keys: str keys as they are, int/float/
  bool/None keys as those types; other keys (tuples, bytes) as the text the
  mount shows;
- objects of other classes (argparse.Namespace, a pickled nn.Module) come
  back as dicts of their state, `args` holding constructor arguments;
- numpy has no bfloat16, float8 or complex32: without torch those are
  converted to float32 / complex64 (exactly; this copies them); with
  torch=True they are torch tensors of their own dtype over the memmap;
- torch.from_numpy of a read-only memmap gives a tensor that must not be
  written (torch warns once; the warning is silenced here).

Standard library and numpy only; torch is imported only when asked for.
"""
import json
import os
import subprocess
import warnings

import numpy as np

__all__ = ["load", "PtfsLoadError"]


class PtfsLoadError(ValueError):
    """ptfs refused the file; the message is its one-line reason."""


NUMPY = {"float64": "f8", "float32": "f4", "float16": "f2", "int64": "i8",
         "int32": "i4", "int16": "i2", "int8": "i1", "uint8": "u1",
         "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool": "b1",
         "complex64": "c8", "complex128": "c16", "qint8": "i1", "quint8": "u1",
         "qint32": "i4", "bits8": "u1", "bits16": "u2"}
# narrow types numpy lacks: bytes per element, and how to widen them
NARROW = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
          "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
          "complex32": 4}


def _f8_table(ebits, bias, kind):
    mbits = 7 - ebits
    out = np.empty(256, dtype=np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> mbits) & ((1 << ebits) - 1)
        m = b & ((1 << mbits) - 1)
        if kind == "fnuz" and b == 0x80:
            v = float("nan")
        elif kind == "fn" and b & 0x7F == 0x7F:
            v = float("nan")
        elif kind == "ieee" and e == (1 << ebits) - 1:
            v = float("nan") if m else s * float("inf")
        elif e == 0:
            v = s * m * 2.0 ** (1 - bias - mbits)
        else:
            v = s * (1 + m / 2 ** mbits) * 2.0 ** (e - bias)
        out[b] = v
    return out


def _widen(dtype, raw, order):
    """numpy array of a narrow type -> float32 / complex64, exactly."""
    if dtype == "bfloat16":
        u = raw.view(order + "u2").astype(np.uint32) << 16
        return u.view(np.float32)
    if dtype == "complex32":
        return raw.view(order + "f2").astype(np.float32).view(np.complex64)
    if dtype == "float8_e8m0fnu":
        t = np.array([2.0 ** (b - 127) if b != 255 else np.nan for b in range(256)],
                     dtype=np.float32)
        return t[raw.view(np.uint8)]
    spec = {"float8_e4m3fn": (4, 7, "fn"), "float8_e5m2": (5, 15, "ieee"),
            "float8_e4m3fnuz": (4, 8, "fnuz"), "float8_e5m2fnuz": (5, 16, "fnuz")}[dtype]
    return _f8_table(*spec)[raw.view(np.uint8)]


class _Reader:
    def __init__(self, exe, path, use_torch):
        self.exe, self.path = exe, path
        self.torch = None
        if use_torch:
            import torch
            self.torch = torch

    def _cat(self, entry_path):
        r = subprocess.run([self.exe, "cat", self.path, entry_path], capture_output=True)
        if r.returncode != 0:
            raise PtfsLoadError(r.stderr.decode(errors="replace").strip())
        return np.frombuffer(r.stdout, dtype=np.uint8)

    def tensor(self, entry_path, meta):
        dtype, shape = meta["dtype"], tuple(meta["shape"])
        order = ">" if meta.get("byteorder") == "big" else "<"
        nbytes = meta["nbytes"]
        if nbytes == 0:
            raw = np.empty(0, dtype=np.uint8)
        elif meta.get("zero_copy") and "file_offset" in meta:
            f = meta.get("file", self.path)
            if not os.path.isabs(f) and f != self.path:
                f = os.path.join(os.path.dirname(self.path), f)
            raw = np.memmap(f, dtype=np.uint8, mode="r", offset=meta["file_offset"],
                            shape=(nbytes,))
        else:
            raw = self._cat(entry_path)
        if self.torch is not None and meta.get("kind") != "ndarray":
            return self._torch(dtype, shape, raw, order)
        if dtype in NARROW:
            return _widen(dtype, raw, order).reshape(shape)
        if dtype not in NUMPY and meta.get("kind") != "ndarray":
            return raw                   # packed types: their bytes
        code = NUMPY.get(dtype) or np.dtype(dtype).str[1:]
        dt = np.dtype(("|" if code in ("i1", "u1", "b1") else order) + code)
        return raw.view(dt).reshape(shape)

    def _torch(self, dtype, shape, raw, order):
        torch = self.torch
        tdt = getattr(torch, dtype, None)
        if order == ">" and raw.size:
            code = NUMPY.get(dtype)
            if code is None:
                raise PtfsLoadError("big-endian %s is not supported with torch=True" % dtype)
            raw = raw.view(">" + code).astype("<" + code).view(np.uint8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = torch.from_numpy(raw) if raw.size else torch.empty(0, dtype=torch.uint8)
        if tdt is None or dtype.startswith("q"):
            return t                     # quantized / packed: the bytes
        return t.view(tdt).reshape(shape)


def _decode(name):
    if name == "%":
        return ""
    out, i = [], 0
    while i < len(name):
        if name.startswith("%2F", i):
            out.append("/")
        elif name.startswith("%25", i):
            out.append("%")
        elif name.startswith("%2E", i):
            out.append(".")
        elif name.startswith("%00", i):
            out.append("\0")
        else:
            out.append(name[i])
            i += 1
            continue
        i += 3
    return "".join(out)


def _finish(v, kinds):
    """Turn the lists standing for tuples and sets into them, bottom up."""
    stack = [(v, False)]
    order = []
    while stack:
        x, done = stack.pop()
        if id(x) in kinds or isinstance(x, (dict, list)):
            order.append(x)
            items = x.values() if isinstance(x, dict) else x
            stack.extend((c, False) for c in items if isinstance(c, (dict, list)))
    fixed = {}
    for x in reversed(order):
        items = x.items() if isinstance(x, dict) else enumerate(x)
        for k, c in list(items):
            if id(c) in fixed:
                x[k] = fixed[id(c)]
        kind = kinds.get(id(x))
        if kind == "tuple":
            fixed[id(x)] = tuple(x)
        elif kind == "set":
            try:
                fixed[id(x)] = set(x)
            except TypeError:            # unhashable members: keep the list
                pass
    return fixed.get(id(v), v)


def load(path, *, torch=False, ptfs=None):
    """The checkpoint at @path, every tensor a read-only memmap (or, with
    torch=True, a torch tensor over it).  Raises PtfsLoadError with ptfs's
    one-line message when the file cannot be read."""
    exe = ptfs or os.environ.get("PTFS_BIN") or "ptfs"
    r = subprocess.run([exe, "tree", "--json", path], capture_output=True)
    if r.returncode != 0:
        raise PtfsLoadError(r.stderr.decode(errors="replace").strip())
    doc = json.loads(r.stdout)
    if doc.get("truncated"):
        raise PtfsLoadError("%s: tree too large for one listing" % path)
    rd = _Reader(exe, os.path.abspath(path) if os.path.isfile(path) else path, torch)
    kinds = {}
    root_kind = doc.get("root") or doc.get("container", "dict")
    root = [] if root_kind in ("list", "tuple", "set") else {}
    if root_kind in ("tuple", "set"):
        kinds[id(root)] = root_kind
    dirs = {"": root}
    for e in doc["entries"]:
        p = e["path"]
        parent_path, _, name = p.rpartition("/")
        parent = dirs.get(parent_path)
        if parent is None or e["type"] == "link":
            continue                     # repeats a container around it
        if e["type"] == "dir":
            kind = e.get("container", "dict")
            val = [] if kind in ("list", "tuple", "set") else {}
            if kind in ("tuple", "set"):
                kinds[id(val)] = kind
            dirs[p] = val
        elif "tensor" in e:
            val = rd.tensor(p, e["tensor"])
        elif "json" in e:
            val = e["json"]
        else:                            # bytes, or a long text: read it
            raw = rd._cat(p).tobytes()
            val = raw.decode()[:-1] if "value" in e else raw
        if isinstance(parent, list):
            parent.append(val)
        else:
            parent[e["key"] if "key" in e else _decode(name)] = val
    if root_kind == "value":
        return next(iter(root.values()))
    return _finish(root, kinds)
