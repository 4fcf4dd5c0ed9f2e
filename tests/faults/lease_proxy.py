"""An HTTP front for the local API server that one replica talks to, so a test can break that
replica's Lease requests alone and see every write it makes.

The replica's kubeconfig points at `http://127.0.0.1:<port>` with no credentials; the proxy
forwards each request to the real API server over TLS as the cluster admin (as the replica's
own kubeconfig would have), streaming watch responses as they come. Told to, it stops answering
requests for coordination.k8s.io Leases (accepts them and never answers: a server that hangs),
or answers them with an HTTP status (429, 503) itself, while everything else keeps flowing.
Each forwarded write (POST, PUT, PATCH, DELETE) is recorded with when its answer came back, so
a test can tell whether the replica wrote anything after a given moment. Told to, it also holds
one kind of request (a method on a path): accepted, never sent on and never answered, so a test
can kill the replica at exactly that point of its work, the request never made.
"""

from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import urllib3

from localcluster import LocalCluster
from localcluster.kubeconfig import build_kubeconfig, write_kubeconfig

LEASES = "/apis/coordination.k8s.io/"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})
OWN_HEADERS = frozenset({"date", "server"})
"""Headers the proxy's own server writes: not copied from the API server's answer."""


@dataclass(frozen=True)
class ForwardedWrite:
    method: str
    path: str
    status: int
    sent_at: float
    """Wall-clock time (time.time()) the proxy sent it on."""
    answered_at: float
    """Wall-clock time its answer came back: the server applied it before then."""


class LeaseFaultProxy:
    def __init__(self, cluster: LocalCluster) -> None:
        self._upstream = cluster.server
        context = ssl.create_default_context(cafile=str(cluster.ca_cert))
        context.load_cert_chain(str(cluster.admin.cert), str(cluster.admin.key))
        self._pool = urllib3.PoolManager(ssl_context=context, maxsize=32, retries=False)
        self._ca_pem = cluster.ca_cert.read_bytes()
        self._lock = threading.Lock()
        self._lease_fault: int | str | None = None
        self._holds: dict[tuple[str, str], threading.Event] = {}
        self._closed = threading.Event()
        self.writes: list[ForwardedWrite] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="lease-proxy", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> LeaseFaultProxy:
        self._thread.start()
        return self

    def kubeconfig(self, path: Path) -> Path:
        return write_kubeconfig(path, build_kubeconfig(self.url, self._ca_pem, "through-proxy"))

    def break_leases(self, fault: int | str) -> None:
        """From now on Lease requests hang ("hang") or are answered with that HTTP status."""
        with self._lock:
            self._lease_fault = fault

    def hold(self, method: str, path: str) -> threading.Event:
        """From now on requests of `method` on `path` (the query aside) hang unsent; the event
        is set when the first arrives."""
        arrived = threading.Event()
        with self._lock:
            self._holds[(method, path)] = arrived
        return arrived

    def writes_since(self, moment: float) -> list[ForwardedWrite]:
        """Writes the server may have applied after `moment` (wall clock), Lease ones too."""
        with self._lock:
            return [write for write in self.writes if write.answered_at > moment]

    def lease_writes_answered(self, status: int = 200) -> list[ForwardedWrite]:
        with self._lock:
            return [w for w in self.writes if w.path.startswith(LEASES) and w.status == status]

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._pool.clear()

    # -- serving -----------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 for chunked watch responses: a client reading a close-delimited body
            # in blocks would see each event only once the next ones fill its block.
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy._serve(self)

            def do_POST(self) -> None:
                proxy._serve(self)

            def do_PUT(self) -> None:
                proxy._serve(self)

            def do_PATCH(self) -> None:
                proxy._serve(self)

            def do_DELETE(self) -> None:
                proxy._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test prints what it needs."""

        return Handler

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else None
        with self._lock:
            held = self._holds.get((request.command, request.path.partition("?")[0]))
        if held is not None:
            held.set()
            self._closed.wait()
            return
        if request.path.startswith(LEASES):
            with self._lock:
                fault = self._lease_fault
            if fault == "hang":
                self._closed.wait()
                return
            if isinstance(fault, int):
                status = b'{"kind":"Status","status":"Failure","message":"injected"}'
                request.send_response(fault)
                request.send_header("Content-Type", "application/json")
                request.send_header("Retry-After", "1")
                request.send_header("Content-Length", str(len(status)))
                request.end_headers()
                request.wfile.write(status)
                return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        sent_at = time.time()
        response = self._pool.request(
            request.command,
            self._upstream + request.path,
            body=body,
            headers=headers,
            preload_content=False,
            redirect=False,
            timeout=urllib3.Timeout(connect=5, read=None),
        )
        if request.command in WRITES:
            with self._lock:
                self.writes.append(
                    ForwardedWrite(
                        request.command, request.path, response.status, sent_at, time.time()
                    )
                )
        try:
            self._relay(request, response)
        except (OSError, urllib3.exceptions.HTTPError):
            # The replica went away (it exited, or gave up on a watch): nobody to answer.
            request.close_connection = True
        finally:
            response.release_conn()

    def _relay(self, request: BaseHTTPRequestHandler, response: Any) -> None:
        request.send_response(response.status)
        for name, value in response.headers.items():
            if name.lower() not in HOP_BY_HOP | OWN_HEADERS:
                request.send_header(name, value)
        if not response.chunked:
            data = response.read(decode_content=False)
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
            return
        # A watch: forward each chunk as it arrives.
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        for chunk in response.read_chunked(decode_content=False):
            request.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        request.wfile.write(b"0\r\n\r\n")
