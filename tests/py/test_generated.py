# SPDX-License-Identifier: MIT
"""Checkpoints saved by torch during the test: the mounted tree and `ptfs
cat` must equal what torch.load returns, file by file."""
import json
import os
import re
import stat

import numpy as np
import pytest
import torch

import make_ckpts
import oracle
from conftest import PTFS, mounted, needs_fuse, run

# weights_only=True cannot load these (they hold numpy arrays, Namespace,
# modules); they are compared by hand below
LOADABLE = ["every_dtype", "views", "tied", "optimizer", "nested", "odd_keys",
            "single_tensor", "single_int", "quantized"]


def make(ckdir, name, protocol=2):
    path = os.path.join(ckdir, "%s_p%d.pt" % (name, protocol))
    if not os.path.exists(path):
        make_ckpts.save(make_ckpts.MAKERS[name](), path, protocol=protocol)
    return path


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("name", LOADABLE)
def test_cli_matches_torch(ckdir, name, protocol):
    path = make(ckdir, name, protocol)
    obj = torch.load(path)
    assert oracle.compare_cli(PTFS, path, obj, stem(path)) > 0


@needs_fuse
@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("name", LOADABLE)
def test_mount_matches_torch(ckdir, name, protocol):
    path = make(ckdir, name, protocol)
    obj = torch.load(path)
    with mounted(path) as mnt:
        assert oracle.compare_mount(mnt, obj, stem(path)) > 0


@needs_fuse
def test_numpy_fromfile_and_memmap(ckdir):
    path = make(ckdir, "every_dtype")
    obj = torch.load(path)
    with mounted(path) as mnt:
        for key, t in obj.items():
            if t.dtype == torch.bfloat16:
                continue
            dt = t.numpy().dtype
            f = os.path.join(mnt, key)
            a = np.fromfile(f, dtype=dt).reshape(t.shape)
            assert np.array_equal(a, t.numpy(), equal_nan=True), key
            if t.numel():
                m = np.memmap(f, dtype=dt, mode="r", shape=tuple(t.shape))
                assert np.array_equal(np.asarray(m), t.numpy(), equal_nan=True), key
                del m


def test_odd_names(ckdir):
    path = make(ckdir, "odd_keys")
    names = [re.match(r"^\S +\d+  (.*?)(  \S+ \[.*)?$", line).group(1)
             for line in run("ls", "-a", path).stdout.decode("utf-8", "surrogateescape").splitlines()]
    names = [n for n in names if not n.startswith(".ptfs")]
    assert "a%2Fb" in names and "100%25" in names and "%" in names
    assert "%2E" in names and "%2E%2E" in names and "nul%00byte" in names
    assert "1" in names and "1~2" in names
    assert "w" in names and "w.json" in names and "w.json~2" in names
    assert "x.json" in names and "x~2" in names and "x~2.json" in names
    assert "(1, 'a')" in names and "b'raw'" in names and "None" in names
    assert "False" in names and "2.5" in names and "%252F" in names
    longs = [n for n in names if len(n.encode("utf-8", "surrogateescape")) > 200]
    assert len(longs) == 4 and all(len(n.encode("utf-8", "surrogateescape")) <= 240
                                   for n in longs)
    assert "a%2F..%2F.." in names and "ctl\x01\x7f\x1b" in names


def test_scalars(ckdir):
    path = make(ckdir, "nested")
    def cat(p):
        r = run("cat", path, p)
        assert r.returncode == 0, r.stderr
        return r.stdout
    assert cat("a/0") == b"1\n"
    assert cat("a/6") == b"-1180591620717411303424\n"
    assert cat("a/7") == b"1000000000000000000000000000000\n"
    floats = [cat("floats/%d" % i) for i in range(12)]
    assert floats == [b"0.1\n", b"2.0\n", b"1e-05\n", b"1e+16\n", b"1000000000000000.0\n",
                      b"-0.0\n", b"inf\n", b"-inf\n", b"nan\n", b"1.5e+300\n",
                      b"123456789.125\n", b"5e-324\n"]
    assert cat("dev") == b"cuda:1\n" and cat("cpu") == b"cpu\n"
    assert cat("dtype") == b"torch.float16\n"
    assert cat("bytes") == b"\x00\x01\xffab"
    assert cat("size/1") == b"3\n"
    assert cat("text") == "héllo\nwörld\n".encode()


def test_root_scalar_and_tensor(ckdir):
    p = make(ckdir, "single_tensor")
    out = run("ls", p).stdout.decode()
    assert "single_tensor_p2" in out and "int32 [3, 4]" in out
    assert run("cat", p, "single_tensor_p2").stdout == np.arange(12, dtype=np.int32).tobytes()
    p = make(ckdir, "single_int")
    assert run("cat", p, "single_int_p2").stdout == b"42\n"


def test_module_object(ckdir):
    """A pickled nn.Module is an object: its __dict__ items, tensors inside."""
    path = make(ckdir, "module")
    m = torch.load(path)
    w = run("cat", path, "_modules/0/_parameters/weight")
    assert w.returncode == 0, w.stderr
    assert w.stdout == m[0].weight.detach().numpy().tobytes()
    assert run("cat", path, "training").stdout == b"True\n"
    rv = run("cat", path, "_modules/1/_buffers/running_var").stdout
    assert rv == m[1].running_var.numpy().tobytes()


