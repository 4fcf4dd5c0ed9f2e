"""The generic loop: informers -> work queue -> workers -> retries, as sig-storage-lib's
`ProvisionController` is to the `Provisioner` it drives.

Informers keep compact records (see `records`), event handlers filter cheaply and enqueue keys,
and each worker takes one key at a time and hands it to the local-path side
(`local_path_provisioner`), which asks the pure core what to do, carries it out and says whether
the key is settled; a failure is retried with backoff up to the retry count. The queue
guarantees one worker per key, so a claim is never provisioned twice by this process; the
deterministic PV name and AlreadyExists-as-success make that hold across restarts and replicas
too. The loop also owns the process's side of it: start, the liveness heartbeat, and a stop
that drains.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provisioner.core.api_objects import (
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    object_name,
    object_uid,
)
from provisioner.core.claims import PROVISIONED_BY, is_our_claim
from provisioner.core.config import ConfigBundle
from provisioner.core.defaults import HELPER_SERVICE_ACCOUNT
from provisioner.core.pod_shapes import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE
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
from provisioner.core.storage_capacity import HOSTNAME_LABEL
from provisioner.kube.client import KubeClients
from provisioner.kube.collection_pause import settle_long_lived
from provisioner.kube.informer import Informer, namespaced_name_key
from provisioner.kube.metrics import Metrics
from provisioner.kube.object_decoding import DictObjects, ObjectDecoding
from provisioner.kube.workqueue import WorkQueue
from provisioner.shell.actions import ActionFailed, Actions
from provisioner.shell.caches import Caches
from provisioner.shell.local_path_provisioner import LocalPathProvisioner
from provisioner.shell.pod_runner import HelperPodError
from provisioner.shell.pods import POD_CLEANUP_SECONDS, BatchSettings, PodSettings
from provisioner.shell.work_keys import CLAIM, HELPER_POD, VOLUME, Key

log = logging.getLogger(__name__)

DRAIN_SECONDS = 20.0
"""How long SIGTERM lets running reconciles finish."""
STOP_BUDGET_SECONDS = DRAIN_SECONDS + POD_CLEANUP_SECONDS + 5 * 1.0
"""The controller's whole stop (informers stop in a second each); the process adds the lease
release to it. The Deployment's terminationGracePeriodSeconds must exceed the sum."""


@dataclass(frozen=True)
class ControllerSettings:
    provisioner_name: str
    helper_namespace: str
    helper_service_account: str = HELPER_SERVICE_ACCOUNT
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


