"""The batcher between the workers and the helper pods, with the pod runs replaced by a fake
that the test holds and releases (the pods themselves are tested against the local cluster)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.helper_pods.batch_pod_shapes import batch_pod_name
from provisioner.helper_pods.pod_batcher import (
    DROPPED,
    BatchSettings,
    HelperPodStuck,
    PodBatcher,
    VolumeJob,
)
from provisioner.helper_pods.pod_index import ServingPod
from provisioner.helper_pods.pod_outcomes import HelperPodFailed
from provisioner.helper_pods.pod_runs import BatchResults, RunResult
from provisioner.helper_pods.pod_shapes import HelperAction, HelperTarget
from provisioner.kube.client import ObjectReference
from provisioner.provisioning.volume_decisions import TeardownPlan

BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",'
    ' "paths": [{"path": "/opt/a", "create": true}]}]}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)
WAIT = 10.0


def plan(number: int, node: str = "node-1", path: str = "") -> TeardownPlan:
    return TeardownPlan(
        volume_name=f"pvc-{number}",
        path=path or f"/opt/a/pvc-{number}",
        node_name=node,
        volume_mode="Filesystem",
        size_bytes=1,
        delete_volume=True,
        remove_finalizer=True,
        base_path="/opt/a",
    )


def job(number: int, action: HelperAction = "create", **kw: Any) -> VolumeJob[str]:
    reference = ObjectReference(kind="PersistentVolume", name=f"pvc-{number}")
    return VolumeJob(f"key-{number}", action, plan(number, **kw), BUNDLE, reference)


class FakeRuns:
    """Each run waits until the test releases it; `failing` volumes fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.release = threading.Semaphore(0)
        """Ends whichever run takes it."""
        self.released: set[str] = set()
        """Volumes whose run may end (`release_volume`), for tests where two runs wait at once
        and a general release could end the wrong one."""
        self.failing: set[str] = set()
        self.early: set[str] = set()
        """Volumes a batch reports as soon as it starts, before the test releases it."""
        self.broken = False
        self.slow_delete: threading.Event | None = None
        self.started = threading.Condition()
        self.deleted: list[str] = []
        """Pods we did not start, deleted by name."""

    def delete_pod(self, name: str) -> None:
        self.deleted.append(name)

    def _wait(self, kind: str, volumes: tuple[str, ...]) -> None:
        with self.started:
            self.calls.append((kind, volumes))
            self.started.notify_all()
        deadline = time.monotonic() + WAIT
        while not self.release.acquire(timeout=0.01):
            with self.started:
                if self.released & set(volumes):
                    self.released -= set(volumes)
                    break
            assert time.monotonic() < deadline, f"{volumes} never released"
        if self.broken:
            raise OSError("the API went away")

    def run(self, action: HelperAction, target: HelperTarget, bundle: Any, permit: Any) -> float:
        self._wait("single", (target.volume_name,))
        if target.volume_name in self.failing:
            raise HelperPodFailed(f"lps/helper-{action}-{target.volume_name}", 1, "Error", "no")
        return 1.0

    def run_batch(
        self,
        action: HelperAction,
        targets: Sequence[HelperTarget],
        bundle: Any,
        *,
        permits: Any,
    ) -> Iterator[BatchResults]:
        names = tuple(target.volume_name for target in targets)
        settled = {name: RunResult(1.0) for name in names if name in self.early}
        if settled:
            yield BatchResults(settled, ended=False)
        self._wait("batch", names)
        failed = HelperPodFailed("lps/batch", 1, "Error", "no")
        results = {
            name: RunResult(2.0, failed if name in self.failing else None)
            for name in names
            if name not in settled
        }
        yield BatchResults(results, ended=True)
        if self.slow_delete is not None:
            assert self.slow_delete.wait(WAIT)  # the pod's deletion, after the report

    def release_volume(self, volume: str) -> None:
        with self.started:
            self.released.add(volume)

    def wait_calls(self, count: int) -> list[tuple[str, tuple[str, ...]]]:
        with self.started:
            assert self.started.wait_for(lambda: len(self.calls) >= count, WAIT), self.calls
            return list(self.calls)


