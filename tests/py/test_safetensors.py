# SPDX-License-Identifier: MIT
"""safetensors files and sharded checkpoints (*.index.json).

There is no safetensors package here, so files are written by hand: the format
is [u64le N][N bytes of JSON][data] (docs/FORMATS.md, "safetensors header").
The mount and `ptfs cat` must give each tensor's bytes, the tree must list
tensors in header order, and hostile headers must fail with one line naming
the file.
"""
import hashlib
import json
import os
import re
import shutil
import struct

import numpy as np
import pytest
import torch

import oracle
from conftest import FIXTURES, PTFS, fixture_corpus, fixture_rows, mounted, needs_fuse, run

# numpy dtype -> (safetensors name, torch name in NAME.json)
NP_DTYPES = [
    (np.bool_, "BOOL", "bool"),
    (np.uint8, "U8", "uint8"),
    (np.int8, "I8", "int8"),
    (np.uint16, "U16", "uint16"),
    (np.int16, "I16", "int16"),
    (np.float16, "F16", "float16"),
    (np.uint32, "U32", "uint32"),
    (np.int32, "I32", "int32"),
    (np.float32, "F32", "float32"),
    (np.uint64, "U64", "uint64"),
    (np.int64, "I64", "int64"),
    (np.float64, "F64", "float64"),
    (np.complex64, "C64", "complex64"),
]
ST_TO_TORCH = {st: tn for _, st, tn in NP_DTYPES}
ST_TO_TORCH.update({"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
                    "F8_E5M2": "float8_e5m2"})
ST_TO_NP = {st: np.dtype(d) for d, st, _ in NP_DTYPES}


def header_bytes(header, pad=True):
    hb = json.dumps(header).encode() if not isinstance(header, bytes) else header
    if pad:
        hb += b" " * ((8 - (8 + len(hb)) % 8) % 8)
    return hb


def write_st(path, tensors, metadata=None, meta_last=False):
    """tensors: [(name, st_dtype, shape, raw bytes)] in file order."""
    header, data = {}, b""
    if metadata is not None and not meta_last:
        header["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None and meta_last:
        header["__metadata__"] = metadata
    hb = header_bytes(header)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)
    return hb


def write_raw(path, header_text, data=b"", length=None):
    hb = header_text if isinstance(header_text, bytes) else header_text.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb) if length is None else length) + hb + data)


def every_dtype():
    """[(name, st_dtype, shape, raw, array or None)] covering every dtype."""
    rng = np.random.default_rng(7)
    out = []
    for i, (d, st, _) in enumerate(NP_DTYPES):
        shape = (2, 3) if i % 2 else (5,)
        if d is np.bool_:
            a = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(d, np.integer):
            info = np.iinfo(d)
            a = rng.integers(info.min, info.max, size=shape, dtype=d, endpoint=True)
        elif d is np.complex64:
            a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(d)
        else:
            a = rng.standard_normal(shape).astype(d)
        out.append(("t_" + st.lower(), st, shape, a.tobytes(), a))
    bf = rng.integers(0, 65536, size=(3, 2), dtype=np.uint16)
    out.append(("bf16", "BF16", (3, 2), bf.tobytes(), None))
    out.append(("f8a", "F8_E4M3", (4,), bytes(range(4)), None))
    out.append(("f8b", "F8_E5M2", (2, 2), bytes(range(10, 14)), None))
    out.append(("empty", "F32", (0, 3), b"", np.zeros((0, 3), np.float32)))
    out.append(("scalar0d", "F64", (), np.float64(2.5).tobytes(), np.array(2.5)))
    # odd names: escaping, '..', empty, unicode, NUL, a %
    out.append(("a/b", "I32", (2,), np.array([1, 2], np.int32).tobytes(), None))
    out.append(("..", "U8", (1,), b"\x09", None))
    out.append(("", "U8", (1,), b"\x0a", None))
    out.append(("h\u00e9llo", "U8", (1,), b"\x0b", None))
    out.append(("nul\x00byte", "U8", (1,), b"\x0c", None))
    out.append(("100%", "U8", (1,), b"\x0d", None))
    return out


