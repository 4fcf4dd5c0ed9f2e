"""The desired CSIStorageCapacity set and the writes that reach it (pure)."""

import json

from provisioner.capacity.storage_capacity import (
    CapacityObject,
    capacity_changes,
    capacity_manifest,
    capacity_object_from_api,
    capacity_object_name,
    desired_capacities,
    owner_label_value,
)
from provisioner.configuration.config import parse_config_json
from provisioner.objects.records import NodeRecord, StorageClassRecord
from provisioner.provisioning.paths import LIVE, UNLIMITED_BYTES, PathEntry

GI = 1024**3
NAME = "cap.example.com"
CONFIG = parse_config_json(
    json.dumps(
        {
            "nodePathMap": [
                {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/plain"]},
                {"node": "n1", "paths": [{"path": "/a", "capacity": "1Gi"}]},
                {"node": "n2", "paths": [{"path": "/b", "capacity": "4Gi"}, "/c"]},
                {"node": "n3", "paths": []},
            ]
        }
    )
)
NODES = {n: NodeRecord(n, {"kubernetes.io/hostname": f"host-{n}"}) for n in ("n1", "n2", "n3")}
CLASSES = [StorageClassRecord("local", NAME), StorageClassRecord("theirs", "other.io")]


def test_one_object_per_served_node_and_class_of_ours() -> None:
    entries = [PathEntry("pvc-1", "n1", "/a/x", LIVE, GI // 2)]
    desired = desired_capacities(CONFIG, CLASSES, NODES, entries, provisioner_name=NAME)
    by_host = {o.hostname: o.capacity_bytes for o in desired.values()}
    assert by_host == {"host-n1": GI // 2, "host-n2": UNLIMITED_BYTES}
    assert all(o.storage_class == "local" for o in desired.values())
    assert capacity_object_name(NAME, "n1", "local") in desired


def test_nothing_without_budgets_unless_the_driver_asks() -> None:
    plain = parse_config_json(json.dumps({"nodePathMap": [{"node": "n1", "paths": ["/p"]}]}))
    assert desired_capacities(plain, CLASSES, NODES, [], provisioner_name=NAME) == {}
    asked = desired_capacities(
        plain, CLASSES, NODES, [], provisioner_name=NAME, driver_wants_capacity=True
    )
    assert [o.capacity_bytes for o in asked.values()] == [UNLIMITED_BYTES]


def test_node_path_parameter_narrows_to_that_path() -> None:
    pinned = [StorageClassRecord("local", NAME, parameters={"nodePath": "/b"})]
    entries = [PathEntry("pvc-1", "n2", "/b/x", LIVE, GI)]
    desired = desired_capacities(CONFIG, pinned, NODES, entries, provisioner_name=NAME)
    assert {o.hostname: o.capacity_bytes for o in desired.values()} == {"host-n2": 3 * GI}


def test_changes_write_only_differences() -> None:
    a = CapacityObject("x", "h1", "local", GI)
    b = CapacityObject("y", "h2", "local", GI)
    assert len(capacity_changes({"x": a}, {"x": a})) == 0
    changes = capacity_changes(
        {"x": CapacityObject("x", "h1", "local", 2 * GI), "y": b},
        {"x": a, "stale": CapacityObject("stale", "h9", "local", 1)},
    )
    assert changes.create == (b,)
    assert [o.capacity_bytes for o in changes.update] == [2 * GI]
    assert changes.delete == ("stale",)
    moved = capacity_changes({"x": CapacityObject("x", "h2", "local", GI)}, {"x": a})
    assert (len(moved.create), moved.delete) == (1, ("x",))


def test_manifest_round_trips_and_is_labelled() -> None:
    wanted = CapacityObject("x", "h1", "local", 3 * GI)
    body = capacity_manifest(wanted, namespace="ns", provisioner_name="a/b")
    assert body["capacity"] == body["maximumVolumeSize"] == "3Gi"
    assert capacity_object_from_api(body) == wanted
    label = owner_label_value("a/b")
    assert label.startswith("a-b-") and label != owner_label_value("a-b")
