# SPDX-License-Identifier: MIT
"""Checkpoint surgery (README "Surgery"): `ptfs rm`, `mv`, `mkdir`, `add`,
`rename`, and `set` of scalars and of new shapes or dtypes.

Every edit is checked against the same edit made in Python on the object
torch.load returns (full torch.load: these checkpoints are made here), and
the new data.pkl against the old one: it names no global the original did
not, except the rebuild functions of new tensors.
"""
import argparse
import collections
import hashlib
import io
import json
import os
import pickletools
import re
import struct
import subprocess
import zipfile

import pytest
import torch

from conftest import FIXTURES, PTFS, fixture_corpus
from test_dcp import dcp113  # noqa: F401  (fixture)
from test_commits import reflink_fs  # noqa: F401  (fixture)

torch.manual_seed(0)


def ptfs(*args, input=None, env=None):
    return subprocess.run([PTFS, *args], input=input, capture_output=True,
                          timeout=300, env=env)


def ok(*args, input=None):
    r = ptfs(*args, input=input)
    assert r.returncode == 0, r.stderr.decode()
    return r


def refused(*args, input=None, env=None):
    """Exit 1 with one line naming the checkpoint, the file unchanged."""
    ck = next(a for a in args[1:] if not a.startswith("-"))
    before = sha(ck)
    r = ptfs(*args, input=input, env=env)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("ptfs: "), err
    assert sha(ck) == before
    return err


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load(path):
    return torch.load(path, map_location="cpu")


def same(a, b):
    """Deep equality of loaded objects, tensors by dtype, shape, values."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                and bool((a == b).all() if a.numel() else True)
                and a.requires_grad == b.requires_grad)
    if isinstance(a, dict):
        return (type(a) is type(b) and list(a.keys()) == list(b.keys())
                and all(same(a[k], b[k]) for k in a)
                and same(getattr(a, "_metadata", None), getattr(b, "_metadata", None)))
    if isinstance(a, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    if isinstance(a, argparse.Namespace):
        return type(b) is argparse.Namespace and same(vars(a), vars(b))
    return type(a) is type(b) and a == b


def globals_of(path):
    """The globals data.pkl names ("module name")."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        data = z.read(name)
    out = set()
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            out.add(arg)
    return out


NEW_TENSOR_GLOBALS = {"torch._utils _rebuild_tensor_v2", "collections OrderedDict"}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.fc = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.head = torch.nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight       # tied


def training_checkpoint(path):
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    out = net.head(net.bn(net.fc(net.emb(torch.arange(4))))).sum()
    out.backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, 3)
    obj = {"model": net.state_dict(), "optimizer": opt.state_dict(),
           "scheduler": sched.state_dict(), "epoch": 3,
           "args": argparse.Namespace(lr=0.1, name="run-1", layers=[1, 2])}
    torch.save(obj, path)
    return path


@pytest.fixture
def train(tmp_path):
    return training_checkpoint(str(tmp_path / "train.pt"))


def test_rm_optimizer(train):
    before = load(train)
    orig = globals_of(train)
    ok("rm", train, "optimizer")
    after = load(train)
    del before["optimizer"]
    assert same(after, before)
    assert globals_of(train) <= orig


def test_rm_saves_the_optimizer_bytes(tmp_path):
    ck = training_checkpoint(str(tmp_path / "t.pt"))
    obj = load(ck)
    opt_bytes = sum(v.numel() * v.element_size()
                    for st in obj["optimizer"]["state"].values()
                    for v in st.values() if isinstance(v, torch.Tensor))
    size = os.path.getsize(ck)
    ok("rm", ck, "optimizer")
    assert size - os.path.getsize(ck) >= opt_bytes
    assert "optimizer" not in load(ck)


def test_tied_weights_stay_tied(train):
    ok("rm", train, "model/fc.bias")
    ok("mv", train, "model/head.weight", "model/lm_head.weight")
    sd = load(train)["model"]
    assert "fc.bias" not in sd and "head.weight" not in sd
    a, b = sd["emb.weight"], sd["lm_head.weight"]
    assert a.storage().data_ptr() == b.storage().data_ptr()
    # one record for the two
    with zipfile.ZipFile(train) as z:
        recs = [n for n in z.namelist() if "/data/" in n]
    assert sorted(recs, key=lambda n: int(n.rsplit("/", 1)[1])) == \
        [recs[0].rsplit("/", 1)[0] + "/" + str(i) for i in range(len(recs))]


