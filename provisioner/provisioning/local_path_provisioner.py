"""The local-path side of the controller, as sig-storage-lib's `Provisioner` is to its
`ProvisionController`: what a claim or a volume of ours calls for, and the state those
decisions depend on. The loop (`controller`) runs the informers, the work queue, the workers
and their retries; `local_path_watches` tells this object what the informers saw. This object
is the loop's `Reconciler` (a worker hands it one key at a time, and reads back whether the key
is settled) and its `Lifecycle` (its helper runs and its capacity publisher run beside the
workers).

Read in the order of a claim's journey: `reconcile_claim` -> `_provision` (decide, reserve the
path, hand the setup over) -> `_settle_claim` (the run ended: save the PV, or give back, or
clean up); then a bound claim that grows (`reconcile_expansion`) and a volume's end
(`reconcile_volume` -> `_settle_volume`).

Held here: the path book (our PVs as the informer sees them, plus the provisions, teardowns and
resizes in flight), the claims waiting for a path or for room, the setups and teardowns handed
to the helper pods, and the CSIStorageCapacity set drawn from the book. Decisions and the
bookkeeping that carries them out happen under one lock, so two workers never both think a
path free. A key woken here (a path freed, a helper run ended) goes back on the loop's queue.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from provisioner.capacity.capacity_publisher import CapacityPublisher
from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules, ClassRulesCache
from provisioner.configuration.config import ConfigBundle
from provisioner.configuration.config_watch import ConfigSource
from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME
from provisioner.helper_pods.pod_outcomes import DirectoryUnknown
from provisioner.helper_pods.pod_runner import HelperPodError, HelperPodNotStarted, never_ran
from provisioner.helper_pods.pod_shapes import HelperAction
from provisioner.helper_pods.pods import (
    BatchSettings,
    HelperPods,
    PodSettings,
    RunResult,
    VolumeJob,
)
from provisioner.kube.client import KubeClients, ObjectReference
from provisioner.kube.informer import Informer
from provisioner.kube.metrics import Metrics
from provisioner.loop.controller import IN_BACKGROUND, SETTLED, Failed, Outcome, WorkQueue
from provisioner.objects.records import ClaimRecord, VolumeRecord
from provisioner.provisioning.actions import (
    ActionFailed,
    Actions,
    GiveBack,
    VolumeSaveUnsettled,
    volume_reference,
)
from provisioner.provisioning.book_views import BookCapacities, BookRunChecks, InformerVolumeNames
from provisioner.provisioning.caches import Caches
from provisioner.provisioning.claims import (
    Ignore,
    Provision,
    ProvisionPlan,
    Reject,
    WaitForPath,
    decide_claim_action,
)
from provisioner.provisioning.clone_sources import InformerClaimSources
from provisioner.provisioning.expansion import (
    Expand,
    FinishExpansion,
    NoExpansion,
    RefuseExpansion,
    decide_expansion,
)
from provisioner.provisioning.paths import PathBook
from provisioner.provisioning.removal_gate import RemovalPermit, RemovalRefused
from provisioner.provisioning.removals import Leadership, Removals
from provisioner.provisioning.snapshot_decisions import ContentFacts
from provisioner.provisioning.snapshot_reads import SnapshotReads
from provisioner.provisioning.snapshots import SnapshotContents
from provisioner.provisioning.volume_decisions import (
    AddFinalizer,
    AwaitNode,
    DeleteRemovedVolume,
    LetGoOfVolume,
    NodeGone,
    NodeLoss,
    RefuseUnsafePath,
    ReleaseClaim,
    RemoveFinalizer,
    Teardown,
    TeardownPlan,
    decide_volume_action,
)
from provisioner.provisioning.volume_facts import record_volume, volume_node_name
from provisioner.provisioning.work_keys import CLAIM, EXPANSION, SNAPSHOT, VOLUME, Key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Handoff:
    """A setup or teardown handed to the helper pods: what carrying it out needs."""

    plan: ProvisionPlan | TeardownPlan
    bundle: ConfigBundle
    started: float
    class_name: str
    reference: ObjectReference
    """The object a Warning about the run goes on (the claim, or the PV)."""
    result: RunResult | None = None
    """The helper run's end, once taken from the helper pods, while what follows it is retried."""
    clone_problem: str | None = None
    """A clone's verdict on its source, taken once with `result`, before the first save:
    a retry of the save never reads the source again (see `Actions.finish_provision`)."""
    node_clean_up: RemovalPermit | None = None
    """A CSI volume's: the gate's permit for the clean-up after its setup fails on its node,
    saved with the PV for the node plugin."""


