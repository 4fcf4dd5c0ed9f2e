"""The kubelet's plugin registration service, served by the node plugin itself.

How the kubelet finds a CSI driver: its plugin watcher sees a socket appear in
`<kubelet root>/plugins_registry/`, calls `GetInfo` on it (type CSIPlugin, the driver's name,
the CSI endpoint, the CSI versions), then dials that endpoint for `NodeGetInfo`, writes the
driver, node ID and topology keys into the node's CSINode object, and tells the plugin the
outcome with `NotifyRegistrationStatus`.

Why here and not in the usual node-driver-registrar sidecar: the sidecar only answers these two
calls from a socket in that directory, and the kubelet's watcher needs nothing more than the
socket. Served from the plugin's own process, the driver ships as one image (no second image to
pin, scan and update), the pod has one container fewer, and no second process must be kept in
step with the first: the registration socket exists exactly while the CSI services run.

A refusal (`plugin_registered: false`) is not recoverable by the plugin: the kubelet does not
ask again until the socket is made anew. So it is logged with the kubelet's reason and kept,
and the liveness endpoint fails on it (liveness.py): the kubelet restarts the container, which
registers afresh.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from provisioner.csi.generated import pluginregistration_pb2

log = logging.getLogger(__name__)

CSI_PLUGIN_TYPE = "CSIPlugin"
"""k8s.io/kubelet/pkg/apis/pluginregistration/v1 CSIPlugin."""
SUPPORTED_VERSIONS = ("1.0.0",)
"""The CSI versions offered: the kubelet accepts any 1.x and speaks v1 of the spec."""


class RegistrationServer:
    def __init__(self, driver_name: str, kubelet_endpoint: Path) -> None:
        self.driver_name = driver_name
        self.kubelet_endpoint = kubelet_endpoint
        self._lock = threading.Lock()
        self._refusal: str | None = None

    def get_info(self, _: pluginregistration_pb2.InfoRequest) -> pluginregistration_pb2.PluginInfo:
        return pluginregistration_pb2.PluginInfo(
            type=CSI_PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=str(self.kubelet_endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def notify_registration_status(
        self, status: pluginregistration_pb2.RegistrationStatus
    ) -> pluginregistration_pb2.RegistrationStatusResponse:
        with self._lock:
            self._refusal = None if status.plugin_registered else (status.error or "no reason")
        if status.plugin_registered:
            log.info("the kubelet registered %s at %s", self.driver_name, self.kubelet_endpoint)
        else:
            log.error(
                "the kubelet refused to register %s (endpoint %s): %s; /healthz now fails so"
                " that a restart registers again",
                self.driver_name,
                self.kubelet_endpoint,
                status.error or "no reason given",
            )
        return pluginregistration_pb2.RegistrationStatusResponse()

    @property
    def refusal(self) -> str | None:
        """The kubelet's reason for refusing the last registration; None if it did not."""
        with self._lock:
            return self._refusal
