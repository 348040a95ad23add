# SPDX-License-Identifier: MIT
"""Surgery on sharded checkpoints (README "Surgery"): `ptfs rm`, `mv`,
`rename`, `add` and `set` on a *.index.json rewrite the shards the edit
touches and the index, together.

The shards are made here: safetensors files written by hand (no safetensors
package) and torch.save files of plain dicts, with an index as transformers'
save_pretrained writes it.  After each edit every shard is read back
(torch.load(weights_only=True), the safetensors header by hand) and must
hold exactly the edited state dict, each tensor in the one shard the index
names for it, total_size the sum of the tensors' bytes.
"""
import hashlib
import json
import os
import struct
import subprocess

import numpy as np
import pytest
import torch

from conftest import PTFS, needs_root

ST_DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32",
             torch.float16: "F16"}
NP_DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32,
             "F16": np.float16}


def ptfs(*args, input=None, env=None):
    return subprocess.run([PTFS, *args], input=input, capture_output=True,
                          timeout=300, env=env)


def ok(*args, input=None):
    r = ptfs(*args, input=input)
    assert r.returncode == 0, r.stderr.decode()
    return r


def tree_sha(d):
    """Every file of directory @d by name: its sha256."""
    out = {}
    for n in sorted(os.listdir(d)):
        with open(os.path.join(d, n), "rb") as f:
            out[n] = hashlib.sha256(f.read()).hexdigest()
    return out


def refused(idx, *args, input=None, env=None):
    """Exit 1 with one line, every file of the checkpoint unchanged."""
    d = os.path.dirname(idx)
    before = tree_sha(d)
    r = ptfs(args[0], idx, *args[1:], input=input, env=env)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("ptfs: "), err
    assert tree_sha(d) == before
    return err


def write_st(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    assert header.pop("__metadata__") == {"format": "pt"}
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=NP_DTYPES[e["dtype"]]).copy()
        out[name] = torch.from_numpy(arr.reshape(e["shape"]))
    return out


SHARDS = [
    {"model.embed.weight": torch.arange(12.).reshape(3, 4),
     "model.layers.0.weight": torch.ones(4, 4),
     "model.layers.0.bias": torch.arange(4, dtype=torch.int64)},
    {"model.layers.1.weight": torch.full((4, 4), 2.),
     "model.layers.1.bias": torch.arange(4, dtype=torch.int64) * 3},
    {"model.norm.weight": torch.arange(4.),
     "lm_head.weight": torch.arange(12.).reshape(3, 4) * -1},
]


def make(tmp_path, kind, shards=SHARDS):
    """A sharded checkpoint in @tmp_path: its index's path."""
    ext, stem = (("safetensors", "model") if kind == "st"
                 else ("bin", "pytorch_model"))
    wm, total = {}, 0
    for i, sd in enumerate(shards):
        name = "%s-%05d-of-%05d.%s" % (stem, i + 1, len(shards), ext)
        if kind == "st":
            write_st(str(tmp_path / name), sd)
        else:
            torch.save(sd, str(tmp_path / name))
        for k, t in sd.items():
            wm[k] = name
            total += t.numel() * t.element_size()
    idx = tmp_path / ("%s.%s.index.json" % (stem, ext))
    idx.write_text(json.dumps({"metadata": {"total_size": total},
                               "weight_map": wm}, indent=2, sort_keys=True) + "\n")
    return str(idx)


def expected():
    return {k: t for sd in SHARDS for k, t in sd.items()}


def state(idx):
    """The checkpoint's state dict, read shard by shard, after checking
    the index: every key in exactly the shard it names, total_size."""
    with open(idx) as f:
        text = f.read()
    index = json.loads(text)
    wm = index["weight_map"]
    assert list(wm) == sorted(wm)
    assert text == json.dumps(index, indent=2, sort_keys=True) + "\n"
    out, total = {}, 0
    for shard in sorted(set(wm.values())):
        path = os.path.join(os.path.dirname(idx), shard)
        sd = (read_st(path) if shard.endswith(".safetensors")
              else torch.load(path, weights_only=True))
        assert sorted(sd) == sorted(k for k, s in wm.items() if s == shard)
        for k, t in sd.items():
            assert k not in out
            out[k] = t
            total += t.numel() * t.element_size()
    assert index["metadata"]["total_size"] == total
    return out


def same(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), k


KINDS = ["st", "bin"]


@pytest.mark.parametrize("kind", KINDS)
def test_rm(tmp_path, kind):
    idx = make(tmp_path, kind)
    r = ok("rm", "-v", idx, "model.layers.0.bias", "lm_head.weight")
    assert "in 3 files" in r.stderr.decode()
    want = expected()
    del want["model.layers.0.bias"], want["lm_head.weight"]
    same(state(idx), want)
    assert "lm_head.weight" not in ok("ls", idx).stdout.decode()
    # the directory stands for its index
    ok("rm", str(tmp_path), "model.norm.weight")
    del want["model.norm.weight"]
    same(state(idx), want)


