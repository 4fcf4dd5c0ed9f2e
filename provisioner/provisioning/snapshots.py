"""The shell of the controller's part in snapshots (the decisions: snapshot_decisions.py): the
VolumeSnapshotContents informer, the book entries of admitted snapshots, and the writes that
carry a decision out: the admission PATCH (label, being-created, setup), a refusal on the
content's status with a Warning, the removal permit (asked of the gate through removals.py)
and the finalizer's removal.

The informer exists only where the snapshot API is served and ours to list
(`snapshot_api_served`, asked once at the start): a cluster without the CRDs has nothing to
watch, an installation without a CSI class has no rights on it, and an informer whose list
fails would never sync. Installing the CRDs (or a first CSI class) later takes a restart of
the provisioner.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from urllib3.exceptions import HTTPError

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import EventRecorder, KubeClients, ObjectReference
from provisioner.kube.informer import Informer, name_key
from provisioner.kube.object_decoding import DictObjects
from provisioner.objects.node_handoff import NODE_LABEL
from provisioner.objects.records import NodeRecord, VolumeRecord
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    SNAPSHOT_GROUP,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
)
from provisioner.provisioning.actions import ActionFailed
from provisioner.provisioning.paths import PathBook
from provisioner.provisioning.removal_gate import RemovalRefused, SnapshotProof
from provisioner.provisioning.removals import Removals
from provisioner.provisioning.snapshot_decisions import (
    CONTENT_FINALIZER,
    AdmitSnapshot,
    AskRemovalPermit,
    ContentFacts,
    LetGoOfContent,
    RefuseSnapshot,
    content_facts,
    content_node,
    decide_content,
    snapshot_book_key,
    snapshot_entry,
)
from provisioner.provisioning.volume_facts import NodeListing

log = logging.getLogger(__name__)

SNAPSHOT_API = f"/apis/{SNAPSHOT_GROUP}/v1"
CONTENTS_PATH = f"{SNAPSHOT_API}/volumesnapshotcontents"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def snapshot_api_served(clients: KubeClients) -> bool:
    """Whether the API server serves VolumeSnapshotContents (the snapshot CRDs are installed)
    and we may list them (our RBAC grants it with a CSI class). An answer other than yes,
    NotFound or Forbidden (the API unreachable at the start) counts as no, with a warning: the
    process runs on without snapshots rather than failing to start."""
    try:
        found = clients.request_json("GET", SNAPSHOT_API)
    except ApiError as error:
        if error.status != HTTPStatus.NOT_FOUND:
            log.warning("cannot tell whether the snapshot API is served (%s): not watched", error)
        else:
            log.info("snapshot API not served: VolumeSnapshotContents are not watched")
        return False
    except (HTTPError, OSError) as error:
        log.warning("cannot tell whether the snapshot API is served (%s): not watched", error)
        return False
    served = any(r.get("name") == "volumesnapshotcontents" for r in found.get("resources") or ())
    if not served:
        log.info("snapshot API without VolumeSnapshotContents: not watched")
        return False
    # Served, but ours to watch only where the installation grants it (a CSI class: the rights
    # come with it); an informer refused its list would never sync.
    try:
        clients.request_json("GET", CONTENTS_PATH, query={"limit": 1})
    except ApiError as error:
        if error.status in {HTTPStatus.FORBIDDEN, HTTPStatus.UNAUTHORIZED}:
            log.info("no rights on VolumeSnapshotContents (no CSI class): not watched")
        else:
            log.warning("cannot list VolumeSnapshotContents (%s): not watched", error)
        return False
    except (HTTPError, OSError) as error:
        log.warning("cannot list VolumeSnapshotContents (%s): not watched", error)
        return False
    log.info("snapshot API served: watching VolumeSnapshotContents")
    return True


def contents_informer(clients: KubeClients, *, driver: str, resync_period: float) -> Informer[Any]:
    """The informer over every VolumeSnapshotContent, keeping those of our driver (a field
    selector on spec.driver is not offered for custom resources)."""
    return Informer(
        "snapshot-contents",
        clients.list_function(CONTENTS_PATH),
        objects=DictObjects(),
        to_record=functools.partial(_our_content, driver=driver),
        key=name_key,
        resync_period=resync_period,
    )


def _our_content(obj: dict[str, Any], *, driver: str) -> ContentFacts | None:
    facts = content_facts(obj)
    return facts if facts.driver == driver else None


def needs_look(content: ContentFacts) -> bool:
    """Cheap filter on the informer's thread: a content not yet admitted (or refused, to try
    again), or one being deleted."""
    return content.being_deleted or SNAPSHOT_SETUP_ANNOTATION not in content.annotations


def content_reference(content: ContentFacts) -> ObjectReference:
    return ObjectReference(
        kind="VolumeSnapshotContent",
        name=content.name,
        uid=content.uid,
        api_version=f"{SNAPSHOT_GROUP}/v1",
    )


class SnapshotContents:
    """Admits, refuses and lets go of our driver's VolumeSnapshotContents; keeps their entries
    in the path book (under its lock), so budgets and published capacity count snapshots."""

    def __init__(
        self,
        clients: KubeClients,
        recorder: EventRecorder,
        removals: Removals,
        *,
        contents: Informer[ContentFacts],
        volumes: Informer[VolumeRecord],
        nodes: Informer[NodeRecord],
        book: PathBook,
        book_lock: threading.Lock,
        rules_of: Callable[[str], ClassRules | None],
        csi_classes: Callable[[], Iterable[str]],
        on_budget_changed: Callable[[], None],
        wake: Callable[[str], None],
        driver: str,
        provisioner_name: str,
    ) -> None:
        self._clients = clients
        self._recorder = recorder
        self._removals = removals
        self._contents = contents
        self._volumes = volumes
        self._nodes: NodeListing = nodes
        self._book = book
        self._book_lock = book_lock
        self._rules_of = rules_of
        self._csi_classes = csi_classes
        self._on_budget_changed = on_budget_changed
        self._wake = wake
        # Contents refused for want of room (or a source not bound yet): looked at again when a
        # volume or a snapshot goes and gives its budget back, not only after their backoff.
        self._waiting: set[str] = set()
        self._waiting_lock = threading.Lock()
        self._driver = driver
        self._name = provisioner_name

    # -- what the informer saw (its thread: no API call) ---------------------------------------

    def content_seen(self, content: ContentFacts) -> None:
        node = content_node(content, self._nodes)
        entry = snapshot_entry(content, node) if node is not None else None
        if entry is None:
            return
        with self._book_lock:
            known = self._book.get(entry.volume_name)
            if known is None or known.size_bytes != entry.size_bytes or known.path != entry.path:
                changed = True
            else:
                changed = known.state != entry.state
            self._book.record_volume(
                entry.volume_name, entry.node, entry.path, entry.state, size_bytes=entry.size_bytes
            )
        if changed:
            self._on_budget_changed()

    def content_gone(self, name: str) -> None:
        with self._book_lock:
            self._book.forget(snapshot_book_key(name))
        with self._waiting_lock:
            self._waiting.discard(name)
        self._on_budget_changed()
        self.budget_freed()

    def budget_freed(self) -> None:
        """A volume or a snapshot went: the contents refused for want of room look again."""
        with self._waiting_lock:
            waiting, self._waiting = self._waiting, set()
        for name in sorted(waiting):
            self._wake(name)

    # -- a worker's ---------------------------------------------------------------------------

    def reconcile(self, name: str) -> None:
        """What the content calls for, carried out; ActionFailed to be retried with backoff."""
        content = self._contents.get(name)
        if content is None:
            return
        source = self._volumes.get(content.volume_handle) if content.volume_handle else None
        rules = self._rules_of(source.storage_class_name) if source is not None else None
        with self._book_lock:
            action = decide_content(
                content,
                source,
                rules,
                self._book.entries(),
                driver=self._driver,
                provisioner_name=self._name,
                nodes=self._nodes,
                import_base_paths=self._import_base_paths,
            )
            if isinstance(action, AdmitSnapshot) and action.entry is not None:
                entry = action.entry
                self._book.reserve(
                    entry.volume_name, entry.node, entry.path, size_bytes=entry.size_bytes
                )
        match action:
            case AdmitSnapshot():
                self._admit(content, action)
            case RefuseSnapshot():
                self._refuse(content, action)
            case AskRemovalPermit():
                self._permit(content, action)
            case LetGoOfContent(why):
                self._let_go(content, why)
            case _:
                log.debug("content %s: %s", name, action.why)

    def _import_base_paths(self, node: str) -> list[str]:
        """The base paths our CSI classes have on `node`: where an imported snapshot can be."""
        found: list[str] = []
        for name in self._csi_classes():
            rules = self._rules_of(name)
            if rules is not None and rules.default_volume_type == CSI_VOLUME_TYPE:
                found += rules.base_paths_on(node)
        return found

    def _admit(self, content: ContentFacts, action: AdmitSnapshot) -> None:
        annotations = {SNAPSHOT_SETUP_ANNOTATION: action.setup.to_json()}
        if not action.setup.imported:
            # As the sidecar marks a snapshot it is taking. An import takes nothing: the node
            # only confirms it, so nothing may hold the content's deletion back meanwhile.
            annotations[BEING_CREATED_ANNOTATION] = "yes"
        metadata: dict[str, Any] = {
            "labels": {NODE_LABEL: action.node_key},
            "annotations": annotations,
        }
        if content.resource_version:
            # Only on the content as decided: a stale cache's second admission (the node may
            # have made the snapshot and lifted being-created since) gets a conflict instead.
            metadata["resourceVersion"] = content.resource_version
        try:
            self._patch(content.name, {"metadata": metadata})
        except ActionFailed:
            if action.entry is not None:
                with self._book_lock:
                    self._book.cancel_reservation(action.entry.volume_name)
            raise
        if content.error_message is not None:
            # Ours, from an earlier refusal (room was short): the content is admitted now.
            self._patch(content.name, {"status": {"error": None}}, status=True)
        if action.entry is not None:
            self._on_budget_changed()
        log.info(
            "content %s: snapshot %s admitted on %s",
            content.name,
            action.setup.snapshot_id,
            action.node_key,
        )

    def _refuse(self, content: ContentFacts, action: RefuseSnapshot) -> None:
        if content.error_message != action.message:
            body = {
                "status": {
                    "readyToUse": False,
                    "error": {"time": _now(), "message": action.message},
                }
            }
            self._patch(content.name, body, status=True)
            self._recorder.warning(
                content_reference(content), "SnapshotCreationFailed", action.message
            )
        if not action.lasting:
            with self._waiting_lock:
                self._waiting.add(content.name)
            raise ActionFailed(action.message)

    def _permit(self, content: ContentFacts, action: AskRemovalPermit) -> None:
        node = content_node(content, self._nodes) or ""
        facts = SnapshotProof(
            content_being_deleted=content.being_deleted,
            deletion_policy=content.deletion_policy,
            snapshot_id=action.expected_id,
            setup_snapshot_id=action.setup.snapshot_id,
        )
        decision = self._removals.snapshot_removal(
            content.name, content.uid, node, facts, action.setup
        )
        if isinstance(decision, RemovalRefused):
            self._recorder.warning(
                content_reference(content),
                "SnapshotDeleteRefused",
                f"not removing: {decision.reason}; the snapshot is left in place",
            )
            raise ActionFailed(decision.reason)
        body = {
            "metadata": {"annotations": {SNAPSHOT_REMOVAL_PERMIT_ANNOTATION: decision.to_json()}}
        }
        self._patch(content.name, body)

    def _let_go(self, content: ContentFacts, why: str) -> None:
        """Takes the sidecar's finalizer off, as it does (a JSON patch of the list), with a
        test of the list as read, so that a finalizer added meanwhile is not dropped."""
        kept = [f for f in content.finalizers if f != CONTENT_FINALIZER]
        body = [
            {"op": "test", "path": "/metadata/finalizers", "value": list(content.finalizers)},
            {"op": "replace", "path": "/metadata/finalizers", "value": kept},
        ]
        try:
            self._clients.request_json(
                "PATCH", f"{CONTENTS_PATH}/{content.name}", body=body, content_type=JSON_PATCH
            )
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return
            raise ActionFailed(f"removing {content.name}'s finalizer failed: {error}") from None
        except (HTTPError, OSError) as error:
            raise ActionFailed(f"removing {content.name}'s finalizer failed: {error}") from None
        log.info("content %s let go: %s", content.name, why)

    def _patch(self, name: str, body: Mapping[str, Any], *, status: bool = False) -> None:
        path = f"{CONTENTS_PATH}/{name}" + ("/status" if status else "")
        try:
            self._clients.request_json("PATCH", path, body=body, content_type=MERGE_PATCH)
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return
            raise ActionFailed(f"patching content {name} failed: {error}") from None
        except (HTTPError, OSError) as error:
            raise ActionFailed(f"patching content {name} failed: {error}") from None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
