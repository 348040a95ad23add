#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the fuzzers' seed corpora: small checkpoints that torch itself makes.

    make_seeds.py OUTDIR

creates OUTDIR/ckpt/*.pt (torch.save files: zip format with pickle
protocols 2 and 4, and the legacy non-zip format), OUTDIR/zip/*.pt (the zip
ones), OUTDIR/http/*.txt (response heads and URLs), OUTDIR/ini/*.txt (AWS
profile files, S3 error bodies), OUTDIR/onnx/*.onnx (ONNX
models: hand-built protobuf of every tensor encoding, hostile ones, and
torch.onnx.export's when torch and onnx are there) and OUTDIR/pickle/*.pkl (each zip's data.pkl, the legacy streams, and
plain pickles of every protocol made by the pickle module).  Everything is
deterministic and small (a few KiB each).  Without torch only the plain
pickles are written.  Run by CTest (fixture fuzz-seeds) and contrib/fuzz.sh.
"""
import collections
import io
import os
import pickle
import sys
import zipfile


def plain_pickles(out):
    """Pickles of plain data, every protocol: the opcodes torch never uses."""
    data = {
        "ints": [0, 1, -1, 255, 256, 65535, -65536, 2**31, 2**63, -(2**70)],
        "floats": (0.0, -1.5, 1e300, float("inf")),
        "text": ["", "a", "é", "x" * 300, "\u2603"],
        "bytes": [b"", b"\x00\xff", bytearray(b"ab")],
        "sets": [set(), {1, 2}, frozenset({3})],
        "none": None,
        "bools": [True, False],
        "nested": [[[[1]]], {"k": {"k": {}}}],
        "od": collections.OrderedDict(a=1, b=2),
        "cplx": complex(1, 2),
    }
    shared = [1, 2]
    data["shared"] = [shared, shared]
    cyc = []
    cyc.append(cyc)
    data["cycle"] = cyc
    for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
        with open(os.path.join(out, "plain-p%d.pkl" % proto), "wb") as f:
            f.write(pickle.dumps(data, protocol=proto))
    with open(os.path.join(out, "slice-p2.pkl"), "wb") as f:
        f.write(pickle.dumps(slice(1, 5, 2), protocol=2))


def torch_seeds(out_ckpt, out_zip, out_pickle):
    import torch

    torch.manual_seed(0)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    shared = torch.arange(10, dtype=torch.int64)
    objs = {
        "tensor": torch.arange(6, dtype=torch.float32),
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 3),
        "state_dict": collections.OrderedDict(
            [("layer.weight", torch.randn(3, 4)), ("layer.bias", torch.zeros(3)),
             ("bn.num_batches_tracked", torch.tensor(7))]),
        "dtypes": {str(dt).split(".")[-1]: torch.ones(3, dtype=dt)
                   for dt in (torch.float16, torch.bfloat16, torch.float64,
                              torch.int8, torch.uint8, torch.int16, torch.int32,
                              torch.int64, torch.bool, torch.complex64)},
        "views": {"t": base.t(), "slice": base[1:, 2:5], "step": base[:, ::2],
                  "expand": torch.ones(1, 3).expand(4, 3), "base": base},
        "shared": {"a": shared, "b": shared[2:7], "c": shared.view(2, 5)},
        "nested": {"list": [torch.ones(2), [1, 2.5, "x", None, True]],
                   "tuple": (torch.zeros(1), b"raw"), "a.b.c": 1, "a.b.d": 2},
        "param": {"p": torch.nn.Parameter(torch.randn(2, 2)),
                  "g": torch.randn(2, requires_grad=True)},
        "module": torch.nn.Linear(3, 2),
        "optimizer": None,
    }
    lin = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.ones(1, 2)).sum().backward()
    opt.step()
    objs["optimizer"] = {"model": lin.state_dict(), "optim": opt.state_dict(),
                         "epoch": 3}
    for name, obj in objs.items():
        for proto in (2, 4):
            buf = io.BytesIO()
            torch.save(obj, buf, pickle_protocol=proto)
            raw = buf.getvalue()
            fn = "%s-p%d" % (name, proto)
            for d in (out_ckpt, out_zip):
                with open(os.path.join(d, fn + ".pt"), "wb") as f:
                    f.write(raw)
            with zipfile.ZipFile(io.BytesIO(raw)) as z:
                pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
                with open(os.path.join(out_pickle, fn + ".pkl"), "wb") as f:
                    f.write(z.read(pkl))
        buf = io.BytesIO()
        torch.save(obj, buf, _use_new_zipfile_serialization=False)
        raw = buf.getvalue()
        with open(os.path.join(out_ckpt, name + "-legacy.pt"), "wb") as f:
            f.write(raw)
        with open(os.path.join(out_pickle, name + "-legacy.pkl"), "wb") as f:
            f.write(raw)


HTTP_SEEDS = {
    "206": "HTTP/1.1 206 Partial Content\r\nETag: \"6b0fb210-10002a2\"\r\n"
           "Last-Modified: Wed, 02 Dec 2026 05:49:55 GMT\r\n"
           "Content-Range: bytes 0-1048575/16777890\r\nContent-Length: 1048576\r\n\r\n",
    "hub": "HTTP/1.1 302 Found\r\nLocation: https://cdn.example.com/x/y?sig=abc&exp=1#f\r\n"
           "X-Repo-Commit: " + "a" * 40 + "\r\nX-Linked-Etag: \"" + "b" * 64 + "\"\r\n"
           "HTTP/2 206\r\netag: W/\"x\"\r\ncontent-range: bytes */77\r\n",
    "retry": "HTTP/1.1 503 Slow Down\r\nRetry-After: 7\r\n"
             "Last-Modified: Sunday, 06-Nov-94 08:49:37 GMT\r\n"
             "Last-Modified: Sun Nov  6 08:49:37 1994\r\n",
    "urls": "http://user:pw@host:8080/a/b.pt?X-Amz-Signature=s#frag\n"
            "https://hf.example.com@evil.example/x\nhttp://[::1]:99/x\n"
            "s3://bucket/key\nContent-Range: bytes 5-4/10\nContent-Range: bytes -1-2/3\n",
}


