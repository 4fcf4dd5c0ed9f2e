"""The node plugin's watch of its own node's CSI volumes: sets each up when it appears, tears
it down once the controller's gate put its permit on the Released PV, and marks the PV
DIRECTORY_REMOVED_ANNOTATION after (the controller then deletes it).

It lists and watches only the PVs labelled for this node (`node_selector`), never every PV or
claim: a steady cluster costs the API server one idle watch per node. Failures are reported as
Warning events on the PV (and its claim) with the tail of what the script wrote, and retried
with a per-volume exponential backoff. `ensure_set_up` serves NodePublishVolume: the volume's
setup, done by the watch or, when the kubelet is first, right then under the same lock.
"""

from __future__ import annotations

import logging
import time
from http import HTTPStatus
from typing import Any

import grpc
from urllib3.exceptions import HTTPError

from provisioner.csi.csi_errors import CsiError
from provisioner.kube.api_error import ApiError, describe_api_error
from provisioner.kube.client import KubeClients, ObjectReference
from provisioner.node_volumes.node_watch import MERGE_PATCH, NodeWatch
from provisioner.node_volumes.volume_executor import Outcome, VolumeExecutor
from provisioner.node_volumes.volume_facts import (
    VolumeFacts,
    permit_staleness,
    size_to_apply,
    volume_facts,
    volume_work,
)
from provisioner.objects.node_handoff import (
    NODE_SIZE_ANNOTATION,
    HandoffError,
    NodeRemoval,
    VolumeSetup,
    removal_refusal,
)
from provisioner.provisioning.annotations import DIRECTORY_REMOVED_ANNOTATION

log = logging.getLogger(__name__)

VOLUMES_PATH = "/api/v1/persistentvolumes"
PUBLISH_LOOKUP_SECONDS = 5.0
"""How long NodePublishVolume waits for the watch to show a PV it does not know yet."""


