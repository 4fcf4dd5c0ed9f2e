"""Restores: which claims are ours, every refusal (one sentence each), the ReferenceGrant rules,
where the restore goes, and what its setup hands the node."""

import json
from typing import Any

import msgspec
import pytest

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import DEFAULT_NODE, parse_config_json
from provisioner.objects.node_handoff import SETUP_ANNOTATION, NodeRestoreSource, VolumeSetup
from provisioner.objects.records import ClaimRecord, DataSource, NodeRecord, StorageClassRecord
from provisioner.objects.snapshot_handoff import (
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotSetup,
    snapshot_handle,
    snapshot_id,
    snapshot_path,
)
from provisioner.provisioning.annotations import STORAGE_PROVISIONER
from provisioner.provisioning.claims import (
    Ignore,
    Provision,
    Reject,
    Reschedule,
    build_persistent_volume,
    decide_claim_action,
)
from provisioner.provisioning.snapshot_reads import restores_here
from provisioner.provisioning.snapshot_sources import SnapshotLookup, grant_refusal

ME = "local-path-storage.io/local-path"
DRIVER = "local-path-storage.io"
HOST = "kubernetes.io/hostname"
CONFIG = parse_config_json(
    json.dumps(
        {
            "storageClassConfigs": {
                "csi": {
                    "nodePathMap": [
                        {"node": DEFAULT_NODE, "paths": ["/opt/lp"]},
                        {"node": "n3", "paths": ["/opt/other"]},
                    ]
                },
                "plain": {"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/opt/lp"]}]},
            }
        }
    )
)
NODES = {name: NodeRecord(name, {HOST: name}) for name in ("n1", "n2", "n3")}
CSI = StorageClassRecord(
    "csi", ME, binding_mode="WaitForFirstConsumer", parameters={"volumeType": "csi"}
)
CSI_NOW = msgspec.structs.replace(CSI, binding_mode="Immediate")
PLAIN = StorageClassRecord("plain", ME, binding_mode="WaitForFirstConsumer")
SNAP_ID = snapshot_id("snapcontent-1")
SETUP = SnapshotSetup(
    snapshot_id=SNAP_ID,
    source_volume="pvc-src",
    source_path="/opt/lp/pvc-src",
    base_path="/opt/lp",
    path=snapshot_path("/opt/lp", SNAP_ID),
    size_bytes=1 << 30,
    volume_mode="Filesystem",
)
SNAPSHOT_SOURCE = DataSource("snapshot.storage.k8s.io", "VolumeSnapshot", "snap")
CLAIM = ClaimRecord(
    uid="u-r",
    namespace="ns",
    name="restored",
    annotations={STORAGE_PROVISIONER: ME},
    storage_class_name="csi",
    selected_node="n1",
    access_modes=("ReadWriteOnce",),
    requested_storage="1Gi",
    data_source=SNAPSHOT_SOURCE,
)


def snapshot(namespace: str = "ns", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": "snap", "uid": "s-uid"},
        "status": {
            "readyToUse": True,
            "boundVolumeSnapshotContentName": "snapcontent-1",
            "restoreSize": "1Gi",
        }
        | status,
    }


def content(
    namespace: str = "ns",
    *,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    setup: str | None = SETUP.to_json(),
) -> dict[str, Any]:
    annotations = {} if setup is None else {SNAPSHOT_SETUP_ANNOTATION: setup}
    return {
        "metadata": {"name": "snapcontent-1", "annotations": annotations},
        "spec": {
            "driver": DRIVER,
            "sourceVolumeMode": "Filesystem",
            "volumeSnapshotRef": {"namespace": namespace, "name": "snap", "uid": "s-uid"},
        }
        | (spec or {}),
        "status": {
            "readyToUse": True,
            "snapshotHandle": snapshot_handle("n1", SNAP_ID),
            "restoreSize": 1 << 30,
        }
        | (status or {}),
    }


def lookup(**kw: Any) -> SnapshotLookup:
    fields: dict[str, Any] = {"snapshot": snapshot(), "content": content(), "grants": ()}
    fields.update(kw)
    return SnapshotLookup(DRIVER, **fields)


def decide(
    claim: ClaimRecord = CLAIM,
    storage_class: StorageClassRecord = CSI,
    snapshots: SnapshotLookup | None = None,
) -> Any:
    rules = read_class_rules(storage_class.name, storage_class, CONFIG)
    # As the I/O layer (snapshot_reads.SnapshotReads): a lookup only for a restore of ours.
    looked_up = snapshots if snapshots is not None else lookup()
    return decide_claim_action(
        claim,
        rules,
        set(),
        NODES,
        provisioner_name=ME,
        snapshots=looked_up if restores_here(claim, rules) else None,
    )


