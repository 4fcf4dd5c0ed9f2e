"""The helper-pod runner's pod start model (localcluster/pod_start.py): with one, a helper pod
takes the sandbox's time before its first container and a container's time before each; a pod
deleted while its sandbox is being made never runs its command. The tests' default adds
nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import ClusterOptions, LocalCluster, NodeSpec
from localcluster.pod_start import FAST, KUBELET, MODELS, NodeLanes, PodStartModel
from tests.localcluster.pods import helper_pod

SANDBOX_SECONDS = 2.0
CONTAINER_SECONDS = 1.0
TERMINAL = ("Succeeded", "Failed")


def test_the_default_adds_nothing_and_the_bench_model_is_the_kubelets() -> None:
    cancelled = threading.Event()
    started = time.monotonic()
    assert NodeLanes(FAST).wait_sandbox("node", cancelled) and FAST.wait_container(cancelled)
    assert time.monotonic() - started < 0.05
    assert ClusterOptions().pod_start == FAST
    assert MODELS == {"fast": FAST, "kubelet": KUBELET}
    assert KUBELET.sandbox_seconds > 0 and KUBELET.container_seconds > 0


def test_a_cancelled_pod_stops_waiting() -> None:
    cancelled = threading.Event()
    cancelled.set()
    started = time.monotonic()
    assert not NodeLanes(PodStartModel(sandbox_seconds=30)).wait_sandbox("node", cancelled)
    assert not PodStartModel(container_seconds=30).wait_container(cancelled)
    assert time.monotonic() - started < 1


def test_negative_times_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        PodStartModel(sandbox_seconds=-1)


@pytest.fixture(scope="module")
def slow_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    options = ClusterOptions(
        nodes=(NodeSpec("slow-start"),),
        parent_dir=tmp_path_factory.mktemp("slow-start"),
        announce=False,
        pod_start=PodStartModel(SANDBOX_SECONDS, CONTAINER_SECONDS),
    )
    with LocalCluster.start(options) as cluster:
        yield cluster


@pytest.mark.cluster
def test_a_helper_pod_takes_the_sandbox_and_each_containers_time(
    slow_cluster: LocalCluster,
) -> None:
    slow_cluster.create_namespace("timed")
    pod = helper_pod("timed", "slow-start", "true")
    main = pod["spec"]["containers"][0]
    pod["spec"]["initContainers"] = [{**main, "name": "init"}]
    started = time.monotonic()
    slow_cluster.create_pod("timed", pod)
    done = slow_cluster.wait_for_pod_phase("timed", "timed", TERMINAL)
    took = time.monotonic() - started
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert took >= SANDBOX_SECONDS + 2 * CONTAINER_SECONDS, took


@pytest.mark.cluster
def test_a_pod_deleted_while_its_sandbox_is_made_never_runs(
    slow_cluster: LocalCluster,
) -> None:
    slow_cluster.create_namespace("deleted")
    marker = Path("/opt/lps/deleted-ran")
    pod = helper_pod("deleted", "slow-start", f"touch {marker}")
    slow_cluster.create_pod("deleted", pod)
    slow_cluster.core_v1().delete_namespaced_pod("deleted", "deleted", grace_period_seconds=0)
    time.sleep(SANDBOX_SECONDS + CONTAINER_SECONDS + 1)  # past when it would have run
    on_node = slow_cluster.node_dir("slow-start") / marker.relative_to("/")
    assert not on_node.exists()
