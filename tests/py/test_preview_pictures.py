# SPDX-License-Identifier: MIT
"""The pictures of -o previews and of the thumbnailer: NAME.png's size is
known from the tensor's shape before any read (a listing reads no tensor
byte, counted by the daemon's user.ptfs.tensor_reads), conv weights as a
grid of kernels (1 x 1 ones as a matrix), all-zero tensors hatched,
1-element tensors as a swatch, 0-element ones as an empty frame,
thumbnails with Thumb::URI and Thumb::MTime, deflated."""
import os
import struct
import subprocess

import pytest
import torch

from conftest import mounted, needs_fuse, run
from viewutil import png_decode

WHITE, RED, BLUE = (255, 255, 255), (178, 24, 43), (33, 102, 172)
NAN, FRAME, HATCH, GAP = (0, 200, 0), (150, 150, 150), (205, 205, 205), (96, 96, 96)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
          torch.complex64, torch.complex128]
SHAPES = [(), (5,), (3, 4), (2, 3, 4), (2, 3, 3, 3), (2, 2, 20, 20), (200, 150, 3, 3)]


def png_texts(data):
    """The tEXt chunks of a PNG as a dict of str."""
    pos, out = 8, {}
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"tEXt":
            key, text = data[pos + 8:pos + 8 + n].split(b"\0", 1)
            out[key.decode("latin-1")] = text.decode("latin-1")
        pos += 12 + n
    return out


def tensor_reads(mnt):
    return int(os.getxattr(mnt, "user.ptfs.tensor_reads"))


def preview(ck, name):
    r = run("preview", ck, name, "--output", "-")
    assert r.returncode == 0, r.stderr.decode()
    return png_decode(r.stdout)


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory):
    torch.manual_seed(5)
    sd = {}
    for dt in DTYPES:
        for shape in SHAPES:
            t = torch.randn(shape) * 50
            t = t.to(dt) if not dt.is_complex else torch.complex(t, -t).to(dt)
            sd["%s_r%d_%d" % (str(dt)[6:], len(shape), sum(shape))] = t
    p = str(tmp_path_factory.mktemp("pics") / "every.pt")
    torch.save(sd, p)
    return p, sorted(sd)


@needs_fuse
def test_size_before_read_every_dtype_and_rank(every_dtype):
    ck, names = every_dtype
    with mounted(ck, "-o", "previews") as m:
        before = tensor_reads(m)
        sizes = {n: os.stat(os.path.join(m, n + ".png")).st_size for n in names}
        assert tensor_reads(m) == before        # no stat sampled a tensor
        for n in names:
            with open(os.path.join(m, n + ".png"), "rb") as f:
                data = f.read()
            assert len(data) == sizes[n] > 0, n
            w, h, rows = png_decode(data)
            assert len(rows) == h and len(rows[0]) == w, n
            assert os.stat(os.path.join(m, n + ".png")).st_size == len(data), n
        assert tensor_reads(m) > before         # the reads drew them


@needs_fuse
def test_ls_l_reads_no_tensor(tmp_path):
    p = str(tmp_path / "flat.pt")
    torch.save({"layer%d.weight" % i: torch.randn(300, 200) for i in range(30)}, p)
    with mounted(p, "-o", "previews") as m:
        before = tensor_reads(m)
        r = subprocess.run(["ls", "-l", m], capture_output=True, check=True)
        assert r.stdout.count(b".png") == 30
        subprocess.run(["ls", "-lR", m], capture_output=True, check=True)
        assert tensor_reads(m) == before
        with open(os.path.join(m, "layer0.weight.png"), "rb") as f:
            f.read()
        assert tensor_reads(m) > before


def test_conv_grid_tiles(tmp_path):
    # kernel (o, i) is -1 but for +1 at (o % 3, i): 4 x 3 tiles of 3 x 3,
    # 4 px an element, a 1 px gap after each tile
    w = -torch.ones(4, 3, 3, 3)
    for o in range(4):
        for i in range(3):
            w[o, i, o % 3, i] = 1
    p = str(tmp_path / "conv.pt")
    torch.save({"w": w}, p)
    width, height, rows = preview(p, "w")
    assert (width, height) == (3 * 13 - 1, 4 * 13 - 1)
    for o in range(4):
        for i in range(3):
            for ky in range(3):
                for kx in range(3):
                    want = RED if (ky, kx) == (o % 3, i) else BLUE
                    for dy in range(4):
                        for dx in range(4):
                            y, x = o * 13 + ky * 4 + dy, i * 13 + kx * 4 + dx
                            assert rows[y][x] == want, (o, i, ky, kx)
    for y in range(height):                    # the gaps between tiles
        assert rows[y][12] == rows[y][25] == GAP
    for x in range(width):
        assert rows[12][x] == rows[25][x] == rows[38][x] == GAP
    texts = png_texts(run("preview", p, "w", "--output", "-").stdout)
    assert "conv weights 4 x 3 of 3 x 3 kernels" in texts["Description"]


