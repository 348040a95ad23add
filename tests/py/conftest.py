# SPDX-License-Identifier: MIT
"""Shared fixtures for the integration tests.

Checkpoints are made with Debian's torch during the test; mounts are real
FUSE mounts of the ptfs binary named by $PTFS_BIN.  Every mount is
unmounted when its test ends, pass or fail, and the daemon must then exit
cleanly (no sanitizer report, exit status 0).
"""
import contextlib
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import oracle

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PTFS = os.environ.get("PTFS_BIN") or os.path.join(ROOT, "build", "ptfs")
SHARED = os.environ.get("PTFS_SHARED") or os.path.join(ROOT, "..", "shared")
FIXTURES = os.path.join(SHARED, "fixtures", "real")

have_fuse = os.path.exists("/dev/fuse") and shutil.which("fusermount3")
needs_fuse = pytest.mark.skipif(not have_fuse, reason="no /dev/fuse or fusermount3")


def run(*args, input=None, check=False):
    """Run ptfs with arguments; return CompletedProcess (bytes)."""
    return subprocess.run([PTFS, *args], input=input, capture_output=True,
                          check=check, timeout=300)


def is_mounted(path):
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == real for line in f)


def unmount(path):
    for _ in range(50):
        if not is_mounted(path):
            return
        r = subprocess.run(["fusermount3", "-u", path], capture_output=True)
        if r.returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True)


@contextlib.contextmanager
def mounted(ckpt, *opts, foreground=True, expect_rc=0):
    """Mount @ckpt on a fresh directory and yield its path.

    By default the daemon runs with -f as our child, so that its exit
    status and its stderr (sanitizer reports) are checked at unmount.
    """
    mnt = tempfile.mkdtemp(prefix="ptfs-mnt-")
    errlog = tempfile.TemporaryFile()
    proc = None
    try:
        if foreground:
            proc = subprocess.Popen([PTFS, "-f", *opts, ckpt, mnt],
                                    stdout=subprocess.DEVNULL, stderr=errlog)
            deadline = time.time() + 60
            while not is_mounted(mnt):
                if proc.poll() is not None:
                    errlog.seek(0)
                    raise AssertionError("ptfs exited: %s" % errlog.read().decode())
                if time.time() > deadline:
                    raise AssertionError("mount did not appear")
                time.sleep(0.02)
        else:
            r = run(*opts, ckpt, mnt)
            assert r.returncode == 0, r.stderr.decode()
            assert is_mounted(mnt)
        yield mnt
    finally:
        unmount(mnt)
        if proc is not None:
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            errlog.seek(0)
            err = errlog.read().decode(errors="replace")
            assert "Sanitizer" not in err and "runtime error" not in err, err
            assert rc == expect_rc, "ptfs exited with %d: %s" % (rc, err)
        os.rmdir(mnt)


@pytest.fixture
def mount():
    return mounted


@pytest.fixture(scope="session")
def ckdir():
    d = tempfile.mkdtemp(prefix="ptfs-ck-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def fixture_rows():
    """Rows of PROVENANCE.tsv (dicts), or [] without ../shared."""
    path = os.path.join(FIXTURES, "PROVENANCE.tsv")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        head = f.readline().rstrip("\n").split("\t")
        return [dict(zip(head, line.rstrip("\n").split("\t"))) for line in f]
