# SPDX-License-Identifier: MIT
"""ONNX models (docs/FORMATS.md, ONNX).

Models are written by torch.onnx.export (torch 1.13) and by Debian's onnx
package (onnx.helper.make_tensor for the typed fields, save_model for
external data).  Every tensor ptfs shows must be byte for byte what
onnx.numpy_helper.to_array gives; writes through a mount must leave a model
onnx.checker accepts with the new values, in the model and in its data files
(external data); hostile models must fail with one line naming the file and
the problem.
"""
import os
import struct
import subprocess

import numpy as np
import pytest
import torch

from conftest import PTFS, mounted, needs_curl, needs_fuse, run
from test_write_model import mounts  # noqa: F401  (fixture)

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    onnx = None
# every test: a skip that PTFS_REQUIRE_PYTHON=1 turns into a failure
pytestmark = pytest.mark.skipif(
    onnx is None, reason="needs torch 1.13 with python3-onnx (contrib/setup.sh)")


# ---- models ----

def export(model, args, path, **kw):
    torch.onnx.export(model.eval(), args, path, **kw)
    return path


def mlp(tmp_path, **kw):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return m, export(m, torch.randn(1, 4), str(tmp_path / "mlp.onnx"), **kw)


def cnn(tmp_path):
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                            torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 3))
    m.train()
    m(torch.randn(2, 3, 8, 8))      # running statistics that are not 0 and 1
    return m, export(m, torch.randn(1, 3, 8, 8), str(tmp_path / "cnn.onnx"))


def transformer(tmp_path):
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                             batch_first=True)
    m = torch.nn.TransformerEncoder(layer, num_layers=2)
    return m, export(m, torch.randn(1, 5, 16), str(tmp_path / "tr.onnx"))


MODELS = {
    "mlp": mlp,
    "cnn": cnn,
    "transformer": transformer,
    "no_folding": lambda p: mlp(p, do_constant_folding=False),
}


def cat(model, name):
    r = run("cat", model, name)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def listing(model, *path):
    r = run("ls", "-a", model, *path)
    assert r.returncode == 0, r.stderr.decode()
    return [line.split()[2] for line in r.stdout.decode().splitlines()]


def file_name(name):
    """A tensor's name in the tree ('/' is %2F, LAYOUT.md)."""
    return name.replace("%", "%25").replace("/", "%2F")


def expected_bytes(t):
    # onnx 1.12's to_array fails on complex typed fields: the pairs as
    # python-protobuf decoded them
    if t.data_type == TensorProto.COMPLEX64 and not t.raw_data:
        return np.array(t.float_data, "<f4").tobytes()
    if t.data_type == TensorProto.COMPLEX128 and not t.raw_data:
        return np.array(t.double_data, "<f8").tobytes()
    a = numpy_helper.to_array(t)
    if t.data_type == TensorProto.BFLOAT16 and a.dtype == np.float32:
        return (a.view(np.uint32) >> 16).astype("<u2").tobytes()  # onnx 1.12
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def check_all(path, model=None):
    """Every initializer and Constant tensor of @path against to_array."""
    model = model or onnx.load(path)
    names = listing(path)
    n = 0
    for t in model.graph.initializer:
        assert file_name(t.name) in names
        assert cat(path, file_name(t.name)) == expected_bytes(t), t.name
        n += 1
    for node in model.graph.node:
        if node.op_type != "Constant":
            continue
        for a in node.attribute:
            if a.name == "value":
                got = cat(path, ".ptfs/constants/" + file_name(node.name))
                assert got == expected_bytes(a.t), node.name
                n += 1
    return n


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_torch_exports(tmp_path, kind):
    _, path = MODELS[kind](tmp_path)
    model = onnx.load(path)
    assert check_all(path, model) >= len(model.graph.initializer) > 0
    meta = cat(path, ".ptfs/metadata.json").decode()
    assert '"producer_name": "pytorch"' in meta and '"ir_version": %d' % model.ir_version in meta
    graph = cat(path, ".ptfs/graph.txt").decode()
    for node in model.graph.node:
        assert "%s %s:" % (node.op_type, node.name) in graph
    info = run("info", path).stdout.decode()
    assert "format: ONNX" in info


