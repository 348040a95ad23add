# SPDX-License-Identifier: MIT
"""The mount's generated files: NAME.png with -o previews (size known
before the read, same bytes as `ptfs preview`), /.ptfs/stats mirroring the
tree (same numbers as `ptfs stat`)."""
import json
import os

import pytest
import torch

from conftest import mounted, needs_fuse, run
from viewutil import png_decode


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    torch.manual_seed(3)
    sd = {"enc": {"w": torch.randn(40, 30), "b": torch.randn(30), "one": torch.ones(1)},
          "w": torch.eye(8), "w.png": torch.zeros(3), "step": 7}
    p = str(tmp_path_factory.mktemp("vm") / "m.pt")
    torch.save(sd, p)
    return p


@needs_fuse
def test_previews(ck):
    with mounted(ck, "-o", "previews") as m:
        names = sorted(n for n in os.listdir(m) if n != ".ptfs")
        # w claims w, w.json and w.png; the key "w.png" comes after it
        assert names == ["enc", "step", "w", "w.json", "w.png", "w.png~2",
                         "w.png~2.json", "w.png~2.png"], names
        enc = sorted(os.listdir(os.path.join(m, "enc")))
        assert enc == ["b", "b.json", "b.png", "one", "one.json", "one.png", "w", "w.json",
                       "w.png"]
        # picture in the mount -> the tensor's path without previews
        for rel, tensor_path in (("w.png", "w"), ("enc/w.png", "enc/w"),
                                 ("enc/b.png", "enc/b"), ("w.png~2.png", "w.png"),
                                 ("enc/one.png", "enc/one")):
            path = os.path.join(m, rel)
            size = os.stat(path).st_size            # before any read
            with open(path, "rb") as f:
                data = f.read()
            assert size == len(data) > 0
            r = run("preview", ck, tensor_path, "--output", "-")
            assert r.returncode == 0 and r.stdout == data, rel
        w, h, rows = png_decode(open(os.path.join(m, "w.png"), "rb").read())
        assert (w, h) == (64, 64) and rows[0][0] == (178, 24, 43)
        # the tensor file itself is unchanged
        with open(os.path.join(m, "w"), "rb") as f:
            assert f.read() == torch.eye(8).numpy().tobytes()


@needs_fuse
def test_no_previews_by_default(ck):
    with mounted(ck) as m:
        assert "w.png" in os.listdir(m)          # the key, not a picture
        assert "w.png~2" not in os.listdir(m)
        assert not any(n.endswith(".png") and n != "w.png" for n in os.listdir(m))


@needs_fuse
def test_stats_tree(ck):
    want = {t["path"]: t for t in json.loads(run("stat", "--json", ck).stdout)["tensors"]}
    with mounted(ck) as m:
        base = os.path.join(m, ".ptfs", "stats")
        assert sorted(os.listdir(base)) == ["enc", "w.json", "w.png.json"]
        assert sorted(os.listdir(os.path.join(base, "enc"))) == ["b.json", "one.json", "w.json"]
        for path, t in want.items():
            with open(os.path.join(base, path + ".json")) as f:
                got = json.load(f)
            t = dict(t)
            del t["path"]
            assert got == t, path
        assert os.stat(os.path.join(base, "enc", "w.json")).st_size > 0


@needs_fuse
def test_pictures_and_stats_follow_writes(tmp_path):
    p = str(tmp_path / "w.pt")
    torch.save({"w": torch.zeros(4, 4)}, p)
    with mounted(p, "-o", "previews") as m:
        png = os.path.join(m, "w.png")
        st = os.path.join(m, ".ptfs", "stats", "w.json")
        zero = png_decode(open(png, "rb").read())[2]
        assert zero[0][0] == (150, 150, 150) and zero[4][6] == (255, 255, 255)
        assert json.load(open(st))["max"] == 0
        with open(os.path.join(m, "w"), "r+b") as f:
            f.write(torch.ones(1).numpy().tobytes())      # w[0, 0] = 1
        rows = png_decode(open(png, "rb").read())[2]
        assert os.stat(png).st_size == len(open(png, "rb").read())
        assert rows[0][0] == (178, 24, 43) and rows[63][63] == (255, 255, 255)
        assert json.load(open(st))["max"] == 1
