"""The pod start model's node lanes (localcluster/pod_start.py): the pods of one node take its
lane one after another for the lane's part of their sandbox, so a node starting many pods at
once finishes them staggered; pods on other nodes never wait for them. Pure: a fake clock, or
short times."""

from __future__ import annotations

import threading
import time

import pytest

from bench.stats import percentile
from localcluster.pod_start import FAST, KUBELET, NodeLanes, PodStartModel

MODEL = PodStartModel(sandbox_seconds=1.0, container_seconds=1.0, lane_seconds=0.25)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pods_asking_at_once_on_one_node_take_its_lane_in_turn() -> None:
    lanes = NodeLanes(MODEL, FakeClock())
    assert [lanes.sandbox_seconds("a") for _ in range(4)] == [1.0, 1.25, 1.5, 1.75]


def test_pods_on_another_node_do_not_wait_for_them() -> None:
    lanes = NodeLanes(MODEL, FakeClock())
    assert [lanes.sandbox_seconds("a") for _ in range(3)] == [1.0, 1.25, 1.5]
    assert [lanes.sandbox_seconds("b") for _ in range(2)] == [1.0, 1.25]
    assert lanes.sandbox_seconds("a") == 1.75


def test_a_pod_waits_only_for_what_is_left_of_the_lane() -> None:
    clock = FakeClock()
    lanes = NodeLanes(MODEL, clock)
    assert [lanes.sandbox_seconds("a") for _ in range(3)] == [1.0, 1.25, 1.5]  # free at +0.75
    clock.now += 0.5
    assert lanes.sandbox_seconds("a") == pytest.approx(1.25)  # 0.25 left, then its own
    clock.now += 10
    assert lanes.sandbox_seconds("a") == 1.0  # long free again: a pod alone


def test_no_lane_no_wait_however_many_pods() -> None:
    no_lane = NodeLanes(PodStartModel(sandbox_seconds=1.0), FakeClock())
    assert {no_lane.sandbox_seconds("a") for _ in range(20)} == {1.0}
    fast = NodeLanes(FAST, FakeClock())
    assert {fast.sandbox_seconds("a") for _ in range(20)} == {0.0}


def test_the_lane_is_part_of_the_sandbox_and_never_negative() -> None:
    with pytest.raises(ValueError, match="part of the sandbox"):
        PodStartModel(sandbox_seconds=0.5, lane_seconds=1.0)
    with pytest.raises(ValueError, match="cannot be negative"):
        PodStartModel(sandbox_seconds=1.0, lane_seconds=-0.1)


def test_a_pod_alone_costs_its_sandbox_and_each_container() -> None:
    assert KUBELET.alone_seconds(1) == pytest.approx(2.2)
    assert KUBELET.alone_seconds(2) == pytest.approx(3.2)
    assert FAST.alone_seconds(9) == 0.0


def test_the_kubelet_model_fits_a_node_starting_ten_and_twelve_pods_at_once() -> None:
    """docs/benchmarks-method.md, "The kubelet model against the real nodes": ours' two-container
    teardown pods, 10 (20 claims) and 12 (40 claims) a node at once, created to Succeeded on
    the real nodes: p50 5.32 and 6.59 s, max 6.78 and 7.98 s, where a pod alone is 3.2 s."""
    for pods, real_p50, real_max in ((10, 5.32, 6.78), (12, 6.59, 7.98)):
        lanes = NodeLanes(KUBELET, FakeClock())
        took = [lanes.sandbox_seconds("n") + 2 * KUBELET.container_seconds for _ in range(pods)]
        assert percentile(took, 0.5) == pytest.approx(real_p50, rel=0.2)
        assert max(took) == pytest.approx(real_max, rel=0.05)


def test_waiting_threads_finish_staggered_on_one_node_and_together_across_nodes() -> None:
    model = PodStartModel(sandbox_seconds=0.2, lane_seconds=0.2)
    lanes = NodeLanes(model)
    cancelled = threading.Event()
    took: dict[str, float] = {}
    started = time.monotonic()

    def start(name: str, node: str) -> None:
        assert lanes.wait_sandbox(node, cancelled)
        took[name] = time.monotonic() - started

    threads = []
    for name, node in (("a0", "a"), ("b0", "b"), ("a1", "a"), ("a2", "a")):
        threads.append(threading.Thread(target=start, args=(name, node)))
        threads[-1].start()
        time.sleep(0.01)  # asks in this order
    for thread in threads:
        thread.join()
    assert took["b0"] < 0.35 and took["a0"] < 0.35
    assert 0.38 < took["a1"] < 0.55
    assert 0.58 < took["a2"] < 0.75


def test_a_cancelled_pod_stops_waiting_for_the_lane() -> None:
    lanes = NodeLanes(PodStartModel(sandbox_seconds=30, lane_seconds=30))
    cancelled = threading.Event()
    cancelled.set()
    started = time.monotonic()
    assert not lanes.wait_sandbox("a", cancelled)
    assert not lanes.wait_sandbox("a", cancelled)  # behind the first one's 30 s
    assert time.monotonic() - started < 1
