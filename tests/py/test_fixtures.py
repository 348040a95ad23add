# SPDX-License-Identifier: MIT
"""Real checkpoints other projects made with many torch versions
(../shared/fixtures/real).  Foreign files are compared with torch only
through torch.load(..., weights_only=True); nothing else unpickles them.

- every file opens (`ptfs ls` and `ptfs info` succeed), except the ones in
  EXPECTED_FAILURES, which must fail with one line naming the file and
  the problem given there;
- a file that torch 1.13 loads with weights_only=True gives the same tree
  (through the mount: every file read, tensors also through numpy.memmap);
- malicious pickles open without anything being run (no process started,
  no connection made, no file created), and `ptfs info` names the
  dangerous globals.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import oracle
from conftest import (FIXTURES, PTFS, fixture_corpus, fixture_rows, inert_run,
                      mounted, needs_fuse, run)

pytestmark = fixture_corpus

ROWS = [r for r in fixture_rows() if "/malicious/" not in r["local_name"]]
MALICIOUS = sorted(
    os.path.join(d, f)
    for d, _, files in os.walk(FIXTURES) if d.endswith("malicious")
    for f in files) if os.path.isdir(FIXTURES) else []

# Files ptfs refuses, each with why and a phrase its one-line error must
# hold.  None is a checkpoint torch 1.13 loads (test_expected_failures_list
# checks that); a file that starts opening must leave this list.
EXPECTED_FAILURES = {
    "dotnet__TorchSharp/test__TorchSharpTest__adam1__at_8bb6cc26.dat":
        ("TorchSharp's own binary format, not torch.save", "not a PyTorch checkpoint"),
    "dotnet__TorchSharp/test__TorchSharpTest__tensor2345.dat":
        ("TorchSharp's own binary format, not torch.save", "not a PyTorch checkpoint"),
    "mmaitre314__picklescan/tests__data__bad_pytorch.pt":
        ("a PNG signature named .pt", "first bytes 89 50 4e 47"),
    "mmaitre314__picklescan/tests__data__benign_password_protected.zip":
        ("ZipCrypto-encrypted ZIP", "encrypted entries are not supported"),
    "mmaitre314__picklescan/tests__data__not_a_pickle.bin":
        ("text, not a pickle", "not a PyTorch checkpoint"),
    "promptfoo__modelaudit/tests__assets__samples__archives__safe_model.zip":
        ("ZIP of text files, no data.pkl", "without a data.pkl record"),
    "pytorch__executorch/examples__dev_tools__scripts__etrecord.bin":
        ("ExecuTorch ETRecord whose central directory torch also rejects",
         "bad signature"),
    "pytorch__executorch/extension__module__test__resources__add.pte":
        ("ExecuTorch flatbuffer program", "not a PyTorch checkpoint"),
    "tracel-ai__burn/crates__burn-store__src__pytorch__tests__reader__test_data__tar_2d_tensor.tar":
        ("generated tar whose storages are plain tuples (torch cannot load it)",
         "tensor storage is not a persistent id"),
    "tracel-ai__burn/crates__burn-store__src__pytorch__tests__reader__test_data__tar_float32.tar":
        ("generated tar whose storages are plain tuples (torch cannot load it)",
         "tensor storage is not a persistent id"),
    "tracel-ai__burn/crates__burn-store__src__pytorch__tests__reader__test_data__tar_float64.tar":
        ("generated tar whose storages are plain tuples (torch cannot load it)",
         "tensor storage is not a persistent id"),
    "tracel-ai__burn/crates__burn-store__src__pytorch__tests__reader__test_data__tar_weight_bias.tar":
        ("generated tar whose storages are plain tuples (torch cannot load it)",
         "tensor storage is not a persistent id"),
}

# Malicious files that are broken as well: they fail, one line each.
MALICIOUS_FAILURES = {
    "tests__data2__keyerror-exploit.pkl": "memo index 3 not set",
    "tests__data2__type-confusion-exploit.pkl": "module and name must be str",
    "tests__data__broken_model.pkl": "not a PyTorch checkpoint",
    "tests__data__malicious1.7z": "not a PyTorch checkpoint",
    "tests__data__malicious1_0x1.zip": "encrypted entries are not supported",
    "tests__data__malicious1_central_directory.zip": "does not match the central directory",
    "tests__data__malicious1_wrong_ext.zip": "without a data.pkl record",
}


def path_of(row):
    return os.path.join(FIXTURES, row["local_name"])


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def weights_only_load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def loadable(row):
    return row["torch113_loads"] == "ok"


@pytest.mark.parametrize("row", ROWS, ids=[r["local_name"] for r in ROWS])
def test_opens_or_fails_as_expected(row):
    path = path_of(row)
    r = run("ls", path)
    expected = EXPECTED_FAILURES.get(row["local_name"])
    if expected is None:
        assert r.returncode == 0, r.stderr.decode()
        info = run("info", path)
        assert info.returncode == 0, info.stderr.decode()
        return
    why, phrase = expected
    assert r.returncode == 1, "opens now (%s): remove it from EXPECTED_FAILURES" % why
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and phrase in lines[0], lines


def test_expected_failures_list():
    """Every listed file exists and torch cannot load it either."""
    rows = {r["local_name"]: r for r in ROWS}
    for name in EXPECTED_FAILURES:
        assert name in rows, name
        assert not loadable(rows[name]), name
    names = {os.path.basename(p) for p in MALICIOUS}
    assert set(MALICIOUS_FAILURES) <= names


def script_state(obj):
    """(path, tensor) of a TorchScript module: attribute paths."""
    return [(k.replace(".", "/"), v) for k, v in obj.state_dict().items()]


@needs_fuse
@pytest.mark.parametrize("row", [r for r in ROWS if loadable(r)],
                         ids=[r["local_name"] for r in ROWS if loadable(r)])
def test_same_tree_as_torch(row):
    path = path_of(row)
    obj = weights_only_load(path)
    with mounted(path) as mnt:
        if isinstance(obj, torch.jit.ScriptModule):
            for p, t in script_state(obj):
                with open(os.path.join(mnt, p), "rb") as f:
                    assert f.read() == oracle.tensor_bytes(t), p
            return
        oracle.compare_mount(mnt, obj, stem(path))
        # tensors through numpy.memmap too
        for p, kind, val in oracle.expected(obj, stem(path)):
            val = oracle.as_tensor(val)
            if kind != "tensor" or not torch.is_tensor(val) or val.numel() == 0:
                continue
            val = val.detach()
            if val.dtype in (torch.bfloat16,) or val.is_quantized:
                continue
            f = os.path.join(os.fsencode(mnt), p)
            m = np.memmap(f, dtype=val.numpy().dtype, mode="r", shape=tuple(val.shape))
            assert np.array_equal(np.asarray(m), val.contiguous().numpy(), equal_nan=True), p
            del m


@pytest.mark.parametrize("path", MALICIOUS, ids=[os.path.basename(p) for p in MALICIOUS])
def test_malicious_is_inert(path, tmp_path):
    """Opening never runs anything: no program started besides ptfs, no
    connection, no file created, and the file fails only if listed."""
    r, execs, connects, left = inert_run(["info", path], tmp_path)
    assert len(execs) == 1 and PTFS in execs[0], execs
    assert not connects and not left, (connects, left)
    phrase = MALICIOUS_FAILURES.get(os.path.basename(path))
    if phrase is not None:
        lines = r.stderr.decode().strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1, r
        assert path in lines[0] and phrase in lines[0], lines
        return
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "warning: " in out or "warnings: none" in out
    r = run("ls", "--max", "2000", path)
    assert r.returncode == 0


def test_malicious_globals_named():
    """The classic os.system / eval payloads are named by `ptfs info`."""
    named = 0
    for path in MALICIOUS:
        out = run("info", path).stdout.decode()
        for g in ("os.system", "posix.system", "builtins.eval", "builtins.exec",
                  "subprocess.", "builtins.__import__", "nt.system"):
            if "dangerous global " + g in out:
                named += 1
                break
    assert named >= 10, named


def test_pickle_hidden_after_stop_is_scanned():
    """A second pickle hidden after the first one's STOP is decoded (inert)
    and its globals are named, as a scanner would."""
    p = os.path.join(FIXTURES, "mmaitre314__picklescan/malicious/tests__data__malicious6.pkl")
    assert os.path.exists(p)
    out = run("info", p).stdout.decode()
    assert "dangerous global requests.api.get" in out
    assert "another pickle of 60 bytes follows at offset 28" in out
