# SPDX-License-Identifier: MIT
"""s3:// the way the AWS CLI does it, against a server that checks SigV4
(s3_server.py): keys and region from the profiles of a temporary HOME's
~/.aws files, path-style and virtual-hosted requests, a distinct line for
each of S3's error codes (never a secret in it), and the mount's source in
findmnt (the URL without its query).
"""
import os
import shutil
import subprocess
import tempfile

import pytest
import torch

import oracle
import s3_server
from conftest import PTFS, mounted, needs_curl, needs_fuse
from test_dcp import dcp113  # noqa: F401  (fixture)

pytestmark = needs_curl

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.fixture(scope="module")
def store():
    """ROOT/bkt/run/model.pt (and the public bucket pub), served by the
    checking server, region eu-west-3."""
    d = tempfile.mkdtemp(prefix="ptfs-s3-")
    g = torch.Generator().manual_seed(3)
    obj = {"w": torch.randn(64, 33, generator=g), "b": torch.arange(9)}
    for b in ("bkt", "pub"):
        os.makedirs(os.path.join(d, b, "run"))
        torch.save(obj, os.path.join(d, b, "run", "model.pt"))
    keys = {"AKIDDEV": SECRET, "AKIDTMP": ("SECRETTMP", "SESSIONTOK"),
            "AKIDOLD": ("SECRETOLD", "EXPIRED")}
    try:
        with s3_server.S3Checker(d, keys, region="eu-west-3",
                                 public=("pub",)) as s:
            yield s, obj
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def home(tmp_path):
    """A HOME of its own, whose ~/.aws the test writes; no AWS_* from
    the caller's environment."""
    h = tmp_path / "home"
    (h / ".aws").mkdir(parents=True)
    return h