def test_constants_and_sidecar(tmp_path):
    _, path = transformer(tmp_path)
    model = onnx.load(path)
    consts = [n for n in model.graph.node if n.op_type == "Constant"]
    assert consts
    assert check_all(path) > len(model.graph.initializer)
    t = model.graph.initializer[0]
    side = cat(path, file_name(t.name) + ".json").decode()
    assert '"dtype": "float32"' in side and '"zero_copy": true' in side
    assert '"byteorder": "little"' in side and "ONNX FLOAT (data_type 1), raw_data" in side
    off = open(path, "rb").read().index(t.raw_data)
    assert '"file_offset": %d' % off in side


@pytest.mark.parametrize("one_file", [True, False])
def test_external_data(tmp_path, one_file):
    _, path = transformer(tmp_path)
    model = onnx.load(path)
    ext = str(tmp_path / "ext.onnx")
    onnx.save_model(model, ext, save_as_external_data=True,
                    all_tensors_to_one_file=one_file, location="weights.bin",
                    size_threshold=0)
    assert os.path.getsize(ext) < os.path.getsize(path)
    check_all(ext, onnx.load(ext))
    t = model.graph.initializer[0]
    side = cat(ext, file_name(t.name) + ".json").decode()
    assert '"file": "' in side and "external data in" in side
    # `ptfs set` writes the data file (docs/FORMATS.md, ONNX), the model's
    # own bytes untouched; once more in place, behind the journal
    model_bytes = open(ext, "rb").read()
    orig = onnx.load(path).graph.initializer
    for way in ("auto", "inplace"):
        new = os.urandom(len(expected_bytes(orig[0])))
        r = run("set", "-v", "-o", "commit=" + way, ext, file_name(t.name), input=new)
        assert r.returncode == 0, r.stderr.decode()
        # the bytes of the data file written, not of the model
        data = os.path.join(tmp_path, "weights.bin" if one_file else t.name)
        said = r.stderr.decode()
        assert ", %d bytes written)" % (os.path.getsize(data) if "rewrite" in said
                                        else len(new)) in said, said
        assert open(ext, "rb").read() == model_bytes
        assert not [n for n in os.listdir(tmp_path) if "ptfs-" in n]
        got = onnx.load(ext, load_external_data=True)
        onnx.checker.check_model(got)
        assert expected_bytes(got.graph.initializer[0]) == new
        assert cat(ext, file_name(t.name)) == new
        for a, b in zip(got.graph.initializer[1:], orig[1:]):
            assert expected_bytes(a) == expected_bytes(b), a.name


# every TensorProto data type onnx 1.12 knows (its code), in its typed field
TYPED = [
    (1, np.float32, [1.5, -2, 3.25, 0]),                    # FLOAT
    (2, np.uint8, [0, 1, 200, 255]),                        # UINT8
    (3, np.int8, [-128, -1, 0, 127]),                       # INT8
    (4, np.uint16, [0, 1, 40000, 65535]),                   # UINT16
    (5, np.int16, [-32768, -1, 0, 32767]),                  # INT16
    (6, np.int32, [-2**31, -1, 0, 2**31 - 1]),              # INT32
    (7, np.int64, [-2**63, -1, 0, 2**63 - 1]),              # INT64
    (9, np.bool_, [True, False, True, True]),               # BOOL
    (10, np.float16, [0.5, -1, 65504, 0]),                  # FLOAT16
    (11, np.float64, [1e300, -1, 0.5, 0]),                  # DOUBLE
    (12, np.uint32, [0, 1, 2**31, 2**32 - 1]),              # UINT32
    (13, np.uint64, [0, 1, 2**63, 2**64 - 1]),              # UINT64
    (14, np.complex64, [1 + 2j, -1j, 0, 3]),                # COMPLEX64
    (15, np.complex128, [1 + 2j, -1j, 0, 3]),               # COMPLEX128
    (16, np.float32, [1.0, -2.0, 0.5, 0]),                  # BFLOAT16
]


