"""Container probes as a kubelet runs them: readiness, liveness and startup.

Why: the Deployment's pods must become Ready only when their `/readyz` answers, and be
restarted when `/healthz` stops answering, or the rollout and high-availability behaviour
under test would be fiction. The kubelet's rules: a probe runs every `periodSeconds` after
`initialDelaySeconds`, each try times out after `timeoutSeconds`; the result flips only after
`successThreshold` successes or `failureThreshold` failures in a row; readiness starts as
failure, liveness and startup as success/unknown. Only what the provisioner's Deployment uses
is emulated: a plain-HTTP httpGet to a port by name or number (a status from 200 to 399), sent
from inside the pod's network namespace. Any other probe (exec, tcpSocket, grpc, HTTPS, a host
or headers) is ignored with a line in harness.log: a pod that needs one belongs on a real node
(`ClusterOptions(real_nodes=N)`), whose kubelet runs every kind.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

HTTP_OK_RANGE = range(200, 400)


@dataclass(frozen=True)
class ProbeSpec:
    """One httpGet probe of a container, with the kubelet's defaults filled in."""

    port: int
    path: str = "/"
    initial_delay_seconds: float = 0.0
    period_seconds: float = 10.0
    timeout_seconds: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"probe port {port!r} names no port of container {container.get('name')}")


def parse_probe(probe: Mapping[str, Any] | None, container: Mapping[str, Any]) -> ProbeSpec | None:
    """The probe as data; None when the container has none."""
    if not probe:
        return None
    # The API server fills in `scheme: HTTP`; a host or headers the Deployment never sets.
    action: Mapping[str, Any] = probe.get("httpGet") or {}
    plain = action.get("scheme", "HTTP") == "HTTP" and not action.get("httpHeaders")
    if not action or not plain or action.get("host"):
        raise ValueError(f"only plain httpGet probes are emulated by the local cluster: {probe}")
    return ProbeSpec(
        port=resolve_port(action["port"], container),
        path=action.get("path") or "/",
        initial_delay_seconds=float(probe.get("initialDelaySeconds", 0)),
        period_seconds=float(probe.get("periodSeconds", 10)),
        timeout_seconds=float(probe.get("timeoutSeconds", 1)),
        success_threshold=int(probe.get("successThreshold", 1)),
        failure_threshold=int(probe.get("failureThreshold", 3)),
    )


SocketFactory = Callable[[], socket.socket]


def http_check(spec: ProbeSpec, new_socket: SocketFactory, pod_ip: str) -> bool:
    """One try from inside the pod's network (its socket comes from `new_socket`)."""
    connection = http.client.HTTPConnection(pod_ip, spec.port, timeout=spec.timeout_seconds)
    sock = new_socket()
    sock.settimeout(spec.timeout_seconds)
    try:
        sock.connect((pod_ip, spec.port))
        connection.sock = sock
        connection.request("GET", spec.path)
        return connection.getresponse().status in HTTP_OK_RANGE
    finally:
        connection.close()
        sock.close()


class Prober:
    """Runs one probe in a thread until stopped; reports each change of its result."""

    def __init__(
        self,
        spec: ProbeSpec,
        check: Callable[[], bool],
        *,
        initial: bool | None,
        on_change: Callable[[bool], None],
    ) -> None:
        """`initial` is the result before any try: False for readiness, True for liveness,
        None (unknown) for startup, so its first settled result is reported either way."""
        self.spec = spec
        self.check = check
        self.result = initial
        self.on_change = on_change
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="prober", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _loop(self) -> None:
        run_result: bool | None = self.result
        run_length = 0
        if self.stopped.wait(self.spec.initial_delay_seconds):
            return
        while not self.stopped.is_set():
            try:
                outcome = self.check()
            except (OSError, http.client.HTTPException, ValueError):
                outcome = False
            if self.stopped.is_set():
                return
            run_length = run_length + 1 if outcome == run_result else 1
            run_result = outcome
            threshold = self.spec.success_threshold if outcome else self.spec.failure_threshold
            if outcome != self.result and run_length >= threshold:
                self.result = outcome
                self.on_change(outcome)
            self.stopped.wait(self.spec.period_seconds)
