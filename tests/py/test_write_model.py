# SPDX-License-Identifier: MIT
"""The write model (README "Writing", ptfs(1) WRITING): nothing written is
dropped silently.

- A size other than the tensor's is judged when the open file is gone
  (RELEASE), not at every close: the shell's `cat x > FILE` and `dd`
  leave a tensor of the right size or its old bytes, and the writer hears
  of it at its last close.
- `ptfs umount` returns once the daemon's last commit is in the
  checkpoint, exit 0, or 1 with the reason.
- A commit that fails where nobody can be told (unmount, a signal) keeps
  the bytes in FILE.ptfs-pending; every command says so and
  `ptfs recover` applies or drops them.
- A failed in-place commit does not make the mount take its own rollback
  for another program's change.
- The daemon's lines reach a file when there is no syslog.
"""
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time

import pytest
import torch

from conftest import PTFS, is_mounted, needs_fuse

N = 3072        # float32 elements of "s2": 12288 bytes


def save(path, **extra):
    obj = {"s2": torch.arange(N, dtype=torch.float32),
           "b": torch.ones(10), **extra}
    torch.save(obj, path)
    return path


def tensor_bytes(ck, name):
    r = subprocess.run([PTFS, "cat", ck, name], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


class Mount:
    """A background mount (the way a person mounts) with its own state
    directory; unmounted with `ptfs umount` by the test, or forced at the
    end whatever happens."""

    def __init__(self, tmp_path, ck, *opts, env=None):
        self.mnt = tempfile.mkdtemp(prefix="ptfs-wm-")
        self.env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
        self.env.update(env or {})
        self.ck = ck
        r = subprocess.run([PTFS, *opts, ck, self.mnt], capture_output=True,
                           env=self.env, timeout=60)
        self.stderr = r.stderr.decode()
        assert r.returncode == 0, self.stderr
        assert is_mounted(self.mnt)

    def umount(self):
        r = subprocess.run([PTFS, "umount", self.mnt], capture_output=True,
                           env=self.env, timeout=120)
        return r.returncode, r.stderr.decode()

    def path(self, name):
        return os.path.join(self.mnt, name)

    def close(self):
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        os.rmdir(self.mnt)


@pytest.fixture
def mounts():
    made = []
    yield lambda *a, **k: made.append(Mount(*a, **k)) or made[-1]
    for m in made:
        m.close()


def sh(cmd, env=None):
    return subprocess.run(["sh", "-c", cmd], capture_output=True, env=env, timeout=60)


@needs_fuse
def test_short_writes_through_the_shell_keep_the_old_bytes(tmp_path, mounts):
    """`cat half > FILE` (the shell dup2()s and closes its own descriptor
    first: a FLUSH before any byte), `dd` without conv=notrunc and `>>`
    fail and leave the old bytes; a whole file through the same shell
    redirection is committed."""
    ck = save(str(tmp_path / "ck.pt"))
    old = tensor_bytes(ck, "s2")
    half = tmp_path / "half.bin"
    full = tmp_path / "full.bin"
    half.write_bytes(os.urandom(N * 2))
    full.write_bytes(os.urandom(N * 4))
    m = mounts(tmp_path, ck)
    log = (tmp_path / "state" / "ptfs" / "ptfs.log")
    dropped = "the write is dropped, the tensor keeps its bytes"
    # without syslog the drops are in the state file, one line each; the
    # drop is logged at the RELEASE, which the kernel sends after close()
    # returns, and a release while the next writer has the file open is
    # not the last one: wait for it before the next open
    logged = None if os.path.exists("/dev/log") else (lambda: log.read_text().count(dropped))
    r = sh('cat "%s" > "%s"' % (half, m.path("s2")))
    assert r.returncode != 0 and b"Invalid argument" in r.stderr, r
    if logged:
        deadline = time.monotonic() + 10
        while logged() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    r = sh('dd if=/dev/zero of="%s" bs=100 count=1' % m.path("s2"))
    assert r.returncode != 0 and b"Invalid argument" in r.stderr, r
    # refused at open: the RELEASE of dd's descriptor (sent after its
    # close returns) may still be on its way, when the kernel's size is
    # dd's 100 bytes and an appended byte would land inside the tensor
    r = sh('printf x >> "%s"' % m.path("s2"))
    assert r.returncode != 0 and b"Invalid argument" in r.stderr, r
    rc, err = m.umount()
    assert rc == 0, err
    assert tensor_bytes(ck, "s2") == old
    if logged:
        assert logged() == 2, log.read_text()
    m = mounts(tmp_path, ck)
    r = sh('cat "%s" > "%s"' % (full, m.path("s2")))
    assert r.returncode == 0, r
    rc, err = m.umount()
    assert rc == 0, err
    assert tensor_bytes(ck, "s2") == full.read_bytes()


@needs_fuse
def test_copyfile_and_dup_writers(tmp_path, mounts):
    """shutil.copyfile, and a writer that dup()s its descriptor and closes
    the copy half-way, commit the whole file."""
    ck = save(str(tmp_path / "ck.pt"))
    new = os.urandom(N * 4)
    src = tmp_path / "new.bin"
    src.write_bytes(new)
    m = mounts(tmp_path, ck)
    shutil.copyfile(src, m.path("s2"))
    fd = os.open(m.path("b"), os.O_WRONLY | os.O_TRUNC)
    dup = os.dup(fd)
    os.write(fd, b"\1" * 20)
    with pytest.raises(OSError):
        os.close(fd)            # a FLUSH at 20 of 40 bytes: EINVAL, kept
    os.write(dup, b"\2" * 20)
    os.close(dup)               # whole again
    rc, err = m.umount()
    assert rc == 0, err
    assert tensor_bytes(ck, "s2") == new
    assert tensor_bytes(ck, "b") == b"\1" * 20 + b"\2" * 20


@needs_fuse
def test_umount_waits_for_the_commit(tmp_path, mounts):
    """After `ptfs umount` returns 0 the checkpoint holds the writes: a
    read or a `ptfs set` right after sees them (fusermount3 -u returns
    before the commit)."""
    ck = save(str(tmp_path / "ck.pt"), big=torch.zeros(16 << 20, dtype=torch.uint8))
    for i in range(3):
        new = os.urandom(N * 4)
        m = mounts(tmp_path, ck, "-o", "commit=rewrite")
        with open(m.path("s2"), "r+b") as f:
            f.write(new)
        rc, err = m.umount()
        assert rc == 0, err
        assert "committed on unmount" in err
        assert not is_mounted(m.mnt)
        assert tensor_bytes(ck, "s2") == new
        r = subprocess.run([PTFS, "set", ck, "b"], input=b"\3" * 40,
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert tensor_bytes(ck, "s2") == new


@needs_fuse
def test_failed_unmount_commit_keeps_the_writes(tmp_path, mounts):
    """ENOSPC at the unmount's rename: `ptfs umount` exits 1 naming the
    kept file; `ls` says it exists, `set` and a writable mount refuse to
    write over it; `ptfs recover` applies it."""
    ck = save(str(tmp_path / "ck.pt"))
    raw = open(ck, "rb").read()
    new = os.urandom(N * 4)
    m = mounts(tmp_path, ck, env={"PTFS_FAULT": "rename:1:ENOSPC"})
    with open(m.path("s2"), "r+b") as f:
        f.write(new)
    rc, err = m.umount()
    pending = ck + ".ptfs-pending"
    assert rc == 1 and pending in err and "No space left" in err, err
    assert open(ck, "rb").read() == raw
    st = os.lstat(pending)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.stat(ck).st_uid
    r = subprocess.run([PTFS, "ls", ck], capture_output=True, timeout=60)
    assert r.returncode == 0 and b"ptfs recover" in r.stderr, r.stderr
    r = subprocess.run([PTFS, "set", ck, "b"], input=b"\0" * 40,
                       capture_output=True, timeout=60)
    assert r.returncode == 1 and b"ptfs recover" in r.stderr, r.stderr
    m2 = mounts(tmp_path, ck)
    assert "mounted read-only until 'ptfs recover" in m2.stderr
    with pytest.raises(OSError):
        open(m2.path("s2"), "r+b")
    assert m2.umount()[0] == 0
    r = subprocess.run([PTFS, "recover", ck], capture_output=True, timeout=60)
    assert r.returncode == 0 and b"applied 12288 bytes" in r.stderr, r.stderr
    assert not os.path.exists(pending)
    assert tensor_bytes(ck, "s2") == new
    r = subprocess.run([PTFS, "recover", ck], capture_output=True, timeout=60)
    assert r.returncode == 0 and b"nothing to recover" in r.stderr


@needs_fuse
def test_outside_change_keeps_the_writes_for_a_forced_recover(tmp_path, mounts):
    """Another program commits while a mount has writes pending: the
    mount's commit at unmount fails, its writes are kept; recover refuses
    them (the file changed) until --force, or drops them with --discard."""
    ck = save(str(tmp_path / "ck.pt"))
    new = os.urandom(N * 4)
    for how in ("--force", "--discard"):
        m = mounts(tmp_path, ck)
        with open(m.path("s2"), "r+b") as f:
            f.write(new)
        r = subprocess.run([PTFS, "set", ck, "b"], input=b"\7" * 40,
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        rc, err = m.umount()
        assert rc == 1 and ".ptfs-pending" in err, err
        r = subprocess.run([PTFS, "recover", ck], capture_output=True, timeout=60)
        assert r.returncode == 1 and b"changed since" in r.stderr, r.stderr
        before = tensor_bytes(ck, "s2")
        r = subprocess.run([PTFS, "recover", how, ck], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert tensor_bytes(ck, "s2") == (new if how == "--force" else before)
        assert tensor_bytes(ck, "b") == b"\7" * 40
        assert not os.path.exists(ck + ".ptfs-pending")


@needs_fuse
def test_two_mounts_of_one_file(tmp_path, mounts):
    """Two mounts write one checkpoint: the first unmount commits, the
    second's writes are kept, never dropped."""
    ck = save(str(tmp_path / "ck.pt"))
    a, b = os.urandom(N * 4), os.urandom(40)
    m1 = mounts(tmp_path, ck)
    m2 = mounts(tmp_path, ck)
    with open(m1.path("s2"), "r+b") as f:
        f.write(a)
    with open(m2.path("b"), "r+b") as f:
        f.write(b)
    assert m1.umount()[0] == 0
    rc, err = m2.umount()
    assert rc == 1 and ".ptfs-pending" in err, err
    assert tensor_bytes(ck, "s2") == a
    r = subprocess.run([PTFS, "recover", "--force", ck], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert tensor_bytes(ck, "s2") == a and tensor_bytes(ck, "b") == b


@needs_fuse
def test_failed_inplace_commit_can_be_retried(tmp_path, mounts):
    """An in-place commit that fails and rolls back moves the file's
    mtime: the mount knows that was its own doing, reads go on and the
    next fsync commits."""
    ck = save(str(tmp_path / "ck.pt"))
    new = os.urandom(N * 4)
    m = mounts(tmp_path, ck, "-o", "commit=inplace", env={"PTFS_FAULT": "patch:1:EIO"})
    with open(m.path("s2"), "r+b") as f:
        f.write(new)
        f.flush()
        with pytest.raises(OSError):
            os.fsync(f.fileno())
        assert open(m.path("b"), "rb").read() == tensor_bytes(ck, "b")
        os.fsync(f.fileno())
    assert tensor_bytes(ck, "s2") == new
    assert m.umount()[0] == 0


@needs_fuse
def test_log_file_option(tmp_path, mounts):
    """-o log=FILE takes the daemon's lines; `ptfs umount` prints the
    final ones."""
    ck = save(str(tmp_path / "ck.pt"))
    log = tmp_path / "ptfs.log"
    m = mounts(tmp_path, ck, "-o", "log=%s" % log)
    with open(m.path("s2"), "r+b") as f:
        f.write(b"\0" * 8)      # 8 of 12288 bytes, no truncation: kept
    rc, err = m.umount()
    assert rc == 0 and "committed on unmount" in err
    text = log.read_text()
    assert "committed on unmount" in text
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600


def test_umount_usage_and_errors(tmp_path):
    r = subprocess.run([PTFS, "umount"], capture_output=True)
    assert r.returncode == 2 and b"Try 'ptfs umount --help'" in r.stderr
    r = subprocess.run([PTFS, "umount", "--help"], capture_output=True)
    assert r.returncode == 0 and r.stdout.startswith(b"usage: ptfs umount")
    r = subprocess.run([PTFS, "umount", str(tmp_path)], capture_output=True)
    assert r.returncode == 1 and b"not a mount point of ptfs" in r.stderr
    assert r.stderr.count(b"\n") == 1
    r = subprocess.run([PTFS, "recover"], capture_output=True)
    assert r.returncode == 2
    r = subprocess.run([PTFS, "recover", "--discard", "--force", "x.pt"], capture_output=True)
    assert r.returncode == 2


def test_planted_pending_file_is_not_applied(tmp_path):
    """A pending file another user could have made (theirs, or writable
    by others, or a symbolic link) is never applied."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to nobody")
    ck = save(str(tmp_path / "ck.pt"))
    raw = open(ck, "rb").read()
    pending = ck + ".ptfs-pending"
    with open(pending, "wb") as f:
        f.write(b"PTFSPEND" + b"\0" * 100)
    nobody = pwd.getpwnam("nobody").pw_uid
    for how in ("owner", "mode", "link"):
        if how == "owner":
            os.chown(pending, nobody, nobody)
        elif how == "mode":
            os.chown(pending, 0, 0)
            os.chmod(pending, 0o666)
        else:
            os.rename(pending, pending + ".target")
            os.symlink(pending + ".target", pending)
        r = subprocess.run([PTFS, "recover", ck], capture_output=True, timeout=60)
        assert r.returncode == 1 and (b"not trusted" in r.stderr), (how, r.stderr)
        assert r.stderr.count(b"\n") == 1
        assert open(ck, "rb").read() == raw


@needs_fuse
def test_read_only_filesystem_mounts_read_only(tmp_path, mounts):
    """A checkpoint on a read-only filesystem: the message says so (not
    "this user"), and the kernel's mount table shows ro."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a read-only tmpfs")
    d = tmp_path / "rofs"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)], check=True)
    try:
        save(str(d / "ck.pt"))
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        m = mounts(tmp_path, str(d / "ck.pt"))
        assert "on a read-only filesystem: mounted read-only" in m.stderr, m.stderr
        opts = [l.split()[3] for l in open("/proc/self/mounts") if l.split()[1] == m.mnt]
        assert opts and "ro" in opts[-1].split(","), opts
        assert m.umount()[0] == 0
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


@needs_fuse
def test_kept_writes_go_to_the_state_directory_when_beside_fails(tmp_path, mounts):
    """The writer of the kept-writes file is fault-injected like every
    writer (step "pending"): when the checkpoint's directory cannot take
    it, it goes to the state directory, and recover finds it there."""
    ck = save(str(tmp_path / "ck.pt"))
    new = os.urandom(N * 4)
    m = mounts(tmp_path, ck, env={"PTFS_FAULT": "pending:1:ENOSPC"})
    with open(m.path("s2"), "r+b") as f:
        f.write(new)
    # another program commits meanwhile: the mount's commit must fail
    r = subprocess.run([PTFS, "set", ck, "b"], input=b"\5" * 40,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rc, err = m.umount()
    state = str(tmp_path / "state" / "ptfs")
    assert rc == 1 and state in err and ".ptfs-pending" in err, err
    assert not os.path.exists(ck + ".ptfs-pending")
    r = subprocess.run([PTFS, "ls", ck], capture_output=True, env=m.env, timeout=60)
    assert state.encode() in r.stderr, r.stderr
    r = subprocess.run([PTFS, "recover", "--force", ck], capture_output=True,
                       env=m.env, timeout=60)
    assert r.returncode == 0 and b"applied 12288 bytes" in r.stderr, r.stderr
    assert tensor_bytes(ck, "s2") == new and tensor_bytes(ck, "b") == b"\5" * 40


def test_hard_links_per_commit_way(tmp_path):
    """rewrite replaces the checkpoint by a rename: another hard link keeps
    the old bytes; inplace writes the file itself: every link sees it."""
    for way, link_sees_new in (("rewrite", False), ("inplace", True)):
        ck = save(str(tmp_path / ("%s.pt" % way)))
        link = str(tmp_path / ("%s.link.pt" % way))
        os.link(ck, link)
        old = tensor_bytes(link, "b")
        r = subprocess.run([PTFS, "set", "-o", "commit=" + way, ck, "b"],
                           input=b"\1" * 40, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert tensor_bytes(ck, "b") == b"\1" * 40
        assert tensor_bytes(link, "b") == (b"\1" * 40 if link_sees_new else old)


@needs_fuse
def test_umount_of_a_busy_mount(tmp_path, mounts):
    """A file open in the mount: `ptfs umount` says it is not unmounted,
    exit 1, and the mount stays; once closed it unmounts, exit 0."""
    ck = save(str(tmp_path / "ck.pt"))
    m = mounts(tmp_path, ck)
    f = open(m.path("s2"), "rb")
    try:
        rc, err = m.umount()
        assert rc == 1 and "not unmounted" in err, err
        assert is_mounted(m.mnt)
    finally:
        f.close()
    assert m.umount()[0] == 0 and not is_mounted(m.mnt)


@needs_fuse
def test_log_of_a_user_without_a_home(tmp_path, mounts):
    """No $XDG_STATE_HOME and a $HOME that does not exist (nobody's is
    /nonexistent): the daemon's lines go to /tmp/ptfs-UID/ptfs.log,
    a directory of this user's own, mode 0700.  (Only where the machine
    has no syslog socket, which would take them instead.)"""
    if os.path.exists("/dev/log"):
        pytest.skip("this machine has a syslog socket (/dev/log): the lines go there")
    ck = save(str(tmp_path / "ck.pt"))
    env = {k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"}
    env["HOME"] = str(tmp_path / "no-such-home")
    mnt = tempfile.mkdtemp(prefix="ptfs-wm-")
    try:
        r = subprocess.run([PTFS, ck, mnt], capture_output=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        with open(os.path.join(mnt, "s2"), "r+b") as f:
            f.write(b"\0" * 4)
        r = subprocess.run([PTFS, "umount", mnt], capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        os.rmdir(mnt)
    d = "/tmp/ptfs-%d" % os.geteuid()
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.geteuid()
    with open(os.path.join(d, "ptfs.log")) as f:
        assert ("%s: committed on unmount" % ck) in f.read()