def http_seeds(out):
    """Response heads and URLs for fuzz_http."""
    for name, text in HTTP_SEEDS.items():
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write(text)


INI_SEEDS = {
    "credentials": "[default]\naws_access_key_id = AKIDEXAMPLE\n"
                   "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"
                   "\n[dev]\r\naws_access_key_id: AKID2\r\naws_session_token = FQoG==\r\n",
    "config": "# comment\n[default]\nregion = eu-west-1\ns3 =\n"
              "  addressing_style = virtual\n  endpoint_url = http://localhost:9000\n"
              "[profile dev]\n; x\nregion=us-east-2\nendpoint_url = http://e\n"
              "  continued\n",
    "errors": "<?xml version=\"1.0\"?>\n<Error><Code>NoSuchKey</Code>"
              "<Message>The specified key does not exist.</Message></Error>\n"
              "[bad\nkey before = section\n<Code>a b</Code>\n",
    "listing": "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
               "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
               "<Prefix>run/</Prefix><IsTruncated>true</IsTruncated>"
               "<NextContinuationToken>1a&amp;2</NextContinuationToken>"
               "<Contents><Key>run/model.safetensors.index.json</Key><Size>9</Size></Contents>"
               "<Contents><Key>run/a &amp; &lt;b&gt;&#x41;&#66;</Key></Contents>"
               "<Contents><Key>run/</Key></Contents>"
               "<CommonPrefixes><Prefix>run/logs/</Prefix></CommonPrefixes>"
               "</ListBucketResult>\n",
}


def ini_seeds(out):
    """AWS credentials and config files and S3 error bodies for fuzz_ini."""
    for name, text in INI_SEEDS.items():
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write(text)


