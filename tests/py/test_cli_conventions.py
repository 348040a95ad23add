# SPDX-License-Identifier: MIT
"""The command line behaves like its neighbours (git, tar, coreutils):

- a usage error is one line naming the problem, then "Try 'ptfs SUB
  --help'", on stderr, exit 2 -- never the whole usage text;
- `ptfs SUB --help` prints that subcommand's usage on stdout, exit 0;
- an unknown option is an error, never taken for a file name;
- a mistyped subcommand that names no file says "did you mean";
- the mountpoint must be an empty directory that is not a ptfs mount
  already (exit 1: not a usage error);
- long commands show a progress bar on a terminal and nothing in a pipe.
"""
import os
import pty
import re
import subprocess

import time

import pytest
import torch

from conftest import PTFS, is_mounted, needs_fuse, unmount

# every subcommand: the operands that make a complete command line, and
# one more makes an extra argument (CK is replaced by a checkpoint)
FULL = {
    "ls": ["CK", "a"],
    "cat": ["CK", "a"],
    "info": ["CK"],
    "set": ["CK", "a"],
    "tree": ["--json", "CK"],
    "export": ["CK", "--to", "npy", "out"],
    "stat": ["CK", "a"],
    "diff": ["CK", "CK"],
    "preview": ["CK", "a"],
    "thumbnail": ["in", "out.png"],
    "umount": ["mnt"],
    "recover": ["CK"],
    "open": ["CK"],
    "close": ["CK"],
}


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    p = d / "model.pt"
    torch.save({"a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
                "b": torch.zeros(4)}, str(p))
    return d


def ptfs(*args, cwd=None, stdin=subprocess.DEVNULL):
    return subprocess.run([PTFS, *args], capture_output=True, cwd=cwd, stdin=stdin,
                          timeout=120)


def usage_error(r, cmd, what):
    """Exit 2, stdout empty, exactly one line naming the problem (with
    @what in it) and the hint for @cmd."""
    lines = r.stderr.decode().splitlines()
    hint = "Try 'ptfs %s --help'" % cmd if cmd else "Try 'ptfs --help'"
    assert r.returncode == 2, (r.returncode, lines)
    assert r.stdout == b""
    assert len(lines) == 2 and lines[1] == hint, lines
    assert lines[0].startswith("ptfs") and what in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("cmd", sorted(FULL))
def test_help(cmd):
    for flag in ("--help", "-h"):
        r = ptfs(cmd, flag)
        assert r.returncode == 0 and r.stderr == b"", r.stderr
        text = r.stdout.decode()
        assert text.startswith("usage: ptfs %s" % cmd), text
        assert "Exit status" in text
        # the subcommand's own text, not the whole usage
        assert len(text.splitlines()) < 25
    # --help wins wherever it stands, even among bad arguments
    r = ptfs(cmd, "--bogus", "x", "--help")
    assert r.returncode == 0 and r.stdout.startswith(b"usage: ptfs " + cmd.encode())
    # `ptfs help SUBCOMMAND` is the same text
    assert ptfs("help", cmd).stdout == ptfs(cmd, "--help").stdout


@pytest.mark.parametrize("cmd", sorted(FULL))
def test_no_arguments(cmd, ck):
    r = ptfs(cmd, cwd=ck)
    usage_error(r, cmd, "missing")


@pytest.mark.parametrize("cmd", sorted(FULL))
def test_unknown_option_is_not_a_file(cmd, ck):
    # "No such file or directory" was the answer: the option taken for a file
    for opt in ("--bogus", "-Z", "--weights-onl"):
        r = ptfs(cmd, opt, "model.pt", cwd=ck)
        line = usage_error(r, cmd, "unknown option '%s'" % opt)
        assert "No such file" not in line


@pytest.mark.parametrize("cmd", sorted(FULL))
def test_extra_argument(cmd, ck):
    args = [("model.pt" if a == "CK" else a) for a in FULL[cmd]] + ["extra"]
    r = ptfs(cmd, *args, cwd=ck)
    usage_error(r, cmd, "extra argument 'extra'")


@pytest.mark.parametrize("cmd", sorted(FULL))
def test_typo(cmd, ck):
    typo = cmd + cmd[-1]          # "lss", "catt", "statt", ...
    r = ptfs(typo, "model.pt", cwd=ck)
    line = usage_error(r, None, "unknown command '%s'" % typo)
    assert line.endswith("did you mean '%s'?" % cmd), line


def test_typos_and_files(ck, tmp_path):
    # a swap of two letters is one edit; several candidates are all named
    usage_error(ptfs("ifno", "model.pt", cwd=ck), None, "did you mean 'info'?")
    line = usage_error(ptfs("sat", "model.pt", cwd=ck), None, "did you mean")
    assert "'set'" in line and "'stat'" in line and "'cat'" in line
    # two edits in a long name, not in a short one
    usage_error(ptfs("thubmnal", "model.pt", cwd=ck), None, "did you mean 'thumbnail'?")
    usage_error(ptfs("lz", "model.pt", cwd=ck), None, "did you mean 'ls'?")
    usage_error(ptfs("zz", cwd=ck), None, "missing MOUNTPOINT")
    # a word far from every subcommand is a checkpoint to mount
    r = ptfs("nothing-like-it.pt", cwd=ck)
    usage_error(r, None, "missing MOUNTPOINT")
    # an existing file is a checkpoint, however close to a subcommand
    (tmp_path / "lss").write_bytes(b"not a checkpoint")
    (tmp_path / "m").mkdir()
    r = ptfs("lss", "m", cwd=tmp_path)
    assert r.returncode == 1 and b"did you mean" not in r.stderr, r.stderr
    assert not is_mounted(tmp_path / "m")


