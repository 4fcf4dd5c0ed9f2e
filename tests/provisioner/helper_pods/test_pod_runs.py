"""Running batch pods, with the pod runner replaced by a fake that lets every pod succeed (the
pods themselves are tested against the local cluster)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, cast

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.helper_pods.batch_pod_shapes import batch_volume_names
from provisioner.helper_pods.pod_outcomes import HelperPodFailed
from provisioner.helper_pods.pod_runner import PodStates
from provisioner.helper_pods.pod_runs import (
    HelperPodNotBuilt,
    PodRuns,
    PodSettings,
    RunResult,
)
from provisioner.kube.metrics import Metrics
from provisioner.provisioning.volume_decisions import TeardownPlan
from tests.provisioner.removal_permits import permits_for

BUNDLE = load_config_bundle(
    json.dumps(
        {
            "nodePathMap": [
                {
                    "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                    # Made where missing: such a path's volumes may share a batch pod.
                    "paths": [{"path": "/opt/a", "create": True}],
                }
            ]
        }
    ),
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


def target(number: int, size_bytes: int = 1024) -> TeardownPlan:
    return TeardownPlan(
        volume_name=f"pvc-{number}",
        path=f"/opt/a/pvc-{number}",
        node_name="node-1",
        volume_mode="Filesystem",
        size_bytes=size_bytes,
        delete_volume=True,
        remove_finalizer=True,
        base_path="/opt/a",
    )


class SucceedingRunner:
    """Every pod succeeds; a batch pod's volume containers each report exit code 0."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.singles: list[str] = []
        self.messages: dict[str, str] = {}
        """A volume container's termination message, by container name (else success)."""

    def run(self, manifest: Mapping[str, Any], timeout: float) -> float:
        self.singles.append(manifest["metadata"]["name"])
        return 1.0

    def follow_to_end(self, manifest: Mapping[str, Any], timeout: float) -> PodStates:
        """The pod is seen twice per ended init container (as a kubelet writes its status, and
        as a watch re-read shows it again), with the volumes in `messages` reporting that
        message instead of success."""
        self.batches.append(batch_volume_names(manifest))
        inits: list[dict[str, Any]] = []
        for container in manifest["spec"]["initContainers"]:
            message = self.messages.get(container["name"], "lps-exit 0\n")
            state = {"terminated": {"exitCode": 0, "message": message}}
            inits.append({"name": container["name"], "state": state})
            yield {"status": {"phase": "Pending", "initContainerStatuses": list(inits)}}
            yield {"status": {"phase": "Pending", "initContainerStatuses": list(inits)}}
        final = {"status": {"phase": "Succeeded", "initContainerStatuses": inits}}
        done = {"terminated": {"exitCode": 0, "message": "lps-finish " + "s" * len(inits)}}
        final["status"]["containerStatuses"] = [{"name": "finish", "state": done}]
        return 2.0, final

    def delete(self, manifest: Mapping[str, Any]) -> None:
        pass


def run_batch(targets: list[TeardownPlan]) -> tuple[dict[str, RunResult], SucceedingRunner]:
    """Every volume's result of a run, whether it came in while the pod ran or at its end."""
    runner = SucceedingRunner()
    runs = PodRuns(cast(Any, runner), Metrics(), PodSettings("lps", "helper"))
    reported = list(runs.run_batch("create", targets, BUNDLE, permits=permits_for(targets)))
    assert [batch.ended for batch in reported][-1:] == [True], "the pod's end comes last"
    results = [name for batch in reported for name in batch.results]
    assert sorted(results) == sorted(set(results)), "each volume is reported once"
    return {name: result for batch in reported for name, result in batch.results.items()}, runner