def test_mv_keeps_order_and_python_meaning(train):
    before = load(train)
    ok("mv", train, "model/fc.weight", "model/fc.W")
    after = load(train)
    sd = before["model"]
    keys = [("fc.W" if k == "fc.weight" else k) for k in sd]
    assert list(after["model"].keys()) == keys
    assert same(after["model"]["fc.W"], sd["fc.weight"])
    assert after["model"]._metadata == sd._metadata


def test_mv_into_another_dict_and_mkdir(train):
    before = load(train)
    ok("mkdir", train, "extra")
    ok("mv", train, "epoch", "extra")          # into the dict
    ok("mv", train, "args", "extra/config")
    after = load(train)
    assert after["extra"] == {"epoch": 3, "config": before["args"]}
    assert "epoch" not in after and "args" not in after


def test_strip_prefix_loads_strict(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    dp = torch.nn.DataParallel(net)
    ck = str(tmp_path / "dp.pt")
    torch.save(dp.state_dict(), ck)
    expect = dp.state_dict()
    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(expect, "module.")
    # what newer torch does to _metadata (1.13 looks for it among the keys)
    meta = collections.OrderedDict()
    for k, v in dp.state_dict()._metadata.items():
        meta[k[len("module."):] if k.startswith("module.") else
             "" if k == "module" else k] = v
    r = ok("rename", "-v", ck, "--strip-prefix", "module.")
    assert b"module.0.weight -> 0.weight" in r.stderr
    sd = load(ck)
    # torch sorts the keys it renames; ptfs keeps them where they were
    assert list(sd.keys()) == [k[len("module."):] for k in dp.state_dict()]
    assert sorted(sd.keys()) == sorted(expect.keys())
    assert all(torch.equal(sd[k], expect[k]) for k in sd)
    assert sd._metadata == meta and list(meta) == ["", "0", "1"]
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    fresh.load_state_dict(sd, strict=True)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, net.state_dict()[k])


def test_add_prefix_and_sed(tmp_path):
    ck = str(tmp_path / "sd.pt")
    torch.save(collections.OrderedDict(
        [("encoder.layer.0.w", torch.ones(2)), ("encoder.layer.1.w", torch.zeros(2))]), ck)
    ok("rename", ck, "--sed", r"s/layer\.([0-9]+)/block\1/")
    assert list(load(ck).keys()) == ["encoder.block0.w", "encoder.block1.w"]
    ok("rename", ck, "--add-prefix", "model.")
    assert list(load(ck).keys()) == ["model.encoder.block0.w", "model.encoder.block1.w"]


def test_rename_refuses_collisions(tmp_path):
    ck = str(tmp_path / "c.pt")
    torch.save({"module.a": torch.ones(1), "a": torch.zeros(1)}, ck)
    err = refused("rename", ck, "--strip-prefix", "module.")
    assert "would both be named 'a'" in err


STORAGE = {
    torch.float32: "FloatStorage", torch.float64: "DoubleStorage",
    torch.float16: "HalfStorage", torch.bfloat16: "BFloat16Storage",
    torch.int8: "CharStorage", torch.uint8: "ByteStorage",
    torch.int16: "ShortStorage", torch.int32: "IntStorage",
    torch.int64: "LongStorage", torch.bool: "BoolStorage",
    torch.complex64: "ComplexFloatStorage", torch.complex128: "ComplexDoubleStorage",
}


@pytest.mark.parametrize("dtype", [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
    torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
    torch.complex64, torch.complex128])
def test_add_every_dtype(tmp_path, dtype):
    ck = str(tmp_path / "a.pt")
    torch.save({"w": torch.ones(3)}, ck)
    t = (torch.arange(12) % 5).to(dtype).reshape(3, 4)
    if dtype.is_floating_point:
        t = t / 3
    name = str(dtype).split(".")[1]
    ok("add", ck, "new", "--dtype", name, "--shape", "3,4",
       input=t.numpy().tobytes() if dtype != torch.bfloat16
       else t.view(torch.int16).numpy().tobytes())
    got = load(ck)
    assert same(got["new"], t)
    assert same(got["w"], torch.ones(3))
    assert globals_of(ck) <= {"torch._utils _rebuild_tensor_v2",
                              "collections OrderedDict",
                              "torch FloatStorage",
                              "torch " + STORAGE[dtype]}


