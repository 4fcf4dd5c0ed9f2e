"""The CSI Node service: publish a volume's directory at the kubelet's target path, undo it,
and report the volume's usage and condition.

It keeps no state: what is published where is read back from the mount table on every call,
so a restarted plugin serves the unpublish of a mount its predecessor made. One lock orders the
calls that change mounts, so two calls for one target never interleave in this process.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import grpc

from provisioner.configuration.config import BasePathRules
from provisioner.csi import mounts, volume_usage
from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2
from provisioner.csi.mount_table import MountEntry, mount_at, published_directory
from provisioner.csi.node_requests import Publish, publish_request, stats_request, unpublish_request
from provisioner.csi.volume_condition import VolumeFacts, condition_of

_Rpc = csi_pb2.NodeServiceCapability.RPC
_Unit = csi_pb2.VolumeUsage.Unit
MAX_UNMOUNTS = 8
"""Mounts stacked on one target that an unpublish takes off before it gives up."""


class VolumeSetups(Protocol):
    """What makes a volume's directory on this node (provisioner.node_volumes, which holds the
    Kubernetes client this package does without)."""

    def ensure_set_up(self, volume_id: str, path: str) -> None:
        """Returns once the volume's directory at `path` is set up; raises CsiError if not."""


class NodeServer:
    def __init__(
        self,
        node_name: str,
        base_paths: Mapping[str, BasePathRules],
        topology: Mapping[str, str],
        volume_setups: VolumeSetups | None = None,
    ) -> None:
        self.node_name = node_name
        self.base_paths = dict(base_paths)
        self.topology = dict(topology)
        self.volume_setups = volume_setups
        self._mounting = threading.Lock()

    def node_get_info(self, _: csi_pb2.NodeGetInfoRequest) -> csi_pb2.NodeGetInfoResponse:
        """The node ID is the node's name; the topology is the label the PVs' node affinity
        names, so the scheduler and the kubelet agree on where a volume lives."""
        return csi_pb2.NodeGetInfoResponse(
            node_id=self.node_name,
            accessible_topology=csi_pb2.Topology(segments=self.topology),
        )

    def node_get_capabilities(
        self, _: csi_pb2.NodeGetCapabilitiesRequest
    ) -> csi_pb2.NodeGetCapabilitiesResponse:
        return csi_pb2.NodeGetCapabilitiesResponse(
            capabilities=[
                csi_pb2.NodeServiceCapability(rpc=_Rpc(type=kind))
                for kind in (
                    _Rpc.GET_VOLUME_STATS,
                    _Rpc.VOLUME_CONDITION,
                    # The kubelet then asks SINGLE_NODE_SINGLE_WRITER for a ReadWriteOncePod
                    # claim, which publish holds to one target.
                    _Rpc.SINGLE_NODE_MULTI_WRITER,
                )
            ]
        )

    def node_publish_volume(
        self, request: csi_pb2.NodePublishVolumeRequest
    ) -> csi_pb2.NodePublishVolumeResponse:
        publish = publish_request(request, self.base_paths, self.node_name)
        if self.volume_setups is not None:
            # Before the mount lock: a setup may take a while, and holds its volume's own lock.
            self.volume_setups.ensure_set_up(publish.volume_id, publish.directory.path)
        with self._mounting:
            fd = mounts.open_volume_directory(publish.directory)
            try:
                entries = mounts.read_mount_table()
                target = os.path.realpath(publish.target)
                existing = mount_at(entries, target)
                if existing is not None:
                    _check_compatible(existing, fd, publish)
                else:
                    if publish.single_writer:
                        self._check_single_writer(entries, target, publish)
                    Path(publish.target).mkdir(parents=True, exist_ok=True)
                    mounts.bind_mount(fd, publish.target, read_only=publish.read_only)
            finally:
                os.close(fd)
        return csi_pb2.NodePublishVolumeResponse()

    def _check_single_writer(
        self, entries: list[MountEntry], target: str, publish: Publish
    ) -> None:
        """A ReadWriteOncePod volume published at another target (another pod's) is not
        published again: the spec's FAILED_PRECONDITION, which the kubelet shows as the second
        pod's FailedMount. Read from the mount table, so it holds across plugin restarts: any
        other mount of exactly this directory is a publish (a subPath mounts a directory below
        it, and the base path's own mount holds it, neither is the directory)."""
        wanted = (publish.directory.base_path, publish.directory.path)
        for entry in entries:
            if entry.mount_point == target:
                continue
            if published_directory(entries, entry, list(self.base_paths)) == wanted:
                raise CsiError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"volume {publish.volume_id} is ReadWriteOncePod and published to another"
                    f" pod already (at {entry.mount_point}): it is held to one pod at a time",
                )

    def node_unpublish_volume(
        self, request: csi_pb2.NodeUnpublishVolumeRequest
    ) -> csi_pb2.NodeUnpublishVolumeResponse:
        """Takes every mount off the target, then removes the directory publish made there;
        a target already gone is success (the spec's idempotency)."""
        target = unpublish_request(request)
        with self._mounting:
            for _ in range(MAX_UNMOUNTS):
                if mount_at(mounts.read_mount_table(), os.path.realpath(target)) is None:
                    break
                mounts.unmount(target)
            else:
                raise CsiError(
                    grpc.StatusCode.INTERNAL,
                    f"{target} still has mounts after {MAX_UNMOUNTS} unmounts: look at"
                    f" `findmnt {target}` on the node",
                )
            with contextlib.suppress(FileNotFoundError):
                Path(target).rmdir()
        return csi_pb2.NodeUnpublishVolumeResponse()

    def node_get_volume_stats(
        self, request: csi_pb2.NodeGetVolumeStatsRequest
    ) -> csi_pb2.NodeGetVolumeStatsResponse:
        path = stats_request(request)
        entries = mounts.read_mount_table()
        mounted = mount_at(entries, os.path.realpath(path))
        unmounted_disks = [
            base_path
            for base_path, rules in self.base_paths.items()
            if rules.mount_point and mount_at(entries, base_path) is None
        ]
        found = (
            None
            if mounted is None
            else published_directory(entries, mounted, list(self.base_paths), unmounted_disks)
        )
        if mounted is None or found is None:
            raise CsiError(
                grpc.StatusCode.NOT_FOUND,
                f"no volume {request.volume_id} of this driver is published at {path}",
            )
        base_path, directory = found
        space = volume_usage.filesystem_space(path)
        usage = volume_usage.directory_usage(path)
        # On btrfs with a limit the volume's size is its own, not its filesystem's: the
        # kubelet's numbers (and the condition's free space) are the qgroup's.
        limited = volume_usage.limited_usage(path)
        bytes_total, bytes_used, bytes_available = (
            (space.bytes_total, usage.bytes_used, space.bytes_available)
            if limited is None
            else (limited.limit, limited.used, limited.available(space))
        )
        condition = condition_of(
            VolumeFacts(
                directory=directory,
                base_path=base_path,
                directory_present=not mounted.root_deleted and _is_directory(directory),
                base_path_must_be_mount_point=self.base_paths[base_path].mount_point,
                base_path_is_mount_point=mount_at(entries, base_path) is not None,
                bytes_available=space.bytes_available,
                inodes_total=space.inodes_total,
                inodes_available=space.inodes_available,
            )
        )
        return csi_pb2.NodeGetVolumeStatsResponse(
            usage=[
                csi_pb2.VolumeUsage(
                    unit=_Unit.BYTES,
                    total=bytes_total,
                    used=bytes_used,
                    available=bytes_available,
                ),
                csi_pb2.VolumeUsage(
                    unit=_Unit.INODES,
                    total=space.inodes_total,
                    used=usage.inodes_used,
                    available=space.inodes_available,
                ),
            ],
            volume_condition=csi_pb2.VolumeCondition(
                abnormal=condition.abnormal, message=condition.message
            ),
        )


def _check_compatible(existing: MountEntry, fd: int, publish: Publish) -> None:
    """A target already mounted is success only when it is this directory, read-only as asked
    (the spec's idempotency); anything else is ALREADY_EXISTS."""
    if not mounts.same_directory(fd, publish.target):
        raise CsiError(
            grpc.StatusCode.ALREADY_EXISTS,
            f"{publish.target} already has another directory mounted, not {publish.directory.path}",
        )
    if existing.read_only != publish.read_only:
        mode = "read-only" if existing.read_only else "read-write"
        raise CsiError(
            grpc.StatusCode.ALREADY_EXISTS,
            f"volume {publish.volume_id} is already published {mode} at {publish.target}",
        )


def _is_directory(path: str) -> bool:
    directory = Path(path)
    return directory.is_dir() and not directory.is_symlink()
