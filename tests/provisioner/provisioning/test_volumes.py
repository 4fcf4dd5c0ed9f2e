"""The PersistentVolume built for a provisioning plan."""

import json

import msgspec

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import parse_config_json
from provisioner.objects.node_handoff import (
    NODE_LABEL,
    SETUP_ANNOTATION,
    VOLUME_PATH_KEY,
    VolumeSetup,
)
from provisioner.objects.records import (
    ClaimRecord,
    NodeRecord,
    StorageClassRecord,
    volume_record,
)
from provisioner.provisioning.annotations import (
    NODE_ANNOTATION,
    PROVISIONED_BY,
    STORAGE_PROVISIONER,
    VOLUME_FINALIZER,
)
from provisioner.provisioning.claims import (
    Provision,
    build_persistent_volume,
    decide_claim_action,
    foreign_volume_problem,
)
from provisioner.provisioning.volume_decisions import decide_volume_action

DRIVER = "local-path.local-path-storage.io"

ME = "local-path-storage.io/local-path"
CONFIG = parse_config_json(
    json.dumps(
        {
            "storageClassConfigs": {
                "local": {
                    "nodePathMap": [
                        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/lp"]}
                    ]
                },
                "nfs": {"sharedFileSystemPath": "/mnt/nfs"},
            }
        }
    )
)
NODES = {"n1": NodeRecord("n1", {"kubernetes.io/hostname": "n1-host", "disk": "d1"})}
CLAIM = ClaimRecord(
    uid="0b5c3f3e",
    namespace="ns",
    name="c",
    resource_version="42",
    annotations={STORAGE_PROVISIONER: ME},
    storage_class_name="local",
    selected_node="n1",
    access_modes=("ReadWriteOnce",),
    requested_storage="5Gi",
)
LOCAL = StorageClassRecord(
    "local", ME, binding_mode="WaitForFirstConsumer", mount_options=("noatime",)
)


def plan(claim: ClaimRecord = CLAIM, storage_class: StorageClassRecord = LOCAL) -> Provision:
    decision = decide_claim_action(
        claim,
        read_class_rules(storage_class.name, storage_class, CONFIG),
        set(),
        NODES,
        provisioner_name=ME,
    )
    assert isinstance(decision, Provision), decision
    return decision


