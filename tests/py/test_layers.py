# SPDX-License-Identifier: MIT
"""Behaviour fixed when core/ was split into layer folders: the shared
option parser, errors that reach the user, text that is never mangled."""
import errno
import os
import re

import pytest
import torch

from conftest import ROOT, mounted, needs_fuse, run

LIMITS = ["max_records", "max_pickle_bytes", "max_inflate_bytes",
          "max_values", "max_memo", "max_memory", "max_depth", "max_rank",
          "max_dir_entries", "max_walk_entries", "max_walk_bytes"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("small") / "s.pt")
    torch.save({"a": torch.arange(4.0), "b": {str(i): i for i in range(5)}}, p)
    return p


@pytest.mark.parametrize("limit", LIMITS)
def test_every_limit_reaches_the_cli(small, limit):
    r = run("ls", "-o", "%s=100000" % limit, small)
    assert r.returncode == 0, r.stderr
    assert b"a" in r.stdout


@pytest.mark.parametrize("value", ["0", "-1", "", "1x", "99999999999999999999999"])
def test_bad_limit_values_are_usage_errors(small, value):
    for limit in ("max_depth", "max_values"):
        r = run("ls", "-o", "%s=%s" % (limit, value), small)
        assert r.returncode == 2, (limit, value, r)
        assert limit.encode() in r.stderr.splitlines()[0]


@needs_fuse
def test_mount_refuses_a_zero_limit_like_the_cli(small, tmp_path):
    mnt = str(tmp_path / "m")
    os.mkdir(mnt)
    r = run("-o", "max_depth=0", small, mnt)
    assert r.returncode == 2 and b"max_depth" in r.stderr


@needs_fuse
@pytest.mark.parametrize("limit", LIMITS)
def test_every_limit_reaches_the_mount(small, limit):
    with mounted(small, "-o", "%s=100000" % limit) as mnt:
        assert "a" in os.listdir(mnt)


def test_directory_over_max_dir_entries_is_an_error_in_ls(small):
    r = run("ls", "-o", "max_dir_entries=1", small)
    assert r.returncode == 1
    assert b"File too large" in r.stderr


@needs_fuse
def test_directory_over_max_dir_entries_is_efbig_in_readdir(small):
    with mounted(small, "-o", "max_dir_entries=4") as mnt:
        # the root (.ptfs, a, a.json, b) fits; b has 5 entries
        assert sorted(os.listdir(mnt)) == [".ptfs", "a", "a.json", "b"]
        for _ in range(2):  # and says so every time
            with pytest.raises(OSError) as e:
                os.listdir(os.path.join(mnt, "b"))
            assert e.value.errno == errno.EFBIG


@pytest.mark.parametrize("args", [("ls",), ("info",), ("cat", "a")])
def test_stdout_errors_fail_the_command(small, args):
    cmd = [args[0], small, *args[1:]]
    with open("/dev/full", "wb") as full:
        import subprocess
        from conftest import PTFS
        r = subprocess.run([PTFS, *cmd], stdout=full, stderr=subprocess.PIPE,
                           timeout=60)
    assert r.returncode == 1, r
    assert r.stderr.strip()


def _latin1_ckpt(path, text_utf8):
    """A protocol 2 legacy checkpoint whose bytes value b'\\xff\\xfeA' is
    pickled as _codecs.encode('ÿþA', 'latin1'); the str is then replaced
    by @text_utf8 (same length, so the pickle stays well formed)."""
    torch.save({"b": b"\xff\xfeA"}, path, pickle_protocol=2,
               _use_new_zipfile_serialization=False)
    data = open(path, "rb").read()
    assert data.count(b"\xc3\xbf\xc3\xbeA") == 1
    open(path, "wb").write(data.replace(b"\xc3\xbf\xc3\xbeA", text_utf8))


def test_latin1_bytes(tmp_path):
    p = str(tmp_path / "ok.pt")
    _latin1_ckpt(p, b"\xc3\xbf\xc3\xbeA")
    r = run("cat", p, "b")
    assert r.returncode == 0 and r.stdout == b"\xff\xfeA"


@pytest.mark.parametrize("text", [b"\xc4\x81\xc3\xbeA",   # U+0101: not latin-1
                                  b"\xd0\x81\xc3\xbeA",   # U+0401
                                  b"\xc2\xc3\xc3\xbeA"])  # C2 without a continuation
def test_text_past_latin1_is_refused(tmp_path, text):
    """Python refuses to load _codecs.encode('ā', 'latin1'); so do we,
    instead of mounting byte 01."""
    p = str(tmp_path / "bad.pt")
    _latin1_ckpt(p, text)
    r = run("cat", p, "b")
    assert r.returncode == 1
    assert b"latin-1" in r.stderr


def _architecture_section(title):
    text = open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    start = text.index("## " + title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_architecture_describes_the_layer_file():
    """ARCHITECTURE's layers are core/LAYERS's folders, in its order (one
    bold heading per layer, naming its folders)."""
    folders = []
    with open(os.path.join(ROOT, "core", "LAYERS"), encoding="utf-8") as fh:
        for line in fh:
            words = line.split("#", 1)[0].split()
            folders += [w.rstrip("/").split("/")[-1] for w in words[1:]]
    named = []
    for bold in re.findall(r"^\*\*(.+?)\*\*", _architecture_section("The layers"), re.M):
        named += re.findall(r"(\w+)/", bold)
    assert named == folders


def test_architecture_read_walk_names_real_functions():
    """Every function the read walk names is defined in core/ or fs/."""
    sources = []
    for top in ("core", "fs"):
        for d, _dirs, files in os.walk(os.path.join(ROOT, top)):
            sources += [open(os.path.join(d, f), encoding="utf-8").read()
                        for f in files if f.endswith((".c", ".h"))]
    code = "\n".join(sources)
    names = set(re.findall(r"`((?:pt_|pt__|ptfs_|ov_)\w+|do_read|checkpoint_changed|storage_read)(?:\(\))?`",
                           _architecture_section("How a FUSE read travels")))
    assert len(names) > 10
    for name in sorted(names):
        assert re.search(r"^[a-z].*\b%s\(" % name, code, re.M), name