def test_each_setup_is_reported_once_as_its_own_container_ends_and_failures_at_the_end() -> None:
    runner = SucceedingRunner()
    runner.messages = {"setup-1": "lps-exit 3\nno room\n"}
    runs = PodRuns(cast(Any, runner), Metrics(), PodSettings("lps", "helper"))
    targets = [target(1), target(2), target(3)]
    reported = list(runs.run_batch("create", targets, BUNDLE, permits=permits_for(targets)))
    early = [batch.results for batch in reported if not batch.ended]
    final = [batch.results for batch in reported if batch.ended]
    assert reported[-1].ended and len(final) == 1, "the pod's end comes last, once"
    assert [list(results) for results in early] == [["pvc-1"], ["pvc-3"]]
    assert all(result.error is None for results in early for result in results.values())
    assert list(final[0]) == ["pvc-2"], "the early ones are not reported again"
    assert "no room" in str(final[0]["pvc-2"].error)


def test_no_teardown_is_reported_before_its_pod_ends() -> None:
    runner = SucceedingRunner()
    runs = PodRuns(cast(Any, runner), Metrics(), PodSettings("lps", "helper"))
    targets = [target(1), target(2)]
    reported = list(runs.run_batch("delete", targets, BUNDLE, permits=permits_for(targets)))
    assert [batch.ended for batch in reported] == [True]
    assert sorted(reported[0].results) == ["pvc-1", "pvc-2"]


def test_a_volume_whose_part_cannot_be_built_fails_alone_and_the_batch_runs_without_it() -> None:
    """A size no string can hold (10**5000 bytes: str() refuses it) stands for any input that
    breaks one volume's part of the pod: before, the whole batch failed with it."""
    bad = dataclasses.replace(target(2), size_bytes=10**5000)
    results, runner = run_batch([target(1), bad, target(3)])
    assert runner.batches == [["pvc-1", "pvc-3"]]
    assert results["pvc-1"].error is None and results["pvc-3"].error is None
    error = results["pvc-2"].error
    assert isinstance(error, HelperPodNotBuilt), "a helper failure: a Warning on its claim"
    assert str(error).startswith("helper pod lps/helper-batch-create-")
    assert "not created: building the helper pod part of volume pvc-2:" in str(error)


def test_a_volume_whose_container_would_not_start_fails_alone() -> None:
    """An environment string over execve's limit (a 200 KB VOL_USER) never starts its
    container, and a kubelet starts none of the init containers after it: the pod's other
    volumes would have failed with it."""
    bad = dataclasses.replace(target(2), vol_user="u" * 200_000)
    results, runner = run_batch([target(1), bad, target(3)])
    assert runner.batches == [["pvc-1", "pvc-3"]]
    assert results["pvc-1"].error is None and results["pvc-3"].error is None
    error = results["pvc-2"].error
    assert isinstance(error, HelperPodNotBuilt)
    assert "over the 131072 execve takes in one argument or environment string" in str(error)


def test_the_one_volume_left_of_a_batch_runs_in_its_own_pod() -> None:
    bad = dataclasses.replace(target(2), size_bytes=10**5000)
    results, runner = run_batch([target(1), bad])
    assert runner.batches == []
    assert runner.singles == ["helper-create-pvc-1"]
    assert results["pvc-1"] == RunResult(1.0)
    assert isinstance(results["pvc-2"].error, HelperPodNotBuilt)


UNMOUNTED = (
    "refusing /opt/a/pvc-1: its base path /opt/a is declared a mount point (mountPoint in"
    " config.json), but no filesystem is mounted there on this node: mount it (see /etc/fstab),"
    " or correct config.json"
)


class RefusingLook(SucceedingRunner):
    """The presence look fails as PRESENCE_SCRIPT does through a declared mount point with no
    disk mounted."""

    def run_for_message(self, manifest: Mapping[str, Any], timeout: float) -> tuple[float, str]:
        raise HelperPodFailed(manifest["metadata"]["name"], 1, "Error", UNMOUNTED)


def test_a_presence_look_that_refused_proves_nothing_and_says_why() -> None:
    """A teardown pod that never started (its `Directory` hostPath missing) is followed by a
    look; one through a mount point whose disk is not mounted must not read as `gone` (the PV
    would go while its data waits on the disk), nor be lost: its refusal is raised."""
    runs = PodRuns(cast(Any, RefusingLook()), Metrics(), PodSettings("lps", "helper"))
    with pytest.raises(HelperPodFailed, match="no filesystem is mounted there"):
        runs.directory_gone(target(1), BUNDLE)
