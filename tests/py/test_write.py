# SPDX-License-Identifier: MIT
"""Writes through the mount and `ptfs set`, committed by the ZIP64
rewriter: torch.load sees the new values and every other value unchanged,
Python's zipfile finds every CRC right, data stays 64-byte aligned, and a
failed or interrupted commit leaves the checkpoint as it was."""
import errno
import os
import random
import signal
import struct
import subprocess
import time
import zipfile

import numpy as np
import pytest
import torch

from conftest import PTFS, abort_fuse, fusectl, is_mounted, mounted, needs_fuse, run, unmount


def save(path, obj):
    torch.save(obj, path)
    return path


def base_obj():
    torch.manual_seed(1)
    w = torch.randn(64, 32)
    return {"w": w, "b": torch.arange(10, dtype=torch.int64), "tied": w,
            "row": w[3], "t": w.t(), "h": torch.ones(5, dtype=torch.float16),
            "n": 7}


def check_zip(path):
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        with open(path, "rb") as f:
            for info in z.infolist():
                f.seek(info.header_offset)
                hdr = f.read(30)
                n, e = struct.unpack("<HH", hdr[26:30])
                data = info.header_offset + 30 + n + e
                if "/data/" in info.filename:
                    assert data % 64 == 0, info.filename


def assert_same_except(path, before, changed):
    after = torch.load(path)
    for k, v in before.items():
        if k in changed:
            assert torch.equal(after[k], changed[k]), k
        elif torch.is_tensor(v):
            assert torch.equal(after[k], v), k
        else:
            assert after[k] == v, k
    check_zip(path)


