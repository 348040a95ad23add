# SPDX-License-Identifier: MIT
"""What a remote mount promises beyond reading (README "Remote
checkpoints"), against real servers on loopback: versions never mix
(whatever validator the server gives), secrets are never printed and
credentials go to their own origin only, unreachable servers fail at open
without retries, and the deadline holds.  Requests are counted in nginx's
access log or by the stand-in servers (remote_servers.py)."""
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import pytest
import torch

import oracle
import remote_servers as rs
from conftest import PTFS, mounted, needs_curl, needs_fuse
from test_remote import cache, o  # noqa: F401  (the cache fixture and its -o)

pytestmark = needs_curl

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


# ---- secrets ----

SECRETS = ["PWSECRET1", "SIGSECRET2", "hf_SECRET3", "AWSSECRET4",
           "SESSSECRET5", "EPSECRET6", "AKIDSECRET7"]


@needs_fuse
def test_secrets_never_printed_nor_logged(root, cache, tmp_path):
    """The remote commands, good and failing, with secrets in the query,
    in userinfo, in HF_TOKEN and the AWS keys: no secret in any stdout,
    stderr, log file, state file or the mount table."""
    save({"w": torch.ones(1 << 20), "b": torch.arange(5)}, os.path.join(root, "m.pt"))
    c1 = "d" * 40
    os.makedirs(os.path.join(root, c1))
    save({"x": torch.ones(4)}, os.path.join(root, c1, "h.pt"))
    os.makedirs(os.path.join(root, "bkt"))
    save({"x": torch.ones(4)}, os.path.join(root, "bkt", "s.pt"))
    state = tmp_path / "state"
    outs = []
    env = {"XDG_STATE_HOME": str(state), "PTFS_REMOTE_TRACE": "1"}

    def run(*args, more=None, rc=None):
        e = dict(env)
        e.update(more or {})
        r = ptfs(*args, env=e)
        outs.append((args, r.stdout + r.stderr))
        if rc is not None:
            assert r.returncode == rc, (args, r.stderr)
        return r

    with rs.Nginx(root) as n, rs.HubStandIn(n, {"main": c1}, token="hf_SECRET3") as hub, \
            rs.FaultProxy(n.port) as p:
        q = "?X-Amz-Signature=SIGSECRET2&X-Amz-Credential=AKIDSECRET7"
        good = "http://user:PWSECRET1@127.0.0.1:%d/m.pt%s" % (n.port, q)
        run("ls", *o(cache), good, rc=0)
        run("info", *o(cache), good, rc=0)
        run("cat", *o(cache), good, "b", rc=0)
        run("cat", *o(cache), good, "no.such.tensor", rc=1)
        run("stat", *o(cache), good, "b")
        run("ls", *o(cache), "http://u:PWSECRET1@127.0.0.1:%d/missing.pt%s" % (n.port, q), rc=1)
        run("ls", *o(cache), "http://u:PWSECRET1@127.0.0.1:1/x.pt%s" % q, rc=1)
        p.faults = ["503"] * 100
        run("ls", *o(cache, "timeout=1"), "http://u:PWSECRET1@127.0.0.1:%d/m.pt%s" % (p.port, q), rc=1)
        hf = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "hf_SECRET3"}
        run("cat", *o(cache), "hf://org/repo/h.pt", "x", more=hf, rc=0)
        run("ls", *o(cache), "hf://org/repo/missing.pt", more=hf, rc=1)
        hub.token = "other"
        run("ls", *o(cache + "2"), "hf://org/repo/h.pt", more=hf, rc=1)
        aws = {"AWS_ACCESS_KEY_ID": "AKIDSECRET7", "AWS_SECRET_ACCESS_KEY": "AWSSECRET4",
               "AWS_SESSION_TOKEN": "SESSSECRET5",
               "AWS_ENDPOINT_URL": "http://ep:EPSECRET6@127.0.0.1:%d" % n.port}
        run("cat", *o(cache), "s3://bkt/s.pt", "x", more=aws, rc=0)
        run("ls", *o(cache), "s3://bkt/missing.pt", more=aws, rc=1)
        # a mount: its log file, its mount table line, a change under it
        log = str(tmp_path / "mount.log")
        os.environ["XDG_STATE_HOME"] = str(state)
        try:
            with mounted(good, *o(cache, "log=" + log)) as mnt:
                with open("/proc/self/mountinfo") as f:
                    outs.append(("mountinfo", f.read().encode()))
                save({"w": torch.zeros(1 << 20), "b": torch.arange(6)},
                     os.path.join(root, "m.pt"), mtime=time.time() + 5)
                with pytest.raises(OSError):
                    with open(os.path.join(mnt, "w"), "rb") as f:
                        f.seek(2 << 20)
                        f.read()
        finally:
            os.environ.pop("XDG_STATE_HOME", None)
        with open(log, "rb") as f:
            outs.append(("log", f.read()))
    assert any(b"changed on the server" in t for _, t in outs), outs
    assert any(b"remote: " in t for _, t in outs)       # the trace ran
    for dp, _, fs in os.walk(str(state)):
        for fn in fs:
            with open(os.path.join(dp, fn), "rb") as f:
                outs.append((fn, f.read()))
    for what, text in outs:
        for s in SECRETS:
            assert s.encode() not in text, (what, s, text[-2000:])