def cstride(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d if d > 1 else 1
    return list(reversed(st))


def enc(name):
    return oracle.encode(name).decode("utf-8", "surrogateescape")


@pytest.fixture(scope="module")
def every(tmp_path_factory):
    d = tmp_path_factory.mktemp("st")
    path = str(d / "every.safetensors")
    tensors = every_dtype()
    meta = {"format": "pt", "note": "h\u00e9 \"q\"\n"}
    hb = write_st(path, [t[:4] for t in tensors], metadata=meta)
    return path, tensors, meta, hb


def ls_names(path):
    r = run("ls", path)
    assert r.returncode == 0, r.stderr
    return [re.match(r"^\S +\d+  (.*?)(  \S+ \[.*)?$", line).group(1)
            for line in r.stdout.decode("utf-8", "surrogateescape").splitlines()]


def cat(path, p):
    r = run("cat", path, p)
    assert r.returncode == 0, (p, r.stderr)
    return r.stdout


def test_cli_every_dtype(every):
    path, tensors, meta, hb = every
    for name, st, shape, raw, _ in tensors:
        e = enc(name)
        assert cat(path, e) == raw, name
        m = json.loads(cat(path, e + ".json"))
        assert m["dtype"] == ST_TO_TORCH[st], name
        assert m["shape"] == list(shape) and m["stride"] == cstride(shape)
        assert m["storage_offset"] == 0 and m["nbytes"] == len(raw)
        assert m["zero_copy"] is True
    info = run("info", path).stdout.decode()
    assert "format: safetensors" in info
    assert "tensors: %d " % len(tensors) in info
    assert json.loads(cat(path, ".ptfs/metadata.json")) == meta
    assert cat(path, ".ptfs/header.json") == hb


def test_listing_order(every):
    path, tensors, _, _ = every
    assert ls_names(path) == [enc(t[0]) for t in tensors]


@needs_fuse
def test_mount_every_dtype(every):
    path, tensors, meta, hb = every
    with mounted(path) as mnt:
        names = os.listdir(mnt)
        assert names[0] == ".ptfs"
        want = []
        for t in tensors:
            want += [enc(t[0]), enc(t[0]) + ".json"]
        assert names[1:] == want
        for name, st, shape, raw, arr in tensors:
            f = os.path.join(mnt, enc(name))
            assert os.stat(f).st_size == len(raw)
            with open(f, "rb") as fh:
                assert fh.read() == raw, name
            if arr is not None:
                a = np.fromfile(f, dtype=arr.dtype).reshape(shape)
                assert np.array_equal(a, arr), name
        with open(os.path.join(mnt, ".ptfs", "metadata.json")) as fh:
            assert json.load(fh) == meta
        with open(os.path.join(mnt, ".ptfs", "header.json"), "rb") as fh:
            assert fh.read() == hb


def test_metadata_last_and_empty_file(tmp_path):
    p = str(tmp_path / "m.safetensors")
    write_st(p, [("w", "F32", (2,), np.ones(2, np.float32).tobytes())],
             metadata={"k": "v"}, meta_last=True)
    assert cat(p, "w") == np.ones(2, np.float32).tobytes()
    assert json.loads(cat(p, ".ptfs/metadata.json")) == {"k": "v"}
    p = str(tmp_path / "none.safetensors")
    write_st(p, [])
    r = run("ls", p)
    assert r.returncode == 0 and r.stdout == b"", r.stderr


def test_header_length_like_a_pickle(tmp_path):
    """N = 0x280: the file starts 80 02, like a protocol-2 pickle."""
    p = str(tmp_path / "p.safetensors")
    hb = json.dumps({"w": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}}).encode()
    hb += b" " * (0x280 - len(hb))
    write_raw(p, hb, b"abc")
    assert run("info", p).stdout.decode().count("format: safetensors") == 1
    assert cat(p, "w") == b"abc"


