# SPDX-License-Identifier: MIT
"""A small S3 stand-in on 127.0.0.1 that checks Signature Version 4.

Written here from AWS's published signing rules (the canonical request,
the string to sign, the derived signing key: "Signature Version 4 signing
process" of the AWS documentation), not one that accepts any signature.
It serves GET and HEAD of ROOT/BUCKET/KEY, with Range, ListObjectsV2
(GET of the bucket with list-type=2: prefix, delimiter, continuation
tokens, pages of .page_size entries), both path style
(Host 127.0.0.1:PORT, path /BUCKET/KEY) and virtual-hosted style (Host
BUCKET.localhost:PORT, path /KEY), and answers as S3 does, with an XML
<Error><Code>:

  no Authorization header          403 AccessDenied (unless the bucket is
                                   public)
  a key id it does not know        403 InvalidAccessKeyId
  a scope of another region        400 AuthorizationHeaderMalformed
  a wrong signature                403 SignatureDoesNotMatch
  a session token it calls expired 400 ExpiredToken
  no such bucket / key             404 NoSuchBucket / NoSuchKey

Each request is recorded in .seen as (host, path, key id or None, code),
before its answer's body is sent.
"""
import datetime
import hashlib
import hmac
import http.server
import os
import re
import socketserver
import threading
import urllib.parse

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signing_key(secret, date, region, service="s3"):
    k = _hmac(("AWS4" + secret).encode(), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


def _uri_encode(s, keep_slash):
    safe = "-_.~" + ("/" if keep_slash else "")
    return urllib.parse.quote(s, safe=safe)


def canonical_request(method, raw_path, headers, signed):
    path, _, query = raw_path.partition("?")
    # S3: the path is encoded once, as it is (no normalization)
    uri = _uri_encode(urllib.parse.unquote(path), True) or "/"
    pairs = sorted((_uri_encode(urllib.parse.unquote_plus(k), False),
                    _uri_encode(urllib.parse.unquote_plus(v), False))
                   for k, _, v in (p.partition("=") for p in query.split("&") if p))
    cq = "&".join("%s=%s" % kv for kv in pairs)
    ch = "".join("%s:%s\n" % (h, " ".join(headers.get(h, "").split()))
                 for h in signed)
    payload = headers.get("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
    return "\n".join([method, uri, cq, ch, ";".join(signed), payload])


AUTH_RE = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/,]+)/(\d{8})/([^/,]+)/s3/"
                     r"aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$")


