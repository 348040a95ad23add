# SPDX-License-Identifier: MIT
"""Checkpoint surgery in a writable mount (README "Surgery"): rm, rm -r,
rmdir, mv, mkdir and new values of scalars written as text.

The edits of a session are committed together (fsync, unmount, SIGTERM)
as one atomic rewrite of the file; each is checked against the same edit
made in Python on the object torch.load returns.  Listings are right after
each edit without a remount, and the inodes the kernel knows stay what
they were.
"""
import ctypes
import errno
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest
import torch

from conftest import PTFS, is_mounted, needs_fuse
from test_surgery import load, same, sha, training_checkpoint
from test_write_model import Mount, mounts  # noqa: F401 (fixture)

pytestmark = needs_fuse


@pytest.fixture
def train(tmp_path):
    return training_checkpoint(str(tmp_path / "train.pt"))


def listing(path):
    return sorted(os.listdir(path))


def write_text(path, text):
    """open, write, close: the close's error is the edit's."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


def test_training_edits_match_python(tmp_path, train, mounts):
    before = load(train)
    m = mounts(tmp_path, train)
    ino_emb = os.stat(m.path("model/emb.weight")).st_ino
    ino_model = os.stat(m.path("model")).st_ino
    subprocess.run(["rm", "-r", m.path("optimizer")], check=True, timeout=60)
    assert "optimizer" not in listing(m.mnt)
    os.rename(m.path("model/fc.weight"), m.path("model/fc.w"))
    names = listing(m.path("model"))
    assert "fc.w" in names and "fc.w.json" in names
    assert "fc.weight" not in names and "fc.weight.json" not in names
    os.mkdir(m.path("extra"))
    assert "extra" in listing(m.mnt) and listing(m.path("extra")) == []
    assert subprocess.run(["sh", "-c", "echo 8 > '%s'" % m.path("epoch")],
                          timeout=60).returncode == 0
    with open(m.path("epoch")) as f:
        assert f.read() == "8\n"
    # the other nodes kept their identity
    assert os.stat(m.path("model")).st_ino == ino_model
    assert os.stat(m.path("model/emb.weight")).st_ino == ino_emb
    rc, err = m.umount()
    assert rc == 0, err

    del before["optimizer"]
    sd = before["model"]
    keys = [("fc.w" if k == "fc.weight" else k) for k in sd]
    sd["fc.w"] = sd.pop("fc.weight")
    for k in keys:
        sd.move_to_end(k)
    before["extra"] = {}
    before["epoch"] = 8
    after = load(train)
    assert list(after["model"].keys()) == keys
    assert same(after, before)
    # tied weights stay tied
    assert after["model"]["head.weight"].data_ptr() == after["model"]["emb.weight"].data_ptr()


def test_mv_keeps_the_inode_and_moves_between_dicts(tmp_path, train, mounts):
    before = load(train)
    m = mounts(tmp_path, train)
    os.mkdir(m.path("extra"))
    ino = os.stat(m.path("model/fc.bias")).st_ino
    os.rename(m.path("model/fc.bias"), m.path("extra/b"))
    assert os.stat(m.path("extra/b")).st_ino == ino
    assert "fc.bias" not in listing(m.path("model"))
    assert listing(m.path("extra")) == ["b", "b.json"]
    # a moved directory keeps its inode, and edits inside it work
    os.mkdir(m.path("d"))
    ino = os.stat(m.path("d")).st_ino
    os.rename(m.path("d"), m.path("extra/d"))
    assert os.stat(m.path("extra/d")).st_ino == ino
    os.rename(m.path("extra/b"), m.path("extra/d/b"))
    assert listing(m.path("extra/d")) == ["b", "b.json"]
    assert listing(m.path("extra")) == ["d"]
    # an object's attributes are not a mapping: nothing moves into it
    with pytest.raises(OSError) as e:
        os.rename(m.path("extra/d"), m.path("args/d"))
    assert e.value.errno == errno.ENOTDIR
    rc, err = m.umount()
    assert rc == 0, err
    after = load(train)
    b = before["model"].pop("fc.bias")
    before["extra"] = {"d": {"b": b}}
    assert same(after, before)


def test_refusals(tmp_path, train, mounts):
    m = mounts(tmp_path, train)
    with pytest.raises(OSError) as e:
        os.rmdir(m.path("model"))
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as e:
        os.unlink(m.path("model"))
    assert e.value.errno in (errno.EISDIR, errno.EPERM)
    with pytest.raises(OSError) as e:
        os.unlink(m.path("nothing"))
    assert e.value.errno == errno.ENOENT
    with pytest.raises(OSError) as e:
        os.mkdir(m.path("model"))
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        os.unlink(m.path(".ptfs/info.txt"))
    assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:
        os.mkdir(m.path("x" * 300))
    assert e.value.errno == errno.ENAMETOOLONG
    libc = ctypes.CDLL(None, use_errno=True)
    for flags, want in ((2, errno.EINVAL), (1, errno.EEXIST)):   # EXCHANGE, NOREPLACE
        rc = libc.renameat2(-100, m.path("model/fc.bias").encode(), -100,
                            m.path("model/fc.weight").encode(), flags)
        assert rc == -1 and ctypes.get_errno() == want
    # an empty directory is replaced by rename, a full one is not
    os.mkdir(m.path("e"))
    with pytest.raises(OSError) as e:
        os.rename(m.path("e"), m.path("model"))
    assert e.value.errno == errno.ENOTEMPTY
    rc, err = m.umount()
    assert rc == 0, err


def test_bad_scalar_value_fails_at_close(tmp_path, train, mounts):
    log = str(tmp_path / "ptfs.log")
    m = mounts(tmp_path, train, "-o", "log=" + log)
    with pytest.raises(OSError) as e:
        write_text(m.path("epoch"), b"three\n")
    assert e.value.errno == errno.EINVAL
    with open(m.path("epoch")) as f:
        assert f.read() == "3\n"
    with open(log) as f:
        assert "epoch: the new value must be an int" in f.read()
    write_text(m.path("args/name"), b"run-2\n")
    with open(m.path("args/name")) as f:
        assert f.read() == "run-2\n"
    rc, err = m.umount()
    assert rc == 0, err
    after = load(train)
    assert after["epoch"] == 3 and after["args"].name == "run-2"


def test_read_only_mount_refuses(tmp_path, train, mounts):
    before = sha(train)
    m = mounts(tmp_path, train, "-o", "ro")
    for op in (lambda: os.unlink(m.path("epoch")),
               lambda: os.mkdir(m.path("x")),
               lambda: os.rename(m.path("epoch"), m.path("e")),
               lambda: write_text(m.path("epoch"), b"4\n")):
        with pytest.raises(OSError) as e:
            op()
        assert e.value.errno == errno.EROFS
    rc, err = m.umount()
    assert rc == 0, err
    assert sha(train) == before


def test_fsync_commits_then_the_mount_is_read_only(tmp_path, train, mounts):
    before = load(train)
    m = mounts(tmp_path, train)
    os.unlink(m.path("epoch"))
    fd = os.open(m.path("model/fc.bias"), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    del before["epoch"]
    assert same(load(train), before)
    # the tree describes the old file's layout: no more writes
    with pytest.raises(OSError) as e:
        os.unlink(m.path("model/fc.weight"))
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        os.mkdir(m.path("x"))
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        write_text(m.path("model/fc.bias"), b"\0" * 32)
    assert e.value.errno == errno.EROFS
    # reads still see the checkpoint
    with open(m.path("model/fc.bias"), "rb") as f:
        assert f.read() == before["model"]["fc.bias"].numpy().tobytes()
    rc, err = m.umount()
    assert rc == 0, err
    assert same(load(train), before)


def test_kill_9_before_unmount_leaves_the_old_file(tmp_path, train):
    before = sha(train)
    mnt = tempfile.mkdtemp(prefix="ptfs-sm-")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    p = subprocess.Popen([PTFS, "-f", train, mnt], env=env,
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if is_mounted(mnt):
                break
            time.sleep(0.05)
        assert is_mounted(mnt)
        subprocess.run(["rm", "-r", os.path.join(mnt, "optimizer")], check=True,
                       timeout=60)
        os.mkdir(os.path.join(mnt, "extra"))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        os.rmdir(mnt)
    assert sha(train) == before
    assert [n for n in os.listdir(tmp_path) if "ptfs-" in n] == []


def test_sigterm_commits(tmp_path, train):
    before = load(train)
    mnt = tempfile.mkdtemp(prefix="ptfs-sm-")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    p = subprocess.Popen([PTFS, "-f", train, mnt], env=env,
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if is_mounted(mnt):
                break
            time.sleep(0.05)
        assert is_mounted(mnt)
        os.unlink(os.path.join(mnt, "model/fc.bias"))
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        os.rmdir(mnt)
    del before["model"]["fc.bias"]
    assert same(load(train), before)


def kept_in(err):
    """The pending file the unmount's line names."""
    m = re.search(r"kept in (\S+): 'ptfs recover ", err)
    assert m, err
    return m.group(1)