HOSTILE = [
    ("len_beyond_file", lambda p: write_raw(p, '{"a": 1}', length=1000),
     "past the end of the file"),
    ("overlap", lambda p: write_raw(
        p, '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
           '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', b"\0" * 12),
     "overlap"),
    ("beyond_data", lambda p: write_raw(
        p, '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', b"\0" * 8),
     "outside the data section"),
    ("begin_after_end", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}', b"\0" * 8),
     "outside the data section"),
    ("wrong_size", lambda p: write_raw(
        p, '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', b"\0" * 8),
     "need 12"),
    ("bad_json", lambda p: write_raw(p, '{"a": {"dtype": "F32",, }}'),
     "at byte 22: expected a string"),
    ("unterminated", lambda p: write_raw(p, '{"a": {"dtype": "F32'),
     "unterminated string"),
    ("deep_member", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":'
           + "[" * 100000 + "]" * 100000 + "}}", b"\0"),
     "nested too deeply"),
    ("deep_value", lambda p: write_raw(p, '{"a":' + "[" * 100000 + "]" * 100000 + "}"),
     "expected an object"),
    ("huge_number", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[99999999999999999999999],"data_offsets":[0,1]}}', b"\0"),
     "number too large"),
    ("numel_overflow", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[4611686018427387904,4611686018427387904],'
           '"data_offsets":[0,1]}}', b"\0"),
     "element count overflows"),
    ("bytes_overflow", lambda p: write_raw(
        p, '{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,1]}}', b"\0"),
     "overflows"),
    ("huge_offset", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}}', b"\0"),
     "number too large"),
    ("negative_dim", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}', b"\0"),
     "negative"),
    ("float_dim", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}', b"\0"),
     "not an integer"),
    ("unknown_dtype", lambda p: write_raw(
        p, '{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}', b"\0" * 16),
     "unknown dtype 'F128'"),
    ("duplicate", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
           '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\0\0"),
     "appears twice"),
    ("missing_offsets", lambda p: write_raw(p, '{"a":{"dtype":"U8","shape":[1]}}', b"\0"),
     "no data_offsets"),
    ("bad_utf8", lambda p: write_raw(
        p, b'{"a\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
     "invalid UTF-8"),
    ("lone_surrogate", lambda p: write_raw(
        p, '{"a\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
     "surrogate"),
    ("trailing", lambda p: write_raw(p, '{} x'), "text after the end"),
    ("meta_not_str", lambda p: write_raw(p, '{"__metadata__": {"a": 1}}'),
     "must be strings"),
    ("rank_limit", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[' + ",".join(["1"] * 100)
           + '],"data_offsets":[0,1]}}', b"\0"),
     "dimensions"),
    ("offsets_shape", lambda p: write_raw(
        p, '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}', b"\0"),
     "data_offsets must be [begin, end]"),
]


@pytest.mark.parametrize("name,make,msg", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile(tmp_path, name, make, msg):
    p = str(tmp_path / (name + ".safetensors"))
    make(p)
    for args in (["ls", p], ["info", p]):
        r = run(*args)
        err = r.stderr.decode()
        assert r.returncode == 1, (args, err)
        assert r.stdout == b""
        assert err.count("\n") == 1 and err.startswith("ptfs: %s: " % p), err
        assert msg in err, err


def test_holes_warn(tmp_path):
    p = str(tmp_path / "holes.safetensors")
    write_raw(p, '{"a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}', b"\0\0\x07\0")
    assert cat(p, "a") == b"\x07"
    assert "3 bytes of the data section belong to no tensor" in run("info", p).stdout.decode()


# ---- real files ----

ST_ROWS = [r for r in fixture_rows() if r.get("container") == "safetensors"]


@fixture_corpus
@pytest.mark.parametrize("row", ST_ROWS, ids=[r["local_name"] for r in ST_ROWS])
def test_fixture(row):
    path = os.path.join(FIXTURES, row["local_name"])
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    names = [k for k in header if k != "__metadata__"]
    assert ls_names(path) == [enc(k) for k in names]
    for k in names:
        e = header[k]
        b, end = e["data_offsets"]
        assert cat(path, enc(k)) == blob[base + b:base + end], k
        m = json.loads(cat(path, enc(k) + ".json"))
        assert m["dtype"] == ST_TO_TORCH[e["dtype"]] and m["shape"] == e["shape"]
        assert m["file_offset"] == base + b
    if "__metadata__" in header and header["__metadata__"] is not None:
        assert json.loads(cat(path, ".ptfs/metadata.json")) == header["__metadata__"]


# ---- sharded checkpoints ----

def st_shards(d):
    """Two safetensors shards and their index; returns {name: array}, order."""
    rng = np.random.default_rng(3)
    arrays = {
        "model.embed.weight": rng.standard_normal((4, 3)).astype(np.float32),
        "model.layers.0.bias": rng.standard_normal((3,)).astype(np.float16),
        "lm_head.weight": rng.integers(-9, 9, (2, 2), dtype=np.int64),
        "model.layers.1.w": np.arange(6, dtype=np.int32).reshape(2, 3),
        "a/b": np.array([1, 0, 1], np.bool_),
    }
    shards = {"model-00001-of-00002.safetensors": ["model.embed.weight", "a/b"],
              "model-00002-of-00002.safetensors": ["lm_head.weight", "model.layers.1.w",
                                                   "model.layers.0.bias"]}
    sts = {np.dtype(v): k for k, v in ST_TO_NP.items()}
    where = {}
    for fname, keys in shards.items():
        write_st(os.path.join(d, fname),
                 [(k, sts[arrays[k].dtype], arrays[k].shape, arrays[k].tobytes())
                  for k in keys], metadata={"format": "pt"})
        for k in keys:
            where[k] = fname
    # weight_map order differs from both shard orders
    order = ["lm_head.weight", "model.embed.weight", "a/b", "model.layers.1.w",
             "model.layers.0.bias"]
    index = {"metadata": {"total_size": sum(a.nbytes for a in arrays.values()),
                          "nested": {"x": [1, 2, {"y": None}]}},
             "weight_map": {k: where[k] for k in order}}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return {k: arrays[k] for k in order}, order


def bin_shards(d):
    """Two torch.save shards (a view, tied weights) and their index."""
    torch.manual_seed(0)
    base = torch.randn(4, 5)
    tensors = {
        "encoder.weight": torch.randn(3, 3),
        "encoder.view": base[:, 1:3],           # strided view of a storage
        "decoder.weight": base,                 # shares that storage
        "decoder.bias": torch.arange(4, dtype=torch.int16),
        "half": torch.randn(2, 2).to(torch.bfloat16),
    }
    shards = {"pytorch_model-00001-of-00002.bin": ["encoder.weight", "encoder.view",
                                                   "decoder.weight"],
              "pytorch_model-00002-of-00002.bin": ["decoder.bias", "half"]}
    where = {}
    for fname, keys in shards.items():
        torch.save({k: tensors[k] for k in keys}, os.path.join(d, fname))
        for k in keys:
            where[k] = fname
    order = ["half", "encoder.view", "decoder.bias", "encoder.weight", "decoder.weight"]
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0},
                   "weight_map": {k: where[k] for k in order}}, f)
    return {k: tensors[k] for k in order}, order, where


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    d1 = str(tmp_path_factory.mktemp("st_shards"))
    st, st_order = st_shards(d1)
    d2 = str(tmp_path_factory.mktemp("bin_shards"))
    bt, bt_order, where = bin_shards(d2)
    return d1, st, st_order, d2, bt, bt_order, where