def test_add_refuses_wrong_sizes_and_names(tmp_path):
    ck = str(tmp_path / "a.pt")
    torch.save({"w": torch.ones(3), "d": {}}, ck)
    assert "takes 48" in refused("add", ck, "x", "--dtype", "float32", "--shape", "3,4",
                                 input=b"\0" * 47)
    assert "exists" in refused("add", ck, "w", "--dtype", "float32", "--shape", "3",
                               input=b"\0" * 12)
    assert "shown shortened" in refused("add", ck, "y" * 300, "--dtype", "int8",
                                        "--shape", "1", input=b"\0")
    refused("add", ck, "y" * 4096, "--dtype", "int8", "--shape", "1", input=b"\0")
    assert "cannot name" in refused("mv", ck, "w", "d/..")
    assert "not a mapping" in refused("add", ck, "w/x", "--dtype", "int8", "--shape", "1",
                                      input=b"\0")
    r = ptfs("add", ck, "x", "--dtype", "nope", "--shape", "1", input=b"\0")
    assert r.returncode == 2


def test_resize_embedding_keeps_parameter(tmp_path):
    net = torch.nn.Embedding(10, 4)
    ck = str(tmp_path / "p.pt")
    torch.save(net.state_dict(keep_vars=True), ck)
    bigger = torch.cat([net.weight.detach(), torch.zeros(2, 4)])
    ok("set", ck, "weight", "--shape", "12,4", input=bigger.numpy().tobytes())
    got = load(ck)["weight"]
    assert isinstance(got, torch.nn.Parameter) and got.requires_grad
    assert torch.equal(got.detach(), bigger)
    # a new dtype: bfloat16 bytes
    half = bigger.to(torch.bfloat16)
    ok("set", ck, "weight", "--dtype", "bfloat16",
       input=half.view(torch.int16).numpy().tobytes())
    got = load(ck)["weight"]
    assert got.dtype == torch.bfloat16 and torch.equal(got.detach(), half)


def test_edit_scalars(train):
    before = load(train)
    ok("set", train, "epoch", input=b"8\n")
    ok("set", train, "args/name", input=b"run-2\n")
    ok("set", train, "args/lr", input=b"0.01")
    ok("set", train, "args/layers/0", input=b"5\n")
    after = load(train)
    before["epoch"] = 8
    before["args"].name = "run-2"
    before["args"].lr = 0.01
    before["args"].layers[0] = 5
    assert same(after, before)
    assert "must be an int" in refused("set", train, "epoch", input=b"eight\n")
    ok("set", train, "epoch", input=b"None\n")
    assert load(train)["epoch"] is None


def test_globals_only_those_of_the_original(train):
    orig = globals_of(train)
    ok("rm", train, "scheduler")
    ok("rename", train, "model", "--add-prefix", "m.")
    ok("set", train, "epoch", input=b"9\n")
    assert globals_of(train) <= orig


def test_dry_run_writes_nothing(train):
    before = sha(train)
    r = ok("rm", "-n", train, "optimizer")
    out = r.stdout.decode()
    assert "rm optimizer" in out and "dry run" in out
    old, new = re.search(r": (\d+) -> (\d+) bytes \(dry run", out).groups()
    assert int(old) == os.path.getsize(train) and int(new) < int(old)
    assert sha(train) == before
    ok("rm", train, "optimizer")
    assert os.path.getsize(train) == int(new)


def test_weights_only_stays_loadable(tmp_path):
    """torch 1.13's weights-only unpickler refuses floats: integers only."""
    ck = str(tmp_path / "w.pt")
    torch.save({"a": torch.arange(6), "b": {"c": torch.ones(2, dtype=torch.int32)},
                "n": 4}, ck)
    torch.load(ck, weights_only=True)
    ok("rm", ck, "b/c")
    ok("mv", ck, "a", "b/a")
    ok("add", ck, "z", "--dtype", "int64", "--shape", "2",
       input=struct.pack("<2q", 7, 8))
    got = torch.load(ck, weights_only=True)
    assert got["n"] == 4 and torch.equal(got["b"]["a"], torch.arange(6))
    assert torch.equal(got["z"], torch.tensor([7, 8]))