def test_specific_usage_errors(ck):
    usage_error(ptfs(), None, "missing CHECKPOINT")
    usage_error(ptfs("--bogus", "a", "b"), None, "unknown option '--bogus'")
    usage_error(ptfs("model.pt", "m", "x", cwd=ck), None, "extra argument 'x'")
    usage_error(ptfs("export", "model.pt", "--to", "csv", "o", cwd=ck), "export",
                "--to takes safetensors, pt or npy, not 'csv'")
    usage_error(ptfs("export", "model.pt", "o", cwd=ck), "export", "missing --to")
    usage_error(ptfs("tree", "model.pt", cwd=ck), "tree", "--json")
    usage_error(ptfs("ls", "--max", cwd=ck), "ls", "--max needs a value")
    usage_error(ptfs("ls", "--max", "0", "model.pt", cwd=ck), "ls", "--max")
    usage_error(ptfs("stat", "-j", "0", "model.pt", cwd=ck), "stat", "-j takes")
    usage_error(ptfs("ls", "-o", "bogus", "model.pt", cwd=ck), "ls", "'-o bogus'")
    usage_error(ptfs("ls", "-o", cwd=ck), "ls", "-o needs a value")
    usage_error(ptfs("info", "--weights-only", cwd=ck), "info", "missing CHECKPOINT")
    usage_error(ptfs("recover", "--discard", "--force", "model.pt", cwd=ck), "recover",
                "exclude each other")
    # options that belong to other subcommands are unknown here
    usage_error(ptfs("ls", "-v", "model.pt", cwd=ck), "ls", "unknown option '-v'")
    usage_error(ptfs("cat", "--progress", "model.pt", "a", cwd=ck), "cat",
                "unknown option '--progress'")


def test_byte_caps_take_sizes(ck):
    """The byte caps read sizes the way every size option does (k = KiB,
    kB = 1000, KiB); the counts stay plain numbers."""
    assert ptfs("ls", "-o", "max_memory=1G,max_walk_bytes=64MiB", "model.pt",
                cwd=ck).returncode == 0
    # a suffix that parses is applied: 100 bytes cannot hold the pickle
    r = ptfs("ls", "-o", "max_pickle_bytes=100B", "model.pt", cwd=ck)
    assert r.returncode == 1 and b"pickle limit of 100\n" in r.stderr, r.stderr
    assert ptfs("ls", "-o", "max_pickle_bytes=1k", "model.pt", cwd=ck).returncode == 0
    for bad in ("max_memory=1.5G", "max_memory=-1", "max_memory=0",
                "max_memory=1X", "max_walk_bytes=", "max_values=1k"):
        name = bad.split("=")[0]
        usage_error(ptfs("ls", "-o", bad, "model.pt", cwd=ck), "ls",
                    "'%s': %s takes" % (bad, name))
    usage_error(ptfs("export", "model.pt", "--to", "safetensors", "--shard-size", "1.5G",
                     "o", cwd=ck), "export", "--shard-size takes a size")


def test_options_in_any_order_and_double_dash(ck):
    r = ptfs("ls", "model.pt", "--max=1", cwd=ck)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.stdout
    r = ptfs("ls", "--", "model.pt", cwd=ck)
    assert r.returncode == 0 and b"  a  float32 [2, 3]" in r.stdout, r.stdout
    # after "--" a name that starts with '-' is a file, not an option
    r = ptfs("ls", "--", "-no-such.pt", cwd=ck)
    assert r.returncode == 1 and b"-no-such.pt" in r.stderr, r.stderr


