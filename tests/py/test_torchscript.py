# SPDX-License-Identifier: MIT
"""TorchScript archives (torch.jit.save, .ptl; docs/FORMATS.md,
"TorchScript archives") and torch.export archives (.pt2; docs/FORMATS.md,
"torch.export archives"): generated modules through the CLI and the mount, and
every torchscript-zip / pt2 fixture.  Foreign files are only ever loaded
with torch.load(..., weights_only=True)."""
import json
import os

import pytest
import torch

import oracle
from conftest import FIXTURES, fixture_corpus, fixture_rows, mounted, needs_fuse, run


class Buffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("buf", torch.arange(6, dtype=torch.int64).reshape(2, 3))
        self.register_buffer("hbuf", torch.randn(4).half())

    def forward(self, x):
        return self.lin(x) + self.buf.sum()


class Const(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        # a tensor literal captured in code: constants.pkl gets a tensor
        return x * self.w + torch.tensor([1.5, 2.5, 3.5])


def modules():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    return {
        "seq": torch.jit.script(seq),
        "traced": torch.jit.trace(Buffers(), torch.randn(1, 3)),
        "buffers": torch.jit.script(Buffers()),
        "const": torch.jit.trace(Const(), torch.randn(3)),
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("ts")
    out = {}
    for name, m in modules().items():
        p = str(d / (name + ".pt"))
        torch.jit.save(m, p)
        out[name] = (p, m)
    m = modules()["const"]
    p = str(d / "lite.ptl")
    m._save_for_lite_interpreter(p)
    out["lite"] = (p, m)
    return out


def state(m):
    return [(k.replace(".", "/"), v) for k, v in m.state_dict().items()]


def cli_cat(path, p):
    r = run("cat", path, p)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


@pytest.mark.parametrize("name", ["seq", "traced", "buffers", "const", "lite"])
def test_state_dict_cli(saved, name):
    path, m = saved[name]
    for p, t in state(m):
        assert cli_cat(path, p) == oracle.tensor_bytes(t), p
        meta = json.loads(cli_cat(path, p + ".json"))
        assert meta["shape"] == list(t.shape)
        assert meta["dtype"] == str(t.dtype).replace("torch.", "")


def test_sequential_layout(saved):
    path, m = saved["seq"]
    assert cli_cat(path, "0/weight") == oracle.tensor_bytes(m[0].weight)
    assert cli_cat(path, "2/bias") == oracle.tensor_bytes(m[2].bias)


@pytest.mark.parametrize("name", ["const", "lite"])
def test_constants(saved, name):
    path, m = saved[name]
    c0 = cli_cat(path, ".ptfs/constants/c0")
    assert c0 == oracle.tensor_bytes(torch.tensor([1.5, 2.5, 3.5]))
    ls = run("ls", "-a", path).stdout.decode()
    assert ".ptfs/constants/c0.json" in ls


def test_lite_bytecode(saved):
    path, _ = saved["lite"]
    ls = run("ls", "-a", path).stdout.decode()
    assert ".ptfs/bytecode/" in ls
    info = run("info", path).stdout.decode()
    assert "TorchScript archive (lite interpreter" in info


@pytest.mark.parametrize("name", ["seq", "buffers"])
def test_code_and_info(saved, name):
    path, m = saved[name]
    ls = run("ls", "-a", path).stdout.decode()
    code = [l.split()[-1] for l in ls.splitlines() if ".ptfs/code/" in l and l.endswith(".py")]
    assert code, ls
    src = cli_cat(path, code[0]).decode()
    assert "def forward" in src or "class " in src
    info = run("info", path).stdout.decode()
    assert "format: TorchScript archive" in info
    assert "module: __torch__." in info


@needs_fuse
@pytest.mark.parametrize("name", ["seq", "buffers", "const", "lite"])
def test_mounted(saved, name):
    path, m = saved[name]
    with mounted(path) as mnt:
        for p, t in state(m):
            with open(os.path.join(mnt, p), "rb") as f:
                assert f.read() == oracle.tensor_bytes(t), p
        if name in ("const", "lite"):
            with open(os.path.join(mnt, ".ptfs/constants/c0"), "rb") as f:
                assert f.read() == oracle.tensor_bytes(torch.tensor([1.5, 2.5, 3.5]))
        assert os.path.isdir(os.path.join(mnt, ".ptfs/code"))


# ---- fixtures ----

ROWS = [r for r in fixture_rows()
        if r["container"] in ("torchscript-zip", "pt2") and "/malicious/" not in r["local_name"]]


def path_of(row):
    return os.path.join(FIXTURES, row["local_name"])


@fixture_corpus
@pytest.mark.parametrize("row", ROWS, ids=[r["local_name"] for r in ROWS])
def test_fixture(row):
    path = path_of(row)
    r = run("ls", "-a", path)
    if r.returncode != 0:
        lines = r.stderr.decode().strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and path in lines[0], lines
        return
    assert run("info", path).returncode == 0
    if row["torch113_loads"] != "ok":
        return
    obj = torch.load(path, map_location="cpu", weights_only=True)
    for p, t in state(obj):
        assert cli_cat(path, p) == oracle.tensor_bytes(t), p


@fixture_corpus
def test_json_layout_fixtures():
    """The 2019 layout (model.json) opens: tensors come from tensors/N."""
    rows = [r for r in ROWS if "old JSON layout" in r["notes"]]
    assert rows
    for row in rows:
        path = path_of(row)
        r = run("info", path)
        assert r.returncode == 0, r.stderr.decode()
        assert "2019 layout" in r.stdout.decode()
    # foo (tch-rs 43955603): attribute 'value' = build_tensor_from_id(0)
    path = os.path.join(FIXTURES, "LaurentMazare__tch-rs/tests__foo__at_43955603.pt")
    assert os.path.exists(path)
    assert cli_cat(path, "value") == cli_cat(path, ".ptfs/constants/c0")
    assert len(cli_cat(path, "value")) == 4


@fixture_corpus
def test_pt2_fixture():
    path = os.path.join(FIXTURES, "pytorch__executorch/extension__named_data_map__test__linear.pt2")
    assert os.path.exists(path)
    w = cli_cat(path, "linear.weight")
    meta = json.loads(cli_cat(path, "linear.weight.json"))
    assert meta["dtype"] == "float32" and meta["shape"] == [3, 3] and len(w) == 36
    assert len(cli_cat(path, "linear.bias")) == 12
    assert b"graph_module" in cli_cat(path, ".ptfs/models/model.json")
    assert "torch.export archive (.pt2)" in run("info", path).stdout.decode()


@fixture_corpus
def test_aoti_fixture():
    path = os.path.join(FIXTURES, "pytorch__executorch/preprocess.pt2")
    assert os.path.exists(path)
    info = run("info", path).stdout.decode()
    assert "AOTInductor package" in info
    assert ".ptfs/aotinductor/model/" in run("ls", "-a", path).stdout.decode()


@pytest.mark.parametrize("deflate", [False, True])
def test_export_early_layout(tmp_path, deflate):
    """torch.export.save of 2.1-2.5 (no fixture exists; built like
    torch/_export/__init__.py save() did): torch.save blobs in a zip."""
    import io
    import zipfile
    sd = {"lin.weight": torch.randn(3, 2), "lin.bias": torch.arange(3, dtype=torch.int32)}
    consts = {"c": torch.tensor([7.0, 8.0])}

    def blob(obj):
        b = io.BytesIO()
        torch.save(obj, b)
        return b.getvalue()
    p = str(tmp_path / "early.pt2")
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(p, "w", compression=method) as z:
        z.writestr("serialized_exported_program.json", "{}")
        z.writestr("serialized_state_dict.pt", blob(sd))
        z.writestr("serialized_constants.pt", blob(consts))
        z.writestr("version", "5.1")
    for k, t in sd.items():
        assert cli_cat(p, k) == oracle.tensor_bytes(t), k
    assert cli_cat(p, ".ptfs/constants/c") == oracle.tensor_bytes(consts["c"])
    assert "2.1-2.5 layout" in run("info", p).stdout.decode()