def test_refused_paths(train):
    refused("rm", train, "nope")
    refused("rm", train, "model/fc.weight.json")
    refused("rm", train, ".ptfs/info.txt")
    assert "cannot move" in refused("mv", train, "model", "model/inner")


def test_safetensors(tmp_path):
    ck = str(tmp_path / "m.safetensors")
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(ck, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + struct.pack("<2f", 1.5, 2.5)
                + struct.pack("<q", 42))
    ok("rm", ck, "a")
    ok("add", ck, "c", "--dtype", "int16", "--shape", "3", input=struct.pack("<3h", 1, 2, 3))
    ok("mv", ck, "b", "bb")
    with open(ck, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    assert hdr["__metadata__"] == {"format": "pt"}
    assert list(k for k in hdr if k != "__metadata__") == ["bb", "c"]
    bb, c = hdr["bb"], hdr["c"]
    assert data[bb["data_offsets"][0]:bb["data_offsets"][1]] == struct.pack("<q", 42)
    assert data[c["data_offsets"][0]:c["data_offsets"][1]] == struct.pack("<3h", 1, 2, 3)
    assert c["dtype"] == "I16" and c["shape"] == [3]
    assert ok("cat", ck, "c").stdout == struct.pack("<3h", 1, 2, 3)
    assert "tensors only" in refused("mkdir", ck, "d")


def test_torchscript_refused(tmp_path):
    m = torch.jit.script(torch.nn.Linear(2, 2))
    ck = str(tmp_path / "ts.pt")
    m.save(ck)
    assert "code may refer" in refused("rm", ck, "bias")


@pytest.mark.parametrize("fault", ["rename:1:KILL", "write:3:KILL", "fsync:1:KILL",
                                   "rename:1:ENOSPC"])
def test_killed_or_failed_commit_leaves_old(train, fault):
    before = sha(train)
    r = ptfs("rm", train, "optimizer", env=dict(os.environ, PTFS_FAULT=fault))
    assert r.returncode != 0
    assert sha(train) == before
    ok("ls", train)
    # the next command that writes removes what the dead one left
    ok("rm", train, "scheduler")
    left = [n for n in os.listdir(os.path.dirname(train)) if "ptfs-" in n]
    assert left == []
    assert "optimizer" in load(train) and "scheduler" not in load(train)


def test_edits_stay_within_the_walk_budget(tmp_path):
    """Each edit lists its directory again and keeps the old listing until
    close: past max_walk_entries of them, edits are refused with one line
    (a mount's rm -r of a huge dict stops instead of eating the memory)."""
    ck = str(tmp_path / "many.pt")
    torch.save({"k%d" % i: torch.ones(1) for i in range(20)}, ck)
    keys = ["k%d" % i for i in range(10)]
    err = refused("rm", ck, "-o", "max_walk_entries=50", *keys)
    assert "max_walk_entries 50" in err and "ptfs rm" in err
    ok("rm", ck, *keys)
    assert list(load(ck).keys()) == ["k%d" % i for i in range(10, 20)]


# ---- what README promises besides the edits themselves ----

def onnx_model(path):
    torch.onnx.export(torch.nn.Linear(2, 2), torch.zeros(1, 2), path)
    return path


def legacy_model(path):
    torch.save({"a": torch.arange(3), "n": 4}, path, _use_new_zipfile_serialization=False)
    return path


def tar_model(path):
    from test_legacy import save_tar
    save_tar({"a": torch.arange(3), "n": 4}, path)
    return path


@pytest.mark.parametrize("kind, make", [("torch.save legacy", legacy_model),
                                        ("tar", tar_model),
                                        ("ONNX", onnx_model)],
                         ids=["legacy", "tar", "onnx"])
def test_read_only_formats_refuse_surgery(tmp_path, kind, make):
    """README: legacy, tar, .pt2, sharded, DCP and ONNX checkpoints are
    read-only for surgery: one line naming the file, nothing written."""
    ck = make(str(tmp_path / "ck"))
    name = "a" if kind != "ONNX" else "bias"
    err = refused("rm", ck, name)
    assert "cannot be restructured" in err and ck in err, err
    assert refused("mv", ck, name, "b") == err
    assert os.listdir(str(tmp_path)) == ["ck"]


def test_remote_checkpoints_refuse_surgery():
    for cmd in (["rm", "http://127.0.0.1:1/x.pt", "a"],
                ["rename", "s3://bucket/x.pt", "--strip-prefix", "module."]):
        r = ptfs(*cmd)
        err = r.stderr.decode()
        assert r.returncode == 1 and "remote checkpoints cannot be edited" in err, err
        assert len(err.splitlines()) == 1, err


def test_set_verbose_says_how_a_scalar_was_committed(train):
    r = ptfs("set", "-v", train, "epoch", input=b"9\n")
    assert r.returncode == 0, r.stderr.decode()
    m = re.search(rb"committed \((rewrite|clone), (\d+) bytes written\)", r.stderr)
    assert m, r.stderr
    assert int(m.group(2)) == os.path.getsize(train)
    assert load(train)["epoch"] == 9
    before = os.path.getsize(train)
    r = ptfs("rm", "-v", train, "optimizer")
    m = re.search(rb"committed \(rewrite, (\d+) bytes written\)", r.stderr)
    assert m and int(m.group(1)) == os.path.getsize(train) < before, r.stderr
    r = ptfs("set", train, "epoch", input=b"10\n")
    assert r.returncode == 0 and r.stderr == b"", r.stderr


def test_no_room_leaves_the_file(tmp_path):
    """README: the new file is written beside the old one after a check
    that the filesystem has room for it.  Both writers, on a tmpfs too
    small for a second copy."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    d = str(tmp_path / "small")
    os.mkdir(d)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=7m", "tmpfs", d], check=True)
    try:
        pt = os.path.join(d, "m.pt")
        torch.save({"w": torch.zeros(1 << 20), "b": torch.ones(4)}, pt)
        err = refused("rm", pt, "b")
        assert "No space left on device" in err and pt in err, err
        assert os.listdir(d) == ["m.pt"]
        os.unlink(pt)
        st = os.path.join(d, "m.safetensors")
        n = 4 << 20
        h = json.dumps({"w": {"dtype": "F32", "shape": [n // 4], "data_offsets": [0, n]},
                        "b": {"dtype": "F32", "shape": [1], "data_offsets": [n, n + 4]}}).encode()
        h += b" " * (-len(h) % 8)
        with open(st, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + bytes(n) + struct.pack("<f", 1.0))
        err = refused("rm", st, "b")
        assert "No space left on device" in err and st in err, err
        assert os.listdir(d) == ["m.safetensors"]
        # room now: the same edit goes through
        subprocess.run(["mount", "-o", "remount,size=16m", d], check=True)
        ok("rm", st, "b")
        assert [l.split()[2] for l in ok("ls", st).stdout.decode().splitlines()] == ["w"]
    finally:
        subprocess.run(["umount", "-l", d], capture_output=True)


def test_unchanged_records_share_blocks(reflink_fs):
    """README: unchanged tensor records are copied with copy_file_range,
    so XFS and btrfs share their blocks: removing a small entry from a
    128 MiB checkpoint takes far less than a copy's worth of space."""
    import shutil
    ck = os.path.join(reflink_fs, "big.pt")
    torch.save({"big": torch.zeros(32 << 20, dtype=torch.int32), "small": torch.ones(4)}, ck)
    subprocess.run(["sync", "-f", ck], check=True)
    free = shutil.disk_usage(reflink_fs).free
    ok("rm", ck, "small")
    subprocess.run(["sync", "-f", ck], check=True)
    assert free - shutil.disk_usage(reflink_fs).free < (16 << 20)
    got = load(ck)
    assert list(got) == ["big"] and int(got["big"].abs().sum()) == 0


@fixture_corpus
def test_pt2_refuses_surgery(tmp_path):
    import shutil
    ck = str(tmp_path / "linear.pt2")
    shutil.copyfile(os.path.join(FIXTURES, "pytorch__executorch/"
                                 "extension__named_data_map__test__linear.pt2"), ck)
    err = refused("rm", ck, "linear.bias")
    assert "cannot be restructured" in err and ck in err, err


def test_dcp_refuses_surgery(dcp113):
    ck, _ = dcp113
    before = {n: sha(os.path.join(ck, n)) for n in os.listdir(ck)}
    r = ptfs("rm", ck, "model.weight")
    err = r.stderr.decode()
    assert r.returncode == 1 and len(err.splitlines()) == 1, err
    assert "cannot be restructured" in err and ck in err, err
    assert {n: sha(os.path.join(ck, n)) for n in os.listdir(ck)} == before
