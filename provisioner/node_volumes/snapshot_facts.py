"""What the node plugin reads of a VolumeSnapshotContent labelled for its node, what it is to do
with it, and the bodies of the PATCHes that report it: pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    BEING_DELETED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
)

SnapshotWork = Literal["take", "remove", "none"]


@dataclass(frozen=True)
class ContentFacts:
    """A content as the node plugin's watch keeps it (the informer's record)."""

    name: str
    uid: str
    driver: str
    setup: str
    """SNAPSHOT_SETUP_ANNOTATION's text ("" when none)."""
    permit: str
    """SNAPSHOT_REMOVAL_PERMIT_ANNOTATION's text ("" when none)."""
    being_created: bool
    removed: bool
    handle: str
    """status.snapshotHandle ("" when none)."""
    ready: bool
    deleting: bool = False
    """Its VolumeSnapshot (or itself) is being deleted: nothing new is taken for it."""


def content_facts(content: Mapping[str, Any]) -> ContentFacts:
    metadata = content.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    spec = content.get("spec") or {}
    status = content.get("status") or {}
    return ContentFacts(
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        driver=str(spec.get("driver", "")),
        setup=str(annotations.get(SNAPSHOT_SETUP_ANNOTATION, "")),
        permit=str(annotations.get(SNAPSHOT_REMOVAL_PERMIT_ANNOTATION, "")),
        being_created=BEING_CREATED_ANNOTATION in annotations,
        removed=annotations.get(SNAPSHOT_REMOVED_ANNOTATION) == "true",
        handle=str(status.get("snapshotHandle") or ""),
        ready=status.get("readyToUse") is True,
        deleting=bool(metadata.get("deletionTimestamp")) or BEING_DELETED_ANNOTATION in annotations,
    )


def snapshot_work(facts: ContentFacts, driver: str) -> SnapshotWork:
    """A content of another driver, marked removed, or without its setup needs nothing; one
    with the gate's permit is removed; one the controller admitted (being-created) or whose
    status is not ready yet (an import, a report whose answer was lost) is taken or confirmed."""
    if facts.driver != driver or facts.removed or not facts.setup:
        return "none"
    if facts.permit:
        return "remove"
    if facts.deleting:
        # Not taken now: a take would make data for a content on its way out. One taken
        # before is removed by the gate's permit, like any (the take and the removal share
        # the snapshot's lock).
        return "none"
    if facts.being_created or not facts.ready or not facts.handle:
        return "take"
    return "none"


def permit_staleness(seen: ContentFacts, current: ContentFacts | None) -> str | None:
    """Why the permit the watch showed is no longer the content's, from a fresh read (`current`,
    None: the content is gone); None when it still is."""
    if current is None:
        return "the content is gone"
    if current.uid != seen.uid:
        return "the content was replaced by another of the same name"
    if current.removed:
        return "the content is marked removed already"
    if current.permit != seen.permit:
        return "the content's permit changed"
    if current.setup != seen.setup:
        return "the content's setup changed"
    return None


def ready_status(handle: str, created_ns: int, size_bytes: int) -> dict[str, Any]:
    """The /status merge PATCH of a snapshot taken (the sidecar's fields; a later success
    clears an earlier error)."""
    status: dict[str, Any] = {
        "snapshotHandle": handle,
        "readyToUse": True,
        "creationTime": created_ns,
        "error": None,
    }
    if size_bytes > 0:
        status["restoreSize"] = size_bytes
    return {"status": status}


def error_status(message: str, at: str) -> dict[str, Any]:
    """The /status merge PATCH of a failure (`at`: RFC 3339): the common controller copies it
    onto the VolumeSnapshot."""
    return {"status": {"readyToUse": False, "error": {"time": at, "message": message}}}


def annotation_patch(uid: str, annotations: Mapping[str, str | None]) -> dict[str, Any]:
    """A metadata merge PATCH, made a precondition by the UID: it never changes a new content
    of the same name."""
    return {"metadata": {"uid": uid, "annotations": dict(annotations)}}
