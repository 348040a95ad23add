# SPDX-License-Identifier: MIT
"""Checkpoints for the benchmark suite, saved with the real torch.save.

    seq.pt    one 1 GiB float32 tensor "w" plus a small one (sequential
              read, numpy.memmap, the peer mounters)
    big.pt    2 GiB: eight 256 MiB tensors "layers.N.weight" plus a 4 KiB
              tensor "small" (daemon memory, commit)
    many.pt   a 20,000-tensor state dict of small tensors (open and list)
    peer.pt   one 64 MiB tensor: archivemount re-reads the archive from the
              start for every FUSE read (quadratic), so 1 GiB would take
              hours there
    probe.pt  a tiny checkpoint to probe whether `ptfs set` works

The contents are cheap to make (arange, fill) -- nothing here depends on
the values.  Sizes shrink with --quick.
"""
import collections
import os

import torch

MiB = 1 << 20
GiB = 1 << 30


def sizes(quick):
    if quick:
        return {"seq": 256 * MiB, "big_part": 64 * MiB, "many": 20000, "peer": 16 * MiB}
    return {"seq": 1 * GiB, "big_part": 256 * MiB, "many": 20000, "peer": 64 * MiB}


def make_seq(path, nbytes):
    w = torch.arange(nbytes // 4, dtype=torch.float32)
    torch.save(collections.OrderedDict([("w", w), ("bias", torch.ones(1024))]), path)


def make_big(path, part_bytes, parts=8):
    d = collections.OrderedDict()
    for i in range(parts):
        d["layers.%d.weight" % i] = torch.full((part_bytes // 4,), float(i), dtype=torch.float32)
    d["small"] = torch.zeros(1024, dtype=torch.float32)
    torch.save(d, path)


def make_many(path, count):
    """A transformer-like state dict: blocks of 20 parameters, small shapes."""
    names = ["attn.q.weight", "attn.q.bias", "attn.k.weight", "attn.k.bias",
             "attn.v.weight", "attn.v.bias", "attn.o.weight", "attn.o.bias",
             "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias",
             "mlp.up.weight", "mlp.up.bias", "mlp.gate.weight", "mlp.gate.bias",
             "mlp.down.weight", "mlp.down.bias", "scale", "step"]
    d = collections.OrderedDict()
    i = 0
    while len(d) < count:
        for n in names:
            if len(d) >= count:
                break
            shape = (8, 8) if n.endswith("weight") else (8,)
            d["blocks.%d.%s" % (i, n)] = torch.full(shape, float(i % 7), dtype=torch.float32)
        i += 1
    torch.save(d, path)


def make_probe(path):
    torch.save({"small": torch.zeros(16), "other": torch.ones(4)}, path)


def generate(dirpath, quick, log=print, names=None, many_counts=()):
    """Make the checkpoints (all, or those in @names) and, for each count
    in @many_counts other than sizes()["many"], a state dict "many<count>"
    of that many tensors.  Returns {name: path}."""
    s = sizes(quick)
    out = {}
    makers = [("seq", lambda p: make_seq(p, s["seq"])),
              ("big", lambda p: make_big(p, s["big_part"])),
              ("many", lambda p: make_many(p, s["many"])),
              ("peer", lambda p: make_seq(p, s["peer"])),
              ("probe", make_probe)]
    for c in many_counts:
        if c != s["many"]:
            makers.append(("many%d" % c, lambda p, c=c: make_many(p, c)))
    for name, fn in makers:
        if names is not None and name not in names and not name.startswith("many"):
            continue
        if names is not None and name.startswith("many") and "many" not in names:
            continue
        p = os.path.join(dirpath, name + ".pt")
        fn(p)
        out[name] = p
        log("  generated %-9s %8.1f MiB" % (name + ".pt", os.path.getsize(p) / MiB))
    return out
