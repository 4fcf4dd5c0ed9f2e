"""What the controller does with a VolumeSnapshotContent of our driver: admit it (its source is
a CSI volume of ours with room for the snapshot in its base path's budget), refuse it in one
plain sentence, or, once it is being deleted, ask the gate for its data's removal and let the
content go. Pure: the shell (provisioning/snapshots.py) reads the content, the source PV, the
class's rules and the path book, and carries the decision out.

The common snapshot controller (external-snapshotter v8) makes a content per dynamic
VolumeSnapshot (`spec.source.volumeHandle`: our PV's name) or an admin makes one by handle
(`spec.source.snapshotHandle`). We do the csi-snapshotter sidecar's part of it, split as the
volumes' is: the controller decides and writes (`SnapshotSetup`, the removal permit, the
finalizer), the node plugin takes, reports and removes the snapshot on its own node.

A snapshot costs its source's base path its restoreSize (the source's capacity), as a volume
costs its request: budgets are promises, not measurements. Its entry in the path book
(`snapshot_book_key`) is reserved when its setup is decided and goes with the content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules
from provisioner.objects.node_handoff import NODE_LABEL, HandoffError, node_label_value
from provisioner.objects.quantities import format_bytes
from provisioner.objects.records import VolumeRecord
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    BEING_DELETED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotSetup,
    parse_snapshot_handle,
    snapshot_id,
    snapshot_path,
)
from provisioner.provisioning.annotations import PROVISIONED_BY
from provisioner.provisioning.paths import (
    LIVE,
    PROVISIONING,
    PathEntry,
    PathRoom,
    committed_bytes,
    is_strictly_inside,
)
from provisioner.provisioning.volume_facts import NodeListing, volume_node_name, volume_size_bytes

CONTENT_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
"""The finalizer the common controller puts on a bound content; the csi-snapshotter sidecar
takes it off once the snapshot's data is dealt with (deleted, or kept for Retain), and so do we
in its place."""

SNAPSHOT_BOOK_PREFIX = "snapshot:"
"""Book keys of snapshots: a PV's name has no colon, so none collides with a volume's."""


def snapshot_book_key(content_name: str) -> str:
    """The path book's key of a content's snapshot."""
    return f"{SNAPSHOT_BOOK_PREFIX}{content_name}"


@dataclass(frozen=True)
class ContentFacts:
    """The fields of a VolumeSnapshotContent the decisions read."""

    name: str
    uid: str
    driver: str
    deletion_policy: str
    volume_handle: str | None
    """spec.source.volumeHandle: a dynamic snapshot's source (our PV's name)."""
    snapshot_handle: str | None
    """spec.source.snapshotHandle: a pre-provisioned content's handle."""
    source_volume_mode: str = "Filesystem"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    being_deleted: bool = False
    error_message: str | None = None
    """status.error.message, as last written (by us or the node)."""
    resource_version: str = ""
    """As read: the admission's PATCH is sent on this version only (a stale cache must not
    mark a content being-created again after its node lifted that)."""

    @property
    def pre_provisioned(self) -> bool:
        return self.snapshot_handle is not None

    def setup(self) -> SnapshotSetup | None:
        """The setup we wrote; None when there is none or it does not read (never ours)."""
        text = self.annotations.get(SNAPSHOT_SETUP_ANNOTATION)
        if text is None:
            return None
        try:
            return SnapshotSetup.from_json(text)
        except HandoffError:
            return None


