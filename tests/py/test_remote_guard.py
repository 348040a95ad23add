# SPDX-License-Identifier: MIT
"""What a remote mount promises beyond reading (README "Remote
checkpoints"), against real servers on loopback: versions never mix
(whatever validator the server gives), secrets are never printed and
credentials go to their own origin only, unreachable servers fail at open
without retries, and the deadline holds.  Requests are counted in nginx's
access log or by the stand-in servers (remote_servers.py)."""
import os
import shutil
import subprocess
import tempfile
import time

import pytest
import torch

import oracle
import remote_servers as rs
from conftest import PTFS, mounted, needs_fuse

pytestmark = pytest.mark.skipif(
    subprocess.run([PTFS, "ls", "http://127.0.0.1:1/x.pt"],
                   capture_output=True).stderr.find(b"without libcurl") >= 0,
    reason="ptfs built without libcurl")

# nginx configurations: the validators a server may give
VALIDATORS = {
    "etag": "",
    "mtime": "etag off;",
    "none": 'etag off; add_header Last-Modified "";',
}
NO_VALIDATOR = "neither an ETag nor a Last-Modified"


def ptfs(*args, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([PTFS, *args], capture_output=True, timeout=timeout,
                          env=e)


@pytest.fixture
def root():
    d = tempfile.mkdtemp(prefix="ptfs-guard-")
    os.chmod(d, 0o755)          # nginx's worker reads it
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def o(cache, *more):
    return ["-o", ",".join(["cache_dir=" + cache] + list(more))]


def save(obj, path, mtime=None):
    torch.save(obj, path + ".tmp")
    os.chmod(path + ".tmp", 0o644)
    if mtime is not None:
        os.utime(path + ".tmp", (mtime, mtime))
    os.rename(path + ".tmp", path)


@pytest.mark.parametrize("kind", sorted(VALIDATORS))
def test_validator_sent_and_warned_once(root, cache, kind):
    """ETag: If-Match and If-Range on every range request; Last-Modified:
    If-Unmodified-Since; neither: one warning at open; the tensor reads
    right in every case."""
    g = torch.Generator().manual_seed(1)
    want = {"w": torch.randn(4 << 20, generator=g)}          # 16 MiB
    save(want, os.path.join(root, "m.pt"))
    with rs.Nginx(root, extra=VALIDATORS[kind]) as n:
        m = n.mark()
        r = ptfs("cat", *o(cache), n.url("m.pt"), "w")
        assert r.returncode == 0, r.stderr
        assert r.stdout == oracle.tensor_bytes(want["w"])
        err = r.stderr.decode()
        assert err.count(NO_VALIDATOR) == (1 if kind == "none" else 0), err
        assert err.count("\n") == (1 if kind == "none" else 0), err
        ranges = n.since(m, "m.pt")[2:]         # after the open's two
        assert ranges, n.since(m)
        for e in ranges:
            if kind == "etag":
                assert e["if_match"] not in ("", "-") and \
                    e["if_range"] == e["if_match"], e
            else:
                assert e["if_match"] == "-" and e["if_range"] == "-", e
            if kind == "mtime":
                assert e["if_unmodified_since"].endswith("GMT"), e
            else:
                assert e["if_unmodified_since"] == "-", e


@needs_fuse
@pytest.mark.parametrize("kind", sorted(VALIDATORS))
def test_replaced_mid_mount_never_mixes(root, cache, tmp_path, kind):
    """The object is replaced while mounted, after the open cached the
    first MiB and the last 2 MiB of a 24 MiB tensor: reading the tensor
    then fails with EIO (never old blocks with new ones), with one log
    line naming the URL and nothing about disks or commits."""
    path = os.path.join(root, "m.pt")
    old = torch.zeros(6 << 20)
    save({"w": old}, path, mtime=time.time() - 100)
    log = str(tmp_path / "ptfs.log")
    with rs.Nginx(root, extra=VALIDATORS[kind]) as n:
        url = n.url("m.pt")
        with mounted(url, *o(cache, "log=" + log)) as mnt:
            assert "w" in os.listdir(mnt)
            # a new version: other values, a few bytes longer
            save({"w": torch.ones(6 << 20), "pad": torch.ones(3)}, path)
            m = n.mark()
            with pytest.raises(OSError) as e:
                with open(os.path.join(mnt, "w"), "rb") as f:
                    got = f.read()
                    # never reached; if it were, it must be all old
                    assert got == oracle.tensor_bytes(old)
            assert e.value.errno == 5
            assert n.since(m, "m.pt"), "no request after the change"
            with pytest.raises(OSError):        # and it stays so
                with open(os.path.join(mnt, "w"), "rb") as f:
                    f.seek(12 << 20)
                    f.read(4096)
        with open(log) as f:
            lines = [ln for ln in f if "changed" in ln]
        assert len(lines) == 1, lines
        assert url in lines[0] and "changed on the server" in lines[0], lines
        assert "on disk" not in lines[0] and "commit" not in lines[0], lines
