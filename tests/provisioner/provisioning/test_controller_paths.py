"""The local-path provisioner's side of the path book, without a cluster: a path stays taken
until the work on it ended, and a helper run is checked against the book once more just before
its pod would be built. The helper runs are a fake the test holds and releases; the informers
stay empty (no claim or PV is seen), which is all these paths need."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.helper_pods.pod_outcomes import HelperPodError, HelperPodFailed
from provisioner.helper_pods.pod_shapes import HelperAction, HelperTarget
from provisioner.helper_pods.pods import BatchSettings, PodSettings, RunRefused, RunResult
from provisioner.kube.client import ObjectReference
from provisioner.kube.metrics import Metrics
from provisioner.loop.controller import IN_BACKGROUND, SETTLED, Failed, WorkQueue
from provisioner.objects.records import ClaimRecord, StorageClassRecord, VolumeRecord
from provisioner.provisioning.actions import ActionFailed, VolumeSaveUnsettled
from provisioner.provisioning.annotations import (
    DIRECTORY_REMOVED_ANNOTATION,
    PROVISIONED_BY,
    VOLUME_FINALIZER,
)
from provisioner.provisioning.claims import ProvisionPlan
from provisioner.provisioning.local_path_provisioner import LocalPathProvisioner
from provisioner.provisioning.local_path_watches import watched_caches
from provisioner.provisioning.paths import PROVISIONING, RELEASED, TEARING_DOWN
from provisioner.provisioning.removals import SoleInstance
from provisioner.provisioning.volume_decisions import TeardownPlan
from provisioner.provisioning.work_keys import CLAIM, EXPANSION, HELPER_POD, VOLUME, Key
from tests.provisioner.removal_permits import permit_for

BUNDLE = load_config_bundle(
    json.dumps(
        {
            "nodePathMap": [
                {
                    "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                    # Made where missing: such a path's volumes may share a batch pod.
                    "paths": [{"path": "/data", "create": True}],
                }
            ]
        }
    ),
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)
HOST_N1 = ("kubernetes.io/hostname", "n1")
REFERENCE = ObjectReference(kind="PersistentVolume", name="pvc")
WAIT = 10.0


class GatedRuns:
    """Helper runs that wait while the gate is shut; records what ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[HelperAction, str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Semaphore(0)
        self.failures: dict[str, Exception] = {}
        """The volumes whose run fails, with what."""

    def run(self, action: HelperAction, target: HelperTarget, bundle: Any, permit: Any) -> float:
        self.ran.append((action, target.volume_name))
        self.waiting.release()
        assert self.gate.wait(WAIT)
        if target.volume_name in self.failures:
            raise self.failures[target.volume_name]
        return 1.0


class FakeActions:
    """The end of a setup or teardown fails as its helper did, or as `save_error` says; the
    helper runs the test holds (installed in the controller's helper pods)."""

    def __init__(self) -> None:
        self.helper_runs = GatedRuns()
        self.recorder = None
        self.save_error: Exception | None = None
        self.saves = 0

    def finish_provision(self, plan: Any, result: RunResult, started: Any, **_: Any) -> None:
        if result.error is not None:
            raise result.error
        self.saves += 1
        if self.save_error is not None:
            raise self.save_error

    def finish_teardown(self, plan: Any, name: Any, result: RunResult, started: Any) -> None:
        if result.error is not None:
            raise result.error


def provisioner() -> tuple[LocalPathProvisioner, WorkQueue[Key], FakeActions]:
    """The provisioner, the loop's queue it wakes keys on, and its fake actions."""

    def no_list(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no API call expected")

    actions = FakeActions()
    clients = cast(Any, SimpleNamespace(list_function=lambda path: no_list))
    queue: WorkQueue[Key] = WorkQueue("test")
    made = LocalPathProvisioner(
        clients,
        watched_caches(clients, helper_namespace="ns"),
        SimpleNamespace(current=BUNDLE),
        cast(Any, actions),
        Metrics(),
        leadership=SoleInstance(),
        queue=queue,
        provisioner_name="p",
        helper_pod=PodSettings("ns", "sa"),
        batch=BatchSettings(pods_per_node=1),
        capacity_min_interval=1.0,
    )
    # The helper pods' runs are the fake: the batcher and the one-off runs both use it.
    pods = made.helper_pods
    pods._runs = pods._batcher._runs = cast(Any, actions.helper_runs)
    return made, queue, actions


def teardown_plan(name: str, path: str) -> TeardownPlan:
    return TeardownPlan(
        volume_name=name,
        path=path,
        node_name="n1",
        volume_mode="Filesystem",
        size_bytes=1,
        delete_volume=True,
        remove_finalizer=True,
        base_path="/data",
    )


def provision_plan(uid: str, path: str) -> ProvisionPlan:
    claim = ClaimRecord(uid=uid, namespace="ns", name="c", requested_storage="1Gi")
    return ProvisionPlan(
        volume_name=f"pvc-{uid}",
        provisioner_name="p",
        claim=claim,
        storage_class=StorageClassRecord("local", "p"),
        node_name="n1",
        node_affinity=HOST_N1,
        base_path="/data",
        path=path,
        volume_type="hostPath",
        size_bytes=1,
    )


def start_teardown(lp: LocalPathProvisioner, name: str, path: str) -> Key:
    """A Released PV of ours whose teardown was decided and handed over."""
    lp._paths.record_volume(name, "n1", path, RELEASED, size_bytes=1)
    lp._paths.start_teardown(name)
    key = (VOLUME, name)
    plan = teardown_plan(name, path)
    lp._hand_over(
        key, "delete", plan, BUNDLE, "local", reference=REFERENCE, permit=permit_for(plan)
    )
    return key


def next_key(queue: WorkQueue[Key]) -> Key | None:
    """The next key the queue hands a worker (the batcher queues a key when its run ended)."""
    key = queue.get(timeout=WAIT)
    if key is not None:
        queue.done(key)
    return key


def test_a_pv_gone_while_its_teardown_waits_keeps_its_path_and_its_waiters_until_it_ended() -> None:
    lp, queue, actions = provisioner()
    runs = actions.helper_runs
    # The node is busy: one teardown runs, and holds the node's only slot.
    runs.gate.clear()
    busy = start_teardown(lp, "pvc-busy", "/data/ns/busy")
    assert runs.waiting.acquire(timeout=WAIT)
    old = start_teardown(lp, "pvc-old", "/data/ns/c")
    # A recreated claim of the same name renders /data/ns/c and waits for pvc-old.
    lp._waiting["pvc-old"] = {"uid-new"}
    # An admin deletes the Released PV (no finalizer of ours held it).
    lp.volume_gone("pvc-old")
    entry = lp._paths.get("pvc-old")
    assert entry is not None and entry.state == TEARING_DOWN
    assert len(queue) == 0, "the waiting claim was woken while the rm -rf is still queued"
    runs.gate.set()
    ended = {next_key(queue), next_key(queue)}
    assert ended == {busy, old}
    assert runs.ran == [("delete", "pvc-busy"), ("delete", "pvc-old")]
    lp.reconcile_volume("pvc-old")
    assert "pvc-old" not in lp._paths
    assert next_key(queue) == (CLAIM, "uid-new")
    lp.helper_pods.stop()


@pytest.mark.parametrize(
    ("error", "looked"),
    [
        (
            HelperPodFailed("ns/helper-delete-pvc-old", None, "DeadlineExceeded", "no container"),
            True,
        ),
        (HelperPodFailed("ns/helper-delete-pvc-old", 1, "Error", "rm: busy"), False),
    ],
    ids=["failed-at-its-deadline-before-running", "its-script-failed"],
)
def test_a_teardown_whose_pod_never_ran_goes_on_once_its_directory_is_gone(
    error: HelperPodFailed, looked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real kubelet fails a pod whose hostPath is missing at its deadline, its container never
    made (no exit code): a redone teardown (the directory went with an earlier one) then looks
    for the directory, and goes on when it is gone; a script that ran and failed is a failure."""
    lp, queue, actions = provisioner()
    actions.helper_runs.failures["pvc-old"] = error
    looked_for: list[str] = []

    def directory_gone(target: HelperTarget, bundle: Any) -> bool:
        looked_for.append(target.volume_name)
        return True

    monkeypatch.setattr(lp.helper_pods, "directory_gone", directory_gone)
    key = start_teardown(lp, "pvc-old", "/data/ns/c")
    assert next_key(queue) == key
    if looked:
        assert lp.reconcile_volume("pvc-old")
        assert "pvc-old" in lp._directories_removed
    else:
        with pytest.raises(HelperPodFailed):
            lp.reconcile_volume("pvc-old")
    assert looked_for == (["pvc-old"] if looked else [])
    lp.helper_pods.stop()


def test_a_queued_teardown_whose_path_came_to_be_shared_never_runs() -> None:
    lp, queue, actions = provisioner()
    runs = actions.helper_runs
    runs.gate.clear()
    start_teardown(lp, "pvc-busy", "/data/ns/busy")
    assert runs.waiting.acquire(timeout=WAIT)
    old = start_teardown(lp, "pvc-old", "/data/ns/c")
    # While it queued, a PV of ours showed up inside its path (the informer records it).
    lp._paths.record_volume("pvc-inner", "n1", "/data/ns/c/inner", "live")
    runs.gate.set()
    assert {next_key(queue), next_key(queue)} == {(VOLUME, "pvc-busy"), old}
    assert ("delete", "pvc-old") not in runs.ran
    with pytest.raises(RunRefused, match="pvc-inner"):
        lp.reconcile_volume("pvc-old")
    entry = lp._paths.get("pvc-old")
    assert entry is not None and entry.state == RELEASED, "decided again on the next look"
    lp.helper_pods.stop()


def test_a_batch_with_a_refused_volume_is_not_built_and_each_volume_says_why() -> None:
    lp, queue, actions = provisioner()
    runs = actions.helper_runs
    runs.gate.clear()
    start_teardown(lp, "pvc-busy", "/data/ns/busy")
    assert runs.waiting.acquire(timeout=WAIT)
    shared = start_teardown(lp, "pvc-shared", "/data/ns/c")
    other = start_teardown(lp, "pvc-other", "/data/ns/d")
    lp._paths.record_volume("pvc-inner", "n1", "/data/ns/c/inner", "live")
    runs.gate.set()
    assert {next_key(queue), next_key(queue), next_key(queue)} == {
        (VOLUME, "pvc-busy"),
        shared,
        other,
    }
    assert runs.ran == [("delete", "pvc-busy")], "the batch pod was built"
    with pytest.raises(RunRefused, match="pvc-inner"):
        lp.reconcile_volume("pvc-shared")
    with pytest.raises(RunRefused, match="its batch was refused"):
        lp.reconcile_volume("pvc-other")
    lp.helper_pods.stop()


@pytest.mark.parametrize(
    ("error", "kept"),
    [(VolumeSaveUnsettled("503 on the POST"), True), (ActionFailed("422 on the POST"), False)],
    ids=["unsettled", "refused"],
)
def test_a_save_that_may_have_happened_keeps_its_path_and_is_retried_as_a_save(
    error: Exception, kept: bool
) -> None:
    lp, queue, actions = provisioner()
    plan = provision_plan("uid-1", "/data/ns/c")
    lp._paths.reserve(plan.volume_name, plan.disk_node, plan.path, size_bytes=1)
    key = (CLAIM, "uid-1")
    lp._hand_over(key, "create", plan, BUNDLE, "local", reference=REFERENCE, permit=None)
    assert next_key(queue) == key
    actions.save_error = error
    with pytest.raises(type(error)):
        lp.reconcile_claim("uid-1")
    entry = lp._paths.get(plan.volume_name)
    assert (entry is not None and entry.state == PROVISIONING) is kept
    assert (key in lp._handoffs) is kept
    # The key's retry saves the same PV again, with no new helper run, claim or not (the
    # informer has none here: a PV saved for a deleted claim is Released and torn down).
    actions.save_error = None
    assert lp.reconcile_claim("uid-1") is True
    assert actions.saves == (2 if kept else 1)
    assert actions.helper_runs.ran == [("create", plan.volume_name)]
    lp.helper_pods.stop()


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (True, SETTLED),
        (False, IN_BACKGROUND),
        (ActionFailed("PV create refused: 403"), Failed("PV create refused: 403")),
        (
            HelperPodFailed("h", 1, "Error", "no space"),
            Failed("helper pod h: failed (Error, exit code 1): no space"),
        ),
    ],
    ids=["settled", "in-background", "action-failed", "helper-failed"],
)
def test_what_a_reconcile_of_the_provisioner_becomes_for_the_loop(
    answer: bool | Exception, outcome: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made, _, _ = provisioner()
    heard: list[tuple[str, str]] = []

    def answered(kind: str) -> Any:
        def reconcile(name: str) -> bool:
            heard.append((kind, name))
            if isinstance(answer, Exception):
                raise answer
            return answer

        return reconcile

    monkeypatch.setattr(made, "reconcile_claim", answered(CLAIM))
    monkeypatch.setattr(made, "reconcile_volume", answered(VOLUME))
    assert made.reconcile((CLAIM, "u-1")) == outcome
    assert made.reconcile((VOLUME, "pvc-1")) == outcome
    assert heard == [(CLAIM, "u-1"), (VOLUME, "pvc-1")]


def test_an_unexpected_error_goes_to_the_loop_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    made, _, _ = provisioner()

    def broken(uid: str) -> bool:
        raise KeyError("a bug")

    monkeypatch.setattr(made, "reconcile_claim", broken)
    with pytest.raises(KeyError):
        made.reconcile((CLAIM, "u-1"))


def test_an_expansion_key_of_a_claim_the_cache_has_not_is_settled_without_a_write() -> None:
    """No claim, nothing to grow: the fake actions would fail on any call."""
    made, _, _ = provisioner()
    assert made.reconcile((EXPANSION, "u-1")) == SETTLED


def test_a_helper_pod_key_the_cache_has_not_is_settled() -> None:
    """A leftover that went already (the informer never started here): nothing to delete."""
    made, _, _ = provisioner()
    assert made.reconcile((HELPER_POD, "ns/h")) == SETTLED


def test_a_teardown_whose_directory_only_seems_gone_fails_and_says_the_disk_is_not_mounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The teardown pod never ran (its directory is missing), and the look at whether it is
    gone refused: the base path is declared a mount point with no filesystem mounted there.
    The teardown fails (retried), its error (the Warning's text) says both, and the path stays
    Released in the book, decided again."""
    lp, queue, actions = provisioner()
    never_ran = HelperPodFailed("ns/helper-delete-pvc-old", None, "DeadlineExceeded", "")
    actions.helper_runs.failures["pvc-old"] = never_ran
    refusal = (
        "refusing /data/ns/c: its base path /data is declared a mount point (mountPoint in"
        " config.json), but no filesystem is mounted there on this node: mount it (see"
        " /etc/fstab), or correct config.json"
    )

    def directory_gone(target: HelperTarget, bundle: Any) -> bool:
        raise HelperPodFailed("ns/helper-presence-x", 1, "Error", refusal)

    monkeypatch.setattr(lp.helper_pods, "directory_gone", directory_gone)
    key = start_teardown(lp, "pvc-old", "/data/ns/c")
    assert next_key(queue) == key
    with pytest.raises(HelperPodError) as raised:
        lp.reconcile_volume("pvc-old")
    said = str(raised.value)
    assert said.startswith("helper pod ns/helper-delete-pvc-old: failed (DeadlineExceeded"), said
    assert f"whether its directory is gone is not known: {refusal}" in said
    assert "pvc-old" not in lp._directories_removed
    entry = lp._paths.get("pvc-old")
    assert entry is not None and entry.state == RELEASED
    lp.helper_pods.stop()


def test_a_removed_volume_s_pv_is_deleted_once_though_its_finalizer_s_removal_is_seen_first() -> (
    None
):
    """A Released PV whose directory its node removed: the finalizer's removal and the DELETE
    go out; the event of the first, read before that of the second, brings the key back with
    the PV still Released and without our finalizer. No second DELETE is sent for it (a
    release of many volumes spends the client's budget on none); a PV of that name made
    again after the first went is deleted as any."""
    lp, _, actions = provisioner()
    finished: list[tuple[str, bool, bool]] = []

    def finish_removed_volume(name: str, *, delete_volume: bool, remove_finalizer: bool) -> None:
        finished.append((name, delete_volume, remove_finalizer))

    actions.finish_removed_volume = finish_removed_volume  # type: ignore[attr-defined]
    released = VolumeRecord(
        "pvc-gone",
        annotations={PROVISIONED_BY: "p", DIRECTORY_REMOVED_ANNOTATION: "true"},
        phase="Released",
        reclaim_policy="Delete",
        finalizers=(VOLUME_FINALIZER,),
    )
    lp._caches.volumes._store("pvc-gone", released)
    assert lp.reconcile_volume("pvc-gone")
    assert finished == [("pvc-gone", True, True)]
    lp._caches.volumes._store("pvc-gone", msgspec.structs.replace(released, finalizers=()))
    assert lp.reconcile_volume("pvc-gone")
    assert finished == [("pvc-gone", True, True)]
    lp.volume_gone("pvc-gone")
    assert lp.reconcile_volume("pvc-gone")
    assert finished == [("pvc-gone", True, True), ("pvc-gone", True, False)]