def typed_model(path, raw=False):
    tensors = []
    for code, dt, vals in TYPED:
        name = "t_" + TensorProto.DataType.Name(code).lower()
        arr = np.array(vals, dt)
        tensors.append(helper.make_tensor(name, code, [2, 2],
                                          arr if code == 10 else arr.tolist()))
    tensors.append(helper.make_tensor("t_string", TensorProto.STRING, [2],
                                      [b"hello", b"\xffbytes"]))
    graph = helper.make_graph([], "typed", [], [], initializer=tensors)
    model = helper.make_model(graph, producer_name="test_onnx")
    onnx.save(model, path)
    return onnx.load(path)


def test_typed_fields(tmp_path):
    path = str(tmp_path / "typed.onnx")
    model = typed_model(path)
    for t in model.graph.initializer:
        if t.data_type == TensorProto.STRING:
            assert cat(path, t.name + "/0") == b"hello"
            assert cat(path, t.name + "/1") == b"\xffbytes"
            continue
        assert not t.raw_data
        assert cat(path, t.name) == expected_bytes(t), t.name
        side = cat(path, t.name + ".json").decode()
        name = TensorProto.DataType.Name(t.data_type)
        assert "ONNX %s (data_type %d)" % (name, t.data_type) in side
        fixed = t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE,
                                TensorProto.COMPLEX64, TensorProto.COMPLEX128)
        assert ('"zero_copy": true' in side) == fixed, side
        if not fixed:
            assert "decoded to" in side and "read-only" in side


def write_file(mnt, name, data):
    with open(os.path.join(mnt, name), "r+b") as f:
        f.write(data)


@needs_fuse
def test_write_through_mount(tmp_path):
    _, path = mlp(tmp_path)
    typed = str(tmp_path / "typed.onnx")
    typed_model(typed)
    new_w = np.arange(32, dtype=np.float32).reshape(8, 4) / 7
    new_f = np.array([[9, 8], [7, 6]], np.float32)
    with mounted(path) as mnt:
        write_file(mnt, "0.weight", new_w.tobytes())
        assert open(os.path.join(mnt, "0.weight"), "rb").read() == new_w.tobytes()
    with mounted(typed) as mnt:
        write_file(mnt, "t_float", new_f.tobytes())        # packed float_data
        with pytest.raises(OSError):
            write_file(mnt, "t_int8", b"\x05")              # varints: read-only
    model = onnx.load(path)
    onnx.checker.check_model(model)
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert np.array_equal(w["0.weight"], new_w)
    model = onnx.load(typed)
    onnx.checker.check_model(model)
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
         if t.name in ("t_float", "t_int8")}
    assert np.array_equal(w["t_float"], new_f)
    assert w["t_int8"].ravel().tolist() == [-128, -1, 0, 127]
    r = run("set", typed, "t_int8", input=b"\x01\x02\x03\x04")
    assert r.returncode != 0 and b"not a writable tensor" in r.stderr


def ext_model(tmp_path, name, **kw):
    """The mlp saved with external data (@kw: onnx.save_model's); its
    initializers' bytes by name."""
    _, path = mlp(tmp_path)
    out = str(tmp_path / name)
    onnx.save_model(onnx.load(path), out, save_as_external_data=True, **kw)
    return out, {t.name: expected_bytes(t) for t in onnx.load(out).graph.initializer}