@pytest.mark.parametrize("kind", KINDS)
def test_rename_strip_prefix(tmp_path, kind):
    idx = make(tmp_path, kind)
    ok("rename", idx, "--strip-prefix", "model.")
    want = {k[len("model."):] if k.startswith("model.") else k: t
            for k, t in expected().items()}
    same(state(idx), want)
    # each tensor stays in its shard, under its new name
    wm = json.load(open(idx))["weight_map"]
    assert wm["embed.weight"].endswith("00001-of-00003." + idx.split(".")[1])
    assert wm["lm_head.weight"] == wm["norm.weight"]


@pytest.mark.parametrize("kind", KINDS)
def test_add_goes_to_the_smallest_shard(tmp_path, kind):
    idx = make(tmp_path, kind)
    new = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    ok("add", idx, "extra.w", "--dtype", "int32", "--shape", "2,3",
       input=new.numpy().tobytes())
    want = expected()
    want["extra.w"] = new
    same(state(idx), want)
    wm = json.load(open(idx))["weight_map"]
    assert wm["extra.w"] == wm["lm_head.weight"]     # 64 bytes: the least


@pytest.mark.parametrize("kind", KINDS)
def test_set_shape_and_dtype(tmp_path, kind):
    idx = make(tmp_path, kind)
    emb = torch.arange(20.).reshape(5, 4)
    ok("set", idx, "model.embed.weight", "--shape", "5,4", input=emb.numpy().tobytes())
    bias = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    ok("set", idx, "model.layers.1.bias", "--dtype", "int32", input=bias.numpy().tobytes())
    want = expected()
    want["model.embed.weight"] = emb
    want["model.layers.1.bias"] = bias
    same(state(idx), want)
    # each new tensor takes the old one's place, in its shard's order
    wm = json.load(open(idx))["weight_map"]
    for name, sd in (("model.embed.weight", SHARDS[0]), ("model.layers.1.bias", SHARDS[1])):
        path = os.path.join(str(tmp_path), wm[name])
        got = read_st(path) if kind == "st" else torch.load(path, weights_only=True)
        assert list(got) == list(sd)


@pytest.mark.parametrize("kind", KINDS)
def test_mv_and_rm_emptying_a_shard(tmp_path, kind):
    idx = make(tmp_path, kind)
    ok("mv", idx, "model.norm.weight", "model.final_norm.weight")
    ok("rm", idx, "model.layers.1.weight", "model.layers.1.bias")
    want = expected()
    want["model.final_norm.weight"] = want.pop("model.norm.weight")
    del want["model.layers.1.weight"], want["model.layers.1.bias"]
    same(state(idx), want)
    # the emptied shard is kept, empty, and the index no longer names it
    wm = json.load(open(idx))["weight_map"]
    shard2 = [n for n in os.listdir(str(tmp_path)) if "00002-of" in n]
    assert len(shard2) == 1 and shard2[0] not in wm.values()
    path = str(tmp_path / shard2[0])
    assert (read_st(path) if kind == "st" else torch.load(path, weights_only=True)) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_refusals_leave_every_file(tmp_path, kind):
    idx = make(tmp_path, kind)
    assert "flat mapping" in refused(idx, "mkdir", "model.extra")
    assert "would both be named" in refused(idx, "rename", "--sed", "s/\\.(weight|bias)$//")
    refused(idx, "mv", "model.norm.weight", "a/b")
    refused(idx, "add", "x" * 4097, "--dtype", "int32", "--shape", "1", input=b"\0" * 4)
    refused(idx, "add", "..", "--dtype", "int32", "--shape", "1", input=b"\0" * 4)
    refused(idx, "rm", "model.nope")


@pytest.mark.parametrize("kind", KINDS)
def test_dry_run_writes_nothing(tmp_path, kind):
    idx = make(tmp_path, kind)
    before = tree_sha(str(tmp_path))
    r = ok("rm", "-n", idx, "lm_head.weight")
    assert "dry run" in r.stdout.decode()
    r = ok("rename", "-n", idx, "--add-prefix", "x.")
    assert "dry run" in r.stdout.decode()
    assert tree_sha(str(tmp_path)) == before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fault", ["create:2:ENOSPC", "write:5:EIO", "fsync:3:EIO",
                                   "rename:1:EIO", "rename:1:KILL", "write:3:KILL"])
def test_failed_commit_leaves_every_file(tmp_path, kind, fault):
    idx = make(tmp_path, kind)
    before = tree_sha(str(tmp_path))
    r = ptfs("rename", idx, "--strip-prefix", "model.",
             env=dict(os.environ, PTFS_FAULT=fault))
    assert r.returncode != 0
    after = {n: h for n, h in tree_sha(str(tmp_path)).items() if "ptfs-" not in n}
    assert after == before
    same(state(idx), expected())
    # the next command that writes these files removes what a dead one left
    ok("rename", idx, "--strip-prefix", "model.")
    assert [n for n in os.listdir(str(tmp_path)) if "ptfs-" in n] == []
    assert "embed.weight" in state(idx)