def test_conv_grid_capped(tmp_path):
    # 200 x 150 kernels at 512 px: the first 128 x 128, 1 px each
    w = torch.zeros(200, 150, 3, 3)
    w[127, 127, 1, 1] = 1
    w[128, 0] = -1                             # not shown
    p = str(tmp_path / "big.pt")
    torch.save({"w": w}, p)
    width, height, rows = preview(p, "w")
    assert (width, height) == (511, 511)
    assert rows[127 * 4 + 1][127 * 4 + 1] == RED
    assert BLUE not in {px for row in rows for px in row}
    assert "the first 128 x 128 shown" in png_texts(
        run("preview", p, "w", "--output", "-").stdout)["Description"]


def test_zero_and_one_element(tmp_path):
    p = str(tmp_path / "s.pt")
    torch.save({"neg": torch.tensor(-3.0), "zero": torch.zeros(1), "nan": torch.tensor(
        float("nan")), "bias": torch.zeros(64), "big": torch.tensor([7], dtype=torch.int64)},
        p)
    for name, colour in (("neg", BLUE), ("nan", NAN), ("big", RED)):
        width, height, rows = preview(p, name)
        assert (width, height) == (64, 64)
        assert {px for row in rows for px in row} == {colour}, name
    for name in ("zero", "bias"):              # not a blank square
        width, height, rows = preview(p, name)
        assert rows[0][0] == FRAME and rows[height - 1][width - 1] == FRAME
        assert {px for row in rows[2:-2] for px in row[2:-2]} == {WHITE, HATCH}
    texts = png_texts(run("preview", p, "bias", "--output", "-").stdout)
    assert "every value drawn is 0" in texts["Description"]
    assert "value -3;" in png_texts(run("preview", p, "neg", "--output", "-").stdout)[
        "Description"]


@needs_fuse
def test_no_elements_empty_frame_and_1x1_conv_matrix(tmp_path):
    """A tensor of no elements has its picture too (a labelled empty
    frame, nothing read); a 1 x 1 conv weight is its out x in matrix."""
    w = -torch.ones(8, 16, 1, 1)
    w[3, 5] = 1
    p = str(tmp_path / "e.pt")
    torch.save({"empty": torch.zeros(3, 0, 4, dtype=torch.float16), "pw": w}, p)
    with mounted(p, "-o", "previews") as m:
        assert "empty.png" in os.listdir(m)
        before = tensor_reads(m)
        with open(os.path.join(m, "empty.png"), "rb") as f:
            data = f.read()
        assert tensor_reads(m) == before
        assert len(data) == os.stat(os.path.join(m, "empty.png")).st_size
    width, height, rows = png_decode(data)
    assert (width, height) == (64, 64)
    assert rows[0][0] == rows[63][63] == FRAME and rows[10][10] == WHITE
    assert rows[32][32] == FRAME                # the slash of the sign
    assert "float16 tensor of shape [3, 0, 4]: no elements" in png_texts(data)["Description"]
    width, height, rows = preview(p, "pw")      # 8 x 16, 4 px an element
    assert (width, height) == (64, 32)
    assert {px for row in rows for px in row} == {RED, BLUE}
    assert rows[3 * 4][5 * 4] == RED and rows[3 * 4][6 * 4] == BLUE
    assert "folded to 8 x 16" in png_texts(run("preview", p, "pw", "--output", "-").stdout)[
        "Description"]


@needs_fuse
def test_thumbnail_one_element_with_thumb_chunks(tmp_path):
    p = str(tmp_path / "t.pt")
    torch.save({"step": torch.tensor(7.0), "w": torch.randn(8, 8)}, p)
    out = str(tmp_path / "out.png")
    with mounted(p) as m:
        for name in ("step", "w"):
            path = os.path.join(m, name)
            r = run("thumbnail", "-s", "128", path, out)
            assert r.returncode == 0 and r.stderr == b"", r
            data = open(out, "rb").read()
            thumb = png_decode(data)
            # the preview's pixels, deflated: a thumbnail promises no size
            r = run("preview", "-s", "128", p, name, "--output", "-")
            assert r.returncode == 0 and png_decode(r.stdout) == thumb
            assert len(data) < len(r.stdout) // 4, (len(data), len(r.stdout))
            texts = png_texts(data)
            assert texts["Thumb::URI"] == "file://" + os.path.realpath(path)
            assert texts["Thumb::MTime"] == str(int(os.stat(path).st_mtime))
        r = run("thumbnail", "--uri", "file:///x/a%20b", os.path.join(m, "step"), out)
        assert r.returncode == 0, r
        assert png_texts(open(out, "rb").read())["Thumb::URI"] == "file:///x/a%20b"
    with open(os.path.join(os.path.dirname(__file__), "../../contrib/desktop/ptfs.thumbnailer")) as f:
        assert "--uri %u %i %o" in f.read()