def loaded(path):
    """The initializers of @path as onnx reads them, external data loaded,
    after onnx.checker accepted the model."""
    model = onnx.load(path, load_external_data=True)
    onnx.checker.check_model(model)
    return {t.name: expected_bytes(t) for t in model.graph.initializer}


def files_of(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))
            if os.path.isfile(os.path.join(d, n))}


def pending_files(pending):
    """The data files a pending file names (ckpt/pending.h: version 2), and
    the file number of each record."""
    raw = open(pending, "rb").read()
    version, = struct.unpack_from("<I", raw, 8)
    count, = struct.unpack_from("<I", raw, 52)
    n_files, = struct.unpack_from("<I", raw, 60)
    at, names = 64, []
    if version == 2:
        for _ in range(n_files):
            length, = struct.unpack_from("<I", raw, at)
            names.append(raw[at + 48:at + 48 + length].decode())
            at += 48 + (length + 7) // 8 * 8
        at += 8
    files = []
    for _ in range(count):
        klen, file, _off, length = struct.unpack_from("<IIQQ", raw, at)
        files.append(file)
        at += 24 + (klen + 7) // 8 * 8 + length + 8
    assert raw[at:] == b"PTFSPEOF"
    return version, names, files


def test_external_inplace_crash_rolls_back(tmp_path):
    """An in-place commit of a data file killed half-way: read-only
    commands refuse the model, naming it for `ptfs recover`, which rolls
    the data file back from its journal."""
    path, want = ext_model(tmp_path, "one.onnx", location="one.data",
                           size_threshold=0)
    data = tmp_path / "one.data"
    before = data.read_bytes()
    r = subprocess.run([PTFS, "set", "-o", "commit=inplace", path, "0.weight"],
                       input=os.urandom(len(want["0.weight"])), capture_output=True,
                       env=dict(os.environ, PTFS_FAULT="pfsync:1:KILL"), timeout=60)
    assert r.returncode == -9, r.stderr.decode()
    assert os.path.exists(str(data) + ".ptfs-journal")
    assert data.read_bytes() != before              # patched, not fsynced
    r = run("ls", path)
    err = r.stderr.decode()
    assert r.returncode == 1 and "ptfs recover %s'" % path in err, err
    r = run("recover", path)
    assert r.returncode == 0, r.stderr.decode()
    assert data.read_bytes() == before
    assert not os.path.exists(str(data) + ".ptfs-journal")
    assert loaded(path) == want


def set_external(t, **kv):
    for e in t.external_data:
        if e.key in kv:
            e.value = str(kv[e.key])


def test_external_shared_bytes_stay_read_only(tmp_path):
    """Tensors whose bytes overlap in a data file, and every tensor of a
    data file another location also names, are read, never written."""
    path, want = ext_model(tmp_path, "one.onnx", location="w.bin", size_threshold=0)
    model = onnx.load(path, load_external_data=False)
    init = {t.name: t for t in model.graph.initializer}
    offset = {t.name: dict((e.key, e.value) for e in t.external_data)["offset"]
              for t in model.graph.initializer}
    set_external(init["0.bias"], offset=offset["0.weight"])    # inside 0.weight
    overlap = str(tmp_path / "overlap.onnx")
    onnx.save(model, overlap)
    set_external(init["0.bias"], offset=offset["0.bias"], location="./w.bin")
    alias = str(tmp_path / "alias.onnx")
    onnx.save(model, alias)
    for m, ro in ((overlap, {"0.weight", "0.bias"}), (alias, set(want))):
        data = open(tmp_path / "w.bin", "rb").read()
        for name in want:
            r = run("set", m, name, input=os.urandom(len(want[name])))
            if name in ro:
                assert r.returncode != 0 and b"not a writable tensor" in r.stderr, (m, name)
            else:
                assert r.returncode == 0, r.stderr.decode()
        if m == alias:
            assert open(tmp_path / "w.bin", "rb").read() == data
            assert cat(m, "0.bias") == data[int(offset["0.bias"]):][:len(want["0.bias"])]
            assert b"also another name's file" in run("info", m).stdout


