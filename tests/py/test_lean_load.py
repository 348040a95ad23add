# SPDX-License-Identifier: MIT
"""Lean loads (core/decode/pickle.c, pt_pickle_load_lean): a tensor's
arguments are given back to the arena as soon as REDUCE makes it, unless
something can still reach them.  Each pickle here makes something reach
them -- a memo entry read again later, an older container that got items
while the arguments were being built -- and the values must read back
whole (under ASan, a node given back too early is a use after free)."""
import struct

import numpy as np

from conftest import run
from test_rebuild_forms import P, pack, cat, meta, v2


def put(p, i):
    p.b += b"q" + bytes([i])     # BINPUT
    return p


def get(p, i):
    p.b += b"h" + bytes([i])     # BINGET
    return p


F32 = np.arange(12, dtype=np.float32)


def test_memo_reads_a_tuple_of_the_arguments(tmp_path):
    # the size tuple of "w" is memoised and read again as "shape"
    p = P()
    p.empty_dict()
    p.str("w")
    p.glob("torch._utils", "_rebuild_tensor_v2").mark()
    p.pid("FloatStorage", "0", 12).int(0)
    p.ints([3, 4])
    put(p, 7)
    p.ints([4, 1]).bool(False).odict().tuple().reduce()
    p.setitem()
    p.str("shape")
    get(p, 7)
    p.setitem()
    path = tmp_path / "memo.pt"
    pack(path, p.stop(), {"0": F32.tobytes()})
    assert cat(path, "w") == F32.tobytes()
    assert meta(path, "w")["shape"] == [3, 4]
    assert cat(path, "shape/0").strip() == b"3"
    assert cat(path, "shape/1").strip() == b"4"


def test_memo_reads_strings_and_globals_of_the_arguments(tmp_path):
    # the second tensor names its storage class, location and key through
    # memo entries made inside the first one's arguments; the key is
    # shared, so both tensors view one storage
    p = P()
    p.empty_dict()
    p.str("a")
    p.glob("torch._utils", "_rebuild_tensor_v2").mark()
    p.mark().str("storage")
    put(p, 1)
    p.glob("torch", "FloatStorage")
    put(p, 2)
    p.str("0")
    put(p, 3)
    p.str("cpu")
    put(p, 4)
    p.int(12).tuple()
    p.b += b"Q"
    p.int(0).ints([12]).ints([1]).bool(False).odict().tuple().reduce()
    p.setitem()
    p.str("b")
    p.glob("torch._utils", "_rebuild_tensor_v2").mark()
    p.mark()
    for i in (1, 2, 3, 4):
        get(p, i)
    p.int(12).tuple()
    p.b += b"Q"
    p.int(4).ints([2, 4]).ints([4, 1]).bool(True).odict().tuple().reduce()
    p.setitem()
    path = tmp_path / "strings.pt"
    pack(path, p.stop(), {"0": F32.tobytes()})
    assert cat(path, "a") == F32.tobytes()
    assert cat(path, "b") == F32[4:].tobytes()
    m = meta(path, "b")
    assert m["shape"] == [2, 4] and m["dtype"] == "float32"
    r = run("ls", path)
    assert r.returncode == 0, r.stderr


def test_an_older_container_gets_items_inside_the_arguments(tmp_path):
    # while the arguments of "w" are built, the root dict (memo 0) gets
    # the item "k": its key and value were made after the MARK and must
    # outlive the tensor's REDUCE
    p = P()
    p.empty_dict()
    put(p, 0)
    p.str("w")
    p.glob("torch._utils", "_rebuild_tensor_v2").mark()
    p.pid("FloatStorage", "0", 12).int(0).ints([12]).ints([1]).bool(False)
    get(p, 0)
    p.str("k").float(2.5).setitem()
    p.tuple().reduce()
    p.setitem()
    # then enough new nodes to reuse whatever was given back
    p.str("after").mark()
    for i in range(64):
        p.str("s%d" % i)
    p.tuple()
    p.setitem()
    path = tmp_path / "taint.pt"
    pack(path, p.stop(), {"0": F32.tobytes()})
    assert cat(path, "w") == F32.tobytes()
    assert cat(path, "k").strip() == b"2.5"
    assert cat(path, "after/63").strip() == b"s63"


def test_a_parameter_around_a_lean_tensor(tmp_path):
    # _rebuild_parameter reads its tensor after that tensor's arguments
    # were given back
    p = P()
    p.empty_dict()
    p.str("p")
    p.glob("torch._utils", "_rebuild_parameter").mark()
    v2(p, "FloatStorage", "0", 12, 3, [3, 3], [1, 3])
    p.bool(True).odict().tuple().reduce()
    p.setitem()
    path = tmp_path / "param.pt"
    pack(path, p.stop(), {"0": F32.tobytes()})
    m = meta(path, "p")
    assert m["shape"] == [3, 3] and m["stride"] == [1, 3]
    assert m.get("requires_grad") is True
    want = np.lib.stride_tricks.as_strided(F32[3:], (3, 3), (4, 12))
    assert cat(path, "p") == np.ascontiguousarray(want).tobytes()