# ---- credentials go to their own origin only ----

def test_hub_token_not_sent_to_look_alike_hosts(root, cache):
    """HF_TOKEN goes to the hub's scheme, host and port only: not to a
    redirect to http://HUB@other-host/ (userinfo that spells the hub),
    nor to another loopback address on the hub's own port."""
    c1 = "e" * 40
    os.makedirs(os.path.join(root, c1))
    save({"x": torch.full((4,), 5.0)}, os.path.join(root, c1, "m.pt"))
    env = {"HF_TOKEN": "hf_tok"}
    with rs.Nginx(root) as n, rs.HubStandIn(n, {"main": c1}, token="hf_tok") as hub:
        env["HF_ENDPOINT"] = hub.endpoint
        # http://127.0.0.1:HUB@127.0.0.1:CDN/...: begins like the hub
        hub.location = lambda c, p: "http://127.0.0.1:%d@127.0.0.1:%d/%s/%s" % (
            hub.port, n.port, c, p)
        m = n.mark()
        r = ptfs("cat", *o(cache), "hf://org/repo/m.pt", "x", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout == torch.full((4,), 5.0).numpy().tobytes()
        cdn = n.since(m)
        # (the Location's own userinfo is Basic auth: its own, not ours)
        assert cdn and all("hf_tok" not in e["authorization"] for e in cdn), cdn
        assert hub.seen and all(a == "Bearer hf_tok" for _, a in hub.seen)
        # 127.0.0.2 on the hub's port, which redirects on to the CDN
        with rs.Redirector(lambda path: n.url(path.lstrip("/")), host="127.0.0.2",
                           port=hub.port) as other:
            hub.location = lambda c, p: "http://127.0.0.2:%d/%s/%s" % (hub.port, c, p)
            r = ptfs("cat", *o(cache + "2"), "hf://org/repo/m.pt", "x", env=env)
            assert r.returncode == 0, r.stderr
            assert other.seen, "the redirect was not followed"
            assert all("Authorization" not in h for _, h in other.seen), other.seen


def test_s3_keys_not_sent_past_a_redirect(root, cache):
    """The S3 endpoint redirects elsewhere: the request there carries no
    signature and no session token (the endpoint's own one does)."""
    os.makedirs(os.path.join(root, "bkt"))
    save({"x": torch.full((3,), 7.0)}, os.path.join(root, "bkt", "s.pt"))
    with rs.Nginx(root) as n, rs.Redirector(lambda path: n.url(path.lstrip("/")),
                                            code=307) as ep:
        env = {"AWS_ACCESS_KEY_ID": "AKIDX", "AWS_SECRET_ACCESS_KEY": "k",
               "AWS_SESSION_TOKEN": "stok", "AWS_ENDPOINT_URL": ep.endpoint}
        m = n.mark()
        r = ptfs("cat", *o(cache), "s3://bkt/s.pt", "x", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout == torch.full((3,), 7.0).numpy().tobytes()
        assert ep.seen and all(h.get("Authorization", "").startswith("AWS4-HMAC-SHA256")
                               and h.get("x-amz-security-token") == "stok"
                               for _, h in ep.seen), ep.seen
        got = n.since(m)
        assert got and all(e["authorization"] == "-" and e["amz_token"] == "-"
                           for e in got), got


# ---- unreachable servers, deadlines ----

def trace_starts(r):
    return sum(1 for ln in r.stderr.decode().splitlines() if " start Range" in ln)


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/x.pt",
                                 "http://ptfs-test-host.invalid/x.pt"])
