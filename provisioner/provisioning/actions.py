"""Carrying out the decisions of `claims`: the API writes that follow a helper run (or need
none), with their events and metrics. The helper pods themselves are `pods.HelperPods`'s.

Every action is idempotent, so a worker that crashed half-way, a second leader, or a requeue
after a lost response can repeat it safely: the PV name is deterministic and AlreadyExists is
success, finalizers are patched as sets, and deletes treat NotFound as done.
"""

from __future__ import annotations

import logging
import time
from http import HTTPStatus
from typing import Any

from urllib3.exceptions import HTTPError

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME
from provisioner.helper_pods.pod_runner import HelperPodError
from provisioner.helper_pods.pod_runs import RunResult
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import EventRecorder, EventType, KubeClients, ObjectReference
from provisioner.kube.metrics import Metrics
from provisioner.objects.node_handoff import REMOVAL_PERMIT_ANNOTATION
from provisioner.objects.records import (
    CLAIM_KIND,
    ClaimRecord,
    ClaimReference,
    VolumeRecord,
    claim_record,
    volume_record,
)
from provisioner.objects.snapshot_handoff import SNAPSHOT_KIND
from provisioner.provisioning.annotations import (
    BASE_PATH_ANNOTATION,
    DIRECTORY_REMOVED_ANNOTATION,
    RELEASED_FOR_NODE_LOSS_ANNOTATION,
    SELECTED_NODE,
    VOLUME_FINALIZER,
    node_loss_release_mark,
)
from provisioner.provisioning.claims import (
    ClaimDecision,
    Ignore,
    Provision,
    ProvisionPlan,
    Reject,
    Reschedule,
    WaitForPath,
    build_persistent_volume,
    foreign_volume_problem,
    node_removal,
)
from provisioner.provisioning.clones import CloneSource, source_changed
from provisioner.provisioning.expansion import Expand
from provisioner.provisioning.removal_gate import RemovalKind, RemovalPermit
from provisioner.provisioning.volume_decisions import TeardownPlan

log = logging.getLogger(__name__)

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
CONTROLLER_RESIZE_IN_PROGRESS = "ControllerResizeInProgress"
CONTROLLER_RESIZE_FAILED = "ControllerResizeFailed"
"""The values of a claim's status.allocatedResourceStatuses that a resize with no node step
passes through (Kubernetes' ClaimResourceStatus)."""
NODE_LOST = "NodeLost"
CLAIM_RELEASED = "ClaimReleasedForNodeLoss"
PV_SAVE_ATTEMPTS = 5
"""The library retries saving a PV 5 times before giving the storage back."""


class ActionFailed(Exception):  # noqa: N818 (reads as a sentence at the raise site)
    """An action did not complete; the worker retries the key with backoff."""


class VolumeSaveUnsettled(ActionFailed):
    """Whether the PV was saved is not known (a 5xx, a 429 or a lost answer; a read of it that
    failed): it may exist and bind, so its directory and its place in the book are kept, and
    the provision is retried (an AlreadyExists then shows whose it is)."""

    clone_problem: str | None = None
    """The verdict on a clone's source taken before this save, which its retries keep."""


class GiveBack(ActionFailed):
    """No PV will point at the directory the setup made (`why`): the caller asks the removal
    gate to give it back (provisioning/removals.py), and the provision fails."""

    def __init__(self, kind: RemovalKind, why: str) -> None:
        super().__init__(why)
        self.kind = kind
        self.why = why


def claim_reference(claim: ClaimRecord) -> ObjectReference:
    return ObjectReference(
        kind="PersistentVolumeClaim",
        name=claim.name,
        namespace=claim.namespace,
        uid=claim.uid,
        resource_version=claim.resource_version,
    )


def volume_reference(name: str) -> ObjectReference:
    return ObjectReference(kind="PersistentVolume", name=name)


def bound_claim_reference(claim: ClaimReference) -> ObjectReference:
    """A PV's claim, as its claimRef names it."""
    return ObjectReference(
        kind="PersistentVolumeClaim", name=claim.name, namespace=claim.namespace, uid=claim.uid
    )


