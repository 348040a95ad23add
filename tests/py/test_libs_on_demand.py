# SPDX-License-Identifier: MIT
"""libarchive and libcrypto are loaded with dlopen when first needed
(core/base/dl.h), not at start; pictures need no library at all.  A directory of unloadable stand-ins
on LD_LIBRARY_PATH shows both halves: what does not need a library works
without it, and what does fails with one line naming the checkpoint and
the library (never a crash, never one line per tensor)."""
import os
import subprocess

import torch

from conftest import PTFS
from test_legacy import save_tar, tar_obj

LIBS = {"libarchive.so.13": "libarchive", "libcrypto.so.3": "libcrypto",
        "libpng16.so.16": "libpng"}


def broken_libs(tmp_path):
    d = os.path.join(tmp_path, "broken-libs")
    os.mkdir(d)
    for name in LIBS:
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"not a shared object\n")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = d
    return env


def ptfs(env, *args):
    return subprocess.run([PTFS, *args], capture_output=True, env=env,
                          timeout=120)


def one_line(r, *words):
    assert r.returncode == 1, r
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_start_loads_none_of_them(tmp_path):
    env = broken_libs(tmp_path)
    path = os.path.join(tmp_path, "m.pt")
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3)}, path)
    for args in (["--version"], ["info", path], ["ls", path], ["cat", path, "w.json"]):
        r = ptfs(env, *args)
        assert r.returncode == 0 and r.stderr == b"", (args, r)
    out = ptfs(env, "--version").stdout.decode()
    for lib in LIBS.values():
        assert (lib in out) == (lib != "libpng"), out
    assert "loaded on the first tar checkpoint" in out


def test_tar_without_libarchive(tmp_path):
    env = broken_libs(tmp_path)
    path = os.path.join(tmp_path, "old.pt")
    obj, views = tar_obj()
    save_tar(obj, path, views)
    assert ptfs(dict(os.environ), "ls", path).returncode == 0
    for cmd in ("ls", "info"):
        line = one_line(ptfs(env, cmd, path), path, "libarchive",
                        "libarchive.so.13")
        assert "Debian: libarchive13" in line


def test_stat_without_libcrypto(tmp_path):
    env = broken_libs(tmp_path)
    path = os.path.join(tmp_path, "m.pt")
    torch.save({"t%d" % i: torch.full((4,), float(i)) for i in range(50)}, path)
    assert ptfs(dict(os.environ), "stat", path).returncode == 0
    one_line(ptfs(env, "stat", path), path, "libcrypto", "sha256")
    one_line(ptfs(env, "stat", path, "--json"), path, "libcrypto")


def test_preview_without_libpng(tmp_path):
    env = broken_libs(tmp_path)
    path = os.path.join(tmp_path, "m.pt")
    out = os.path.join(tmp_path, "w.png")
    torch.save({"w": torch.rand(32, 32)}, path)
    assert ptfs(dict(os.environ), "preview", path, "w", "--output", out).returncode == 0
    want = open(out, "rb").read()
    os.unlink(out)
    # pictures are written by ptfs itself (core/view/png.c): an unloadable
    # libpng on the library path changes nothing
    assert ptfs(env, "preview", path, "w", "--output", out).returncode == 0
    assert open(out, "rb").read() == want