def test_namespace_and_numpy(ckdir):
    path = make(ckdir, "namespace")
    assert run("cat", path, "args/lr").stdout == b"0.1\n"
    assert run("cat", path, "args/layers/1").stdout == b"2\n"
    path = make(ckdir, "numpy_arrays")
    obj = torch.load(path, weights_only=False)
    for k, a in obj.items():
        if k == "t":
            continue
        r = run("cat", path, k)
        assert r.returncode == 0, r.stderr
        if k == "big_endian":  # served in the byte order the file stores
            a = a.astype(a.dtype.newbyteorder(">"))
        assert r.stdout == np.ascontiguousarray(a).tobytes(), k
        meta = json.loads(run("cat", path, k + ".json").stdout)
        assert meta["dtype"] == a.dtype.name and meta["shape"] == list(a.shape)
    assert json.loads(run("cat", path, "big_endian.json").stdout)["byteorder"] == "big"


def test_multiplying_references(ckdir):
    path = os.path.join(ckdir, "mult.pt")
    make_ckpts.save(make_ckpts.multiplying(40), path)
    r = run("ls", "--max", "50", path)
    assert r.returncode == 0 and b"stopped after 50" in r.stdout
    deep = "root/" + "1/" * 40 + "0"
    assert run("cat", path, deep).stdout == np.ones(1, np.float32).tobytes()


def test_cycle_is_symlink(ckdir, tmp_path):
    path = os.path.join(ckdir, "cycle.pt")
    make_ckpts.save(make_ckpts.cycle(), path)
    out = run("ls", path).stdout.decode()
    assert "l " in out
    if os.path.exists("/dev/fuse"):
        with mounted(path) as mnt:
            assert os.readlink(os.path.join(mnt, "self")) == "."
            assert os.readlink(os.path.join(mnt, "list", "0")) == "."
            assert os.path.samefile(os.path.join(mnt, "list", "0"), os.path.join(mnt, "list"))


def test_bad_input_one_line(tmp_path):
    cases = {"missing.pt": None, "empty.pt": b"", "garbage.pt": b"\x07" * 7,
             "png.pt": b"\x89PNG\r\n\x1a\n" + b"\0" * 32,
             "truncated.pt": None}
    good = os.path.join(tmp_path, "good.pt")
    torch.save({"w": torch.ones(1000)}, good)
    with open(good, "rb") as f:
        data = f.read()
    for name, content in cases.items():
        p = os.path.join(tmp_path, name)
        if name == "truncated.pt":
            content = data[: len(data) // 2]
        if content is not None:
            with open(p, "wb") as f:
                f.write(content)
        for args in (["info", p], ["ls", p], ["cat", p, "w"]):
            r = run(*args)
            assert r.returncode == 1, (name, r)
            lines = r.stderr.decode().strip().splitlines()
            assert len(lines) == 1 and p in lines[0], (name, lines)


def test_usage_errors():
    assert run().returncode == 2
    assert run("only-one-arg.pt").returncode == 2
    assert run("--bogus", "a", "b").returncode == 2
    assert run("--help").returncode == 0 and b"usage" in run("--help").stdout
    assert run("--version").stdout.startswith(b"ptfs ")


def test_info(ckdir):
    path = make(ckdir, "optimizer")
    out = run("info", path).stdout.decode()
    assert "torch.save zip" in out and "tensors:" in out and "warnings: none" in out


def test_nested_option(tmp_path):
    """-o nested / --nested: dotted keys as directories; a level a value
    already took moves to NAME~2 (rule 5); empty parts are %."""
    p = str(tmp_path / "n.pt")
    torch.save({"a": 1, "a.b": torch.ones(2), "x.y.z": 2, "x.y": 5,
                ".lead": 3, "trail.": 4, "enc.w": torch.zeros(3)}, p)
    def cat(path):
        r = run("cat", "--nested", p, path)
        assert r.returncode == 0, r.stderr
        return r.stdout
    assert cat("a") == b"1\n"
    assert cat("a~2/b") == np.ones(2, np.float32).tobytes()
    assert json.loads(cat("a~2/b.json"))["shape"] == [2]
    assert cat("x/y/z") == b"2\n" and cat("x/y~2") == b"5\n"
    assert cat("%/lead") == b"3\n" and cat("trail/%") == b"4\n"
    # without the option the keys stay single names
    assert run("cat", p, "x.y.z").stdout == b"2\n"
    if os.path.exists("/dev/fuse"):
        with mounted(p, "-o", "nested") as mnt:
            assert os.listdir(mnt) == [".ptfs", "a", "a~2", "x", "%", "trail", "enc"]
            assert os.listdir(os.path.join(mnt, "enc")) == ["w", "w.json"]
            assert np.fromfile(os.path.join(mnt, "enc", "w"), np.float32).tolist() == [0, 0, 0]
            with open(os.path.join(mnt, "enc", "w"), "r+b") as f:
                f.write(np.full(3, 7, np.float32).tobytes())
        assert torch.equal(torch.load(p)["enc.w"], torch.full((3,), 7.0))


def test_cli_limit_options(tmp_path):
    """The mount's -o limits work for the CLI too: a tree deeper than
    max_depth stops there with EFBIG; the default reaches the bottom."""
    x = [7]
    for _ in range(20):
        x = [x]
    p = str(tmp_path / "deep.pt")
    torch.save({"x": x}, p)
    deep = "x/" + "0/" * 20 + "0"
    assert run("cat", p, deep).stdout == b"7\n"
    r = run("cat", "-o", "max_depth=10", p, deep)
    assert r.returncode == 1 and b"File too large" in r.stderr
    assert run("info", "-o", "nonsense", p).returncode == 2
