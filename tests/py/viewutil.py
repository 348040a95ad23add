# SPDX-License-Identifier: MIT
"""Helpers for the tests of ptfs stat/diff/preview (test_view_*.py)."""
import json
import struct
import zlib

from conftest import run


def st_write(path, tensors):
    """Write a safetensors file by hand: @tensors is a list of
    (name, safetensors dtype string, shape, raw bytes)."""
    header, off, blobs = {}, 0, []
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def st_sparse(path, name, dt, shape, nbytes):
    """A safetensors file with one tensor of @nbytes zero bytes, sparse."""
    header = {name: {"dtype": dt, "shape": list(shape),
                     "data_offsets": [0, nbytes]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + nbytes)


def stat_json(*args):
    r = run("stat", "--json", *args)
    assert r.returncode == 0, r.stderr.decode()
    doc = json.loads(r.stdout)
    return {t["path"]: t for t in doc["tensors"]}, doc


def png_decode(data):
    """Decode an 8-bit RGB PNG (no interlace) with zlib + struct: returns
    (width, height, rows of (r, g, b) tuples)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    w = h = None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype == 2 and interlace == 0
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride, rows, prev = 3 * w, [], bytearray(3 * w)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        rows.append([tuple(line[3 * x:3 * x + 3]) for x in range(w)])
        prev = line
    return w, h, rows