class S3Checker:
    """@keys: {key id: secret} (a value (secret, token) requires that
    session token, "EXPIRED" as the token is answered ExpiredToken);
    @public: buckets anyone may read."""

    def __init__(self, root, keys, region="us-east-1", public=()):
        self.root, self.keys, self.region = root, keys, region
        self.public = set(public)
        self.seen = []
        self.page_size = 1000
        # (count, endless[, length]): every listing is of @count made-up
        # names ("w-0000000.bin"..., or @length bytes long: "www...w-0000000.bin"),
        # pages without end when @endless
        self.made_up = None

    def __enter__(self):
        checker = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                checker._serve(self, body=False)

            def do_GET(self):
                checker._serve(self, body=True)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.httpd = Server(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- answers ----

    def _end(self, h, code):
        """End the headers, once the request is in .seen as answered
        with @code: a client may be done reading the body before this
        thread runs again."""
        self.seen.append(h.seen_as + (code,))
        h.end_headers()

    def _error(self, h, status, code, body=True):
        xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
               '<Message>%s</Message><RequestId>0</RequestId></Error>'
               % (code, code)).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(xml) if body else 0))
        self._end(h, code)
        if body:
            h.wfile.write(xml)
        return status, code

    def _check_signature(self, h, headers):
        """None when the request is signed right, else (status, code)."""
        m = AUTH_RE.match(headers.get("authorization", ""))
        if not m:
            return 403, "AccessDenied"
        kid, date, region, signed, sig = m.groups()
        if kid not in self.keys:
            return 403, "InvalidAccessKeyId"
        secret = self.keys[kid]
        token = None
        if isinstance(secret, tuple):
            secret, token = secret
        if region != self.region:
            return 400, "AuthorizationHeaderMalformed"
        names = signed.split(";")
        if "host" not in names or "x-amz-date" not in names:
            return 403, "AccessDenied"
        if token is not None and ("x-amz-security-token" not in names or
                                  headers.get("x-amz-security-token") != token):
            return 403, "InvalidToken"
        if not headers.get("x-amz-date", "").startswith(date):
            return 403, "SignatureDoesNotMatch"
        creq = canonical_request(h.command, h.path, headers, names)
        scope = "%s/%s/s3/aws4_request" % (date, region)
        sts = "\n".join(["AWS4-HMAC-SHA256", headers["x-amz-date"], scope,
                         hashlib.sha256(creq.encode()).hexdigest()])
        want = hmac.new(signing_key(secret, date, region), sts.encode(),
                        hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, sig):
            return 403, "SignatureDoesNotMatch"
        if token == "EXPIRED":
            return 400, "ExpiredToken"
        return None

    def _locate(self, h, headers):
        host = headers.get("host", "").split(":")[0]
        path = urllib.parse.unquote(h.path.partition("?")[0])
        if host.endswith(".localhost"):          # virtual-hosted
            return host[:-len(".localhost")], path.lstrip("/")
        bucket, _, key = path.lstrip("/").partition("/")
        return bucket, key

    def _serve(self, h, body):
        headers = {k.lower(): v for k, v in h.headers.items()}
        bucket, key = self._locate(h, headers)
        kid = (AUTH_RE.match(headers.get("authorization", "")) or [None, None])[1]
        h.seen_as = (headers.get("host", ""), h.path, kid)
        res = None
        if bucket not in self.public or "authorization" in headers:
            res = self._check_signature(h, headers)
        query = urllib.parse.parse_qs(h.path.partition("?")[2], keep_blank_values=True)
        if res is None and not key and query.get("list-type") == ["2"]:
            res = self._list(h, bucket, query, body)
        elif res is None:
            res = self._object(h, bucket, key, headers, body)
        else:
            self._error(h, res[0], res[1], body)

    def _list(self, h, bucket, query, body):
        """ListObjectsV2: the keys under prefix; with a delimiter, the
        names below it grouped into CommonPrefixes; sorted, in pages."""
        bdir = os.path.join(self.root, bucket)
        if not bucket or not os.path.isdir(bdir):
            return self._error(h, 404, "NoSuchBucket", body)
        prefix = query.get("prefix", [""])[0]
        delim = query.get("delimiter", [""])[0]
        token = query.get("continuation-token", [None])[0]
        if self.made_up is not None:
            count, endless, length = (self.made_up + (13,))[:3]
            at = int(token[4:]) if token else 0
            names = ["%s%s-%07d.bin" % (prefix, "w" * (length - 12), i)
                     for i in range(at, min(at + self.page_size, count))]
            more = endless or at + len(names) < count
            return self._list_page(h, bucket, prefix, [(k, False, 1) for k in names],
                                   "gen:%d" % (at + len(names)) if more else None, body)
        keys = []
        for d, _, files in os.walk(bdir):
            for f in files:
                keys.append(os.path.relpath(os.path.join(d, f), bdir))
        items = set()
        for k in keys:
            if not k.startswith(prefix):
                continue
            rest = k[len(prefix):]
            if delim and delim in rest:
                items.add((prefix + rest.split(delim)[0] + delim, True))
            else:
                items.add((k, False))
        items = sorted(items)
        if token is not None:
            after = bytes.fromhex(token[4:]).decode()
            items = [it for it in items if it[0] > after]
        page, more = items[:self.page_size], len(items) > self.page_size
        page = [(k, common, 0 if common else os.path.getsize(os.path.join(bdir, k)))
                for k, common in page]
        return self._list_page(h, bucket, prefix, page,
                               "tok:" + page[-1][0].encode().hex() if more else None, body)

    def _list_page(self, h, bucket, prefix, page, token, body):
        """One page of ListObjectsV2: @page of (name, common prefix?, size),
        @token the next page's (None: the last page)."""
        def esc(t):
            return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        xml = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
               'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
               "<Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount>"
               "<IsTruncated>%s</IsTruncated>"
               % (bucket, esc(prefix), len(page), "true" if token else "false")]
        if token:
            xml.append("<NextContinuationToken>%s</NextContinuationToken>" % token)
        for name, common, size in page:
            if common:
                xml.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % esc(name))
            else:
                xml.append("<Contents><Key>%s</Key><Size>%d</Size>"
                           "<StorageClass>STANDARD</StorageClass></Contents>" % (esc(name), size))
        xml.append("</ListBucketResult>")
        data = "".join(xml).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(data)))
        self._end(h, "List")
        if body:
            h.wfile.write(data)
        return 200, "List"

    def _object(self, h, bucket, key, headers, body):
        bdir = os.path.join(self.root, bucket)
        path = os.path.join(bdir, key)
        if not bucket or not os.path.isdir(bdir):
            return self._error(h, 404, "NoSuchBucket", body)
        if not key or ".." in key.split("/") or not os.path.isfile(path):
            return self._error(h, 404, "NoSuchKey", body)
        st = os.stat(path)
        size = st.st_size
        etag = '"%x-%x"' % (int(st.st_mtime), size)
        first, last = 0, size - 1
        status = 200
        m = re.match(r"bytes=(\d*)-(\d*)$", headers.get("range", ""))
        if m and (m.group(1) or m.group(2)):
            if m.group(1):
                first = int(m.group(1))
                last = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:
                first = max(size - int(m.group(2)), 0)
            if first >= size or first > last:
                h.send_response(416)
                h.send_header("Content-Range", "bytes */%d" % size)
                h.send_header("Content-Length", "0")
                self._end(h, "InvalidRange")
                return 416, "InvalidRange"
            status = 206
        if headers.get("if-none-match") == etag:
            h.send_response(304)
            h.send_header("ETag", etag)
            self._end(h, "NotModified")
            return 304, "NotModified"
        h.send_response(status)
        h.send_header("ETag", etag)
        h.send_header("Last-Modified", datetime.datetime.utcfromtimestamp(
            st.st_mtime).strftime("%a, %d %b %Y %H:%M:%S GMT"))
        h.send_header("Accept-Ranges", "bytes")
        if status == 206:
            h.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        h.send_header("Content-Length", str(last - first + 1))
        self._end(h, "OK")
        if body:
            with open(path, "rb") as f:
                f.seek(first)
                left = last - first + 1
                while left:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    h.wfile.write(chunk)
                    left -= len(chunk)
        return status, "OK"
