# SPDX-License-Identifier: MIT
"""Remote checkpoints: http(s)://, hf:// (and s3:// signing, in
tests/remote/test_sigv4.c) against real servers on 127.0.0.1: nginx (HTTP,
HTTPS with a certificate made here), a fault proxy in front of it, a
stand-in for the hub's resolve endpoint.  Request counts come from nginx's
access log; every tensor is compared with torch.load of the local file.
"""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest
import torch

import oracle
import remote_servers as rs
import test_safetensors as sts
from conftest import PTFS, have_fuse, mounted, needs_curl, needs_fuse

pytestmark = needs_curl


def ptfs(*args, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([PTFS, *args], capture_output=True, timeout=timeout,
                          env=e)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A directory of checkpoints made by torch, served by nginx."""
    # nginx's worker (nobody, www-data) must read it: not under pytest's
    # private tmp
    d = tempfile.mkdtemp(prefix="ptfs-served-")
    os.chmod(d, 0o755)
    g = torch.Generator().manual_seed(16)
    objs = {
        "model.pt": {"enc.weight": torch.randn(300, 257, generator=g),
                     "enc.bias": torch.arange(7, dtype=torch.int64),
                     "half": torch.randn(5, 3, generator=g).half(),
                     "flags": torch.tensor([True, False, True]),
                     "view": torch.arange(100.)[10:20],
                     "step": 12},
        "big.pt": {"w": torch.randn(6 << 20, generator=g)},     # 24 MiB
    }
    objs["wide.pt"] = {"t%d" % i: torch.full((3,), float(i)) for i in range(20000)}
    for name, obj in objs.items():
        torch.save(obj, os.path.join(d, name))
    raw = np.arange(3000, dtype=np.float32).reshape(30, 100)
    sts.write_st(os.path.join(d, "model.safetensors"),
                 [("a.weight", "F32", raw.shape, raw.tobytes()),
                  ("b", "I64", (4,), np.arange(4, dtype=np.int64).tobytes())])
    shards = os.path.join(d, "shards")
    os.mkdir(shards)
    st_want, st_order = sts.st_shards(shards)
    xdg = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, ".xdg-cache")  # never ~
    try:
        with rs.Nginx(d, tls=True) as n:
            yield n, objs, (shards, st_want, st_order)
    finally:
        if xdg is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = xdg
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def o(cache, *more):
    return ["-o", ",".join(["cache_dir=" + cache] + list(more))]


def test_ls_pt_in_at_most_3_requests_then_every_tensor(served, cache):
    n, objs, _ = served
    url = n.url("model.pt")
    m = n.mark()
    r = ptfs("ls", *o(cache), url)
    assert r.returncode == 0, r.stderr
    reqs = n.since(m, "model.pt")
    assert 1 <= len(reqs) <= 3, reqs
    assert sum(e["bytes"] for e in reqs) < 4 * os.path.getsize(
        os.path.join(n.root, "model.pt")) + 8192
    names = [line.split()[2] for line in r.stdout.decode().splitlines()]
    assert "enc.weight" in names and "step" in names
    # every tensor and value, through the cache
    assert oracle.compare_cli(PTFS, url, torch.load(os.path.join(n.root, "model.pt")),
                              "model") > 10
    for key, t in objs["model.pt"].items():
        c = ptfs("cat", *o(cache), url, key)
        assert c.returncode == 0, c.stderr
        if isinstance(t, torch.Tensor):
            assert c.stdout == oracle.tensor_bytes(t), key


def test_ls_20000_tensors_at_most_3_requests_nothing_else(served, cache):
    n, objs, _ = served
    m = n.mark()
    r = ptfs("ls", "--max", "100000", *o(cache), n.url("wide.pt"))
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 20000
    reqs = n.since(m, "wide.pt")
    assert len(reqs) <= 3, reqs
    size = os.path.getsize(os.path.join(n.root, "wide.pt"))
    got = sum(e["bytes"] for e in reqs)
    assert got < size, (got, size)      # the tensors' bytes were not read


def test_safetensors_at_most_2_requests(served, cache):
    n, _, _ = served
    m = n.mark()
    r = ptfs("ls", *o(cache), n.url("model.safetensors"))
    assert r.returncode == 0, r.stderr
    assert len(n.since(m, "model.safetensors")) <= 2
    c = ptfs("cat", *o(cache), n.url("model.safetensors"), "a.weight")
    assert c.stdout == np.arange(3000, dtype=np.float32).tobytes()


def test_second_open_is_one_conditional_request(served, cache):
    n, objs, _ = served
    url = n.url("model.pt")
    assert ptfs("ls", *o(cache), url).returncode == 0
    m = n.mark()
    r = ptfs("cat", *o(cache), url, "enc.bias")
    assert r.returncode == 0 and r.stdout == oracle.tensor_bytes(objs["model.pt"]["enc.bias"])
    reqs = n.since(m, "model.pt")
    assert len(reqs) == 1 and reqs[0]["status"] == 304, reqs
    assert reqs[0]["if_none_match"] not in ("", "-")


def test_big_tensor_streams_in_parallel_ranges(served, cache):
    n, objs, _ = served
    m = n.mark()
    r = ptfs("cat", *o(cache), n.url("big.pt"), "w")
    assert r.returncode == 0, r.stderr
    assert r.stdout == oracle.tensor_bytes(objs["big.pt"]["w"])
    reqs = n.since(m, "big.pt")
    # 24 MiB in 8 MiB ranges from the second read on, not one request
    # per read: the open's 2, the first read's 1 MiB, then 8 MiB ranges
    assert len(reqs) <= 12, [e["range"] for e in reqs]
    assert all(e["if_match"] not in ("", "-") for e in reqs[2:])


@needs_fuse
def test_bytes_received_are_readable_before_their_range_ends(served, cache):
    """The engine hands a range's body to the cache in runs as large as
    what it received, not held until a run fills: a read of the first
    blocks of a range returns while the server still holds the rest."""
    n, objs, _ = served
    want = oracle.tensor_bytes(objs["big.pt"]["w"])
    with rs.FaultProxy(n.port) as p, mounted(p.url("big.pt"), *o(cache)) as mnt:
        with open(os.path.join(mnt, "w.json")) as f:
            base = json.load(f)["file_offset"]
        p.hold = (1 << 20, 256 << 10)   # a range's first 256 KiB, then wait
        pos = (4 << 20) - base          # in the file: 4 MiB, a block start
        fd = os.open(os.path.join(mnt, "w"), os.O_RDONLY)
        try:
            end = time.time() + 30
            while not p.held and time.time() < end:    # reads: read-ahead
                assert os.pread(fd, 65536, pos) == want[pos:pos + 65536]
                pos += 65536
                time.sleep(0.05)
            assert p.held, "no read-ahead range was asked for"
            at = p.held[0] + 65536 - base       # inside what was sent
            got = []
            t = threading.Thread(target=lambda: got.append(os.pread(fd, 65536, at)),
                                 daemon=True)
            t.start()
            # well before the engine gives the stalled answer up (15 s
            # without a byte), which would hand its bytes over too
            t.join(8)
            held_back = t.is_alive()
            p.gate.set()
            t.join(60)
            assert not held_back, "a read of received bytes waited for the rest"
            assert got == [want[at:at + 65536]]
        finally:
            p.gate.set()
            os.close(fd)


def test_https_self_signed(served, cache):
    n, objs, _ = served
    url = n.url("model.pt", tls=True)
    r = ptfs("cat", *o(cache), url, "enc.bias")
    assert r.returncode == 1
    err = r.stderr.decode()
    assert err.count("\n") == 1 and url in err, err
    m = n.mark()
    r = ptfs("cat", *o(cache, "cafile=" + n.cert), url, "enc.bias")
    assert r.returncode == 0, r.stderr
    assert r.stdout == oracle.tensor_bytes(objs["model.pt"]["enc.bias"])
    log = n.since(m, "model.pt")
    # HTTP/1.1 over TLS too (core/remote/engine.c says why)
    assert log and all(e["proto"] == "HTTP/1.1" for e in log), log
    r = ptfs("cat", *o(cache + "2"), url, "half", env={"CURL_CA_BUNDLE": n.cert})
    assert r.returncode == 0, r.stderr
    assert r.stdout == oracle.tensor_bytes(objs["model.pt"]["half"])


def test_not_found_and_denied_one_line(served, cache):
    n, _, _ = served
    url = n.url("missing.pt")
    r = ptfs("ls", *o(cache), url)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert err.count("\n") == 1 and url in err and "404" in err, err


@needs_fuse
def test_mount_every_tensor_and_memmap(served, cache):
    n, objs, _ = served
    url = n.url("model.pt")
    with mounted(url, *o(cache)) as mnt:
        oracle.compare_mount(mnt, torch.load(os.path.join(n.root, "model.pt")), "model")
        with pytest.raises(OSError):
            open(os.path.join(mnt, "enc.bias"), "r+b")
    with mounted(n.url("big.pt"), *o(cache)) as mnt:
        a = np.memmap(os.path.join(mnt, "w"), dtype=np.float32, mode="r")
        assert np.array_equal(a, objs["big.pt"]["w"].numpy())
        del a


def test_sharded_index_lazy_shards(served, cache):
    n, _, (shards, want, order) = served
    url = n.url("shards/model.safetensors.index.json")
    m = n.mark()
    r = ptfs("ls", *o(cache), url)
    assert r.returncode == 0, r.stderr
    assert [line.split()[2] for line in r.stdout.decode().splitlines()] == \
        [sts.enc(k).decode() if isinstance(sts.enc(k), bytes) else sts.enc(k) for k in order]
    reqs = n.since(m)
    per_shard = {}
    for e in reqs:
        per_shard[e["path"]] = per_shard.get(e["path"], 0) + 1
    assert all(v <= 2 for v in per_shard.values()), per_shard
    # a shard's open: its first block, nothing else (100 shards, and tensor
    # bytes left alone until read: test_remote_shards.py)
    assert all(e["range"] == "bytes=0-65535" for e in reqs
               if e["path"].endswith(".safetensors")), reqs
    for k, v in want.items():
        c = ptfs("cat", *o(cache), url, sts.enc(k))
        assert c.returncode == 0 and c.stdout == oracle.tensor_bytes(v), k


def test_two_processes_share_one_cache(served, cache):
    n, objs, _ = served
    url = n.url("big.pt")
    procs = [subprocess.Popen([PTFS, "cat", *o(cache), url, "w"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    want = oracle.tensor_bytes(objs["big.pt"]["w"])
    for (out, err), p in zip(outs, procs):
        assert p.returncode == 0, err
        assert out == want
    m = n.mark()
    r = ptfs("cat", *o(cache), url, "w")
    assert r.stdout == want
    assert len(n.since(m, "big.pt")) == 1       # all from the cache


def test_faults_are_retried(served, cache):
    n, objs, _ = served
    want = oracle.tensor_bytes(objs["big.pt"]["w"])
    with rs.FaultProxy(n.port) as p:
        p.faults = ["503", "429", None, None, "drop", "503", "drop"]
        r = ptfs("cat", *o(cache), p.url("big.pt"), "w")
        assert r.returncode == 0, r.stderr
        assert r.stdout == want
        assert p.faults == []


def test_stalled_transfer_is_given_up_and_sent_again(served, cache):
    """A request that gets no answer is abandoned after a quarter of the
    deadline (-o timeout=12: 3 s) and sent again, within the deadline.
    Counted, not timed: the client hung up on the stalled request (the proxy
    would have held it for 60 s, past the deadline), and every byte came
    through the proxy all the same (the range sent again)."""
    n, objs, _ = served
    with rs.FaultProxy(n.port) as p:
        p.stall_s = 60
        p.faults = [None, None, "stall"]     # the open's two, then the tensor
        r = ptfs("cat", *o(cache, "timeout=12"), p.url("big.pt"), "w")
        assert r.returncode == 0, r.stderr
        assert r.stdout == oracle.tensor_bytes(objs["big.pt"]["w"])
        assert p.faults == []
        assert p.abandoned == 1


def test_deadline_gives_one_line(served, cache):
    n, _, _ = served
    with rs.FaultProxy(n.port) as p:
        p.faults = ["503"] * 1000
        r = ptfs("ls", *o(cache, "timeout=2"), p.url("model.pt"))
        assert r.returncode == 1
        # retried, and given up long before the answers ran out
        assert 2 <= p.seen < 1000
        err = r.stderr.decode()
        assert err.count("\n") == 1 and "503" in err and "timeout=2" in err, err


def test_sizes_and_durations_of_the_remote_options(served, cache):
    """cache_size= reads sizes as every option does, timeout= durations;
    a size suffix is not a duration (timeout=2K once meant 2048 s)."""
    n, _, _ = served
    r = ptfs("ls", *o(cache, "cache_size=10GiB", "timeout=2m"), n.url("model.pt"))
    assert r.returncode == 0, r.stderr
    for bad, name in (("timeout=2K", "timeout"), ("timeout=1500ms", "timeout"),
                      ("timeout=-5", "timeout"), ("cache_size=1.5G", "cache_size"),
                      ("cache_size=0", "cache_size"), ("cache_size=", "cache_size")):
        r = ptfs("ls", *o(cache, bad), n.url("model.pt"))
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 2 and r.stdout == b"", (bad, r.returncode, lines)
        assert len(lines) == 2 and "'%s': %s takes" % (bad, name) in lines[0], lines


@needs_fuse
def test_object_changed_under_the_mount_is_eio(served, cache, tmp_path):
    n, objs, _ = served
    name = "changing.pt"
    path = os.path.join(n.root, name)
    torch.save({"a": torch.zeros(1 << 20), "b": torch.ones(1 << 20)}, path)
    try:
        with mounted(n.url(name), *o(cache)) as mnt:
            with open(os.path.join(mnt, "a"), "rb") as f:
                assert f.read(16) == bytes(16)
            torch.save({"a": torch.ones(1 << 20), "b": torch.zeros(1 << 20)}, path + ".new")
            os.utime(path + ".new", (time.time() + 5, time.time() + 5))
            os.rename(path + ".new", path)
            with pytest.raises(OSError) as e:
                with open(os.path.join(mnt, "b"), "rb") as f:
                    f.read()
            assert e.value.errno == 5
    finally:
        os.unlink(path)


def test_hub_resolve_pin_and_token(served, cache, tmp_path):
    n, objs, _ = served
    c1, c2 = "1" * 40, "2" * 40
    for c, val in ((c1, 1.0), (c2, 2.0)):
        os.makedirs(os.path.join(n.root, c, "sub"), exist_ok=True)
        torch.save({"x": torch.full((4,), val)}, os.path.join(n.root, c, "sub", "m.pt"))
    try:
        with rs.HubStandIn(n, {"main": c1}, token="hf_secret") as hub:
            env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "hf_secret"}
            url = "hf://org/repo/sub/m.pt"
            m = n.mark()
            r = ptfs("cat", *o(cache), url, "x", env=env)
            assert r.returncode == 0, r.stderr
            assert r.stdout == torch.full((4,), 1.0).numpy().tobytes()
            assert hub.seen and all(a == "Bearer hf_secret" for _, a in hub.seen)
            assert hub.seen[0][0] == "/org/repo/resolve/main/sub/m.pt"
            cdn = n.since(m)
            assert cdn and all(e["authorization"] == "-" for e in cdn), cdn
            assert all(e["path"].startswith("/" + c1) for e in cdn)
            # a revision given explicitly
            r = ptfs("cat", *o(cache), "hf://org/repo@%s/sub/m.pt" % c1, "x", env=env)
            assert r.returncode == 0, r.stderr
            # no token: one line, naming the URL, never a token
            r = ptfs("ls", *o(cache), url, env={"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "hf_wrong"})
            err = r.stderr.decode()
            assert r.returncode == 1 and err.count("\n") == 1 and url in err, err
            assert "hf_wrong" not in err and "401" in err
    finally:
        shutil.rmtree(os.path.join(n.root, c1))
        shutil.rmtree(os.path.join(n.root, c2))


def test_hub_repository_opens_like_its_directory(served, cache):
    """hf://ORG/REPO (and @REV, and a folder PATH/) lists the repository
    through the hub's tree API, page after page, with the token, and opens
    the checkpoint a local directory of the same files would open."""
    n, _, _ = served
    c1 = "c" * 40
    top = os.path.join(n.root, c1)
    os.makedirs(os.path.join(top, "sub"))
    os.makedirs(os.path.join(top, "docs"))
    wm = {}
    for i in range(3):
        name = "model-%05d-of-00003.safetensors" % (i + 1)
        sts.write_st(os.path.join(top, name), [("h.%d.w" % i, "I16", (3,), bytes(range(6 * i, 6 * i + 6)))])
        wm["h.%d.w" % i] = name
    sts.write_index(top, wm)
    for extra in ("config.json", "README.md", "docs/card.md"):
        with open(os.path.join(top, extra), "w") as f:
            f.write("{}")
    torch.save({"x": torch.arange(3)}, os.path.join(top, "sub", "m.pt"))
    try:
        with rs.HubStandIn(n, {"main": c1}, token="hf_secret") as hub:
            hub.tree_page = 2
            env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "hf_secret"}
            local = ptfs("ls", top)
            assert local.returncode == 0, local.stderr
            for url in ("hf://org/repo", "hf://org/repo/", "hf://org/repo@main",
                        "hf://org/repo@%s/" % c1):
                del hub.seen[:]
                r = ptfs("ls", *o(cache), url, env=env)
                assert r.returncode == 0, (url, r.stderr)
                assert r.stdout == local.stdout, url
                trees = [p for p, a in hub.seen if "/tree/" in p]
                assert len(trees) >= 3 and all(a == "Bearer hf_secret" for _, a in hub.seen), hub.seen
            r = ptfs("cat", *o(cache), "hf://org/repo/sub/", "x", env=env)
            assert r.returncode == 0 and r.stdout == torch.arange(3).numpy().tobytes(), r.stderr
            for url, want in (("hf://org/repo/docs/", "without a *.index.json"),
                              ("hf://org/repo/nope/", "404"),
                              ("hf://org/repo@%s/" % ("d" * 40), "404")):
                r = ptfs("ls", *o(cache), url, env=env)
                err = r.stderr.decode()
                assert r.returncode == 1 and err.count("\n") == 1 and url in err and want in err, err
            r = ptfs("ls", *o(cache), "hf://org/repo", env={"HF_ENDPOINT": hub.endpoint,
                                                            "HF_TOKEN": "hf_wrong"})
            err = r.stderr.decode()
            assert r.returncode == 1 and err.count("\n") == 1 and "401" in err, err
            assert "hf_wrong" not in err and "cannot list" in err
            # a next page on another host is not followed: the token
            # would go with it
            with rs.Redirector(lambda p: "/", host="127.0.0.2") as other:
                hub.link_base = "http://127.0.0.2:%d" % other.port
                r = ptfs("ls", *o(cache), "hf://org/repo", env=env)
                err = r.stderr.decode()
                assert r.returncode == 1 and "listing cannot be read" in err, err
                assert other.seen == [], other.seen
                hub.link_base = None
    finally:
        shutil.rmtree(top)


@needs_fuse
@pytest.mark.parametrize("commit_header", [True, False])
def test_hub_branch_pinned_for_the_mount(served, cache, commit_header):
    """The branch is resolved once: from X-Repo-Commit, or without it from
    /api/models/REPO/revision/BRANCH; the mount then reads that commit."""
    n, _, _ = served
    c1, c2 = "a" * 40, "b" * 40
    for c, val in ((c1, 1.0), (c2, 2.0)):
        os.makedirs(os.path.join(n.root, c), exist_ok=True)
        torch.save({"x": torch.full((4,), val), "y": torch.full((1 << 20,), val)},
                   os.path.join(n.root, c, "m.pt"))
    try:
        branches = {"main": c1}
        with rs.HubStandIn(n, branches, commit_header=commit_header) as hub:
            env = {"HF_ENDPOINT": hub.endpoint}
            os.environ.update(env)
            try:
                with mounted("hf://org/repo/m.pt", *o(cache)) as mnt:
                    branches["main"] = c2          # the branch moves on
                    with open(os.path.join(mnt, "y"), "rb") as f:
                        assert f.read() == torch.full((1 << 20,), 1.0).numpy().tobytes()
                api = [p for p, _ in hub.seen if p.startswith("/api/")]
                assert api == ([] if commit_header else
                               ["/api/models/org/repo/revision/main"]), hub.seen
            finally:
                for k in env:
                    os.environ.pop(k, None)
    finally:
        shutil.rmtree(os.path.join(n.root, c1))
        shutil.rmtree(os.path.join(n.root, c2))


def test_s3_endpoint_path_style_signed(served, cache):
    """s3://BUCKET/KEY against an S3-compatible endpoint: path style,
    signed with SigV4 (the signature itself: tests/remote/test_sigv4.c)."""
    n, objs, _ = served
    os.makedirs(os.path.join(n.root, "bkt", "run"), exist_ok=True)
    shutil.copy(os.path.join(n.root, "model.pt"), os.path.join(n.root, "bkt", "run", "model.pt"))
    env = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret/key",
           "AWS_REGION": "eu-west-3", "AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % n.port}
    try:
        m = n.mark()
        r = ptfs("cat", *o(cache), "s3://bkt/run/model.pt", "enc.bias", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout == oracle.tensor_bytes(objs["model.pt"]["enc.bias"])
        log = n.since(m)
        assert log and all(e["path"] == "/bkt/run/model.pt" for e in log), log
        assert all(e["authorization"].startswith(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") and "/eu-west-3/s3/aws4_request" in
            e["authorization"] for e in log), log
        assert "secret" not in "".join(e["authorization"] for e in log)
        # -o s3_endpoint= wins over the environment
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:1"
        r = ptfs("ls", *o(cache, "s3_endpoint=http://127.0.0.1:%d" % n.port),
                 "s3://bkt/run/model.pt", env=env)
        assert r.returncode == 0, r.stderr
    finally:
        shutil.rmtree(os.path.join(n.root, "bkt"))


def test_cache_size_evicts_least_recently_used(served, cache):
    n, _, _ = served
    v1 = os.path.join(cache, "v1")
    # held whole under a larger bound first
    assert ptfs("cat", *o(cache, "cache_size=40M"), n.url("big.pt"), "w").returncode == 0
    dirs = [os.path.join(v1, k, v) for k in os.listdir(v1)
            if os.path.isdir(os.path.join(v1, k)) for v in os.listdir(os.path.join(v1, k))
            if os.path.isdir(os.path.join(v1, k, v))]
    assert len(dirs) == 1
    time.sleep(0.05)
    # other objects under a 20 MiB bound: the least recently used version
    # goes
    assert ptfs("cat", *o(cache, "cache_size=20M"), n.url("model.pt"), "half").returncode == 0
    assert ptfs("cat", *o(cache, "cache_size=20M"), n.url("model.safetensors"), "b").returncode == 0
    assert not os.path.exists(dirs[0])
    used = sum(os.stat(os.path.join(dp, f)).st_blocks * 512
               for dp, _, fs in os.walk(cache) for f in fs)
    assert used <= 20 << 20, used


@needs_fuse
def test_daemonized_mount_reads(served, cache):
    """The mount detaches (fork) after opening: the request engine's thread
    must live on in the daemon."""
    n, objs, _ = served
    with mounted(n.url("big.pt"), *o(cache), foreground=False) as mnt:
        with open(os.path.join(mnt, "w"), "rb") as f:
            assert f.read() == oracle.tensor_bytes(objs["big.pt"]["w"])


@pytest.mark.parametrize("made_up, pages, why", [
    ((100001, False), 101, "lists more than 100000 names (or 32 MiB"),
    ((40000, False, 1024), 33, "or 32 MiB of them), not a checkpoint"),
    ((0, True), 10000, "the listing goes on past 10000 pages")],
    ids=["names", "bytes", "pages"])
def test_hub_listing_bounds(served, cache, made_up, pages, why):
    """The hub's tree has the bounds of an S3 listing (FORMATS.md): more
    than 100,000 names, more than 32 MiB of them (1,024-byte names) or
    pages without end are refused with one line once the bound is
    passed, no page asked for after it."""
    n, _, _ = served
    c1 = "e" * 40
    os.makedirs(os.path.join(n.root, c1), exist_ok=True)
    try:
        with rs.HubStandIn(n, {"main": c1}) as hub:
            hub.made_up = made_up
            r = ptfs("ls", *o(cache), "hf://org/repo", env={"HF_ENDPOINT": hub.endpoint})
            err = r.stderr.decode()
            assert r.returncode == 1 and err.count("\n") == 1, err
            assert "hf://org/repo" in err and why in err, err
            assert len([p for p, _ in hub.seen if "/tree/" in p]) == pages
    finally:
        shutil.rmtree(os.path.join(n.root, c1))


@needs_fuse
def test_hub_cdn_url_expiry_goes_back_to_the_hub(served, cache):
    """A signed CDN URL that expires under a mount (403) is replaced by
    asking the hub again, once for all the requests of a 16 MiB tensor;
    the reads go on."""
    n, _, _ = served
    c1 = "c" * 40
    os.makedirs(os.path.join(n.root, c1), exist_ok=True)
    torch.save({"x": torch.full((4,), 3.0), "y": torch.full((4 << 20,), 4.0)},
               os.path.join(n.root, c1, "m.pt"))
    expired = os.path.join(n.root, ".expired-1")
    try:
        with rs.HubStandIn(n, {"main": c1}) as hub:
            os.environ["HF_ENDPOINT"] = hub.endpoint
            try:
                with mounted("hf://org/repo/m.pt", *o(cache)) as mnt:
                    with open(os.path.join(mnt, "x"), "rb") as f:
                        assert f.read() == torch.full((4,), 3.0).numpy().tobytes()
                    open(expired, "w").close()
                    hub.sig = "2"
                    m, h = n.mark(), len(hub.seen)
                    with open(os.path.join(mnt, "y"), "rb") as f:
                        assert f.read() == torch.full((4 << 20,), 4.0).numpy().tobytes()
                    codes = [e["status"] for e in n.since(m, "m.pt")]
                    assert 403 in codes and codes[-1] == 206, codes
                    assert codes.count(206) >= 3, codes
                    resolves = [p for p, _ in hub.seen[h:] if "/resolve/" in p]
                    assert len(resolves) == 1, resolves
            finally:
                os.environ.pop("HF_ENDPOINT", None)
    finally:
        shutil.rmtree(os.path.join(n.root, c1))
        if os.path.exists(expired):
            os.unlink(expired)


def test_hub_429_waits_for_retry_after(served, cache):
    """The hub answers 429 with Retry-After: 1: the open waits that long
    and asks again, once."""
    n, _, _ = served
    c1 = "d" * 40
    os.makedirs(os.path.join(n.root, c1), exist_ok=True)
    torch.save({"x": torch.full((4,), 5.0)}, os.path.join(n.root, c1, "m.pt"))
    try:
        with rs.HubStandIn(n, {"main": c1}) as hub:
            hub.throttle = 1
            t = time.monotonic()
            r = ptfs("cat", *o(cache), "hf://org/repo/m.pt", "x",
                     env={"HF_ENDPOINT": hub.endpoint})
            assert r.returncode == 0, r.stderr
            assert r.stdout == torch.full((4,), 5.0).numpy().tobytes()
            assert time.monotonic() - t >= 1.0
            # the open's two requests (tail and head), and the one answered
            # 429 sent again, once
            assert len([p for p, _ in hub.seen if "/resolve/" in p]) == 3, hub.seen
    finally:
        shutil.rmtree(os.path.join(n.root, c1))


@needs_fuse
def test_two_mounts_share_one_cache(served, cache):
    """Two mounts of one URL at once, one cache: both read every byte right
    while they fill the same sparse file and bitmap."""
    n, objs, _ = served
    url = n.url("big.pt")
    want = oracle.tensor_bytes(objs["big.pt"]["w"])
    with mounted(url, *o(cache)) as m1, mounted(url, *o(cache)) as m2:
        got = {}

        def read(k, mnt):
            with open(os.path.join(mnt, "w"), "rb") as f:
                got[k] = f.read()

        ts = [threading.Thread(target=read, args=(k, m)) for k, m in ((1, m1), (2, m2))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert got.get(1) == want and got.get(2) == want
    m = n.mark()
    with mounted(url, *o(cache)) as m3:
        with open(os.path.join(m3, "w"), "rb") as f:
            assert f.read() == want
    assert len(n.since(m, "big.pt")) == 1          # the 304, nothing else