def content_facts(obj: Mapping[str, Any]) -> ContentFacts:
    """A content's facts from its JSON (as listed or watched)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    source = spec.get("source") or {}
    status = obj.get("status") or {}
    error = status.get("error") or {}
    return ContentFacts(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        driver=str(spec.get("driver", "")),
        deletion_policy=str(spec.get("deletionPolicy", "")),
        volume_handle=_text_or_none(source.get("volumeHandle")),
        snapshot_handle=_text_or_none(source.get("snapshotHandle")),
        source_volume_mode=str(spec.get("sourceVolumeMode") or "Filesystem"),
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        being_deleted=meta.get("deletionTimestamp") is not None,
        error_message=_text_or_none(error.get("message")),
        resource_version=str(meta.get("resourceVersion", "")),
    )


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# -- the decisions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmitSnapshot:
    """Write the label, being-created and the setup (one PATCH); the book holds the entry from
    the moment this is decided (`entry`, None for an import: its size and place are the
    node's to confirm)."""

    node_key: str
    """The NODE_LABEL value: the node plugin that takes (or confirms) the snapshot."""
    setup: SnapshotSetup
    entry: PathEntry | None


@dataclass(frozen=True)
class RefuseSnapshot:
    """status.error (readyToUse false) and a Warning on the content."""

    message: str
    lasting: bool = True
    """False: it may pass later (room freed, the source bound): the key is retried."""


@dataclass(frozen=True)
class AskRemovalPermit:
    """Policy Delete: the gate decides on the snapshot's data (kind SNAPSHOT_DELETE)."""

    setup: SnapshotSetup
    expected_id: str
    """The id the content itself names (its name's, or its handle's): the setup must agree."""


@dataclass(frozen=True)
class LetGoOfContent:
    """Take CONTENT_FINALIZER off: the data is gone, kept (Retain) or was never made."""

    why: str


@dataclass(frozen=True)
class NoSnapshotAction:
    why: str


SnapshotAction = (
    AdmitSnapshot | RefuseSnapshot | AskRemovalPermit | LetGoOfContent | NoSnapshotAction
)


def decide_content(
    content: ContentFacts,
    source: VolumeRecord | None,
    rules: ClassRules | None,
    book_entries: Sequence[PathEntry],
    *,
    driver: str,
    provisioner_name: str,
    nodes: NodeListing,
    import_base_paths: Callable[[str], Iterable[str]] = lambda node: (),
) -> SnapshotAction:
    """What a content calls for. `source` is the PV its volumeHandle names (None: none),
    `rules` that PV's class's rules, `book_entries` the path book under its lock, `nodes` the
    cluster's (an import's handle must name one of them), `import_base_paths` the base paths
    our CSI classes have on a node (where an import's snapshot can be)."""
    if content.driver != driver:
        return NoSnapshotAction(f"driver {content.driver} is not ours")
    if content.being_deleted:
        return decide_content_deletion(content)
    if SNAPSHOT_SETUP_ANNOTATION in content.annotations:
        return NoSnapshotAction("admitted")
    if content.pre_provisioned:
        return decide_import(content, nodes, import_base_paths)
    return decide_snapshot(content, source, rules, book_entries, provisioner_name=provisioner_name)


def decide_import(
    content: ContentFacts,
    nodes: NodeListing,
    import_base_paths: Callable[[str], Iterable[str]],
) -> AdmitSnapshot | RefuseSnapshot:
    """A pre-provisioned content: its handle names a node and an id, never a path; the node
    confirms it holds that snapshot (its own record, at the setup's place), else it writes the
    error. A node key no node carries would leave the content waiting for nobody: refused until
    one does. The snapshot's place is its id's in the one base path our CSI classes have on
    that node; with several, the handle does not say which: refused, naming them."""
    handle = content.snapshot_handle or ""
    parsed = parse_snapshot_handle(handle)
    if parsed is None:
        return RefuseSnapshot(
            f"snapshot handle {handle[:140]!r} is not one of this provisioner's"
            " (v1/<node>/<32 hex digits>)"
        )
    node_key, found_id = parsed
    node = node_of_key(node_key, nodes)
    if node is None:
        return RefuseSnapshot(
            f"snapshot handle {handle!r} names node {node_key}, which is not a node of this"
            " cluster",
            lasting=False,
        )
    candidates = sorted(set(import_base_paths(node)))
    if len(candidates) != 1:
        where = (
            f"has the base paths {', '.join(candidates)}: the handle does not say which holds it"
            if candidates
            else "has no base path of a CSI class of this provisioner"
        )
        return RefuseSnapshot(f"snapshot handle {handle!r} names node {node}, which {where}")
    base = candidates[0]
    setup = SnapshotSetup(
        snapshot_id=found_id,
        source_volume="",
        source_path="",
        base_path=base,
        path=snapshot_path(base, found_id),
        size_bytes=0,
        volume_mode=content.source_volume_mode,
        imported=True,
    )
    return AdmitSnapshot(node_key=node_key, setup=setup, entry=None)


def decide_snapshot(
    content: ContentFacts,
    source: VolumeRecord | None,
    rules: ClassRules | None,
    book_entries: Sequence[PathEntry],
    *,
    provisioner_name: str,
) -> AdmitSnapshot | RefuseSnapshot:
    """A dynamic snapshot of `source`: ours, CSI, Bound, not being deleted, in a base path of
    its node whose budget has room for the source's capacity beside everything the book
    holds there (snapshots included)."""
    name = content.volume_handle or ""
    if source is None:
        return RefuseSnapshot(f"PV {name} does not exist", lasting=False)
    if source.annotations.get(PROVISIONED_BY) != provisioner_name or rules is None:
        return RefuseSnapshot(f"PV {name} is not a volume of this provisioner")
    if source.volume_type != CSI_VOLUME_TYPE or source.path is None:
        return RefuseSnapshot(
            f"PV {name} is not a CSI volume: only volumes of a class with volumeType csi can"
            " be snapshotted"
        )
    if source.being_deleted:
        return RefuseSnapshot(f"PV {name} is being deleted")
    if source.phase != "Bound":
        return RefuseSnapshot(
            f"PV {name} is {source.phase or 'not yet Bound'}, not Bound", lasting=False
        )
    node = volume_node_name(source)
    if not node:
        return RefuseSnapshot(f"PV {name} names no node")
    capacities = rules.capacities_on(node)
    base = next((b for b in rules.base_paths_on(node) if is_strictly_inside(source.path, b)), None)
    if base is None:
        return RefuseSnapshot(
            f"PV {name}'s directory {source.path} is in no base path its class has on node {node}"
        )
    size = volume_size_bytes(source)
    entry_name = snapshot_book_key(content.name)
    others = [e for e in book_entries if e.volume_name != entry_name]
    room = PathRoom(base, capacities.get(base), committed_bytes(others, node, [base])[base])
    if not room.fits(size):
        budget = room.capacity or 0
        return RefuseSnapshot(
            f"no room: base path {base} on node {node} has {format_bytes(room.free)} of its"
            f" {format_bytes(budget)} budget left, the snapshot needs {format_bytes(size)}",
            lasting=False,
        )
    found_id = snapshot_id(content.name)
    setup = SnapshotSetup(
        snapshot_id=found_id,
        source_volume=source.name,
        source_path=source.path,
        base_path=base,
        path=snapshot_path(base, found_id),
        size_bytes=size,
        volume_mode=source.volume_mode,
    )
    entry = PathEntry(entry_name, node, setup.path, PROVISIONING, size)
    return AdmitSnapshot(node_key=node_label_value(node), setup=setup, entry=entry)


def decide_content_deletion(content: ContentFacts) -> SnapshotAction:
    """A content being deleted, as the sidecar decides it: once its VolumeSnapshot is being
    deleted (or, pre-provisioned, whatever bound it), and never while the node still makes it.
    Retain keeps the data; Delete needs the gate's permit and the node's word it is gone."""
    if CONTENT_FINALIZER not in content.finalizers:
        return NoSnapshotAction("no finalizer of the sidecar's part left")
    if BEING_CREATED_ANNOTATION in content.annotations:
        return NoSnapshotAction("the node is still making it")
    if BEING_DELETED_ANNOTATION not in content.annotations and not content.pre_provisioned:
        return NoSnapshotAction("its VolumeSnapshot is not being deleted")
    setup = content.setup()
    if setup is None:
        return LetGoOfContent("no snapshot was made for it")
    if content.deletion_policy != "Delete":
        return LetGoOfContent(f"deletionPolicy {content.deletion_policy}: the data is kept")
    if content.annotations.get(SNAPSHOT_REMOVED_ANNOTATION) == "true":
        return LetGoOfContent("its node removed the snapshot")
    if SNAPSHOT_REMOVAL_PERMIT_ANNOTATION in content.annotations:
        return NoSnapshotAction("the permit is written: waiting for the node")
    return AskRemovalPermit(setup, content_snapshot_id(content))


def content_snapshot_id(content: ContentFacts) -> str:
    """The id a content names by itself: its handle's for an import, its name's otherwise."""
    if content.snapshot_handle is not None:
        parsed = parse_snapshot_handle(content.snapshot_handle)
        return parsed[1] if parsed is not None else ""
    return snapshot_id(content.name)


def snapshot_entry(content: ContentFacts, node: str) -> PathEntry | None:
    """The book's entry for an admitted content, from its setup (as the informer shows it);
    None for an import or a content with no setup that reads."""
    setup = content.setup()
    if setup is None or setup.imported:
        return None
    return PathEntry(snapshot_book_key(content.name), node, setup.path, LIVE, setup.size_bytes)


def content_node(content: ContentFacts, nodes: NodeListing) -> str | None:
    """The node whose NODE_LABEL value the content carries; None when no node carries it."""
    value = content.labels.get(NODE_LABEL)
    return None if value is None else node_of_key(value, nodes)


def node_of_key(value: str, nodes: NodeListing) -> str | None:
    """The node a NODE_LABEL value names: the node of that name when there is one (the value is
    the name itself for nearly every node), else the one whose hashed value it is
    (`node_label_value`); None when no node carries it."""
    names = [name for name, _ in nodes.items()]
    if value in names:
        return value
    return next((name for name in names if node_label_value(name) == value), None)