class LocalPathProvisioner:
    def __init__(
        self,
        clients: KubeClients,
        caches: Caches,
        config: ConfigSource,
        actions: Actions,
        metrics: Metrics,
        *,
        leadership: Leadership,
        queue: WorkQueue[Key],
        provisioner_name: str,
        helper_pod: PodSettings,
        batch: BatchSettings,
        capacity_min_interval: float,
        contents: Informer[ContentFacts] | None = None,
        csi_driver: str = DEFAULT_DRIVER_NAME,
    ) -> None:
        """`contents`: the VolumeSnapshotContents informer, where the snapshot API is served."""
        self._caches = caches
        self._config = config
        self._actions = actions
        self._snapshot_reads = SnapshotReads(clients, csi_driver)
        self._queue = queue
        self._provisioner_name = provisioner_name
        self._volume_names = InformerVolumeNames(caches.volumes)
        self._clone_sources = InformerClaimSources(caches.claims, caches.volumes)
        # Each class's rules, read once per version of it and of the config.
        self._class_rules = ClassRulesCache()
        # The one picture of taken paths the core decides on: our PVs as the informer sees
        # them, plus the provisions and teardowns in flight. Decisions and the bookkeeping that
        # carries them out happen under one lock, so two workers never both think a path free.
        self._paths = PathBook()
        self._paths_lock = threading.Lock()
        # Every helper pod of ours; the process's node scan runs its pods through it too.
        self.helper_pods: HelperPods[Key] = HelperPods(
            clients,
            actions.recorder,
            metrics,
            helper_pod,
            batch,
            queue=queue,
            checks=BookRunChecks(self._paths, self._paths_lock),
        )
        # The only way to a helper step that removes a directory (see removal_gate).
        self._removals = Removals(
            clients,
            actions.recorder,
            self.helper_pods,
            book=self._paths,
            book_lock=self._paths_lock,
            leadership=leadership,
        )
        # Claims told to wait, by the volume they wait for: woken when it leaves the book.
        self._waiting: dict[str, set[str]] = {}
        # Claims whose expansion was refused for want of room: looked at again when a volume
        # goes and gives its budget back.
        self._expansions_waiting_for_room: set[str] = set()
        # Setups and teardowns handed to the helper pods, by key: what their reconcile carries
        # out once the helper run ended (see `_settle_claim` and `_settle_volume`).
        self._handoffs: dict[Key, _Handoff] = {}
        # Claims whose last setup failed, by UID, with that attempt: should the claim go before
        # a retry, the directory the attempt left is removed (see `_clean_up_after`).
        self._failed_attempts: dict[str, _Handoff] = {}
        # Volumes whose teardown pod succeeded while their PV is still there (its DELETE or
        # finalizer PATCH failed): a retry deletes the PV without a pod, even before the
        # informer shows the PV's directory-removed annotation.
        self._directories_removed: set[str] = set()
        self._volumes_deleted: set[str] = set()
        """PVs whose directory was removed and whose DELETE was answered: not sent again."""
        # Nodes seen gone, by name, since when (monotonic): what a class's nodeLossGracePeriod
        # is counted from. A node missing at this process's first look counts from then, so a
        # new leader waits the whole period again rather than less.
        self._nodes_gone_since: dict[str, float] = {}
        # Claims this process released for their node's loss, by UID.
        self._released_claims: set[str] = set()
        self._capacity = CapacityPublisher(
            clients,
            namespace=helper_pod.namespace,
            provisioner_name=provisioner_name,
            source=BookCapacities(
                config, caches, self._paths, self._paths_lock, provisioner_name=provisioner_name
            ),
            metrics=metrics,
            min_interval=capacity_min_interval,
        )

        # Our driver's VolumeSnapshotContents: admitted into the same book, under its lock.
        self.snapshots: SnapshotContents | None = None
        if contents is not None:
            self.snapshots = SnapshotContents(
                clients,
                actions.recorder,
                self._removals,
                contents=contents,
                volumes=caches.volumes,
                nodes=caches.nodes,
                book=self._paths,
                book_lock=self._paths_lock,
                rules_of=self._current_rules,
                csi_classes=self._our_class_names,
                on_budget_changed=self.poke_capacity,
                wake=lambda name: queue.add((SNAPSHOT, name)),
                driver=csi_driver,
                provisioner_name=provisioner_name,
            )

    # -- lifecycle, as the loop drives it ----------------------------------------------------

    def start(self) -> None:
        """As this process begins to lead, before a worker takes a key: the helper pods whoever
        led before left are cleared (see `HelperPods.clear_left_pods`)."""
        self.helper_pods.clear_left_pods()
        self._capacity.start()

    def stop_starting(self) -> None:
        """At a stop: publish nothing more, start no helper run more."""
        self._capacity.stop()
        self.helper_pods.stop()

    def wait_for_runs(self, deadline: float) -> list[Key]:
        """At a stop: the keys whose helper run ended by `deadline` (monotonic), to carry out
        now that the workers are gone."""
        return self.helper_pods.wait_idle(deadline)

    def abandon_runs(self) -> None:
        """At a stop, last: no helper pod is left for whoever leads next (see
        `HelperPods.clear_pods`); it redoes the actions of those that were still running."""
        self.helper_pods.clear_pods()

    def liveness(self) -> str | None:
        """None, or the helper runs and held volumes that outlived every bound."""
        return self.helper_pods.liveness()

    def helper_counts(self) -> str:
        """ "ok", or the helper runs and held volumes there are (shown on /healthz)."""
        counts = self.helper_pods.counts()
        return f"ok; {counts}" if counts else "ok"

    def poke_capacity(self) -> None:
        """Something the CSIStorageCapacity set is drawn from changed: publish it again."""
        self._capacity.poke()

    # -- what the informers saw --------------------------------------------------------------

    def volume_seen(self, volume: VolumeRecord) -> None:
        """A PV of ours came or changed: the book records its path."""
        with self._paths_lock:
            record_volume(self._paths, volume, self._caches.nodes)

    def volume_gone(self, volume_name: str) -> None:
        """A PV went: its path and its budget are free, and whoever waited for them (a claim
        for an overlapping path, an expansion refused for want of room) looks again."""
        self._directories_removed.discard(volume_name)
        self._volumes_deleted.discard(volume_name)
        with self._paths_lock:
            freed = self._paths.forget(volume_name)
            waiting = self._waiting.pop(volume_name, set()) if freed else set()
            expansions, self._expansions_waiting_for_room = self._expansions_waiting_for_room, set()
        self._wake(waiting, expansions)
        if self.snapshots is not None:
            self.snapshots.budget_freed()

    def node_gone(self, node_name: str) -> None:
        """A node went: its volumes' grace period (for classes that opt in) starts now."""
        self._nodes_gone_since.setdefault(node_name, time.monotonic())

    def node_back(self, node_name: str) -> None:
        """A node came (back): nothing of it counts as gone any more."""
        self._nodes_gone_since.pop(node_name, None)

    # -- what a worker calls: the loop's `Reconciler` -----------------------------------------

    def reconcile(self, key: Key) -> Outcome:
        """The key's object, handed to what its kind calls for. Not settled: its helper run
        was handed over or still runs (the key comes back when it ended)."""
        kind, name = key
        try:
            if kind == CLAIM:
                settled = self.reconcile_claim(name)
            elif kind == EXPANSION:
                self.reconcile_expansion(name)
                settled = True
            elif kind == VOLUME:
                settled = self.reconcile_volume(name)
            elif kind == SNAPSHOT:
                if self.snapshots is not None:
                    self.snapshots.reconcile(name)
                settled = True
            else:
                self.helper_pods.collect_leftover(self._caches.helper_pods.get(name))
                settled = True
        except (ActionFailed, HelperPodError) as error:
            return Failed(str(error))
        return SETTLED if settled else IN_BACKGROUND

    # -- a claim's journey ---------------------------------------------------------------------

    def reconcile_claim(self, uid: str) -> bool:
        """A claim's key, in the order of its journey: an unbound claim of ours is decided and
        its setup handed over (`_provision`); once that run ended, its PV is saved
        (`_settle_claim`); a claim that went leaves nothing behind (`_clean_up_after`). Whether
        the key is settled (False: a helper run was handed over or still runs, and the key
        comes back when it ended). A bound claim that asks to grow has a key of its own
        (`reconcile_expansion`)."""
        key = (CLAIM, uid)
        if key in self._handoffs:
            return self._settle_claim(key)
        claim = self._caches.claims.get(uid)
        if claim is not None and not claim.volume_name and not claim.being_deleted:
            return self._provision(key, claim)
        if claim is None or claim.being_deleted:
            self._clean_up_after(uid)
        return True

    def _provision(self, key: Key, claim: ClaimRecord) -> bool:
        """Decide what the claim calls for; a provision reserves its path in the book (under
        the lock, with every live, Released and in-flight path in view) and hands its setup
        over, with the gate's permit for the clean-up should the setup fail."""
        bundle = self._config.current
        nodes = dict(self._caches.nodes.items())
        rules = self._rules(claim.storage_class_name or "", bundle)
        ours = rules.storage_class is not None and (
            rules.storage_class.provisioner == self._provisioner_name
        )
        # A restore's snapshot, read before the lock from the API server (no informer holds
        # snapshots for us); None for any other claim, which never enters the restore's files.
        snapshots = (
            self._snapshot_reads.lookup(claim, rules)
            if ours and claim.data_source is not None
            else None
        )
        with self._paths_lock:
            decision = decide_claim_action(
                claim,
                rules,
                self._volume_names,
                nodes,
                provisioner_name=self._provisioner_name,
                paths=self._paths,
                sources=self._clone_sources,
                snapshots=snapshots,
            )
            plan = decision.plan if isinstance(decision, Provision) else None
            if plan is not None:
                self._paths.reserve(
                    plan.volume_name, plan.disk_node, plan.path, size_bytes=plan.size_bytes
                )
            if isinstance(decision, WaitForPath):
                for blocker in decision.blockers:
                    self._waiting.setdefault(blocker, set()).add(claim.uid)
        node_made = plan is not None and plan.volume_type == CSI_VOLUME_TYPE
        try:
            reference = self._actions.report_claim_decision(claim, decision)
            if plan is not None and node_made:
                # No helper run: the PV is saved now, and its node's plugin makes the
                # directory from it (objects/node_handoff.py) before any pod can use it.
                self._handoffs[key] = _Handoff(
                    plan,
                    bundle,
                    time.monotonic(),
                    plan.storage_class.name,
                    reference,
                    result=RunResult(0.0),
                    node_clean_up=self._removals.setup_clean_up_permit(plan),
                )
            elif plan is not None:
                clean_up = self._removals.setup_clean_up_permit(plan)
                self._hand_over(
                    key,
                    "create",
                    plan,
                    bundle,
                    plan.storage_class.name,
                    reference=reference,
                    permit=clean_up,
                )
        except BaseException:
            if plan is not None:
                self._release(plan.volume_name)
            raise
        finally:
            if plan is not None:
                self._capacity.poke()
        if snapshots is not None and isinstance(decision, Reject):
            # Nothing we watch tells when the snapshot becomes ready, or a ReferenceGrant
            # comes: the loop looks again with its backoff, as the external-provisioner does.
            raise ActionFailed(f"restore refused: {decision.reason}")
        if node_made:
            return self._settle_claim(key)
        return plan is None

    def _rules(self, class_name: str, bundle: ConfigBundle) -> ClassRules:
        """The class's rules under the config in force, read once per version of either."""
        return self._class_rules.rules(
            class_name, self._caches.classes.get(class_name), bundle.config
        )

    def _our_class_names(self) -> list[str]:
        """The StorageClasses of this provisioner, as the informer shows them."""
        return [
            name
            for name, storage_class in self._caches.classes.items()
            if storage_class.provisioner == self._provisioner_name
        ]

    def _current_rules(self, class_name: str) -> ClassRules | None:
        """A class's rules under the config in force."""
        return self._rules(class_name, self._config.current)

    def _hand_over(
        self,
        key: Key,
        action: HelperAction,
        plan: ProvisionPlan | TeardownPlan,
        bundle: ConfigBundle,
        class_name: str,
        *,
        reference: ObjectReference,
        permit: RemovalPermit | None,
    ) -> None:
        """Give the helper run to the helper pods, with the removal gate's permit for what it
        may remove, and the object a Warning about it goes on; the key comes back when it
        ended."""
        self._handoffs[key] = _Handoff(plan, bundle, time.monotonic(), class_name, reference)
        try:
            self.helper_pods.submit(VolumeJob(key, action, plan, bundle, reference, permit))
        except BaseException:
            del self._handoffs[key]
            raise

    def _settle_claim(self, key: Key) -> bool:
        """The setup handed over for the claim: carried out once its helper run ended (the PV
        saved, or the failure reported and retried), whether or not the claim still exists:
        its directory may exist, and a PV whose claim is gone is Released and torn down."""
        handoff = self._handoffs[key]
        result = handoff.result or self.helper_pods.take(key)
        if result is None:
            return False
        del self._handoffs[key]
        plan = handoff.plan
        assert isinstance(plan, ProvisionPlan)
        leaves_a_directory = self._leaves_a_directory(plan, result)
        released = False
        try:
            self._actions.finish_provision(
                plan,
                result,
                handoff.started,
                ask_clone_source=handoff.result is None,
                clone_problem=handoff.clone_problem,
                node_clean_up=handoff.node_clean_up,
            )
        except VolumeSaveUnsettled as unsettled:
            # The PV may exist and bind: the directory, the path and its budget stay, and
            # the key's retry saves the same PV again (its directory is made) until a save
            # or a read settles it, whether or not the claim is still there; with the
            # clone's verdict as it was before the first save.
            self._handoffs[key] = replace(
                handoff, result=result, clone_problem=unsettled.clone_problem
            )
            raise
        except GiveBack as give_back:
            # Still reserved in the book while the gate decides and the directory goes.
            released = True
            self._removals.give_back(
                plan, handoff.bundle, give_back.kind, give_back.why, handoff.reference
            )
        except BaseException:
            released = True
            claim = self._caches.claims.get(plan.claim.uid)
            if leaves_a_directory and claim is not None and not claim.being_deleted:
                self._failed_attempts[plan.claim.uid] = handoff
            elif leaves_a_directory:
                # Still reserved in the book: nothing can be set up there meanwhile.
                self._removals.clean_up_abandoned(plan, handoff.bundle)
            raise
        finally:
            if released:
                self._release(plan.volume_name)
            self._capacity.poke()
        self._failed_attempts.pop(plan.claim.uid, None)
        return True

    @staticmethod
    def _leaves_a_directory(plan: ProvisionPlan, result: RunResult) -> bool:
        """Whether a failed setup may have left a directory that only a retry of this claim
        would use, and that is this attempt's own: `prepare` made it, or took it only as this
        volume's earlier attempt or empty. Not so when the class hands over existing data
        (`reuseExistingData`): that directory is never removed here."""
        error = result.error
        # A pod that never started (a missing base path, an image never pulled) made nothing.
        started = isinstance(error, HelperPodError) and not isinstance(error, HelperPodNotStarted)
        return started and not plan.reuse_existing_data

    def _clean_up_after(self, uid: str) -> None:
        """The claim went between a failed setup and its retry: remove what that setup left,
        unless its path is in use again (then it is not this attempt's any more)."""
        attempt = self._failed_attempts.pop(uid, None)
        if attempt is None:
            return
        plan = attempt.plan
        assert isinstance(plan, ProvisionPlan)
        with self._paths_lock:
            if plan.volume_name in self._paths or self._paths.overlapping(
                plan.volume_name, plan.disk_node, plan.path
            ):
                return
            self._paths.reserve(
                plan.volume_name, plan.disk_node, plan.path, size_bytes=plan.size_bytes
            )
        try:
            self._removals.clean_up_abandoned(plan, attempt.bundle)
        finally:
            self._release(plan.volume_name)

    def _release(self, volume_name: str) -> None:
        """A provision failed: its path is free again, and whoever waited for it looks again."""
        waiting: set[str] = set()
        with self._paths_lock:
            self._paths.cancel_reservation(volume_name)
            if volume_name not in self._paths:
                waiting = self._waiting.pop(volume_name, set())
        self._wake(waiting, set())

    # -- a bound claim that grows ---------------------------------------------------------

    def reconcile_expansion(self, uid: str) -> None:
        """A bound claim of ours asks for more than its PV has: the quota raised, the PV and
        the claim's status grown, or the refusal said (see `decide_expansion`)."""
        claim = self._caches.claims.get(uid)
        if claim is None or not claim.volume_name:
            return
        bundle = self._config.current
        volume = self._caches.volumes.get(claim.volume_name)
        with self._paths_lock:
            decision = decide_expansion(
                claim,
                volume,
                self._rules(claim.storage_class_name or "", bundle),
                provisioner_name=self._provisioner_name,
                paths=self._paths,
            )
            if isinstance(decision, RefuseExpansion) and decision.waits_for_room:
                self._expansions_waiting_for_room.add(claim.uid)
            else:
                self._expansions_waiting_for_room.discard(claim.uid)
            if isinstance(decision, Expand):
                # Counted at once, so no provision takes the room before the PV shows it; a
                # failure below leaves it counted (see `PathBook.start_resize`).
                self._paths.start_resize(decision.volume_name, decision.size_bytes)
        match decision:
            case Expand():
                log.info(
                    "claim %s/%s: expanding to %s", claim.namespace, claim.name, decision.capacity
                )
                try:
                    self._actions.begin_expansion(claim, decision)
                    try:
                        if volume is None or volume.volume_type != CSI_VOLUME_TYPE:
                            self.helper_pods.raise_quota(decision, bundle)
                            self._actions.expand(claim, decision)
                        else:
                            # A CSI volume has no helper pod: its node plugin applies the new
                            # size once the PV shows it, then says so on the PV, and that
                            # event finishes the claim's resize (`decide_expansion`).
                            self._actions.grow_volume(decision)
                    except ActionFailed:
                        self._actions.expansion_failed(claim)
                        raise
                finally:
                    self._capacity.poke()
                with self._paths_lock:
                    self._paths.finish_resize(decision.volume_name, decision.size_bytes)
            case FinishExpansion(capacity, resized):
                self._actions.finish_expansion(claim, capacity, resized=resized)
            case RefuseExpansion(reason, _):
                log.info("claim %s/%s: expansion refused: %s", claim.namespace, claim.name, reason)
                self._actions.refuse_expansion(claim, reason)
            case NoExpansion(reason):
                log.debug("claim %s/%s: %s", claim.namespace, claim.name, reason)

    # -- a volume's end ---------------------------------------------------------------------

    def reconcile_volume(self, name: str) -> bool:
        key = (VOLUME, name)
        if key in self._handoffs:
            return self._settle_volume(key)
        volume = self._caches.volumes.get(name)
        if volume is None:
            return True
        bundle = self._config.current
        nodes = dict(self._caches.nodes.items())
        rules = self._rules(volume.storage_class_name, bundle)
        # The decision is the teardown's last check: taken under the lock, with every live,
        # Released and in-flight path in view, and marked in the book before the lock is let go,
        # so no provision can take an overlapping path between the check and the helper.
        with self._paths_lock:
            decision = decide_volume_action(
                volume,
                rules,
                nodes,
                provisioner_name=self._provisioner_name,
                paths=self._paths,
                directory_removed=name in self._directories_removed,
                node_loss=self._node_loss(volume, rules),
            )
            if isinstance(decision, Teardown):
                self._paths.start_teardown(name)
        match decision:
            case Teardown(plan):
                return self._start_teardown(key, volume, plan, bundle)
            case DeleteRemovedVolume(_, delete_volume, remove_finalizer):
                if name in self._volumes_deleted and not remove_finalizer:
                    # The event of our own finalizer's removal, read before that of the
                    # DELETE sent just after it: the PV is going; a second DELETE would only
                    # spend a request of the client's budget, which a release of many spends.
                    return True
                log.info("volume %s: its directory was removed already; deleting the PV", name)
                self._actions.finish_removed_volume(
                    name, delete_volume=delete_volume, remove_finalizer=remove_finalizer
                )
                if delete_volume:
                    self._volumes_deleted.add(name)
            case AddFinalizer():
                self._actions.add_finalizer(name)
            case RemoveFinalizer(reason):
                log.info("volume %s: removing our finalizer: %s", name, reason)
                self._actions.remove_finalizer(name)
            case RefuseUnsafePath(reason):
                log.warning("volume %s: refusing to delete: %s", name, reason)
                self._actions.refuse(name, reason)
            case NodeGone(reason, remove_finalizer):
                log.warning("volume %s: %s", name, reason)
                self._actions.refuse(name, reason)
                if remove_finalizer:
                    self._actions.remove_finalizer(name)
            case AwaitNode(_, _, reason, remaining, claim):
                log.warning("volume %s: %s", name, reason)
                self._actions.await_node(name, claim, reason)
                self._queue.add_after((VOLUME, name), remaining)
            case ReleaseClaim(_, node_name, claim, reason):
                # Once per claim: the PV's next events (its mark, its claim going) come before
                # it shows Released.
                if claim.uid not in self._released_claims:
                    self._actions.release_claim(name, node_name, claim, reason)
                    self._released_claims.add(claim.uid)
            case LetGoOfVolume(_, reason, delete_volume, remove_finalizer):
                self._actions.let_go_of_volume(
                    name, reason, delete_volume=delete_volume, remove_finalizer=remove_finalizer
                )
            case Ignore(reason):
                log.debug("volume %s: %s", name, reason)
        return True

    def _start_teardown(
        self, key: Key, volume: VolumeRecord, plan: TeardownPlan, bundle: ConfigBundle
    ) -> bool:
        """The gate's permit for the teardown decided (and marked in the book), handed to the
        helper pods, or for a CSI volume to its node's plugin; whether the key is settled."""
        name = plan.volume_name
        try:
            permit = self._removals.teardown_permit(plan)
            if isinstance(permit, RemovalRefused):
                self._teardown_ended(name, succeeded=False)
                return True
            if volume.volume_type == CSI_VOLUME_TYPE:
                # The node's plugin carries it out; its mark on the PV brings the key back
                # (DeleteRemovedVolume). The path stays the PV's in the book.
                self._actions.hand_removal_to_node(volume, permit)
                self._teardown_ended(name, succeeded=False)
                return True
            self._hand_over(
                key,
                "delete",
                plan,
                bundle,
                volume.storage_class_name,
                reference=volume_reference(plan.volume_name),
                permit=permit,
            )
        except BaseException:
            self._teardown_ended(name, succeeded=False)
            raise
        return False

    def _node_loss(self, volume: VolumeRecord, rules: ClassRules) -> NodeLoss | None:
        """For a volume of a class that opts in (`nodeLossGracePeriod`): the period, and how
        long its node has been seen gone. None for any other class, and for a class whose
        value is not valid (never release a claim on a value we cannot read)."""
        grace = rules.node_loss_grace_seconds
        if rules.storage_class is None or grace is None:
            return None
        node = volume_node_name(volume)
        if not node or self._caches.nodes.get(node) is not None:
            return NodeLoss(grace, 0.0)
        now = time.monotonic()
        return NodeLoss(grace, now - self._nodes_gone_since.setdefault(node, now))

    def _settle_volume(self, key: Key) -> bool:
        """The teardown handed over for the volume: carried out once its helper run ended (the
        PV deleted, or the failure reported and retried); the path stays in the book as torn
        down only when all of it succeeded."""
        result = self.helper_pods.take(key)
        if result is None:
            return False
        handoff = self._handoffs.pop(key)
        plan = handoff.plan
        assert isinstance(plan, TeardownPlan)
        # A teardown pod waits for a missing `Directory` hostPath until its deadline (a real
        # kubelet then fails it DeadlineExceeded, its container never made): an earlier
        # teardown removed the directory (its process died before the PATCH that says so).
        # What it was to remove is gone: the rest of the teardown goes on. A look that proved
        # nothing (a declared mount point with no disk mounted) keeps the teardown failed, and
        # its Warning says why.
        error = result.error
        if isinstance(error, HelperPodError) and never_ran(error):
            try:
                if self.helper_pods.directory_gone(plan, handoff.bundle):
                    log.info(
                        "volume %s: its directory %s is gone already", plan.volume_name, plan.path
                    )
                    result = RunResult(result.seconds)
            except HelperPodError as look:
                result = RunResult(result.seconds, DirectoryUnknown(error, look))
        if result.error is None:
            self._directories_removed.add(plan.volume_name)
        succeeded = False
        try:
            self._actions.finish_teardown(plan, handoff.class_name, result, handoff.started)
            succeeded = True
        finally:
            self._teardown_ended(plan.volume_name, succeeded=succeeded)
        return True

    def _teardown_ended(self, volume_name: str, *, succeeded: bool) -> None:
        """A teardown ended (or never started): when its PV went meanwhile, the path is free
        only now, and whoever waited for it looks again."""
        waiting: set[str] = set()
        expansions: set[str] = set()
        with self._paths_lock:
            if self._paths.finish_teardown(volume_name, succeeded=succeeded):
                waiting = self._waiting.pop(volume_name, set())
                expansions, self._expansions_waiting_for_room = (
                    self._expansions_waiting_for_room,
                    set(),
                )
        self._wake(waiting, expansions)

    def _wake(self, claims: set[str], expansions: set[str]) -> None:
        """Claims that waited for a path, and expansions that waited for room, look again."""
        for uid in claims:
            self._queue.add((CLAIM, uid))
        for uid in expansions:
            self._queue.add((EXPANSION, uid))
