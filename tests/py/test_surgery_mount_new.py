# SPDX-License-Identifier: MIT
"""New tensors, new shapes and new dtypes in a writable mount (README
"Surgery", docs/LAYOUT.md "New tensors, new shapes").

A new tensor is a file made in a dict: NAME.json written first declares
its dtype and shape and NAME then takes exactly that many bytes, or NAME
alone is uint8 of what is written.  NAME.json written for an existing
tensor declares another shape (the bytes must then be written whole) or,
of the same byte size, reinterprets the stored bytes.  Every checkpoint
here is made by the test with torch.save and compared with torch.load
after the unmount.
"""
import errno
import io
import json
import os
import shutil
import struct
import subprocess
import time
import warnings

import numpy as np
import pytest
import torch

from conftest import needs_fuse
from test_surgery import load
from test_write_model import mounts  # noqa: F401 (fixture)

pytestmark = needs_fuse

# every dtype ptfs writes as a tensor (core/decode/dtype.c, packed and
# quantized ones aside); the ones this torch has are compared with torch.load
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32",
          "int16", "int8", "uint8", "bool", "complex64", "complex128",
          "complex32", "float8_e5m2", "float8_e4m3fn", "uint16", "uint32",
          "uint64"]
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2,
            "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1,
            "bool": 1, "complex64": 8, "complex128": 16, "complex32": 4,
            "float8_e5m2": 1, "float8_e4m3fn": 1, "uint16": 2, "uint32": 4,
            "uint64": 8}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.fc = torch.nn.Linear(4, 3)


def model_checkpoint(path):
    """A state dict (an OrderedDict with _metadata), a Parameter, an int."""
    torch.manual_seed(0)
    obj = {"model": Net().state_dict(),
           "param": torch.nn.Parameter(torch.randn(4)), "epoch": 3}
    torch.save(obj, path)
    return path


@pytest.fixture
def ck(tmp_path):
    return model_checkpoint(str(tmp_path / "ck.pt"))


