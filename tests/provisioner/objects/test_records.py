"""Compact records built from the API's JSON form, and quantities."""

import json
import subprocess
import sys

import msgspec
import pytest

from provisioner.objects.api_objects import PersistentVolumeClaim
from provisioner.objects.records import (
    ClaimReference,
    DataSource,
    claim_record,
    node_record,
    quantity_to_bytes,
    storage_class_record,
    volume_record,
)


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("1Gi", 1024**3),
        ("5Mi", 5 * 1024**2),
        ("1.5Gi", 3 * 1024**3 // 2),
        ("1G", 10**9),
        ("500M", 5 * 10**8),
        ("100k", 100_000),
        ("1E", 10**18),
        ("1Ei", 1024**6),
        ("1e3", 1000),
        ("1E3", 1000),
        ("123", 123),
        ("1500m", 2),
        (" 2Ki ", 2048),
        ("0", 0),
    ],
)
def test_quantity_to_bytes_rounds_up_like_value(quantity: str, expected: int) -> None:
    assert quantity_to_bytes(quantity) == expected


@pytest.mark.parametrize("quantity", ["", "Gi", "1GB", "-1Gi", "1 Gi", "lots", "1.2.3"])
def test_bad_quantities_are_refused(quantity: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity_to_bytes(quantity)


def test_claim_record_keeps_what_decisions_need() -> None:
    record = claim_record(
        {
            "metadata": {
                "uid": "u",
                "namespace": "ns",
                "name": "c",
                "resourceVersion": "9",
                "labels": {"a": "b"},
                "annotations": {
                    "volume.kubernetes.io/selected-node": "n1",
                    "volume.beta.kubernetes.io/storage-class": "legacy",
                },
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "selector": {},
                "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "x"},
            },
            "status": {
                "capacity": {"storage": "1Gi"},
                "allocatedResources": {"storage": "2Gi"},
                "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
            },
        }
    )
    assert (record.status_capacity, record.allocated_storage) == ("1Gi", "2Gi")
    assert record.resize_status == "ControllerResizeInProgress"
    assert record.storage_class_name == "legacy"
    assert record.selected_node == "n1"
    assert record.requested_storage == "1Gi"
    assert record.has_selector
    assert record.data_source == DataSource("", "PersistentVolumeClaim", "x")
    assert record.volume_mode == "Filesystem"
    assert record.labels == {"a": "b"}
    assert not record.being_deleted
    spec_class = claim_record({"metadata": {}, "spec": {"storageClassName": ""}})
    assert spec_class.storage_class_name == ""


def test_volume_record_reads_path_affinity_and_claim() -> None:
    record = volume_record(
        {
            "metadata": {
                "name": "pvc-1",
                "finalizers": ["f"],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                "local": {"path": "/opt/lp/x"},
                "capacity": {"storage": "1Gi"},
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "local",
                "claimRef": {"namespace": "ns", "name": "c", "uid": "u"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "other", "operator": "NotIn", "values": ["x"]},
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": ["n1"],
                                    },
                                ]
                            }
                        ]
                    }
                },
            },
            "status": {"phase": "Bound"},
        }
    )
    assert (record.path, record.volume_type) == ("/opt/lp/x", "local")
    assert record.affinity == (("kubernetes.io/hostname", ("n1",)),)
    assert record.claim_ref == ClaimReference("ns", "c", "u")
    assert record.being_deleted
    assert record.reclaim_policy == "Retain"
    assert record.phase == "Bound"
    both = volume_record({"spec": {"local": {"path": "/a"}, "hostPath": {"path": "/b"}}})
    assert both.path is None