@needs_fuse
def test_external_write_through_mount(tmp_path):
    """Writes through a mount to tensors in two data files (one file per
    tensor) and to one in the model itself: one commit replaces the three
    files, each by rename (a new inode), the data files' links kept."""
    d = tmp_path / "m"
    d.mkdir()
    path, want = ext_model(d, "per.onnx", all_tensors_to_one_file=False,
                           size_threshold=100)
    assert sorted(os.listdir(d)) == ["0.weight", "mlp.onnx", "per.onnx"]
    # a data file behind a symbolic link: its target is written
    real = tmp_path / "elsewhere"
    real.mkdir()
    os.rename(d / "0.weight", real / "0.weight")
    os.symlink(str(real / "0.weight"), str(d / "0.weight"))
    inodes = {n: os.stat(d / n).st_ino for n in ("0.weight", "per.onnx")}
    new = {n: os.urandom(len(want[n])) for n in ("0.weight", "0.bias")}
    with mounted(path) as mnt:
        for n, b in new.items():
            with open(os.path.join(mnt, n), "r+b") as f:
                f.write(b)
                f.flush()
                os.fsync(f.fileno())        # committed here
            assert open(os.path.join(mnt, n), "rb").read() == b
        assert os.path.islink(d / "0.weight")
        assert all(os.stat(d / n).st_ino != ino for n, ino in inodes.items())
        assert loaded(path) == dict(want, **new)
    got = loaded(path)
    assert got == dict(want, **new)
    assert not [n for n in os.listdir(d) + os.listdir(real) if "ptfs-" in n]
    # two data files in one commit
    path2, want2 = ext_model(tmp_path, "two.onnx", all_tensors_to_one_file=False,
                             size_threshold=0)
    new2 = {n: os.urandom(len(want2[n])) for n in ("0.weight", "2.bias")}
    with mounted(path2) as mnt:
        for n, b in new2.items():
            write_file(mnt, n, b)
    assert loaded(path2) == dict(want2, **new2)


@needs_fuse
def test_external_failed_commit_keeps_the_writes(tmp_path, mounts):
    """A fault between the two data files' copies (the second one's fsync):
    both files and the model untouched, the writes kept in the pending
    file, which names the data files; `ptfs recover` applies them."""
    path, want = ext_model(tmp_path, "two.onnx", all_tensors_to_one_file=False,
                           size_threshold=0)
    before = files_of(tmp_path)
    new = {n: os.urandom(len(want[n])) for n in ("0.weight", "2.bias")}
    m = mounts(tmp_path, path, env={"PTFS_FAULT": "fsync:2:EIO"})
    for n, b in new.items():
        write_file(m.mnt, n, b)
    rc, err = m.umount()
    pending = path + ".ptfs-pending"
    assert rc == 1 and pending in err and "fsync" in err, err
    assert files_of(tmp_path) == dict(before, **{os.path.basename(pending): open(pending, "rb").read()})
    version, names, files = pending_files(pending)
    assert version == 2 and sorted(names) == ["0.weight", "2.bias"], names
    assert sorted(names[f - 1] for f in files) == ["0.weight", "2.bias"]
    r = run("recover", path)
    assert r.returncode == 0 and b"applied" in r.stderr, r.stderr.decode()
    assert not os.path.exists(pending)
    assert loaded(path) == dict(want, **new)


