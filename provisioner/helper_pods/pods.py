"""The helper pods, end to end, behind one object: a volume's setup or teardown is handed over
(`submit`), its end is collected by its key (`take`), and the helper-pod informer's events come
straight in (`observe`). Inside: the pod event hub the runs follow their pods through, the
index of which pods serve which volume, the batcher that plans and runs the setups and
teardowns, and the runner that creates, watches and deletes each pod.

Nothing handed in leads back into a caller: a key whose run ended is put on the loop's work
queue (`KeyQueue`, which the loop reads), a Warning goes to the event recorder on the object
the job names, and the one look into the caller's state, the path book's last check before a
pod is built, is a narrow query this module defines (`RunChecks`).

The other runs of the provisioner's helper pods go through here too, on the caller's thread:
a quota's resize, a volume's own pods outside the batches (a give-back), the `finish` step
alone (a clean-up), a look for a directory, and a scan's pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Mapping
from typing import Any, Generic, TypeVar

from urllib3.exceptions import HTTPError

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.pod_batcher import (
    BatchSettings,
    KeyQueue,
    PodBatcher,
    RunChecks,
    RunRefused,
    VolumeJob,
    WarningRecorder,
)
from provisioner.helper_pods.pod_events import ADDED, DELETED, MODIFIED, PodEventHub
from provisioner.helper_pods.pod_index import HelperPodIndex, is_finished
from provisioner.helper_pods.pod_runner import HelperPodError, PodRunner
from provisioner.helper_pods.pod_runs import PodRuns, PodSettings, RunResult
from provisioner.helper_pods.pod_shapes import HelperAction, HelperTarget
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients
from provisioner.kube.informer import Informer
from provisioner.kube.metrics import Metrics
from provisioner.provisioning.actions import ActionFailed
from provisioner.provisioning.expansion import Expand
from provisioner.provisioning.removal_gate import RemovalPermit

__all__ = [
    "POD_CLEANUP_SECONDS",
    "BatchSettings",
    "HelperPods",
    "KeyQueue",
    "PodSettings",
    "RunChecks",
    "RunRefused",
    "RunResult",
    "VolumeJob",
    "WarningRecorder",
]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

POD_CLEANUP_SECONDS = 8.0
"""At a stop, how long clearing the helper pods may take: a running one is gone after its
grace (5 s unless helperPod.yaml says otherwise) and the kubelet's next look."""
LIST_LEFT_PODS_SECONDS = 10.0
"""As this process begins to lead, how long the list of the helper pods left may take."""
CLEAR_POLL_SECONDS = 0.2
"""At a stop, how often the helper pods are listed again until they are gone."""


