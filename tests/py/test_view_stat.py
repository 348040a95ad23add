# SPDX-License-Identifier: MIT
"""ptfs stat: per-tensor statistics and sha256 against numpy/torch, on
every dtype ptfs decodes, and on the real fixtures."""
import hashlib
import json
import math
import os
import struct

import numpy as np
import pytest
import torch

from conftest import FIXTURES, fixture_corpus, fixture_rows, run
from viewutil import st_write, stat_json


def expected(values, raw):
    """The statistics ptfs promises, from numpy (float64)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    fin = v[np.isfinite(v)]
    return {
        "min": float(fin.min()) if fin.size else None,
        "max": float(fin.max()) if fin.size else None,
        "mean": float(fin.mean()) if fin.size else None,
        "std": float(fin.std()) if fin.size else None,
        "zeros": int((v == 0).sum()),
        "nan": int(np.isnan(v).sum()),
        "inf": int((v == np.inf).sum()),
        "neg_inf": int((v == -np.inf).sum()),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def check(got, want, rel=1e-9):
    for k, w in want.items():
        g = got[k]
        if w is None or k not in ("min", "max", "mean", "std"):
            assert g == w, (k, g, w)
        else:
            assert g == pytest.approx(w, rel=rel, abs=1e-12), (k, g, w)


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0]


@pytest.fixture(scope="module")
def every(tmp_path_factory):
    torch.manual_seed(5)
    base = torch.randn(37, 29, dtype=torch.float64) * 3
    ts = {}
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        t = base.to(dt).clone()
        t.view(-1)[:5] = torch.tensor(SPECIALS, dtype=dt)
        ts[str(dt).split(".")[1]] = t
    for dt in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        ts[str(dt).split(".")[1]] = (base * 20).to(dt)
    ts["bool"] = base > 0
    c = torch.complex(base, base.flip(0))
    c[0, 0] = complex(float("nan"), 1)
    c[0, 1] = complex(float("inf"), 1)
    c[0, 2] = 0
    ts["complex64"] = c.to(torch.complex64)
    ts["complex128"] = c
    ts["int64_big"] = torch.tensor([2**62 + 1, -2**63, 7], dtype=torch.int64)
    ts["view_T"] = base.float().t()            # non-contiguous view
    ts["ramp"] = torch.arange(1000, dtype=torch.float32)
    p = str(tmp_path_factory.mktemp("stat") / "every.pt")
    torch.save(ts, p)
    return p, ts


def test_every_torch_dtype(every):
    p, ts = every
    got, doc = stat_json(p)
    assert set(got) == set(ts)
    for name, t in ts.items():
        if t.is_complex():
            vals = t.numpy()
            mag = np.where(np.isnan(vals.real) | np.isnan(vals.imag), np.nan, np.abs(vals))
            want = expected(mag, raw_bytes(t))
            want["zeros"] = int(((vals.real == 0) & (vals.imag == 0)).sum())
            assert got[name]["over"] == "magnitude"
        else:
            want = expected(t.double().numpy() if t.dtype != torch.bool else t.numpy(), raw_bytes(t))
        if name == "int64_big":
            want["min"], want["max"] = -2**63, 2**62 + 1
            assert got[name]["min"] == -2**63 and got[name]["max"] == 2**62 + 1
            del want["min"], want["max"], want["mean"], want["std"]
        check(got[name], want, rel=1e-6 if "complex64" in name else 1e-9)
    assert "1 tensor contains NaN" not in doc["summary"]
    # float32/64/16/bf16 and the two complex ones have NaN
    assert "6 tensors contain NaN" in doc["summary"], doc["summary"]


def test_text_output_and_summary(every):
    p, _ = every
    r = run("stat", "-j", "1", p)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert lines[-1].startswith(p + ": 15 tensors")
    assert "6 tensors contain NaN" in lines[-1]
    ramp = [ln for ln in lines if ln.startswith("ramp ")][0]
    assert "min=0 max=999 mean=499.5" in ramp
    # one sub-path only
    r = run("stat", p, "ramp")
    assert r.returncode == 0 and r.stdout.decode().count("\n") == 2
    assert run("stat", p, "nope").returncode == 1
    assert run("stat", "-j", "0", p).returncode == 2


def test_float8_exact(tmp_path):
    """float8 and fnuz variants decoded exactly, from their bit layouts."""
    cases = {
        # dtype: [(byte, value)]
        "F8_E4M3": [(0x00, 0.0), (0x80, -0.0), (0x01, 2.0**-9), (0x08, 2.0**-6),
                    (0x38, 1.0), (0x7E, 448.0), (0xFE, -448.0), (0x7F, math.nan),
                    (0x44, 3.0)],
        "F8_E5M2": [(0x00, 0.0), (0x01, 2.0**-16), (0x3C, 1.0), (0x7B, 57344.0),
                    (0x7C, math.inf), (0xFC, -math.inf), (0x7D, math.nan),
                    (0xC0, -2.0)],
        "F8_E4M3FNUZ": [(0x00, 0.0), (0x80, math.nan), (0x40, 1.0), (0x7F, 240.0),
                        (0x01, 2.0**-10)],
        "F8_E5M2FNUZ": [(0x00, 0.0), (0x80, math.nan), (0x40, 1.0), (0x7F, 57344.0),
                        (0x01, 2.0**-17)],
        "F8_E8M0": [(0x7F, 1.0), (0x80, 2.0), (0x00, 2.0**-127), (0xFF, math.nan)],
    }
    tensors = [(k, k, [len(v)], bytes(b for b, _ in v)) for k, v in cases.items()]
    p = str(tmp_path / "f8.safetensors")
    st_write(p, tensors)
    got, _ = stat_json(p)
    for k, v in cases.items():
        vals = [x for _, x in v]
        check(got[k], expected(vals, bytes(b for b, _ in v)), rel=0)


def test_big_endian_numpy(tmp_path):
    arr = np.array([1.5, -2.25, np.nan, 1e30, 0], dtype=">f4")
    ints = np.array([-3, 70000, 5], dtype=">i4")
    p = str(tmp_path / "be.pt")
    torch.save({"f": arr, "i": ints}, p)
    got, _ = stat_json(p)
    check(got["f"], expected(arr.astype(np.float64), arr.tobytes()), rel=1e-9)
    check(got["i"], expected(ints.astype(np.float64), ints.tobytes()))


def test_quantized_stored_integers(tmp_path):
    q = torch.quantize_per_tensor(torch.linspace(-1, 1, 50), 0.01, 10, torch.quint8)
    p = str(tmp_path / "q.pt")
    torch.save({"q": q}, p)
    got, _ = stat_json(p)
    rep = q.int_repr()
    assert got["q"]["over"] == "stored integers"
    check(got["q"], expected(rep.double().numpy(), rep.numpy().tobytes()))


ROWS = [r for r in fixture_rows()
        if not r["local_name"].startswith("malicious/")]


def cat_bytes(path, sub):
    r = run("cat", path, sub)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


@fixture_corpus
def test_fixtures():
    """Every fixture ptfs opens: stat succeeds, and for up to 8 tensors
    of each the hash and the float32 mean match `ptfs cat` + numpy."""
    assert ROWS, "no fixtures listed in " + FIXTURES
    checked = 0
    for row in ROWS:
        path = os.path.join(FIXTURES, row["local_name"])
        if not os.path.isfile(path) or run("info", path).returncode != 0:
            continue
        r = run("stat", "--json", path)
        assert r.returncode in (0, 1), r.stderr.decode()
        doc = json.loads(r.stdout)
        for t in [t for t in doc["tensors"] if "error" not in t][:8]:
            raw = cat_bytes(path, t["path"])
            assert hashlib.sha256(raw).hexdigest() == t["sha256"], (path, t["path"])
            if t["dtype"] == "float32" and t["numel"]:
                v = np.frombuffer(raw, dtype="<f4").astype(np.float64)
                v = v[np.isfinite(v)]
                if v.size:
                    assert t["mean"] == pytest.approx(float(v.mean()), rel=1e-9, abs=1e-12)
            checked += 1
    assert checked > 0


def test_unsigned_and_float4(tmp_path):
    """Types torch 1.13 cannot save, written as safetensors by hand:
    uint16/32/64 (uint64 bounds past 2^53 exact) and float4 pairs."""
    u16 = np.array([0, 65535, 7], dtype="<u2")
    u32 = np.array([4000000000, 1, 0], dtype="<u4")
    u64 = np.array([2**64 - 1, 2**53 + 1, 5], dtype="<u8")
    # float4 e2m1: nibbles (low first) 0x1 = 0.5, 0x7 = 6, 0x9 = -0.5, 0xF = -6
    f4 = bytes([0x71, 0xF9])
    p = str(tmp_path / "u.safetensors")
    st_write(p, [("u16", "U16", [3], u16.tobytes()), ("u32", "U32", [3], u32.tobytes()),
                 ("u64", "U64", [3], u64.tobytes()), ("f4", "F4", [4], f4)])
    got, _ = stat_json(p)
    check(got["u16"], expected(u16.astype(np.float64), u16.tobytes()))
    check(got["u32"], expected(u32.astype(np.float64), u32.tobytes()))
    assert got["u64"]["min"] == 5 and got["u64"]["max"] == 2**64 - 1
    assert got["u64"]["sha256"] == hashlib.sha256(u64.tobytes()).hexdigest()
    check(got["f4"], expected([0.5, 6.0, -0.5, -6.0], f4), rel=0)
