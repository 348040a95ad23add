# SPDX-License-Identifier: MIT
"""Hostile checkpoints against every surface: each case x every command,
and a mount walked with find and every file under /.ptfs read.

Every run is under `ulimit -v` 1 GiB (RLIMIT_AS in the child; an
AddressSanitizer build reserves terabytes of address space, so there the
peak RSS of the child is checked instead) and a kill timer (10 s, 40 s
under ASan), a safety net: a run the timer kills is a hang and fails.  What is asserted: no
crash (no signal, no sanitizer report), an exit status of 0, 1 or 2, and a
failure that says why on a line starting with "ptfs".

Interrupts are tested by counting: a reader of a slow virtual file killed
with SIGKILL is reaped after a bounded number of looks at /proc/PID/stat;
a busy daemon sent SIGTERM ends after a bounded number of looks, with its
pending writes committed.
"""
import errno
import os
import pickle
import resource
import signal
import subprocess
import tempfile
import time
import zipfile

import pytest
import torch

from conftest import FIXTURES, PTFS, fixture_corpus, is_mounted, needs_fuse, unmount

LIMIT = 1 << 30         # bytes of address space (or RSS under ASan)
POLL = 0.02             # seconds between looks at /proc


def _asan():
    out = subprocess.run([PTFS, "--version"], capture_output=True).stdout
    return b"AddressSanitizer" in out


ASAN = _asan()
# seconds before a run counts as hung: the longest case (ls of a million
# entries) takes 1.5 s optimised and 6 s under ASan on a 2-core machine,
# and CI machines are slower; the timer is a safety net, not a benchmark
TIMER = 40 if ASAN else 10


def _limit():
    if not ASAN:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _children_rss():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def bounded(args, **kw):
    """Run ptfs @args under the limits; the CompletedProcess."""
    try:
        r = subprocess.run([PTFS, *args], capture_output=True, timeout=TIMER,
                           preexec_fn=_limit, **kw)
    except subprocess.TimeoutExpired:
        pytest.fail("ptfs %s: still running after %d s (a hang)" % (" ".join(args), TIMER))
    if ASAN:
        # ASan's own shadow memory comes on top: 3x is its usual cost
        assert _children_rss() < 3 * LIMIT, "ptfs %s: RSS over the limit" % args
    return r


def assert_sane(r, args):
    err = r.stderr.decode(errors="replace")
    assert r.returncode in (0, 1, 2), "ptfs %s: exit %d: %s" % (args, r.returncode, err)
    assert "Sanitizer" not in err and "runtime error" not in err, err
    # exit 1 is an answer, not a failure: "would not load weights-only"
    answer = "--weights-only" in args and r.returncode == 1 and r.stdout
    if r.returncode != 0 and not answer:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines and any(ln.startswith("ptfs") for ln in lines), (args, err)
        assert all(len(ln) < 2000 for ln in lines), (args, err)


# ---- the cases ----------------------------------------------------------

def torch_like_zip(path, obj_pickle):
    """A torch.save-like ZIP around a raw pickle."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", obj_pickle)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")


def make_laughs(path):
    """A list of two references to one list of two references ... 30 levels
    deep, with a tensor at the bottom: 2^30 paths in under 1 KB."""
    x = [torch.arange(4.0)]
    for _ in range(30):
        x = [x, x]
    torch.save({"a": x}, path)
    assert os.path.getsize(path) < 2048


def make_laughs_pickle(path):
    """The same with Python's pickle alone (the memo shares the lists)."""
    x = [1, 2]
    for _ in range(30):
        x = [x, x]
    torch_like_zip(path, pickle.dumps({"a": x}, protocol=2))


def make_deep(path, depth):
    """Lists nested @depth deep, written opcode by opcode (Python's own
    pickler would recurse)."""
    body = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    torch_like_zip(path, body)


def make_huge_count(path):
    """One list of 1.2 million references to one int: over the walk's
    budget of entries, in 2.4 MB."""
    n = 1200000
    # MARK, 5 memoised as 1, then n - 1 BINGETs of it (APPENDS)
    body = b"\x80\x02]q\x00(K\x05q\x01" + b"h\x01" * (n - 1) + b"e."
    torch_like_zip(path, body)


def make_cycle(path):
    """A list that holds itself, and a dict that holds a list holding it."""
    body = (b"\x80\x02}q\x00(X\x04\x00\x00\x00selfq\x01h\x00"
            b"X\x04\x00\x00\x00listq\x02]q\x03(h\x00h\x03eu.")
    torch_like_zip(path, body)