def test_class_and_node_records() -> None:
    sc = storage_class_record(
        {
            "metadata": {"name": "local"},
            "provisioner": "p",
            "parameters": {"nodePath": "/x"},
            "mountOptions": ["ro"],
        }
    )
    assert (sc.reclaim_policy, sc.binding_mode, sc.mount_options) == (
        "Delete",
        "Immediate",
        ("ro",),
    )
    node = node_record(
        {
            "metadata": {"name": "n1", "labels": {"k": "v"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    assert node.ready and node.unschedulable
    assert not node_record({"metadata": {"name": "n2"}}).ready


def test_the_pure_core_never_imports_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "import provisioner.provisioning.claims, provisioner.configuration.config\n"
        "import provisioner.helper_pods.pod_shapes, provisioner.provisioning.paths\n"
        "import provisioner.objects.records, provisioner.provisioning.claims\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'kubernetes'"
        " or m.startswith(('provisioner.kube', 'provisioner.loop', 'provisioner.process'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_repeated_strings_are_shared_between_records_and_unique_ones_kept() -> None:
    """10,000 claims repeat their class, node, annotation keys and access modes: one copy each.
    Fresh strings (as each decoded object has) must still come out as the same objects."""

    def claim(uid: str) -> dict[str, object]:
        fresh = "".join  # a new str object per call, as json decoding makes
        return {
            "metadata": {
                "uid": uid,
                "namespace": fresh(["team", "-a"]),
                "name": f"data-{uid}",
                "annotations": {
                    fresh(["volume.kubernetes.io/", "selected-node"]): fresh(["n", "1"])
                },
            },
            "spec": {
                "storageClassName": fresh(["local", "-path"]),
                "accessModes": [fresh(["ReadWrite", "Once"])],
                "resources": {"requests": {"storage": fresh(["1", "Gi"])}},
            },
        }

    first, second = claim_record(claim("u1")), claim_record(claim("u2"))
    assert first.namespace is second.namespace
    assert first.storage_class_name is second.storage_class_name
    assert first.selected_node is second.selected_node == "n1"
    assert first.access_modes is second.access_modes == ("ReadWriteOnce",)
    assert first.requested_storage is second.requested_storage
    (key_1,), (key_2,) = first.annotations, second.annotations
    assert key_1 is key_2
    assert (first.uid, second.uid) == ("u1", "u2")


CLAIM_JSON = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {
        "name": "data",
        "namespace": "team-a",
        "uid": "u1",
        "resourceVersion": "7",
        "annotations": {"volume.kubernetes.io/selected-node": "n1"},
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
    },
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}, "limits": {"storage": "2Gi"}},
        "storageClassName": "local-path",
        "volumeMode": "Filesystem",
        "dataSourceRef": {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "src"},
    },
    "status": {"phase": "Pending", "conditions": [{"type": "Resizing", "status": "True"}]},
}


def test_a_record_from_the_informers_struct_equals_the_one_from_the_dict() -> None:
    """The informer decodes JSON text straight into the Structs of api_objects (skipping
    managedFields and every member the records do not read); the shell's other reads convert
    dicts to the same Structs: one builder, one result."""
    decoded = msgspec.json.decode(json.dumps(CLAIM_JSON), type=PersistentVolumeClaim)
    assert claim_record(decoded) == claim_record(CLAIM_JSON)
    record = claim_record(decoded)
    assert record.data_source == DataSource("", "PersistentVolumeClaim", "src")
    assert (record.requested_storage, record.selected_node) == ("1Gi", "n1")


def test_a_member_of_the_wrong_type_is_a_value_error_naming_the_kind() -> None:
    with pytest.raises(ValueError, match=r"PersistentVolume: .*labels"):
        volume_record({"metadata": {"name": "pvc-1", "labels": {"a": 1}}})


def test_records_cannot_be_changed_in_place() -> None:
    record = claim_record(CLAIM_JSON)
    with pytest.raises(AttributeError):
        record.volume_name = "pvc-other"  # type: ignore[misc]
    assert msgspec.structs.replace(record, volume_name="pvc-1").volume_name == "pvc-1"
    assert record.volume_name == ""


def test_an_empty_data_source_ref_gives_way_to_the_data_source() -> None:
    source = {"kind": "PersistentVolumeClaim", "name": "src"}
    claim = claim_record({"spec": {"dataSourceRef": {}, "dataSource": source}})
    assert claim.data_source == DataSource("", "PersistentVolumeClaim", "src")
    assert claim_record({"spec": {"dataSourceRef": {}}}).data_source is None


def test_a_claims_request_is_read_into_bytes_once_per_version() -> None:
    record = claim_record(
        {
            "metadata": {"uid": "u", "namespace": "ns", "name": "c"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        }
    )
    assert (record.requested_bytes, record.request_problem) == (1024**3, None)
    # A new version of the claim (a replaced record) is read again, not carried over.
    grown = msgspec.structs.replace(record, requested_storage="2Gi")
    assert grown.requested_bytes == 2 * 1024**3
    assert msgspec.structs.replace(record, requested_storage=None).requested_bytes is None
    bad = msgspec.structs.replace(record, requested_storage="1 Gi")
    assert bad.requested_bytes is None
    assert bad.request_problem is not None and "1 Gi" in bad.request_problem
    huge = msgspec.structs.replace(record, requested_storage="9Ei")
    assert huge.requested_bytes is None
    assert huge.request_problem is not None
    assert huge.request_problem.startswith("claim ns/c requests ")