class Actions:
    """The imperative half of reconciling one claim or volume."""

    def __init__(
        self,
        clients: KubeClients,
        recorder: EventRecorder,
        metrics: Metrics,
        *,
        csi_driver: str = DEFAULT_DRIVER_NAME,
        pv_save_retry_delay: float = 2.0,
    ) -> None:
        self._clients = clients
        self._csi_driver = csi_driver
        """The driver a CSI class's volumes name (derived from the provisioner's name)."""
        self.recorder = recorder
        self._recorder = recorder
        self._metrics = metrics
        self._pv_save_retry_delay = pv_save_retry_delay

    def report_claim_decision(self, claim: ClaimRecord, decision: ClaimDecision) -> ObjectReference:
        """What the claim is told of its decision, before anything is carried out: a provision
        writes its base path on the claim (before any directory exists, so every later attempt
        works on the same one) and says it began (but for a CSI volume, saved at once); a
        wait, a refusal and a return to the scheduler are said as they are. The claim's
        reference, which its later events name."""
        named = f"{claim.namespace}/{claim.name}"
        annotations: dict[str, str | None] = {}
        event: tuple[EventType, str, str] | None = None
        match decision:
            case Provision(plan):
                if plan.record_base_path:
                    annotations[BASE_PATH_ANNOTATION] = plan.base_path
                provisioning = f"External provisioner is provisioning volume for claim {named}"
                # A CSI volume's PV is saved in this very reconcile (no helper pod to wait
                # for): ProvisioningSucceeded follows at once and says it all, a request less.
                if plan.volume_type != CSI_VOLUME_TYPE:
                    event = ("Normal", "Provisioning", provisioning)
            case WaitForPath(reason):
                log.info("claim %s waits: %s", named, reason)
                event = ("Normal", "WaitingForPath", reason)
            case Reject(reason):
                log.info("claim %s refused: %s", named, reason)
                event = ("Warning", "ProvisioningFailed", reason)
            case Reschedule(reason):
                annotations[SELECTED_NODE] = None
                again = f"removed {SELECTED_NODE} so that the scheduler picks a node again"
                event = ("Warning", "ProvisioningFailed", f"{reason}: {again}")
            case Ignore(reason):
                log.debug("claim %s: %s", named, reason)
        reference = claim_reference(claim)
        if annotations:
            self._patch(
                f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}",
                {"metadata": {"annotations": annotations}},
                MERGE,
            )
        if event is not None:
            self._recorder.event(reference, *event)
        return reference

    def finish_provision(
        self,
        plan: ProvisionPlan,
        helper: RunResult,
        started: float,
        *,
        ask_clone_source: bool = False,
        clone_problem: str | None = None,
        node_clean_up: RemovalPermit | None = None,
    ) -> None:
        """After the setup helper's run (`helper`): the PV, or the failure reported; raises
        `GiveBack` when no PV will point at the directory. A clone's source is asked once
        (`ask_clone_source`: this is the first save) for its verdict (`clone_source_problem`);
        a retry gets it back as `clone_problem` (from VolumeSaveUnsettled), so that it never
        gives back a clone whose source went after its PV may have been saved. `node_clean_up`:
        a CSI volume's permit for the clean-up after its setup fails on the node."""
        claim, class_name = plan.claim, plan.storage_class.name
        source = _source_label(plan)
        where = plan.node_name or "the shared filesystem"
        reference = claim_reference(claim)
        error = helper.error
        if ask_clone_source and error is None and plan.clone_source is not None:
            clone_problem = self.clone_source_problem(plan.clone_source)
        if error is None and clone_problem is None:
            try:
                self._save_volume(plan, node_clean_up)
            except VolumeSaveUnsettled as unsettled:
                unsettled.clone_problem = clone_problem
                raise
            self._metrics.provision_total.labels(class_name, source).inc()
            self._metrics.provision_duration_seconds.labels(class_name, source).observe(
                time.monotonic() - started
            )
            self._recorder.normal(
                reference,
                "ProvisioningSucceeded",
                f"Successfully provisioned volume {plan.volume_name} at {plan.path} on {where}",
            )
            return
        if isinstance(error, HelperPodError):
            self._metrics.provision_failed_total.labels(class_name, source).inc()
            self._recorder.warning(
                reference,
                "ProvisioningFailed",
                f"failed to create {plan.path} on {where}: {error}{helper.hint};"
                " will retry with backoff",
            )
            raise ActionFailed(str(error)) from error
        if error is not None:
            raise error
        self._metrics.provision_failed_total.labels(class_name, source).inc()
        raise GiveBack(RemovalKind.CLONE_GIVE_BACK, f"{clone_problem}, so the copy may miss files")

    def _save_volume(self, plan: ProvisionPlan, clean_up: RemovalPermit | None) -> None:
        volume = build_persistent_volume(plan, self._csi_driver, clean_up)
        last_error = ""
        # Any answer but a definite refusal may hide a save that happened (the server
        # committed, then the answer was lost or turned into a 5xx; a request that timed out
        # may still commit): from then on only a PV of this name that is not this claim's
        # proves the directory ours to remove.
        unsettled = False
        for attempt in range(1, PV_SAVE_ATTEMPTS + 1):
            try:
                self._clients.request_json("POST", "/api/v1/persistentvolumes", body=volume)
                return
            except ApiError as error:
                if error.status == HTTPStatus.CONFLICT:
                    # Saved by an earlier attempt whose response we lost, or by a peer; or a
                    # PV of that name that is not this claim's volume at this path.
                    existing = self._read_volume(plan.volume_name)
                    if existing is not None:
                        problem = foreign_volume_problem(existing, plan, self._csi_driver)
                        if problem is None:
                            return
                        log.warning("PV %s exists and is not ours: %s", plan.volume_name, problem)
                        raise GiveBack(RemovalKind.GIVE_BACK, problem) from error
                    last_error = f"PV {plan.volume_name} was there (409), then gone"
                else:
                    unsettled = unsettled or not _refused(error.status)
                    last_error = f"{error.status} {error.reason}"
            except (HTTPError, OSError) as error:
                unsettled = True
                last_error = f"no answer: {error}"
            log.warning(
                "saving PV %s failed (attempt %d/%d): %s",
                plan.volume_name,
                attempt,
                PV_SAVE_ATTEMPTS,
                last_error,
            )
            if attempt < PV_SAVE_ATTEMPTS:
                time.sleep(self._pv_save_retry_delay * attempt)
        self._metrics.provision_failed_total.labels(
            plan.storage_class.name, _source_label(plan)
        ).inc()
        if unsettled:
            raise VolumeSaveUnsettled(
                f"saving PV {plan.volume_name} failed ({last_error}); it may have been saved,"
                f" so {plan.path} is kept and the provision is retried"
            )
        # Every attempt was refused outright, and the last read showed no PV of that name
        # (the 409's PV went, or there never was one): none will point at the directory.
        if self._read_volume(plan.volume_name) is not None:
            raise VolumeSaveUnsettled(
                f"saving PV {plan.volume_name} failed ({last_error}) yet it exists now; retrying"
            )
        raise GiveBack(RemovalKind.GIVE_BACK, f"saving PV {plan.volume_name} failed ({last_error})")

    def clone_source_problem(self, source: CloneSource) -> str | None:
        """Why the copy just made may not be whole, read from the API server itself (the
        caches may lag behind a deletion that a teardown beside the copy already acts on).
        Asked once per copy, before the clone's first save (see `finish_provision`)."""
        claim = self._read_or_none(
            f"/api/v1/namespaces/{source.claim_namespace}"
            f"/persistentvolumeclaims/{source.claim_name}"
        )
        volume = self._read_or_none(f"/api/v1/persistentvolumes/{source.volume_name}")
        return source_changed(
            source,
            claim_record(claim) if claim is not None else None,
            volume_record(volume) if volume is not None else None,
        )

    def _read_or_none(self, path: str) -> dict[str, Any] | None:
        return read_or_none(self._clients, path)

    def _read_volume(self, name: str) -> dict[str, Any] | None:
        """The PV, or None when a read says it does not exist. Any other answer (a 429, a 5xx,
        none) proves nothing: the caller must not act on the PV's absence, so this raises
        `VolumeSaveUnsettled` and the provision is retried."""
        try:
            return self._clients.request_json("GET", f"/api/v1/persistentvolumes/{name}")
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return None
            raise VolumeSaveUnsettled(
                f"reading PV {name} failed ({error.status} {error.reason}); retrying"
            ) from error
        except (HTTPError, OSError) as error:
            raise VolumeSaveUnsettled(f"reading PV {name} failed ({error}); retrying") from error

    def begin_expansion(self, claim: ClaimRecord, expansion: Expand) -> None:
        """Say on the claim that its resize started, as the external-resizer does before it
        asks the driver: status.allocatedResources is the new size, and
        allocatedResourceStatuses says ControllerResizeInProgress."""
        self._patch_claim_status(
            claim,
            {
                "allocatedResources": {"storage": expansion.capacity},
                "allocatedResourceStatuses": {"storage": CONTROLLER_RESIZE_IN_PROGRESS},
            },
        )

    def expansion_failed(self, claim: ClaimRecord) -> None:
        """Say on the claim that its resize failed (it is retried with backoff), as the
        external-resizer does when the driver's expansion fails. Best effort: the failure
        itself is what the retry reports."""
        try:
            self._patch_claim_status(
                claim, {"allocatedResourceStatuses": {"storage": CONTROLLER_RESIZE_FAILED}}
            )
        except ActionFailed as error:
            log.warning(
                "claim %s/%s: saying its resize failed: %s", claim.namespace, claim.name, error
            )

    def expand(self, claim: ClaimRecord, expansion: Expand) -> None:
        """Grow the volume as the external-resizer does, once its quota on the node was raised
        (`HelperPods.raise_quota`): the PV's capacity, then the claim's status (status
        subresource), then the event."""
        self.grow_volume(expansion)
        self.finish_expansion(claim, expansion.capacity)

    def grow_volume(self, expansion: Expand) -> None:
        """The PV's capacity alone: a CSI volume's node applies it and says so on the PV
        (NODE_SIZE_ANNOTATION), and the claim's resize is finished after that
        (`decide_expansion`)."""
        self._patch(
            f"/api/v1/persistentvolumes/{expansion.volume_name}",
            {"spec": {"capacity": {"storage": expansion.capacity}}},
            MERGE,
        )

    def finish_expansion(self, claim: ClaimRecord, capacity: str, *, resized: bool = True) -> None:
        """The claim's status says the volume has `capacity`, as the external-resizer leaves it
        when no node step follows: status.capacity and allocatedResources that size, no
        allocatedResourceStatuses entry for storage. `resized`: the end of a resize, said in an
        event (else only allocatedResources lagged, from before this version set it)."""
        self._patch_claim_status(
            claim,
            {
                "capacity": {"storage": capacity},
                "allocatedResources": {"storage": capacity},
                "allocatedResourceStatuses": {"storage": None},
            },
        )
        if resized:
            self._recorder.normal(
                claim_reference(claim),
                "VolumeResizeSuccessful",
                f"resize volume {claim.volume_name} to {capacity} succeeded",
            )

    def _patch_claim_status(self, claim: ClaimRecord, status: dict[str, Any]) -> None:
        self._patch(
            f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}/status",
            {"status": status},
            MERGE,
        )

    def refuse_expansion(self, claim: ClaimRecord, reason: str) -> None:
        self._recorder.warning(claim_reference(claim), "VolumeResizeFailed", reason)

    def finish_teardown(
        self, plan: TeardownPlan, class_name: str, helper: RunResult, started: float
    ) -> None:
        """After the teardown helper's run (`helper`): the finalizer and the PV, or the
        failure reported."""
        error = helper.error
        if isinstance(error, HelperPodError):
            self._metrics.delete_failed_total.labels(class_name).inc()
            self._recorder.warning(
                volume_reference(plan.volume_name),
                "VolumeFailedDelete",
                f"failed to remove {plan.path}: {error}; will retry with backoff",
            )
            raise ActionFailed(str(error)) from error
        if error is not None:
            raise error
        # The PV says its directory is gone, in the write that lets it go (no write more): a
        # teardown redone because the DELETE below failed, or because this process died before
        # it, deletes the PV without a helper pod (`decide_volume_action`). A PV without our
        # finalizer gets no write for it: this process remembers (LocalPathProvisioner).
        if plan.remove_finalizer:
            self.remove_finalizer(plan.volume_name, directory_removed=True)
        if plan.delete_volume:
            self._delete_volume(plan.volume_name)
        self._metrics.delete_total.labels(class_name).inc()
        self._metrics.delete_duration_seconds.labels(class_name).observe(time.monotonic() - started)
        log.info("deleted volume %s and its directory %s", plan.volume_name, plan.path)

    def finish_removed_volume(
        self, volume_name: str, *, delete_volume: bool, remove_finalizer: bool
    ) -> None:
        """A teardown already removed the volume's directory: the rest of it, without a pod."""
        if remove_finalizer:
            self.remove_finalizer(volume_name)
        if delete_volume:
            self._delete_volume(volume_name)
        log.info("deleted volume %s, whose directory a teardown removed before", volume_name)

    def await_node(self, volume_name: str, claim: ClaimReference | None, reason: str) -> None:
        """The volume's node is gone, within its class's grace period: said on both objects."""
        self._recorder.warning(volume_reference(volume_name), NODE_LOST, reason)
        if claim is not None:
            self._recorder.warning(bound_claim_reference(claim), NODE_LOST, reason)

    def release_claim(
        self, volume_name: str, node_name: str, claim: ClaimReference, reason: str
    ) -> None:
        """The volume's node has been gone for its class's grace period: that very claim (by
        UID) is deleted, then the PV is marked with the claim it released, so that it is let go
        and never torn down on a node that comes back. The mark follows the DELETE's commit:
        one refused (a 403 where the stack grants no claim `delete`), or one unanswered that a
        fresh read shows did not happen, leaves the PV unmarked, an ordinary volume whose
        teardown runs when its node is there. Kubernetes keeps a claim that a scheduled pod
        uses until that pod goes (its pvc-protection)."""
        self._recorder.warning(volume_reference(volume_name), CLAIM_RELEASED, reason)
        self._recorder.warning(bound_claim_reference(claim), CLAIM_RELEASED, reason)
        path = f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}"
        try:
            self._clients.request_json("DELETE", path, body={"preconditions": {"uid": claim.uid}})
        except ApiError as error:
            # Gone, or another claim of that name now, before this DELETE: not ours to delete,
            # nor to mark (its tenant may have deleted it).
            if error.status in (HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT):
                return
            if _refused(error.status) or not self._claim_deleted(path, claim):
                hint = (
                    ": the stack grants it when a class sets nodeLossGracePeriod"
                    if error.status == HTTPStatus.FORBIDDEN
                    else ""
                )
                raise ActionFailed(
                    f"deleting claim {claim.namespace}/{claim.name}: {error.status}"
                    f" {error.reason}{hint}"
                ) from error
        except (HTTPError, OSError) as error:
            if not self._claim_deleted(path, claim):
                raise ActionFailed(
                    f"deleting claim {claim.namespace}/{claim.name}: no answer: {error}"
                ) from error
        mark = node_loss_release_mark(node_name, claim.uid)
        self._patch(
            f"/api/v1/persistentvolumes/{volume_name}",
            {"metadata": {"annotations": {RELEASED_FOR_NODE_LOSS_ANNOTATION: mark}}},
            MERGE,
        )
        log.warning("volume %s: %s", volume_name, reason)

    def _claim_deleted(self, path: str, claim: ClaimReference) -> bool:
        """After a DELETE of `claim` whose answer was lost or a 5xx: whether a fresh read shows
        it carried out (the claim gone, made again under another UID, or being deleted)."""
        current = self._read_or_none(path)
        if current is None:
            return True
        metadata = current.get("metadata", {})
        return metadata.get("uid") != claim.uid or bool(metadata.get("deletionTimestamp"))

    def let_go_of_volume(
        self, volume_name: str, reason: str, *, delete_volume: bool, remove_finalizer: bool
    ) -> None:
        """A PV released for its node's loss goes without a helper pod; its data stays."""
        self._recorder.normal(volume_reference(volume_name), "VolumeLetGo", reason)
        if remove_finalizer:
            self.remove_finalizer(volume_name)
        if delete_volume:
            self._delete_volume(volume_name)
        log.info("let go of volume %s: %s", volume_name, reason)

    def refuse(self, volume_name: str, reason: str) -> None:
        self._recorder.warning(volume_reference(volume_name), "VolumeFailedDelete", reason)

    def add_finalizer(self, volume_name: str) -> None:
        self._patch(
            f"/api/v1/persistentvolumes/{volume_name}",
            {"metadata": {"finalizers": [VOLUME_FINALIZER]}},
            STRATEGIC_MERGE,
        )

    def hand_removal_to_node(self, volume: VolumeRecord, permit: RemovalPermit) -> None:
        """A CSI volume's teardown: the gate's permit goes onto its PV, where its node's plugin
        reads it, runs the owner check and the teardown on the node, and marks the PV
        DIRECTORY_REMOVED_ANNOTATION; the PV is deleted then, as after a helper's teardown.
        Writing the same permit again (a resync, a retried key) changes nothing."""
        if not permit.covers(volume.name, volume.path or ""):
            raise ActionFailed(f"the permit for {permit.path} is not volume {volume.name}'s")
        claim_uid = volume.claim_ref.uid if volume.claim_ref is not None else ""
        removal = node_removal(permit, claim_uid)
        if volume.annotations.get(REMOVAL_PERMIT_ANNOTATION) == removal.to_json():
            return
        self._patch(
            f"/api/v1/persistentvolumes/{volume.name}",
            {"metadata": {"annotations": {REMOVAL_PERMIT_ANNOTATION: removal.to_json()}}},
            MERGE,
        )
        log.info("volume %s: its node's plugin removes %s", volume.name, permit.path)

    def remove_finalizer(self, volume_name: str, *, directory_removed: bool = False) -> None:
        metadata: dict[str, Any] = {"$deleteFromPrimitiveList/finalizers": [VOLUME_FINALIZER]}
        if directory_removed:
            metadata["annotations"] = {DIRECTORY_REMOVED_ANNOTATION: "true"}
        self._patch(
            f"/api/v1/persistentvolumes/{volume_name}", {"metadata": metadata}, STRATEGIC_MERGE
        )

    def _delete_volume(self, name: str) -> None:
        try:
            self._clients.request_json("DELETE", f"/api/v1/persistentvolumes/{name}")
        except ApiError as error:
            if error.status != HTTPStatus.NOT_FOUND:
                raise ActionFailed(f"deleting PV {name}: {error.status} {error.reason}") from error

    def _patch(self, path: str, body: dict[str, Any], content_type: str) -> None:
        try:
            self._clients.request_json("PATCH", path, body=body, content_type=content_type)
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return
            raise ActionFailed(f"patching {path}: {error.status} {error.reason}") from error


def read_or_none(clients: KubeClients, path: str) -> dict[str, Any] | None:
    """The object at `path`, or None when it does not exist; any other answer fails the action
    (it is retried)."""
    try:
        return clients.request_json("GET", path)
    except ApiError as error:
        if error.status == HTTPStatus.NOT_FOUND:
            return None
        raise ActionFailed(f"reading {path}: {error.status} {error.reason}") from error
    except (HTTPError, OSError) as error:
        raise ActionFailed(f"reading {path}: {error}") from error


def _refused(status: int | None) -> bool:
    """A client error other than 429 (Too Many Requests): the server looked at the request
    and did not carry it out."""
    return status is not None and 400 <= status < 500 and status != HTTPStatus.TOO_MANY_REQUESTS


def _source_label(plan: ProvisionPlan) -> str:
    """The provision metrics' `source` label, as the library sets it: the data source's kind."""
    if plan.restore_source is not None:
        return SNAPSHOT_KIND
    return CLAIM_KIND if plan.clone_source is not None else ""