def test_unreachable_fails_at_open_without_retries(cache, url):
    r = ptfs("ls", *o(cache), url)
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1 and url in err, err
    r = ptfs("ls", *o(cache), url, env={"PTFS_REMOTE_TRACE": "1"})
    assert trace_starts(r) == 2, r.stderr       # the open's two, no retry


@needs_fuse
def test_refused_mid_mount_is_retried(root, cache):
    """A server that goes away under a mount (its connections closed, new
    ones refused) and comes back within the deadline: the read waits and
    succeeds through the new one."""
    want = torch.randn(6 << 20, generator=torch.Generator().manual_seed(3))
    save({"w": want}, os.path.join(root, "m.pt"))
    with rs.Nginx(root) as n:
        p = rs.ProxyProcess(n.port).__enter__()
        port = p.port
        try:
            with mounted(p.url("m.pt"), *o(cache)) as mnt:
                p.__exit__(None, None, None)    # refused from now on
                p = None
                got = {}

                def read():
                    try:
                        with open(os.path.join(mnt, "w"), "rb") as f:
                            got["data"] = f.read()
                    except OSError as e:
                        got["err"] = e
                t = threading.Thread(target=read)
                t.start()
                t.join(1.0)
                m = n.mark()
                p = rs.ProxyProcess(n.port, port=port).__enter__()
                t.join(60)
                assert got.get("data") == oracle.tensor_bytes(want), got.get("err")
                assert n.since(m, "m.pt")       # through the new proxy
        finally:
            if p is not None:
                p.__exit__(None, None, None)


def test_stalled_server_gives_up_at_the_deadline(root, cache):
    """A server that stops answering after the open: the read fails with
    one line once -o timeout= has passed since its last byte; ptfs reports
    its attempts (the proxy saw at least as many requests, and the client
    hung up on every stalled one) and the time it took by its own clock, at
    least the deadline.  Counted, not timed: a stalled attempt is given up
    after a quarter of the deadline in whole seconds (2 s of 10), so no
    more than five fit in it."""
    save({"w": torch.ones(4 << 20)}, os.path.join(root, "m.pt"))
    with rs.Nginx(root) as n, rs.FaultProxy(n.port) as p:
        p.stall_s = 60
        p.faults = [None, None] + ["stall"] * 100
        r = ptfs("cat", *o(cache, "timeout=10"), p.url("m.pt"), "w")
        err = r.stderr.decode()
        assert r.returncode == 1 and err.count("\n") == 1, err
        m = re.search(r"gave up after (\d+) attempts in ([0-9.]+) s, -o timeout=10", err)
        assert m, err
        # retried, each attempt at least one request the proxy saw
        assert 2 <= int(m.group(1)) <= min(5, p.seen - 2), (err, p.seen)
        # the proxy's thread sees the last hang-up after ptfs exited
        deadline = time.monotonic() + 10
        while p.abandoned < p.seen - 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert p.abandoned == p.seen - 2, (p.seen, p.abandoned)
        assert float(m.group(2)) >= 9.0, err


# ---- the cache is a bound ----