def check_tree_cli(path, want, order):
    assert ls_names(path) == [enc(k) for k in order]
    for k, v in want.items():
        assert cat(path, enc(k)) == oracle.tensor_bytes(v), k
        m = json.loads(cat(path, enc(k) + ".json"))
        oracle.check_meta(m, v)


def check_tree_mount(mnt, want, order):
    names = os.listdir(mnt)
    exp = []
    for k in order:
        exp += [enc(k), enc(k) + ".json"]
    assert names == [".ptfs"] + exp
    for k, v in want.items():
        f = os.path.join(mnt, enc(k))
        with open(f, "rb") as fh:
            assert fh.read() == oracle.tensor_bytes(v), k
        if isinstance(v, np.ndarray):
            a = np.fromfile(f, dtype=v.dtype).reshape(v.shape)
            assert np.array_equal(a, v), k


def test_sharded_safetensors_cli(sharded):
    d1, st, order = sharded[:3]
    idx = os.path.join(d1, "model.safetensors.index.json")
    check_tree_cli(idx, st, order)
    check_tree_cli(d1, st, order)
    m = json.loads(cat(idx, enc("a/b") + ".json"))
    assert m["file"].endswith("model-00001-of-00002.safetensors")
    info = run("info", d1).stdout.decode()
    assert "index: 5 tensors in 2 shards" in info and "tensors: 5 " in info
    with open(idx, "rb") as f:
        assert cat(idx, ".ptfs/index.json") == f.read()


