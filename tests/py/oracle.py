# SPDX-License-Identifier: MIT
"""The tree LAYOUT.md promises, computed from what torch.load returns.

This is the test oracle: an independent Python statement of the contract
(names, escaping, collisions, values, metadata), compared with what the
mount and `ptfs cat` show.
"""
import collections.abc
import json
import os
import subprocess
import zlib

import numpy as np
import torch


def key_text(k):
    if isinstance(k, str):
        return k
    if isinstance(k, bool) or k is None:
        return repr(k)
    if isinstance(k, (int, float, bytes, tuple)):
        return repr(k)
    return "<%s.%s>" % (type(k).__module__, type(k).__qualname__)


def encode(raw):
    """LAYOUT.md rules 2-4 on a key's text; returns bytes."""
    b = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if b == b"":
        return b"%"
    if b == b".":
        return b"%2E"
    if b == b"..":
        return b"%2E%2E"
    out = b.replace(b"%", b"%25").replace(b"/", b"%2F").replace(b"\0", b"%00")
    if len(out) > 240:
        crc = zlib.crc32(out) & 0xFFFFFFFF
        k = 230
        while k > 0 and (out[k] & 0xC0) == 0x80:
            k -= 1
        out = out[:k] + b"~%08x" % crc
    return out


def is_storage(v):
    return isinstance(v, (torch.storage.TypedStorage, torch.UntypedStorage))


def as_tensor(v):
    """A storage saved on its own shows as a 1-D tensor of its elements."""
    if is_storage(v):
        dtype = v.dtype if isinstance(v, torch.storage.TypedStorage) else torch.uint8
        return torch.empty(0, dtype=dtype).set_(v)
    return v


def is_tensor(v):
    return torch.is_tensor(v) or isinstance(v, np.ndarray) or is_storage(v)


def is_dir(v):
    return isinstance(v, (collections.abc.Mapping, list, tuple, set, frozenset))


def children(v):
    if isinstance(v, collections.abc.Mapping):
        return list(v.items())
    return list(enumerate(v))


def name_entries(container, at_root=False):
    """[(name, value)] in listing order, collisions settled (rule 5)."""
    taken = {b".ptfs"} if at_root else set()
    out = []
    for key, val in children(container):
        base = encode(key_text(key))
        k = 1
        while True:
            name = base if k == 1 else base + b"~%d" % k
            need = [name] + ([name + b".json"] if is_tensor(val) else [])
            if not any(n in taken for n in need):
                break
            k += 1
        taken.update(need)
        out.append((name, val))
    return out


def tensor_bytes(t):
    t = as_tensor(t)
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t).tobytes()
    t = t.detach()
    if t.is_quantized:
        t = t.int_repr()
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def scalar_bytes(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass") + b"\n"
    if isinstance(v, torch.device):
        return str(v).encode() + b"\n"
    if isinstance(v, torch.dtype):
        return str(v).encode() + b"\n"
    return repr(v).encode() + b"\n"


def tensor_meta(t):
    t = as_tensor(t)
    if isinstance(t, np.ndarray):
        es = t.itemsize
        return {"dtype": t.dtype.name, "shape": list(t.shape),
                "stride": [s // es for s in t.strides] if t.size else None,
                "storage_offset": 0, "nbytes": t.nbytes}
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "stride": list(t.stride()), "storage_offset": t.storage_offset(),
            "nbytes": t.numel() * t.element_size()}


def expected(obj, stem):
    """Depth-first [(path bytes, kind, value)]; kind: dir, file, tensor, json."""
    out = []
    if is_dir(obj):
        stack = [(b"", obj, True)]
    else:
        stack = [(b"", {stem: obj}, True)]
    # explicit stack; entries of a directory in listing order
    while stack:
        path, cont, root = stack.pop()
        later = []
        for name, val in name_entries(cont, at_root=root):
            p = path + b"/" + name if path else name
            if is_tensor(val):
                out.append((p, "tensor", val))
                out.append((p + b".json", "json", val))
            elif is_dir(val):
                out.append((p, "dir", val))
                later.append((p, val, False))
            else:
                out.append((p, "file", val))
        stack.extend(reversed(later))
    return out


def check_meta(meta, t):
    want = tensor_meta(t)
    for k, v in want.items():
        if v is None:
            continue
        assert meta[k] == v, (k, meta[k], v)


def compare_mount(mnt, obj, stem):
    """Every entry of the mounted tree equals what torch.load gave."""
    exp = expected(obj, stem)
    mnt_b = os.fsencode(mnt)
    by_dir = {}
    for p, kind, _ in exp:
        d, _, n = p.rpartition(b"/")
        by_dir.setdefault(d, []).append(n)
    for d, names in by_dir.items():
        got = os.listdir(os.path.join(mnt_b, d) if d else mnt_b)
        if d == b"":
            assert got[0] == b".ptfs", got[:3]
            got = got[1:]
        assert got == names, (d, got[:20], names[:20])
    for p, kind, val in exp:
        full = os.path.join(mnt_b, p)
        if kind == "dir":
            assert os.path.isdir(full), p
            continue
        with open(full, "rb") as f:
            data = f.read()
        assert os.stat(full).st_size == len(data), p
        if kind == "tensor":
            assert data == tensor_bytes(val), p
        elif kind == "json":
            check_meta(json.loads(data), val)
        else:
            assert data == scalar_bytes(val), (p, data, scalar_bytes(val))
    return len(exp)


def compare_cli(ptfs, ckpt, obj, stem, limit=None):
    """`ptfs cat` of every file equals what torch.load gave."""
    exp = expected(obj, stem)
    if limit:
        exp = exp[:limit]
    for p, kind, val in exp:
        if kind == "dir":
            continue
        r = subprocess.run([ptfs, "cat", ckpt, os.fsdecode(p)],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, (p, r.stderr)
        if kind == "tensor":
            assert r.stdout == tensor_bytes(val), p
        elif kind == "json":
            check_meta(json.loads(r.stdout), val)
        else:
            assert r.stdout == scalar_bytes(val), (p, r.stdout)
    return len(exp)
