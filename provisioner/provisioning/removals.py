"""The shell side of the removal gate (provisioning/removal_gate.py): it gathers a removal's facts
at the moment it is decided (the path book under its lock, the lease, and, for a give-back, a fresh
read of the PV), asks the gate, and runs the removing helper step with the permit, or leaves
the directory in place with a Warning that says what was not proven. The only place that asks
the gate; every helper step that removes or empties a directory is built from its permit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any, NoReturn, Protocol

from urllib3.exceptions import HTTPError

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.pod_runner import HelperPodError
from provisioner.helper_pods.pods import HelperPods
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import EventRecorder, KubeClients, ObjectReference
from provisioner.objects.snapshot_handoff import SnapshotRemoval, SnapshotSetup
from provisioner.provisioning.actions import ActionFailed, volume_reference
from provisioner.provisioning.claims import ProvisionPlan
from provisioner.provisioning.paths import PathBook
from provisioner.provisioning.removal_gate import (
    RemovalKind,
    RemovalPermit,
    RemovalProof,
    RemovalRefused,
    SnapshotProof,
    decide_removal,
)
from provisioner.provisioning.snapshot_decisions import snapshot_book_key
from provisioner.provisioning.volume_decisions import TeardownPlan
from provisioner.scans.orphans import Orphan, Owner, still_orphan

log = logging.getLogger(__name__)


class Leadership(Protocol):
    """Whether this process still leads, as the gate asks it when it decides."""

    def holds_lease(self) -> bool: ...


class SoleInstance:
    """Leadership without leader election: the one instance always leads."""

    def holds_lease(self) -> bool:
        return True


class Removals:
    """Asks the gate for every removal of this provisioner's volumes' directories."""

    def __init__(
        self,
        clients: KubeClients,
        recorder: EventRecorder,
        pods: HelperPods[Any],
        *,
        book: PathBook,
        book_lock: threading.Lock,
        leadership: Leadership,
    ) -> None:
        self._clients = clients
        self._recorder = recorder
        self._pods = pods
        self._book = book
        self._book_lock = book_lock
        self._leadership = leadership

    def teardown_permit(self, plan: TeardownPlan) -> RemovalPermit | RemovalRefused:
        """For a teardown decided from the informer and the book (no read: the book holds the
        path as tearing down, so no provision can take it meanwhile); a refusal is reported on
        the PV."""
        proof = RemovalProof(
            kind=RemovalKind.TEARDOWN,
            volume_name=plan.volume_name,
            path=plan.path,
            base_path=plan.base_path,
            sharing=self._sharing(plan.volume_name, plan.disk_node, plan.path),
            holds_lease=self._leadership.holds_lease(),
        )
        decision = decide_removal(proof)
        if isinstance(decision, RemovalRefused):
            self._recorder.warning(
                volume_reference(plan.volume_name),
                "VolumeFailedDelete",
                f"not removing: {decision.reason}; the directory is left in place",
            )
        return decision

    def setup_clean_up_permit(self, plan: ProvisionPlan) -> RemovalPermit | None:
        """For the clean-up after the setup's own failure, in its helper run (the directory
        removed only when empty and made by this attempt); None: a failed setup leaves it."""
        decision = decide_removal(self._clean_up_proof(RemovalKind.FAILED_SETUP_CLEAN_UP, plan))
        if isinstance(decision, RemovalRefused):
            log.info("claim %s: %s", plan.claim.uid, decision.reason)
            return None
        return decision

    def clean_up_abandoned(self, plan: ProvisionPlan, bundle: ConfigBundle) -> None:
        """The claim went while its setup failed (timed out, say: the pod was killed before
        its `finish` step could remove the directory): no retry will come to use or remove
        it. The fixed `finish` step alone removes it, if it is empty and this attempt made it:
        never a teardown, never data. What is left is logged and left to the orphan scan."""
        target = cleanup_target(plan)
        proof = self._clean_up_proof(RemovalKind.FAILED_SETUP_CLEAN_UP, plan)
        decision = decide_removal(proof)
        claim = f"{plan.claim.namespace}/{plan.claim.name}"
        if isinstance(decision, RemovalRefused):
            log.warning("claim %s went while its setup failed; %s: left", claim, decision.reason)
            return
        try:
            self._pods.finish(target, bundle, decision)
        except HelperPodError as error:
            log.warning(
                "claim %s went while its setup failed; removing %s failed: %s",
                claim,
                plan.path,
                error,
            )
            return
        log.info("claim %s went while its setup failed; removed %s", claim, plan.path)

    def give_back(
        self,
        plan: ProvisionPlan,
        bundle: ConfigBundle,
        kind: RemovalKind,
        why: str,
        reference: ObjectReference,
    ) -> NoReturn:
        """No PV will point at the directory the setup made (`why`): remove it if the gate
        allows, and fail the provision either way, with Warnings on the claim (`reference`).
        `kind` GIVE_BACK or CLONE_GIVE_BACK; a clone's give-back comes only from the source's
        verdict taken before its first save."""
        target = cleanup_target(plan)
        seen = self._claim_volume_exists(plan)
        proof = self._clean_up_proof(
            kind,
            plan,
            claim_volume_seen=seen,
            clone_verdict_before_save=kind is RemovalKind.CLONE_GIVE_BACK,
        )
        decision = decide_removal(proof)
        self._recorder.warning(reference, "ProvisioningFailed", f"{why}; giving {plan.path} back")
        if isinstance(decision, RemovalRefused):
            self._recorder.warning(
                reference,
                "ProvisioningCleanupRefused",
                f"{plan.path} is left in place: {decision.reason}",
            )
            raise ActionFailed(why)
        try:
            self._pods.run_alone("delete", target, bundle, decision)
        except HelperPodError as error:
            self._recorder.warning(
                reference,
                "ProvisioningCleanupFailed",
                f"{why} and removing {plan.path} failed too: {error}; remove it by hand",
            )
        raise ActionFailed(why)

    def snapshot_removal(
        self,
        content_name: str,
        content_uid: str,
        node: str,
        facts: SnapshotProof,
        setup: SnapshotSetup,
    ) -> SnapshotRemoval | RemovalRefused:
        """For a VolumeSnapshotContent being deleted with policy Delete (read from the informer:
        the node re-reads the content before it acts on the permit): the permit as the node
        receives it (SNAPSHOT_REMOVAL_PERMIT_ANNOTATION), or what was not proven."""
        proof = RemovalProof(
            kind=RemovalKind.SNAPSHOT_DELETE,
            volume_name=content_name,
            path=setup.path,
            base_path=setup.base_path,
            sharing=self._sharing(snapshot_book_key(content_name), node, setup.path)
            if node
            else (),
            holds_lease=self._leadership.holds_lease(),
            snapshot=facts,
        )
        decision = decide_removal(proof)
        if isinstance(decision, RemovalRefused):
            return decision
        return SnapshotRemoval(
            content_name=decision.volume_name,
            content_uid=content_uid,
            snapshot_id=setup.snapshot_id,
            path=decision.path,
        )

    def _clean_up_proof(
        self,
        kind: RemovalKind,
        plan: ProvisionPlan,
        *,
        claim_volume_seen: bool | None = None,
        clone_verdict_before_save: bool | None = None,
    ) -> RemovalProof:
        return RemovalProof(
            kind=kind,
            volume_name=plan.volume_name,
            path=plan.path,
            base_path=plan.base_path,
            sharing=self._sharing(plan.volume_name, plan.disk_node, plan.path),
            holds_lease=self._leadership.holds_lease(),
            reuses_existing_data=plan.reuse_existing_data,
            claim_volume_seen=claim_volume_seen,
            clone_verdict_before_save=clone_verdict_before_save,
        )

    def _sharing(self, volume_name: str, disk_node: str, path: str) -> tuple[str, ...]:
        with self._book_lock:
            return tuple(
                entry.describe() for entry in self._book.overlapping(volume_name, disk_node, path)
            )

    def _claim_volume_exists(self, plan: ProvisionPlan) -> bool | None:
        """Whether a fresh read finds a PV of this claim's (its name, bound or reserved for the
        claim's UID); None when the read failed (then nothing is proven)."""
        try:
            found = self._clients.request_json(
                "GET", f"/api/v1/persistentvolumes/{plan.volume_name}"
            )
        except ApiError as error:
            return False if error.status == HTTPStatus.NOT_FOUND else None
        except (HTTPError, OSError):
            return None
        claim_ref = (found.get("spec") or {}).get("claimRef") or {}
        return bool(claim_ref.get("uid") == plan.claim.uid)


def orphan_removal_permit(
    orphan: Orphan, owners: Sequence[Owner]
) -> RemovalPermit | RemovalRefused:
    """For `orphans --delete`: `owners` read after the listing, so that a path a PV or a
    helper took since keeps it."""
    holders = tuple(
        owner.volume_name or owner.path for owner in owners if not still_orphan(orphan, [owner])
    )
    return decide_removal(
        RemovalProof(
            kind=RemovalKind.ORPHAN_REMOVAL,
            volume_name="",
            path=orphan.path,
            base_path=orphan.base_path,
            sharing=holders,
            holds_lease=True,
        )
    )


def cleanup_target(plan: ProvisionPlan) -> TeardownPlan:
    """What a give-back or clean-up works on: the attempt's directory, no PV to delete."""
    return TeardownPlan(
        volume_name=plan.volume_name,
        path=plan.path,
        node_name=plan.node_name,
        volume_mode=plan.volume_mode,
        size_bytes=plan.size_bytes,
        delete_volume=False,
        remove_finalizer=False,
        base_path=plan.base_path,
    )