def recover(m, *args):
    """`ptfs recover` as a person runs it after the mount: its state
    directory, no fault injected."""
    env = {k: v for k, v in m.env.items() if k != "PTFS_FAULT"}
    return subprocess.run([PTFS, "recover", *args], capture_output=True,
                          env=env, timeout=60)


def test_failed_commit_at_unmount_keeps_the_edits(tmp_path, train, mounts):
    """The checkpoint untouched, `ptfs umount` exits 1 with the reason and
    the pending file that keeps the edits; `ptfs recover` commits them."""
    before = sha(train)
    obj = load(train)
    m = mounts(tmp_path, train, env={"PTFS_FAULT": "rename:1:ENOSPC"})
    os.unlink(m.path("epoch"))
    rc, err = m.umount()
    assert rc == 1, err
    assert "could not be committed" in err and "No space left" in err, err
    assert "lost" not in err, err
    pending = kept_in(err)
    assert pending == os.path.realpath(train) + ".ptfs-pending"
    assert sha(train) == before
    r = recover(m, train)
    assert r.returncode == 0 and b"1 structural edit " in r.stderr, r.stderr
    assert not os.path.exists(pending)
    del obj["epoch"]
    assert same(load(train), obj)


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs, nearly full: a filler file leaves 12 KiB."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    d = tmp_path / "small"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)],
                   check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def fill(d, leave):
    st = os.statvfs(d)
    with open(os.path.join(d, "filler"), "wb") as f:
        f.write(b"x" * (st.f_bavail * st.f_frsize - leave))