CASES = {
    "laughs.pt": make_laughs,
    "laughs_pickle.pt": make_laughs_pickle,
    "deep_over.pt": lambda p: make_deep(p, 20000),
    "deep_under.pt": lambda p: make_deep(p, 9000),
    "huge_count.pt": make_huge_count,
    "cycle.pt": make_cycle,
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    out = {}
    for name, make in CASES.items():
        p = str(d / name)
        make(p)
        out[name] = p
    return out


def malicious_files():
    found = []
    if os.path.isdir(FIXTURES):
        for repo in sorted(os.listdir(FIXTURES)):
            m = os.path.join(FIXTURES, repo, "malicious")
            if os.path.isdir(m):
                found += [os.path.join(m, f) for f in sorted(os.listdir(m))]
    return found


def file_id(p):
    """The test id of a corpus file; "none" for the empty parameter pytest
    passes when there is no corpus (the test is then reported skipped)."""
    return os.path.basename(p) if isinstance(p, str) else "none"


def some_path(ck):
    """A file of the tree to cat and preview: the first one ls shows."""
    r = bounded(["ls", "--max", "200", ck])
    for line in r.stdout.decode(errors="replace").splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] == "f":
            return parts[2].split("  ")[0]
    return "a"


def commands(ck, out):
    path = some_path(ck)
    return [
        ["ls", ck], ["ls", "-a", "--max", "2000000", ck],
        ["cat", ck, path], ["info", ck], ["info", "--weights-only", ck],
        ["tree", "--json", ck], ["stat", ck], ["stat", "--json", ck],
        ["diff", ck, ck],
        ["export", ck, "--to", "safetensors", "--skip-unsupported", out + ".safetensors"],
        ["export", ck, "--to", "pt", out + ".pt"],
        ["export", ck, "--to", "npy", out + ".npy"],
        ["preview", ck, path, "--output", out + ".png"],
    ]


