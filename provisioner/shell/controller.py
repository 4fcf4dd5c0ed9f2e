"""Wiring: informers -> work queue -> workers -> reconcile(claim | volume).

Informers keep compact records (see `records`), event handlers only enqueue keys, and each
worker takes one key at a time, reads the current records, asks the pure core what to do and
hands that to `actions`. The queue guarantees one worker per key, so a claim is never
provisioned twice by this process; the deterministic PV name and AlreadyExists-as-success make
that hold across restarts and replicas too.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from provisioner.core.claims import (
    PROVISIONED_BY,
    AddFinalizer,
    Ignore,
    NodeGone,
    Provision,
    ProvisionPlan,
    RefuseUnsafePath,
    Reject,
    RemoveFinalizer,
    Reschedule,
    Teardown,
    TeardownPlan,
    WaitForPath,
    decide_claim_action,
    decide_volume_action,
    is_our_claim,
    record_volume,
)
from provisioner.core.config import ConfigBundle
from provisioner.core.expansion import (
    Expand,
    FinishExpansion,
    NoExpansion,
    RefuseExpansion,
    decide_expansion,
)
from provisioner.core.helpers import (
    HELPER_POD_LABEL,
    HELPER_POD_LABEL_VALUE,
    HelperAction,
)
from provisioner.core.paths import PathBook
from provisioner.core.records import (
    ClaimRecord,
    NodeRecord,
    StorageClassRecord,
    VolumeRecord,
    claim_record,
    node_record,
    storage_class_record,
    volume_record,
)
from provisioner.core.storage_capacity import HOSTNAME_LABEL, CapacityObject, desired_capacities
from provisioner.kube.client import KubeClients
from provisioner.kube.helper_pods import HelperPodError, HelperPodNotStarted
from provisioner.kube.informer import Informer, name_key, uid_key
from provisioner.kube.metrics import Metrics
from provisioner.kube.pod_events import ADDED, DELETED, MODIFIED, PodEventHub
from provisioner.kube.workqueue import WorkQueue
from provisioner.shell.actions import ActionFailed, Actions, VolumeSaveUnsettled
from provisioner.shell.capacity_publisher import CapacityPublisher
from provisioner.shell.clone_sources import CloneWaits, InformerClaimSources
from provisioner.shell.helper_batcher import BatchSettings, HelperBatcher, HelperJob
from provisioner.shell.helper_pod_index import HelperPodIndex
from provisioner.shell.helper_runs import HelperResult

log = logging.getLogger(__name__)

CLAIM = "claim"
VOLUME = "volume"
HELPER_POD = "helper-pod"
Key = tuple[str, str]
"""(CLAIM, claim uid), (VOLUME, volume name) or (HELPER_POD, its informer key)."""


DRAIN_SECONDS = 20.0
"""How long SIGTERM lets running reconciles finish."""
POD_CLEANUP_SECONDS = 8.0
"""Then how long deleting the helper pods of reconciles still running may take."""
STOP_BUDGET_SECONDS = DRAIN_SECONDS + POD_CLEANUP_SECONDS + 5 * 1.0
"""The controller's whole stop (informers stop in a second each); the process adds the lease
release to it. The Deployment's terminationGracePeriodSeconds must exceed the sum."""


@dataclass(frozen=True)
class ControllerSettings:
    provisioner_name: str
    helper_namespace: str
    workers: int = 8
    provisioning_retry_count: int = 15
    deletion_retry_count: int = 15
    resync_period: float = 900.0
    backoff_base: float = 1.0
    backoff_max: float = 300.0
    capacity_min_interval: float = 1.0
    """The CSIStorageCapacity publisher writes at most once per this many seconds."""
    batch: BatchSettings = field(default_factory=BatchSettings)
    """How setups and teardowns share helper pods on a busy node."""


@dataclass(frozen=True)
class _Handoff:
    """A setup or teardown whose helper run the batcher has: what carrying it out needs."""

    plan: ProvisionPlan | TeardownPlan
    bundle: ConfigBundle
    started: float
    class_name: str
    result: HelperResult | None = None
    """The helper run's end, once taken from the batcher, while what follows it is retried."""


