"""The node plugin's liveness: alive while its CSI socket answers Probe with ready, and the
kubelet has not refused its registration.

Probe is asked through the socket, as the kubelet would, not of the Identity object in memory:
a wedged server, a full thread pool or a socket file removed from under the plugin all leave
the object answering while the kubelet cannot reach the driver, and only a restart mends them.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from provisioner.csi.generated import csi_pb2
from provisioner.csi.registration_server import RegistrationServer

PROBE_TIMEOUT_SECONDS = 3.0
PROBE_METHOD = "/csi.v1.Identity/Probe"


def _serialize(request: csi_pb2.ProbeRequest) -> bytes:
    return request.SerializeToString()


def probe_failure(socket_path: Path) -> str | None:
    """Why Probe on `socket_path` did not say ready; None when it did."""
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        probe: grpc.UnaryUnaryMultiCallable[csi_pb2.ProbeRequest, csi_pb2.ProbeResponse] = (
            channel.unary_unary(
                PROBE_METHOD,
                request_serializer=_serialize,
                response_deserializer=csi_pb2.ProbeResponse.FromString,
            )
        )
        try:
            response = probe(csi_pb2.ProbeRequest(), timeout=PROBE_TIMEOUT_SECONDS)
        except grpc.RpcError as error:
            return f"Probe on {socket_path} failed: {error.code().name}: {error.details()}"
    if response.HasField("ready") and not response.ready.value:
        return f"Probe on {socket_path} says not ready"
    return None


class Liveness:
    """The /healthz check: (alive, reason)."""

    def __init__(self, socket_path: Path, registration: RegistrationServer) -> None:
        self.socket_path = socket_path
        self.registration = registration

    def __call__(self) -> tuple[bool, str]:
        refusal = self.registration.refusal
        if refusal is not None:
            return False, f"the kubelet refused the registration: {refusal}"
        failure = probe_failure(self.socket_path)
        if failure is not None:
            return False, failure
        return True, "ok"