class Harness:
    """The batcher's surroundings: its work queue (`add`), the pods serving each volume
    (`pods_serving`), the path book's last look (`helper_run_problem`: never a problem) and
    the event recorder (`warning`)."""

    def __init__(self, **settings: Any) -> None:
        self.runs = FakeRuns()
        self.done: list[str] = []
        self.done_changed = threading.Condition()
        self.pods: dict[str, dict[str, bool | ServingPod]] = {}
        self.deleted = self.runs.deleted
        self.warnings: list[tuple[ObjectReference, str, str]] = []
        self.batcher: PodBatcher[str] = PodBatcher(
            cast(Any, self.runs),
            BatchSettings(**{"pods_per_node": 1, **settings}),
            queue=self,
            serving=self,
            checks=self,
            recorder=self,
        )

    def add(self, key: str) -> None:
        with self.done_changed:
            self.done.append(key)
            self.done_changed.notify_all()

    def helper_run_problem(self, volume_name: str, *, teardown: bool) -> str | None:
        return None

    def warning(self, involved: ObjectReference, reason: str, message: str) -> None:
        self.warnings.append((involved, reason, message))

    def pods_serving(self, volume: str) -> dict[str, ServingPod]:
        """A pod given as a bool runs (or not) on node-1."""
        return {
            name: pod if isinstance(pod, ServingPod) else ServingPod(pod, "node-1", "Running")
            for name, pod in self.pods.get(volume, {}).items()
        }

    def wait_done(self, *keys: str) -> None:
        with self.done_changed:
            assert self.done_changed.wait_for(lambda: set(keys) <= set(self.done), WAIT)


def test_a_lone_volume_runs_at_once_in_its_own_pod_and_its_result_waits_for_its_key() -> None:
    h = Harness()
    h.batcher.submit(job(1))
    assert h.runs.wait_calls(1) == [("single", ("pvc-1",))]
    assert h.batcher.take("key-1") is None, "still running"
    assert h.batcher.in_flight_pods() == {
        "helper-prepare-pvc-1",
        "helper-create-pvc-1",
        "helper-clone-pvc-1",
        "helper-finish-pvc-1",
    }
    h.runs.release.release()
    h.wait_done("key-1")
    assert h.batcher.take("key-1") == RunResult(1.0)
    assert h.batcher.in_flight_pods() == set()


def test_volumes_queued_behind_a_busy_node_share_its_next_pod_each_with_its_result() -> None:
    h = Harness(max_batch=2)
    for number in range(1, 5):
        h.batcher.submit(job(number))
    h.batcher.submit(job(9, node="node-2"))
    h.runs.failing = {"pvc-3"}
    calls = h.runs.wait_calls(2)
    assert sorted(calls) == [("single", ("pvc-1",)), ("single", ("pvc-9",))]
    # Each by name: once pvc-1 ends, its node's batch waits too, and could take a general release.
    h.runs.release_volume("pvc-9")
    h.runs.release_volume("pvc-1")
    h.wait_done("key-1", "key-9")
    calls = h.runs.wait_calls(3)
    assert calls[2] == ("batch", ("pvc-2", "pvc-3")), "the two oldest, capped at max_batch"
    assert batch_pod_name("create", ["pvc-2", "pvc-3"]) in h.batcher.in_flight_pods()
    h.runs.release.release()
    assert h.runs.wait_calls(4)[3] == ("single", ("pvc-4",))
    h.runs.release.release()
    h.wait_done("key-1", "key-2", "key-3", "key-4", "key-9")
    assert h.batcher.take("key-2") == RunResult(2.0)
    failed = h.batcher.take("key-3")
    assert failed is not None and isinstance(failed.error, HelperPodFailed)
    assert h.batcher.take("key-4") == RunResult(1.0)


def test_a_volume_that_may_not_share_a_pod_runs_alone_beside_the_node_s_batch() -> None:
    h = Harness()
    h.batcher.submit(job(1))
    h.batcher.submit(job(2, path="/opt/a/ns/claim-2"))  # nested: `prepare` first
    assert sorted(h.runs.wait_calls(2)) == [("single", ("pvc-1",)), ("single", ("pvc-2",))]
    h.runs.release.release()
    h.runs.release.release()
    h.wait_done("key-1", "key-2")


def test_a_pod_we_did_not_start_holds_its_volumes_until_it_is_gone_and_is_deleted() -> None:
    h = Harness()
    other = batch_pod_name("delete", ["pvc-1", "pvc-2"])
    h.pods["pvc-1"] = {other: True}
    h.batcher.submit(job(1, "delete"))
    assert h.deleted == [other]
    time.sleep(0.2)
    assert h.runs.calls == [], "not while that pod may run"
    h.pods["pvc-1"] = {other: False}
    h.batcher.pods_changed()
    assert h.runs.wait_calls(1) == [("single", ("pvc-1",))], "a finished pod runs nothing"
    assert h.deleted == [other], "asked once"
    h.runs.release.release()
    h.wait_done("key-1")


