# SPDX-License-Identifier: MIT
"""FUSE round trips for browsing: the requests the daemon sees
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


def read_json_files(mnt, names):
    out = {}
    for name in names:
        fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
        try:
            out[name] = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    return out


def read_all_json(mnt, order=sorted):
    """Every NAME.json of the top directory, in @order of the listing
    (sorted: layer.1, layer.10, layer.100, ...; list: listing order)."""
    return read_json_files(mnt, [n for n in order(os.listdir(mnt)) if n.endswith(".json")])


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
    # -s: no sidecar push (see below), one OPEN, READ, RELEASE per file
    with DebugMount(ckpt, "-s") as m:
        want = read_all_json(m.mnt)
        rw = m.counts()
    assert len(want) == N and rw["OPEN"] >= N and rw["READ"] >= N
    with DebugMount(ckpt, "-s", "-o", "ro") as m:
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


@pytest.mark.parametrize("order", ["listing", "sorted"])
@pytest.mark.parametrize("ro", [False, True], ids=["rw", "ro"])
def test_sidecars_pushed_ahead_of_readers(ckpt, order, ro):
    """A sidecar read through a request pushes the next ones into the
    kernel's page cache (notify_store): reading all 500 costs a few
    READs, in listing order or sorted, with the same bytes as one READ
    per file (-s, which pushes nothing)."""
    with DebugMount(ckpt, "-s", "-o", "ro") as m:
        want = read_all_json(m.mnt)
    opts = ["-o", "ro"] if ro else []
    with DebugMount(ckpt, *opts) as m:
        # ls -l: entries come with attributes (READDIRPLUS), so the
        # kernel knows every file; a plain listing would not show them
        subprocess.run(["ls", "-l", m.mnt], stdout=subprocess.DEVNULL, check=True)
        names = os.listdir(m.mnt)
        names = sorted(names) if order == "sorted" else names
        names = [n for n in names if n.endswith(".json")]
        got = read_json_files(m.mnt, names)
        c = m.counts()
        assert got == want
    # windows of 16, 32, 64, ... cover 500 files in 5 misses in listing
    # order, 6 sorted: each window is pushed before the miss is answered,
    # so the count does not depend on timing (it did while the push ran
    # after the reply: 6-14 here, 59 once on CI).  Twice that leaves room
    # for a window started afresh after a stall of a second.
    assert c["READ"] <= 12, c
    if ro:
        assert c["OPEN"] <= 1, c
    else:
        assert c["OPEN"] >= N, c


def test_push_after_lookups_only(ckpt):
    """Sidecars read by name, never listed (lookups only): pushes reach
    only files the kernel was shown, and every read is still right."""
    with DebugMount(ckpt, "-s", "-o", "ro") as m:
        want = read_json_files(m.mnt, ["layer.%d.weight.json" % i for i in range(0, N, 50)])
    with DebugMount(ckpt, "-o", "ro") as m:
        got = read_json_files(m.mnt, ["layer.%d.weight.json" % i for i in range(0, N, 50)])
        c = m.counts()
    assert got == want
    # the first is a miss; later ones may have been pushed
    assert 1 <= c["READ"] <= len(want), c


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


def _read_in_order(args):
    mnt, names = args
    return read_json_files(mnt, names)


@pytest.mark.parametrize("threads", ["2", "10"])
def test_concurrent_readers_and_pushes(ckpt, threads):
    """Four readers in four orders at once, two or ten workers: a push
    waits for page locks that other readers' READs hold, which must
    never stall the daemon (every read finishes, with the right bytes)."""
    import random
    from concurrent.futures import ProcessPoolExecutor
    with DebugMount(ckpt, "-s", "-o", "ro") as m:
        want = read_all_json(m.mnt)
    names = sorted(want)
    orders = [names, names[::-1], sorted(names, key=lambda n: int(n.split(".")[1])),
              random.Random(7).sample(names, len(names))]
    for round_ in range(3):
        with DebugMount(ckpt, "-o", "max_threads=" + threads) as m:
            subprocess.run(["ls", "-l", m.mnt], stdout=subprocess.DEVNULL, check=True)
            with ProcessPoolExecutor(4) as ex:
                futs = [ex.submit(_read_in_order, (m.mnt, o)) for o in orders]
                for f in futs:
                    assert f.result(timeout=60) == want