def refusal(claim: ClaimRecord = CLAIM, **kw: Any) -> str:
    decision = decide(claim, snapshots=lookup(**kw))
    assert isinstance(decision, Reject), decision
    return decision.reason


def test_a_restore_is_provisioned_on_the_snapshots_node_with_its_source_in_the_setup() -> None:
    decision = decide()
    assert isinstance(decision, Provision), decision
    plan = decision.plan
    assert (plan.node_name, plan.base_path, plan.volume_type) == ("n1", "/opt/lp", "csi")
    pv = build_persistent_volume(plan, DRIVER)
    setup = VolumeSetup.from_json(pv["metadata"]["annotations"][SETUP_ANNOTATION])
    assert setup.restore_source == NodeRestoreSource(
        snapshot_id=SNAP_ID,
        snapshot_path=f"/opt/lp/.local-path-storage-snapshots/{SNAP_ID}",
        base_path="/opt/lp",
        content_name="snapcontent-1",
    )
    assert setup.clone_source is None


def test_placement_follows_the_clones_immediate_binds_there_another_node_is_rescheduled() -> None:
    unselected = msgspec.structs.replace(CLAIM, selected_node=None)
    now = decide(unselected, storage_class=CSI_NOW)
    assert isinstance(now, Provision) and now.plan.node_name == "n1"
    assert decide(unselected) == Ignore("waiting for the scheduler to select a node")
    elsewhere = decide(msgspec.structs.replace(CLAIM, selected_node="n2"))
    assert isinstance(elsewhere, Reschedule)
    assert elsewhere.reason == (
        "selected node n2 cannot hold a restore of VolumeSnapshot ns/snap: its data is on node"
        " n1; pin the claim's consumer there (node affinity on kubernetes.io/hostname=n1)"
    )


def test_only_csi_classes_restore_others_leave_snapshots_alone() -> None:
    rules = read_class_rules("plain", PLAIN, CONFIG)
    plain_claim = msgspec.structs.replace(CLAIM, storage_class_name="plain")
    assert not restores_here(plain_claim, rules)
    assert decide(plain_claim, storage_class=PLAIN) == Ignore(
        "data source VolumeSnapshot is for another controller to fill"
    )
    assert restores_here(CLAIM, read_class_rules("csi", CSI, CONFIG))
    populator = DataSource("example.com", "VolumeSnapshot", "snap")
    assert not restores_here(
        msgspec.structs.replace(CLAIM, data_source=populator), read_class_rules("csi", CSI, CONFIG)
    )


SETUP_WITHOUT_ID = json.dumps(json.loads(SETUP.to_json()) | {"snapshot_id": "nope"})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"snapshot": None},
            "VolumeSnapshot ns/snap (spec.dataSource) not found: create it, or fix the name",
        ),
        (
            {"snapshot": snapshot(readyToUse=False)},
            "VolumeSnapshot ns/snap is not ready to use yet: the restore is made once it is",
        ),
        (
            {"snapshot": snapshot(boundVolumeSnapshotContentName=None)},
            "VolumeSnapshot ns/snap is bound to no VolumeSnapshotContent",
        ),
        ({"content": None}, "VolumeSnapshotContent snapcontent-1 not found"),
        (
            {"content": content("elsewhere")},
            "VolumeSnapshotContent snapcontent-1 is not bound to this VolumeSnapshot",
        ),
        (
            {"content": content(spec={"driver": "hostpath.csi.k8s.io"})},
            "VolumeSnapshotContent snapcontent-1 is of driver 'hostpath.csi.k8s.io', not"
            " local-path-storage.io: not ours to restore",
        ),
        (
            {"content": content(setup=None)},
            "VolumeSnapshotContent snapcontent-1 was not admitted by this provisioner (no"
            " local-path-storage.io/snapshot-setup)",
        ),
        (
            {"content": content(setup=SETUP_WITHOUT_ID)},
            "VolumeSnapshotContent snapcontent-1: local-path-storage.io/snapshot-setup's"
            " snapshot_id is not an id",
        ),
        (
            {"content": content(status={"snapshotHandle": snapshot_handle("n1", "0" * 32)})},
            f"VolumeSnapshotContent snapcontent-1's snapshotHandle 'v1/n1/{'0' * 32}' names no"
            f" snapshot {SNAP_ID} of a node of this cluster",
        ),
        (
            {"content": content(status={"snapshotHandle": snapshot_handle("gone", SNAP_ID)})},
            f"VolumeSnapshotContent snapcontent-1's snapshotHandle 'v1/gone/{SNAP_ID}' names no"
            f" snapshot {SNAP_ID} of a node of this cluster",
        ),
        (
            {"content": content(status={"snapshotHandle": "/opt/lp/elsewhere"})},
            "VolumeSnapshotContent snapcontent-1's snapshotHandle '/opt/lp/elsewhere' names no"
            f" snapshot {SNAP_ID} of a node of this cluster",
        ),
        (
            {"content": content(status={"restoreSize": 2 << 30})},
            f"VolumeSnapshot ns/snap needs {2 << 30} bytes to restore, more than this claim"
            f" requests ({1 << 30})",
        ),
        (
            {"content": content(spec={"sourceVolumeMode": "Block"})},
            "VolumeSnapshot ns/snap is of a Block volume, this claim asks volumeMode Filesystem:"
            " restore it with volumeMode Block",
        ),
    ],
)
def test_every_refusal_says_why_in_one_sentence(fields: dict[str, Any], expected: str) -> None:
    assert refusal(**fields) == expected