@needs_fuse
def test_external_file_changed_meanwhile(tmp_path, mounts):
    """Another program writes the data file while a mount has writes for
    it: the commit is refused, the writes kept; recover refuses them
    naming the data file until --force."""
    path, want = ext_model(tmp_path, "one.onnx", location="one.data",
                           size_threshold=0)
    data = tmp_path / "one.data"
    new = os.urandom(len(want["2.weight"]))
    m = mounts(tmp_path, path)
    write_file(m.mnt, "2.weight", new)
    theirs = os.urandom(os.path.getsize(data))
    data.write_bytes(theirs)
    rc, err = m.umount()
    assert rc == 1 and ".ptfs-pending" in err, err
    assert data.read_bytes() == theirs
    r = run("recover", path)
    err = r.stderr.decode()
    assert r.returncode == 1 and "one.data changed since" in err, err
    assert data.read_bytes() == theirs
    r = run("recover", "--force", path)
    assert r.returncode == 0, r.stderr.decode()
    assert cat(path, "2.weight") == new


def test_export_stat_diff(tmp_path):
    m, path = mlp(tmp_path)
    pt = str(tmp_path / "mlp.pt")
    torch.save(m.state_dict(), pt)
    out = str(tmp_path / "mlp.safetensors")
    r = run("export", path, "--to", "safetensors", out)
    assert r.returncode == 0, r.stderr.decode()
    for t in onnx.load(path).graph.initializer:
        assert cat(out, t.name) == expected_bytes(t)
    r = run("stat", path)
    assert r.returncode == 0 and b"0.weight  float32 [8, 4]" in r.stdout, r.stderr
    r = run("diff", path, pt)
    assert r.returncode == 0, r.stdout + r.stderr
    assert b"4 tensors, 4 same" in r.stdout


# ---- hostile models, written by hand ----

def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    return varint(num << 3 | 2) + varint(len(value)) + value


def model_of(*tensors, graph_extra=b""):
    graph = b"".join(field(5, t) for t in tensors) + graph_extra + field(2, b"g")
    return field(1, 8) + field(2, b"hostile") + field(7, graph)


def tensor(name, dims, dtype=1, **kw):
    t = b"".join(field(1, d) for d in dims) + field(2, dtype) + field(8, name)
    if "raw" in kw:
        t += field(9, kw["raw"])
    if "location" in kw:
        t += field(13, field(1, b"location") + field(2, kw["location"]))
        t += field(14, 1)
    return t


def deep(levels):
    g = b""
    for _ in range(levels):
        g = field(1, field(4, b"Loop") + field(5, field(1, b"body") + field(6, g)))
    return field(1, 8) + field(7, g)


