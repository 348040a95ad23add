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
needs_fuse = pytest.mark.skipif(not have_fuse, reason="needs FUSE: no /dev/fuse or fusermount3")
is_root = os.geteuid() == 0
needs_root = pytest.mark.skipif(not is_root, reason="needs root: not running as root")
HAVE_CORPUS = os.path.exists(os.path.join(FIXTURES, "PROVENANCE.tsv"))
# Tests that read the shared fixture corpus carry this mark.  Without the
# corpus they are not collected, and one test says "skipped: no fixture
# corpus" (tests/py/test_corpus.py).
fixture_corpus = pytest.mark.fixture_corpus

# Fault injection (PTFS_FAULT) is compiled into test builds only
# (PTFS_FAULT_INJECTION, CMakeLists.txt), and `ptfs --version` says so.
# A test whose code sets PTFS_FAULT needs such a build: against any other
# binary it is skipped, and PTFS_REQUIRE_FAULT=1 (CI) makes that a failure.
try:
    HAVE_FAULT = b"fault injection" in subprocess.run(
        [PTFS, "--version"], capture_output=True, timeout=60).stdout
except OSError:
    HAVE_FAULT = False

# Remote checkpoints need libcurl at build time; a build without it says so
# on any URL.  The remote tests are then skipped, visibly, and
# PTFS_REQUIRE_CURL=1 (CI, which installs libcurl) makes that a failure.
try:
    HAVE_CURL = b"without libcurl" not in subprocess.run(
        [PTFS, "ls", "http://127.0.0.1:1/x.pt"], capture_output=True,
        timeout=60).stderr
except OSError:
    HAVE_CURL = False
needs_curl = pytest.mark.skipif(
    not HAVE_CURL, reason="needs libcurl: %s was built without it" % PTFS)

# A skip whose reason holds one of these phrases becomes a failure when the
# variable is 1 (CI sets them all: a green run means everything ran).
REQUIRE = {
    "needs FUSE": "PTFS_REQUIRE_FUSE",
    "needs root": "PTFS_REQUIRE_ROOT",
    "no fixture corpus": "PTFS_REQUIRE_FIXTURES",
    "needs a fault-injection build": "PTFS_REQUIRE_FAULT",
    "needs torch 1.13": "PTFS_REQUIRE_PYTHON",
    "needs libcurl": "PTFS_REQUIRE_CURL",
    "needs gio": "PTFS_REQUIRE_DESKTOP",
}


def pytest_runtest_setup(item):
    if HAVE_FAULT or not hasattr(item, "function"):
        return
    import inspect
    try:
        src = inspect.getsource(item.function)
    except (OSError, TypeError):
        return
    if "PTFS_FAULT" in src:
        pytest.skip("needs a fault-injection build: %s reads no PTFS_FAULT "
                    "(configure with -DPTFS_FAULT_INJECTION=ON)" % PTFS)


def required(var):
    return os.environ.get(var) == "1"


class Shard:
    """PTFS_SHARD=K/N keeps every Nth test from the Kth on (1-based), after
    -m and every other selection: ctest runs the integration suite as N
    entries so that its -j keeps every core busy (the tests are CPU-bound;
    one pytest process uses one core)."""

    def __init__(self, spec):
        k, n = spec.split("/")
        self.k, self.n = int(k), int(n)
        if not 1 <= self.k <= self.n:
            raise pytest.UsageError("PTFS_SHARD=%s: want K/N with 1 <= K <= N" % spec)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        keep = [it for i, it in enumerate(items) if i % self.n == self.k - 1]
        drop = [it for i, it in enumerate(items) if i % self.n != self.k - 1]
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fixture_corpus: reads ../shared/fixtures (skipped without it)")
    if os.environ.get("PTFS_SHARD"):
        config.pluginmanager.register(Shard(os.environ["PTFS_SHARD"]), "ptfs-shard")


def pytest_collection_modifyitems(config, items):
    if HAVE_CORPUS:
        return
    keep, drop = [], []
    for item in items:
        is_corpus = item.get_closest_marker("fixture_corpus") is not None
        (drop if is_corpus and item.name != "test_corpus_present" else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if drop or any(i.name == "test_corpus_present" for i in keep):
        config._ptfs_corpus_dropped = len(drop)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.skipped or hasattr(rep, "wasxfail"):
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    for phrase, var in REQUIRE.items():
        if phrase in reason and required(var):
            rep.outcome = "failed"
            rep.longrepr = "required by %s=1, but: %s" % (var, reason)
            return


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    dropped = getattr(config, "_ptfs_corpus_dropped", None)
    if dropped is not None and not required("PTFS_REQUIRE_FIXTURES"):
        # One line; ctest's SKIP_REGULAR_EXPRESSION looks for it.
        terminalreporter.write_line(
            "skipped: no fixture corpus (%s): %d fixture tests not run"
            % (FIXTURES, dropped))


def run(*args, input=None, check=False):
    """Run ptfs with arguments; return CompletedProcess (bytes)."""
    return subprocess.run([PTFS, *args], input=input, capture_output=True,
                          check=check, timeout=300)


def inert_run(args, tmp_path):
    """Run ptfs under strace in an empty directory with HOME there; return
    (CompletedProcess, the programs it executed, connections it tried,
    files it left).  The canary: any payload that runs a command, opens a
    socket or writes a file shows up in one of the three."""
    assert shutil.which("strace"), "strace is needed (contrib/setup.sh)"
    work = tmp_path / "work"
    work.mkdir(parents=True)
    log = tmp_path / "strace.log"
    env = dict(os.environ, HOME=str(work), TMPDIR=str(work))
    # LeakSanitizer cannot run under ptrace; every other test checks leaks
    asan = env.get("ASAN_OPTIONS")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "detect_leaks=0"
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve,connect",
                        "-o", str(log), PTFS, *args],
                       capture_output=True, env=env, cwd=work, timeout=120)
    calls = log.read_text().splitlines()
    execs = [c for c in calls if "execve(" in c]
    connects = [c for c in calls if "connect(" in c]
    return r, execs, connects, sorted(os.listdir(work))


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
def fusectl():
    """The kernel's FUSE control file system, mounted where systemd mounts
    it at boot while the block runs (containers often lack it; root only),
    and unmounted again if it was mounted here."""
    conns = "/sys/fs/fuse/connections"
    here = False
    if os.path.isdir(conns) and not os.listdir(conns):
        here = subprocess.run(["mount", "-t", "fusectl", "none", conns],
                              capture_output=True).returncode == 0
    try:
        yield conns
    finally:
        if here:
            subprocess.run(["umount", conns], capture_output=True)


def abort_fuse(dev):
    """End every request of the FUSE connection of st_dev @dev at once (a
    hung daemon, and the programs waiting on it, can then be reaped)."""
    with fusectl() as conns:
        try:
            with open(os.path.join(conns, str(os.minor(dev)), "abort"), "w") as f:
                f.write("1")
        except OSError:
            pass


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
