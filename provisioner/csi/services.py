"""Binds the Identity and Node services, and the kubelet's Registration, to gRPC, typed by
the generated messages.

Each RPC is a method that takes the request and returns the response; a CsiError becomes the
call's status, an OSError an INTERNAL one naming it. Methods not bound here (staging, expansion,
health, the Controller's volume calls) answer UNIMPLEMENTED, as the spec asks of a plugin that does
not advertise them.

The Controller service is bound with its snapshot calls only (`ControllerService`): the node
plugin takes its own node's snapshots (node_volumes.snapshot_rpcs), the same code its
VolumeSnapshotContent watch runs. Nothing in a cluster calls it; csi-sanity does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2, pluginregistration_pb2
from provisioner.csi.identity_server import IdentityServer
from provisioner.csi.node_server import NodeServer
from provisioner.csi.registration_server import RegistrationServer

log = logging.getLogger(__name__)

IDENTITY_SERVICE = "csi.v1.Identity"
NODE_SERVICE = "csi.v1.Node"
CONTROLLER_SERVICE = "csi.v1.Controller"
REGISTRATION_SERVICE = "pluginregistration.Registration"


RequestT = TypeVar("RequestT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)


def _unary(
    name: str, behaviour: Callable[[RequestT], ResponseT], request_type: type[RequestT]
) -> grpc.RpcMethodHandler[RequestT, ResponseT]:
    def call(request: RequestT, context: grpc.ServicerContext) -> ResponseT:
        try:
            return behaviour(request)
        except CsiError as error:
            log.info("%s refused: %s: %s", name, error.code.name, error.message)
            context.abort(error.code, error.message)
        except OSError as error:
            log.exception("%s failed", name)
            context.abort(grpc.StatusCode.INTERNAL, f"{name}: {error}")

    def serialize(response: ResponseT) -> bytes:
        return response.SerializeToString()

    return grpc.unary_unary_rpc_method_handler(
        call, request_deserializer=request_type.FromString, response_serializer=serialize
    )


def identity_handler(server: IdentityServer) -> grpc.GenericRpcHandler:
    methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "GetPluginInfo": _unary(
            "GetPluginInfo", server.get_plugin_info, csi_pb2.GetPluginInfoRequest
        ),
        "GetPluginCapabilities": _unary(
            "GetPluginCapabilities",
            server.get_plugin_capabilities,
            csi_pb2.GetPluginCapabilitiesRequest,
        ),
        "Probe": _unary("Probe", server.probe, csi_pb2.ProbeRequest),
    }
    return grpc.method_handlers_generic_handler(IDENTITY_SERVICE, methods)


def node_handler(server: NodeServer) -> grpc.GenericRpcHandler:
    methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "NodeGetInfo": _unary("NodeGetInfo", server.node_get_info, csi_pb2.NodeGetInfoRequest),
        "NodeGetCapabilities": _unary(
            "NodeGetCapabilities",
            server.node_get_capabilities,
            csi_pb2.NodeGetCapabilitiesRequest,
        ),
        "NodePublishVolume": _unary(
            "NodePublishVolume", server.node_publish_volume, csi_pb2.NodePublishVolumeRequest
        ),
        "NodeUnpublishVolume": _unary(
            "NodeUnpublishVolume",
            server.node_unpublish_volume,
            csi_pb2.NodeUnpublishVolumeRequest,
        ),
        "NodeGetVolumeStats": _unary(
            "NodeGetVolumeStats", server.node_get_volume_stats, csi_pb2.NodeGetVolumeStatsRequest
        ),
    }
    return grpc.method_handlers_generic_handler(NODE_SERVICE, methods)


class ControllerService(Protocol):
    """The Controller calls the node plugin serves: capabilities and snapshots."""

    def controller_get_capabilities(
        self, request: csi_pb2.ControllerGetCapabilitiesRequest
    ) -> csi_pb2.ControllerGetCapabilitiesResponse: ...

    def create_snapshot(
        self, request: csi_pb2.CreateSnapshotRequest
    ) -> csi_pb2.CreateSnapshotResponse: ...

    def delete_snapshot(
        self, request: csi_pb2.DeleteSnapshotRequest
    ) -> csi_pb2.DeleteSnapshotResponse: ...

    def list_snapshots(
        self, request: csi_pb2.ListSnapshotsRequest
    ) -> csi_pb2.ListSnapshotsResponse: ...


def controller_handler(server: ControllerService) -> grpc.GenericRpcHandler:
    methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "ControllerGetCapabilities": _unary(
            "ControllerGetCapabilities",
            server.controller_get_capabilities,
            csi_pb2.ControllerGetCapabilitiesRequest,
        ),
        "CreateSnapshot": _unary(
            "CreateSnapshot", server.create_snapshot, csi_pb2.CreateSnapshotRequest
        ),
        "DeleteSnapshot": _unary(
            "DeleteSnapshot", server.delete_snapshot, csi_pb2.DeleteSnapshotRequest
        ),
        "ListSnapshots": _unary(
            "ListSnapshots", server.list_snapshots, csi_pb2.ListSnapshotsRequest
        ),
    }
    return grpc.method_handlers_generic_handler(CONTROLLER_SERVICE, methods)


def registration_handler(server: RegistrationServer) -> grpc.GenericRpcHandler:
    methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "GetInfo": _unary("GetInfo", server.get_info, pluginregistration_pb2.InfoRequest),
        "NotifyRegistrationStatus": _unary(
            "NotifyRegistrationStatus",
            server.notify_registration_status,
            pluginregistration_pb2.RegistrationStatus,
        ),
    }
    return grpc.method_handlers_generic_handler(REGISTRATION_SERVICE, methods)
