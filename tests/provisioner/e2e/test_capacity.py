"""Budgets on the real control plane: the real kube-scheduler reads the CSIStorageCapacity
objects the provisioner publishes and keeps pods off nodes without room."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from localcluster.raw_api import call_json
from tests.provisioner.e2e.capacity_support import (
    GI,
    csi_driver,
    pod,
    published,
    use_driver_name,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    eventually,
    volume_node,
    wait_gone,
)

pytestmark = pytest.mark.cluster

BUDGETS = {
    "nodePathMap": [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": []},
        {
            "node": "node-1",
            "paths": [{"path": "/opt/capacity-small", "capacity": "1Gi", "create": True}],
        },
        {
            "node": "node-2",
            "paths": [{"path": "/opt/capacity-large", "capacity": "10Gi", "create": True}],
        },
    ]
}


def test_the_scheduler_respects_budgets_and_capacity_follows_deletions(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup(ConfigFiles(config=BUDGETS))
    use_driver_name(setup)
    with csi_driver(setup):
        setup.start()
        storage_class = setup.create_class("budget")
        eventually(
            lambda: published(setup, storage_class) == {"node-1": GI, "node-2": 10 * GI} or None,
            10,
            "capacities for node-1 (1Gi) and node-2 (10Gi) only",
        )

        for index in range(5):
            setup.create_claim(f"c{index}", storage_class, size="1Gi")
            setup.create_consumer(f"p{index}", f"c{index}")
        volumes = {f"c{index}": setup.wait_bound(f"c{index}", 120) for index in range(5)}
        nodes = [volume_node(volume) for volume in volumes.values()]
        assert nodes.count("node-1") <= 1, nodes
        assert set(nodes) <= {"node-1", "node-2"}
        for claim, volume in volumes.items():
            placed = eventually(
                lambda claim=claim: pod(setup, f"p{claim[1:]}")["spec"].get("nodeName"),  # type: ignore[misc]
                60,
                f"pod of {claim} placed",
            )
            assert placed == volume_node(volume)
        on_large = nodes.count("node-2")
        expected = {"node-1": GI * (1 - nodes.count("node-1")), "node-2": (10 - on_large) * GI}
        eventually(lambda: published(setup, storage_class) == expected or None, 10, "budgets")

        # Too big for every node: the scheduler itself says so, no claim gets a PV.
        setup.create_claim("huge", storage_class, size="20Gi")
        setup.create_consumer("huge", "huge")

        def unschedulable() -> str | None:
            for condition in pod(setup, "huge")["status"].get("conditions") or ():
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    return str(condition.get("message", ""))
            return None

        message = eventually(unschedulable, 60, "the huge pod to be unschedulable")
        assert "did not have enough free storage" in message, message
        assert setup.phase("huge") == "Pending"

        # Deleting a volume frees its budget; the published capacity follows within 5 s.
        victim = next(name for name, volume in volumes.items() if volume_node(volume) == "node-2")
        setup.core.delete_namespaced_pod(f"p{victim[1:]}", setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim(victim, setup.namespace)
        volume_name = volumes[victim]["metadata"]["name"]
        wait_gone(lambda: setup.volume(volume_name), 60, f"volume {volume_name} deleted")
        gone_at = time.monotonic()
        freed = {**expected, "node-2": expected["node-2"] + GI}
        eventually(lambda: published(setup, storage_class) == freed or None, 5, "freed budget")
        assert time.monotonic() - gone_at <= 5.0

        metrics = setup.replicas[0].metrics()
        assert "local_path_csistoragecapacity_writes_total" in metrics


def test_objects_of_removed_classes_are_deleted_and_only_ours_touched(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup(ConfigFiles(config=BUDGETS))
    use_driver_name(setup)
    setup.start()
    first = setup.create_class("first")
    second = setup.create_class("second")
    foreign = call_json(
        setup.storage.create_namespaced_csi_storage_capacity,
        setup.namespace,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIStorageCapacity",
            "metadata": {"name": "someone-elses"},
            "storageClassName": first,
            "capacity": "1Gi",
        },
    )
    assert foreign["metadata"]["name"] == "someone-elses"
    eventually(lambda: len(published(setup, second)) == 2 or None, 10, "second class published")
    setup.storage.delete_storage_class(second)
    eventually(lambda: not published(setup, second) or None, 10, "second class unpublished")
    names = [
        item["metadata"]["name"]
        for item in call_json(setup.storage.list_namespaced_csi_storage_capacity, setup.namespace)[
            "items"
        ]
    ]
    assert "someone-elses" in names


def test_size_limits_and_expansion_granted_and_refused(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup(ConfigFiles(config=BUDGETS))
    setup.start()
    ranged = setup.create_class(
        "ranged", parameters={"minSize": "1Gi", "maxSize": "4Gi"}, binding_mode="Immediate"
    )
    setup.create_claim("tiny", ranged, size="100Mi")
    event = setup.wait_event("tiny", "ProvisioningFailed")
    assert "outside the size range" in event["message"] and "1Gi .. 4Gi" in event["message"]
    bad = setup.create_class("bad", parameters={"maxSize": "lots"}, binding_mode="Immediate")
    setup.create_claim("bad", bad)
    assert "parameters.maxSize" in setup.wait_event("bad", "ProvisioningFailed")["message"]

    grow = setup.create_class("grow")
    call_json(setup.storage.patch_storage_class, grow, {"allowVolumeExpansion": True})
    setup.create_claim("g", grow, size="1Gi")
    setup.create_consumer("g", "g", {"kubernetes.io/hostname": "node-2"})
    volume = setup.wait_bound("g")
    name = volume["metadata"]["name"]
    setup.core.patch_namespaced_persistent_volume_claim(
        "g", setup.namespace, {"spec": {"resources": {"requests": {"storage": "3Gi"}}}}
    )
    setup.wait_event("g", "VolumeResizeSuccessful")
    current = setup.volume(name)
    assert current is not None and current["spec"]["capacity"]["storage"] == "3Gi"
    eventually(
        lambda: setup.claim("g")["status"]["capacity"]["storage"] == "3Gi" or None,
        10,
        "claim status capacity",
    )
    # 20Gi does not fit node-2's 10Gi budget: refused, nothing changes.
    setup.core.patch_namespaced_persistent_volume_claim(
        "g", setup.namespace, {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}
    )
    refused = setup.wait_event("g", "VolumeResizeFailed")
    assert "has no base path with room" in refused["message"]
    current = setup.volume(name)
    assert current is not None and current["spec"]["capacity"]["storage"] == "3Gi"


def test_an_expansion_refused_for_room_is_granted_when_a_volume_gives_its_budget_back(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup(ConfigFiles(config=BUDGETS))
    setup.start()
    grow = setup.create_class("grow")
    call_json(setup.storage.patch_storage_class, grow, {"allowVolumeExpansion": True})
    for claim in ("a", "b"):
        setup.create_claim(claim, grow, size="4Gi")
        setup.create_consumer(claim, claim, {"kubernetes.io/hostname": "node-2"})
    name = setup.wait_bound("a")["metadata"]["name"]
    other = setup.wait_bound("b")["metadata"]["name"]

    # 8Gi of node-2's 10Gi taken: growing a to 7Gi needs 3Gi more, only 2Gi are free.
    setup.core.patch_namespaced_persistent_volume_claim(
        "a", setup.namespace, {"spec": {"resources": {"requests": {"storage": "7Gi"}}}}
    )
    assert "has no base path with room" in setup.wait_event("a", "VolumeResizeFailed")["message"]

    # b goes: its 4Gi come back, and a's request is granted without a change to the claim.
    setup.core.delete_namespaced_pod("b", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("b", setup.namespace)
    wait_gone(lambda: setup.volume(other), 60, f"{other} to be deleted")
    setup.wait_event("a", "VolumeResizeSuccessful")
    current = setup.volume(name)
    assert current is not None and current["spec"]["capacity"]["storage"] == "7Gi"