def test_full_filesystem_keeps_edits_and_writes_for_recover(tmp_path, small_fs, mounts):
    """rm -r, mv, a scalar and a tensor write on a filesystem too full for
    the commit: the unmount keeps them all in the pending file, and
    `ptfs recover` once there is room gives the edited object."""
    ck = training_checkpoint(str(small_fs / "train.pt"))
    before = sha(ck)
    want = load(ck)
    fill(small_fs, 12 << 10)
    m = mounts(tmp_path, ck)
    new = os.urandom(want["model"]["fc.bias"].numel() * 4)
    write_text(m.path("model/fc.bias"), new)
    subprocess.run(["rm", "-r", m.path("optimizer")], check=True, timeout=60)
    os.rename(m.path("model/fc.weight"), m.path("model/fc.w"))
    write_text(m.path("epoch"), b"8\n")
    rc, err = m.umount()
    assert rc == 1 and "No space left" in err, err
    pending = kept_in(err)
    assert "structural edits" in err and "ptfs recover" in err, err
    assert sha(ck) == before and os.path.exists(pending)
    # still full: recover says why and keeps the file
    r = subprocess.run([PTFS, "recover", ck], capture_output=True, env=m.env,
                       timeout=60)
    assert r.returncode == 1 and b"No space left" in r.stderr, r.stderr
    assert sha(ck) == before and os.path.exists(pending)
    os.unlink(small_fs / "filler")
    r = subprocess.run([PTFS, "recover", ck], capture_output=True, env=m.env,
                       timeout=60)
    assert r.returncode == 0 and b"structural edits" in r.stderr, r.stderr
    assert not os.path.exists(pending)
    del want["optimizer"]
    sd = want["model"]
    keys = [("fc.w" if k == "fc.weight" else k) for k in sd]
    sd["fc.w"] = sd.pop("fc.weight")
    for k in keys:
        sd.move_to_end(k)
    want["epoch"] = 8
    after = load(ck)
    assert after["model"]["fc.bias"].numpy().tobytes() == new
    after["model"]["fc.bias"] = want["model"]["fc.bias"]
    assert same(after, want)


