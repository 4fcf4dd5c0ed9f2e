"""What the controller hands a node plugin through a VolumeSnapshotContent of our driver, and
how each side reads it: pure, shared by the controller (which admits a content and writes its
setup, or its removal permit) and the node plugin (which takes, reports or removes the
snapshot on its own node).

The controller admits a content (the source is our CSI volume, its base path has room) with one
PATCH: the label NODE_LABEL (the source's node, as `node_label_value` gives it, so each node
plugin watches only its own node's contents), the common controller's BEING_CREATED_ANNOTATION,
and SNAPSHOT_SETUP_ANNOTATION (`SnapshotSetup`). The node makes the snapshot in the snapshot
area of the source's base path (`snapshot_path`), then sets the content's status (its handle,
`snapshot_handle`) and lifts BEING_CREATED_ANNOTATION.

A handle is never a path: `parse_snapshot_handle` reads only a node key and an id, and the node
accepts an id only where its own record says it made that snapshot (a pre-provisioned content
names a snapshot by handle alone).

Removal stays the controller's decision, by the one gate (`decide_removal`, kind
SNAPSHOT_DELETE): the permit travels as SNAPSHOT_REMOVAL_PERMIT_ANNOTATION (`SnapshotRemoval`);
the node confirms it on a fresh read of the content, removes the snapshot after its owner check
(`snapshot_owner`) and marks the content SNAPSHOT_REMOVED_ANNOTATION. Tenants cannot write
contents (cluster-scoped, admins and controllers only); a node plugin may patch only its own
node's contents, and only these annotations and the status.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import asdict, dataclass

from provisioner.objects.node_handoff import (
    HandoffError,
    count_field,
    flag_field,
    node_label_value,
    read_object,
    text_field,
)

SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
"""The API group of VolumeSnapshots, their contents and classes (external-snapshotter v8)."""

SNAPSHOT_KIND = "VolumeSnapshot"
"""The kind a restore's claim names as its data source (of SNAPSHOT_GROUP)."""

SNAPSHOT_SETUP_ANNOTATION = "local-path-storage.io/snapshot-setup"
"""On an admitted content: the `SnapshotSetup` JSON the node takes the snapshot from."""

SNAPSHOT_REMOVAL_PERMIT_ANNOTATION = "local-path-storage.io/snapshot-removal-permit"
"""On a content being deleted with policy Delete: the `SnapshotRemoval` JSON, the gate's permit."""

SNAPSHOT_REMOVED_ANNOTATION = "local-path-storage.io/snapshot-removed"
"""Set "true" by the node once the snapshot's data is gone: the controller lets the content go."""

BEING_CREATED_ANNOTATION = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
"""The common controller's: while set, it neither deletes the content nor gives up on it."""

BEING_DELETED_ANNOTATION = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
"""The common controller's: set on a content whose snapshot is being deleted."""

SNAPSHOT_AREA = ".local-path-storage-snapshots"
"""The directory in a base path that holds its snapshots (0700, never mounted into a pod)."""

_ID = re.compile(r"^[0-9a-f]{32}$")
_HANDLE = re.compile(r"^v1/(?P<node>[A-Za-z0-9._-]{1,63})/(?P<id>[0-9a-f]{32})$")


def snapshot_id(name: str) -> str:
    """The snapshot's id: 32 hex digits of sha256 of the content's name (a CSI CreateSnapshot's
    request name), so every retry of one content names one snapshot."""
    return hashlib.sha256(name.encode()).hexdigest()[:32]


def snapshot_handle(node_name: str, snapshot: str) -> str:
    """The content's `snapshotHandle` for snapshot id `snapshot` on `node_name` (100 characters
    at most: CSI allows 128)."""
    if not _ID.match(snapshot):
        raise ValueError(f"not a snapshot id: {snapshot!r}")
    return f"v1/{node_label_value(node_name)}/{snapshot}"


def parse_snapshot_handle(handle: str) -> tuple[str, str] | None:
    """The node key and the id a handle names, or None for anything that is not one of ours."""
    found = _HANDLE.match(handle)
    if found is None:
        return None
    return found.group("node"), found.group("id")