@needs_fuse
def test_partial_write_dd(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    before = torch.load(p)
    new = before["w"].clone()
    new.view(-1)[10:20] = 42.0
    with mounted(p) as mnt:
        patch = np.full(10, 42.0, np.float32).tobytes()
        subprocess.run(["dd", "of=" + os.path.join(mnt, "w"), "bs=4", "seek=10",
                        "conv=notrunc", "status=none"], input=patch, check=True)
        # reads see the overlay at once, the tied copy and the views too
        got = np.fromfile(os.path.join(mnt, "w"), np.float32)
        assert np.array_equal(got, new.numpy().ravel())
        assert np.array_equal(np.fromfile(os.path.join(mnt, "tied"), np.float32), got)
        assert np.array_equal(np.fromfile(os.path.join(mnt, "t"), np.float32),
                              new.t().contiguous().numpy().ravel())
        # nothing reaches the file before a commit
        assert torch.equal(torch.load(p)["w"], before["w"])
    changed = {"w": new, "tied": new, "row": new[3], "t": new.t()}
    assert_same_except(p, before, changed)


@needs_fuse
def test_whole_replace_cp_and_fsync(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    before = torch.load(p)
    src = tmp_path / "new.bin"
    newb = torch.arange(10, dtype=torch.int64) * 3
    src.write_bytes(newb.numpy().tobytes())
    st_before = os.stat(p)
    os.chmod(p, 0o640)
    with mounted(p) as mnt:
        subprocess.run(["cp", str(src), os.path.join(mnt, "b")], check=True)
        assert os.stat(os.path.join(mnt, "b")).st_size == 80
        fd = os.open(os.path.join(mnt, "b"), os.O_RDONLY)
        try:
            os.fsync(fd)  # commits now
        finally:
            os.close(fd)
        assert torch.equal(torch.load(p)["b"], newb)
        # still readable after the commit, with the new bytes
        assert np.array_equal(np.fromfile(os.path.join(mnt, "b"), np.int64), newb.numpy())
    assert os.stat(p).st_mode & 0o777 == 0o640
    assert_same_except(p, before, {"b": newb})
    del st_before


@needs_fuse
def test_memmap_write(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    before = torch.load(p)
    with mounted(p) as mnt:
        m = np.memmap(os.path.join(mnt, "h"), dtype=np.float16, mode="r+")
        m[:] = np.array([1, 2, 3, 4, 5], np.float16)
        m.flush()
        del m
    assert_same_except(p, before, {"h": torch.tensor([1, 2, 3, 4, 5], dtype=torch.float16)})


def settles(pred, tries=500):
    """Whether @pred() holds within @tries looks 10 ms apart: for what the
    daemon does after a call returns (RELEASE follows close(2))."""
    for _ in range(tries):
        if pred():
            return True
        time.sleep(0.01)
    return False


@needs_fuse
def test_wrong_size_close_fails_and_drops(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    raw = open(p, "rb").read()
    with mounted(p) as mnt:
        f = open(os.path.join(mnt, "b"), "wb")
        f.write(b"\0" * 8)
        with pytest.raises(OSError) as e:
            f.close()
        assert e.value.errno == errno.EINVAL
        # dropped at RELEASE, which the kernel sends after close returns
        assert settles(lambda: os.stat(os.path.join(mnt, "b")).st_size == 80)
        assert np.array_equal(np.fromfile(os.path.join(mnt, "b"), np.int64), np.arange(10))
        with pytest.raises(OSError) as e:
            with open(os.path.join(mnt, "b"), "r+b") as f:
                f.seek(80)
                f.write(b"x")
                f.flush()
        assert e.value.errno == errno.EFBIG
    assert open(p, "rb").read() == raw


@needs_fuse
def test_readonly_and_views_refuse_writes(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    with mounted(p, "-o", "ro") as mnt:
        with pytest.raises(OSError) as e:
            open(os.path.join(mnt, "w"), "r+b")
        assert e.value.errno == errno.EROFS
        assert os.stat(os.path.join(mnt, "w")).st_mode & 0o222 == 0
    with mounted(p) as mnt:
        assert os.stat(os.path.join(mnt, "w")).st_mode & 0o200
        assert os.stat(os.path.join(mnt, "t")).st_mode & 0o222 == 0
        with pytest.raises(OSError) as e:
            open(os.path.join(mnt, "t"), "r+b")
        assert e.value.errno == errno.EACCES
        # NAME.json takes a new dtype or shape (test_surgery_mount_new.py);
        # opened and closed unchanged it edits nothing
        with open(os.path.join(mnt, "w.json"), "r+b"):
            pass
        assert os.stat(os.path.join(mnt, "w.json")).st_mode & 0o200
    with mounted(p, "-o", "ro") as mnt:
        with pytest.raises(OSError) as e:
            open(os.path.join(mnt, "w.json"), "r+b")
        assert e.value.errno == errno.EROFS


@needs_fuse
def test_files_closed_during_a_write_see_it_when_opened_again(tmp_path):
    """The kernel keeps a file's pages between opens; a write through `w`
    makes those of `tied` and `t` (closed at the time, so nothing drops
    them when the write happens) stale, and their next open must not keep
    them."""
    p = save(str(tmp_path / "m.pt"), base_obj())
    before = torch.load(p)
    new = before["w"].clone()
    new.view(-1)[:4] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    new[3, 5] = 42.0                        # in `row` too
    with mounted(p) as mnt:
        for name in ("tied", "t", "row"):    # cached, then closed
            with open(os.path.join(mnt, name), "rb") as f:
                f.read()
        fd = os.open(os.path.join(mnt, "w"), os.O_WRONLY)
        try:
            os.pwrite(fd, new.view(-1)[:4].numpy().tobytes(), 0)
            os.pwrite(fd, new[3, 5:6].numpy().tobytes(), (3 * 32 + 5) * 4)
        finally:
            os.close(fd)
        for name, want in (("tied", new), ("t", new.t()), ("row", new[3])):
            with open(os.path.join(mnt, name), "rb") as f:
                assert f.read() == want.contiguous().numpy().tobytes(), name


WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
for i in range(int(sys.argv[2])):
    os.pwrite(fd, bytes([i % 251, 7, 9]), (i * 7) % 8000)
os.close(fd)
"""

READER = """
import os, sys
for i in range(int(sys.argv[2])):
    with open(sys.argv[1], "rb") as f:
        f.read()
"""


@needs_fuse
@pytest.mark.parametrize("opts", [("-s",), ()], ids=["one-worker", "workers"])
def test_small_writes_while_a_tied_file_is_read(tmp_path, opts):
    """Unaligned writes to `w` while `tied` (the same storage) is read over
    and over: each write has the kernel drop `tied`'s pages, and a drop
    waits for pages a READ holds.  No worker may wait for that: with one
    worker (-s) the mount would hang at the first overlap."""
    p = save(str(tmp_path / "m.pt"), base_obj())
    py = "/usr/bin/python3"
    with mounted(p, *opts) as mnt:
        dev = os.stat(mnt).st_dev
        procs = [subprocess.Popen([py, "-c", WRITER, os.path.join(mnt, "w"), "6000"]),
                 subprocess.Popen([py, "-c", READER, os.path.join(mnt, "tied"), "1500"])]
        deadline = time.time() + 120
        try:
            for pr in procs:
                rc = pr.wait(timeout=max(1, deadline - time.time()))
                assert rc == 0
        except subprocess.TimeoutExpired:
            abort_fuse(dev)     # the programs wait on locked pages
            pytest.fail("writer and reader still running after 120 s: the mount hangs")
        finally:
            for pr in procs:
                if pr.poll() is None:
                    pr.kill()
                    pr.wait()
        got = np.fromfile(os.path.join(mnt, "w"), np.uint8)
        assert np.array_equal(np.fromfile(os.path.join(mnt, "tied"), np.uint8), got)
        i = 5999
        assert list(got[(i * 7) % 8000:(i * 7) % 8000 + 3]) == [i % 251, 7, 9]


RECORD_READER = """
import os, sys
path = sys.argv[1]
while True:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.pread(fd, 4096, 0)
    os.close(fd)
"""


FSYNCER = """
import os, struct, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
for i in range(20):
    os.pwrite(fd, struct.pack("<f", float(i)), 4 * i)
    os.fsync(fd)
os.close(fd)
"""


@needs_fuse
@pytest.mark.parametrize("opts", [("-s",), ("-o", "max_threads=1"), ()],
                         ids=["s", "max_threads=1", "workers"])
def test_fsync_while_a_record_is_read(tmp_path, opts):
    """fsync commits and has the kernel drop the records it rewrote while
    another program keeps reading one of them: the drop waits for that
    READ's page, and with a single worker nobody else can answer it."""
    p = save(str(tmp_path / "m.pt"), base_obj())
    with mounted(p, *opts) as mnt:
        dev = os.stat(mnt).st_dev
        rec = os.path.join(mnt, ".ptfs", "records", "m", "data", "0")
        assert os.path.exists(rec)
        reader = subprocess.Popen(["/usr/bin/python3", "-c", RECORD_READER, rec])
        writer = subprocess.Popen(["/usr/bin/python3", "-c", FSYNCER,
                                   os.path.join(mnt, "w")])
        try:
            try:
                assert writer.wait(timeout=120) == 0
            except subprocess.TimeoutExpired:
                pytest.fail("20 writes + fsync not done in 120 s: the mount hangs")
        finally:
            reader.kill()
            for pr in (writer, reader):
                try:
                    pr.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    abort_fuse(dev)     # they wait on locked pages
                    pr.kill()
                    pr.wait()
        # with one worker the drops follow the fsync by moments
        for _ in range(100):
            with open(rec, "rb") as f:
                last = struct.unpack("<f", f.read(4 * 20)[4 * 19:])[0]
            if last == 19.0 or opts == ():
                break
            time.sleep(0.02)
        assert last == 19.0
    assert torch.load(p)["w"].view(-1)[19].item() == 19.0


@needs_fuse
def test_sigterm_while_tied_files_are_written_and_read(tmp_path):
    """SIGTERM ends the loop while requests are still queued in the kernel
    and the kernel drops pages those requests hold: the daemon answers
    them, commits and exits; nobody is left waiting on the mount.  A
    request libfuse read as the loop ended is lost, and only aborting the
    connection frees what waits on it: the daemon does that through the
    control file system, mounted here as systemd mounts it at boot."""
    w = torch.zeros(256, 256)
    p = save(str(tmp_path / "m.pt"), {"w": w, "tied": w})
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    with fusectl():
        for rnd in range(3):
            sigterm_round(p, mnt, rnd)


def sigterm_round(p, mnt, rnd):
    """One SIGTERM under a writer of `w` and a reader of `tied`."""
    proc = subprocess.Popen([PTFS, "-f", p, mnt], stderr=subprocess.PIPE)
    procs, dev = [], None
    try:
        for _ in range(500):
            if is_mounted(mnt):
                break
            time.sleep(0.02)
        dev = os.stat(mnt).st_dev
        procs = [subprocess.Popen(["/usr/bin/python3", "-c", WRITER,
                                   os.path.join(mnt, "w"), "100000000"]),
                 subprocess.Popen(["/usr/bin/python3", "-c", READER,
                                   os.path.join(mnt, "tied"), "100000000"])]
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            abort_fuse(dev)
            pytest.fail("round %d: the daemon did not exit within 60 s of SIGTERM" % rnd)
        assert rc == 0, proc.stderr.read().decode()
    finally:
        for pr in procs:
            pr.kill()
        for pr in procs:
            try:
                pr.wait(timeout=30)
            except subprocess.TimeoutExpired:
                if dev is not None:
                    abort_fuse(dev)
                pr.wait()
        unmount(mnt)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    got = torch.load(p)      # whole, and still one storage
    assert got["w"].numpy().tobytes() == got["tied"].numpy().tobytes()
    assert got["w"].data_ptr() == got["tied"].data_ptr()


@needs_fuse
def test_views_read_in_pieces_follow_writes(tmp_path):
    """A non-contiguous view read in pieces (its bytes are gathered once
    and kept) shows writes to the storage it views, before and after the
    commit, and a second view of another storage is not mixed up with it.
    The views are read with O_DIRECT, past the kernel's page cache (which
    drops their pages only just after the write is answered): what is
    tested is what the daemon serves."""
    torch.manual_seed(3)
    w = torch.randn(256, 512)
    v = torch.randn(128, 96).to(torch.float64)
    p = save(str(tmp_path / "m.pt"), {"w": w, "t": w.t(), "v": v,
                                      "vt": v.t()[2:90:3]})

    def want(name, src):
        x = {"t": lambda a: a.t(), "vt": lambda a: a.t()[2:90:3]}[name](src)
        return x.contiguous().numpy().tobytes()

    def pieces(fd, size, step):
        offs = list(range(0, size, step))
        random.Random(size).shuffle(offs)
        got = bytearray(size)
        for off in offs:
            got[off:off + step] = os.pread(fd, step, off)
        return bytes(got)

    with mounted(p) as mnt:
        ft = os.open(os.path.join(mnt, "t"), os.O_RDONLY | os.O_DIRECT)
        fv = os.open(os.path.join(mnt, "vt"), os.O_RDONLY | os.O_DIRECT)
        try:
            size_t, size_v = w.numel() * 4, len(want("vt", v))
            assert os.fstat(ft).st_size == size_t
            assert pieces(ft, size_t, 4096) == want("t", w)
            assert pieces(fv, size_v, 1000) == want("vt", v)
            # write row 5 of w: column 5 of t changes
            w2 = w.clone()
            w2[5] = torch.arange(512, dtype=torch.float32)
            with open(os.path.join(mnt, "w"), "r+b") as f:
                f.seek(5 * 512 * 4)
                f.write(w2[5].numpy().tobytes())
                f.flush()
                assert pieces(ft, size_t, 8192) == want("t", w2)
                assert pieces(fv, size_v, 1000) == want("vt", v)
                os.fsync(f.fileno())
            assert pieces(ft, size_t, 65536) == want("t", w2)
            # and once more after the commit, into the same piece
            with open(os.path.join(mnt, "w"), "r+b") as f:
                f.seek(5 * 512 * 4)
                f.write(w[5].numpy().tobytes())
            assert pieces(ft, size_t, 4096) == want("t", w)
        finally:
            os.close(ft)
            os.close(fv)
    after = torch.load(p)
    assert torch.equal(after["t"], w.t()) and torch.equal(after["vt"], v.t()[2:90:3])


@needs_fuse
def test_commit_refused_when_file_changed(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    with mounted(p, expect_rc=1) as mnt:
        with open(os.path.join(mnt, "b"), "r+b") as f:
            f.write(b"\1" * 8)
            f.flush()
            # another program rewrites the checkpoint meanwhile
            torch.save({"other": torch.zeros(1)}, p)
            other = open(p, "rb").read()
            with pytest.raises(OSError) as e:
                os.fsync(f.fileno())
            assert e.value.errno == errno.EIO
            assert open(p, "rb").read() == other
        # unmount tries again and must refuse too (daemon exits non-zero)
        unmount(mnt)
    assert open(p, "rb").read() == other


def test_set_cli(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    before = torch.load(p)
    newh = torch.tensor([9, 8, 7, 6, 5], dtype=torch.float16)
    r = run("set", p, "h", input=newh.numpy().tobytes())
    assert r.returncode == 0, r.stderr
    assert_same_except(p, before, {"h": newh})
    raw = open(p, "rb").read()
    r = run("set", p, "h", input=b"\0" * 3)
    assert r.returncode == 1 and b"stdin has 3 bytes, the tensor has 10" in r.stderr
    r = run("set", p, "t", input=b"\0" * (64 * 32 * 4))
    assert r.returncode == 1 and b"not a writable tensor" in r.stderr
    assert open(p, "rb").read() == raw


def test_set_many_records(tmp_path):
    """More than 65,535 records: the classic EOCD cannot count them."""
    p = str(tmp_path / "many.pt")
    torch.save({str(i): torch.tensor([i], dtype=torch.int32) for i in range(66000)}, p)
    r = run("set", p, "65999", input=np.array([-5], np.int32).tobytes())
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(p) as z:
        assert len(z.infolist()) > 65535
        assert z.testzip() is None
    d = torch.load(p)
    assert d["65999"].item() == -5 and d["12345"].item() == 12345


@needs_fuse
def test_sigterm_commits(tmp_path):
    p = save(str(tmp_path / "m.pt"), base_obj())
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    proc = subprocess.Popen([PTFS, "-f", p, mnt], stderr=subprocess.PIPE)
    try:
        for _ in range(500):
            if is_mounted(mnt):
                break
            time.sleep(0.02)
        with open(os.path.join(mnt, "b"), "r+b") as f:
            f.write(np.array([100], np.int64).tobytes())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        unmount(mnt)
        if proc.poll() is None:
            proc.kill()
    assert torch.load(p)["b"][0].item() == 100
    assert not is_mounted(mnt)


@needs_fuse
def test_kill9_during_commit_is_atomic(tmp_path):
    """kill -9 at random moments of commits: old or new file, complete."""
    p = str(tmp_path / "big.pt")
    torch.save({"a": torch.zeros(32 << 20, dtype=torch.uint8),
                "b": torch.zeros(8 << 20, dtype=torch.uint8)}, p)
    rng = random.Random(7)
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    for i in range(1, 7):
        proc = subprocess.Popen([PTFS, "-f", p, mnt], stderr=subprocess.DEVNULL)
        try:
            for _ in range(500):
                if is_mounted(mnt):
                    break
                time.sleep(0.02)
            with open(os.path.join(mnt, "b"), "r+b") as f:
                f.write(bytes([i]) * 4096)
                f.flush()
                syncer = subprocess.Popen(
                    ["/usr/bin/python3", "-c",
                     "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)",
                     os.path.join(mnt, "b")], stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0.0, 0.3))
                proc.kill()
                proc.wait()
                syncer.wait(timeout=60)
        except OSError:
            pass
        finally:
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        d = torch.load(p)
        head = d["b"][:4096]
        assert bool((head == head[0]).all()), "torn write"
        assert d["a"].sum().item() == 0
        with zipfile.ZipFile(p) as z:
            assert z.testzip() is None


@needs_fuse
def test_relative_path_daemon_commits(tmp_path):
    """The daemon detaches and changes directory; a checkpoint given by a
    relative path must still be committed in place on unmount."""
    p = save(str(tmp_path / "rel.pt"), base_obj())
    mnt = str(tmp_path / "m")
    os.mkdir(mnt)
    r = subprocess.run([PTFS, "rel.pt", "m"], cwd=str(tmp_path), capture_output=True)
    assert r.returncode == 0, r.stderr
    try:
        with open(os.path.join(mnt, "b"), "r+b") as f:
            f.write(np.array([77], np.int64).tobytes())
    finally:
        unmount(mnt)
    for _ in range(200):
        if torch.load(p)["b"][0].item() == 77:
            break
        time.sleep(0.05)
    assert torch.load(p)["b"][0].item() == 77
    assert not os.path.exists("/rel.pt")