class NodeVolumes(NodeWatch[VolumeFacts]):
    def __init__(
        self,
        clients: KubeClients,
        executor: VolumeExecutor,
        driver_name: str,
        *,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
    ) -> None:
        super().__init__(
            "volume",
            clients,
            VOLUMES_PATH,
            volume_facts,
            driver_name=driver_name,
            node_name=executor.node_name,
            base_delay=base_delay,
            max_delay=max_delay,
        )
        self.executor = executor

    def process(self, name: str) -> bool:
        """Does what the PV asks for; True when done (or nothing to do), False to retry."""
        facts = self.informer.get(name)
        if facts is None:
            self.executor.forget(name)
            return True
        work = volume_work(facts, self.driver_name)
        if work == "none":
            return True
        try:
            setup = VolumeSetup.from_json(facts.setup)
            removal = NodeRemoval.from_json(facts.permit) if work == "tear-down" else None
        except HandoffError as error:
            # Only the controller writes these; a new version of the PV re-enqueues it.
            self._warn(facts, "VolumeHandoffInvalid", str(error))
            return True
        if removal is None:
            outcome = self.executor.set_up(name, facts.path, setup)
            if not self._report(facts, "set up", outcome):
                return False
            self._notice(facts, outcome)
            return self._grow(facts, setup)
        self._set_up_clones_of(name)
        outcome = self.executor.tear_down(
            name,
            facts.path,
            setup,
            removal,
            phase=facts.phase,
            claim_uid=facts.claim_uid,
            confirm=lambda: self._confirm(facts, removal),
        )
        if not self._report(facts, "remove", outcome):
            return False
        return self._mark_removed(facts)

    def _grow(self, facts: VolumeFacts, setup: VolumeSetup) -> bool:
        """An expansion's node side: the PV's capacity, grown by the controller past what this
        node applied, applied to the volume (volume_layout.apply_size: a btrfs limit raised;
        a plain directory has nothing to apply), then said on the PV (NODE_SIZE_ANNOTATION),
        after which the controller finishes the claim's resize."""
        size = size_to_apply(facts, setup.size_bytes)
        if size is None:
            return True
        outcome = self.executor.apply_size(facts.name, setup, size)
        if not self._report(facts, "grow", outcome):
            return False
        self._notice(facts, outcome)
        return self._patch_annotation(facts, NODE_SIZE_ANNOTATION, str(size))

    def _notice(self, facts: VolumeFacts, outcome: Outcome) -> None:
        if outcome.notice:
            log.info("volume %s: %s", facts.name, outcome.notice)
            self.events.normal(
                ObjectReference(kind="PersistentVolume", name=facts.name, uid=facts.uid),
                "QuotasEnabled",
                outcome.notice,
            )

    def _set_up_clones_of(self, source_name: str) -> None:
        """Before a source's teardown: each clone of it on this node not set up yet gets its
        setup now, and with it its copy. A clone's PV is saved before its copy is made, so its
        source may be released before this node came to it (the watch's queue, a plugin
        restart); its copy would then never be made, and its claim stay bound to a volume that
        cannot be set up. Each gets this one turn (a clone set up already answers at once); one
        that fails is reported as any setup is, and the source's teardown goes on: a clone
        never holds its source's data on the node for longer than that."""
        for clone_name, facts in self.informer.items():
            if clone_name == source_name or volume_work(facts, self.driver_name) != "set-up":
                continue
            try:
                setup = VolumeSetup.from_json(facts.setup)
            except HandoffError:
                continue
            if setup.clone_source is not None and setup.clone_source.volume_name == source_name:
                self._report(facts, "set up", self.executor.set_up(clone_name, facts.path, setup))

    def ensure_set_up(self, volume_id: str, path: str) -> None:
        """For NodePublishVolume: the volume's directory is set up on return, by this call or
        an earlier one; CsiError (the kubelet retries) when it cannot be."""
        facts = self._find(volume_id, path)
        if facts is None:
            raise CsiError(
                grpc.StatusCode.UNAVAILABLE,
                f"no PV of volume {volume_id} at {path} is labelled for node {self.node_name}"
                " yet (the node plugin's watch has not seen it)",
            )
        try:
            setup = VolumeSetup.from_json(facts.setup)
        except HandoffError as error:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION, str(error)) from None
        outcome = self.executor.set_up(facts.name, facts.path, setup)
        self._notice(facts, outcome)
        if outcome.kind == "busy":
            raise CsiError(grpc.StatusCode.UNAVAILABLE, outcome.message)
        if not outcome.ok:
            raise CsiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"volume {facts.name} cannot be set up on this node: {outcome.message}",
            )

    def block_device(self, volume_id: str, path: str) -> str:
        """For a Block NodePublishVolume, after `ensure_set_up`: the volume's loop device,
        attached again if none is (the plugin keeps no loop state: found by the file)."""
        facts, setup = self._setup_of(volume_id, path)
        return self.executor.block_device(facts.name, setup)

    def block_usage(self, volume_id: str) -> tuple[str, int, int]:
        """For NodeGetVolumeStats of a Block volume: (its device or "", its size, the bytes
        its file holds), found by the volume's id alone (the request has no context)."""
        found = next(
            (facts for _, facts in self.informer.items() if facts.handle == volume_id), None
        )
        if found is None:
            raise CsiError(grpc.StatusCode.NOT_FOUND, f"no volume {volume_id} on this node")
        _, setup = self._setup_of(volume_id, found.path)
        usage = self.executor.block_usage(setup)
        return usage.device or "", usage.size_bytes, usage.used_bytes

    def _setup_of(self, volume_id: str, path: str) -> tuple[VolumeFacts, VolumeSetup]:
        facts = self._find(volume_id, path)
        if facts is None:
            raise CsiError(
                grpc.StatusCode.NOT_FOUND,
                f"no PV of volume {volume_id} at {path} is labelled for node {self.node_name}",
            )
        try:
            return facts, VolumeSetup.from_json(facts.setup)
        except HandoffError as error:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION, str(error)) from None

    def _find(self, volume_id: str, path: str) -> VolumeFacts | None:
        deadline = time.monotonic() + PUBLISH_LOOKUP_SECONDS
        while True:
            for _, facts in self.informer.items():
                if facts.handle == volume_id and facts.path == path and facts.setup:
                    return facts
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)

    def _confirm(self, seen: VolumeFacts, removal: NodeRemoval) -> str | None:
        """A fresh read of the PV, just before its directory goes: why the permit the watch
        showed is not current (or None)."""
        try:
            current: VolumeFacts | None = volume_facts(
                self.clients.request_json("GET", f"{VOLUMES_PATH}/{seen.name}")
            )
        except ApiError as error:
            if error.status != HTTPStatus.NOT_FOUND:
                return f"cannot read the PV: {describe_api_error(error)}"
            current = None
        except HTTPError as error:
            return f"cannot read the PV: {error}"
        stale = permit_staleness(seen.permit, seen.uid, current)
        if stale is not None or current is None:
            return stale
        return removal_refusal(
            removal,
            volume_name=current.name,
            path=current.path,
            phase=current.phase,
            claim_uid=current.claim_uid,
        )

    def _mark_removed(self, facts: VolumeFacts) -> bool:
        return self._patch_annotation(facts, DIRECTORY_REMOVED_ANNOTATION, "true")

    def _patch_annotation(self, facts: VolumeFacts, key: str, value: str) -> bool:
        # The UID makes the PATCH a precondition: never marks a new PV of the same name.
        body: dict[str, Any] = {"metadata": {"uid": facts.uid, "annotations": {key: value}}}
        try:
            self.clients.request_json(
                "PATCH", f"{VOLUMES_PATH}/{facts.name}", body=body, content_type=MERGE_PATCH
            )
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return True
            log.warning("volume %s: marking %s: %s", facts.name, key, describe_api_error(error))
            return False
        except HTTPError as error:
            log.warning("volume %s: marking %s: %s", facts.name, key, error)
            return False
        log.info("volume %s: marked %s=%s", facts.name, key, value)
        return True

    def _report(self, facts: VolumeFacts, action: str, outcome: Outcome) -> bool:
        if outcome.ok:
            return True
        if outcome.kind == "busy":
            log.info("volume %s: %s", facts.name, outcome.message)
            return False
        reason = "VolumeRefused" if outcome.kind == "refused" else f"Volume{_title(action)}Failed"
        self._warn(
            facts, reason, f"node {self.node_name} cannot {action} {facts.path}: {outcome.message}"
        )
        return False

    def _warn(self, facts: VolumeFacts, reason: str, message: str) -> None:
        log.warning("volume %s: %s: %s", facts.name, reason, message)
        self.events.warning(
            ObjectReference(kind="PersistentVolume", name=facts.name, uid=facts.uid),
            reason,
            message,
        )
        if facts.claim_name and facts.claim_namespace:
            self.events.warning(
                ObjectReference(
                    kind="PersistentVolumeClaim",
                    name=facts.claim_name,
                    namespace=facts.claim_namespace,
                    uid=facts.claim_uid,
                ),
                reason,
                message,
            )


def _title(action: str) -> str:
    return "".join(word.capitalize() for word in action.split())