def test_a_pod_of_the_volume_s_own_name_is_adopted_by_a_run_of_its_own() -> None:
    h = Harness()
    h.batcher.submit(job(5))
    h.runs.wait_calls(1)
    h.pods["pvc-1"] = {"helper-delete-pvc-1": True}  # a predecessor's teardown pod
    h.batcher.submit(job(1, "delete"))
    assert h.runs.wait_calls(2)[1] == ("single", ("pvc-1",))
    assert h.deleted == []
    h.runs.release.release()
    h.runs.release.release()
    h.wait_done("key-1", "key-5")


def test_stopping_drops_what_has_not_started_and_waits_for_what_runs() -> None:
    h = Harness()
    h.batcher.submit(job(1))
    h.batcher.submit(job(2))
    h.runs.wait_calls(1)
    h.batcher.stop()
    assert h.batcher.take("key-2") == RunResult(0.0, DROPPED)
    assert not h.batcher.wait_idle(time.monotonic() + 0.1)
    h.runs.release.release()
    assert h.batcher.wait_idle(time.monotonic() + WAIT)
    assert h.batcher.ended_keys() == ["key-1"]
    time.sleep(0.1)
    assert h.runs.calls == [("single", ("pvc-1",))], "nothing started after the stop"
    with pytest.raises(RuntimeError, match="stopping"):
        h.batcher.submit(job(3))


def test_a_run_that_breaks_fails_each_of_its_volumes() -> None:
    h = Harness()
    h.runs.broken = True
    h.batcher.submit(job(1))
    h.batcher.submit(job(2))
    h.batcher.submit(job(3))
    h.runs.release.release()
    h.runs.wait_calls(2)
    h.runs.release.release()
    h.wait_done("key-1", "key-2", "key-3")
    for key in ("key-1", "key-2", "key-3"):
        result = h.batcher.take(key)
        assert result is not None and isinstance(result.error, OSError)


def test_a_volume_is_handed_over_once() -> None:
    h = Harness()
    h.batcher.submit(job(1))
    with pytest.raises(RuntimeError, match="already"):
        h.batcher.submit(dataclasses.replace(job(1)))
    h.runs.release.release()
    h.wait_done("key-1")


def test_a_batch_s_results_are_reported_before_its_pod_is_deleted() -> None:
    """Nothing waits on the deletion: the volumes' keys come back and the node's next pod
    starts once the pod ended; its name stays ours until it is gone."""
    h = Harness(max_batch=2)
    h.runs.slow_delete = threading.Event()
    for number in range(1, 5):
        h.batcher.submit(job(number))
    h.runs.release.release()
    assert h.runs.wait_calls(2)[1] == ("batch", ("pvc-2", "pvc-3"))
    h.runs.release.release()
    h.wait_done("key-2", "key-3")
    assert h.batcher.take("key-2") == RunResult(2.0)
    name = batch_pod_name("create", ["pvc-2", "pvc-3"])
    assert name in h.batcher.in_flight_pods(), "still being deleted"
    assert h.runs.wait_calls(3)[2] == ("single", ("pvc-4",)), "the slot is free already"
    h.runs.slow_delete.set()
    h.runs.release.release()
    h.wait_done("key-4")
    deadline = time.monotonic() + WAIT
    while name in h.batcher.in_flight_pods():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_batch_s_volume_settled_early_gets_its_result_while_the_pod_keeps_its_slot() -> None:
    """Its key comes back (its PV need not wait for the pod's last volume) once, and the
    node's next volume still waits for the pod's end."""
    h = Harness(max_batch=2)
    h.runs.early = {"pvc-2"}
    for number in range(1, 4):
        h.batcher.submit(job(number))
    h.runs.release.release()
    assert h.runs.wait_calls(2)[1] == ("batch", ("pvc-2", "pvc-3"))
    h.wait_done("key-2")
    assert h.batcher.take("key-2") == RunResult(1.0)
    assert h.batcher.take("key-3") is None, "still running"
    h.batcher.submit(job(4))
    assert h.runs.calls[2:] == [], "the pod's slot is still held"
    # The volume's claim goes at once: its teardown waits for the pod, which is not deleted.
    pod = batch_pod_name("create", ["pvc-2", "pvc-3"])
    h.pods["pvc-2"] = {pod: True}
    teardown = VolumeJob("pv-2", "delete", plan(2, node="node-2"), BUNDLE)
    h.batcher.submit(teardown)
    assert h.batcher.counts().endswith(" 1 held"), h.batcher.counts()
    assert len(h.runs.calls) == 2, "the teardown has not started"
    assert h.deleted == []
    h.pods["pvc-2"] = {pod: False}  # it ended, as the informer will have seen by its report
    h.runs.release.release()
    h.wait_done("key-3")
    assert h.batcher.take("key-3") == RunResult(2.0)
    assert sorted(h.runs.wait_calls(4)[2:]) == [("single", ("pvc-2",)), ("single", ("pvc-4",))]
    assert h.done.count("key-2") == 1, "not reported again at the pod's end"
    h.runs.release.release()
    h.runs.release.release()
    h.wait_done("key-4", "pv-2")


