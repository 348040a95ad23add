# SPDX-License-Identifier: MIT
"""Real servers for the remote tests and benchmarks, on 127.0.0.1 only.

Nginx: Debian's nginx run as our own child (generated config in a temp
directory, daemon off, its own pid file and prefix), HTTP and HTTPS (a
self-signed certificate made here with openssl, HTTP/2 on the TLS port); its
access log gives the requests ($request $status $bytes_sent $http_range ...
$connection: the serial number of the connection that carried it).
FaultProxy: a small HTTP/1.1 proxy in front of it that can drop a
connection mid-body, answer 503/429, and add a delay each way.
DelayRelay: a TCP relay that delays every byte each way (for TLS).
HubStandIn: the hub's resolve endpoint (redirects to the "CDN", i.e.
nginx, with X-Repo-Commit and X-Linked-Etag, like huggingface.co).
Every server is stopped by its context manager, also on failure.
"""
import hashlib
import json
import http.server
import os
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import types

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("server exited with %d" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("port %d did not open" % port)


def make_cert(d):
    key, crt = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", key, "-out", crt, "-days", "2",
                    "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return key, crt


CONF = """
daemon off;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 512; }}
http {{
  log_format ptfs '$request $status $bytes_sent "$http_range" "$http_if_none_match" "$http_if_match" "$http_authorization" "$http_if_range" "$http_if_unmodified_since" "$http_x_amz_security_token" $connection';
  access_log {p}/access.log ptfs;
  client_body_temp_path {p}/tmp-body;
  proxy_temp_path {p}/tmp-proxy;
  fastcgi_temp_path {p}/tmp-fcgi;
  uwsgi_temp_path {p}/tmp-uwsgi;
  scgi_temp_path {p}/tmp-scgi;
  types {{ }}
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  keepalive_timeout 120s;
  server {{
    listen 127.0.0.1:{port};
    {tls}
    root {root};
    {extra}
    # a "CDN" URL whose signature the test expired
    if (-f $document_root/.expired-$arg_sig) {{ return 403; }}
  }}
}}
"""


class Nginx:
    """nginx serving @root on http://127.0.0.1:port (and https on tls_port)."""

    def __init__(self, root, tls=False, extra=""):
        self.root = root
        self.tls = tls
        self.extra = extra      # more directives for the server block

    def __enter__(self):
        self.prefix = tempfile.mkdtemp(prefix="ptfs-nginx-")
        self.port = free_port()
        tls = ""
        if self.tls:
            self.tls_port = free_port()
            self.key, self.cert = make_cert(self.prefix)
            tls = ("listen 127.0.0.1:%d ssl http2; ssl_certificate %s; "
                   "ssl_certificate_key %s;" % (self.tls_port, self.cert, self.key))
        with open(os.path.join(self.prefix, "nginx.conf"), "w") as f:
            f.write(CONF.format(p=self.prefix, port=self.port, tls=tls,
                                root=self.root, extra=self.extra))
        self.proc = subprocess.Popen(
            [NGINX, "-p", self.prefix, "-c", os.path.join(self.prefix, "nginx.conf"),
             "-e", os.path.join(self.prefix, "error.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_port(self.port, self.proc)
            if self.tls:
                wait_port(self.tls_port, self.proc)
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.prefix, ignore_errors=True)

    def url(self, name, tls=False):
        if tls:
            return "https://127.0.0.1:%d/%s" % (self.tls_port, name)
        return "http://127.0.0.1:%d/%s" % (self.port, name)

    def log(self):
        """Access log lines so far, as dicts."""
        time.sleep(0.05)        # nginx writes the line after the response
        out = []
        with open(os.path.join(self.prefix, "access.log")) as f:
            for line in f:
                head, _, rest = line.partition('"')
                parts = head.split()
                q = rest.split('"')
                out.append({"method": parts[0], "path": parts[1], "proto": parts[2],
                            "status": int(parts[3]), "bytes": int(parts[4]),
                            "range": q[0], "if_none_match": q[2],
                            "if_match": q[4], "authorization": q[6],
                            "if_range": q[8], "if_unmodified_since": q[10],
                            "amz_token": q[12], "connection": int(q[13])})
        return out

    def mark(self):
        return len(self.log())

    def since(self, mark, name=None):
        return [e for e in self.log()[mark:]
                if name is None or e["path"].split("?")[0].endswith("/" + name)]


class Link:
    """A link of @rate bytes a second that every connection of a proxy
    shares, first come first served: take(n) returns once n more bytes
    may be sent.  rate 0: no limit.  Time the link stayed idle is credited
    up to @slack seconds (a token bucket of that depth), so that the
    proxy's own pauses between chunks do not lower the rate."""

    def __init__(self, rate=0, slack=0.02, shared=False):
        self.rate, self.slack = rate, slack
        if shared:      # by the processes forked after (forking proxies)
            import multiprocessing
            self.lock = multiprocessing.Lock()
            self.free = multiprocessing.RawValue("d", 0.0)
        else:
            self.lock = threading.Lock()
            self.free = types.SimpleNamespace(value=0.0)

    def take(self, n):
        if not self.rate:
            return
        with self.lock:     # sent when the bytes queued before are
            self.free.value = max(time.monotonic() - self.slack,
                                  self.free.value) + n / self.rate
            end = self.free.value
        wait = end - time.monotonic()
        if wait > 0:
            time.sleep(wait)


def _server_class(fork):
    """A TCP server class for a proxy: a thread per connection, or with
    @fork a process per connection (a benchmark's proxy: Python threads
    relaying many connections share one interpreter lock, and the proxy
    rather than the client would set the pace).  A forked child dies with
    the proxy."""
    base = socketserver.ForkingTCPServer if fork else socketserver.ThreadingTCPServer

    class Server(base):
        allow_reuse_address = True
        daemon_threads = True
        max_children = 4096
        # listen(2) backlog: nginx's default; socketserver's 5 drops
        # the SYNs of a burst of connections (the shards of a sharded
        # checkpoint opened at once), which then wait a second or more
        request_queue_size = 511

        def finish_request(self, request, client_address):
            if fork:
                import ctypes
                import signal
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            super().finish_request(request, client_address)

    return Server


class FaultProxy:
    """HTTP/1.1 proxy on 127.0.0.1 in front of upstream port @up.

    faults: list of actions taken by the next requests, in order (one per
    request): "drop" (forward half the body, then reset), "503", "429",
    "stall" (send nothing for stall_s, or until the client hangs up:
    counted in abandoned), "gate" (forward once .gate is
    set).  delay: seconds added each way to
    every request (a round trip of 2 * delay).  rate: bytes a second of
    the answers' bodies, all connections together (Link).  hold = (over, after): an
    answer whose body is longer than @over bytes sends its first @after
    bytes, then the rest once .gate is set.
    """

    def __init__(self, up, delay=0.0, port=0, rate=0, fork=False):
        self.up = up
        self.delay = delay
        self.fork = fork        # a process per connection: delay and rate only
        self.link = Link(rate, shared=fork)
        self.want_port = port   # 0: any free port
        self.faults = []
        self.stall_s = 3.0
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.seen = 0
        self.abandoned = 0      # stalled requests the client hung up on
        self.hold = None        # (over, after): see above
        self.held = []          # the first bytes of the answers held

    def __enter__(self):
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                proxy._serve(self.request)

        self.server = _server_class(self.fork)(("127.0.0.1", self.want_port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def url(self, name):
        return "http://127.0.0.1:%d/%s" % (self.port, name)

    @staticmethod
    def _read_head(sock, buf):
        while b"\r\n\r\n" not in buf:
            d = sock.recv(65536)
            if not d:
                return None, buf
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head, rest

    def _serve(self, c):
        buf = b""
        upstream = None
        if self.delay:
            time.sleep(2 * self.delay)      # the TCP handshake's round trip
        try:
            while True:
                head, buf = self._read_head(c, buf)
                if head is None:
                    return
                with self.lock:
                    fault = self.faults.pop(0) if self.faults else None
                    self.seen += 1
                if self.delay:
                    time.sleep(self.delay)
                if fault in ("503", "429"):
                    msg = b"Service Unavailable" if fault == "503" else b"Too Many Requests"
                    c.sendall(b"HTTP/1.1 " + fault.encode() + b" " + msg +
                              b"\r\nContent-Length: 0\r\nRetry-After: 0\r\n\r\n")
                    continue
                if fault == "stall":
                    # send nothing; count it when the client gives up first
                    c.settimeout(self.stall_s)
                    try:
                        gone = c.recv(1) == b""
                    except socket.timeout:
                        gone = False
                    except OSError:
                        gone = True
                    if gone:
                        with self.lock:
                            self.abandoned += 1
                    return
                if fault == "gate":         # held until the test opens it
                    self.gate.wait(60)
                if upstream is None:
                    upstream = socket.create_connection(("127.0.0.1", self.up))
                upstream.sendall(head + b"\r\n\r\n")
                if not self._relay(upstream, c, fault):
                    return
        except OSError:
            return
        finally:
            if upstream is not None:
                upstream.close()
            c.close()

    def _relay(self, up, c, fault):
        head, body = self._read_head(up, b"")
        if head is None:
            return False
        length, first = 0, None
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
            if k.strip().lower() == b"content-range":
                first = int(v.split()[1].split(b"-")[0])
        if self.delay:
            time.sleep(self.delay)
        c.sendall(head + b"\r\n\r\n")
        cut = length // 2 if fault == "drop" else None
        hold = self.hold
        if cut is None and hold and length > hold[0]:
            with self.lock:
                self.held.append(first)
            if not self._splice(up, c, body, hold[1]):
                return False
            self.gate.wait(60)
            return self._splice(up, c, body[hold[1]:], length - hold[1])
        if cut is None and hasattr(os, "splice"):
            return self._splice(up, c, body, length)
        sent = 0
        while sent < length:
            if not body:
                body = up.recv(1 << 20)
                if not body:
                    return False
            chunk = body[:length - sent]
            body = body[len(chunk):]
            if cut is not None and sent + len(chunk) >= cut:
                c.sendall(chunk[:cut - sent])
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return False
            c.sendall(chunk)
            sent += len(chunk)
        return True


    def _splice(self, up, c, body, length):
        """Relay @length body bytes (@body already read) without copying
        them through Python: socket -> pipe -> socket (os.splice), at the
        pace of the proxy's link."""
        if body:
            self.link.take(min(len(body), length))
            c.sendall(body[:length])
        left = length - min(len(body), length)
        r, w = os.pipe()
        try:
            while left:
                n = os.splice(up.fileno(), w, min(left, 1 << 20))
                if n == 0:
                    return False
                left -= n
                self.link.take(n)
                while n:
                    n -= os.splice(r, c.fileno(), n)
        finally:
            os.close(r)
            os.close(w)
        return True


class DelayRelay:
    """A TCP relay on 127.0.0.1 in front of upstream port @up that delays
    every byte by @delay seconds in each direction (the connection's
    handshake by a round trip too), without looking into the stream: for
    TLS, where FaultProxy cannot read the requests.  Unlike FaultProxy,
    bodies are delayed as well, so HTTP/2's flow-control window updates
    pay the round trip as on a real network; the relay's queue is not
    bounded (a link that TCP autotuning has opened).  Counts the accepted
    connections in .connections."""

    def __init__(self, up, delay=0.0, port=0, rate=0, fork=False):
        self.up, self.delay, self.want_port = up, delay, port
        self.connections = 0        # (not counted with fork)
        self.fork = fork
        self.link = Link(rate, shared=fork)     # the answers' way

    def __enter__(self):
        relay = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                relay._serve(self.request)

        self.server = _server_class(self.fork)(("127.0.0.1", self.want_port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, c):
        self.connections += 1
        if self.delay:
            time.sleep(2 * self.delay)      # the TCP handshake's round trip
        try:
            up = socket.create_connection(("127.0.0.1", self.up))
        except OSError:
            c.close()
            return
        for s in (c, up):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=self._pump, args=(up, c, self.link),
                                daemon=True)
        back.start()
        self._pump(c, up, Link())
        back.join()
        c.close()
        up.close()

    def _pump(self, src, dst, link):
        """Copy src to dst, every chunk sent @delay after it arrived, at
        the pace of @link."""
        import collections
        q = collections.deque()
        cond = threading.Condition()

        def send():
            while True:
                with cond:
                    while not q:
                        cond.wait()
                    due, data = q.popleft()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                link.take(len(data))
                try:
                    dst.sendall(data)
                except OSError:
                    break
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                data = b""
            with cond:
                q.append((time.monotonic() + self.delay, data or None))
                cond.notify()
            if not data:
                break
        sender.join()


class HubStandIn:
    """The hub's resolve endpoint: /ORG/REPO/resolve/REV/PATH answers 302 to
    the CDN (nginx: /COMMIT/PATH?signature) with X-Repo-Commit and
    X-Linked-Etag; REV may be a branch (branches: name -> commit) or a
    commit.  /api/models/ORG/REPO/tree/REV[/PATH] lists the commit's
    directory as the hub does, in pages of .tree_page entries linked by a
    Link: <...?cursor=N>; rel="next" header.  Records every request (path,
    Authorization) in .seen."""

    def __init__(self, cdn, branches, token=None, commit_header=True):
        self.cdn = cdn              # Nginx
        self.branches = branches
        self.token = token
        self.commit_header = commit_header   # else only /api/.../revision
        self.seen = []
        self.sig = "1"              # the CDN URLs' signature generation
        self.location = None        # (commit, path) -> where to redirect
        self.throttle = 0           # resolves answered 429 (Retry-After: 1)
        self.tree_page = 1000
        self.link_base = None       # the tree's next-page links: another host
        # (count, endless[, length]): every tree is of @count made-up files
        # ("w-0000000.bin"..., or @length bytes long: "www...w-0000000.bin"),
        # pages without end when @endless
        self.made_up = None

    def __enter__(self):
        hub = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.do_GET(body=False)

            def do_GET(self, body=True):
                hub.seen.append((self.path, self.headers.get("Authorization")))
                if self.path.startswith("/api/models/") and \
                        self.path.split("/")[5:6] == ["tree"]:
                    return self._tree(body)
                if self.path.startswith("/api/models/"):
                    return self._api(body)
                parts = self.path.split("/", 5)
                if len(parts) < 6 or parts[3] != "resolve":
                    return self._reply(404)
                rev, path = parts[4], parts[5]
                if hub.throttle > 0:
                    hub.throttle -= 1
                    self.send_response(429)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                commit = hub.branches.get(rev, rev)
                if commit not in hub.branches.values():
                    return self._reply(404)
                if hub.token and self.headers.get("Authorization") != "Bearer " + hub.token:
                    return self._reply(401)
                local = os.path.join(hub.cdn.root, commit, path)
                if not os.path.exists(local):
                    return self._reply(404)
                self.send_response(302)
                self.send_header("Location", hub.location(commit, path) if hub.location
                                 else hub.cdn.url("%s/%s?sig=%s" % (commit, path, hub.sig)))
                if hub.commit_header:
                    self.send_header("X-Repo-Commit", commit)
                with open(local, "rb") as f:
                    sha = hashlib.sha256(f.read()).hexdigest()
                self.send_header("X-Linked-Etag", '"%s"' % sha)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _api(self, body):
                # /api/models/ORG/REPO/revision/REV
                parts = self.path.split("/")
                commit = hub.branches.get(parts[-1], parts[-1])
                if len(parts) != 7 or parts[5] != "revision" or \
                        commit not in hub.branches.values():
                    return self._reply(404)
                data = ('{"id": "%s/%s", "sha": "%s", "siblings": []}'
                        % (parts[3], parts[4], commit)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _tree(self, body):
                # /api/models/ORG/REPO/tree/REV[/PATH][?cursor=N]
                path, _, query = self.path.partition("?")
                parts = path.split("/", 7)
                commit = hub.branches.get(parts[6], parts[6])
                sub = parts[7] if len(parts) > 7 else ""
                if commit not in hub.branches.values():
                    return self._reply(404)
                if hub.token and self.headers.get("Authorization") != "Bearer " + hub.token:
                    return self._reply(401)
                start = int(query[len("cursor="):]) if query.startswith("cursor=") else 0
                if hub.made_up is not None:
                    count, endless, length = (hub.made_up + (13,))[:3]
                    page = [{"type": "file", "oid": "0" * 40, "size": 1,
                             "path": "%s-%07d.bin" % ("w" * (length - 12), i)}
                            for i in range(start, min(start + hub.tree_page, count))]
                    more = endless or start + len(page) < count
                    return self._tree_page(path, page, start + len(page) if more else None, body)
                local = os.path.join(hub.cdn.root, commit, sub)
                if not os.path.isdir(local):
                    return self._reply(404)
                entries = []
                for name in sorted(os.listdir(local)):
                    rel = (sub + "/" if sub else "") + name
                    if os.path.isdir(os.path.join(local, name)):
                        entries.append({"type": "directory", "oid": "0" * 40, "size": 0,
                                        "path": rel})
                    else:
                        entries.append({"type": "file", "oid": "0" * 40,
                                        "size": os.path.getsize(os.path.join(local, name)),
                                        "path": rel, "lfs": {"size": 1}})
                more = start + hub.tree_page < len(entries)
                self._tree_page(path, entries[start:start + hub.tree_page],
                                start + hub.tree_page if more else None, body)

            def _tree_page(self, path, page, cursor, body):
                """One page of a tree: @page's entries, @cursor the next
                page's (None: the last page)."""
                data = json.dumps(page).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if cursor is not None:
                    self.send_header("Link", '<%s%s?cursor=%d>; rel="next"'
                                     % (hub.link_base or hub.endpoint, path, cursor))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _reply(self, code):
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class Redirector:
    """Answers every request with a redirect to where(path) (status
    @code), on 127.0.0.1 or another loopback address (@host, e.g.
    127.0.0.2), optionally on a given port.  Records (path, headers) of
    every request in .seen."""

    def __init__(self, where, code=302, host="127.0.0.1", port=0):
        self.where, self.code, self.host, self.want_port = where, code, host, port
        self.seen = []

    def __enter__(self):
        red = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                red.seen.append((self.path, dict(self.headers.items())))
                self.send_response(red.code)
                self.send_header("Location", red.where(self.path))
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((self.host, self.want_port), H)
        self.port = self.server.server_address[1]
        self.endpoint = "http://%s:%d" % (self.host, self.port)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class ProxyProcess:
    """A FaultProxy (delay only), or a DelayRelay (kind="relay"), in a
    process of its own: a client that blocks in a page fault on a FUSE file
    (numpy.memmap) holds its process's memory map lock, so a proxy thread
    in that process could not even start a thread to serve the daemon's
    request."""

    def __init__(self, up, delay=0.0, port=0, kind="proxy", rate=0, fork=False):
        self.up, self.delay, self.want_port = up, delay, port
        self.kind = kind        # "proxy": FaultProxy; "relay": DelayRelay
        self.rate = rate        # bytes a second of the answers (Link)
        self.fork = fork        # a process per connection (benchmarks)

    def __enter__(self):
        import sys
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), self.kind, str(self.up),
             str(self.delay), str(self.want_port), str(self.rate),
             "fork" if self.fork else "threads"],
            stdout=subprocess.PIPE)
        self.port = int(self.proc.stdout.readline())
        wait_port(self.port, self.proc)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def url(self, name, tls=False):
        return "%s://127.0.0.1:%d/%s" % ("https" if tls else "http", self.port, name)


if __name__ == "__main__":
    import sys
    if len(sys.argv) in (4, 5, 6, 7) and sys.argv[1] in ("proxy", "relay"):
        with (FaultProxy if sys.argv[1] == "proxy" else DelayRelay)(
                int(sys.argv[2]), delay=float(sys.argv[3]),
                port=int(sys.argv[4]) if len(sys.argv) >= 5 else 0,
                rate=float(sys.argv[5]) if len(sys.argv) >= 6 else 0,
                fork=len(sys.argv) == 7 and sys.argv[6] == "fork") as _p:
            print(_p.port, flush=True)
            while True:
                time.sleep(3600)
