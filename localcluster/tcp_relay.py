"""A TCP relay to the API server on 127.0.0.1: each connection accepted on a listening socket is
piped, both ways, to a port of this machine's loopback.

Two places of the harness need one: a kwok node's emulated pod, whose network namespace gets a
listener on its own 127.0.0.1:<api port> (`pod_network`), and the real nodes' pods, which reach
the `kubernetes` Service address (`service_relay`). TLS passes through untouched, so what a pod
sees is the API server itself.
"""

from __future__ import annotations

import contextlib
import socket
import threading

RELAY_BUFFER = 65536


class TcpRelay:
    """Pipes each connection `listener` accepts to 127.0.0.1:`target_port` until `stop`."""

    def __init__(self, listener: socket.socket, target_port: int, *, name: str) -> None:
        self._listener: socket.socket | None = listener
        self._target_port = target_port
        self._name = name
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Accepts connections on a thread of its own; the listener must be listening."""
        threading.Thread(target=self._accept, name=self._name, daemon=True).start()

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                inside, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(
                target=self._pipe, args=(inside,), name=f"{self._name}-connection", daemon=True
            ).start()

    def _pipe(self, inside: socket.socket) -> None:
        try:
            outside = socket.create_connection(("127.0.0.1", self._target_port), timeout=10)
        except OSError:
            inside.close()
            return
        outside.settimeout(None)
        with self._lock:
            self._connections.update((inside, outside))
        forward = threading.Thread(
            target=_copy, args=(outside, inside), name=f"{self._name}-connection", daemon=True
        )
        forward.start()
        _copy(inside, outside)
        forward.join()
        with self._lock:
            self._connections.difference_update((inside, outside))
        inside.close()
        outside.close()

    def stop(self) -> None:
        """Closes the listener and ends every open connection."""
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
