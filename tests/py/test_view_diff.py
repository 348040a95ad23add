# SPDX-License-Identifier: MIT
"""ptfs diff: exit status like diff(1), matching keys across formats,
bytes compared before values."""
import json
import math

import numpy as np
import pytest
import torch

from conftest import run
from viewutil import st_write

ST_DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
         torch.int64: "I64", torch.int8: "I8", torch.bool: "BOOL"}


def export_st(path, sd):
    """The safetensors export of a flat state dict (written by hand)."""
    tensors = []
    for k, t in sd.items():
        t = t.contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        tensors.append((k, ST_DT[t.dtype], list(t.shape), raw))
    st_write(path, tensors)


def diff(*args):
    r = run("diff", "--json", *args)
    doc = json.loads(r.stdout) if r.stdout else None
    return r.returncode, doc, r


def by_key(doc):
    return {t["key"]: t for t in doc["tensors"]}


@pytest.fixture
def sd():
    torch.manual_seed(1)
    return {"embed.weight": torch.randn(50, 16),
            "layers.0.attn.weight": torch.randn(16, 16).bfloat16(),
            "layers.0.attn.bias": torch.zeros(16, dtype=torch.float16),
            "layers.0.mask": torch.rand(4, 4) > 0.5,
            "steps": torch.tensor([3, 4], dtype=torch.int64)}


def test_itself(tmp_path, sd):
    p = str(tmp_path / "a.pt")
    torch.save(sd, p)
    rc, doc, r = diff(p, p)
    assert rc == 0, r.stderr.decode()
    assert doc["equal"] and doc["summary"]["same"] == 5
    r = run("diff", p, p)
    assert r.returncode == 0
    assert r.stdout.decode().strip().endswith("5 tensors, 5 same")


def test_one_element_edit(tmp_path, sd):
    a, b = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    torch.save(sd, a)
    sd2 = {k: v.clone() for k, v in sd.items()}
    sd2["embed.weight"][7, 3] += 0.5
    torch.save(sd2, b)
    rc, doc, _ = diff(a, b)
    assert rc == 1 and not doc["equal"]
    t = by_key(doc)
    e = t["embed.weight"]
    assert e["status"] == "changed" and e["changed_values"] == 1
    assert e["max_abs_diff"] == pytest.approx(0.5, rel=1e-6)
    want = 0.5 / float(sd["embed.weight"].double().norm())
    assert e["rel_l2"] == pytest.approx(want, rel=1e-6)
    assert all(t[k]["status"] == "same" for k in t if k != "embed.weight")
    text = run("diff", a, b)
    assert text.returncode == 1
    assert "~ embed.weight  float32 [50, 16]  1 of 800 values differ" in text.stdout.decode()
    # a NaN appearing is a non-finite change
    sd2["embed.weight"][0, 0] = math.nan
    torch.save(sd2, b)
    e = by_key(diff(a, b)[1])["embed.weight"]
    assert e["changed_values"] == 2 and e["nonfinite_changes"] == 1


def test_renamed_key(tmp_path, sd):
    a, b = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    torch.save(sd, a)
    sd2 = dict(sd)
    sd2["steps_renamed"] = sd2.pop("steps")
    torch.save(sd2, b)
    rc, doc, _ = diff(a, b)
    t = by_key(doc)
    assert rc == 1
    assert t["steps"]["status"] == "removed" and t["steps_renamed"]["status"] == "added"
    assert doc["summary"]["same"] == 4
    out = run("diff", a, b).stdout.decode()
    assert "- steps  int64 [2]" in out and "+ steps_renamed  int64 [2]" in out


def test_safetensors_export(tmp_path, sd):
    a, s = str(tmp_path / "a.pt"), str(tmp_path / "a.safetensors")
    torch.save(sd, a)
    export_st(s, sd)
    rc, doc, r = diff(a, s)
    assert rc == 0, r.stdout.decode()
    # a nested .pt (dicts of dicts) matches the dotted keys too
    n = str(tmp_path / "nested.pt")
    torch.save({"embed": {"weight": sd["embed.weight"]},
                "layers": [{"attn": {"weight": sd["layers.0.attn.weight"],
                                     "bias": sd["layers.0.attn.bias"]},
                            "mask": sd["layers.0.mask"]}],
                "steps": sd["steps"]}, n)
    rc, doc, r = diff(n, s)
    assert rc == 0, r.stdout.decode()
    # and with --nested both sides are trees a/b/c
    rc, doc, r = diff("--nested", a, s)
    assert rc == 0, r.stdout.decode()


def test_dtype_and_shape_changes(tmp_path, sd):
    a, b = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    torch.save(sd, a)
    sd2 = dict(sd)
    sd2["embed.weight"] = sd["embed.weight"].half()
    sd2["steps"] = torch.tensor([3, 4, 5])
    torch.save(sd2, b)
    t = by_key(diff(a, b)[1])
    e = t["embed.weight"]
    assert e["status"] == "dtype" and e["b"]["dtype"] == "float16"
    err = (sd["embed.weight"] - sd2["embed.weight"].float()).abs().max().item()
    assert e["max_abs_diff"] == pytest.approx(err, rel=1e-6)
    assert t["steps"]["status"] == "shape"


def test_trouble(tmp_path, sd):
    a, bad = str(tmp_path / "a.pt"), str(tmp_path / "bad.pt")
    torch.save(sd, a)
    with open(bad, "wb") as f:
        f.write(b"PK\x03\x04 this is not a checkpoint")
    r = run("diff", a, bad)
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and bad in err[0]
    assert run("diff", a).returncode == 2
    assert run("diff", a, str(tmp_path / "missing.pt")).returncode == 2