def cache_bytes(d):
    total = 0
    for dp, _, fs in os.walk(d):
        for fn in fs:
            try:
                total += os.stat(os.path.join(dp, fn)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def test_cache_size_bounds_the_object_being_read(root, cache):
    """cache_size=8M and one 24 MiB tensor streamed: the cache directory
    never holds more than 8 MiB, sampled during the read and after it,
    and every byte is right."""
    want = torch.randn(6 << 20, generator=torch.Generator().manual_seed(4))
    save({"w": want}, os.path.join(root, "m.pt"))
    with rs.Nginx(root) as n:
        os.makedirs(cache)
        samples = []
        p = subprocess.Popen([PTFS, "cat", *o(cache, "cache_size=8M"), n.url("m.pt"), "w"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                samples.append(cache_bytes(cache))
                time.sleep(0.01)
        t = threading.Thread(target=sample)
        t.start()
        out, err = p.communicate(timeout=120)
        stop.set()
        t.join()
        samples.append(cache_bytes(cache))
        assert p.returncode == 0, err
        assert out == oracle.tensor_bytes(want)
        assert len(samples) >= 2
        assert max(samples) <= 8 << 20, max(samples)
        assert samples[-1] > 1 << 20        # it did cache, within the bound


def test_cache_size_bounds_an_object_two_processes_read(root, cache):
    """cache_size=8M and two processes streaming the same 24 MiB tensor
    at once (one version, one cache file): the cache directory never
    holds more than 8 MiB, and both get every byte right."""
    want = torch.randn(6 << 20, generator=torch.Generator().manual_seed(9))
    save({"w": want}, os.path.join(root, "m.pt"))
    with rs.Nginx(root) as n, rs.FaultProxy(n.port, delay=0.002) as p:
        os.makedirs(cache)
        samples = []
        procs = [subprocess.Popen([PTFS, "cat", *o(cache, "cache_size=8M"),
                                   p.url("m.pt"), "w"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2)]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                samples.append(cache_bytes(cache))
                time.sleep(0.01)
        t = threading.Thread(target=sample)
        t.start()
        try:
            outs = [q.communicate(timeout=120) for q in procs]
        finally:
            stop.set()
            t.join()
            for q in procs:
                if q.poll() is None:
                    q.kill()
                    q.wait()
        samples.append(cache_bytes(cache))
        for q, (out, err) in zip(procs, outs):
            assert q.returncode == 0, err
            assert out == oracle.tensor_bytes(want)
        assert len(version_dirs(cache)) == 1       # they shared one file
        assert len(samples) >= 2
        assert max(samples) <= 8 << 20, max(samples)


@pytest.fixture
def small_fs(tmp_path):
    """A 64 MiB ext4 filesystem on a loop device (root only)."""
    if os.geteuid() != 0 and os.environ.get("PTFS_REQUIRE_ROOT") != "1":
        pytest.skip("needs root to loop-mount a small filesystem")
    img, mnt = str(tmp_path / "fs.img"), str(tmp_path / "small")
    os.mkdir(mnt)
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "loop", img, mnt], capture_output=True)
    if r.returncode != 0:
        if os.environ.get("PTFS_REQUIRE_ROOT") == "1":
            raise AssertionError("loop mount failed: %s" % r.stderr.decode())
        pytest.skip("loop mount refused here: %s" % r.stderr.decode().strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", mnt], check=False)


def test_small_cache_filesystem_streams_a_larger_object(root, small_fs):
    """The cache on a 64 MiB filesystem and an 80 MiB tensor streamed with
    the default cache_size: every byte right, no EIO, and the free space
    of the filesystem never below its floor (5%), sampled during the read."""
    want = torch.randn(20 << 20, generator=torch.Generator().manual_seed(5))
    save({"w": want}, os.path.join(root, "m.pt"))
    cache = os.path.join(small_fs, "cache")
    st = os.statvfs(small_fs)
    floor = st.f_blocks * st.f_frsize // 20
    with rs.Nginx(root) as n:
        free = []
        p = subprocess.Popen([PTFS, "cat", *o(cache), n.url("m.pt"), "w"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                s = os.statvfs(small_fs)
                free.append(s.f_bavail * s.f_frsize)
                time.sleep(0.01)
        t = threading.Thread(target=sample)
        t.start()
        out, err = p.communicate(timeout=300)
        stop.set()
        t.join()
        assert p.returncode == 0, err
        assert out == oracle.tensor_bytes(want)
        assert len(free) >= 2
        assert min(free) >= floor, (min(free), floor)
        assert cache_bytes(cache) > 4 << 20     # it cached what fits


def test_cache_filesystem_filled_by_another_writer_is_not_eio(root, small_fs):
    """The cache's filesystem fills up (another writer) after the open: the
    writes that meet ENOSPC make room (the other version cached before
    goes) and the read is served, every byte right, not EIO."""
    g = torch.Generator().manual_seed(6)
    save({"w": torch.randn(5 << 20, generator=g)}, os.path.join(root, "old.pt"))
    want = torch.randn(4 << 20, generator=g)
    save({"w": want}, os.path.join(root, "m.pt"))
    cache = os.path.join(small_fs, "cache")
    with rs.Nginx(root) as n, rs.FaultProxy(n.port) as p:
        r = ptfs("cat", *o(cache), n.url("old.pt"), "w")
        assert r.returncode == 0, r.stderr
        old_dirs = set(version_dirs(cache))
        assert len(old_dirs) == 1
        # the open's two requests pass, the tensor's wait for the gate
        p.faults = [None, None] + ["gate"] * 100
        proc = subprocess.Popen([PTFS, "cat", *o(cache), p.url("m.pt"), "w"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        end = time.time() + 60
        while p.seen < 3 and time.time() < end and proc.poll() is None:
            time.sleep(0.01)
        assert p.seen >= 3 and len(version_dirs(cache)) == 2
        filler = os.path.join(small_fs, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\xff" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        p.gate.set()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out == oracle.tensor_bytes(want)
        assert not (old_dirs & set(version_dirs(cache)))   # it made room


def fill(fs):
    """Fill the filesystem @fs up (another writer): its last free block
    taken, as root could (ext4 keeps 5% for root; root takes them)."""
    with open(os.path.join(fs, "filler"), "wb") as f:
        for size in (1 << 20, 4096):
            try:
                while True:
                    f.write(b"\xff" * size)
                    f.flush()
            except OSError:
                pass


def test_full_cache_filesystem_with_nothing_to_evict_is_served_from_memory(root, small_fs):
    """The cache's filesystem fills up after the open and nothing can be
    evicted (no other version, the object well within its budget): the
    reads are served from the network through the reader's buffer, every
    byte right, not EIO; once space is back, the cache is used again."""
    want = torch.randn(4 << 20, generator=torch.Generator().manual_seed(8))
    save({"w": want}, os.path.join(root, "m.pt"))
    cache = os.path.join(small_fs, "cache")
    with rs.Nginx(root) as n, rs.FaultProxy(n.port) as p:
        # the open's two requests pass, the tensor's wait for the gate
        p.faults = [None, None] + ["gate"] * 100
        proc = subprocess.Popen([PTFS, "cat", *o(cache), p.url("m.pt"), "w"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        end = time.time() + 60
        while p.seen < 3 and time.time() < end and proc.poll() is None:
            time.sleep(0.01)
        assert p.seen >= 3 and len(version_dirs(cache)) == 1
        fill(small_fs)
        p.gate.set()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out == oracle.tensor_bytes(want)
        assert b"not cached" in err, err         # said once, as a warning
        assert err.count(b"\n") == 1, err
        # a mount of it while the filesystem is still full: reads right
        with mounted(n.url("m.pt"), *o(cache)) as mnt:
            with open(os.path.join(mnt, "w"), "rb") as f:
                assert f.read() == oracle.tensor_bytes(want)
        os.unlink(os.path.join(small_fs, "filler"))
        r = ptfs("cat", *o(cache), n.url("m.pt"), "w")
        assert r.returncode == 0 and r.stdout == oracle.tensor_bytes(want), r.stderr
        assert cache_bytes(cache) >= 4 << 20     # cached again


def version_dirs(cache):
    v1 = os.path.join(cache, "v1")
    if not os.path.isdir(v1):
        return []
    return [os.path.join(v1, k, v) for k in os.listdir(v1)
            if os.path.isdir(os.path.join(v1, k))
            for v in os.listdir(os.path.join(v1, k))
            if os.path.isdir(os.path.join(v1, k, v))]
