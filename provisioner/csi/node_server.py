"""The CSI Node service: publish a volume's directory at the kubelet's target path, undo it,
and report the volume's usage and condition.

It keeps no state: what is published where is read back from the mount table on every call,
so a restarted plugin serves the unpublish of a mount its predecessor made. One lock orders the
calls that change mounts, so two calls for one target never interleave in this process.
"""

from __future__ import annotations

import os
import stat
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


class BlockDevices(Protocol):
    """The loop devices of this node's Block volumes (provisioner.node_volumes.block_volumes,
    under each volume's lock: the gRPC side keeps no loop state)."""

    def block_device(self, volume_id: str, path: str) -> str:
        """The "/dev/loopN" backed by the Block volume's file at `path`, attached if none is."""

    def block_usage(self, volume_id: str) -> tuple[str, int, int]:
        """(its device, "" if none is attached; its size; the bytes its file holds) of the
        Block volume `volume_id`; CsiError(NOT_FOUND) when it is no Block volume here."""


NO_BLOCK_DEVICES = (
    "block volumes are served only by a node plugin that manages its volumes"
    " (--manage-volumes): it attaches their loop devices"
)


class NodeServer:
    def __init__(
        self,
        node_name: str,
        base_paths: Mapping[str, BasePathRules],
        topology: Mapping[str, str],
        volume_setups: VolumeSetups | None = None,
        block_devices: BlockDevices | None = None,
    ) -> None:
        self.node_name = node_name
        self.base_paths = dict(base_paths)
        self.topology = dict(topology)
        self.volume_setups = volume_setups
        self.block_devices = block_devices
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
        if publish.block and self.block_devices is None:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION, NO_BLOCK_DEVICES)
        if self.volume_setups is not None:
            # Before the mount lock: a setup may take a while, and holds its volume's own lock.
            self.volume_setups.ensure_set_up(publish.volume_id, publish.directory.path)
        if self.block_devices is not None and publish.block:
            # Found by its file (or attached: after a reboot no device is left) each time.
            device = self.block_devices.block_device(publish.volume_id, publish.directory.path)
            self._publish_device(publish, device)
            return csi_pb2.NodePublishVolumeResponse()
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

    def _publish_device(self, publish: Publish, device: str) -> None:
        """The device node bind-mounted on a file at the target; a target that has it already
        (stat's st_rdev is the device's), read-only as asked, is success."""
        rdev = Path(device).stat().st_rdev
        with self._mounting:
            entries = mounts.read_mount_table()
            existing = mount_at(entries, os.path.realpath(publish.target))
            if existing is not None:
                shown = Path(publish.target).stat()
                if not stat.S_ISBLK(shown.st_mode) or shown.st_rdev != rdev:
                    raise CsiError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"{publish.target} already has something else mounted, not {device}"
                        f" (volume {publish.volume_id})",
                    )
                if existing.read_only != publish.read_only:
                    mode = "read-only" if existing.read_only else "read-write"
                    raise CsiError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"volume {publish.volume_id} is already published {mode} at"
                        f" {publish.target}",
                    )
                return
            if publish.single_writer:
                others = mounts.device_mounts(entries, device)
                if others:
                    raise CsiError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"volume {publish.volume_id} is ReadWriteOncePod and published to"
                        f" another pod already (at {others[0]}): it is held to one pod at a time",
                    )
            mounts.make_target_file(publish.target)
            mounts.bind_device(device, publish.target, read_only=publish.read_only)

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
            # A directory for a mount publish, a file for a block one.
            mounts.remove_target(target)
        return csi_pb2.NodeUnpublishVolumeResponse()

    def node_get_volume_stats(
        self, request: csi_pb2.NodeGetVolumeStatsRequest
    ) -> csi_pb2.NodeGetVolumeStatsResponse:
        path = stats_request(request)
        if self.block_devices is not None and _is_block_device(path):
            return self._device_stats(request.volume_id, path)
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

    def _device_stats(self, volume_id: str, path: str) -> csi_pb2.NodeGetVolumeStatsResponse:
        """A Block volume's: its size, and what its sparse file holds on the disk. No inodes
        (a device has none). The request has no volume context: the volume manager finds the
        volume by its id, and its device must be the one at `path`."""
        assert self.block_devices is not None
        device, size, used = self.block_devices.block_usage(volume_id)
        if not device or Path(device).stat().st_rdev != Path(path).stat().st_rdev:
            raise CsiError(
                grpc.StatusCode.NOT_FOUND,
                f"no volume {volume_id} of this driver is published at {path}",
            )
        return csi_pb2.NodeGetVolumeStatsResponse(
            usage=[
                csi_pb2.VolumeUsage(
                    unit=_Unit.BYTES, total=size, used=used, available=max(size - used, 0)
                )
            ],
            volume_condition=csi_pb2.VolumeCondition(abnormal=False, message=""),
        )


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(Path(path).stat().st_mode)
    except OSError:
        return False


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
