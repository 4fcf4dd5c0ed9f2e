"""A pod's own network namespace, with loopback up and a way to the API server.

Why: two replicas of the provisioner on one machine both listen on 0.0.0.0:8080, as two pods
on one node can; so each pod gets its own network namespace, held by a "pause" process
(`unshare --net` running `sleep`) as a kubelet's sandbox holds it across container restarts.
Only loopback exists inside: no interface with a private or public address is ever created.
The API server is reached through a relay: inside the namespace a socket listens on
127.0.0.1:<API server port> and each connection is piped to the real API server on the host's
127.0.0.1, so `KUBERNETES_SERVICE_HOST=127.0.0.1` works unchanged and TLS stays end to end
(the serving certificate covers 127.0.0.1). Probes reach the pod's ports the same way.

Sockets belong to the namespace of the thread that creates them, and `setns` moves only the
calling thread: so each socket inside the pod is created by a short-lived thread that joins
the namespace and ends, and every other thread stays in the host's namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from localcluster.processes import signal_group
from localcluster.tcp_relay import TcpRelay

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
NAMESPACE_WAIT_SECONDS = 10.0

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class PodNetworkError(Exception):
    """The pod's network namespace could not be made."""


def pod_ip_for(index: int) -> str:
    """A distinct loopback address per pod (127.1.x.y): inside the pod's namespace the whole
    of 127.0.0.0/8 is local once lo is up, so it is really the pod's own address there."""
    return f"127.1.{(index // 250) % 250}.{index % 250 + 1}"


def _in_namespace(descriptor: int, action: Callable[[], T]) -> T:
    """Runs `action` in a new thread that has joined the network namespace."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            if _libc.setns(descriptor, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the pod's network namespace")
            results.append(action())
        except BaseException as error:  # noqa: BLE001 - handed to the caller below
            errors.append(error)

    thread = threading.Thread(target=run, name="pod-netns", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


def _tcp_socket() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def _bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


class PodNetwork:
    """The namespace of one pod (its pause process) and the API relay inside it."""

    def __init__(self, pod_ip: str, api_port: int) -> None:
        self.pod_ip = pod_ip
        self.api_port = api_port
        self._pause: subprocess.Popen[bytes] | None = None
        self._descriptor: int | None = None
        self._relay: TcpRelay | None = None

    @property
    def pause_pid(self) -> int | None:
        return self._pause.pid if self._pause else None

    @property
    def namespace_path(self) -> str:
        return f"/proc/{self.pause_pid}/ns/net"

    def start(self) -> None:
        """Starts the pause process, brings lo up and opens the API relay."""
        argv = ["unshare", "--net", "--", "sleep", "infinity"]
        setpriv = shutil.which("setpriv")
        # The pod's thread starts this and outlives it: the parent-death signal then fires
        # only if the whole harness dies.
        self._pause = subprocess.Popen(
            [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._descriptor = self._open_namespace()
        _in_namespace(self._descriptor, _bring_loopback_up)
        listener = self.new_socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.api_port))
        listener.listen(64)
        self._relay = TcpRelay(listener, self.api_port, name="pod-api-relay")
        self._relay.start()

    def _open_namespace(self) -> int:
        """Waits until `unshare` has made the new namespace (it differs from ours)."""
        assert self._pause is not None
        own = Path("/proc/self/ns/net").stat().st_ino
        deadline = time.monotonic() + NAMESPACE_WAIT_SECONDS
        while time.monotonic() < deadline:
            if self._pause.poll() is not None:
                raise PodNetworkError(f"unshare --net exited with {self._pause.returncode}")
            with contextlib.suppress(OSError):
                if Path(self.namespace_path).stat().st_ino != own:
                    return os.open(self.namespace_path, os.O_RDONLY | os.O_CLOEXEC)
            time.sleep(0.01)
        raise PodNetworkError("the pod's network namespace did not appear in time")

    def new_socket(self) -> socket.socket:
        """A new IPv4 TCP socket inside the pod's namespace."""
        if self._descriptor is None:
            raise PodNetworkError("the pod's network is not started")
        return _in_namespace(self._descriptor, _tcp_socket)

    def stop(self) -> None:
        """Closes the relay and its connections and kills the pause process."""
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
        if self._pause is not None and self._pause.returncode is None:
            signal_group(self._pause.pid, signal.SIGKILL)
            self._pause.wait()
