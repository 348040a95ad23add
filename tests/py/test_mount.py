# SPDX-License-Identifier: MIT
"""The mount as a whole: daemon life cycle, big directories, concurrent
readers, xattrs, /.ptfs, a checkpoint that changes underneath."""
import errno
import hashlib
import json
import multiprocessing
import os
import subprocess
import time
import zipfile

import numpy as np
import pytest
import torch

import make_ckpts
from conftest import PTFS, is_mounted, mounted, needs_fuse, run, unmount

pytestmark = needs_fuse


@pytest.fixture(scope="module")
def wide_ckpt(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("wide") / "wide.pt")
    torch.save(make_ckpts.wide(20000), p)
    return p


@pytest.fixture(scope="module")
def dtypes_ckpt(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("dt") / "dt.pt")
    torch.save(make_ckpts.every_dtype(), p)
    return p


def test_daemon_returns_when_mounted_and_exits_on_unmount(dtypes_ckpt, tmp_path):
    mnt = str(tmp_path / "m")
    os.mkdir(mnt)
    r = run(dtypes_ckpt, mnt)
    try:
        assert r.returncode == 0, r.stderr
        # usable by the very next command
        assert "float32" in os.listdir(mnt)
        pids = subprocess.run(["pgrep", "-f", "ptfs .*%s" % mnt],
                              capture_output=True, text=True).stdout.split()
        assert pids
    finally:
        unmount(mnt)
    for _ in range(100):
        alive = [p for p in pids if os.path.exists("/proc/%s" % p)]
        if not alive:
            break
        time.sleep(0.05)
    assert not alive and not is_mounted(mnt)


def test_mount_errors(tmp_path):
    mnt = str(tmp_path / "m")
    os.mkdir(mnt)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    r = run(str(bad), mnt)
    assert r.returncode == 1 and not is_mounted(mnt)
    assert len(r.stderr.decode().strip().splitlines()) == 1
    r = run(str(tmp_path / "missing.pt"), mnt)
    assert r.returncode == 1 and not is_mounted(mnt)


def test_wide_directory(wide_ckpt):
    with mounted(wide_ckpt) as mnt:
        names = os.listdir(mnt)
        assert len(names) == 1 + 2 * 20000
        assert names[1:5] == ["layer.0.weight", "layer.0.weight.json",
                              "layer.1.weight", "layer.1.weight.json"]
        st = os.stat(os.path.join(mnt, "layer.19999.weight"))
        assert st.st_size == 8
        assert np.fromfile(os.path.join(mnt, "layer.12345.weight"), np.float32)[0] == 12345
        tree = json.load(open(os.path.join(mnt, ".ptfs", "tree.json")))
        assert tree["tensors"] == 20000 and len(tree["entries"]) == 20000
        e = tree["entries"][7]
        assert e["path"] == "layer.7.weight" and e["tensor"]["shape"] == [2]


