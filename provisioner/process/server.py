"""The provisioner's HTTP endpoints: /healthz (alive), /readyz (able to work), /metrics.

Liveness and readiness are separate on purpose: a replica that is not the leader, or whose
informers are still syncing, is alive (kubelet must not restart it) but not ready. Liveness is a
heartbeat of the process's loops (election, informers, workers), so a wedged process answers
500 and is restarted; it never depends on the API server, whose outage a restart cannot fix.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], tuple[bool, str]]
"""Returns (ready, reason); the reason is shown on /readyz so an operator sees what is missing."""
LivenessCheck = Callable[[], tuple[bool, str]]
"""Returns (alive, reason); the reason is shown on /healthz."""


def _always_alive() -> tuple[bool, str]:
    return True, "ok"


class ProbeServer:
    """Serves the probes and metrics on one port from a daemon thread."""

    def __init__(
        self,
        address: str,
        port: int,
        registry: CollectorRegistry,
        readiness: ReadinessCheck,
        *,
        liveness: LivenessCheck = _always_alive,
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._liveness = liveness
        handler = self._make_handler()
        self._httpd = ThreadingHTTPServer((address, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="probe-server", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("serving /healthz, /readyz and /metrics on port %d", self.port)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _make_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    alive, reason = server._liveness()
                    self._reply(200 if alive else 500, f"{reason}\n".encode(), "text/plain")
                elif path == "/readyz":
                    ready, reason = server._readiness()
                    body = (reason or ("ready" if ready else "not ready")) + "\n"
                    self._reply(200 if ready else 503, body.encode(), "text/plain")
                elif path == "/metrics":
                    self._reply(200, generate_latest(server._registry), CONTENT_TYPE_LATEST)
                else:
                    self._reply(404, b"not found\n", "text/plain")

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                # Probes hit this every few seconds; request lines would drown the useful logs.
                return

        return Handler
