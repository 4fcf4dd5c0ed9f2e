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

import socket

from localcluster.errors import ClusterError
from localcluster.tcp_relay import TcpRelay

SERVICE_PORT = 443


class ServiceRelay:
    """Listens on `address`:443 and pipes each connection to 127.0.0.1:`target_port`."""

    def __init__(self, address: str, target_port: int) -> None:
        self.address = address
        self.target_port = target_port
        self._relay: TcpRelay | None = None

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
        self._relay = TcpRelay(listener, self.target_port, name="service-relay")
        self._relay.start()

    def stop(self) -> None:
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