def test_weights_only_exit_codes(ck, tmp_path):
    # 0 accepted
    assert ptfs("info", "--weights-only", "model.pt", cwd=ck).returncode == 0
    # 1 refused
    bad = tmp_path / "bad.pt"
    torch.save({"w": torch.ones(2), "f": os.path.join}, str(bad))
    r = ptfs("info", "--weights-only", str(bad))
    assert r.returncode == 1 and b"weights_only: no" in r.stdout, (r.stdout, r.stderr)
    # 2 trouble: no verdict
    r = ptfs("info", "--weights-only", str(tmp_path / "missing.pt"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00" * 100)
    assert ptfs("info", "--weights-only", str(junk)).returncode == 2


@needs_fuse
def test_mountpoint_must_be_an_empty_directory(ck, tmp_path):
    model = str(ck / "model.pt")
    before = open(model, "rb").read()

    def refused(mp, what, *opts):
        r = ptfs(*opts, model, mp)
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and what in lines[0], lines
        assert not is_mounted(mp) or mp == mnt

    # onto the checkpoint itself (its name given twice), onto a file
    refused(model, "not a directory")
    other = tmp_path / "file"
    other.write_bytes(b"x")
    refused(str(other), "not a directory")
    # a mountpoint that is not there: not a usage error
    refused(str(tmp_path / "missing"), "No such file or directory")
    # a directory with files, unless -o nonempty
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep").write_bytes(b"k")
    mnt = None
    refused(str(full), "not empty (-o nonempty")
    r = ptfs("-o", "nonempty", model, str(full))
    try:
        assert r.returncode == 0 and is_mounted(full), r.stderr
        assert "keep" not in os.listdir(full) and "a.json" in os.listdir(full)
    finally:
        unmount(str(full))
    assert (full / "keep").read_bytes() == b"k"
    # twice on one directory: the second is refused, nothing stacks
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    r = ptfs(model, mnt)
    try:
        assert r.returncode == 0, r.stderr
        refused(mnt, "already a ptfs mount")
        refused(mnt, "already a ptfs mount", "-o", "nonempty")
        with open("/proc/self/mountinfo") as f:
            assert sum(line.split()[4] == os.path.realpath(mnt) for line in f) == 1
    finally:
        unmount(mnt)
    assert open(model, "rb").read() == before


# ---- progress ----

def run_on_pty(args, cwd=None):
    """Run ptfs with stderr on a pseudo-terminal, stdout a pipe: (exit
    status, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([PTFS, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    term = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:         # EIO: the other side is closed
            break
        if not chunk:
            break
        term += chunk
    os.close(master)
    out = p.stdout.read()
    p.stdout.close()
    return p.wait(timeout=120), out, term


BAR = re.compile(rb"\r(stat|diff|export|set|recover)  [0-9.]+ [KMGT]?i?B / [0-9.]+ [KMGT]?i?B +"
                 rb"\d+%  [0-9.]+ [KMGT]?i?B/s[^\r]*\x1b\[K")


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Enough bytes that the bar has something to count (8 MiB)."""
    d = tmp_path_factory.mktemp("prog")
    p = d / "big.pt"
    torch.manual_seed(0)
    torch.save({"t%d" % i: torch.randn(1 << 18) for i in range(8)}, str(p))
    q = d / "big2.pt"
    sd = torch.load(str(p))
    sd["t3"][7] = 1.0
    torch.save(sd, str(q))
    return d


@pytest.mark.parametrize("args", [["stat", "big.pt"], ["diff", "big.pt", "big2.pt"],
                                  ["export", "big.pt", "--to", "safetensors", "o.st"]])
def test_progress_bar_on_a_terminal_only(big, args):
    t0 = time.monotonic()
    rc, out, term = run_on_pty(args, cwd=big)
    elapsed = time.monotonic() - t0
    assert rc in (0, 1), term
    bars = BAR.findall(term)
    assert bars and set(bars) == {args[0].encode()}, term[:400]
    # at most ten frames a second (the first at once): an upper bound that
    # a slow machine only makes looser, never a deadline
    assert len(bars) <= 10 * elapsed + 2, (len(bars), elapsed)
    # cleared at the end: the last thing on the terminal erases the line
    assert term.endswith(b"\r\x1b[K"), term[-100:]
    # in a pipe: nothing at all on stderr, the same output
    r = ptfs(*args, cwd=big)
    assert r.returncode == rc and r.stderr == b"", r.stderr
    if args[0] != "export":
        assert r.stdout == out
    # --no-progress on a terminal: no bar; --progress in a pipe: a bar
    rc2, out2, term2 = run_on_pty(args + ["--no-progress"], cwd=big)
    assert rc2 == rc and term2 == b"", term2
    r = ptfs(args[0], "--progress", *args[1:], cwd=big)
    assert r.returncode == rc and BAR.search(r.stderr), r.stderr


def test_progress_of_set(big, tmp_path):
    p = tmp_path / "s.pt"
    torch.save({"w": torch.zeros(1 << 20)}, str(p))
    data = torch.ones(1 << 20).numpy().tobytes()
    master, slave = pty.openpty()
    proc = subprocess.Popen([PTFS, "set", str(p), "w"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    proc.stdin.write(data)
    proc.stdin.close()
    term = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        term += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0, term
    assert BAR.search(term) and term.endswith(b"\r\x1b[K"), term
    assert torch.load(str(p))["w"].sum().item() == 1 << 20


def test_stat_streams_in_a_stable_order(big):
    # the lines come in tree order whatever the number of threads
    one = ptfs("stat", "-j", "1", "big.pt", cwd=big).stdout
    four = ptfs("stat", "-j4", "big.pt", cwd=big).stdout
    assert one == four
    names = [line.split()[0] for line in one.decode().splitlines()[:-1]]
    assert names == ["t%d" % i for i in range(8)]
    d = ptfs("diff", "-j", "3", "big.pt", "big2.pt", cwd=big)
    assert d.returncode == 1 and d.stdout.decode().splitlines()[0].startswith("~ t3 ")