def pb_varint(n):
    """A protobuf varint (n >= 0)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_field(num, value):
    """Field @num: an int is a varint, bytes are length-delimited."""
    if isinstance(value, int):
        return pb_varint(num << 3) + pb_varint(value)
    return pb_varint(num << 3 | 2) + pb_varint(len(value)) + value


def onnx_model(initializers, nodes=b""):
    """A ModelProto: ir_version 8, opset 17, a graph of these TensorProtos."""
    graph = nodes + b"".join(pb_field(5, t) for t in initializers)
    graph += pb_field(2, b"g")
    return (pb_field(1, 8) + pb_field(2, b"seed") + pb_field(7, graph) +
            pb_field(8, pb_field(1, b"") + pb_field(2, 17)))


def onnx_tensor(name, dtype, dims, **fields):
    """A TensorProto; fields: raw=bytes, or number=payload bytes."""
    t = b"".join(pb_field(1, d) for d in dims) + pb_field(2, dtype)
    t += pb_field(8, name.encode())
    for num, payload in fields.items():
        t += pb_field(9 if num == "raw" else int(num[1:]), payload)
    return t


def onnx_seeds(out):
    """ONNX models without torch: raw_data, packed float/double, varints,
    a Constant node, a subgraph, a sparse initializer, and hostile ones."""
    import struct
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    varints = b"".join(pb_varint(v) for v in (1, 127, 128, 255))
    tensors = [
        onnx_tensor("w.raw", 1, [2, 2], raw=f32),
        onnx_tensor("w.packed", 1, [4], f4=f32),
        onnx_tensor("d.packed", 11, [2], f10=struct.pack("<2d", 1.5, -2)),
        onnx_tensor("i8", 3, [4], f5=varints),
        onnx_tensor("i64", 7, [4], f7=varints),
        onnx_tensor("u32", 12, [4], f11=varints),
        onnx_tensor("s", 8, [1], f6=b"ab"),
    ]
    attr = pb_field(1, b"value") + pb_field(5, onnx_tensor("", 1, [1], raw=f32[:4]))
    const = (pb_field(2, b"c0") + pb_field(3, b"const0") +
             pb_field(4, b"Constant") + pb_field(5, attr))
    sub = pb_field(5, onnx_tensor("inner", 1, [1], raw=f32[:4]))
    if_node = (pb_field(3, b"if0") + pb_field(4, b"If") +
               pb_field(5, pb_field(1, b"then_branch") + pb_field(6, sub)))
    sparse = pb_field(1, onnx_tensor("sp", 1, [2], raw=f32[:8]))
    sparse += pb_field(2, onnx_tensor("sp.i", 7, [2], raw=struct.pack("<2q", 0, 3)))
    sparse += pb_field(3, 4)
    models = {
        "typed": onnx_model(tensors),
        "nodes": onnx_model(tensors[:1], pb_field(1, const) + pb_field(1, if_node)),
        "sparse": onnx_model([]) + pb_field(7, pb_field(15, sparse)),
        "external": onnx_model([onnx_tensor("e", 1, [4], f13=pb_field(1, b"location") +
                                            pb_field(2, b"w.bin"), f14=1)]),
        "short": onnx_model([onnx_tensor("w", 1, [4], raw=f32)])[:-9],
        "varint11": pb_field(1, 8) + pb_varint(7 << 3 | 2) + b"\xff" * 10 + b"\x01",
        "deep": pb_field(1, 8) + deep_graph(400),
        "overflow": onnx_model([onnx_tensor("o", 1, [2**40, 2**40], raw=f32)]),
    }
    for name, data in models.items():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(data)


def deep_graph(depth):
    """A graph whose node's attribute holds a graph whose node's ... @depth
    levels (built inside out)."""
    g = b""
    for _ in range(depth):
        attr = pb_field(1, b"body") + pb_field(6, g)
        g = pb_field(1, pb_field(4, b"Loop") + pb_field(5, attr))
    return pb_field(7, g)


def torch_onnx_seeds(out):
    """A small MLP and a convolution as torch.onnx.export writes them."""
    import torch
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
    except ImportError:
        return
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),
                              torch.nn.Linear(3, 2))
    torch.onnx.export(mlp, torch.randn(1, 4), os.path.join(out, "mlp.onnx"))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    torch.onnx.export(cnn.eval(), torch.randn(1, 1, 5, 5),
                      os.path.join(out, "cnn.onnx"), do_constant_folding=False)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_seeds.py OUTDIR")
    root = sys.argv[1]
    dirs = [os.path.join(root, t) for t in ("ckpt", "zip", "pickle")]
    for d in dirs + [os.path.join(root, t) for t in ("http", "onnx", "ini")]:
        os.makedirs(d, exist_ok=True)
    plain_pickles(dirs[2])
    http_seeds(os.path.join(root, "http"))
    ini_seeds(os.path.join(root, "ini"))
    onnx_seeds(os.path.join(root, "onnx"))
    try:
        import torch  # noqa: F401
    except ImportError:
        print("make_seeds.py: no torch, plain pickles only", file=sys.stderr)
        return
    torch_seeds(*dirs)
    torch_onnx_seeds(os.path.join(root, "onnx"))


if __name__ == "__main__":
    main()
