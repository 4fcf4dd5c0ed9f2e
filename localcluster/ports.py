"""Loopback ports for the control plane, picked free at start so clusters can run side by side.

Why: tests, the demo and benchmarks may each run a cluster at the same time; fixed ports would
collide. The kernel hands out a free port when a socket binds port 0. A port chosen by the
caller is checked the same way so a clash fails with one clear line instead of a component's
bind error deep in its log.
"""

from __future__ import annotations

import errno
import socket

from localcluster.errors import PortInUseError

LOOPBACK = "127.0.0.1"


def pick_free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free a moment ago (all held open until all are picked,
    so the kernel cannot return the same one twice)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.bind((LOOPBACK, 0))
            sockets.append(held)
        return [held.getsockname()[1] for held in sockets]
    finally:
        for held in sockets:
            held.close()


def ensure_port_free(port: int, purpose: str) -> None:
    """Raises PortInUseError when something already listens on (or holds) 127.0.0.1:port."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((LOOPBACK, port))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise PortInUseError(port, purpose) from error
        raise
    finally:
        probe.close()