HOSTILE = {
    "past_end": (lambda: model_of(tensor(b"w", [4], raw=b"\0" * 16))[:-12],
                 "past the end"),
    "varint11": (lambda: field(1, 8) + varint(7 << 3 | 2) + b"\xff" * 10 + b"\x01",
                 "longer than 10 bytes"),
    "deep": (lambda: deep(10000), "nest more than"),
    "overflow": (lambda: model_of(tensor(b"w", [2**40, 2**40, 2**40], raw=b"\0" * 4)),
                 "product of its dims overflows"),
    "raw_size": (lambda: model_of(tensor(b"w", [4], raw=b"\0" * 15)),
                 "raw_data holds 15 bytes"),
    "escape": (lambda: model_of(tensor(b"w", [1], location=b"../../etc/passwd")),
               "leaves the model's directory"),
    "absolute": (lambda: model_of(tensor(b"w", [1], location=b"/etc/passwd")),
                 "absolute path"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile(tmp_path, kind):
    make, what = HOSTILE[kind]
    path = str(tmp_path / (kind + ".onnx"))
    with open(path, "wb") as f:
        f.write(make())
    for cmd in (["ls"], ["cat"], ["info"]):
        args = cmd + [path] + (["w"] if cmd == ["cat"] else [])
        r = run(*args)
        err = r.stderr.decode()
        assert r.returncode == 1, (r.returncode, err)
        assert err.count("\n") == 1 and err.startswith("ptfs"), err
        assert path in err and what in err, err


def test_sparse_and_subgraphs(tmp_path):
    """A sparse initializer as values/indices; an If node's branches'
    initializers under NODE/ATTRIBUTE; a tensor attribute of another node
    under /.ptfs/constants/NODE/ATTRIBUTE."""
    path = str(tmp_path / "sub.onnx")
    vals = helper.make_tensor("sp", TensorProto.FLOAT, [2], [1.5, -3])
    idx = helper.make_tensor("sp_idx", TensorProto.INT64, [2], [1, 7])
    sparse = helper.make_sparse_tensor(vals, idx, [3, 4])
    inner = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "inner.w")
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    then_g = helper.make_graph([helper.make_node("Identity", ["inner.w"], ["y"])],
                               "then", [], [out], initializer=[inner])
    else_w = numpy_helper.from_array(np.ones((2, 3), np.float32), "else.w")
    else_g = helper.make_graph([helper.make_node("Identity", ["else.w"], ["y"])],
                               "else", [], [out], initializer=[else_w])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    fill = helper.make_tensor("value", TensorProto.INT32, [1], [5])
    nodes = [helper.make_node("If", ["c"], ["y"], name="branch",
                              then_branch=then_g, else_branch=else_g),
             helper.make_node("ConstantOfShape", ["s"], ["z"], name="fill", value=fill)]
    graph = helper.make_graph(nodes, "g", [cond], [out], sparse_initializer=[sparse])
    onnx.save(helper.make_model(graph), path)
    assert cat(path, "sp/values") == np.array([1.5, -3], "<f4").tobytes()
    assert cat(path, "sp/indices") == np.array([1, 7], "<i8").tobytes()
    assert cat(path, "branch/then_branch/inner.w") == inner.raw_data
    assert cat(path, "branch/else_branch/else.w") == else_w.raw_data
    assert cat(path, ".ptfs/constants/fill/value") == np.array([5], "<i4").tobytes()
    graph_txt = cat(path, ".ptfs/graph.txt").decode()
    assert "If branch: (c) -> (y)" in graph_txt and "  then_branch: graph" in graph_txt


@needs_curl
def test_remote_external_data(tmp_path):
    """Over http, a model whose weights are external data lists from the
    model alone (at most 3 requests, none for the data files); a tensor's
    file is fetched when the tensor is read."""
    import shutil
    import tempfile

    import remote_servers as rs
    d = tempfile.mkdtemp(prefix="ptfs-served-")     # nginx's worker reads it
    os.chmod(d, 0o755)
    try:
        _, path = mlp(tmp_path)
        onnx.save_model(onnx.load(path), os.path.join(d, "one.onnx"),
                        save_as_external_data=True, location="one.data",
                        size_threshold=0)
        onnx.save_model(onnx.load(path), os.path.join(d, "per.onnx"),
                        save_as_external_data=True, all_tensors_to_one_file=False,
                        size_threshold=0)
        want = {t.name: expected_bytes(t) for t in onnx.load(path).graph.initializer}
        with rs.Nginx(d) as n:
            for name in ("one.onnx", "per.onnx"):
                cache = ["-o", "cache_dir=" + str(tmp_path / ("cache-" + name))]
                m = n.mark()
                r = run("ls", *cache, n.url(name))
                assert r.returncode == 0, r.stderr.decode()
                reqs = n.since(m)
                assert 1 <= len(reqs) <= 3, reqs
                assert all(e["path"] == "/" + name for e in reqs), reqs
                for key, raw in want.items():
                    c = run("cat", *cache, n.url(name), key)
                    assert c.returncode == 0 and c.stdout == raw, c.stderr.decode()
            os.unlink(os.path.join(d, "one.data"))
            r = run("cat", "-o", "cache_dir=" + str(tmp_path / "cache-gone"),
                    n.url("one.onnx"), "0.weight")
            err = r.stderr.decode()
            assert r.returncode == 1 and err.count("\n") == 1, err
            assert "one.data" in err and "404" in err, err
    finally:
        shutil.rmtree(d, ignore_errors=True)