@pytest.mark.parametrize("kind", KINDS)
def test_rename_window_after_rm_leaves_a_loadable_index(tmp_path, kind):
    """rm renames the index first: a failure after it leaves an index whose
    every name is in its shard, which opens."""
    idx = make(tmp_path, kind)
    r = ptfs("rm", idx, "lm_head.weight", env=dict(os.environ, PTFS_FAULT="rename:2:EIO"))
    err = r.stderr.decode()
    assert r.returncode == 1 and "1 of 2 files replaced" in err, err
    assert "lm_head.weight" not in ok("ls", idx).stdout.decode()
    assert "lm_head.weight" not in json.load(open(idx))["weight_map"]


@needs_root
@pytest.mark.parametrize("kind", KINDS)
def test_no_room_for_the_new_shards(tmp_path, kind):
    """Three shards of 512 KiB each fit, a second copy of them does not:
    refused before anything is written, though each shard alone would fit
    (the torch.save writer wants 1 MiB to spare besides)."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2816k", "tmpfs", str(small)],
                   check=True)
    try:
        big = [{"model.w%d" % i: torch.full((131072,), float(i))} for i in range(3)]
        idx = make(small, kind, big)
        err = refused(idx, "rename", "--strip-prefix", "model.")
        assert "for 4 new files" in err and "No space left on device" in err, err
        assert [n for n in os.listdir(str(small)) if "ptfs-" in n] == []
        ok("rm", idx, "model.w0")           # one small new shard fits
        assert sorted(state(idx)) == ["model.w1", "model.w2"]
    finally:
        subprocess.run(["umount", str(small)])


def test_ordered_dict_shard_odd_keys_compact_index(tmp_path):
    """A shard saved as a state dict (an OrderedDict with _metadata), keys
    that JSON must escape, an index on one line: it stays on one line,
    the shard an OrderedDict."""
    import collections
    a = collections.OrderedDict([("0.weight", torch.ones(2, 2)), ("0.bias", torch.zeros(2))])
    a._metadata = collections.OrderedDict([("0", {"version": 1})])
    b = {'w\u00e9"ird\\key': torch.arange(3), "1.bias": torch.ones(2)}
    torch.save(a, str(tmp_path / "s1.bin"))
    torch.save(b, str(tmp_path / "s2.bin"))
    wm = dict([(k, "s1.bin") for k in a] + [(k, "s2.bin") for k in b])
    idx = tmp_path / "pytorch_model.bin.index.json"
    idx.write_text(json.dumps({"metadata": {"total_size": 1, "format": "pt"}, "weight_map": wm}))
    ok("rename", str(idx), "--add-prefix", "m.")
    text = idx.read_text()
    assert "\n" not in text.strip()
    index = json.loads(text)
    assert index["metadata"] == {"total_size": 16 + 8 + 24 + 8, "format": "pt"}
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    got = torch.load(str(tmp_path / "s1.bin"), weights_only=True)
    assert type(got) is collections.OrderedDict and list(got) == ["m.0.weight", "m.0.bias"]
    got = torch.load(str(tmp_path / "s2.bin"), weights_only=True)
    assert list(got) == ['m.w\u00e9"ird\\key', "m.1.bias"]
    assert torch.equal(got['m.w\u00e9"ird\\key'], torch.arange(3))
    assert index["weight_map"]['m.w\u00e9"ird\\key'] == "s2.bin"


@pytest.mark.parametrize("kind", KINDS)
def test_symlinks_stay_and_their_targets_change(tmp_path, kind):
    """Index and shards as links to the real files elsewhere: the real
    files are written, the links stay links."""
    real = tmp_path / "real"
    real.mkdir()
    make(real, kind)
    links = tmp_path / "links"
    links.mkdir()
    for n in os.listdir(str(real)):
        os.symlink(os.path.join("..", "real", n), str(links / n))
    idx = [str(links / n) for n in os.listdir(str(links)) if n.endswith(".index.json")][0]
    ok("rename", idx, "--strip-prefix", "model.")
    assert all(os.path.islink(str(links / n)) for n in os.listdir(str(links)))
    want = {k[len("model."):] if k.startswith("model.") else k: t
            for k, t in expected().items()}
    same(state(idx), want)


@pytest.mark.parametrize("kind", KINDS)
def test_what_the_index_never_named_stays_in_its_shard(tmp_path, kind):
    idx = make(tmp_path, kind)
    shard = json.load(open(idx))["weight_map"]["lm_head.weight"]
    path = str(tmp_path / shard)
    extra = dict(SHARDS[2], unnamed=torch.arange(3, dtype=torch.int64))
    if kind == "st":
        write_st(path, extra)
    else:
        torch.save(extra, path)
    assert "unnamed" not in ok("ls", idx).stdout.decode()
    ok("rm", idx, "lm_head.weight")
    got = read_st(path) if kind == "st" else torch.load(path, weights_only=True)
    assert list(got) == ["model.norm.weight", "unnamed"]
    assert torch.equal(got["unnamed"], torch.arange(3))
