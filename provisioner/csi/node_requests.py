"""The Node service's requests checked against the spec before anything is done: pure.

Each returns what the call needs or raises CsiError with the code the spec gives the case
(INVALID_ARGUMENT for a missing field, FAILED_PRECONDITION for a capability this driver does not
serve).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from provisioner.configuration.config import BasePathRules
from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2
from provisioner.csi.node_paths import VolumeDirectory, volume_directory

_Mode = csi_pb2.VolumeCapability.AccessMode


@dataclass(frozen=True)
class Publish:
    volume_id: str
    target: str
    directory: VolumeDirectory
    read_only: bool
    single_writer: bool = False
    """ReadWriteOncePod (SINGLE_NODE_SINGLE_WRITER): published to one target at a time."""
    block: bool = False
    """Access type block: the volume's loop device is bind-mounted on a file at the target."""


def _required(value: str, field: str) -> str:
    if not value:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, f"{field} is required (CSI spec)")
    return value


def publish_request(
    request: csi_pb2.NodePublishVolumeRequest,
    base_paths: Mapping[str, BasePathRules],
    node: str,
) -> Publish:
    volume_id = _required(request.volume_id, "volume_id")
    target = _required(request.target_path, "target_path")
    if not request.HasField("volume_capability"):
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "volume_capability is required (CSI spec)")
    capability = request.volume_capability
    block = capability.HasField("block")
    if not block and not capability.HasField("mount"):
        raise CsiError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "volume_capability has no access type: it must be mount or block (CSI spec)",
        )
    if not block and capability.mount.mount_flags:
        raise CsiError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"mount options {list(capability.mount.mount_flags)} do not apply to a directory"
            " this driver bind-mounts: remove mountOptions from the StorageClass or PV",
        )
    if not _is_absolute(target):
        raise CsiError(
            grpc.StatusCode.INVALID_ARGUMENT, f"target_path {target!r} must be an absolute path"
        )
    directory = volume_directory(request.volume_context, base_paths, node)
    single_writer = capability.access_mode.mode == _Mode.SINGLE_NODE_SINGLE_WRITER
    return Publish(
        volume_id,
        target,
        directory,
        read_only=request.readonly,
        single_writer=single_writer,
        block=block,
    )


def unpublish_request(request: csi_pb2.NodeUnpublishVolumeRequest) -> str:
    """The target path to undo."""
    _required(request.volume_id, "volume_id")
    target = _required(request.target_path, "target_path")
    if not _is_absolute(target):
        raise CsiError(
            grpc.StatusCode.INVALID_ARGUMENT, f"target_path {target!r} must be an absolute path"
        )
    return target


def stats_request(request: csi_pb2.NodeGetVolumeStatsRequest) -> str:
    """The path the volume is published at; a relative one cannot be this driver's volume."""
    _required(request.volume_id, "volume_id")
    path = _required(request.volume_path, "volume_path")
    if not _is_absolute(path):
        raise CsiError(
            grpc.StatusCode.NOT_FOUND,
            f"no volume {request.volume_id} is published at {path!r}: not an absolute path",
        )
    return path


def _is_absolute(path: str) -> bool:
    return path.startswith("/") and "\0" not in path
