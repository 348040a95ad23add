#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The seeds of fuzz_pending (tests/fuzz/regress/pending): pending files in
the layout core/ckpt/pending.h describes (versions 1 and 3), for the
safetensors checkpoint fuzz_pending.c makes (storages "0", "1", "2" of
tensors a, b, c).

    python3 tests/fuzz/pending_seeds.py tests/fuzz/regress/pending
"""
import struct
import sys
import zlib


def pad8(b):
    return b + b"\0" * ((8 - len(b) % 8) % 8)


def header(nrec, version, nfiles=0):
    # the identity (device 1, inode 2, ...) is never the checkpoint's:
    # fuzz_pending applies with force
    h = b"PTFSPEND" + struct.pack("<IIQQQqII", version, 64, 1, 2, 3, 4, 5, nrec)
    return h + struct.pack("<II", zlib.crc32(h), nfiles)


def files_table():
    count = struct.pack("<I", 0)
    return struct.pack("<II", zlib.crc32(count), 0)


def record(key, off, data):
    body = struct.pack("<IIQQ", len(key), 0, off, len(data)) + pad8(key) + data
    return body + struct.pack("<II", zlib.crc32(body), 0)


def field(b):
    return struct.pack("<Q", len(b)) + pad8(b)


def edit(kind, *fields):
    body = struct.pack("<II", kind, len(fields)) + b"".join(map(field, fields))
    return body + struct.pack("<II", zlib.crc32(body), 0)


def edits(layout, es):
    h = struct.pack("<II", len(es), layout)
    return h + struct.pack("<II", zlib.crc32(h), 0) + b"".join(es)


def v1(recs):
    return header(len(recs), 1) + b"".join(recs) + b"PTFSPEOF"


def v3(recs, es, layout=4):
    return (header(len(recs), 3) + files_table() + b"".join(recs) +
            edits(layout, es) + b"PTFSPEOF")


RM, MV, MKDIR, SCALAR, TENSOR, REPLACE = range(1, 7)
SEEDS = {
    "v1-bytes": v1([record(b"0", 0, b"\1" * 8)]),
    "v3-rm-mv": v3([record(b"0", 4, b"\2" * 8), record(b"2", 0, b"\4" * 16)],
                   [edit(RM, b"b"), edit(MV, b"c", b"d")]),
    "v3-tensors": v3([], [edit(TENSOR, b"e", b"float32", struct.pack("<q", 2), b"\0" * 8),
                          edit(REPLACE, b"a", b"float16", struct.pack("<q", 4), b"\3" * 8)]),
    "v3-mkdir": v3([], [edit(MKDIR, b"x")]),
    "v3-scalar": v3([], [edit(SCALAR, b"a", b"7\n")]),
    "v3-nested": v3([], [edit(RM, b"a")], layout=1),
}

if __name__ == "__main__":
    for name, data in SEEDS.items():
        with open("%s/%s" % (sys.argv[1], name), "wb") as f:
            f.write(data)
