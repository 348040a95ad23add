# SPDX-License-Identifier: MIT
"""contrib/ptfs.bash-completion: commands, options, -o names, files, and
paths inside a checkpoint taken from `ptfs ls` -- called the way bash
calls it (COMP_WORDS, COMP_CWORD, then _ptfs; COMPREPLY is the answer)."""
import os
import subprocess

import pytest
import torch

from conftest import PTFS, ROOT

SCRIPT = os.path.join(ROOT, "contrib", "ptfs.bash-completion")


def complete(*words, cwd=None):
    code = ('source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ptfs; '
            'printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "-c", code, SCRIPT, *words], cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return [w for w in r.stdout.splitlines() if w]


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    d = tmp_path_factory.mktemp("comp")
    p = d / "model.pt"
    torch.save({"model": {"layer.weight": torch.ones(2, 2), "layer.bias": torch.zeros(2)},
                "module_count": 3, "opt": [torch.ones(1)]}, str(p))
    (d / "mnt").mkdir()
    return d


def test_commands_and_options(ck):
    # the first word: a subcommand, or the checkpoint of a mount
    assert sorted(complete(PTFS, "", cwd=ck)) == ["add", "cat", "close", "diff", "export", "info",
                                                   "ls", "mkdir", "mnt", "model.pt", "mv", "open",
                                                   "preview", "recover", "rename", "rm", "set",
                                                   "stat", "thumbnail", "tree", "umount"]
    assert sorted(complete(PTFS, "c", cwd=ck)) == ["cat", "close"]
    assert set(complete(PTFS, "open", "-")) == {"-n", "--no-browse"}
    assert complete(PTFS, "open", "mod", cwd=ck) == ["model.pt"]
    assert sorted(complete(PTFS, "m", cwd=ck)) == ["mkdir", "mnt", "model.pt", "mv"]
    assert complete(PTFS, "--v") == ["--version"]
    assert set(complete(PTFS, "-")) == {"-f", "-d", "-s", "-o", "-u", "-h", "--help",
                                        "-V", "--version"}
    assert set(complete(PTFS, "recover", "-")) == {"--discard", "--force", "-o", "--progress", "--no-progress"}
    assert set(complete(PTFS, "ls", "-")) == {"-a", "--max", "--nested", "-o"}
    assert set(complete(PTFS, "info", "-")) == {"--weights-only", "-o"}
    assert set(complete(PTFS, "tree", "-")) == {"--json", "--max", "--nested", "-o"}
    assert complete(PTFS, "export", "--s") == ["--shard-size", "--skip-unsupported"]
    assert complete(PTFS, "export", "--to", "s") == ["safetensors"]
    assert set(complete(PTFS, "set", "-")) == {"-v", "-o", "--dtype", "--shape", "--progress",
                                               "--no-progress"}
    assert set(complete(PTFS, "rename", "--")) == {"--dry-run", "--verbose", "--strip-prefix",
                                                   "--add-prefix", "--sed"}
    assert complete(PTFS, "add", "--dtype", "bfl") == ["bfloat16"]
    assert set(complete(PTFS, "diff", "-")) == {"--json", "-q", "-j", "--tensors-only", "--nested", "-o",
                                                "--progress", "--no-progress"}
    assert complete(PTFS, "stat", "--p") == ["--progress"]
    assert complete(PTFS, "export", "model.pt", "--to", "s") == ["safetensors"]
    assert complete(PTFS, "tree", "--j") == ["--json"]


def test_export_targets_are_the_table():
    # the completion cannot read the exporter table: it must list the
    # targets `ptfs export --list-targets` prints, in its order
    r = subprocess.run([PTFS, "export", "--list-targets"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    targets = [line.split()[0] for line in r.stdout.splitlines()]
    assert targets, r.stdout
    assert complete(PTFS, "export", "--to", "") == targets
    assert "--list-targets" in complete(PTFS, "export", "--l")


def test_o_names():
    assert complete(PTFS, "-o", "allow") == ["allow_other"]
    assert complete(PTFS, "-o", "ro,max_de") == ["ro,max_depth="]
    assert set(complete(PTFS, "-o", "commit=")) == {
        "commit=auto", "commit=rewrite", "commit=clone", "commit=inplace"}
    assert complete(PTFS, "set", "-o", "com") == ["commit="]
    assert complete(PTFS, "info", "-o", "cache_s") == ["cache_size="]
    # the subcommands take no mount options
    assert complete(PTFS, "ls", "-o", "r") == []
    assert complete(PTFS, "ls", "-o", "com") == []
    assert complete(PTFS, "-o", "none") == ["nonempty"]


def test_every_limit_of_help():
    """Every -o max_*= of `ptfs --help` is completed, for the mount and for
    the subcommands (five were missing)."""
    import re
    help_text = subprocess.run([PTFS, "--help"], capture_output=True, text=True).stdout
    limits = set(re.findall(r"-o (max_[a-z_]+=)", help_text))
    assert len(limits) >= 11, limits
    assert set(complete(PTFS, "cat", "-o", "max_")) == limits
    # the mount also gets libfuse's max_threads= and max_idle_threads=
    assert set(complete(PTFS, "-o", "ro,max_")) == {"ro," + x for x in limits} | {
        "ro,max_threads=", "ro,max_idle_threads="}


def test_files_and_mountpoints(ck):
    assert complete(PTFS, "cat", "mod", cwd=ck) == ["model.pt"]
    assert complete(PTFS, "model.pt", "m", cwd=ck) == ["mnt"]  # directories only


def test_paths_inside_the_checkpoint(ck):
    assert complete(PTFS, "cat", "model.pt", "mod", cwd=ck) == ["model/", "module_count"]
    assert complete(PTFS, "cat", "model.pt", "model/", cwd=ck) == [
        "model/layer.weight", "model/layer.weight.json",
        "model/layer.bias", "model/layer.bias.json"]
    assert complete(PTFS, "ls", "model.pt", "model/layer.b", cwd=ck) == [
        "model/layer.bias", "model/layer.bias.json"]
    assert complete(PTFS, "cat", "model.pt", "o", cwd=ck) == ["opt/"]
    assert complete(PTFS, "cat", "model.pt", "opt/", cwd=ck) == ["opt/0", "opt/0.json"]
    # options before the checkpoint are skipped; --nested splits dotted keys
    assert complete(PTFS, "cat", "--nested", "-o", "max_depth=50", "model.pt",
                    "model/", cwd=ck) == ["model/layer/"]
    # /.ptfs only when a dot is typed
    assert ".ptfs/" not in complete(PTFS, "cat", "model.pt", "", cwd=ck)
    assert complete(PTFS, "cat", "model.pt", ".", cwd=ck) == [".ptfs/"]
    # nothing after the path, nothing for a file that is not a checkpoint
    assert complete(PTFS, "cat", "model.pt", "opt/0", "", cwd=ck) == []
    assert complete(PTFS, "cat", "missing.pt", "m", cwd=ck) == []


def test_names_with_spaces(tmp_path):
    torch.save({"a key": torch.ones(1)}, str(tmp_path / "my model.pt"))
    assert complete(PTFS, "info", "my", cwd=tmp_path) == ["my model.pt"]
    # a path inside the checkpoint comes back shell-quoted
    assert complete(PTFS, "cat", "my model.pt", "a", cwd=tmp_path) == [r"a\ key", r"a\ key.json"]
    assert complete(PTFS, "cat", "my model.pt", r"a\ key.", cwd=tmp_path) == [r"a\ key.json"]
    assert complete(PTFS, "cat", "my model.pt", '"a k', cwd=tmp_path) == [r"a\ key", r"a\ key.json"]
    # the checkpoint as bash passes it, escaped or quoted
    assert complete(PTFS, "cat", r"my\ model.pt", "a", cwd=tmp_path) == [r"a\ key", r"a\ key.json"]
    assert complete(PTFS, "ls", "'my model.pt'", "a", cwd=tmp_path) == [r"a\ key", r"a\ key.json"]


def test_export_and_tree(ck):
    # export: the checkpoint, then the output (files), never tree paths
    assert complete(PTFS, "export", "mo", cwd=ck) == ["model.pt"]
    assert sorted(complete(PTFS, "export", "--to", "npy", "model.pt", "m", cwd=ck)) == ["mnt", "model.pt"]
    assert complete(PTFS, "export", "model.pt", "--shard-size", "1G", "mn", cwd=ck) == ["mnt"]
    # tree and info take only the checkpoint
    assert complete(PTFS, "tree", "--json", "model.pt", "m", cwd=ck) == []
    assert complete(PTFS, "info", "model.pt", "m", cwd=ck) == []


def test_every_subcommand_of_help(tmp_path):
    """A subcommand `ptfs --help` shows is completed (catches new ones)."""
    import re
    help_text = subprocess.run([PTFS, "--help"], capture_output=True, text=True).stdout
    cmds = set(re.findall(r"^\s*(?:usage: )?ptfs ([a-z]+)", help_text, re.M))
    assert len(cmds) >= 4, help_text
    assert cmds <= set(complete(PTFS, "", cwd=tmp_path)), cmds
