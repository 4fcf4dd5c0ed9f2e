"""The node plugin's watch of its own node's VolumeSnapshotContents: it does the csi-snapshotter
sidecar's part, field for field, on the contents our controller admitted (design 39 §1).

It lists and watches only the contents labelled for this node (`node_selector`, the PVs' label).
On a content with a setup that is being created (or not reported ready yet): it takes the
snapshot (or confirms an imported one), PATCHes /status {snapshotHandle, readyToUse,
creationTime, restoreSize}, then lifts BEING_CREATED with a metadata PATCH. A failure PATCHes
status.error, emits a Warning on the content, and is retried with a per-content backoff. On the
gate's permit: a fresh read of the content (the permit must still be its), the removal under
the snapshot's lock after the owner check, then SNAPSHOT_REMOVED_ANNOTATION "true".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError, describe_api_error
from provisioner.kube.client import KubeClients, ObjectReference
from provisioner.node_volumes.node_watch import MERGE_PATCH, NodeWatch
from provisioner.node_volumes.snapshot_facts import (
    ContentFacts,
    annotation_patch,
    content_facts,
    error_status,
    permit_staleness,
    ready_status,
    snapshot_work,
)
from provisioner.node_volumes.snapshot_rpcs import SnapshotPermit, SourceVolume
from provisioner.node_volumes.snapshot_service import SnapshotOutcome, SnapshotService
from provisioner.node_volumes.volume_watch import NodeVolumes
from provisioner.objects.node_handoff import HandoffError, VolumeSetup
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    SNAPSHOT_GROUP,
    SNAPSHOT_REMOVED_ANNOTATION,
    SnapshotRemoval,
    SnapshotSetup,
    snapshot_handle,
    snapshot_removal_refusal,
)

log = logging.getLogger(__name__)

CONTENTS_PATH = f"/apis/{SNAPSHOT_GROUP}/v1/volumesnapshotcontents"


class NodeSnapshots(NodeWatch[ContentFacts]):
    def __init__(
        self,
        clients: KubeClients,
        service: SnapshotService,
        driver_name: str,
        *,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(
            "content",
            clients,
            CONTENTS_PATH,
            content_facts,
            driver_name=driver_name,
            node_name=service.node_name,
            base_delay=base_delay,
            max_delay=max_delay,
        )
        self.service = service
        self.now = now

    def process(self, name: str) -> bool:
        """Does what the content asks for; True when done (or nothing to do), False to retry."""
        facts = self.informer.get(name)
        if facts is None:
            return True
        work = snapshot_work(facts, self.driver_name)
        if work == "none":
            return True
        try:
            setup = SnapshotSetup.from_json(facts.setup)
            removal = SnapshotRemoval.from_json(facts.permit) if work == "remove" else None
        except HandoffError as error:
            # Only the controller writes these; a new version of the content re-enqueues it.
            self._warn(facts, "SnapshotHandoffInvalid", str(error))
            return True
        if removal is None:
            return self._take(facts, setup)
        outcome = self.service.remove(
            setup,
            removal,
            content_name=facts.name,
            content_uid=facts.uid,
            confirm=lambda: self._confirm(facts, setup, removal),
        )
        if not outcome.ok:
            return self._failed(facts, "SnapshotRemovalFailed", "remove", outcome)
        return self._patch(
            facts, annotation_patch(facts.uid, {SNAPSHOT_REMOVED_ANNOTATION: "true"})
        )

    def for_snapshot(self, snapshot: str) -> SnapshotPermit | None:
        """The gate's permit for snapshot `snapshot`, as its content carries it (for the CSI
        DeleteSnapshot call); None when no content of this node carries one."""
        for _, facts in self.informer.items():
            if not facts.permit or not facts.setup or facts.removed:
                continue
            try:
                setup = SnapshotSetup.from_json(facts.setup)
                removal = SnapshotRemoval.from_json(facts.permit)
            except HandoffError:
                continue
            if setup.snapshot_id == snapshot:
                return SnapshotPermit(
                    setup,
                    removal,
                    facts.name,
                    facts.uid,
                    functools.partial(self._confirm, facts, setup, removal),
                )
        return None

    def _take(self, facts: ContentFacts, setup: SnapshotSetup) -> bool:
        outcome = self.service.take(setup, facts.uid)
        record = outcome.record
        if not outcome.ok or record is None:
            if outcome.outcome.kind != "busy":
                self._patch(
                    facts, error_status(outcome.message, self.now().isoformat()), status=True
                )
                if facts.being_created:
                    # As the sidecar does after a final error: while being-created stays,
                    # the common controller never deletes the content, so a snapshot that
                    # cannot be taken could never be deleted either. Retries go on; a
                    # snapshot being deleted is not taken again (snapshot_work).
                    self._patch(
                        facts, annotation_patch(facts.uid, {BEING_CREATED_ANNOTATION: None})
                    )
            return self._failed(facts, "SnapshotCreationFailed", "take", outcome)
        handle = snapshot_handle(self.node_name, record.id)
        size = record.size_bytes or setup.size_bytes
        if not self._patch(facts, ready_status(handle, record.created_ns, size), status=True):
            return False
        if facts.being_created:
            # After the status: the common controller gives up on a content only once
            # being-created is gone, and then must find the handle there.
            return self._patch(facts, annotation_patch(facts.uid, {BEING_CREATED_ANNOTATION: None}))
        return True

    def _confirm(
        self, seen: ContentFacts, setup: SnapshotSetup, removal: SnapshotRemoval
    ) -> str | None:
        """A fresh read of the content, just before the snapshot goes: why the permit the watch
        showed is not current (or None)."""
        try:
            current: ContentFacts | None = content_facts(
                self.clients.request_json("GET", f"{CONTENTS_PATH}/{seen.name}")
            )
        except ApiError as error:
            if error.status != HTTPStatus.NOT_FOUND:
                return f"cannot read the content: {describe_api_error(error)}"
            current = None
        except HTTPError as error:
            return f"cannot read the content: {error}"
        stale = permit_staleness(seen, current)
        if stale is not None or current is None:
            return stale
        return snapshot_removal_refusal(
            removal, setup, content_name=current.name, content_uid=current.uid
        )

    def _patch(self, facts: ContentFacts, body: dict[str, Any], *, status: bool = False) -> bool:
        path = f"{CONTENTS_PATH}/{facts.name}" + ("/status" if status else "")
        try:
            self.clients.request_json("PATCH", path, body=body, content_type=MERGE_PATCH)
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return True
            log.warning("content %s: PATCH %s: %s", facts.name, path, describe_api_error(error))
            return False
        except HTTPError as error:
            log.warning("content %s: PATCH %s: %s", facts.name, path, error)
            return False
        return True

    def _failed(
        self, facts: ContentFacts, reason: str, action: str, outcome: SnapshotOutcome
    ) -> bool:
        if outcome.outcome.kind == "busy":
            log.info("content %s: %s", facts.name, outcome.message)
            return False
        self._warn(
            facts,
            reason,
            f"node {self.node_name} cannot {action} the snapshot: {outcome.message}",
        )
        return False

    def _warn(self, facts: ContentFacts, reason: str, message: str) -> None:
        log.warning("content %s: %s: %s", facts.name, reason, message)
        self.events.warning(
            ObjectReference(
                kind="VolumeSnapshotContent",
                name=facts.name,
                uid=facts.uid,
                api_version=f"{SNAPSHOT_GROUP}/v1",
            ),
            reason,
            message,
        )


class ClusterSourceVolumes:
    """A CSI CreateSnapshot's source, found among this node's PVs by volume id (the PV's
    volumeHandle): its path and base path from the setup the controller wrote, never from the
    request."""

    def __init__(self, volumes: NodeVolumes) -> None:
        self.volumes = volumes

    def find(self, volume_id: str) -> SourceVolume | None:
        for _, facts in self.volumes.informer.items():
            if facts.handle != volume_id or not facts.setup:
                continue
            try:
                setup = VolumeSetup.from_json(facts.setup)
            except HandoffError:
                return None
            if setup.path != facts.path:
                return None
            return SourceVolume(
                facts.name, setup.path, setup.base_path, setup.size_bytes, setup.volume_mode
            )
        return None