def write_file(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    """open, write, close: the close's error is the edit's."""
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def log_says(log, text, seconds=10):
    """Has @text reached @log within @seconds?"""
    deadline = time.monotonic() + seconds
    while True:
        with open(log) as f:
            if text in f.read():
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def spec(dtype, shape):
    return json.dumps({"dtype": dtype, "shape": list(shape)}).encode()


def raw(t):
    """The bytes of tensor @t in C order."""
    t = t.contiguous()
    return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""


def torch_loads(name):
    """Can this torch save and load a tensor of dtype @name?"""
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        return False
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # "ComplexHalf ... experimental"
            torch.save(torch.zeros(2, dtype=dt), buf)
        buf.seek(0)
        return torch.load(buf).dtype == dt
    except Exception:       # noqa: BLE001 (any refusal of this torch)
        return False


def add_all(m, dtypes):
    """NAME.json then NAME for each dtype: listed at once with the right
    sizes, read back before the commit.  The bytes written, by dtype."""
    rng = np.random.default_rng(1)
    made = {}
    for dt in dtypes:
        n = 6 * ITEMSIZE[dt]
        data = bytes(rng.integers(0, 2 if dt == "bool" else 120, n, dtype=np.uint8))
        name = "model/new_" + dt
        write_file(m.path(name + ".json"), spec(dt, (2, 3)))
        assert os.path.getsize(m.path(name)) == n
        with open(m.path(name + ".json")) as f:
            meta = json.load(f)
        assert meta["dtype"] == dt and meta["shape"] == [2, 3]
        write_file(m.path(name), data)
        assert os.path.getsize(m.path(name)) == n
        with open(m.path(name), "rb") as f:
            assert f.read() == data
        made[dt] = data
    names = os.listdir(m.path("model"))
    for dt in dtypes:
        assert "new_" + dt in names and "new_%s.json" % dt in names
    return made


def test_new_tensor_of_every_dtype(tmp_path, ck, mounts):
    """The dtypes this torch loads, compared with torch.load."""
    dtypes = [dt for dt in DTYPES if torch_loads(dt)]
    assert len(dtypes) >= 11
    before = load(ck)
    m = mounts(tmp_path, ck)
    made = add_all(m, dtypes)
    rc, err = m.umount()
    assert rc == 0, err
    after = load(ck)
    assert after["model"]._metadata == before["model"]._metadata
    assert list(after["model"].keys()) == \
        list(before["model"].keys()) + ["new_" + dt for dt in dtypes]
    for dt, data in made.items():
        t = after["model"]["new_" + dt]
        assert type(t) is torch.Tensor        # as `ptfs add`: a plain tensor
        assert t.dtype == getattr(torch, dt) and tuple(t.shape) == (2, 3)
        assert raw(t) == data, dt


def test_new_tensor_of_every_dtype_as_ptfs_reads_it(tmp_path, ck, mounts):
    """Every dtype, this torch's or not, as a new mount of the file shows."""
    m = mounts(tmp_path, ck)
    made = add_all(m, DTYPES)
    rc, err = m.umount()
    assert rc == 0, err
    m = mounts(tmp_path, ck, "-o", "ro")
    for dt, data in made.items():
        with open(m.path("model/new_%s.json" % dt)) as f:
            meta = json.load(f)
        assert meta["dtype"] == dt and meta["shape"] == [2, 3]
        with open(m.path("model/new_" + dt), "rb") as f:
            assert f.read() == data
    assert m.umount()[0] == 0


def test_cp_of_a_json_and_of_bytes(tmp_path, ck, mounts):
    """cp a.json b.json (ptfs's own NAME.json, every key of it) and then
    cp of the bytes; dd writes in pieces."""
    m = mounts(tmp_path, ck)
    src = tmp_path / "bias.bin"
    want = torch.arange(3, dtype=torch.float32) + 0.5
    src.write_bytes(raw(want))
    shutil.copyfile(m.path("model/fc.bias.json"), m.path("model/fc2.bias.json"))
    assert subprocess.run(["cp", str(src), m.path("model/fc2.bias")]).returncode == 0
    write_file(m.path("model/piece.json"), spec("int16", (4,)))
    for i in range(4):
        r = subprocess.run(["dd", "if=/dev/stdin", "of=" + m.path("model/piece"),
                            "bs=2", "count=1", "seek=%d" % i, "conv=notrunc"],
                           input=struct.pack("<h", 10 * i), capture_output=True)
        assert r.returncode == 0, r.stderr
    with open(m.path("model/piece"), "rb") as f:
        assert f.read() == struct.pack("<4h", 0, 10, 20, 30)
    rc, err = m.umount()
    assert rc == 0, err
    after = load(ck)
    assert torch.equal(after["model"]["fc2.bias"], want)
    assert torch.equal(after["model"]["piece"], torch.tensor([0, 10, 20, 30], dtype=torch.int16))
    assert list(after["model"].keys())[-2:] == ["fc2.bias", "piece"]


def test_file_without_json_is_uint8_then_reinterpreted(tmp_path, ck, mounts):
    """cp x.bin NEW gives uint8 [n]; a NAME.json of the same byte size
    then takes those bytes as another dtype and shape."""
    m = mounts(tmp_path, ck)
    want = torch.randn(5, 4)
    src = tmp_path / "w.bin"
    src.write_bytes(raw(want))
    assert subprocess.run(["cp", str(src), m.path("model/w")]).returncode == 0
    with open(m.path("model/w.json")) as f:
        meta = json.load(f)
    assert meta["dtype"] == "uint8" and meta["shape"] == [80]
    write_file(m.path("model/w.json"), spec("float32", (5, 4)), os.O_WRONLY | os.O_TRUNC)
    with open(m.path("model/w"), "rb") as f:
        assert f.read() == raw(want)
    subprocess.run(["touch", m.path("model/empty")], check=True)
    rc, err = m.umount()
    assert rc == 0, err
    after = load(ck)
    assert torch.equal(after["model"]["w"], want)
    assert after["model"]["empty"].dtype == torch.uint8
    assert after["model"]["empty"].shape == (0,)


def test_resize_embedding_with_cp(tmp_path, ck, mounts):
    """A new shape in emb.weight.json, then cp of the new bytes; a
    Parameter stays a Parameter with its requires_grad."""
    m = mounts(tmp_path, ck)
    ino = os.stat(m.path("model/fc.bias")).st_ino
    bigger = torch.randn(12, 4)
    src = tmp_path / "emb.bin"
    src.write_bytes(raw(bigger))
    write_file(m.path("model/emb.weight.json"), spec("float32", (12, 4)), os.O_WRONLY | os.O_TRUNC)
    assert os.path.getsize(m.path("model/emb.weight")) == 12 * 4 * 4
    assert subprocess.run(["cp", str(src), m.path("model/emb.weight")]).returncode == 0
    with open(m.path("model/emb.weight"), "rb") as f:
        assert f.read() == raw(bigger)
    p = torch.randn(2, 3)
    write_file(m.path("param.json"), spec("float32", (2, 3)), os.O_WRONLY | os.O_TRUNC)
    write_file(m.path("param"), raw(p), os.O_WRONLY | os.O_TRUNC)
    assert os.stat(m.path("model/fc.bias")).st_ino == ino
    rc, err = m.umount()
    assert rc == 0, err
    after = load(ck)
    assert torch.equal(after["model"]["emb.weight"], bigger)
    assert list(after["model"].keys()) == ["emb.weight", "fc.weight", "fc.bias"]
    assert type(after["param"]) is torch.nn.Parameter
    assert after["param"].requires_grad and torch.equal(after["param"].data, p)


def test_dtype_change_of_the_same_size_reinterprets(tmp_path, ck, mounts):
    """float32 [10, 4] as int32 [40] and bfloat16 as [3, 2]: the same
    bytes (a view, as `ptfs set` never converts values)."""
    before = load(ck)
    m = mounts(tmp_path, ck)
    write_file(m.path("model/emb.weight.json"), spec("int32", (40,)), os.O_WRONLY | os.O_TRUNC)
    write_file(m.path("model/fc.bias.json"), spec("bfloat16", (3, 2)), os.O_WRONLY | os.O_TRUNC)
    with open(m.path("model/emb.weight.json")) as f:
        meta = json.load(f)
    assert meta["dtype"] == "int32" and meta["shape"] == [40]
    with open(m.path("model/emb.weight"), "rb") as f:
        assert f.read() == raw(before["model"]["emb.weight"])
    rc, err = m.umount()
    assert rc == 0, err
    after = load(ck)
    assert torch.equal(after["model"]["emb.weight"],
                       before["model"]["emb.weight"].view(torch.int32).reshape(40))
    assert torch.equal(after["model"]["fc.bias"],
                       before["model"]["fc.bias"].view(torch.bfloat16).reshape(3, 2))


def test_incomplete_tensor_fails_and_reaches_no_file(tmp_path, ck, mounts):
    """A close at a size other than dtype x shape fails with EINVAL (one
    log line); fsync refuses while a declared tensor is not written whole;
    the unmount drops it and keeps the other edits."""
    log = str(tmp_path / "ptfs.log")
    before = load(ck)
    m = mounts(tmp_path, ck, "-o", "log=" + log)
    write_file(m.path("model/half.json"), spec("float32", (10,)))
    with pytest.raises(OSError) as e:
        write_file(m.path("model/half"), b"\0" * 12)
    assert e.value.errno == errno.EINVAL
    # close() returns at the flush; the kernel sends the release after it,
    # and the drop is the last release's: the next open waits for it
    assert log_says(log, "'half': closed at 12 bytes but its NAME.json gives 40")
    with pytest.raises(OSError) as e:
        write_file(m.path("model/half"), b"\0" * 44)
    assert e.value.errno == errno.EFBIG
    write_file(m.path("model/emb.weight.json"), spec("float32", (11, 4)), os.O_WRONLY | os.O_TRUNC)
    fd = os.open(m.path("epoch"), os.O_RDONLY)
    try:
        with pytest.raises(OSError) as e:
            os.fsync(fd)
        assert e.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    os.mkdir(m.path("extra"))
    rc, err = m.umount()
    assert rc == 0, err
    with open(log) as f:
        text = f.read()
    assert "'half': closed at 12 bytes but its NAME.json gives 40" in text
    assert "'half': declared by NAME.json but never written whole: not added" in text
    assert "'emb.weight': declared by NAME.json but never written whole: it keeps its old value" in text
    after = load(ck)
    assert "half" not in after["model"] and after["extra"] == {}
    assert torch.equal(after["model"]["emb.weight"], before["model"]["emb.weight"])


def test_wrong_json_fails_with_one_line(tmp_path, ck, mounts):
    log = str(tmp_path / "ptfs.log")
    m = mounts(tmp_path, ck, "-o", "log=" + log)
    bad = [(b'{"dtype": "float33", "shape": [2]}', "not a torch dtype"),
           (b'{"dtype": "float32"}', '"dtype" and "shape" are needed'),
           (b'{"dtype": "float32", "shape": [2, 3], "stride": [1, 2]}', "C order"),
           (b'{"dtype": "float32", "shape": [2,', "the JSON: at byte")]
    for text, why in bad:
        with open(log) as f:
            seen = len(f.read().splitlines())
        with pytest.raises(OSError) as e:
            write_file(m.path("model/fc.bias.json"), text, os.O_WRONLY | os.O_TRUNC)
        assert e.value.errno == errno.EINVAL
        with open(log) as f:
            new = f.read().splitlines()[seen:]
        assert len(new) == 1 and why in new[0] and "fc.bias.json" in new[0], new
    with open(m.path("model/fc.bias.json")) as f:
        assert json.load(f)["shape"] == [3]
    rc, err = m.umount()
    assert rc == 0, err


def test_safetensors(tmp_path, mounts):
    ck = str(tmp_path / "m.safetensors")
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(ck, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + struct.pack("<2f", 1.5, 2.5))
    m = mounts(tmp_path, ck)
    write_file(m.path("b.json"), spec("int16", (3,)))
    write_file(m.path("b"), struct.pack("<3h", 1, 2, 3), os.O_WRONLY | os.O_TRUNC)
    write_file(m.path("a.json"), spec("float32", (3,)), os.O_WRONLY | os.O_TRUNC)
    write_file(m.path("a"), struct.pack("<3f", 1, 2, 3), os.O_WRONLY | os.O_TRUNC)
    rc, err = m.umount()
    assert rc == 0, err
    with open(ck, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    assert [k for k in hdr if k != "__metadata__"] == ["a", "b"]
    a, b = hdr["a"], hdr["b"]
    assert a["dtype"] == "F32" and a["shape"] == [3]
    assert b["dtype"] == "I16" and b["shape"] == [3]
    assert data[a["data_offsets"][0]:a["data_offsets"][1]] == struct.pack("<3f", 1, 2, 3)
    assert data[b["data_offsets"][0]:b["data_offsets"][1]] == struct.pack("<3h", 1, 2, 3)


def test_tools_write_new_tensors(tmp_path, ck, mounts):
    """numpy.tofile, dd without conv=notrunc (ftruncate, then writes), a
    declared tensor removed again, and a new tensor moved before the
    commit."""
    log = str(tmp_path / "ptfs.log")
    m = mounts(tmp_path, ck, "-o", "log=" + log)
    a = np.arange(6, dtype=np.float64)
    write_file(m.path("model/a.json"), spec("float64", (6,)))
    a.tofile(m.path("model/a"))
    b = tmp_path / "b.bin"
    b.write_bytes(struct.pack("<4i", 1, 2, 3, 4))
    write_file(m.path("model/b.json"), spec("int32", (2, 2)))
    r = subprocess.run(["dd", "if=%s" % b, "of=" + m.path("model/b"), "bs=4"],
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    write_file(m.path("model/gone.json"), spec("float32", (100,)))
    os.unlink(m.path("model/gone"))
    write_file(m.path("model/emb.weight.json"), spec("float32", (99,)), os.O_WRONLY | os.O_TRUNC)
    os.unlink(m.path("model/emb.weight"))
    os.rename(m.path("model/a"), m.path("a_moved"))
    assert sorted(os.listdir(m.path("model"))) == ["b", "b.json", "fc.bias", "fc.bias.json",
                                                   "fc.weight", "fc.weight.json"]
    rc, err = m.umount()
    assert rc == 0, err
    after = load(ck)
    assert torch.equal(after["a_moved"], torch.from_numpy(a))
    assert torch.equal(after["model"]["b"], torch.tensor([[1, 2], [3, 4]], dtype=torch.int32))
    assert list(after["model"].keys()) == ["fc.weight", "fc.bias", "b"]
    with open(log) as f:
        assert "never written whole" not in f.read()


def test_json_of_a_tensor_open_for_writing_is_busy(tmp_path, ck, mounts):
    before = load(ck)
    m = mounts(tmp_path, ck)
    with open(m.path("model/fc.bias"), "r+b"):
        with pytest.raises(OSError) as e:
            write_file(m.path("model/fc.bias.json"), spec("float32", (4,)), os.O_WRONLY | os.O_TRUNC)
        assert e.value.errno == errno.EBUSY
    assert os.path.getsize(m.path("model/fc.bias")) == 12
    rc, err = m.umount()
    assert rc == 0, err
    assert torch.equal(load(ck)["model"]["fc.bias"], before["model"]["fc.bias"])
