# SPDX-License-Identifier: MIT
"""Every torch._utils._rebuild_* form that carries a storage, including
the ones torch 1.13 cannot write (v3 with float8 / uint16, parameter with
state, device tensors from numpy or from a CPU tensor): the pickles are
assembled opcode by opcode here (docs/FORMATS.md, "Pickle opcodes" and
"Tensor rebuild functions"), packed the way
torch.save packs them, and read back through `ptfs cat`."""
import io
import json
import struct
import zipfile

import numpy as np
import pytest

from conftest import run


class P:
    """A tiny protocol-2 pickle writer: just the opcodes torch uses."""

    def __init__(self):
        self.b = bytearray(b"\x80\x02")

    def glob(self, mod, name):
        self.b += b"c" + mod.encode() + b"\n" + name.encode() + b"\n"
        return self

    def mark(self):
        self.b += b"("
        return self

    def tuple(self):
        self.b += b"t"
        return self

    def reduce(self):
        self.b += b"R"
        return self

    def build(self):
        self.b += b"b"
        return self

    def int(self, v):
        self.b += b"J" + struct.pack("<i", v)
        return self

    def str(self, s):
        e = s.encode()
        self.b += b"X" + struct.pack("<I", len(e)) + e
        return self

    def bytes(self, data):
        self.b += b"B" + struct.pack("<I", len(data)) + data
        return self

    def bool(self, v):
        self.b += b"\x88" if v else b"\x89"
        return self

    def none(self):
        self.b += b"N"
        return self

    def float(self, v):
        self.b += b"G" + struct.pack(">d", v)
        return self

    def ints(self, vals):
        self.mark()
        for v in vals:
            self.int(v)
        return self.tuple()

    def empty_dict(self):
        self.b += b"}"
        return self

    def setitem(self):
        self.b += b"s"
        return self

    def odict(self):
        return self.glob("collections", "OrderedDict").mark().tuple().reduce()

    def pid(self, cls, key, numel, mod="torch"):
        self.mark().str("storage").glob(mod, cls).str(key).str("cpu").int(numel).tuple()
        self.b += b"Q"  # BINPERSID
        return self

    def stop(self):
        self.b += b"."
        return bytes(self.b)


def v2(p, cls, key, numel, offset, size, stride, rg=False):
    p.glob("torch._utils", "_rebuild_tensor_v2").mark()
    p.pid(cls, key, numel).int(offset).ints(size).ints(stride).bool(rg).odict()
    return p.tuple().reduce()


def pack(path, pkl, storages, prefix="archive"):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(prefix + "/data.pkl", pkl)
        for k, data in storages.items():
            z.writestr(prefix + "/data/" + k, data)
        z.writestr(prefix + "/version", "3\n")


def cat(path, p):
    r = run("cat", path, p)
    assert r.returncode == 0, r.stderr
    return r.stdout


def meta(path, p):
    return json.loads(cat(path, p + ".json"))


F32 = np.arange(12, dtype=np.float32)


def dict_of(p, items):
    """{name: <value written by fn>} as EMPTY_DICT + SETITEM."""
    p.empty_dict()
    for name, fn in items:
        p.str(name)
        fn(p)
        p.setitem()
    return p.stop()