def check_commands(ck, tmp_path):
    for args in commands(ck, str(tmp_path / "out")):
        assert_sane(bounded(args), args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_command_on_a_hostile_case(cases, name, tmp_path):
    check_commands(cases[name], tmp_path)


def test_laughs_fail_with_the_budget_line(cases, tmp_path):
    ck = cases["laughs.pt"]
    for args in (["stat", ck], ["diff", ck, ck],
                 ["export", ck, "--to", "safetensors", str(tmp_path / "o")],
                 ["ls", "--max", "2000000", ck]):
        r = bounded(args)
        assert r.returncode in (1, 2), args
        assert b"over 1048576 entries in one walk of the tree" in r.stderr, r.stderr
    r = bounded(["tree", "--json", ck])
    assert r.returncode == 0 and r.stdout.endswith(b'"truncated": true}\n')
    # the budget is an option like every cap
    r = bounded(["stat", "-o", "max_walk_entries=100", ck])
    assert b"over 100 entries in one walk" in r.stderr


@fixture_corpus
@pytest.mark.parametrize("ck", malicious_files(), ids=file_id)
def test_every_command_on_the_malicious_corpus(ck, tmp_path):
    check_commands(ck, tmp_path)


# ---- mounts -------------------------------------------------------------

LOGS = []


@pytest.fixture(scope="module", autouse=True)
def remove_logs():
    yield
    for log in LOGS:
        if os.path.exists(log):
            os.unlink(log)


class Daemon:
    def __init__(self, ck, *opts):
        self.mnt = tempfile.mkdtemp(prefix="ptfs-hostile-")
        self.log = self.mnt + ".log"
        LOGS.append(self.log)
        self.proc = subprocess.Popen(
            [PTFS, "-f", "-o", "log=" + self.log, *opts, ck, self.mnt],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_limit)
        for _ in range(int(30 / POLL)):
            if is_mounted(self.mnt) or self.proc.poll() is not None:
                break
            time.sleep(POLL)

    def mounted(self):
        return is_mounted(self.mnt)

    def lines(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def rss(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def close(self):
        unmount(self.mnt)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace")
        os.rmdir(self.mnt)
        return rc, err


def read_all(root, budget=4000):
    """Read every file below @root (at most @budget of them); errors of
    generated files are fine, as long as they come at once."""
    seen = 0
    for d, dirs, files in os.walk(root, onerror=lambda e: None):
        for f in files:
            seen += 1
            if seen > budget:
                return
            try:
                with open(os.path.join(d, f), "rb") as fh:
                    while fh.read(1 << 20):
                        pass
            except OSError as e:
                assert e.errno in (errno.EFBIG, errno.EIO, errno.ENOENT,
                                   errno.EINVAL, errno.EINTR), e


def walk_mount(ck, *opts):
    m = Daemon(ck, *opts)
    if not m.mounted():
        # refused at open: one line, exit 1
        rc = m.proc.wait(timeout=30)
        err = m.proc.stderr.read().decode(errors="replace")
        os.rmdir(m.mnt)
        assert rc == 1 and err.startswith("ptfs"), err
        return
    try:
        try:
            subprocess.run(["find", m.mnt, "-maxdepth", "6"], capture_output=True,
                           timeout=TIMER * 3)
        except subprocess.TimeoutExpired:
            pytest.fail("find in the mount of %s hung" % ck)
        read_all(os.path.join(m.mnt, ".ptfs"))
        assert m.proc.poll() is None, "the daemon died"
        if not ASAN:
            assert m.rss() < LIMIT
    finally:
        rc, err = m.close()
    assert rc == 0, err
    assert "Sanitizer" not in err and "runtime error" not in err, err
    for line in m.lines():
        assert len(line) < 2000


@needs_fuse
@pytest.mark.parametrize("name", sorted(CASES))
def test_mount_of_a_hostile_case_walked_and_read(cases, name):
    # a directory of 1.2 million entries is within max_dir_entries, and
    # `find` would list it all: the cap brought below it makes readdir
    # fail at once instead (EFBIG)
    opts = ("-o", "max_dir_entries=1000000") if name == "huge_count.pt" else ()
    walk_mount(cases[name], *opts)


@needs_fuse
def test_laughs_mount_logs_each_failed_directory_once(cases):
    m = Daemon(cases["laughs.pt"])
    try:
        for _ in range(3):
            for d in ("stats", "export"):
                with pytest.raises(OSError) as e:
                    os.listdir(os.path.join(m.mnt, ".ptfs", d))
                assert e.value.errno == errno.EFBIG
        lines = m.lines()
    finally:
        rc, err = m.close()
    assert rc == 0, err
    over = [ln for ln in lines if "over 1048576 entries in one walk" in ln]
    assert len(over) == 2, lines
    assert any("'/.ptfs/stats'" in ln for ln in over)
    assert any("'/.ptfs/export'" in ln for ln in over)


@fixture_corpus
@needs_fuse
@pytest.mark.parametrize("ck", malicious_files(), ids=file_id)
def test_mount_of_the_malicious_corpus(ck):
    walk_mount(ck)


# ---- interrupts ---------------------------------------------------------

def state(pid):
    """The state letter of /proc/PID/stat, or None once it is reaped."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


# A stats directory whose walk would take minutes: the budget raised far
# above what the daemon could do in the test.
SLOW = ("-o", "max_walk_entries=1000000000000,max_walk_bytes=1000000000000000")


def start_waiting_reader(m):
    """A reader of /.ptfs/stats, once it waits on the daemon."""
    reader = subprocess.Popen(["ls", os.path.join(m.mnt, ".ptfs", "stats")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wchan = ""
    # until it sleeps in the kernel waiting for the daemon's answer (its
    # wchan names FUSE's wait where the kernel shows it), then a few more
    # looks so that the daemon is inside the fill
    for _ in range(200):
        try:
            with open("/proc/%d/wchan" % reader.pid) as f:
                wchan = f.read()
        except OSError:
            break
        if state(reader.pid) in ("S", "D") and ("fuse" in wchan or "request" in wchan
                                                or wchan in ("", "0")):
            break
        time.sleep(POLL)
    for _ in range(10):
        time.sleep(POLL)
    return reader, wchan


@needs_fuse
def test_a_killed_reader_of_a_slow_virtual_file_is_reaped(cases):
    m = Daemon(cases["laughs.pt"], *SLOW)
    try:
        assert m.mounted()
        reader, wchan = start_waiting_reader(m)
        assert reader.poll() is None, "the listing ended on its own"
        os.kill(reader.pid, signal.SIGKILL)
        looks = 0
        while looks < 50:        # 50 looks, 20 ms apart: 1 s
            if reader.poll() is not None:
                break
            looks += 1
            time.sleep(POLL)
        assert reader.returncode == -signal.SIGKILL, \
            "still %s after %d looks (wchan %s)" % (state(reader.pid), looks, wchan)
        # the daemon ended that work and says so, once
        for _ in range(50):
            if any("interrupted" in ln for ln in m.lines()):
                break
            time.sleep(POLL)
        assert [ln for ln in m.lines() if "'/.ptfs/stats': interrupted" in ln]
        assert m.proc.poll() is None
        # and still serves
        assert "a" in os.listdir(m.mnt)
    finally:
        rc, err = m.close()
    assert rc == 0, err


@needs_fuse
def test_sigterm_ends_a_busy_daemon_and_commits(tmp_path):
    ck = str(tmp_path / "laughs.pt")
    make_laughs(ck)
    leaf = "a/" + "0/" * 30 + "0"
    m = Daemon(ck, *SLOW)
    try:
        assert m.mounted()
        with open(os.path.join(m.mnt, leaf), "r+b") as f:
            f.write(torch.full((4,), 7.0).numpy().tobytes())
        reader, _ = start_waiting_reader(m)
        assert reader.poll() is None
        m.proc.send_signal(signal.SIGTERM)
        looks = 0
        while looks < 100 and m.proc.poll() is None:   # 2 s
            looks += 1
            time.sleep(POLL)
        assert m.proc.poll() is not None, "the daemon still runs after SIGTERM"
        assert m.proc.returncode == 0, m.proc.stderr.read()
        reader.wait(timeout=TIMER)
        assert reader.returncode != 0     # its listing was interrupted
    finally:
        unmount(m.mnt)
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()
        os.rmdir(m.mnt)
    assert any("committed" in ln for ln in m.lines()), m.lines()
    r = subprocess.run([PTFS, "cat", ck, leaf], capture_output=True, timeout=60)
    assert r.stdout == torch.full((4,), 7.0).numpy().tobytes()
