"""What csi-sanity needs beside the node plugin: a Controller service that stands in for the
provisioner, and a front that lets csi-sanity's whole-volume node tests run.

csi-sanity makes the volumes its node tests publish with the Controller's CreateVolume. Our
driver has no Controller service: the provisioner makes each volume's directory and writes its
path into the PV's volumeAttributes. `SanityController` does the same (a directory in the
node's base path, its path in the volume context under VOLUME_PATH_KEY), so the node plugin is
called with exactly what it gets in a cluster. csi-sanity's own Controller tests are not run
against it: they would test this stand-in, not the driver.

csi-sanity runs its whole-volume node tests ("Node Service should work", "should be
idempotent": create, publish, stats, unpublish, delete, ten times over) only when the node
endpoint's Identity advertises CONTROLLER_SERVICE. `serve_front` serves a socket whose Identity
says so and which passes every Node and Identity call, bytes unchanged, to the real plugin.
"""

from __future__ import annotations

import shutil
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME
from provisioner.csi.generated import csi_pb2
from provisioner.csi.identity_server import IdentityServer
from provisioner.csi.services import controller_handler, identity_handler
from provisioner.node_volumes.snapshot_rpcs import SnapshotPermit, SnapshotRpcs, SourceVolume
from provisioner.node_volumes.snapshot_service import SnapshotService
from provisioner.node_volumes.volume_records import VolumeRecord
from provisioner.node_volumes.volume_state import VolumeState
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from provisioner.objects.snapshot_handoff import SnapshotRemoval, SnapshotSetup

_Rpc = csi_pb2.ControllerServiceCapability.RPC
_Service = csi_pb2.PluginCapability.Service


def _handler(behaviour: Any, request_type: Any) -> grpc.RpcMethodHandler[Any, Any]:
    return grpc.unary_unary_rpc_method_handler(
        behaviour,
        request_deserializer=request_type.FromString,
        response_serializer=lambda message: message.SerializeToString(),
    )


def _bad_name(name: str) -> bool:
    return not name or "/" in name or name in (".", "..")


class SanityController:
    def __init__(self, base_path: Path, topology: dict[str, str]) -> None:
        self.base_path = base_path
        self.topology = topology

    def create_volume(
        self, request: csi_pb2.CreateVolumeRequest, context: grpc.ServicerContext
    ) -> csi_pb2.CreateVolumeResponse:
        if _bad_name(request.name):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad volume name {request.name!r}")
        directory = self.base_path / request.name
        directory.mkdir(exist_ok=True)
        return csi_pb2.CreateVolumeResponse(
            volume=csi_pb2.Volume(
                volume_id=request.name,
                capacity_bytes=request.capacity_range.required_bytes,
                volume_context={VOLUME_PATH_KEY: str(directory)},
                accessible_topology=[csi_pb2.Topology(segments=self.topology)],
            )
        )

    def delete_volume(
        self, request: csi_pb2.DeleteVolumeRequest, context: grpc.ServicerContext
    ) -> csi_pb2.DeleteVolumeResponse:
        if _bad_name(request.volume_id):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad volume id {request.volume_id!r}")
        shutil.rmtree(self.base_path / request.volume_id, ignore_errors=True)
        return csi_pb2.DeleteVolumeResponse()

    def capabilities(
        self, _: csi_pb2.ControllerGetCapabilitiesRequest, __: grpc.ServicerContext
    ) -> csi_pb2.ControllerGetCapabilitiesResponse:
        create_delete = _Rpc(type=_Rpc.CREATE_DELETE_VOLUME)
        return csi_pb2.ControllerGetCapabilitiesResponse(
            capabilities=[csi_pb2.ControllerServiceCapability(rpc=create_delete)]
        )

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {
            "CreateVolume": _handler(self.create_volume, csi_pb2.CreateVolumeRequest),
            "DeleteVolume": _handler(self.delete_volume, csi_pb2.DeleteVolumeRequest),
            "ControllerGetCapabilities": _handler(
                self.capabilities, csi_pb2.ControllerGetCapabilitiesRequest
            ),
        }
        return grpc.method_handlers_generic_handler("csi.v1.Controller", methods)