def test_every_rebuild_form(tmp_path):
    f8 = np.arange(16, dtype=np.uint8)
    u16 = np.arange(6, dtype=np.uint16)
    items = [
        ("v2", lambda p: v2(p, "FloatStorage", "0", 12, 2, [2, 3], [3, 1])),
        ("v2_view", lambda p: v2(p, "FloatStorage", "0", 12, 1, [3, 2], [1, 4])),
        ("old", lambda p: p.glob("torch._utils", "_rebuild_tensor").mark()
            .pid("FloatStorage", "0", 12).int(0).ints([12]).ints([1]).tuple().reduce()),
        ("v3_f8", lambda p: p.glob("torch._utils", "_rebuild_tensor_v3").mark()
            .pid("UntypedStorage", "1", 16, mod="torch.storage").int(4).ints([2, 4]).ints([4, 1])
            .bool(False).odict().glob("torch", "float8_e4m3fn").tuple().reduce()),
        ("v3_u16", lambda p: p.glob("torch._utils", "_rebuild_tensor_v3").mark()
            .pid("UntypedStorage", "2", 12, mod="torch.storage").int(0).ints([6]).ints([1])
            .bool(False).odict().glob("torch", "uint16").tuple().reduce()),
        ("param", lambda p: v2(p.glob("torch._utils", "_rebuild_parameter").mark(),
                                "FloatStorage", "0", 12, 0, [4], [1]).bool(True).odict().tuple().reduce()),
        ("param_state", lambda p: v2(p.glob("torch._utils", "_rebuild_parameter_with_state").mark(),
                                      "FloatStorage", "0", 12, 4, [4], [1]).bool(True).odict()
            .empty_dict().tuple().reduce()),
        ("from_type", lambda p: p.glob("torch._tensor", "_rebuild_from_type_v2").mark()
            .glob("torch._utils", "_rebuild_tensor_v2").glob("torch.nn.parameter", "Parameter").mark()
            .pid("FloatStorage", "0", 12).int(8).ints([4]).ints([1]).bool(False).odict().tuple()
            .empty_dict().tuple().reduce()),
        ("from_cpu", lambda p: v2(p.glob("torch._utils", "_rebuild_device_tensor_from_cpu_tensor").mark(),
                                   "FloatStorage", "0", 12, 0, [12], [1])
            .glob("torch", "float32").str("xla:0").bool(False).tuple().reduce()),
        ("old_param", lambda p: v2(p.glob("torch.nn.parameter", "Parameter").mark(),
                                    "FloatStorage", "0", 12, 0, [2, 2], [2, 1]).bool(False).tuple().reduce()),
        ("qtensor", lambda p: p.glob("torch._utils", "_rebuild_qtensor").mark()
            .pid("QUInt8Storage", "3", 16).int(0).ints([4, 4]).ints([4, 1])
            .mark().glob("torch", "per_tensor_affine").float(0.1).int(3).tuple()
            .bool(False).odict().tuple().reduce()),
    ]
    pkl = dict_of(P(), items)
    path = str(tmp_path / "forms.pt")
    pack(path, pkl, {"0": F32.tobytes(), "1": f8.tobytes(), "2": u16.tobytes(),
                     "3": f8.tobytes()})
    assert cat(path, "v2") == F32[2:8].tobytes()
    view = np.lib.stride_tricks.as_strided(F32[1:], shape=(3, 2), strides=(4, 16))
    assert cat(path, "v2_view") == np.ascontiguousarray(view).tobytes()
    assert meta(path, "v2_view")["contiguous"] is False
    assert cat(path, "old") == F32.tobytes()
    m = meta(path, "v3_f8")
    assert m["dtype"] == "float8_e4m3fn" and m["shape"] == [2, 4] and m["storage_offset"] == 4
    assert cat(path, "v3_f8") == f8[4:12].tobytes()
    assert meta(path, "v3_u16")["dtype"] == "uint16" and cat(path, "v3_u16") == u16.tobytes()
    m = meta(path, "param")
    assert m["kind"] == "parameter" and m["requires_grad"] is True
    assert cat(path, "param") == F32[:4].tobytes()
    assert cat(path, "param_state") == F32[4:8].tobytes()
    assert meta(path, "from_type")["kind"] == "parameter"
    assert cat(path, "from_type") == F32[8:12].tobytes()
    assert cat(path, "from_cpu") == F32.tobytes()
    assert meta(path, "old_param")["kind"] == "parameter"
    m = meta(path, "qtensor")
    assert m["dtype"] == "quint8" and cat(path, "qtensor") == f8.tobytes()


def test_numpy_device_tensor(tmp_path):
    """_rebuild_device_tensor_from_numpy(ndarray, dtype, device, rg): the
    data is the array's bytes (bfloat16 tensors are saved as float32)."""
    arr = np.arange(6, dtype=np.float32)
    def nd(p):
        p.glob("torch._utils", "_rebuild_device_tensor_from_numpy").mark()
        p.glob("numpy.core.multiarray", "_reconstruct").mark()
        p.glob("numpy", "ndarray").ints([0]).bytes(b"b").tuple().reduce()
        p.mark().int(1).ints([2, 3])
        p.glob("numpy", "dtype").mark().str("f4").bool(False).bool(True).tuple().reduce()
        p.mark().int(3).str("<").none().none().none().int(-1).int(-1).int(0).tuple().build()
        p.bool(False).bytes(arr.tobytes()).tuple().build()
        p.glob("torch", "bfloat16").str("xla:0").bool(False).tuple().reduce()
    path = str(tmp_path / "nd.pt")
    pack(path, dict_of(P(), [("t", nd)]), {})
    assert cat(path, "t") == arr.tobytes()
    m = meta(path, "t")
    assert m["shape"] == [2, 3] and m["dtype"] == "float32"
    assert m["logical_dtype"] == "bfloat16" and "note" in m


@pytest.mark.parametrize("bad,msg", [
    (lambda p: v2(p, "FloatStorage", "0", 12, 10, [2, 3], [3, 1]), "reaches byte"),
    (lambda p: v2(p, "FloatStorage", "0", 12, 0, [2 ** 31 - 1, 2 ** 31 - 1, 2 ** 31 - 1], [1, 1, 1]),
     "overflow"),
    (lambda p: v2(p, "NoSuchStorage", "0", 12, 0, [1], [1]), "unknown storage type"),
    (lambda p: v2(p, "FloatStorage", "9", 12, 0, [1], [1]), "is missing"),
    (lambda p: v2(p, "FloatStorage", "0", 99, 0, [1], [1]), "the pickle says"),
    (lambda p: p.glob("torch._utils", "_rebuild_tensor_v3").mark()
        .pid("UntypedStorage", "0", 48, mod="torch.storage").int(0).ints([1]).ints([1])
        .bool(False).odict().glob("torch", "float13").tuple().reduce(), "unknown dtype"),
])
def test_hostile_tensors(tmp_path, bad, msg):
    path = str(tmp_path / "bad.pt")
    pack(path, dict_of(P(), [("t", bad)]), {"0": F32.tobytes()})
    r = run("ls", path)
    lines = r.stderr.decode().strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and path in lines[0] and msg in lines[0], lines
