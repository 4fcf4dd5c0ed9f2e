"""The CSI Identity service: who the plugin is, what it serves, and whether it is ready."""

from __future__ import annotations

from google.protobuf.wrappers_pb2 import BoolValue

from provisioner.csi.generated import csi_pb2
from provisioner.version import VERSION

_Service = csi_pb2.PluginCapability.Service


class IdentityServer:
    def __init__(self, driver_name: str) -> None:
        self.driver_name = driver_name

    def get_plugin_info(self, _: csi_pb2.GetPluginInfoRequest) -> csi_pb2.GetPluginInfoResponse:
        return csi_pb2.GetPluginInfoResponse(name=self.driver_name, vendor_version=VERSION)

    def get_plugin_capabilities(
        self, _: csi_pb2.GetPluginCapabilitiesRequest
    ) -> csi_pb2.GetPluginCapabilitiesResponse:
        """No Controller service (the provisioner makes volumes through the Kubernetes API);
        volumes are reachable from their own node only, which NodeGetInfo's topology says."""
        accessibility = _Service(type=_Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)
        return csi_pb2.GetPluginCapabilitiesResponse(
            capabilities=[csi_pb2.PluginCapability(service=accessibility)]
        )

    def probe(self, _: csi_pb2.ProbeRequest) -> csi_pb2.ProbeResponse:
        """Serving means ready: the configuration was read and checked before the socket
        opened, and every call reads its facts afresh."""
        return csi_pb2.ProbeResponse(ready=BoolValue(value=True))