def test_sharded_bin_cli(sharded):
    d2, bt, order = sharded[3:6]
    idx = os.path.join(d2, "pytorch_model.bin.index.json")
    check_tree_cli(idx, bt, order)
    check_tree_cli(d2, bt, order)


@needs_fuse
def test_sharded_mount(sharded):
    d1, st, st_order, d2, bt, bt_order, _ = sharded
    for path in (os.path.join(d1, "model.safetensors.index.json"), d1):
        with mounted(path) as mnt:
            check_tree_mount(mnt, st, st_order)
    for path in (os.path.join(d2, "pytorch_model.bin.index.json"), d2):
        with mounted(path) as mnt:
            check_tree_mount(mnt, bt, bt_order)
            w = bt["decoder.weight"].numpy()
            a = np.fromfile(os.path.join(mnt, "decoder.weight"), np.float32)
            assert np.array_equal(a.reshape(w.shape), w)


def test_directory_prefers_safetensors_index(sharded, tmp_path):
    d1, st, st_order, d2 = sharded[:4]
    d = str(tmp_path / "both")
    shutil.copytree(d1, d)
    for f in os.listdir(d2):
        shutil.copy(os.path.join(d2, f), d)
    check_tree_cli(d, st, st_order)
    # one weights file and no index: that file
    one = str(tmp_path / "one")
    os.mkdir(one)
    write_st(os.path.join(one, "model.safetensors"),
             [("x", "U8", (2,), b"\x01\x02")])
    assert cat(one, "x") == b"\x01\x02"
    empty = str(tmp_path / "empty")
    os.mkdir(empty)
    r = run("ls", empty)
    assert r.returncode == 1 and "not a checkpoint" in r.stderr.decode()


def write_index(d, weight_map, name="model.safetensors.index.json"):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return p


@pytest.mark.parametrize("wm,msg", [
    ({"x": "../outside.safetensors"}, "not a plain file name"),
    ({"x": "/etc/passwd"}, "not a plain file name"),
    ({"x": ""}, "not a plain file name"),
    ({"x": "missing.safetensors"}, "shard 'missing.safetensors': No such file"),
    ({"nope": "s.safetensors"}, "tensor 'nope' is not in shard 's.safetensors'"),
    ({"x": "model.safetensors.index.json"}, "is itself a sharded index"),
    ({"x": 3}, "is not a file name"),
])
def test_sharded_hostile(tmp_path, wm, msg):
    d = str(tmp_path)
    write_st(os.path.join(d, "s.safetensors"), [("x", "U8", (1,), b"\x05")])
    p = write_index(d, wm)
    r = run("ls", p)
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith("ptfs: %s: " % p) and msg in err, err


