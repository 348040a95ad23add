# SPDX-License-Identifier: MIT
"""Real checkpoints other projects made with many torch versions
(../shared/fixtures/real).  Foreign files are compared with torch only
through torch.load(..., weights_only=True); nothing else unpickles them.

- a file that torch 1.13 loads with weights_only=True gives the same tree
  (through the mount: every file read, tensors also through numpy.memmap);
- every other file either opens or fails with one clear line naming it;
- malicious pickles open without anything being run, and `ptfs info`
  names the dangerous globals.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import oracle
from conftest import FIXTURES, PTFS, fixture_rows, mounted, needs_fuse, run

ROWS = [r for r in fixture_rows() if "/malicious/" not in r["local_name"]]
MALICIOUS = sorted(
    os.path.join(d, f)
    for d, _, files in os.walk(FIXTURES) if d.endswith("malicious")
    for f in files) if os.path.isdir(FIXTURES) else []

pytestmark = pytest.mark.skipif(not ROWS, reason="no ../shared/fixtures")


def path_of(row):
    return os.path.join(FIXTURES, row["local_name"])


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def weights_only_load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def loadable(row):
    return row["torch113_loads"] == "ok"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["local_name"])
def test_opens_or_fails_clearly(row):
    path = path_of(row)
    r = run("ls", path)
    if r.returncode == 0:
        info = run("info", path)
        assert info.returncode == 0
        return
    assert r.returncode == 1, r
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and path in lines[0], lines
    # files torch can load must open
    assert not (loadable(row) and row["container"] in ("zip", "legacy-pickle")), lines[0]


def script_state(obj):
    """(path, tensor) of a TorchScript module: attribute paths."""
    return [(k.replace(".", "/"), v) for k, v in obj.state_dict().items()]


@needs_fuse
@pytest.mark.parametrize("row", [r for r in ROWS if loadable(r)],
                         ids=lambda r: r["local_name"])
def test_same_tree_as_torch(row):
    path = path_of(row)
    obj = weights_only_load(path)
    if run("ls", path).returncode != 0:
        pytest.skip("format not supported yet: %s" % run("ls", path).stderr.decode().strip())
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


@pytest.mark.parametrize("path", MALICIOUS, ids=os.path.basename)
def test_malicious_is_inert(path, tmp_path):
    """Opening never runs anything: a canary file the payloads could touch
    is not created, and dangerous globals are reported."""
    env = dict(os.environ, HOME=str(tmp_path))
    r = subprocess.run([PTFS, "info", path], capture_output=True, env=env, timeout=60)
    if r.returncode != 0:
        lines = r.stderr.decode().strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and path in lines[0], r
        return
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
    if not os.path.exists(p):
        pytest.skip("fixture not present")
    out = run("info", p).stdout.decode()
    assert "dangerous global requests.api.get" in out
    assert "another pickle of 60 bytes follows at offset 28" in out
