# SPDX-License-Identifier: MIT
"""FUSE round trips for browsing (issue 17): the requests the daemon sees
(counted in its -d log) for `ls -l` and for reading every NAME.json, on
writable and read-only mounts, and that the cheaper answers keep the
contents and the errors users expect."""
import collections
import errno
import os
import re
import subprocess
import tempfile
import time

import pytest
import torch

import make_ckpts
from conftest import PTFS, is_mounted, needs_fuse, unmount

pytestmark = needs_fuse

N = 500


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("rt") / "wide.pt")
    torch.save(make_ckpts.wide(N), p)
    return p


class DebugMount:
    """ptfs -d as our child, its log (one line per request) in a file."""

    def __init__(self, ckpt, *opts):
        self.argv = [PTFS, "-d", *opts, ckpt]

    def __enter__(self):
        self.mnt = tempfile.mkdtemp(prefix="ptfs-rt-")
        self.log = tempfile.NamedTemporaryFile(prefix="ptfs-rt-log-")
        self.proc = subprocess.Popen(self.argv + [self.mnt], stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        deadline = time.time() + 60
        while not is_mounted(self.mnt):
            assert self.proc.poll() is None, "ptfs exited"
            assert time.time() < deadline, "mount did not appear"
            time.sleep(0.02)
        return self

    def counts(self):
        c = collections.Counter()
        with open(self.log.name, errors="replace") as f:
            for line in f:
                m = re.search(r"opcode: (\w+)", line)
                if m:
                    c[m.group(1)] += 1
        return c

    def __exit__(self, *exc):
        unmount(self.mnt)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        os.rmdir(self.mnt)
        self.log.close()
        assert rc == 0 or exc[0] is not None, "ptfs exited with %d" % rc
        return False


def read_all_json(mnt):
    out = {}
    for name in sorted(os.listdir(mnt)):
        if name.endswith(".json"):
            fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
            try:
                out[name] = os.read(fd, 1 << 16)
            finally:
                os.close(fd)
    return out


def test_ls_l_asks_no_xattr_per_file(ckpt):
    with DebugMount(ckpt) as m:
        out = subprocess.run(["ls", "-l", m.mnt], capture_output=True, text=True, check=True)
        assert len(out.stdout.splitlines()) == 1 + 2 * N
        c = m.counts()
        # security.selinux and system.posix_acl_access: EOPNOTSUPP, which
        # ls remembers for the device (ENODATA would be 2 per file)
        assert c["GETXATTR"] <= 4, c
        assert c["LOOKUP"] + c["GETATTR"] <= 4, c
        p = os.path.join(m.mnt, "layer.3.weight")
        for name in ("security.selinux", "system.posix_acl_access", "trusted.x"):
            with pytest.raises(OSError) as e:
                os.getxattr(p, name)
            assert e.value.errno == errno.EOPNOTSUPP, name
        assert os.getxattr(p, "user.ptfs.shape") == b"[2]"
        with pytest.raises(OSError) as e:
            os.getxattr(p, "user.nope")
        assert e.value.errno == errno.ENODATA


def test_read_only_mount_opens_without_requests(ckpt):
    with DebugMount(ckpt) as m:
        want = read_all_json(m.mnt)
        rw = m.counts()
    assert len(want) == N and rw["OPEN"] >= N and rw["READ"] >= N
    with DebugMount(ckpt, "-o", "ro") as m:
        assert read_all_json(m.mnt) == want
        assert read_all_json(m.mnt) == want     # from the page cache
        with open(os.path.join(m.mnt, "layer.7.weight"), "rb") as f:
            assert f.read() == torch.full((2,), 7.0).numpy().tobytes()
        with pytest.raises(OSError) as e:
            open(os.path.join(m.mnt, "layer.7.weight"), "r+b")
        assert e.value.errno == errno.EROFS
        c = m.counts()
    # one OPEN (answered ENOSYS: the kernel opens files itself from then
    # on), no RELEASE, one READ per file for both rounds
    assert c["OPEN"] <= 1 and c["RELEASE"] == 0 and c["FLUSH"] <= 1, c
    assert N <= c["READ"] <= N + 2, c


def test_unwritable_format_mounts_read_only(tmp_path):
    p = str(tmp_path / "legacy.pt")
    make_ckpts.save({"w": torch.ones(4)}, p, legacy=True)
    mnt = str(tmp_path / "m")
    os.mkdir(mnt)
    r = subprocess.run([PTFS, p, mnt], capture_output=True, text=True)
    try:
        assert r.returncode == 0, r.stderr
        assert "mounted read-only" in r.stderr
        with open(os.path.join(mnt, "w"), "rb") as f:
            assert f.read() == torch.ones(4).numpy().tobytes()
        with pytest.raises(OSError) as e:
            open(os.path.join(mnt, "w"), "r+b")
        assert e.value.errno == errno.EROFS
        with open("/proc/self/mountinfo") as f:
            line = next(x for x in f if x.split()[4] == os.path.realpath(mnt))
        assert "ro" in line.split()[5].split(",")
    finally:
        unmount(mnt)
