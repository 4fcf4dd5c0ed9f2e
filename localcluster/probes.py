"""Container probes as a kubelet runs them: readiness, liveness and startup.

Why: the Deployment's pods must become Ready only when their `/readyz` answers, and be
restarted when `/healthz` stops answering, or the rollout and high-availability behaviour
under test would be fiction. The kubelet's rules: a probe runs every `periodSeconds` after
`initialDelaySeconds`, each try times out after `timeoutSeconds`; the result flips only after
`successThreshold` successes or `failureThreshold` failures in a row; readiness starts as
failure, liveness and startup as success/unknown. httpGet (a status from 200 to 399) and
tcpSocket run inside the pod's network namespace; exec runs through `nsenter` into the
container's namespaces.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

HTTP_OK_RANGE = range(200, 400)


@dataclass(frozen=True)
class ProbeSpec:
    """One probe of a container, with the kubelet's defaults filled in."""

    action: str
    """httpGet, tcpSocket or exec."""
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    host: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
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
    """The probe as data; None when the container has none. grpc probes are not emulated."""
    if not probe:
        return None
    base = ProbeSpec(
        "",
        initial_delay_seconds=float(probe.get("initialDelaySeconds", 0)),
        period_seconds=float(probe.get("periodSeconds", 10)),
        timeout_seconds=float(probe.get("timeoutSeconds", 1)),
        success_threshold=int(probe.get("successThreshold", 1)),
        failure_threshold=int(probe.get("failureThreshold", 3)),
    )
    if "httpGet" in probe:
        action = probe["httpGet"]
        return replace(
            base,
            action="httpGet",
            port=resolve_port(action["port"], container),
            path=action.get("path") or "/",
            scheme=action.get("scheme", "HTTP"),
            host=action.get("host", ""),
            headers=tuple((h["name"], h["value"]) for h in action.get("httpHeaders") or []),
        )
    if "tcpSocket" in probe:
        action = probe["tcpSocket"]
        port = resolve_port(action["port"], container)
        return replace(base, action="tcpSocket", port=port, host=action.get("host", ""))
    if "exec" in probe:
        return replace(base, action="exec", command=tuple(probe["exec"].get("command") or ()))
    raise ValueError(f"probe kind {sorted(probe)} is not emulated by the local cluster")


SocketFactory = Callable[[], socket.socket]


def http_check(spec: ProbeSpec, new_socket: SocketFactory, pod_ip: str) -> bool:
    """One httpGet try from inside the pod's network (its socket comes from `new_socket`)."""
    host = spec.host or pod_ip
    connection: http.client.HTTPConnection
    if spec.scheme.upper() == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # as the kubelet: probes do not verify
        connection = http.client.HTTPSConnection(host, spec.port, timeout=spec.timeout_seconds)
        connection.sock = context.wrap_socket(_connected(spec, new_socket, host))
    else:
        connection = http.client.HTTPConnection(host, spec.port, timeout=spec.timeout_seconds)
        connection.sock = _connected(spec, new_socket, host)
    try:
        connection.request("GET", spec.path, headers=dict(spec.headers))
        return connection.getresponse().status in HTTP_OK_RANGE
    finally:
        connection.close()


def _connected(spec: ProbeSpec, new_socket: SocketFactory, host: str) -> socket.socket:
    sock = new_socket()
    sock.settimeout(spec.timeout_seconds)
    try:
        sock.connect((host, spec.port))
    except OSError:
        sock.close()
        raise
    return sock


def tcp_check(spec: ProbeSpec, new_socket: SocketFactory, pod_ip: str) -> bool:
    _connected(spec, new_socket, spec.host or pod_ip).close()
    return True


def exec_check(spec: ProbeSpec, container_pid: int) -> bool:
    """Runs the command in the container's mount and network namespaces, root and cwd."""
    nsenter = shutil.which("nsenter") or "nsenter"
    argv = [nsenter, "-t", str(container_pid), "-m", "-n", "-r", "-w", "--", *spec.command]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=spec.timeout_seconds, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


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