class HelperPods(Generic[K]):
    """Every helper pod of this provisioner's volumes, by the work-queue key `K` of the claim
    or volume a setup or teardown is for."""

    def __init__(
        self,
        clients: KubeClients,
        recorder: WarningRecorder,
        metrics: Metrics,
        settings: PodSettings,
        batch: BatchSettings,
        *,
        queue: KeyQueue[K],
        checks: RunChecks,
    ) -> None:
        # Runs follow their pod through the helper-pod informer (`observe`), not a watch each.
        self._events = PodEventHub()
        self._runner = PodRunner(clients, pod_events=self._events)
        self._runs = PodRuns(self._runner, metrics, settings)
        self._index = HelperPodIndex()
        self._batcher: PodBatcher[K] = PodBatcher(
            self._runs,
            batch,
            queue=queue,
            serving=self._index,
            checks=checks,
            recorder=recorder,
        )

    # -- setups and teardowns, by key ------------------------------------------------------

    def submit(self, job: VolumeJob[K]) -> None:
        """Hand a volume's setup or teardown over: it runs when the batcher says, and its key
        is put on the queue when it ended."""
        self._batcher.submit(job)

    def take(self, key: K) -> RunResult | None:
        """The key's run once it ended (then forgotten); None while it has not."""
        return self._batcher.take(key)

    def observe(self, informer: Informer[dict[str, Any]]) -> None:
        """Hear the helper-pod informer's events (before it starts): the runs follow their
        pods through it, not through a watch each."""
        informer.add_event_handler(self._pod_changed, self._pod_changed, self._pod_changed)

    def _pod_changed(
        self, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        """A helper pod came, changed or went (on the informer's thread): the runs following it
        and the volumes held for it hear of it."""
        if new is None:
            if old is not None:
                self._events.publish(DELETED, old)
        else:
            self._events.publish(MODIFIED if old is not None else ADDED, new)
        current = new if new is not None else old
        if current is not None and self._index.update(str(current["metadata"]["name"]), new):
            self._batcher.pods_changed(None if new is not None else current["metadata"]["name"])

    def collect_leftover(self, pod: Mapping[str, Any] | None) -> None:
        """A finished helper pod no run of ours follows is a leftover of a crashed run:
        delete it."""
        if pod is None or not is_finished(pod):
            return
        name = str(pod["metadata"]["name"])
        deleting = pod["metadata"].get("deletionTimestamp") is not None
        if deleting or name in self._batcher.in_flight_pods():
            return
        log.info(
            "deleting leftover helper pod %s (%s)", name, (pod.get("status") or {}).get("phase")
        )
        self._runs.delete_pod(name)

    def clear_left_pods(self) -> None:
        """As this process begins to lead, before a worker takes a key: every helper pod there
        is was left by whoever led before, which crashed or lost its Lease (a leader that
        stops clears its own, `clear_pods`). Each is deleted now, and its deletion tried
        again until the server took it, rather than adopted or waited out one by one: a pod
        left running serves volumes that nothing follows until their keys come up, and a
        finished one waits for the next resync. Nothing is lost: a pod's work is accounted
        for by its volume's key (a claim still unbound, a PV still there), which runs it
        again, idempotently; and never beside it: a volume whose pod is still being deleted
        waits until it is gone (`PodBatcher`, and `PodRunner` for a pod of the volume's own
        name). Left to those same paths when the pods cannot be listed now."""
        try:
            pods = self._runs.helper_pods(timeout=LIST_LEFT_PODS_SECONDS)
        except (ApiError, HTTPError, OSError) as error:
            log.warning(
                "listing the helper pods an earlier leader left: %s; each is deleted when its"
                " volume's turn comes",
                error,
            )
            return
        for pod in pods:
            metadata = pod["metadata"]
            if metadata.get("deletionTimestamp") is not None:
                continue
            log.info(
                "deleting helper pod %s (%s), left by an earlier leader; its volumes' work is"
                " redone once it is gone",
                metadata["name"],
                (pod.get("status") or {}).get("phase"),
            )
            self._runs.delete_left_pod(str(metadata["name"]), str(metadata["uid"]))

    # -- stopping and health ---------------------------------------------------------------

    def stop(self) -> None:
        """Start no run more; forget what has not started (whoever leads next redoes it)."""
        self._batcher.stop()

    def wait_idle(self, deadline: float) -> list[K]:
        """Until the running pods ended or `deadline` (monotonic): the keys whose run ended
        and that no reconcile has taken yet."""
        self._batcher.wait_idle(deadline)
        return self._batcher.ended_keys()

    def clear_pods(self) -> None:
        """At a stop, last, while this process still holds the lease: no helper pod is left
        for whoever leads next, within `POD_CLEANUP_SECONDS`. A pod left behind, running or
        done, is one the next leader has to replace or wait out, and another version of this
        provisioner (an upgrade, a rollback) may not do that well: 0.1.0 waits out its helper
        timeout on one (docs/upgrading.md). So: no pod is created any more (`PodRuns.close`,
        which waits for creations already sent), every helper pod of our namespace is deleted
        (of one still running, a stuck image or a slow script, whoever leads next redoes the
        action; a finished one has told what it had to), and the stop waits until they are
        gone."""
        deadline = time.monotonic() + POD_CLEANUP_SECONDS
        if not self._runs.close(deadline):
            log.warning("a helper pod's creation is still unanswered at shutdown")
        in_flight = self._batcher.in_flight_pods()
        left: set[str] = set()
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                pods = self._runs.helper_pods(timeout=min(3.0, remaining))
            except (ApiError, HTTPError, OSError) as error:
                log.warning("listing the helper pods at shutdown: %s", error)
                pods = None
            if pods is not None:
                left = {str(pod["metadata"]["name"]) for pod in pods}
                if not left:
                    return
                for pod in pods:
                    if pod["metadata"].get("deletionTimestamp") is None:
                        self._delete_at_stop(pod, in_flight, deadline)
            time.sleep(min(CLEAR_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        log.warning(
            "helper pods still there at shutdown, left to the next leader: %s",
            ", ".join(sorted(left)) or "(the API did not say)",
        )

    def _delete_at_stop(self, pod: Mapping[str, Any], in_flight: set[str], deadline: float) -> None:
        name = str(pod["metadata"]["name"])
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        if is_finished(pod):
            log.info("deleting helper pod %s at shutdown (%s)", name, pod["status"]["phase"])
        else:
            whose = "ours" if name in in_flight else "not followed by a run of ours"
            log.warning("helper pod %s (%s) still running at shutdown: deleting it", name, whose)
        self._runs.delete_pod(name, timeout=min(3.0, remaining))

    def liveness(self) -> str | None:
        """None, or the helper runs and held volumes that outlived every bound."""
        return self._batcher.liveness()

    def counts(self) -> str:
        """The helper runs and held volumes, as /healthz shows them ("" when there are none)."""
        return self._batcher.counts()

    # -- runs on the caller's thread, outside the batches ----------------------------------

    def raise_quota(self, expansion: Expand, bundle: ConfigBundle) -> None:
        """The volume's hard quota raised to its new size (where the filesystem has one);
        raises `ActionFailed` when it was not."""
        try:
            self._runs.raise_quota(expansion, bundle)
        except HelperPodError as error:
            raise ActionFailed(f"raising the quota of {expansion.path}: {error}") from error

    def run_alone(
        self,
        action: HelperAction,
        target: HelperTarget,
        bundle: ConfigBundle,
        permit: RemovalPermit | None,
    ) -> float:
        """The volume's own pods, one step after another (see `PodRuns.run`); raises the first
        `HelperPodError`."""
        return self._runs.run(action, target, bundle, permit)

    def finish(self, target: HelperTarget, bundle: ConfigBundle, permit: RemovalPermit) -> None:
        """The `finish` step alone (see `PodRuns.finish`); raises `HelperPodError`."""
        self._runs.finish(target, bundle, permit)

    def directory_gone(self, target: HelperTarget, bundle: ConfigBundle) -> bool:
        """Whether the volume's directory is gone, by a read-only look (see
        `PodRuns.directory_gone`); raises `HelperPodError` when the look proved nothing."""
        return self._runs.directory_gone(target, bundle)

    def run_for_message(self, manifest: Mapping[str, Any], timeout: float) -> tuple[float, str]:
        """A pod of the caller's making (a scan's), run to its end: its seconds and the message
        it left (see `PodRunner.run_for_message`)."""
        return self._runner.run_for_message(manifest, timeout)
