# SPDX-License-Identifier: MIT
"""What a file manager calls the files of a `ptfs open` mount: with the
MIME packages of contrib/desktop/ in a private XDG_DATA_HOME, GLib (`gio
info -a standard::content-type`, what GNOME Files and pcmanfm ask) must
type every tensor file application/x-ptfs-tensor and no other file so,
whatever the keys: optimizer state, RNN and ViT parameter names, list
items, and text values named like parameters (README "Desktop file
managers"; -o suffix, docs/LAYOUT.md "NAME.tensor with -o suffix")."""
import os
import shutil
import stat
import subprocess

import pytest
import torch

from conftest import PTFS, ROOT, needs_fuse
from viewutil import png_decode

HAVE_GIO = shutil.which("gio") and shutil.which("update-mime-database")
needs_gio = pytest.mark.skipif(
    not HAVE_GIO, reason="needs gio: gio or update-mime-database not installed (contrib/setup.sh)")
TENSOR_TYPE = "application/x-ptfs-tensor"


def hard_names_checkpoint(path):
    """Keys the name globs of earlier MIME packages missed (tensors) or
    took (text)."""
    torch.manual_seed(0)
    sd = {"enc.0.weight": torch.randn(4, 3), "enc.0.bias": torch.randn(4),
          "rnn.weight_ih_l0": torch.randn(6, 3), "rnn.bias_hh_l0": torch.randn(6),
          "vit.pos_embed": torch.randn(1, 5, 4), "vit.cls_token": torch.randn(1, 1, 4),
          "norm.gamma": torch.ones(4), "norm.beta": torch.zeros(4),
          "empty": torch.zeros(0)}
    cfg = {"use_bias": True, "loss_weight": 0.5, "bias": False, "weight": "uniform",
           "gamma": 0.99, "step": 10, "notes.tensor": "a text value"}
    opt = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4, 3),
                         "exp_avg_sq": torch.rand(4, 3)}},
           "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0]}]}
    torch.save({"model": sd, "config": cfg, "optimizer": opt,
                "buffers": [torch.arange(3), torch.ones(2, 2), 7, "x"]}, path)


def mime_env(tmp):
    data = os.path.join(tmp, "share")
    os.makedirs(os.path.join(data, "mime/packages"))
    for x in ("ptfs-tensor.xml", "ptfs-checkpoint.xml"):
        shutil.copy(os.path.join(ROOT, "contrib/desktop", x), os.path.join(data, "mime/packages"))
    subprocess.run(["update-mime-database", os.path.join(data, "mime")], check=True,
                   capture_output=True)
    run = os.path.join(tmp, "run")
    os.mkdir(run, 0o700)
    return dict(os.environ, HOME=tmp, XDG_DATA_HOME=data, XDG_DATA_DIRS="/usr/share",
                XDG_RUNTIME_DIR=run)


def content_types(paths, env):
    r = subprocess.run(["gio", "info", "-a", "standard::content-type"] + paths, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out, path = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("local path: "):
            path = line[len("local path: "):]
        elif line.strip().startswith("standard::content-type: "):
            out[path] = line.split(": ", 1)[1]
    return out


def files_below(mp):
    """(relative path, is a tensor file) of the files a file manager shows."""
    for d, dirs, files in os.walk(mp):
        if d == mp:
            dirs.remove(".ptfs")
        for f in files:
            p = os.path.join(d, f)
            if stat.S_ISREG(os.lstat(p).st_mode):
                yield os.path.relpath(p, mp), "user.ptfs.dtype" in os.listxattr(p)


@needs_gio
@needs_fuse
def test_open_mount_types_every_tensor_file_and_nothing_else(tmp_path):
    ck = str(tmp_path / "train_state.pt")
    hard_names_checkpoint(ck)
    env = mime_env(str(tmp_path))
    r = subprocess.run([PTFS, "open", "-n", ck], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    mp = r.stdout.rstrip("\n")
    try:
        files = dict(files_below(mp))
        types = content_types([os.path.join(mp, p) for p in files], env)
        # NAME.png beside NAME.tensor is the tensor's picture
        png = os.path.join(mp, "model/rnn/weight_ih_l0.png")
        data = open(png, "rb").read()
        assert os.path.getsize(png) == len(data) > 0
        w, h, _ = png_decode(data)          # 6 rows of 3
        assert h == 2 * w > 0
    finally:
        subprocess.run([PTFS, "close", ck], env=env, capture_output=True, timeout=60)
    typed = {p: types[os.path.join(mp, p)] == TENSOR_TYPE for p in files}
    tensors = [p for p, t in files.items() if t]
    # the hard names are there, as tensor files and as text files
    for p in ("optimizer/state/0/exp_avg.tensor", "optimizer/state/0/exp_avg_sq.tensor",
              "optimizer/state/0/step.tensor", "model/rnn/weight_ih_l0.tensor",
              "model/vit/pos_embed.tensor", "model/norm/gamma.tensor", "buffers/0.tensor",
              "buffers/1.tensor"):
        assert files.get(p) is True, (p, sorted(files))
    for p in ("config/use_bias", "config/loss_weight", "config/bias", "config/weight",
              "config/gamma", "config/step", "config/notes/tensor", "buffers/2", "buffers/3",
              "optimizer/param_groups/0/lr"):
        assert files.get(p) is False, (p, sorted(files))
    # GLib calls every empty file text/plain before it looks at the name
    # (a 0-element tensor's file is 0 bytes): counted apart
    assert files.get("model/empty.tensor") is True
    full = [p for p in tensors if p != "model/empty.tensor"]
    missed = [p for p in full if not typed[p]]
    wrong = [p for p, t in files.items() if not t and typed[p]]
    assert len(full) == 13 and missed == [], missed
    assert wrong == [], wrong


def test_suffix_layout_names(tmp_path):
    """-o suffix without nested: a tensor file is KEY.tensor, and a value
    that is no tensor but whose key ends in ".tensor" (any case) has that
    dot escaped, so only tensor files end in it."""
    ck = str(tmp_path / "s.pt")
    torch.save({"a.weight": torch.ones(2), "b.tensor": "text", "c.TENSOR": 1,
                "d.tensor": torch.zeros(1), "l": [torch.ones(1), 2]}, ck)
    r = subprocess.run([PTFS, "ls", "-o", "suffix", ck], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    names = [line.split()[2] for line in r.stdout.splitlines()]
    assert names == ["a.weight.tensor", "b%2Etensor", "c%2ETENSOR", "d.tensor.tensor",
                     "l/", "l/0.tensor", "l/1"], names
    r = subprocess.run([PTFS, "cat", "-o", "suffix", ck, "b%2Etensor"], capture_output=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == b"text\n", r.stderr