def ptfs(home, *args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    e["HOME"] = str(home)
    e["XDG_CACHE_HOME"] = str(home / "cache")
    e.update(env or {})
    return subprocess.run([PTFS, *args], capture_output=True, timeout=120, env=e)


def write_aws(home, credentials, config):
    (home / ".aws" / "credentials").write_text(credentials)
    (home / ".aws" / "config").write_text(config)


def profiles(s, style="path", endpoint=None):
    creds = ("[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = nope\n\n"
             "[dev]\naws_access_key_id = AKIDDEV\n"
             "aws_secret_access_key = %s\n" % SECRET)
    conf = ("[default]\nregion = us-east-1\n\n[profile dev]\nregion = eu-west-3\n"
            "s3 =\n  addressing_style = %s\n  endpoint_url = %s\n"
            % (style, endpoint or s.endpoint))
    return creds, conf


def test_profile_signs_path_style(store, home):
    """AWS_PROFILE=dev: the keys of [dev] in ~/.aws/credentials, the region
    and endpoint of [profile dev] in ~/.aws/config; the server checks
    every signature."""
    s, obj = store
    write_aws(home, *profiles(s))
    n = len(s.seen)
    r = ptfs(home, "cat", "s3://bkt/run/model.pt", "w", env={"AWS_PROFILE": "dev"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == oracle.tensor_bytes(obj["w"])
    seen = s.seen[n:]
    assert seen and all(e[1].startswith("/bkt/run/model.pt") and e[2] == "AKIDDEV"
                        and e[3] == "OK" for e in seen), seen


def test_virtual_hosted(store, home):
    """s3.addressing_style = virtual: BUCKET.HOST, the key as the path."""
    s, obj = store
    write_aws(home, *profiles(s, "virtual", "http://localhost:%d" % s.port))
    n = len(s.seen)
    r = ptfs(home, "cat", "s3://bkt/run/model.pt", "b", env={"AWS_PROFILE": "dev"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == oracle.tensor_bytes(obj["b"])
    seen = s.seen[n:]
    assert seen and all(e[0] == "bkt.localhost:%d" % s.port and
                        e[1].startswith("/run/model.pt") and e[3] == "OK"
                        for e in seen), seen


def test_environment_before_profile(store, home):
    """AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and a session token) win
    over the profile's keys, as for the AWS CLI."""
    s, obj = store
    write_aws(home, *profiles(s))
    r = ptfs(home, "cat", "s3://bkt/run/model.pt", "b",
             env={"AWS_PROFILE": "dev", "AWS_ACCESS_KEY_ID": "AKIDTMP",
                  "AWS_SECRET_ACCESS_KEY": "SECRETTMP",
                  "AWS_SESSION_TOKEN": "SESSIONTOK"})
    assert r.returncode == 0, r.stderr
    assert s.seen[-1][2] == "AKIDTMP"


def fails(home, url, env, *want):
    r = ptfs(home, "ls", url, env=env)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert len(err.strip().splitlines()) == 1, err
    for w in want:
        assert w in err, err
    for secret in (SECRET, "nope", "SECRETOLD", "SECRETTMP"):
        assert secret not in err, err
    return err


def test_error_codes_have_their_own_lines(store, home):
    s, _ = store
    creds, conf = profiles(s)
    cred_file = str(home / ".aws" / "credentials")
    dev = {"AWS_PROFILE": "dev"}
    write_aws(home, creds.replace(SECRET, SECRET[:-1] + "X"), conf)
    fails(home, "s3://bkt/run/model.pt", dev, "SignatureDoesNotMatch",
          "check the secret access key", "profile 'dev' of " + cred_file)
    write_aws(home, creds.replace("AKIDDEV", "AKIDWHO"), conf)
    fails(home, "s3://bkt/run/model.pt", dev, "InvalidAccessKeyId",
          "no such access key id", "profile 'dev' of " + cred_file)
    write_aws(home, creds, conf)
    fails(home, "s3://nobkt/run/model.pt", dev, "NoSuchBucket", "no such bucket")
    fails(home, "s3://bkt/run/gone.pt", dev, "NoSuchKey", "no such key")
    fails(home, "s3://bkt/run/model.pt", dict(dev, AWS_REGION="us-west-1"),
          "AuthorizationHeaderMalformed", "signed for the wrong region")
    fails(home, "s3://bkt/run/model.pt",
          {"AWS_ACCESS_KEY_ID": "AKIDOLD", "AWS_SECRET_ACCESS_KEY": "SECRETOLD",
           "AWS_SESSION_TOKEN": "EXPIRED", "AWS_REGION": "eu-west-3",
           "AWS_ENDPOINT_URL": s.endpoint},
          "ExpiredToken", "renew the keys", "the environment's AWS_ACCESS_KEY_ID")
    # no keys anywhere: S3 says AccessDenied, and we say where we looked
    (home / ".aws" / "credentials").unlink()
    fails(home, "s3://bkt/run/model.pt", {"AWS_REGION": "eu-west-3",
                                          "AWS_ENDPOINT_URL": s.endpoint},
          "AccessDenied", "none (not in the environment, nor in profile 'default'")


def test_profile_problems(store, home):
    """A profile named but found nowhere, a malformed file: one line that
    names it (the file and line), no secret."""
    s, _ = store
    creds, conf = profiles(s)
    write_aws(home, creds, conf)
    fails(home, "s3://bkt/run/model.pt", {"AWS_PROFILE": "ghost"},
          "no profile 'ghost' in ")
    write_aws(home, creds + "aws_session_token %s\n" % SECRET, conf)
    fails(home, "s3://bkt/run/model.pt", {"AWS_PROFILE": "dev"},
          str(home / ".aws" / "credentials") + ":8: expected [SECTION] or KEY = VALUE")
    # AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE move them
    other = home / "elsewhere"
    other.mkdir()
    (other / "c").write_text(creds)
    (other / "f").write_text(conf)
    (home / ".aws" / "credentials").unlink()
    (home / ".aws" / "config").unlink()
    r = ptfs(home, "ls", "s3://bkt/run/model.pt",
             env={"AWS_PROFILE": "dev", "AWS_SHARED_CREDENTIALS_FILE": str(other / "c"),
                  "AWS_CONFIG_FILE": str(other / "f")})
    assert r.returncode == 0, r.stderr


def findmnt_source(mnt):
    return subprocess.run(["findmnt", "-n", "-o", "SOURCE", mnt],
                          capture_output=True, text=True).stdout.strip()


@needs_fuse
def test_findmnt_shows_the_url(store, home, monkeypatch):
    """findmnt/df show a URL mount's source as the URL without its query
    (not "ptfs")."""
    s, obj = store
    write_aws(home, *profiles(s))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("AWS_PROFILE", "dev")
    with mounted("s3://bkt/run/model.pt") as mnt:
        assert findmnt_source(mnt) == "s3://bkt/run/model.pt"
        assert sorted(os.listdir(mnt))
    url = "%s/pub/run/model.pt?X-Amz-Signature=QUERYSECRET" % s.endpoint
    with mounted(url) as mnt:
        src = findmnt_source(mnt)
        assert src == "%s/pub/run/model.pt" % s.endpoint, src
        with open(os.path.join(mnt, "b"), "rb") as f:
            assert f.read() == oracle.tensor_bytes(obj["b"])


# ---- a checkpoint stored under a prefix: s3://BUCKET/PREFIX/ ----

@pytest.fixture(scope="module")
def listed(dcp113):
    """ROOT/lst/{sharded,dcp,single,empty}/ (a safetensors index and its
    three shards; a DCP checkpoint; one model.pt; no checkpoint) served
    in pages of 3 names, so that every listing takes several requests."""
    from test_safetensors import write_index, write_st
    d = tempfile.mkdtemp(prefix="ptfs-s3ls-")
    b = os.path.join(d, "lst")
    sh = os.path.join(b, "sharded")
    os.makedirs(sh)
    wm = {}
    for i in range(3):
        name = "model-%05d-of-00003.safetensors" % (i + 1)
        write_st(os.path.join(sh, name), [("layer%d.w" % i, "I32", (4,), bytes(range(16 * i, 16 * i + 16)))])
        wm["layer%d.w" % i] = name
    write_index(sh, wm)
    with open(os.path.join(sh, "config.json"), "w") as f:
        f.write("{}")
    shutil.copytree(dcp113[0], os.path.join(b, "dcp"))
    os.makedirs(os.path.join(b, "single", "logs"))
    torch.save({"w": torch.arange(5)}, os.path.join(b, "single", "model.pt"))
    for extra in ("args.yaml", "notes & <todo>.txt", "logs/train.log"):
        with open(os.path.join(b, "single", extra), "w") as f:
            f.write("-")
    os.makedirs(os.path.join(b, "empty"))
    with open(os.path.join(b, "empty", "README.txt"), "w") as f:
        f.write("nothing here")
    try:
        with s3_server.S3Checker(d, {"AKIDDEV": SECRET}, region="eu-west-3") as s:
            s.page_size = 3
            yield s, b
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("kind", ["sharded", "dcp", "single"])
def test_prefix_opens_like_its_directory(listed, home, kind):
    """`ptfs ls s3://lst/KIND/` lists the prefix (ListObjectsV2, page by
    page, signed), picks the checkpoint file as for a local directory and
    shows what the local directory shows."""
    s, b = listed
    write_aws(home, *profiles(s))
    dev = {"AWS_PROFILE": "dev"}
    n = len(s.seen)
    r = ptfs(home, "ls", "s3://lst/%s/" % kind, env=dev)
    assert r.returncode == 0, r.stderr
    local = ptfs(home, "ls", os.path.join(b, kind))
    assert local.returncode == 0, local.stderr
    assert r.stdout == local.stdout and r.stdout
    lists = [e for e in s.seen[n:] if "list-type=2" in e[1]]
    assert len(lists) >= 2 and all(e[2] == "AKIDDEV" and e[3] == "List" for e in lists), lists
    name = local.stdout.split(b"\n")[0].split()[2].decode()
    got = ptfs(home, "cat", "s3://lst/%s/" % kind, name, env=dev)
    assert got.returncode == 0 and got.stdout == ptfs(home, "cat", os.path.join(b, kind), name).stdout


def test_prefix_virtual_hosted(listed, home):
    s, b = listed
    write_aws(home, *profiles(s, "virtual", "http://localhost:%d" % s.port))
    r = ptfs(home, "ls", "s3://lst/sharded/", env={"AWS_PROFILE": "dev"})
    assert r.returncode == 0, r.stderr
    assert b"layer2.w" in r.stdout
    assert s.seen[-1][0] == "lst.localhost:%d" % s.port


def test_prefix_problems_have_one_line(listed, home):
    s, _ = listed
    write_aws(home, *profiles(s))
    dev = {"AWS_PROFILE": "dev"}
    fails(home, "s3://lst/empty/", dev, "s3://lst/empty/",
          "without a *.index.json or weights file")
    fails(home, "s3://nobucket/x/", dev, "cannot list", "NoSuchBucket")
    fails(home, "s3://lst/sharded/", {"AWS_ACCESS_KEY_ID": "AKIDBAD",
                                      "AWS_SECRET_ACCESS_KEY": "nope",
                                      "AWS_ENDPOINT_URL": s.endpoint,
                                      "AWS_REGION": "eu-west-3"},
          "cannot list", "InvalidAccessKeyId")
    fails(home, "s3://lst/../x/", dev, "expected s3://BUCKET/PREFIX/")
    fails(home, "http://127.0.0.1:%d/lst/sharded/" % s.port, dev,
          "only s3:// and hf:// directories can be listed")


# runs argv[1:] and prints its peak RSS in bytes
PEAK = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)")
ASAN = b"AddressSanitizer" in subprocess.run([PTFS, "--version"], capture_output=True).stdout


@pytest.fixture
def made_up(listed):
    """The listed server answering every listing with made-up names, 1000
    to a page (S3's own page size)."""
    s, _ = listed
    s.page_size = 1000
    try:
        yield s
    finally:
        s.page_size, s.made_up = 3, None


def test_prefix_listing_past_100000_names_is_refused(made_up, home):
    """A prefix holding more names than a checkpoint directory could
    (100,001) is refused with one line once the bound is passed: no
    more pages asked for, memory bounded."""
    s = made_up
    write_aws(home, *profiles(s))
    s.made_up = (100001, False)
    n = len(s.seen)
    err = fails(home, "s3://lst/many/", {"AWS_PROFILE": "dev"}, "s3://lst/many/",
                "lists more than 100000 names (or 32 MiB")
    lists = [e for e in s.seen[n:] if "list-type=2" in e[1]]
    assert len(lists) == 101, (len(lists), err)
    # the same, measured: the process's peak memory (a page's XML, the
    # names kept: ~2 MB of them)
    e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    e.update(HOME=str(home), XDG_CACHE_HOME=str(home / "cache"), AWS_PROFILE="dev")
    r = subprocess.run(["/usr/bin/python3", "-c", PEAK, PTFS, "ls", "s3://lst/many/"],
                       capture_output=True, env=e, timeout=120)
    peak = int(r.stdout)
    print("peak RSS of a 100,001-name listing: %.1f MiB" % (peak / (1 << 20)))
    assert peak < (3 if ASAN else 1) * (48 << 20), peak


def test_prefix_listing_past_32_mib_of_names_is_refused(made_up, home):
    """Names as long as S3 allows (1,024 bytes), 40,000 of them: refused
    once 32 MiB of names are kept, with one line."""
    s = made_up
    write_aws(home, *profiles(s))
    s.made_up = (40000, False, 1024)
    n = len(s.seen)
    fails(home, "s3://lst/long/", {"AWS_PROFILE": "dev"}, "s3://lst/long/",
          "or 32 MiB of them), not a checkpoint")
    assert len([e for e in s.seen[n:] if "list-type=2" in e[1]]) == 33


def test_prefix_listing_without_end_is_given_up(made_up, home):
    """Pages that never end (each one empty, with a next token: a hostile
    or broken server) are given up after 10,000, with one line."""
    s = made_up
    write_aws(home, *profiles(s))
    s.made_up = (0, True)
    n = len(s.seen)
    fails(home, "s3://lst/loop/", {"AWS_PROFILE": "dev"}, "s3://lst/loop/",
          "the listing goes on past 10000 pages")
    assert len([e for e in s.seen[n:] if "list-type=2" in e[1]]) == 10000
