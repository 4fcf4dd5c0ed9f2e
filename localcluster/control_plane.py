"""Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, in order, and
waits until each is usable.

Why: the harness needs the real control plane (PV binding, scheduling, service-account tokens,
RBAC and garbage collection are the behaviour under test), started fast and diagnosed in one
line when a component dies: its name and its log file.
"""

from __future__ import annotations

import http.client
import re
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from localcluster import component_args as args
from localcluster.binaries import ClusterBinaries
from localcluster.certificates import ClusterPki, KeyPair
from localcluster.errors import ComponentFailedError, PortInUseError
from localcluster.processes import ManagedProcess, stop_all

STOP_GRACE_SECONDS = 10.0
_ADDRESS_IN_USE = re.compile(r"address already in use", re.IGNORECASE)
_PORT_IN_LOG = re.compile(r"127\.0\.0\.1:(\d+)")


def admin_ssl_context(ca_cert: Path, admin: KeyPair) -> ssl.SSLContext:
    """TLS context that trusts the cluster CA and presents the admin client certificate."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    context.load_cert_chain(str(admin.cert), str(admin.key))
    return context


def https_get(
    port: int, path: str, context: ssl.SSLContext, timeout: float = 5.0
) -> tuple[int, bytes]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class ControlPlane:
    """The component processes of one cluster."""

    def __init__(
        self,
        binaries: ClusterBinaries,
        layout: args.ClusterLayout,
        ports: args.ClusterPorts,
        pki: ClusterPki,
        fake_nodes_only: bool = False,
    ) -> None:
        self.binaries = binaries
        self.layout = layout
        self.ports = ports
        self.pki = pki
        self.ssl_context = admin_ssl_context(pki.ca.cert, pki.admin)
        log = layout.logs
        self.etcd = ManagedProcess(
            "etcd", args.etcd_args(binaries, layout, ports), log / "etcd.log"
        )
        self.apiserver = self._new_apiserver()
        self.controller_manager = ManagedProcess(
            "kube-controller-manager",
            args.controller_manager_args(binaries, layout, pki),
            log / "kube-controller-manager.log",
        )
        self.scheduler = ManagedProcess(
            "kube-scheduler",
            args.scheduler_args(binaries, layout),
            log / "kube-scheduler.log",
        )
        self.kwok = ManagedProcess(
            "kwok", args.kwok_args(binaries, layout, fake_nodes_only), log / "kwok.log"
        )

    def _new_apiserver(self) -> ManagedProcess:
        return ManagedProcess(
            "kube-apiserver",
            args.apiserver_args(self.binaries, self.layout, self.ports, self.pki),
            self.layout.logs / "kube-apiserver.log",
        )

    @property
    def processes(self) -> list[ManagedProcess]:
        """In start order."""
        return [self.etcd, self.apiserver, self.controller_manager, self.scheduler, self.kwok]

    def start_storage_and_apiserver(self, deadline: float) -> None:
        self.etcd.start()
        self._wait(
            self.etcd,
            deadline,
            f"http://127.0.0.1:{self.ports.etcd_client}/health",
            self._etcd_healthy,
        )
        self.apiserver.start()
        self._wait(self.apiserver, deadline, "/readyz", self._apiserver_ready)

    def start_controllers(self) -> None:
        """kube-controller-manager, kube-scheduler and kwok; readiness is judged by their
        effects (tokens, Ready nodes), which the cluster waits for."""
        for process in (self.controller_manager, self.scheduler, self.kwok):
            process.start()

    def restart_apiserver(self, deadline: float) -> None:
        """Stops kube-apiserver and starts it again on the same port with the same data."""
        self.apiserver.stop(STOP_GRACE_SECONDS)
        self.apiserver = self._new_apiserver()
        self.apiserver.start()
        self._wait(self.apiserver, deadline, "/readyz", self._apiserver_ready)

    def check_alive(self) -> None:
        """Raises ComponentFailedError for the first started component that has exited."""
        for process in self.processes:
            if process.pid is not None and not process.is_running():
                raise self.failure(process, f"exited early (exit code {process.exit_code()})")

    def failure(
        self, process: ManagedProcess, problem: str
    ) -> ComponentFailedError | PortInUseError:
        last = process.last_log_line()
        if _ADDRESS_IN_USE.search(last):
            port = _PORT_IN_LOG.search(last)
            if port:
                return PortInUseError(int(port.group(1)), process.name)
        return ComponentFailedError(process.name, problem, process.log_path)

    def stop(self) -> None:
        """Clients first, storage last, so nothing logs a storm of connection errors."""
        stop_all([self.kwok, self.scheduler, self.controller_manager], STOP_GRACE_SECONDS)
        self.apiserver.stop(STOP_GRACE_SECONDS)
        self.etcd.stop(STOP_GRACE_SECONDS)

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process.pid is not None]

    def _etcd_healthy(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.ports.etcd_client, timeout=2)
        try:
            connection.request("GET", "/health")
            return connection.getresponse().status == http.client.OK
        except OSError:
            return False
        finally:
            connection.close()

    def _apiserver_ready(self) -> bool:
        try:
            code, _ = https_get(self.ports.apiserver, "/readyz", self.ssl_context, timeout=2)
        except (OSError, http.client.HTTPException):
            return False
        return code == http.client.OK

    def _wait(
        self, process: ManagedProcess, deadline: float, what: str, ready: Callable[[], bool]
    ) -> None:
        while not ready():
            if not process.is_running():
                raise self.failure(
                    process, f"exited during start-up (exit code {process.exit_code()})"
                )
            if time.monotonic() >= deadline:
                raise self.failure(process, f"was not ready ({what}) in time")
            time.sleep(0.1)
