"""Group while busy: when helper runs start and which volumes share a pod."""

from __future__ import annotations

import pytest

from provisioner.helper_pods.batch_planner import BatchPlanner, Launch

A = ("create", "node-a")
B = ("create", "node-b")
TAG = object()


def planner(max_batch: int = 3, pods_per_group: int = 1, singles: int = 2) -> BatchPlanner[str]:
    return BatchPlanner(max_batch=max_batch, pods_per_group=pods_per_group, max_single_pods=singles)


def jobs(launches: list[Launch[str]]) -> list[tuple[str, ...]]:
    return [launch.jobs for launch in launches]


def test_a_lone_volume_starts_at_once_in_a_pod_of_its_own() -> None:
    plan = planner()
    assert plan.submit("v1", A, TAG) == [Launch(A, ("v1",))]
    assert plan.submit("w1", B, TAG) == [
        Launch(B, ("w1",)),
    ], "another node is not busy"


def test_volumes_arriving_while_the_node_is_busy_go_together_when_it_frees() -> None:
    plan = planner(max_batch=3)
    first = plan.submit("v1", A, TAG)[0]
    for name in ("v2", "v3", "v4", "v5"):
        assert plan.submit(name, A, TAG) == []
    assert plan.waiting() == 4
    second = plan.finished(first)
    assert jobs(second) == [("v2", "v3", "v4")], "in arrival order, capped"
    assert jobs(plan.finished(second[0])) == [("v5",)]


def test_a_volume_takes_a_free_slot_of_its_own_and_only_the_overflow_waits() -> None:
    plan = planner(max_batch=3, pods_per_group=2)
    first = plan.submit("v1", A, TAG)
    assert jobs(first) == [("v1",)]
    second = plan.submit("v2", A, TAG)
    assert jobs(second) == [("v2",)], "a free slot: a pod of its own at once"
    for name in ("v3", "v4", "v5", "v6"):
        assert plan.submit(name, A, TAG) == [], "both slots are taken"
    third = plan.finished(first[0])
    assert jobs(third) == [("v3", "v4")], "a freed slot takes its share: half of four"
    assert jobs(plan.finished(second[0])) == [("v5",)], "half of two"
    assert jobs(plan.finished(third[0])) == [("v6",)]


def test_an_overflow_the_slots_can_hold_runs_a_pod_a_volume_as_slots_free() -> None:
    """Twenty claims on a node of twelve slots: the eight beyond them go a pod each as the
    first pods end, not together in the first (a pod of eight containers in turn)."""
    plan = planner(max_batch=12, pods_per_group=12)
    first = [launch for n in range(12) for launch in plan.submit(f"v{n}", A, TAG)]
    assert len(first) == 12 and all(len(launch.jobs) == 1 for launch in first)
    for n in range(12, 20):
        assert plan.submit(f"v{n}", A, TAG) == []
    freed = [launch for launch in first[:8] for launch in plan.finished(launch)]
    assert jobs(freed) == [(f"v{n}",) for n in range(12, 20)]


def test_a_flood_is_shared_out_over_the_slots_each_pod_at_most_max_batch() -> None:
    plan = planner(max_batch=4, pods_per_group=3)
    running = [launch for n in range(3) for launch in plan.submit(f"v{n}", A, TAG)]
    for n in range(3, 30):
        assert plan.submit(f"v{n}", A, TAG) == []
    sizes = []
    while running:  # the oldest pod ends first
        started = plan.finished(running.pop(0))
        sizes += [len(launch.jobs) for launch in started]
        running += started
    # 27 waiting over 3 slots: a share of 9, capped at 4; the shares shrink with the queue.
    assert sizes == [4, 4, 4, 4, 4, 3, 2, 1, 1]


def test_only_volumes_of_one_config_share_a_pod() -> None:
    plan = planner(max_batch=5)
    old, new = object(), object()
    first = plan.submit("v1", A, old)[0]
    plan.submit("v2", A, old)
    plan.submit("v3", A, new)
    plan.submit("v4", A, old)
    plan.submit("v5", A, new)
    second = plan.finished(first)
    assert jobs(second) == [("v2", "v4")]
    assert jobs(plan.finished(second[0])) == [("v3", "v5")]


def test_volumes_that_may_not_share_a_pod_run_alone_a_few_at_a_time() -> None:
    plan = planner(singles=2)
    first = plan.submit("s1", None, TAG)
    assert jobs(first) == [("s1",)]
    assert jobs(plan.submit("s2", None, TAG)) == [("s2",)]
    assert plan.submit("s3", None, TAG) == []
    assert jobs(plan.submit("v1", A, TAG)) == [("v1",)], "the groups' slots are apart"
    assert jobs(plan.finished(first[0])) == [("s3",)]


def test_dropping_forgets_what_has_not_started() -> None:
    plan = planner()
    first = plan.submit("v1", A, TAG)[0]
    plan.submit("v2", A, TAG)
    plan.submit("s1", None, TAG)
    plan.submit("s2", None, TAG)
    plan.submit("s3", None, TAG)
    assert sorted(plan.drop_queued()) == ["s3", "v2"]
    assert plan.waiting() == 0
    assert plan.finished(first) == []


def test_limits_must_allow_a_run() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        planner(max_batch=0)