def test_a_snapshot_kept_where_the_class_has_no_path_is_refused() -> None:
    on_n3 = content(status={"snapshotHandle": snapshot_handle("n3", SNAP_ID)})
    claim = msgspec.structs.replace(CLAIM, selected_node="n3")
    assert refusal(claim, content=on_n3) == (
        "VolumeSnapshot ns/snap is kept in base path /opt/lp on node n3, which StorageClass csi"
        " does not give there: restore it into a class that does"
    )


def test_a_restore_without_a_lookup_is_never_made_empty() -> None:
    """A snapshot source nobody read a snapshot for is no restore of ours: nothing is made."""
    decision = decide_claim_action(
        CLAIM,
        read_class_rules("csi", CSI, CONFIG),
        set(),
        NODES,
        provisioner_name=ME,
    )
    assert isinstance(decision, Ignore), decision


FROM_NS = {"group": "", "kind": "PersistentVolumeClaim", "namespace": "ns"}
TO_ALL = {"group": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot"}


def grant(from_: dict[str, Any], to: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"from": [from_], "to": [to]}}


def test_reference_grant_rules() -> None:
    def allowed(*grants: dict[str, Any]) -> bool:
        return grant_refusal("ns", "src", "snap", grants) is None

    assert grant_refusal("ns", "ns", "snap", ()) is None
    assert grant_refusal("ns", "src", "snap", ()) == (
        "a ReferenceGrant in src must allow PersistentVolumeClaims of ns"
    )
    assert allowed(grant(FROM_NS, TO_ALL))
    assert allowed(grant(FROM_NS, TO_ALL | {"name": ""}))
    assert allowed(grant(FROM_NS, TO_ALL | {"name": "snap"}))
    assert not allowed(grant(FROM_NS, TO_ALL | {"name": "other"}))
    assert not allowed(grant(FROM_NS | {"namespace": "other"}, TO_ALL))
    assert not allowed(grant(FROM_NS | {"kind": "Pod"}, TO_ALL))
    assert not allowed(grant(FROM_NS | {"group": "core"}, TO_ALL))
    assert not allowed(grant(FROM_NS, TO_ALL | {"kind": "PersistentVolumeClaim"}))
    assert not allowed(grant(FROM_NS, TO_ALL | {"group": ""}))
    assert not allowed({"spec": {"from": "ns", "to": TO_ALL}}, {}, {"spec": None})
    assert allowed(grant(FROM_NS | {"namespace": "x"}, TO_ALL), grant(FROM_NS, TO_ALL))


def test_across_namespaces_a_restore_needs_a_grant() -> None:
    across = msgspec.structs.replace(
        CLAIM, data_source=msgspec.structs.replace(SNAPSHOT_SOURCE, namespace="src")
    )
    fields = {"snapshot": snapshot("src"), "content": content("src")}
    assert refusal(across, **fields) == (
        "VolumeSnapshot src/snap is in another namespace: a ReferenceGrant in src must allow"
        " PersistentVolumeClaims of ns"
    )
    decision = decide(across, snapshots=lookup(grants=(grant(FROM_NS, TO_ALL),), **fields))
    assert isinstance(decision, Provision), decision
    assert decision.plan.restore_source is not None
    assert decision.plan.restore_source.snapshot_namespace == "src"