class _PassOn(grpc.GenericRpcHandler):
    """Node and Identity calls passed to the plugin as bytes, its answer or status returned."""

    def __init__(
        self, channel: grpc.Channel, overrides: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.channel = channel
        self.overrides = overrides

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = details.method
        if method in self.overrides:
            return self.overrides[method]
        if not method.startswith(("/csi.v1.Node/", "/csi.v1.Identity/")):
            return None
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(method)

        def pass_on(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                answer: bytes = call(request, timeout=60)
            except grpc.RpcError as error:
                context.abort(error.code(), error.details() or "")
            return answer

        return grpc.unary_unary_rpc_method_handler(pass_on)


def _server(socket: Path, handlers: list[grpc.GenericRpcHandler]) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=handlers)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server


def serve_controller(socket: Path, controller: SanityController) -> grpc.Server:
    """The stand-in Controller, with the driver's Identity: every CSI endpoint serves it, and
    csi-sanity asks both."""
    return _server(
        socket, [identity_handler(IdentityServer(DEFAULT_DRIVER_NAME)), controller.handler()]
    )


def serve_front(socket: Path, plugin_endpoint: str, controller: SanityController) -> grpc.Server:
    channel = grpc.insecure_channel(plugin_endpoint)
    identity = IdentityServer(DEFAULT_DRIVER_NAME)

    def capabilities(
        request: csi_pb2.GetPluginCapabilitiesRequest, _: grpc.ServicerContext
    ) -> csi_pb2.GetPluginCapabilitiesResponse:
        answer = identity.get_plugin_capabilities(request)
        answer.capabilities.add(service=_Service(type=_Service.CONTROLLER_SERVICE))
        return answer

    overrides = {
        "/csi.v1.Identity/GetPluginCapabilities": _handler(
            capabilities, csi_pb2.GetPluginCapabilitiesRequest
        )
    }
    return _server(socket, [_PassOn(channel, overrides), controller.handler()])


class SnapshotSanityController(SanityController):
    """The stand-in Controller for csi-sanity's snapshot tests: each volume it makes is recorded
    as set up in the node's state (as the node's own setup records it), so that the real
    SnapshotService, behind the real Controller binding (services.controller_handler), takes
    snapshots of it. It is the `SourceVolumes` (by volume id, never a request's path) and the
    `SnapshotPermits` (the gate's stand-in: a permit for every snapshot of this run)."""

    def __init__(
        self, base_path: Path, topology: dict[str, str], state: VolumeState, node_name: str
    ) -> None:
        super().__init__(base_path, topology)
        self.state = state
        self.service = SnapshotService(node_name, [str(base_path)], state, timeout_seconds=30)
        self.rpcs = SnapshotRpcs(self.service, self, self)

    def create_volume(
        self, request: csi_pb2.CreateVolumeRequest, context: grpc.ServicerContext
    ) -> csi_pb2.CreateVolumeResponse:
        answer = super().create_volume(request, context)
        self.state.write(request.name, VolumeRecord("set-up", str(self.base_path / request.name)))
        return answer

    def find(self, volume_id: str) -> SourceVolume | None:
        path = self.base_path / volume_id
        if _bad_name(volume_id) or not path.is_dir():
            return None
        return SourceVolume(volume_id, str(path), str(self.base_path), 1 << 20)

    def for_snapshot(self, snapshot: str) -> SnapshotPermit | None:
        record = self.service.record(snapshot)
        if record is None:
            return None
        setup = SnapshotSetup(
            record.id, record.source_volume, "", record.base_path, record.path, 0, "Filesystem"
        )
        removal = SnapshotRemoval("sanity", "", record.id, record.path)
        return SnapshotPermit(setup, removal, "sanity", "", lambda: None)

    def capabilities(
        self, _: csi_pb2.ControllerGetCapabilitiesRequest, __: grpc.ServicerContext
    ) -> csi_pb2.ControllerGetCapabilitiesResponse:
        answer = self.rpcs.controller_get_capabilities(csi_pb2.ControllerGetCapabilitiesRequest())
        answer.capabilities.add(rpc=_Rpc(type=_Rpc.CREATE_DELETE_VOLUME))
        return answer

    def handler(self) -> grpc.GenericRpcHandler:
        """The stand-in's volume calls and capabilities first, then the driver's own snapshot
        calls as services.py binds them (a generic handler passes on a method it lacks)."""
        return _Chain([super().handler(), controller_handler(self.rpcs)])


class _Chain(grpc.GenericRpcHandler):
    def __init__(self, handlers: list[grpc.GenericRpcHandler]) -> None:
        self.handlers = handlers

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        for handler in self.handlers:
            found = handler.service(details)
            if found is not None:
                return found
        return None