class Controller:
    def __init__(
        self,
        clients: KubeClients,
        settings: ControllerSettings,
        config: Callable[[], ConfigBundle],
        actions: Actions,
        metrics: Metrics,
    ) -> None:
        self._settings = settings
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
            objects=ObjectDecoding(PersistentVolumeClaim),
            to_record=claim_record,
            key=object_uid,
        )
        self.volumes: Informer[VolumeRecord] = informer(
            "volumes",
            lists("/api/v1/persistentvolumes"),
            objects=ObjectDecoding(PersistentVolume),
            to_record=volume_record,
            key=object_name,
        )
        self.classes: Informer[StorageClassRecord] = informer(
            "classes",
            lists("/apis/storage.k8s.io/v1/storageclasses"),
            objects=ObjectDecoding(StorageClass),
            to_record=storage_class_record,
            key=object_name,
        )
        self.nodes: Informer[NodeRecord] = informer(
            "nodes",
            lists("/api/v1/nodes"),
            objects=ObjectDecoding(Node),
            to_record=node_record,
            key=object_name,
        )
        self.helper_pods: Informer[dict[str, Any]] = informer(
            "helper-pods",
            lists(f"/api/v1/namespaces/{settings.helper_namespace}/pods"),
            objects=DictObjects(),
            to_record=_helper_pod,
            key=namespaced_name_key,
            label_selector=f"{HELPER_POD_LABEL}={HELPER_POD_LABEL_VALUE}",
        )
        self.caches = Caches(self.claims, self.volumes, self.classes, self.nodes, self.helper_pods)
        """What the local-path decisions and the leader's node scan read."""
        self.local_path = LocalPathProvisioner(
            clients,
            self.caches,
            config,
            actions,
            metrics,
            queue=self._queue,
            provisioner_name=settings.provisioner_name,
            helper_pod=PodSettings(settings.helper_namespace, settings.helper_service_account),
            batch=settings.batch,
            capacity_min_interval=settings.capacity_min_interval,
        )
        # What each worker is on and since when: the work loop's heartbeat for /healthz.
        self._busy: dict[str, tuple[Key, float]] = {}
        self._workers: list[threading.Thread] = []
        self._started = False
        self._register_handlers()

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
        problem = self.local_path.liveness()
        if problem is not None:
            return problem
        now = time.monotonic()
        for worker, (key, since) in sorted(self._busy.copy().items()):
            if now - since > stall_after:
                return f"{worker} has been on {key[0]} {key[1]} for {now - since:.0f}s"
        return None

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
        settle_long_lived()
        for number in range(self._settings.workers):
            worker = threading.Thread(target=self._work, name=f"worker-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self.local_path.start()
        self._started = True

    def stop(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """On SIGTERM: stop taking work and let running reconciles finish, within drain_seconds.
        A helper pod still running then is deleted rather than left behind (see
        `LocalPathProvisioner.delete_running_pods`): its worker dies with the process, and
        whoever leads next redoes the action. Bounded by `STOP_BUDGET_SECONDS` in all."""
        deadline = time.monotonic() + drain_seconds
        self.local_path.stop_starting()
        self._queue.shutdown()
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        self._settle_ended_runs(deadline)
        self.local_path.delete_running_pods()
        for informer in self.informers:
            informer.stop(timeout=1.0)

    def _settle_ended_runs(self, deadline: float) -> None:
        """At a stop: helper runs that end within the drain are carried out here (the PV saved,
        the PV deleted), as a worker would have; the workers are gone."""
        ended = self.local_path.wait_for_runs(deadline)
        busy = {key for key, _ in self._busy.copy().values()}
        for key in ended:
            if time.monotonic() >= deadline:
                log.warning("stopping before %s %s was carried out: left to the next leader", *key)
                continue
            if key[0] not in (CLAIM, VOLUME) or key in busy:
                continue
            try:
                self._reconcile(key)
            except Exception as error:  # noqa: BLE001 - logged; whoever leads next redoes it
                log.warning("carrying out %s %s at the stop failed: %s", *key, error)

    def enqueue_everything(self) -> None:
        """After a config change every pending claim and our volumes get another look."""
        self.local_path.poke_capacity()
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
                if self.local_path.claim_gone(key):
                    self._queue.add((CLAIM, key))
                return
            unbound_ours = not new.volume_name and is_our_claim(new, name)
            if unbound_ours or (new.volume_name and self._may_expand(new)):
                self._queue.add((CLAIM, key))

        def on_volume(key: str, old: VolumeRecord | None, new: VolumeRecord | None) -> None:
            if new is None:
                self.local_path.volume_gone(key)
            elif new.annotations.get(PROVISIONED_BY) == name:
                self.local_path.volume_seen(new)
                self._queue.add((VOLUME, key))
            if _budget_changed(old, new, name):
                self.local_path.poke_capacity()

        def on_class(
            key: str, old: StorageClassRecord | None, new: StorageClassRecord | None
        ) -> None:
            if any(c is not None and c.provisioner == name for c in (old, new)):
                self.local_path.poke_capacity()
            if new is None or new.provisioner != name:
                return
            for uid, claim in self.claims.items():
                if claim.storage_class_name == key and not claim.volume_name:
                    self._queue.add((CLAIM, uid))

        def on_node(key: str, old: NodeRecord | None, new: NodeRecord | None) -> None:
            if new is not None and old is not None:
                if new.labels.get(HOSTNAME_LABEL) != old.labels.get(HOSTNAME_LABEL):
                    self.local_path.poke_capacity()
                return
            self.local_path.poke_capacity()
            # A node came or went: claims waiting for it are affected, and so may be any of our
            # volumes (with a custom nodeAffinityKey the label value is not the node name).
            for uid, claim in self.claims.items():
                if claim.selected_node == key and not claim.volume_name:
                    self._queue.add((CLAIM, uid))
            for volume_name, volume in self.volumes.items():
                if volume.annotations.get(PROVISIONED_BY) == name:
                    self._queue.add((VOLUME, volume_name))

        def on_helper_pod(key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            if self.local_path.helper_pod_changed(old, new):
                # No API call on the informer's thread: a worker collects it.
                self._queue.add((HELPER_POD, key))

        self.claims.add_event_handler(on_claim, on_claim, None)
        wake_clones = self.local_path.wake_clones
        self.claims.add_event_handler(wake_clones, wake_clones, wake_clones)
        self.volumes.add_event_handler(on_volume, on_volume, on_volume)
        self.classes.add_event_handler(on_class, on_class, on_class)
        self.nodes.add_event_handler(on_node, on_node, on_node)
        self.helper_pods.add_event_handler(on_helper_pod, on_helper_pod, on_helper_pod)

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
                # A key handed to the helper pods keeps its failures: its helper's end queues it
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
            return self.local_path.reconcile_claim(name)
        if kind == VOLUME:
            return self.local_path.reconcile_volume(name)
        self.local_path.collect_helper_pod(name)
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


def _budget_changed(old: VolumeRecord | None, new: VolumeRecord | None, name: str) -> bool:
    """Whether a PV event can change what our paths have free: one of ours came, went, or
    changed size."""
    ours = [v for v in (old, new) if v is not None and v.annotations.get(PROVISIONED_BY) == name]
    if not ours:
        return False
    return old is None or new is None or old.capacity != new.capacity


def _helper_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """Helper pods are few and short-lived: keep them whole (the runs read their status; the
    decoding drops managedFields)."""
    return obj