def test_a_node_s_free_slot_runs_a_volume_at_once_and_the_overflow_shares_the_next() -> None:
    h = Harness(max_batch=2, pods_per_node=2)
    for number in range(1, 7):
        h.batcher.submit(job(number))
    assert sorted(h.runs.wait_calls(2)) == [("single", ("pvc-1",)), ("single", ("pvc-2",))]
    h.runs.release.release()
    # Four wait for two slots: the freed one takes its share, two.
    assert ("batch", ("pvc-3", "pvc-4")) in h.runs.wait_calls(3)
    for _ in range(4):
        h.runs.release.release()
    h.wait_done(*(f"key-{number}" for number in range(1, 7)))


STUCK = ServingPod(True, "node-1", "Running, being deleted since 2026-11-24T20:00:00Z")


def test_a_volume_held_past_the_hold_timeout_by_a_pod_on_its_node_fails_saying_why() -> None:
    """A pod on an unreachable node (or kept Terminating by a finalizer) never goes away: the
    volume waits for it only so long, then fails (and is retried by its key's backoff)."""
    h = Harness(hold_timeout=0.5)
    h.pods["pvc-1"] = {"helper-batch-delete-old": STUCK}
    h.batcher.submit(job(1, "delete"))
    assert h.batcher.liveness() is None
    assert h.batcher.counts() == "helper runs: 0 running, 1 held"
    h.wait_done("key-1")
    result = h.batcher.take("key-1")
    assert result is not None and isinstance(result.error, HelperPodStuck)
    assert str(result.error).startswith(
        "helper pod helper-batch-delete-old: still Running, being deleted since"
        " 2026-11-24T20:00:00Z on node node-1"
    )
    assert "remove the pod's finalizers" in str(result.error)
    assert h.runs.calls == [], "nothing ran beside that pod"
    assert h.batcher.counts() == ""


def test_a_shared_volume_stops_waiting_for_a_pod_stuck_on_another_node_with_a_warning() -> None:
    h = Harness(hold_timeout=0.5)
    h.pods["pvc-1"] = {"helper-batch-delete-old": dataclasses.replace(STUCK, node="node-2")}
    h.batcher.submit(job(1, "delete"))
    assert h.runs.wait_calls(1) == [("single", ("pvc-1",))]
    [(involved, reason, message)] = h.warnings
    assert (involved.name, reason) == ("pvc-1", "HelperPodStuck")
    assert "stopped waiting for the helper pods of volume pvc-1 after" in message
    assert "helper-batch-delete-old: Running, being deleted since" in message
    h.runs.release.release()
    h.wait_done("key-1")
    assert h.batcher.take("key-1") == RunResult(1.0)


def test_liveness_reports_a_run_or_a_held_volume_that_outlived_every_bound() -> None:
    h = Harness(hold_timeout=60)
    h.pods["pvc-2"] = {"helper-batch-delete-old": STUCK}
    h.batcher.submit(job(1))
    h.batcher.submit(job(2, "delete"))
    h.runs.wait_calls(1)
    assert h.batcher.counts() == "helper runs: 1 running, 1 held"
    assert h.batcher.liveness() is None
    # A recheck that never came (a wedged timer) leaves the volume held past its timeout.
    late = h.batcher.liveness(time.monotonic() + 60 + 3 * 10 + 1)
    assert late == "key-2 has been held for 91s (helper runs: 1 running, 1 held)"
    wedged = h.batcher.liveness(time.monotonic() + 10_000)
    assert wedged is not None and wedged.startswith("helper run helper-create-pvc-1 has run for")
    h.runs.release.release()
    h.wait_done("key-1")
    h.batcher.stop()