def test_node_local_hostpath_volume() -> None:
    assert build_persistent_volume(plan().plan, DRIVER) == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": "pvc-0b5c3f3e",
            "annotations": {PROVISIONED_BY: ME, NODE_ANNOTATION: "n1"},
            "finalizers": [VOLUME_FINALIZER],
        },
        "spec": {
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": "ns",
                "name": "c",
                "uid": "0b5c3f3e",
                "resourceVersion": "42",
            },
            "storageClassName": "local",
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "volumeMode": "Filesystem",
            "mountOptions": ["noatime"],
            "hostPath": {"path": "/opt/lp/pvc-0b5c3f3e_ns_c", "type": "Directory"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": ["n1-host"],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


def test_local_source_and_custom_affinity_key() -> None:
    storage_class = msgspec.structs.replace(
        LOCAL, parameters={"nodeAffinityKey": "disk"}, annotations={"defaultVolumeType": "local"}
    )
    pv = build_persistent_volume(plan(storage_class=storage_class).plan, DRIVER)
    assert pv["spec"]["local"] == {"path": "/opt/lp/pvc-0b5c3f3e_ns_c"}
    assert "hostPath" not in pv["spec"]
    expression = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert expression == [{"key": "disk", "operator": "In", "values": ["d1"]}]


def test_shared_retain_volume_has_no_affinity_and_no_finalizer() -> None:
    nfs = StorageClassRecord("nfs", ME, reclaim_policy="Retain")
    claim = msgspec.structs.replace(
        CLAIM, storage_class_name="nfs", selected_node=None, access_modes=("ReadWriteMany",)
    )
    pv = build_persistent_volume(plan(claim, nfs).plan, DRIVER)
    assert "nodeAffinity" not in pv["spec"]
    assert "finalizers" not in pv["metadata"]
    assert pv["metadata"]["annotations"] == {PROVISIONED_BY: ME}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["hostPath"]["path"] == "/mnt/nfs/pvc-0b5c3f3e_ns_c"
    assert "mountOptions" not in pv["spec"]


def test_built_volume_reads_back_as_ours_and_tears_down_where_it_was_made() -> None:
    storage_class = msgspec.structs.replace(LOCAL, parameters={"nodeAffinityKey": "disk"})
    pv = build_persistent_volume(plan(storage_class=storage_class).plan, DRIVER)
    record = volume_record({**pv, "status": {"phase": "Released"}})
    decision = decide_volume_action(
        record,
        read_class_rules(record.storage_class_name, None, CONFIG),
        NODES,
        provisioner_name=ME,
    )
    assert decision.plan.node_name == "n1"  # type: ignore[union-attr]
    assert decision.plan.path == "/opt/lp/pvc-0b5c3f3e_ns_c"  # type: ignore[union-attr]
    assert decision.plan.size_bytes == 5 * 1024**3  # type: ignore[union-attr]


def test_an_existing_volume_counts_as_ours_only_for_this_claim_at_this_path() -> None:
    decision = plan()
    ours = build_persistent_volume(decision.plan, DRIVER)
    assert foreign_volume_problem(ours, decision.plan, DRIVER) is None
    forged = json.loads(json.dumps(ours))
    forged["spec"]["claimRef"]["uid"] = "someone-else"
    assert foreign_volume_problem(forged, decision.plan, DRIVER) == (
        "PV pvc-0b5c3f3e exists for claim uid someone-else, not 0b5c3f3e"
    )
    elsewhere = json.loads(json.dumps(ours))
    elsewhere["spec"]["hostPath"]["path"] = "/data/pvc-0b5c3f3e_ns_c"
    assert foreign_volume_problem(elsewhere, decision.plan, DRIVER) == (
        "PV pvc-0b5c3f3e exists at /data/pvc-0b5c3f3e_ns_c, not at /opt/lp/pvc-0b5c3f3e_ns_c"
    )
    theirs = json.loads(json.dumps(ours))
    theirs["metadata"]["annotations"] = {}
    assert foreign_volume_problem(theirs, decision.plan, DRIVER) == (
        "PV pvc-0b5c3f3e exists, provisioned by nobody"
    )
    moved = json.loads(json.dumps(ours))
    moved["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0][
        "values"
    ] = ["n2"]
    assert foreign_volume_problem(moved, decision.plan, DRIVER) == (
        "PV pvc-0b5c3f3e exists with another node affinity"
    )


CSI = StorageClassRecord(
    "local", ME, binding_mode="WaitForFirstConsumer", parameters={"volumeType": "csi"}
)


def test_a_csi_class_s_volume_names_the_driver_its_directory_and_its_node_s_setup() -> None:
    decided = plan(storage_class=CSI).plan
    pv = build_persistent_volume(decided, DRIVER)
    assert "hostPath" not in pv["spec"] and "local" not in pv["spec"]
    assert pv["spec"]["csi"] == {
        "driver": DRIVER,
        "volumeHandle": "pvc-0b5c3f3e",
        "volumeAttributes": {VOLUME_PATH_KEY: decided.path},
    }
    assert pv["metadata"]["labels"] == {NODE_LABEL: "n1"}
    setup = VolumeSetup.from_json(pv["metadata"]["annotations"][SETUP_ANNOTATION])
    assert (setup.base_path, setup.path, setup.size_bytes) == ("/opt/lp", decided.path, 5 << 30)
    # The node affinity is the class's, as for any other type: the scheduler obeys it.
    assert (
        pv["spec"]["nodeAffinity"]
        == build_persistent_volume(plan().plan, DRIVER)["spec"]["nodeAffinity"]
    )
    record = volume_record(pv)
    assert (record.path, record.volume_type, record.csi_driver) == (decided.path, "csi", DRIVER)


def test_a_csi_volume_of_another_driver_is_not_ours_to_save_or_to_tear_down() -> None:
    decided = plan(storage_class=CSI).plan
    ours = build_persistent_volume(decided, DRIVER)
    assert foreign_volume_problem(ours, decided, DRIVER) is None
    theirs = build_persistent_volume(decided, "other.example.com")
    assert foreign_volume_problem(theirs, decided, DRIVER) == (
        "PV pvc-0b5c3f3e exists for CSI driver other.example.com"
    )
    released = msgspec.structs.replace(volume_record(theirs), phase="Released")
    decision = decide_volume_action(
        released, read_class_rules("local", CSI, CONFIG), NODES, provisioner_name=ME
    )
    assert "names CSI driver other.example.com" in getattr(decision, "reason", ""), decision


def test_a_csi_block_volume_s_pv_and_setup_say_block() -> None:
    decided = plan(msgspec.structs.replace(CLAIM, volume_mode="Block"), CSI).plan
    pv = build_persistent_volume(decided, DRIVER)
    assert pv["spec"]["volumeMode"] == "Block"
    setup = VolumeSetup.from_json(pv["metadata"]["annotations"][SETUP_ANNOTATION])
    assert setup.volume_mode == "Block"
    assert build_persistent_volume(plan(storage_class=CSI).plan, DRIVER)["spec"]["volumeMode"] == (
        "Filesystem"
    )