def snapshot_path(base_path: str, snapshot: str) -> str:
    """Where snapshot `snapshot` lives in `base_path`'s snapshot area."""
    if not _ID.match(snapshot):
        raise ValueError(f"not a snapshot id: {snapshot!r}")
    return posixpath.join(base_path, SNAPSHOT_AREA, snapshot)


def snapshot_owner(snapshot: str) -> str:
    """The owner a snapshot's marker names (a volume's names its PV; the two never collide:
    a PV's name has no colon)."""
    return f"snapshot:{snapshot}"


@dataclass(frozen=True)
class SnapshotSetup:
    """What the node plugin needs to take (or, `imported`, to recognise) a snapshot: the source
    volume it copies and where, and the snapshot's own place in the source's base path."""

    snapshot_id: str
    source_volume: str
    source_path: str
    base_path: str
    path: str
    size_bytes: int
    volume_mode: str
    imported: bool = False
    """A pre-provisioned content: the node only confirms a snapshot it already holds."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> SnapshotSetup:
        fields = read_object(text, SNAPSHOT_SETUP_ANNOTATION)
        try:
            setup = SnapshotSetup(
                snapshot_id=text_field(fields, "snapshot_id"),
                source_volume=text_field(fields, "source_volume", ""),
                source_path=text_field(fields, "source_path", ""),
                base_path=text_field(fields, "base_path"),
                path=text_field(fields, "path"),
                size_bytes=count_field(fields, "size_bytes"),
                volume_mode=text_field(fields, "volume_mode", "Filesystem"),
                imported=flag_field(fields, "imported"),
            )
        except KeyError as missing:
            raise HandoffError(f"{SNAPSHOT_SETUP_ANNOTATION} has no {missing.args[0]}") from None
        if not _ID.match(setup.snapshot_id):
            raise HandoffError(f"{SNAPSHOT_SETUP_ANNOTATION}'s snapshot_id is not an id")
        if setup.path != snapshot_path(setup.base_path, setup.snapshot_id):
            raise HandoffError(
                f"{SNAPSHOT_SETUP_ANNOTATION}'s path is not its id's place in its base path"
            )
        if not setup.imported and not (setup.source_volume and setup.source_path):
            raise HandoffError(f"{SNAPSHOT_SETUP_ANNOTATION} names no source volume")
        return setup


@dataclass(frozen=True)
class SnapshotRemoval:
    """The gate's permit for a snapshot's data, as the node receives it: the content it follows
    (name and UID: a content re-made under the same name is another), the snapshot and its
    place. The node removes only a snapshot whose marker names `snapshot_owner(snapshot_id)`."""

    content_name: str
    content_uid: str
    snapshot_id: str
    path: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> SnapshotRemoval:
        fields = read_object(text, SNAPSHOT_REMOVAL_PERMIT_ANNOTATION)
        try:
            return SnapshotRemoval(
                content_name=text_field(fields, "content_name"),
                content_uid=text_field(fields, "content_uid"),
                snapshot_id=text_field(fields, "snapshot_id"),
                path=text_field(fields, "path"),
            )
        except KeyError as missing:
            raise HandoffError(
                f"{SNAPSHOT_REMOVAL_PERMIT_ANNOTATION} has no {missing.args[0]}"
            ) from None


def snapshot_removal_refusal(
    removal: SnapshotRemoval, setup: SnapshotSetup, *, content_name: str, content_uid: str
) -> str | None:
    """None when the node may act on `removal`, found on the content named `content_name` (UID
    `content_uid`) whose setup is `setup`; else why not."""
    if removal.content_name != content_name or removal.content_uid != content_uid:
        return f"the permit follows content {removal.content_name}, not {content_name}"
    if removal.snapshot_id != setup.snapshot_id:
        return f"the permit names snapshot {removal.snapshot_id}, not {setup.snapshot_id}"
    if removal.path != setup.path:
        return f"the permit covers {removal.path}, not the snapshot's place {setup.path}"
    return None