def _digest_all(mnt, names, rounds):
    h = hashlib.sha256()
    for _ in range(rounds):
        for n in names:
            with open(os.path.join(mnt, n), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def test_concurrent_readers(dtypes_ckpt):
    obj = torch.load(dtypes_ckpt)
    names = list(obj)
    with mounted(dtypes_ckpt) as mnt:
        want = _digest_all(mnt, names, 1)
        with multiprocessing.get_context("fork").Pool(6) as pool:
            got = pool.starmap(_digest_all, [(mnt, names, 1)] * 12)
        assert all(g == want for g in got)


def test_xattrs(dtypes_ckpt):
    with mounted(dtypes_ckpt) as mnt:
        p = os.path.join(mnt, "bfloat16")
        assert os.getxattr(p, "user.ptfs.dtype") == b"bfloat16"
        assert os.getxattr(p, "user.ptfs.shape") == b"[3, 5]"
        names = set(os.listxattr(p))
        assert {"user.ptfs.dtype", "user.ptfs.shape", "user.ptfs.stride",
                "user.ptfs.nbytes"} <= names
        out = subprocess.run(["getfattr", "-d", p], capture_output=True, text=True).stdout
        assert 'user.ptfs.dtype="bfloat16"' in out
        with pytest.raises(OSError) as e:
            os.getxattr(p, "user.nope")
        assert e.value.errno == errno.ENODATA


def test_records_equal_zipfile(dtypes_ckpt):
    with mounted(dtypes_ckpt) as mnt, zipfile.ZipFile(dtypes_ckpt) as z:
        for info in z.infolist():
            with open(os.path.join(mnt, ".ptfs", "records", info.filename), "rb") as f:
                assert f.read() == z.read(info.filename), info.filename
        dis = open(os.path.join(mnt, ".ptfs", "pickle.txt")).read()
        assert "BINPERSID" in dis and "STOP" in dis
        info = open(os.path.join(mnt, ".ptfs", "info.txt")).read()
        assert "tensors: 15 (391.5 KiB of elements)" in info.splitlines()


def test_sizes_and_modes(dtypes_ckpt):
    obj = torch.load(dtypes_ckpt)
    with mounted(dtypes_ckpt) as mnt:
        for k, t in obj.items():
            st = os.stat(os.path.join(mnt, k))
            assert st.st_size == t.numel() * t.element_size(), k
            assert st.st_mtime == os.stat(dtypes_ckpt).st_mtime
        # du adds up exactly what stat says, and the tensors' share is
        # exactly their bytes (no block rounding, no placeholder sizes)
        out = subprocess.run(["du", "-sb", "--exclude=.ptfs", mnt],
                             capture_output=True, text=True).stdout
        walk = tensors = 0
        for d, dirs, files in os.walk(mnt):
            dirs[:] = [x for x in dirs if x != ".ptfs"]
            walk += os.lstat(d).st_size
            for f in files:
                size = os.lstat(os.path.join(d, f)).st_size
                walk += size
                tensors += 0 if f.endswith(".json") else size
        assert int(out.split()[0]) == walk
        assert tensors == sum(t.numel() * t.element_size() for t in obj.values())


def test_checkpoint_truncated_under_mount(tmp_path):
    p = str(tmp_path / "m.pt")
    torch.save({"w": torch.arange(100000, dtype=torch.float32)}, p)
    with mounted(p) as mnt:
        os.truncate(p, os.path.getsize(p) // 2)
        with pytest.raises(OSError) as e:
            with open(os.path.join(mnt, "w"), "rb") as f:
                f.read()
        assert e.value.errno == errno.EIO


def _reader(mnt, names, expect, seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        for k in names:
            with open(os.path.join(mnt, k), "rb") as f:
                data = f.read()
            if k != "w" and data != expect[k]:
                return "wrong bytes in %s" % k
            n += 1
    return n


def test_readers_with_commits_in_between(tmp_path):
    """Several processes read every tensor while commits happen: every
    byte of the unchanged tensors stays right, the changed one is always
    either the old or a new whole value."""
    p = str(tmp_path / "m.pt")
    torch.manual_seed(3)
    obj = {"a": torch.randn(300, 100), "b": torch.arange(5000), "w": torch.zeros(1000)}
    torch.save(obj, p)
    expect = {k: v.numpy().tobytes() for k, v in obj.items()}
    with mounted(p) as mnt:
        with multiprocessing.get_context("fork").Pool(4) as pool:
            res = pool.starmap_async(_reader, [(mnt, list(obj), expect, 4.0)] * 4)
            for i in range(1, 6):
                with open(os.path.join(mnt, "w"), "r+b") as f:
                    f.write(np.full(1000, i, np.float32).tobytes())
                    f.flush()
                    os.fsync(f.fileno())
                time.sleep(0.3)
            out = res.get(timeout=120)
        assert all(isinstance(n, int) and n > 0 for n in out), out
        assert np.array_equal(np.fromfile(os.path.join(mnt, "w"), np.float32),
                              np.full(1000, 5, np.float32))
    assert torch.equal(torch.load(p)["w"], torch.full((1000,), 5.0))
    with zipfile.ZipFile(p) as z:  # CRCs right after several commits
        assert z.testzip() is None


def _daemon_state(pid):
    """What a daemon that does not exit is doing: its signal masks and
    every thread's stack (gdb, when installed), for a failure message."""
    try:
        with open("/proc/%d/status" % pid) as f:
            out = "".join(l for l in f if l.startswith(("State", "Sig", "Shd")))
    except OSError as e:
        return "no /proc/%d: %s" % (pid, e)
    try:
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                            "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=60)
        out += "\n".join(l for l in r.stdout.splitlines()
                         if l.startswith(("Thread", "#")))
    except (OSError, subprocess.TimeoutExpired) as e:
        out += "no stacks: %s" % e
    return out


def _sigint_default():
    # A process started in the background by a non-interactive shell
    # inherits SIGINT ignored, and libfuse (like every well-behaved Unix
    # program) leaves an ignored SIGINT ignored.  This test is about the
    # daemon in the foreground of a terminal: give it SIGINT as a shell
    # does for a foreground command, whatever the suite was started from.
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_umount_and_sigint_end_cleanly(dtypes_ckpt, tmp_path):
    """`umount` (as root) and SIGINT in the foreground end the daemon with
    status 0 and leave nothing mounted."""
    import signal
    for how in ("umount", "sigint"):
        mnt = str(tmp_path / how)
        os.mkdir(mnt)
        proc = subprocess.Popen([PTFS, "-f", dtypes_ckpt, mnt],
                                stderr=subprocess.PIPE,
                                preexec_fn=_sigint_default)
        try:
            for _ in range(500):
                if is_mounted(mnt):
                    break
                time.sleep(0.02)
            assert os.listdir(mnt)
            if how == "umount" and os.geteuid() == 0:
                subprocess.run(["umount", mnt], check=True)
            else:
                proc.send_signal(signal.SIGINT)
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail("ptfs did not exit within 30 s of %s:\n%s"
                            % (how, _daemon_state(proc.pid)))
            assert rc == 0, (how, rc, proc.stderr.read())
            assert not is_mounted(mnt)
        finally:
            unmount(mnt)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
