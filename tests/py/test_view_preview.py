# SPDX-License-Identifier: MIT
"""ptfs preview: PNG size and pixels of known tensors, bounded reads on a
multi-GB tensor (a sparse 4 GiB safetensors file)."""
import re

import pytest
import torch

from conftest import run
from viewutil import png_decode, st_sparse

WHITE, RED, BLUE = (255, 255, 255), (178, 24, 43), (33, 102, 172)
NAN, PINF, NINF = (0, 200, 0), (255, 220, 0), (0, 220, 255)
FRAME, HATCH, GAP = (150, 150, 150), (205, 205, 205), (96, 96, 96)


def all_zero_picture(rows):
    """The picture of a tensor whose drawn values are all 0: a grey frame,
    grey hatching, white otherwise."""
    h, w = len(rows), len(rows[0])
    assert all(rows[y][x] == FRAME for y in (0, 1, h - 2, h - 1) for x in range(w))
    assert all(rows[y][x] == FRAME for y in range(h) for x in (0, 1, w - 2, w - 1))
    inner = [px for row in rows[2:-2] for px in row[2:-2]]
    assert set(inner) == {WHITE, HATCH}
    assert rows[2][6] == HATCH and rows[2][8] == WHITE        # (x + y) % 8 < 2


def preview(ck, path, *opts):
    r = run("preview", "-v", *opts, ck, path, "--output", "-")
    assert r.returncode == 0, r.stderr.decode()
    m = re.match(r"(\d+)x(\d+) px of (\d+) x (\d+), scale (\S+), read (\d+) bytes in (\d+) reads",
                 r.stderr.decode())
    assert m, r.stderr.decode()
    w, h, rows = png_decode(r.stdout)
    assert (w, h) == (int(m[1]), int(m[2]))
    return rows, {"rows": int(m[3]), "cols": int(m[4]), "scale": float(m[5]),
                  "bytes": int(m[6]), "reads": int(m[7]), "png": r.stdout}


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    folded = torch.zeros(2, 3, 4, 5)
    folded[1, 0, 0, 4] = 1
    t = {"zeros": torch.zeros(7, 9), "eye": torch.eye(100), "ramp": torch.arange(1000.),
         "special": torch.tensor([[1., float("nan")], [float("inf"), -float("inf")]]),
         "sign": torch.tensor([-1., 1.]), "tall": torch.randn(3000, 700),
         "folded": folded, "half": torch.eye(600).half(), "one": torch.ones(1),
         "cplx": torch.ones(4, 4, dtype=torch.complex64)}
    p = str(tmp_path_factory.mktemp("pv") / "p.pt")
    torch.save(t, p)
    return p


def test_sizes(ck):
    for name, size in (("zeros", (63, 49)), ("eye", (100, 100)), ("ramp", (512, 16)),
                       ("special", (64, 64)), ("tall", (119, 512)), ("folded", (47, 25)),
                       ("half", (512, 512)), ("sign", (64, 32))):
        rows, info = preview(ck, name)
        assert (len(rows[0]), len(rows)) == size, name
    # the same picture twice: the same bytes (a mount promises st_size)
    assert preview(ck, "tall")[1]["png"] == preview(ck, "tall")[1]["png"]
    rows, _ = preview(ck, "one")               # a swatch of its colour
    assert (len(rows[0]), len(rows)) == (64, 64)
    assert all(px == RED for row in rows for px in row)


def test_known_pixels(ck):
    rows, _ = preview(ck, "zeros")
    all_zero_picture(rows)
    rows, info = preview(ck, "eye")
    assert info["scale"] == 1
    for i in (0, 37, 99):
        assert rows[i][i] == RED
    assert rows[0][1] == WHITE and rows[50][20] == WHITE
    rows, _ = preview(ck, "half")          # 600 x 600 float16 scaled to 512
    for y in (0, 100, 511):
        assert rows[y][y] == RED
    rows, _ = preview(ck, "special")
    assert rows[0][0] == RED and rows[0][63] == NAN
    assert rows[63][0] == PINF and rows[63][63] == NINF
    rows, _ = preview(ck, "sign")
    assert rows[0][0] == BLUE and rows[31][63] == RED
    rows, _ = preview(ck, "ramp")
    reds = [rows[8][x] for x in range(512)]
    assert reds[0] == WHITE and reds[-1] == RED
    greens = [px[1] for px in reds]
    assert all(a >= b for a, b in zip(greens, greens[1:]))    # monotone
    assert rows[0] == rows[15]                                  # a strip
    rows, info = preview(ck, "folded")     # 2 x 3 tiles of 4 x 5 at 3 px
    assert (info["rows"], info["cols"]) == (2, 3)
    # [1, 0, 0, 4]: tile (1, 0) starts at y = 13, element (0, 4) at x = 12
    assert rows[13][12] == rows[15][14] == RED
    assert rows[13][11] == WHITE and rows[12][12] == GAP and rows[13][15] == GAP
    rows, _ = preview(ck, "cplx")           # |z| = 1 everywhere
    assert all(px == RED for row in rows for px in row)


def test_multi_gb_tensor_bounded_reads(tmp_path):
    p = str(tmp_path / "big.safetensors")
    st_sparse(p, "w", "F32", [32768, 32768], 4 << 30)      # 4 GiB, sparse
    rows, info = preview(p, "w")
    assert (len(rows[0]), len(rows)) == (512, 512)
    all_zero_picture(rows)
    assert info["bytes"] <= 32 << 20, info
    assert info["bytes"] >= 512 * 512 * 4       # one element per pixel