def test_sigterm_keeps_the_edits_its_commit_cannot_write(tmp_path, train):
    """SIGTERM commits like an unmount: when that fails the daemon exits 1
    and the log names the pending file that keeps the edits."""
    obj = load(train)
    before = sha(train)
    mnt = tempfile.mkdtemp(prefix="ptfs-sm-")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"),
               PTFS_FAULT="rename:1:ENOSPC")
    p = subprocess.Popen([PTFS, "-f", train, mnt], env=env,
                         stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            if is_mounted(mnt):
                break
            time.sleep(0.05)
        assert is_mounted(mnt)
        os.unlink(os.path.join(mnt, "model/fc.bias"))
        os.mkdir(os.path.join(mnt, "extra"))
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 1
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        os.rmdir(mnt)
    assert sha(train) == before
    pending = kept_in(err)
    env.pop("PTFS_FAULT")
    r = subprocess.run([PTFS, "recover", train], capture_output=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and b"2 structural edits" in r.stderr, r.stderr
    assert not os.path.exists(pending)
    del obj["model"]["fc.bias"]
    obj["extra"] = {}
    assert same(load(train), obj)


def test_kept_edits_refused_on_a_changed_checkpoint(tmp_path, train, mounts):
    """The edits name the checkpoint as the mount knew it: recover against
    a file another program changed refuses with one line and keeps them."""
    m = mounts(tmp_path, train, env={"PTFS_FAULT": "rename:1:ENOSPC"})
    subprocess.run(["rm", "-r", m.path("optimizer")], check=True, timeout=60)
    os.mkdir(m.path("extra"))
    rc, err = m.umount()
    assert rc == 1, err
    pending = kept_in(err)
    training_checkpoint(train)          # written again meanwhile
    before = sha(train)
    r = recover(m, train)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 1 and len(lines) == 1, lines
    assert "changed since" in lines[0] and pending in lines[0], lines
    assert sha(train) == before and os.path.exists(pending)
    r = recover(m, "--discard", train)
    assert r.returncode == 0 and not os.path.exists(pending), r.stderr


def test_recover_keeps_the_edits_alone_when_only_their_commit_fails(tmp_path, train, mounts):
    """recover commits the kept tensor writes, then the edits; when only
    the edits' rewrite fails they stay in the pending file, bound to the
    file as it now is, and the next recover applies them."""
    obj = load(train)
    m = mounts(tmp_path, train, env={"PTFS_FAULT": "rename:1:ENOSPC"})
    new = os.urandom(obj["model"]["fc.bias"].numel() * 4)
    write_text(m.path("model/fc.bias"), new)
    os.unlink(m.path("epoch"))
    rc, err = m.umount()
    assert rc == 1 and "tensor writes and structural edits" in err, err
    pending = kept_in(err)
    env = {k: v for k, v in m.env.items() if k != "PTFS_FAULT"}
    r = subprocess.run([PTFS, "recover", train], capture_output=True,
                       env=dict(env, PTFS_FAULT="rename:2:ENOSPC"), timeout=60)
    assert r.returncode == 1, r.stderr
    assert b"the writes are applied" in r.stderr and pending.encode() in r.stderr, r.stderr
    assert load(train)["model"]["fc.bias"].numpy().tobytes() == new
    assert "epoch" in load(train)
    r = recover(m, train)
    assert r.returncode == 0 and b"1 structural edit " in r.stderr, r.stderr
    assert not os.path.exists(pending)
    after = load(train)
    assert "epoch" not in after
    assert after["model"]["fc.bias"].numpy().tobytes() == new


def test_damaged_kept_edits_are_refused(tmp_path, train, mounts):
    """A pending file whose edit log is cut or changed: one line, nothing
    applied, the file kept."""
    m = mounts(tmp_path, train, env={"PTFS_FAULT": "rename:1:ENOSPC"})
    os.unlink(m.path("epoch"))
    os.rename(m.path("model/fc.bias"), m.path("model/b"))
    rc, err = m.umount()
    assert rc == 1, err
    pending = kept_in(err)
    good = open(pending, "rb").read()
    before = sha(train)
    for bad in (good[:-20] + good[-8:], good[:-30] + b"\1" + good[-29:]):
        with open(pending, "wb") as f:
            f.write(bad)
        r = recover(m, train)
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 1 and len(lines) == 1, lines
        assert "damaged" in lines[0], lines
        assert sha(train) == before
    with open(pending, "wb") as f:
        f.write(good)
    r = recover(m, train)
    assert r.returncode == 0, r.stderr
    after = load(train)
    assert "epoch" not in after and "b" in after["model"]


def test_tensor_writes_and_edits_in_one_session(tmp_path, train, mounts):
    """The tensor bytes are committed first, then the structure."""
    before = load(train)
    m = mounts(tmp_path, train)
    new = os.urandom(before["model"]["fc.bias"].numel() * 4)
    write_text(m.path("model/fc.bias"), new)
    os.unlink(m.path("epoch"))
    os.rename(m.path("model/fc.bias"), m.path("model/b"))
    rc, err = m.umount()
    assert rc == 0, err
    after = load(train)
    assert after["model"]["b"].numpy().tobytes() == new
    assert "epoch" not in after and "fc.bias" not in after["model"]


def test_rm_r_of_a_large_dict(tmp_path, mounts):
    """Past the first readdirplus batch the kernel has no entry cached
    and looks NAME.json up before it unlinks it."""
    import torch
    ck = str(tmp_path / "sd.pt")
    torch.save({"model": {"layer%d.w" % i: torch.zeros(4) for i in range(300)},
                "epoch": 1}, ck)
    m = mounts(tmp_path, ck)
    r = subprocess.run(["rm", "-r", m.path("model")], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert listing(m.mnt) == [".ptfs", "epoch"]
    rc, err = m.umount()
    assert rc == 0, err
    assert load(ck) == {"epoch": 1}


def test_edits_past_the_listing_budget_are_refused_and_the_rest_committed(tmp_path, mounts):
    """An edit that changes a listing (mv) keeps the old one until close:
    past max_walk_entries such an edit fails with E2BIG; the edits made
    before it are committed at unmount all the same (the budget bounds new
    edits, never the commit of those made)."""
    import torch
    ck = str(tmp_path / "sd.pt")
    torch.save({"model": {"layer%d.w" % i: torch.zeros(4) for i in range(300)},
                "epoch": 1}, ck)
    m = mounts(tmp_path, ck, "-o", "max_walk_entries=6000")
    done = 0
    with pytest.raises(OSError) as e:
        for i in range(300):
            os.rename(m.path("model/layer%d.w" % i), m.path("model/r%d" % i))
            done += 1
    assert e.value.errno == errno.E2BIG and 0 < done < 300, done
    rc, err = m.umount()
    assert rc == 0, err
    after = load(ck)
    assert ["r%d" % i for i in range(done)] == [k for k in after["model"] if k[0] == "r"]
    assert len(after["model"]) == 300 and after["epoch"] == 1


def test_rm_r_of_a_large_dict_keeps_no_listing(tmp_path, mounts):
    """rm -r hides each entry in its directory's listing in place: no
    listing is made again per entry, so a dict larger than the budget of
    listings kept (max_walk_entries) goes whole, and a listing read
    between removals (rm -r reads, unlinks, reads again) shows exactly
    what is left at stable offsets."""
    import torch
    ck = str(tmp_path / "sd.pt")
    torch.save({"model": {"layer%d.w" % i: torch.zeros(4) for i in range(300)},
                "epoch": 1}, ck)
    m = mounts(tmp_path, ck, "-o", "max_walk_entries=6000")
    for i in range(0, 300, 3):
        os.unlink(m.path("model/layer%d.w" % i))
    left = listing(m.path("model"))
    assert len(left) == 400 and "layer0.w" not in left and "layer1.w.json" in left
    r = subprocess.run(["rm", "-r", m.path("model")], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert listing(m.mnt) == [".ptfs", "epoch"]
    rc, err = m.umount()
    assert rc == 0, err
    assert load(ck) == {"epoch": 1}


def test_new_and_resized_tensors_are_kept_for_recover(tmp_path, train, mounts):
    """A tensor made in the mount (NAME.json, then its bytes) and a resized
    one are edits like the others: a commit that fails at unmount keeps
    their dtype, shape and bytes in the pending file, and recover adds
    them."""
    before = sha(train)
    obj = load(train)
    m = mounts(tmp_path, train, env={"PTFS_FAULT": "rename:1:ENOSPC"})
    new = torch.arange(12, dtype=torch.int16).reshape(3, 4)
    with open(m.path("model/extra.json"), "w") as f:
        f.write('{"dtype": "int16", "shape": [3, 4]}')
    with open(m.path("model/extra"), "wb") as f:
        f.write(new.numpy().tobytes())
    emb = torch.full((12, 4), 0.5)
    with open(m.path("model/emb.weight.json"), "w") as f:
        f.write('{"dtype": "float32", "shape": [12, 4]}')
    with open(m.path("model/emb.weight"), "wb") as f:
        f.write(emb.numpy().tobytes())
    rc, err = m.umount()
    assert rc == 1 and "No space left" in err, err
    pending = kept_in(err)
    assert sha(train) == before
    r = recover(m, train)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(pending)
    got = load(train)
    assert torch.equal(got["model"]["extra"], new)
    assert torch.equal(got["model"]["emb.weight"], emb)
    # tied: the head shares the embedding's storage in the original
    obj["model"]["extra"] = new
    assert set(got["model"]) == set(obj["model"])