def test_sharded_bad_index(tmp_path):
    d = str(tmp_path)
    p = os.path.join(d, "x.index.json")
    with open(p, "w") as f:
        f.write('{"weight_map": {"a": "s.safetensors", "a": "s.safetensors"}}')
    write_st(os.path.join(d, "s.safetensors"), [("a", "U8", (1,), b"\x05")])
    r = run("ls", p)
    assert r.returncode == 1 and "appears twice" in r.stderr.decode()
    with open(p, "w") as f:
        f.write('{"metadata": ' + "[" * 1000 + "]" * 1000 + ', "weight_map": {}}')
    r = run("ls", p)
    assert r.returncode == 1 and "nested too deeply" in r.stderr.decode()
    with open(p, "w") as f:
        f.write('{"metadata": {}, "weight_map": {}}')
    r = run("ls", p)
    assert r.returncode == 0 and r.stdout == b"", r.stderr


def test_write_through_mount_and_set(tmp_path):
    """safetensors files are written in place of their bytes: the header and
    every other tensor stay byte for byte, atomically (copy + rename)."""
    p = str(tmp_path / "w.safetensors")
    a = np.arange(8, dtype=np.float32)
    b = np.arange(4, dtype=np.int64)
    write_st(p, [("a", "F32", (8,), a.tobytes()), ("b", "I64", (4,), b.tobytes())],
             metadata={"format": "pt"})
    raw = open(p, "rb").read()
    os.chmod(p, 0o640)
    if os.path.exists("/dev/fuse"):
        with mounted(p) as mnt:
            with open(os.path.join(mnt, "a"), "r+b") as f:
                f.seek(8)
                f.write(np.array([42, 43], np.float32).tobytes())
            assert np.fromfile(os.path.join(mnt, "a"), np.float32)[2] == 42
            assert open(p, "rb").read() == raw  # not before a commit
        new = open(p, "rb").read()
        a2 = a.copy()
        a2[2:4] = [42, 43]
        assert new == raw.replace(a.tobytes(), a2.tobytes())
        assert os.stat(p).st_mode & 0o777 == 0o640
        raw = new
    r = run("set", p, "b", input=np.array([9, 9, 9, 9], np.int64).tobytes())
    assert r.returncode == 0, r.stderr
    b_off = raw.index(b.tobytes())
    new = open(p, "rb").read()
    assert new[:b_off] == raw[:b_off] and new[b_off:b_off + 32] == np.full(4, 9, np.int64).tobytes()
    assert not [f for f in os.listdir(tmp_path) if ".ptfs-" in f]


def test_hugging_face_cache_layout(tmp_path):
    """The hub's cache: every file of snapshots/COMMIT/ is a link to a
    blob named by its hash.  Shards are found beside the index's link (the
    path as given, relative or absolute, or its directory), not beside the
    blob it names."""
    repo = tmp_path / "models--org--repo"
    blobs, snap = repo / "blobs", repo / "snapshots" / ("c" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    made = str(tmp_path / "made")
    os.mkdir(made)
    wm = {}
    for i in range(2):
        name = "model-%05d-of-00002.safetensors" % (i + 1)
        write_st(os.path.join(made, name), [("t%d" % i, "U8", (2,), bytes([i, i + 1]))])
        wm["t%d" % i] = name
    write_index(made, wm)
    for name in os.listdir(made):
        blob = hashlib.sha256(open(os.path.join(made, name), "rb").read()).hexdigest()
        os.rename(os.path.join(made, name), str(blobs / blob))
        os.symlink(os.path.join("..", "..", "blobs", blob), str(snap / name))
    index = str(snap / "model.safetensors.index.json")
    for path in (index, os.path.relpath(index), str(snap)):
        assert cat(path, "t1") == b"\x01\x02", path