def test_dcp_against_consolidated(tmp_path):
    """A DCP checkpoint (chunked over two files) against the torch.save of
    the same state dict: equal; then one element edited: that tensor."""
    from test_dcp import T, grid_of, make_2x, rows_of, tentry
    names = ["model.layers.0.attn.weight", "model.layers.0.attn.bias",
             "optim.state.0.exp_avg", "embed/tok", "mask", "c64", "bf"]
    chunks = {"model.layers.0.attn.weight": rows_of(T["model.layers.0.attn.weight"], [3, 4, 9]),
              "embed/tok": grid_of(T["embed/tok"], 3, 4, raw=True),
              "bf": grid_of(T["bf"], 2, 2)}
    dcp = make_2x(str(tmp_path / "dcp"), [tentry(n, T[n], chunks.get(n)) for n in names])
    pt = str(tmp_path / "consolidated.pt")
    torch.save({n: T[n] for n in names}, pt)
    rc, doc, r = diff(dcp, pt)
    assert rc == 0, r.stdout.decode() + r.stderr.decode()
    assert doc["summary"]["same"] == len(names)
    edited = {n: T[n].clone() for n in names}
    edited["model.layers.0.attn.weight"][5, 2] = 100.0
    torch.save(edited, pt)
    rc, doc, _ = diff(dcp, pt)
    t = by_key(doc)
    assert rc == 1 and t["model.layers.0.attn.weight"]["status"] == "changed"
    assert t["model.layers.0.attn.weight"]["changed_values"] == 1
    assert doc["summary"]["same"] == len(names) - 1


@pytest.mark.parametrize("how", ["one", "two chunks", "all"])
def test_rel_l2_over_the_whole_tensor(tmp_path, how):
    """A tensor of four 1 MiB chunks: ||a - b|| / ||a|| is over every
    element, the chunks that did not change included (they were once left
    out of ||a||, which made rel_l2 about sqrt(chunks) too large)."""
    import numpy as np
    torch.manual_seed(3)
    a = torch.randn(1024, 1024)
    b = a.clone()
    if how == "one":
        b[700, 5] += 1.0
    elif how == "two chunks":
        b[0, 0] -= 2.0
        b[1000, 1000] += 3.0
    else:
        b += 0.25
    pa, pb = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    torch.save({"w": a}, pa)
    torch.save({"w": b}, pb)
    rc, doc, _ = diff(pa, pb)
    e = by_key(doc)["w"]
    x, y = a.double().numpy(), b.double().numpy()
    want = np.linalg.norm(x - y) / np.linalg.norm(x)
    assert rc == 1 and e["rel_l2"] == pytest.approx(want, rel=1e-9)
    assert e["changed_values"] == int((x != y).sum())


def test_values_that_are_not_tensors(tmp_path):
    """epoch, lr and a run name differ, the model does not: that is a
    difference (exit 1), each value on its own line; --tensors-only keeps
    the tensors-only comparison."""
    m = {"w": torch.arange(12.0).reshape(3, 4)}
    a, b = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    torch.save({"epoch": 3, "lr": 0.1, "name": "run-1", "model": m}, a)
    torch.save({"epoch": 4, "lr": 0.01, "name": "run-2", "model": m, "extra": True}, b)
    r = run("diff", a, b)
    out = r.stdout.decode()
    assert r.returncode == 1, out
    for line in ("~ epoch  3 -> 4", "~ lr  0.1 -> 0.01", '~ name  "run-1" -> "run-2"',
                 "+ extra  true"):
        assert line in out.splitlines(), out
    assert out.strip().endswith("1 tensor, 1 same; 4 other values, 0 same, 3 changed, 1 added")
    rc, doc, _ = diff(a, b)
    vals = {v["key"]: v for v in doc["values"]}
    assert rc == 1 and not doc["equal"]
    assert vals["epoch"] == {"key": "epoch", "status": "changed", "a": 3, "b": 4}
    assert vals["extra"]["status"] == "added" and doc["values_summary"]["changed"] == 3
    r = run("diff", "--tensors-only", a, b)
    assert r.returncode == 0 and r.stdout.decode().strip().endswith("1 tensor, 1 same")
    r = run("diff", a, a)
    assert r.returncode == 0 and "1 same; 3 other values, 3 same" in r.stdout.decode()


def test_where_the_changes_are(tmp_path):
    """The first change in C order and the largest one, with both values,
    as numpy finds them."""
    import numpy as np
    torch.manual_seed(5)
    a = torch.randn(64, 1024)
    b = a.clone()
    b[3, 1000] += 0.5
    b[40, 7] -= 9.0
    b[63, 1023] += 2.0
    pa, pb = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    torch.save({"w": a}, pa)
    torch.save({"w": b}, pb)
    e = by_key(diff(pa, pb)[1])["w"]
    x, y = a.numpy(), b.numpy()
    changed = np.argwhere(x != y)
    first = [int(i) for i in changed[0]]
    big = [int(i) for i in np.unravel_index(np.argmax(np.abs(x - y)), x.shape)]
    assert e["first_change"]["index"] == first == [3, 1000]
    assert e["first_change"]["a"] == pytest.approx(float(x[3, 1000]))
    assert e["first_change"]["b"] == pytest.approx(float(y[3, 1000]))
    assert e["largest_change"]["index"] == big == [40, 7]
    text = run("diff", pa, pb).stdout.decode()
    assert "first at [3, 1000]" in text and "largest at [40, 7]" in text