class _InformerNames:
    """The PV names the volume informer holds, as a collection the pure core can test."""

    def __init__(self, informer: Informer[VolumeRecord]) -> None:
        self._informer = informer

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._informer.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._informer.keys())

    def __len__(self) -> int:
        return len(self._informer)


class Controller:
    def __init__(
        self,
        clients: KubeClients,
        settings: ControllerSettings,
        config: Callable[[], ConfigBundle],
        actions: Actions,
        metrics: Metrics,
        *,
        pod_events: PodEventHub | None = None,
    ) -> None:
        self._settings = settings
        self._pod_events = pod_events
        self._config = config
        self._actions = actions
        self._queue: WorkQueue[Key] = WorkQueue(
            "provisioner",
            base_delay=settings.backoff_base,
            max_delay=settings.backoff_max,
            metrics=metrics.queue_metrics("provisioner"),
        )
        informer = functools.partial(Informer, resync_period=settings.resync_period)
        lists = clients.list_function
        self.claims: Informer[ClaimRecord] = informer(
            "claims",
            lists("/api/v1/persistentvolumeclaims"),
            to_record=claim_record,
            key=uid_key,
        )
        self.volumes: Informer[VolumeRecord] = informer(
            "volumes", lists("/api/v1/persistentvolumes"), to_record=volume_record, key=name_key
        )
        self.classes: Informer[StorageClassRecord] = informer(
            "classes",
            lists("/apis/storage.k8s.io/v1/storageclasses"),
            to_record=storage_class_record,
            key=name_key,
        )
        self.nodes: Informer[NodeRecord] = informer(
            "nodes", lists("/api/v1/nodes"), to_record=node_record, key=name_key
        )
        self.helper_pods: Informer[dict[str, Any]] = informer(
            "helper-pods",
            lists(f"/api/v1/namespaces/{settings.helper_namespace}/pods"),
            to_record=_helper_pod,
            label_selector=f"{HELPER_POD_LABEL}={HELPER_POD_LABEL_VALUE}",
        )
        self._volume_names = _InformerNames(self.volumes)
        self._clone_sources = InformerClaimSources(self.claims, self.volumes)
        self._clone_waits = CloneWaits()
        # The one picture of taken paths the core decides on: our PVs as the informer sees
        # them, plus the provisions and teardowns in flight. Decisions and the bookkeeping that
        # carries them out happen under one lock, so two workers never both think a path free.
        self._paths = PathBook()
        self._paths_lock = threading.Lock()
        # Claims told to wait, by the volume they wait for: woken when it leaves the book.
        self._waiting: dict[str, set[str]] = {}
        # Claims whose expansion was refused for want of room: looked at again when a volume
        # goes and gives its budget back.
        self._expansions_waiting_for_room: set[str] = set()
        # Setups and teardowns handed to the batcher, by key: what their reconcile carries
        # out once the helper run ended (see `_settle_claim` and `_settle_volume`).
        self._handoffs: dict[Key, _Handoff] = {}
        # Claims whose last setup failed, by UID, with that attempt: should the claim go before
        # a retry, the directory the attempt left is removed (see `_clean_up_after`).
        self._failed_attempts: dict[str, _Handoff] = {}
        self._helper_index = HelperPodIndex()
        self._helpers: HelperBatcher[Key] = HelperBatcher(
            lambda: actions.helper_runs,
            settings.batch,
            on_done=self._queue.add,
            running_pods=self._helper_index.pods_serving,
            delete_pod=lambda name: actions.delete_helper_pod(settings.helper_namespace, name),
            may_run=self._helper_run_problem,
            on_warning=self._helper_warning,
        )
        # What each worker is on and since when: the work loop's heartbeat for /healthz.
        self._busy: dict[str, tuple[Key, float]] = {}
        self._workers: list[threading.Thread] = []
        self._started = False
        self.capacity = CapacityPublisher(
            clients,
            namespace=settings.helper_namespace,
            provisioner_name=settings.provisioner_name,
            desired=self._desired_capacities,
            metrics=metrics,
            min_interval=settings.capacity_min_interval,
        )
        self._register_handlers()
        self.claims.add_event_handler(self._wake_clones, self._wake_clones, self._wake_clones)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def informers(self) -> list[Informer[Any]]:
        return [self.claims, self.volumes, self.classes, self.nodes, self.helper_pods]

    def liveness(self, stall_after: float) -> str | None:
        """None while the work loop and the informers are alive; otherwise what is wedged. A
        worker on one key for longer than `stall_after` (more than any helper run and PV save
        can take) is stuck."""
        if not self._started or self._queue.shutting_down:
            return None
        for informer in self.informers:
            problem = informer.liveness()
            if problem is not None:
                return problem
        dead = [worker.name for worker in self._workers if not worker.is_alive()]
        if dead:
            return f"worker threads ended: {', '.join(dead)}"
        problem = self._helpers.liveness()
        if problem is not None:
            return problem
        now = time.monotonic()
        for worker, (key, since) in sorted(self._busy.copy().items()):
            if now - since > stall_after:
                return f"{worker} has been on {key[0]} {key[1]} for {now - since:.0f}s"
        return None

    def helper_counts(self) -> str:
        """ "ok", or the helper runs and held volumes there are (shown on /healthz)."""
        counts = self._helpers.counts()
        return f"ok; {counts}" if counts else "ok"

    def _helper_warning(self, key: Key, message: str) -> None:
        handoff = self._handoffs.get(key)
        if handoff is not None:
            self._actions.helper_warning(handoff.plan, message)

    def has_synced(self) -> bool:
        return self._started and all(informer.has_synced for informer in self.informers)

    def start(self, sync_timeout: float = 120.0) -> None:
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            if not informer.wait_for_sync(sync_timeout):
                raise RuntimeError(f"informer {informer.name} did not sync in {sync_timeout:g}s")
        log.info(
            "caches synced: %d claims, %d volumes, %d classes, %d nodes",
            len(self.claims),
            len(self.volumes),
            len(self.classes),
            len(self.nodes),
        )
        for number in range(self._settings.workers):
            worker = threading.Thread(target=self._work, name=f"worker-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self.capacity.start()
        self._started = True

    def stop(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """On SIGTERM: stop taking work and let running reconciles finish, within drain_seconds.
        A helper pod still running then (a stuck image, a slow script) is deleted rather than
        left behind, within a few more seconds: its worker dies with the process, and whoever
        leads next redoes the action. Bounded by `STOP_BUDGET_SECONDS` in all."""
        deadline = time.monotonic() + drain_seconds
        self.capacity.stop()
        self._helpers.stop()
        self._queue.shutdown()
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        self._settle_ended_runs(deadline)
        deadline = time.monotonic() + POD_CLEANUP_SECONDS
        for pod in sorted(self._helpers.in_flight_pods()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("helper pod %s still running at shutdown: left to the next leader", pod)
                continue
            log.warning("helper pod %s still running at shutdown: deleting it", pod)
            self._actions.delete_helper_pod(
                self._settings.helper_namespace, pod, timeout=min(3.0, remaining)
            )
        for informer in self.informers:
            informer.stop(timeout=1.0)

    def _settle_ended_runs(self, deadline: float) -> None:
        """At a stop: helper runs that end within the drain are carried out here (the PV saved,
        the PV deleted), as a worker would have; the workers are gone."""
        self._helpers.wait_idle(deadline)
        busy = {key for key, _ in self._busy.copy().values()}
        for key in self._helpers.ended_keys():
            if time.monotonic() >= deadline:
                log.warning("stopping before %s %s was carried out: left to the next leader", *key)
                continue
            if key[0] not in (CLAIM, VOLUME) or key in busy:
                continue
            try:
                self._reconcile(key)
            except Exception as error:  # noqa: BLE001 - logged; whoever leads next redoes it
                log.warning("carrying out %s %s at the stop failed: %s", *key, error)

    def _desired_capacities(self, driver_wants_capacity: bool) -> dict[str, CapacityObject]:
        """The CSIStorageCapacity set for the current config, nodes, classes and book."""
        with self._paths_lock:
            entries = self._paths.entries()
        return desired_capacities(
            self._config().config,
            [record for _, record in self.classes.items()],
            dict(self.nodes.items()),
            entries,
            provisioner_name=self._settings.provisioner_name,
            driver_wants_capacity=driver_wants_capacity,
        )

    def enqueue_everything(self) -> None:
        """After a config change every pending claim and our volumes get another look."""
        self.capacity.poke()
        for uid, claim in self.claims.items():
            if not claim.volume_name and is_our_claim(claim, self._settings.provisioner_name):
                self._queue.add((CLAIM, uid))
        for name, volume in self.volumes.items():
            if volume.annotations.get(PROVISIONED_BY) == self._settings.provisioner_name:
                self._queue.add((VOLUME, name))

    # -- event handlers: cheap filters, then enqueue -------------------------------------------

    def _register_handlers(self) -> None:
        name = self._settings.provisioner_name

        def on_claim(key: str, old: ClaimRecord | None, new: ClaimRecord | None) -> None:
            if new is None:
                self._forget_claim(key)
                if (CLAIM, key) in self._handoffs:
                    # Its setup ran or runs: the PV is saved all the same (see `_settle_claim`).
                    self._queue.add((CLAIM, key))
                return
            unbound_ours = not new.volume_name and is_our_claim(new, name)
            if unbound_ours or (new.volume_name and self._may_expand(new)):
                self._queue.add((CLAIM, key))

        def on_volume(key: str, old: VolumeRecord | None, new: VolumeRecord | None) -> None:
            if new is None:
                self._volume_gone(key)
            elif new.annotations.get(PROVISIONED_BY) == name:
                with self._paths_lock:
                    record_volume(self._paths, new)
                self._queue.add((VOLUME, key))
            if _budget_changed(old, new, name):
                self.capacity.poke()

        def on_class(
            key: str, old: StorageClassRecord | None, new: StorageClassRecord | None
        ) -> None:
            if any(c is not None and c.provisioner == name for c in (old, new)):
                self.capacity.poke()
            if new is None or new.provisioner != name:
                return
            for uid, claim in self.claims.items():
                if claim.storage_class_name == key and not claim.volume_name:
                    self._queue.add((CLAIM, uid))

        def on_node(key: str, old: NodeRecord | None, new: NodeRecord | None) -> None:
            if new is not None and old is not None:
                if new.labels.get(HOSTNAME_LABEL) != old.labels.get(HOSTNAME_LABEL):
                    self.capacity.poke()
                return
            self.capacity.poke()
            # A node came or went: claims waiting for it are affected, and so may be any of our
            # volumes (with a custom nodeAffinityKey the label value is not the node name).
            for uid, claim in self.claims.items():
                if claim.selected_node == key and not claim.volume_name:
                    self._queue.add((CLAIM, uid))
            for volume_name, volume in self.volumes.items():
                if volume.annotations.get(PROVISIONED_BY) == name:
                    self._queue.add((VOLUME, volume_name))

        def on_helper_pod(key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            if self._pod_events is not None:
                if new is None:
                    if old is not None:
                        self._pod_events.publish(DELETED, old)
                else:
                    self._pod_events.publish(MODIFIED if old is not None else ADDED, new)
            current = new if new is not None else old
            if current is not None and self._helper_index.update(
                str(current["metadata"]["name"]), new
            ):
                self._helpers.pods_changed(None if new is not None else current["metadata"]["name"])
            if new is not None and (new.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                # No API call on the informer's thread: a worker deletes it.
                self._queue.add((HELPER_POD, key))

        self.claims.add_event_handler(on_claim, on_claim, None)
        self.volumes.add_event_handler(on_volume, on_volume, on_volume)
        self.classes.add_event_handler(on_class, on_class, on_class)
        self.nodes.add_event_handler(on_node, on_node, on_node)
        self.helper_pods.add_event_handler(on_helper_pod, on_helper_pod, on_helper_pod)

    def _wake_clones(self, key: str, old: ClaimRecord | None, new: ClaimRecord | None) -> None:
        """A claim that just bound is a source its waiting clones may now be made from."""
        for uid in self._clone_waits.update(old, new):
            self._queue.add((CLAIM, uid))

    def _collect_helper_pod(self, key: str) -> None:
        """A finished helper pod no worker waits on is a leftover of a crashed run: delete it."""
        pod = self.helper_pods.get(key)
        if pod is None or (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            return
        name = str(pod["metadata"]["name"])
        deleting = pod["metadata"].get("deletionTimestamp") is not None
        if deleting or name in self._helpers.in_flight_pods():
            return
        log.info(
            "deleting leftover helper pod %s (%s)", name, (pod.get("status") or {}).get("phase")
        )
        self._actions.delete_helper_pod(self._settings.helper_namespace, name)

    # -- workers ---------------------------------------------------------------------------------

    def _work(self) -> None:
        me = threading.current_thread().name
        while True:
            key = self._queue.get()
            if key is None:
                return
            self._busy[me] = (key, time.monotonic())
            try:
                settled = self._reconcile(key)
            except (ActionFailed, HelperPodError) as error:
                self._retry(key, str(error))
            except Exception as error:
                log.exception("reconciling %s %s failed", *key)
                self._retry(key, repr(error))
            else:
                # A key handed to the batcher keeps its failures: its helper's end queues it
                # again, and a failure then counts as another attempt of the same action.
                if settled:
                    self._queue.forget(key)
            finally:
                self._busy.pop(me, None)
                self._queue.done(key)

    def _retry(self, key: Key, error: str) -> None:
        limit = (
            self._settings.provisioning_retry_count
            if key[0] == CLAIM
            else self._settings.deletion_retry_count
        )
        failures = self._queue.num_requeues(key)
        if limit and failures >= limit:
            log.error(
                "giving up on %s %s after %d failures (until its next change or resync): %s",
                *key,
                failures + 1,
                error,
            )
            self._queue.forget(key)
            return
        log.warning(
            "%s %s failed (attempt %d), retrying with backoff: %s", *key, failures + 1, error
        )
        self._queue.add_rate_limited(key)

    def _reconcile(self, key: Key) -> bool:
        """Whether the key is settled (False: its helper run was handed over or still runs)."""
        kind, name = key
        if kind == CLAIM:
            return self._reconcile_claim(name)
        if kind == VOLUME:
            return self._reconcile_volume(name)
        self._collect_helper_pod(name)
        return True

    def _may_expand(self, claim: ClaimRecord) -> bool:
        """Cheap filter: the claim asks for more than its PV of ours has, or its status lags (a
        claim with no status capacity yet is still being bound: not ours to act on, see
        `decide_expansion`, so a fresh bind wakes no worker)."""
        volume = self.volumes.get(claim.volume_name)
        if (
            volume is None
            or volume.annotations.get(PROVISIONED_BY) != self._settings.provisioner_name
        ):
            return False
        status = claim.status_capacity
        return claim.requested_storage != volume.capacity or (
            status is not None and status != volume.capacity
        )

    def _reconcile_expansion(self, claim: ClaimRecord) -> None:
        bundle = self._config()
        volume = self.volumes.get(claim.volume_name)
        with self._paths_lock:
            decision = decide_expansion(
                claim,
                volume,
                self.classes.get(claim.storage_class_name or ""),
                bundle.config,
                provisioner_name=self._settings.provisioner_name,
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
                    self._actions.expand(claim, decision, bundle)
                finally:
                    self.capacity.poke()
                with self._paths_lock:
                    self._paths.finish_resize(decision.volume_name, decision.size_bytes)
            case FinishExpansion(capacity):
                self._actions.finish_expansion(claim, capacity)
            case RefuseExpansion(reason, _):
                log.info("claim %s/%s: expansion refused: %s", claim.namespace, claim.name, reason)
                self._actions.refuse_expansion(claim, reason)
            case NoExpansion(reason):
                log.debug("claim %s/%s: %s", claim.namespace, claim.name, reason)

    def _reconcile_claim(self, uid: str) -> bool:
        key = (CLAIM, uid)
        if key in self._handoffs:
            return self._settle_claim(key)
        claim = self.claims.get(uid)
        if claim is None or claim.being_deleted:
            self._clean_up_after(uid)
        if claim is None:
            return True
        if claim.volume_name:
            self._reconcile_expansion(claim)
            return True
        bundle = self._config()
        nodes = dict(self.nodes.items())
        storage_class = self.classes.get(claim.storage_class_name or "")
        with self._paths_lock:
            decision = decide_claim_action(
                claim,
                storage_class,
                bundle.config,
                self._volume_names,
                nodes,
                provisioner_name=self._settings.provisioner_name,
                paths=self._paths,
                sources=self._clone_sources,
            )
            match decision:
                case Provision(plan):
                    self._paths.reserve(
                        plan.volume_name,
                        plan.location,
                        plan.path,
                        size_bytes=plan.size_bytes,
                        node=plan.node_name or "",
                    )
                case WaitForPath(_, blockers):
                    for blocker in blockers:
                        self._waiting.setdefault(blocker, set()).add(uid)
        match decision:
            case Provision(plan):
                try:
                    if plan.record_base_path:
                        self._actions.record_base_path(claim, plan.base_path)
                    self._actions.begin_provision(plan)
                    self._hand_over(key, "create", plan, bundle, plan.storage_class.name)
                except BaseException:
                    self._release(plan.volume_name)
                    raise
                finally:
                    self.capacity.poke()
                return False
            case WaitForPath(reason):
                log.info("claim %s/%s waits: %s", claim.namespace, claim.name, reason)
                self._actions.wait_for_path(claim, reason)
            case Reject(reason):
                log.info("claim %s/%s refused: %s", claim.namespace, claim.name, reason)
                self._actions.reject(claim, reason)
            case Reschedule(reason):
                self._actions.reschedule(claim, reason)
            case Ignore(reason):
                log.debug("claim %s/%s: %s", claim.namespace, claim.name, reason)
        return True

    def _hand_over(
        self,
        key: Key,
        action: HelperAction,
        plan: ProvisionPlan | TeardownPlan,
        bundle: ConfigBundle,
        class_name: str,
    ) -> None:
        """Give the helper run to the batcher; the key comes back when it ended."""
        self._handoffs[key] = _Handoff(plan, bundle, time.monotonic(), class_name)
        try:
            self._helpers.submit(HelperJob(key, action, plan, bundle))
        except BaseException:
            del self._handoffs[key]
            raise

    def _settle_claim(self, key: Key) -> bool:
        """The setup handed over for the claim: carried out once its helper run ended (the PV
        saved, or the failure reported and retried), whether or not the claim still exists:
        its directory may exist, and a PV whose claim is gone is Released and torn down."""
        handoff = self._handoffs[key]
        result = handoff.result or self._helpers.take(key)
        if result is None:
            return False
        del self._handoffs[key]
        plan = handoff.plan
        assert isinstance(plan, ProvisionPlan)
        try:
            self._actions.finish_provision(plan, handoff.bundle, result, handoff.started)
        except VolumeSaveUnsettled:
            # The PV may exist and bind: the directory, the path and its budget stay, and
            # the key's retry saves the same PV again (its directory is made) until a save
            # or a read settles it, whether or not the claim is still there.
            self._handoffs[key] = replace(handoff, result=result)
            raise
        except BaseException:
            try:
                if self._leaves_a_directory(plan, result):
                    claim = self.claims.get(plan.claim.uid)
                    if claim is None or claim.being_deleted:
                        # Still reserved in the book: nothing can be set up there meanwhile.
                        self._actions.clean_up_abandoned(plan, handoff.bundle)
                    else:
                        self._failed_attempts[plan.claim.uid] = handoff
            finally:
                self._release(plan.volume_name)
            raise
        finally:
            self.capacity.poke()
        self._failed_attempts.pop(plan.claim.uid, None)
        return True

    @staticmethod
    def _leaves_a_directory(plan: ProvisionPlan, result: HelperResult) -> bool:
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
                plan.volume_name, plan.location, plan.path
            ):
                return
            self._paths.reserve(
                plan.volume_name,
                plan.location,
                plan.path,
                size_bytes=plan.size_bytes,
                node=plan.node_name or "",
            )
        try:
            self._actions.clean_up_abandoned(plan, attempt.bundle)
        finally:
            self._release(plan.volume_name)

    def _volume_gone(self, volume_name: str) -> None:
        """A PV went: its path and its budget are free, and whoever waited for them (a claim
        for an overlapping path, an expansion refused for want of room) looks again."""
        with self._paths_lock:
            freed = self._paths.forget(volume_name)
            waiting = self._waiting.pop(volume_name, set()) if freed else set()
            waiting |= self._expansions_waiting_for_room
            self._expansions_waiting_for_room = set()
        for uid in waiting:
            self._queue.add((CLAIM, uid))

    def _forget_claim(self, uid: str) -> None:
        with self._paths_lock:
            self._expansions_waiting_for_room.discard(uid)

    def _release(self, volume_name: str) -> None:
        """A provision failed: its path is free again, and whoever waited for it looks again."""
        waiting: set[str] = set()
        with self._paths_lock:
            self._paths.cancel_reservation(volume_name)
            if volume_name not in self._paths:
                waiting = self._waiting.pop(volume_name, set())
        for uid in waiting:
            self._queue.add((CLAIM, uid))

    def _reconcile_volume(self, name: str) -> bool:
        key = (VOLUME, name)
        if key in self._handoffs:
            return self._settle_volume(key)
        volume = self.volumes.get(name)
        if volume is None:
            return True
        bundle = self._config()
        nodes = dict(self.nodes.items())
        # The decision is the teardown's last check: taken under the lock, with every live,
        # Released and in-flight path in view, and marked in the book before the lock is let go,
        # so no provision can take an overlapping path between the check and the helper.
        with self._paths_lock:
            decision = decide_volume_action(
                volume,
                bundle.config,
                nodes,
                provisioner_name=self._settings.provisioner_name,
                paths=self._paths,
            )
            if isinstance(decision, Teardown):
                self._paths.start_teardown(name)
        match decision:
            case Teardown(plan):
                try:
                    self._hand_over(key, "delete", plan, bundle, volume.storage_class_name)
                except BaseException:
                    self._teardown_ended(name, succeeded=False)
                    raise
                return False
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
            case Ignore(reason):
                log.debug("volume %s: %s", name, reason)
        return True

    def _settle_volume(self, key: Key) -> bool:
        """The teardown handed over for the volume: carried out once its helper run ended (the
        PV deleted, or the failure reported and retried); the path stays in the book as torn
        down only when all of it succeeded."""
        result = self._helpers.take(key)
        if result is None:
            return False
        handoff = self._handoffs.pop(key)
        plan = handoff.plan
        assert isinstance(plan, TeardownPlan)
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
        with self._paths_lock:
            if self._paths.finish_teardown(volume_name, succeeded=succeeded):
                waiting = self._waiting.pop(volume_name, set()) | self._expansions_waiting_for_room
                self._expansions_waiting_for_room = set()
        for uid in waiting:
            self._queue.add((CLAIM, uid))

    def _helper_run_problem(self, job: HelperJob[Key]) -> str | None:
        """The book's last word before the batcher builds the job's helper pod."""
        with self._paths_lock:
            return self._paths.helper_run_problem(
                job.target.volume_name, teardown=job.action == "delete"
            )


def _budget_changed(old: VolumeRecord | None, new: VolumeRecord | None, name: str) -> bool:
    """Whether a PV event can change what our paths have free: one of ours came, went, or
    changed size."""
    ours = [v for v in (old, new) if v is not None and v.annotations.get(PROVISIONED_BY) == name]
    if not ours:
        return False
    return old is None or new is None or old.capacity != new.capacity


def _helper_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """Helper pods are few and short-lived: keep them whole (the runs read their status)."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj
