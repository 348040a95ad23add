# SPDX-License-Identifier: MIT
"""The legacy formats: torch.save(..., _use_new_zipfile_serialization=False)
(a stream of pickles and raw storages), the tar container of torch <= 0.1.9,
and plain pickles whose storages are torch.storage._load_from_bytes blobs.
Our own files are compared with what torch.load returns; fixtures from
elsewhere are loaded only with weights_only=True."""
import collections
import io
import json
import os
import pickle
import struct
import tarfile

import pytest
import torch

import make_ckpts
import oracle
from conftest import FIXTURES, PTFS, fixture_corpus, fixture_rows, mounted, needs_fuse, run

LOADABLE = ["every_dtype", "views", "tied", "optimizer", "nested", "odd_keys",
            "single_tensor", "single_int"]


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def make_legacy(ckdir, name, protocol):
    path = os.path.join(ckdir, "legacy_%s_p%d.pt" % (name, protocol))
    if not os.path.exists(path):
        # torch saves every one of them at every protocol (0 included):
        # a failure here is a failure of the test, not a reason to skip
        make_ckpts.save(make_ckpts.MAKERS[name](), path, protocol=protocol,
                        legacy=True)
    return path


def as_tensors(obj):
    """torch.load's value with storages turned into 1-D tensors (which is
    how the tree shows a storage)."""
    if isinstance(obj, torch.storage.TypedStorage):
        return torch.empty(0, dtype=obj.dtype).set_(obj)
    if isinstance(obj, collections.OrderedDict):
        return collections.OrderedDict((k, as_tensors(v)) for k, v in obj.items())
    if isinstance(obj, dict):
        return {k: as_tensors(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [as_tensors(v) for v in obj]
    if isinstance(obj, tuple) and not isinstance(obj, torch.Size):
        return tuple(as_tensors(v) for v in obj)
    return obj


def info(path):
    r = run("info", path)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


# ---- the legacy pickle stream ----

@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
@pytest.mark.parametrize("name", LOADABLE)
def test_legacy_cli_matches_torch(ckdir, name, protocol):
    path = make_legacy(ckdir, name, protocol)
    try:
        obj = torch.load(path)
    except Exception as e:
        # protocol 0 writes the persistent ids as text, which torch itself
        # cannot read back: an expected failure, one clear line from ptfs
        assert protocol == 0, e
        r = run("ls", path)
        lines = r.stderr.decode().strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and path in lines[0], lines
        assert "persistent id is not a ('storage'" in lines[0], lines
        return
    assert oracle.compare_cli(PTFS, path, obj, stem(path)) > 0
    assert "legacy" in info(path)


@needs_fuse
@pytest.mark.parametrize("name", ["every_dtype", "views", "optimizer"])
def test_legacy_mount_matches_torch(ckdir, name):
    path = make_legacy(ckdir, name, 2)
    obj = torch.load(path)
    with mounted(path) as mnt:
        assert oracle.compare_mount(mnt, obj, stem(path)) > 0


def test_legacy_zero_copy(ckdir):
    """Storages are served from where they lie in the file."""
    path = make_legacy(ckdir, "every_dtype", 2)
    with open(path, "rb") as f:
        data = f.read()
    meta = json.loads(run("cat", path, "big.json").stdout)
    assert meta["zero_copy"] is True
    off = meta["file_offset"]
    want = torch.arange(100000, dtype=torch.float32).numpy().tobytes()
    assert data[off:off + len(want)] == want


def test_legacy_full_module(ckdir):
    """torch.save(model) in the legacy format: ('module', ...) pids are the
    class; the module is an object with its tensors inside."""
    path = make_legacy(ckdir, "module", 2)
    m = torch.load(path, weights_only=False)
    w = run("cat", path, "_modules/0/_parameters/weight")
    assert w.returncode == 0, w.stderr
    assert w.stdout == m[0].weight.detach().numpy().tobytes()
    rv = run("cat", path, "_modules/1/_buffers/running_var")
    assert rv.stdout == m[1].running_var.numpy().tobytes()
    assert run("cat", path, "training").stdout == b"True\n"


def test_legacy_numpy_and_namespace(ckdir):
    path = make_legacy(ckdir, "numpy_arrays", 2)
    obj = torch.load(path, weights_only=False)
    for k in ("f", "i", "b"):
        assert run("cat", path, k).stdout == obj[k].tobytes(), k
    assert run("cat", path, "t").stdout == obj["t"].numpy().tobytes()
    path = make_legacy(ckdir, "namespace", 2)
    assert run("cat", path, "args/lr").stdout == b"0.1\n"


def test_legacy_pickles_past_first_window(ckdir):
    """An object pickle larger than the first read window (1 MiB)."""
    path = os.path.join(ckdir, "legacy_big_pickle.pt")
    obj = {"big": list(range(300000)), "w": torch.arange(7.0)}
    make_ckpts.save(obj, path, legacy=True)
    assert os.path.getsize(path) > 1 << 20
    assert run("cat", path, "big/299999").stdout == b"299999\n"
    assert run("cat", path, "w").stdout == obj["w"].numpy().tobytes()


def corrupt_cases(good):
    """(name, bytes) of broken legacy files derived from @good."""
    n = len(good)
    yield "truncated_data", good[: n - 3]
    yield "truncated_pickle", good[:200]
    yield "only_magic", good[:15]
    bad_numel = bytearray(good)
    # the last storage's count is 8 bytes before its data; find the first
    # count by searching for the little-endian element count of 'big'
    i = bytes(good).find(struct.pack("<q", 100000))
    assert i > 0
    bad_numel[i:i + 8] = struct.pack("<q", 100001)
    yield "wrong_numel", bytes(bad_numel)
    huge = bytearray(good)
    huge[i:i + 8] = struct.pack("<q", 2 ** 62)
    yield "huge_numel", bytes(huge)
    yield "bad_version", good.replace(b"M\xe9\x03", b"M\xea\x03", 1)


def test_legacy_corrupt_one_line(ckdir, tmp_path):
    path = make_legacy(ckdir, "every_dtype", 2)
    with open(path, "rb") as f:
        good = f.read()
    for name, content in corrupt_cases(good):
        p = os.path.join(tmp_path, name + ".pt")
        with open(p, "wb") as f:
            f.write(content)
        r = run("ls", p)
        assert r.returncode == 1, (name, r.stdout[:200])
        lines = r.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and p in lines[0], (name, lines)


# ---- plain pickles with _load_from_bytes storages ----

def plain_obj():
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {"w": w, "row": w[1], "t": w.t(), "s": torch.arange(5).storage(),
            "half": torch.ones(3, dtype=torch.float16), "n": 3}


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_plain_pickle(tmp_path, protocol):
    path = os.path.join(tmp_path, "plain_p%d.pkl" % protocol)
    with open(path, "wb") as f:
        pickle.dump(plain_obj(), f, protocol=protocol)
    with open(path, "rb") as f:
        obj = as_tensors(pickle.load(f))
    assert oracle.compare_cli(PTFS, path, obj, stem(path)) > 0
    out = info(path)
    assert "plain pickle" in out and "_load_from_bytes" in out
    meta = json.loads(run("cat", path, "w.json").stdout)
    assert meta["zero_copy"] is (protocol >= 3)


@pytest.mark.parametrize("protocol", [0, 1])
def test_plain_pickle_text_protocols(tmp_path, protocol):
    path = os.path.join(tmp_path, "p%d.pkl" % protocol)
    obj = {"a": 1, "b": [2.5, "x"], "c": None}
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    assert oracle.compare_cli(PTFS, path, obj, stem(path)) > 0


# ---- the tar container (torch <= 0.1.9), written as that torch did ----

class _View:
    """A storage view: pickled as a pid naming an entry of the view list."""
    def __init__(self, key):
        self.key = key


def save_tar(obj, path, views=(), protocol=2):
    """Write @obj the way torch 0.1.x's _save did (docs/FORMATS.md,
    "Tar layout")."""
    tensors, storages, skeys = {}, {}, {}
    counter = iter(range(1000, 10 ** 9))

    def storage_key(st):
        k = (st.data_ptr(), st.nbytes(), st.dtype) if st.nbytes() else id(st)
        if k not in skeys:
            skeys[k] = next(counter)
            storages[skeys[k]] = st
        return skeys[k]

    def persistent_id(o):
        if torch.is_tensor(o):
            key = next(counter)
            tensors[key] = o
            return str(key)
        if isinstance(o, torch.storage.TypedStorage):
            return str(storage_key(o))
        if isinstance(o, _View):
            return str(o.key)
        return None

    def dump(f, v):
        pickle.dump(v, f, protocol=protocol)

    pk = io.BytesIO()
    p = pickle.Pickler(pk, protocol=protocol)
    p.persistent_id = persistent_id
    p.dump(obj)

    tb = io.BytesIO()
    dump(tb, len(tensors))
    for key, t in tensors.items():
        sk = storage_key(t.storage())
        dump(tb, (key, sk, getattr(torch, t.type().split(".")[-1], torch.Tensor)))
        tb.write(struct.pack("<q", t.dim()))
        tb.write(struct.pack("<%dq" % t.dim(), *t.size()))
        tb.write(struct.pack("<%dq" % t.dim(), *t.stride()))
        tb.write(struct.pack("<q", t.storage_offset()))

    sb = io.BytesIO()
    dump(sb, len(storages))
    for key, st in storages.items():
        dump(sb, (key, "cpu", getattr(torch, st.pickle_storage_type())))
        sb.write(struct.pack("<q", st.size()))
        sb.write(oracle.tensor_bytes(torch.empty(0, dtype=st.dtype).set_(st)))
    dump(sb, [(vk, storage_key(root), off, n) for vk, root, off, n in views])

    si = io.BytesIO()
    dump(si, {"protocol_version": 1000, "little_endian": True,
              "type_sizes": {"short": 2, "int": 4, "long": 8}})
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, buf in (("sys_info", si), ("pickle", pk), ("tensors", tb),
                          ("storages", sb)):
            ti = tarfile.TarInfo(name)
            ti.size = len(buf.getvalue())
            tar.addfile(ti, io.BytesIO(buf.getvalue()))


def tar_obj():
    w = torch.randn(4, 6)
    st = w.storage()
    return {"w": w, "col": w[:, 2], "t": w.t(), "i": torch.arange(5),
            "empty": torch.zeros(0, 3), "s": torch.ones(2, dtype=torch.float64).storage(),
            "view": _View(77), "nested": [1, (torch.ones(1), "x")]}, \
        [(77, st, 3, 5)]


def test_tar_matches_torch(tmp_path):
    path = os.path.join(tmp_path, "old.tar.pt")
    obj, views = tar_obj()
    save_tar(obj, path, views)
    want = as_tensors(torch.load(path, weights_only=False))
    assert oracle.compare_cli(PTFS, path, want, stem(path)) > 0
    out = info(path)
    assert "tar" in out
    meta = json.loads(run("cat", path, "w.json").stdout)
    assert meta["zero_copy"] is True


@needs_fuse
def test_tar_mount(tmp_path):
    path = os.path.join(tmp_path, "old.pt")
    obj, views = tar_obj()
    save_tar(obj, path, views)
    want = as_tensors(torch.load(path, weights_only=False))
    with mounted(path) as mnt:
        assert oracle.compare_mount(mnt, want, stem(path)) > 0


def test_tar_corrupt_one_line(tmp_path):
    path = os.path.join(tmp_path, "good.pt")
    obj, views = tar_obj()
    save_tar(obj, path, views)
    with open(path, "rb") as f:
        good = f.read()
    cases = {"cut": good[:2048], "no_storages": None}
    p = os.path.join(tmp_path, "no_storages.pt")
    with tarfile.open(p, "w", format=tarfile.PAX_FORMAT) as tar:
        ti = tarfile.TarInfo("pickle")
        data = pickle.dumps(1, protocol=2)
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))
    for name, content in cases.items():
        p = os.path.join(tmp_path, name + ".pt")
        if content is not None:
            with open(p, "wb") as f:
                f.write(content)
        r = run("ls", p)
        assert r.returncode == 1, name
        lines = r.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and p in lines[0], (name, lines)


# ---- fixtures from elsewhere ----

ROWS = [r for r in fixture_rows()
        if r.get("container") in ("legacy-pickle", "tar", "other")]


@fixture_corpus
@pytest.mark.parametrize("row", ROWS, ids=[r["local_name"] for r in ROWS])
def test_fixture(row):
    path = os.path.join(FIXTURES, row["local_name"])
    r = run("ls", path)
    if r.returncode != 0:
        lines = r.stderr.decode().strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and path in lines[0], lines
        assert row["torch113_loads"] != "ok", lines
        return
    if row["torch113_loads"] != "ok":
        return
    obj = as_tensors(torch.load(path, weights_only=True))
    assert oracle.compare_cli(PTFS, path, obj, stem(path)) >= 0
