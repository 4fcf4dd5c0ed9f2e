"""The CSI Controller's snapshot calls, as thin wrappers around the node's SnapshotService (the
code the content watch runs): ControllerGetCapabilities, CreateSnapshot, DeleteSnapshot and
ListSnapshots (design 39 §1, "csi-sanity").

A request never names a path: the source is looked up by volume id (`SourceVolumes`: in a
cluster this node's PVs, whose setups the controller wrote), and a removal needs the gate's
permit (`SnapshotPermits`: in a cluster the permit on the snapshot's content). Without one
DeleteSnapshot answers FAILED_PRECONDITION: the gate stays the one place that decides a removal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2
from provisioner.node_volumes.snapshot_records import SnapshotRecord
from provisioner.node_volumes.snapshot_service import SnapshotOutcome, SnapshotService
from provisioner.objects.node_handoff import node_label_value
from provisioner.objects.snapshot_handoff import (
    SnapshotRemoval,
    SnapshotSetup,
    parse_snapshot_handle,
    snapshot_handle,
    snapshot_id,
    snapshot_path,
)

_Rpc = csi_pb2.ControllerServiceCapability.RPC


@dataclass(frozen=True)
class SourceVolume:
    volume_name: str
    path: str
    base_path: str
    size_bytes: int
    volume_mode: str = "Filesystem"


class SourceVolumes(Protocol):
    def find(self, volume_id: str) -> SourceVolume | None:
        """This node's volume of that id (never a path from the request), or None."""


@dataclass(frozen=True)
class SnapshotPermit:
    """The gate's permit for a snapshot, as found on its content, and how to confirm it afresh."""

    setup: SnapshotSetup
    removal: SnapshotRemoval
    content_name: str
    content_uid: str
    confirm: Callable[[], str | None]


class SnapshotPermits(Protocol):
    def for_snapshot(self, snapshot: str) -> SnapshotPermit | None:
        """The permit to remove snapshot `snapshot`, or None when the gate gave none."""


NO_PERMIT = (
    "deleting a snapshot needs the provisioner's permit on its VolumeSnapshotContent: delete"
    " the VolumeSnapshot (or its content) and the provisioner removes it"
)


class SnapshotRpcs:
    def __init__(
        self, service: SnapshotService, sources: SourceVolumes, permits: SnapshotPermits
    ) -> None:
        self.service = service
        self.sources = sources
        self.permits = permits
        self.node_key = node_label_value(service.node_name)

    def controller_get_capabilities(
        self, _: csi_pb2.ControllerGetCapabilitiesRequest
    ) -> csi_pb2.ControllerGetCapabilitiesResponse:
        return csi_pb2.ControllerGetCapabilitiesResponse(
            capabilities=[
                csi_pb2.ControllerServiceCapability(rpc=_Rpc(type=kind))
                for kind in (_Rpc.CREATE_DELETE_SNAPSHOT, _Rpc.LIST_SNAPSHOTS)
            ]
        )

    def create_snapshot(
        self, request: csi_pb2.CreateSnapshotRequest
    ) -> csi_pb2.CreateSnapshotResponse:
        if not request.name:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "CreateSnapshot needs a name")
        if not request.source_volume_id:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "CreateSnapshot needs a source volume")
        sid = snapshot_id(request.name)
        existing = self.service.record(sid)
        if (
            existing is not None
            and existing.state != "removed"
            and existing.source_volume != request.source_volume_id
        ):
            raise CsiError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"snapshot {request.name} exists already, of volume {existing.source_volume}",
            )
        source = self.sources.find(request.source_volume_id)
        if source is None:
            raise CsiError(
                grpc.StatusCode.NOT_FOUND,
                f"volume {request.source_volume_id} is not a volume of this node",
            )
        setup = SnapshotSetup(
            snapshot_id=sid,
            source_volume=source.volume_name,
            source_path=source.path,
            base_path=source.base_path,
            path=snapshot_path(source.base_path, sid),
            size_bytes=source.size_bytes,
            volume_mode=source.volume_mode,
        )
        outcome = self.service.take(setup, "")
        _raise_unless_ok(outcome)
        assert outcome.record is not None
        return csi_pb2.CreateSnapshotResponse(snapshot=self._snapshot(outcome.record))

    def delete_snapshot(
        self, request: csi_pb2.DeleteSnapshotRequest
    ) -> csi_pb2.DeleteSnapshotResponse:
        if not request.snapshot_id:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "DeleteSnapshot needs a snapshot id")
        sid = self._own_id(request.snapshot_id)
        record = None if sid is None else self.service.record(sid)
        if sid is None or record is None or record.state == "removed":
            return csi_pb2.DeleteSnapshotResponse()  # none of ours: deleted, as far as we know
        permit = self.permits.for_snapshot(sid)
        if permit is None:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION, NO_PERMIT)
        outcome = self.service.remove(
            permit.setup,
            permit.removal,
            content_name=permit.content_name,
            content_uid=permit.content_uid,
            confirm=permit.confirm,
        )
        _raise_unless_ok(outcome)
        return csi_pb2.DeleteSnapshotResponse()

    def list_snapshots(
        self, request: csi_pb2.ListSnapshotsRequest
    ) -> csi_pb2.ListSnapshotsResponse:
        records = [record for record in self.service.records() if record.state == "ready"]
        if request.snapshot_id:
            sid = self._own_id(request.snapshot_id)
            records = [record for record in records if record.id == sid]
        if request.source_volume_id:
            records = [r for r in records if r.source_volume == request.source_volume_id]
        start = 0
        if request.starting_token:
            if not request.starting_token.isdigit() or int(request.starting_token) > len(records):
                raise CsiError(
                    grpc.StatusCode.ABORTED, f"starting_token {request.starting_token!r} is stale"
                )
            start = int(request.starting_token)
        end = len(records) if request.max_entries <= 0 else start + request.max_entries
        page = records[start:end]
        return csi_pb2.ListSnapshotsResponse(
            entries=[
                csi_pb2.ListSnapshotsResponse.Entry(snapshot=self._snapshot(record))
                for record in page
            ],
            next_token=str(end) if end < len(records) else "",
        )

    def _own_id(self, handle: str) -> str | None:
        parsed = parse_snapshot_handle(handle)
        if parsed is None or parsed[0] != self.node_key:
            return None
        return parsed[1]

    def _snapshot(self, record: SnapshotRecord) -> csi_pb2.Snapshot:
        created = Timestamp()
        created.FromNanoseconds(record.created_ns)
        return csi_pb2.Snapshot(
            size_bytes=record.size_bytes,
            snapshot_id=snapshot_handle(self.service.node_name, record.id),
            source_volume_id=record.source_volume,
            creation_time=created,
            ready_to_use=record.state == "ready",
        )


def _raise_unless_ok(outcome: SnapshotOutcome) -> None:
    kind = outcome.outcome.kind
    if kind in ("done", "already"):
        return
    if kind == "busy":
        raise CsiError(grpc.StatusCode.ABORTED, outcome.message)
    if kind == "refused":
        raise CsiError(grpc.StatusCode.FAILED_PRECONDITION, outcome.message)
    if "no space left" in outcome.message:
        raise CsiError(grpc.StatusCode.RESOURCE_EXHAUSTED, outcome.message)
    raise CsiError(grpc.StatusCode.INTERNAL, outcome.message)
