"""The `kubernetes` Service address (10.96.0.1:443), answered for the real nodes' pods.

Why: the provisioner's Deployment uses in-cluster configuration, and a real kubelet gives its
pods KUBERNETES_SERVICE_HOST=10.96.0.1 and _PORT=443 (the Service's ClusterIP). There is no
kube-proxy here. ../shared/guide/real-node.md verified putting the API server itself on that
address; the harness keeps its API server on 127.0.0.1:<free port> instead (every other path
of the harness, and every kwok node's pod, reaches it there) and listens on 10.96.0.1:443 with
this relay, which pipes each connection to it: TLS stays end to end (the serving certificate
covers 10.96.0.1), and what a pod sees is the same. The address is on the first real node's
bridge; pods reach it through the route to the Service range their CNI configuration gives them.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from localcluster.errors import ClusterError

SERVICE_PORT = 443
RELAY_BUFFER = 65536


class ServiceRelay:
    """Listens on `address`:443 and pipes each connection to 127.0.0.1:`target_port`."""

    def __init__(self, address: str, target_port: int) -> None:
        self.address = address
        self.target_port = target_port
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.address, SERVICE_PORT))
        except OSError as error:
            listener.close()
            raise ClusterError(
                f"localcluster: cannot listen on {self.address}:{SERVICE_PORT} for the real "
                f"nodes' pods: {error}"
            ) from error
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, name="service-relay", daemon=True).start()

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                inside, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(
                target=self._pipe, args=(inside,), name="service-relay-connection", daemon=True
            ).start()

    def _pipe(self, inside: socket.socket) -> None:
        try:
            outside = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        except OSError:
            inside.close()
            return
        outside.settimeout(None)
        with self._lock:
            self._connections.update((inside, outside))
        forward = threading.Thread(
            target=_copy, args=(outside, inside), name="service-relay-connection", daemon=True
        )
        forward.start()
        _copy(inside, outside)
        forward.join()
        with self._lock:
            self._connections.difference_update((inside, outside))
        inside.close()
        outside.close()

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


def _copy(source: socket.socket, target: socket.socket) -> None:
    """Copies one direction until end of stream, then passes the end on."""
    try:
        while chunk := source.recv(RELAY_BUFFER):
            target.sendall(chunk)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)
