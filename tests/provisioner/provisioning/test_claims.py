"""Decision tables: which claims and volumes are ours, and what each needs now."""

import json
from typing import Any

import msgspec
import pytest

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import DEFAULT_NODE, parse_config_json
from provisioner.helper_pods.batch_pod_shapes import BATCHABLE_PATH_BYTES
from provisioner.objects.records import (
    ClaimRecord,
    ClaimReference,
    DataSource,
    NodeRecord,
    StorageClassRecord,
    VolumeRecord,
)
from provisioner.provisioning.annotations import (
    BASE_PATH_ANNOTATION,
    DIRECTORY_REMOVED_ANNOTATION,
    NODE_ANNOTATION,
    PROVISIONED_BY,
    RANCHER_NODE_ANNOTATION,
    RELEASED_FOR_NODE_LOSS_ANNOTATION,
    STORAGE_PROVISIONER,
    VOLUME_FINALIZER,
)
from provisioner.provisioning.claims import (
    Ignore,
    Provision,
    Reject,
    Reschedule,
    WaitForPath,
    decide_claim_action,
)
from provisioner.provisioning.paths import MAX_VOLUME_PATH_BYTES, PathBook
from provisioner.provisioning.volume_decisions import (
    AddFinalizer,
    AwaitNode,
    DeleteRemovedVolume,
    LetGoOfVolume,
    NodeGone,
    NodeLoss,
    RefuseUnsafePath,
    ReleaseClaim,
    RemoveFinalizer,
    Teardown,
    TeardownPlan,
    decide_volume_action,
)
from provisioner.provisioning.volume_facts import record_volume, resolve_volume_node, volume_book

ME = "local-path-storage.io/local-path"
HOST = "kubernetes.io/hostname"
CONFIG = parse_config_json(
    json.dumps(
        {
            "storageClassConfigs": {
                "local": {
                    "nodePathMap": [
                        {"node": DEFAULT_NODE, "paths": ["/opt/lp", "/data"]},
                        {"node": "refused", "paths": []},
                    ]
                },
                "nfs": {"sharedFileSystemPath": "/mnt/nfs"},
            }
        }
    )
)
NODES = {
    "n1": NodeRecord("n1", {HOST: "n1", "example.com/disk": "disk-a"}),
    "n2": NodeRecord("n2", {HOST: "n2", "example.com/disk": "disk-b", "zone": "z1"}),
    "n3": NodeRecord("n3", {HOST: "n3", "zone": "z1"}),
    "refused": NodeRecord("refused", {HOST: "refused"}),
}
LOCAL = StorageClassRecord("local", ME, binding_mode="WaitForFirstConsumer")
NFS = StorageClassRecord("nfs", ME, binding_mode="Immediate", reclaim_policy="Retain")
CLAIM = ClaimRecord(
    uid="u-1",
    namespace="ns",
    name="c",
    resource_version="7",
    annotations={STORAGE_PROVISIONER: ME},
    storage_class_name="local",
    selected_node="n1",
    access_modes=("ReadWriteOnce",),
    requested_storage="2Gi",
)


def claim(**changes: Any) -> ClaimRecord:
    return msgspec.structs.replace(CLAIM, **changes)


def klass(base: StorageClassRecord = LOCAL, **changes: Any) -> StorageClassRecord:
    return msgspec.structs.replace(base, **changes)


def decide(c: ClaimRecord = CLAIM, sc: StorageClassRecord | None = LOCAL, **kw: Any) -> Any:
    kw.setdefault("existing", set())
    return decide_claim_action(
        c,
        read_class_rules(sc.name if sc else c.storage_class_name or "", sc, CONFIG),
        kw.pop("existing"),
        kw.pop("nodes", NODES),
        provisioner_name=ME,
        **kw,
    )


@pytest.mark.parametrize(
    ("c", "sc", "expected"),
    [
        (claim(volume_name="pv-x"), LOCAL, Ignore("bound to volume pv-x")),
        (claim(being_deleted=True), LOCAL, Ignore("the claim is being deleted")),
        (claim(storage_class_name="gone"), None, Ignore("storage class 'gone' not found")),
        (
            CLAIM,
            klass(provisioner="rancher.io/local-path"),
            Ignore("class local belongs to rancher.io/local-path"),
        ),
        (
            claim(annotations={}),
            LOCAL,
            Ignore("not handed to us (no storage-provisioner annotation naming us)"),
        ),
        (
            claim(annotations={STORAGE_PROVISIONER: "other"}),
            LOCAL,
            Ignore("not handed to us (no storage-provisioner annotation naming us)"),
        ),
        (claim(selected_node=None), LOCAL, Ignore("waiting for the scheduler to select a node")),
        (
            claim(has_selector=True),
            LOCAL,
            Reject("claims with spec.selector cannot be provisioned dynamically: remove it"),
        ),
        (
            claim(data_source=DataSource("snapshot.storage.k8s.io", "VolumeSnapshot", "s")),
            LOCAL,
            Ignore("data source VolumeSnapshot is for another controller to fill"),
        ),
        (
            claim(
                data_source=DataSource("populators.example.com", "Seed", "s"),
                volume_mode="Block",
            ),
            LOCAL,
            Ignore("data source Seed is for another controller to fill"),
        ),
        (
            claim(volume_mode="Block"),
            LOCAL,
            Reject("volumeMode Block is not supported: local paths are directories"),
        ),
        (
            claim(requested_storage=None),
            LOCAL,
            Reject("spec.resources.requests.storage is required"),
        ),
        (
            claim(access_modes=("ReadWriteMany",)),
            LOCAL,
            Reject(
                "access modes ['ReadWriteMany'] not supported: node-local paths allow ReadWriteOnce"
                " and ReadWriteOncePod; a sharedFileSystemPath allows all"
            ),
        ),
        (
            claim(access_modes=("ReadWriteOnce", "ReadOnlyMany")),
            LOCAL,
            Reject(
                "access modes ['ReadWriteOnce', 'ReadOnlyMany'] not supported: node-local paths"
                " allow ReadWriteOnce and ReadWriteOncePod; a sharedFileSystemPath allows all"
            ),
        ),
        (
            claim(access_modes=()),
            LOCAL,
            Reject(
                "access modes [] not supported: node-local paths allow ReadWriteOnce and"
                " ReadWriteOncePod; a sharedFileSystemPath allows all"
            ),
        ),
        (
            claim(selected_node=None),
            klass(binding_mode="Immediate"),
            Reject(
                "volumeBindingMode Immediate needs a sharedFileSystemPath: node-local paths need"
                " WaitForFirstConsumer"
            ),
        ),
        (claim(selected_node="n9"), LOCAL, Reschedule("selected node n9 no longer exists")),
        (
            claim(selected_node="n9", storage_class_name="nfs"),
            NFS,
            Reschedule("selected node n9 no longer exists"),
        ),
        (
            claim(selected_node="refused"),
            LOCAL,
            Reject("config.json serves no path on node refused for class local"),
        ),
        (
            claim(annotations={STORAGE_PROVISIONER: ME, "volumeType": "nfs"}),
            LOCAL,
            Reject('volumeType annotation: "nfs" is not a volume type: use hostPath or local'),
        ),
        (
            claim(
                storage_class_name="nfs",
                annotations={STORAGE_PROVISIONER: ME, "volumeType": "local"},
            ),
            NFS,
            Reject("volumeType local needs node affinity, which a shared path has not"),
        ),
        (
            CLAIM,
            klass(name="unlisted"),
            Reject("config.json has no storageClassConfigs entry for unlisted"),
        ),
        (
            CLAIM,
            klass(parameters={"nodePath": "/elsewhere"}),
            Reject(
                'parameters.nodePath: "/elsewhere" is not configured for any node of class'
                ' "local": add it to nodePathMap or drop the parameter'
            ),
        ),
        (CLAIM, klass(parameters={"nodeAffinityKey": "example.com/disk"}), None),
        (
            claim(selected_node="n3"),
            klass(parameters={"nodeAffinityKey": "example.com/disk"}),
            Reject("node n3 has no label example.com/disk (the class's nodeAffinityKey)"),
        ),
        (
            claim(annotations={STORAGE_PROVISIONER: ME, "x": "../../other/victim"}),
            klass(
                parameters={
                    "pathPattern": '{{.PVC.Namespace}}/{{.PVC.Name}}/{{index .PVC.Annotations "x"}}'
                }
            ),
            Reject("rendered path 'ns/c/../../other/victim' has a '..' component"),
        ),
        (
            claim(labels={"perm": "rwx"}),
            klass(parameters={"permPattern": "{{.PVC.Labels.perm}}"}),
            Reject('permPattern: "rwx" is not an octal mode such as 0777'),
        ),
        (claim(requested_storage="lots"), LOCAL, Reject("'lots' is not a Kubernetes quantity")),
        (
            claim(requested_storage="1e5000"),
            LOCAL,
            Reject(
                "claim ns/c requests '1e5000' is above the largest size accepted,"
                " 9223372036854775807 bytes (2^63-1, about 8Ei): request a smaller"
                " spec.resources.requests.storage"
            ),
        ),
    ],
)
def test_claim_decision_table(c: ClaimRecord, sc: StorageClassRecord | None, expected: Any) -> None:
    decision = decide(c, sc)
    if expected is None:
        assert isinstance(decision, Provision)
    else:
        assert decision == expected


def test_existing_volume_means_already_provisioned() -> None:
    assert decide(existing={"pvc-u-1"}) == Ignore("volume pvc-u-1 already exists")


def test_beta_provisioner_annotation_counts() -> None:
    beta = claim(annotations={"volume.beta.kubernetes.io/storage-provisioner": ME})
    assert isinstance(decide(beta), Provision)


def test_provision_plan_for_a_node_local_claim() -> None:
    decision = decide(
        claim(labels={"uid": "1000"}), klass(parameters={"userPattern": "{{.PVC.Labels.uid}}"})
    )
    assert isinstance(decision, Provision)
    plan = decision.plan
    assert plan.volume_name == "pvc-u-1"
    assert plan.node_name == "n1"
    assert plan.node_affinity == (HOST, "n1")
    assert plan.base_path == "/data"  # no volumes yet: lexicographic first
    assert plan.path == "/data/pvc-u-1_ns_c"
    assert plan.volume_type == "hostPath"
    assert plan.size_bytes == 2 * 1024**3
    assert plan.vol_user == "1000"
    assert plan.vol_perm == ""
    assert plan.volume_mode == "Filesystem"


def test_custom_affinity_key_pins_to_the_label_value() -> None:
    decision = decide(sc=klass(parameters={"nodeAffinityKey": "example.com/disk"}))
    assert isinstance(decision, Provision)
    assert decision.plan.node_affinity == ("example.com/disk", "disk-a")


def test_node_without_hostname_label_falls_back_to_its_name() -> None:
    decision = decide(nodes={"n1": NodeRecord("n1", {})})
    assert isinstance(decision, Provision)
    assert decision.plan.node_affinity == (HOST, "n1")


def test_node_path_parameter_picks_the_path() -> None:
    decision = decide(sc=klass(parameters={"nodePath": "/opt/lp"}))
    assert isinstance(decision, Provision)
    assert decision.plan.base_path == "/opt/lp"


def test_base_path_with_fewest_live_volumes_wins() -> None:
    index = volume_book([volume(name="pvc-a", path="/data/pvc-a_ns_x")])
    decision = decide(paths=index)
    assert isinstance(decision, Provision)
    assert decision.plan.base_path == "/opt/lp"
    # volumes on another node do not count
    other = volume_book([volume(name="pvc-a", path="/data/x", **ON_N2)])
    decision = decide(paths=other)
    assert isinstance(decision, Provision)
    assert decision.plan.base_path == "/data"


def test_volume_type_claim_annotation_beats_class_default() -> None:
    sc = klass(annotations={"defaultVolumeType": "local"})
    decision = decide(sc=sc)
    assert isinstance(decision, Provision)
    assert decision.plan.volume_type == "local"
    decision = decide(claim(annotations={STORAGE_PROVISIONER: ME, "volumeType": "hostpath"}), sc)
    assert isinstance(decision, Provision)
    assert decision.plan.volume_type == "hostPath"


ONE_POD = {STORAGE_PROVISIONER: ME}
ONE_POD_REFUSED = (
    "access mode ReadWriteOncePod is held to one pod only on a volume of volumeType: local"
    " or of a CSI class (the kubelet does not hold it on a hostPath volume)"
)


def test_a_read_write_once_pod_claim_gets_a_local_volume_and_never_a_host_path_one() -> None:
    """The kubelet holds ReadWriteOncePod to one pod only for a volume plugin that supports it:
    a second pod put on the node with spec.nodeName runs beside the first on a hostPath
    volume, and is refused (FailedMount) on a `local` one."""
    one_pod = claim(access_modes=("ReadWriteOncePod",))
    assert decide(one_pod) == Reject(
        f"{ONE_POD_REFUSED}: set the claim annotation volumeType: local, or the annotation"
        " defaultVolumeType: local on StorageClass local"
    )
    by_class = decide(one_pod, klass(annotations={"defaultVolumeType": "local"}))
    by_claim = decide(
        msgspec.structs.replace(one_pod, annotations={**ONE_POD, "volumeType": "local"})
    )
    for decision in (by_class, by_claim):
        assert isinstance(decision, Provision) and decision.plan.volume_type == "local"
    csi = decide(one_pod, klass(parameters={"volumeType": "csi"}))
    assert isinstance(csi, Provision) and csi.plan.volume_type == "csi"
    overridden = msgspec.structs.replace(one_pod, annotations={**ONE_POD, "volumeType": "hostPath"})
    assert isinstance(decide(overridden, klass(annotations={"defaultVolumeType": "local"})), Reject)
    shared = claim(storage_class_name="nfs", selected_node=None, access_modes=("ReadWriteOncePod",))
    assert decide(shared, NFS) == Reject(
        f"{ONE_POD_REFUSED}, which a sharedFileSystemPath cannot have: use ReadWriteOnce or"
        " another mode"
    )


@pytest.mark.parametrize("modes", [("ReadWriteMany",), ("ReadOnlyMany", "ReadWriteOnce")])
def test_shared_path_allows_every_access_mode_and_immediate_binding(modes: tuple[str, ...]) -> None:
    decision = decide(claim(storage_class_name="nfs", selected_node=None, access_modes=modes), NFS)
    assert isinstance(decision, Provision)
    assert decision.plan.node_name is None
    assert decision.plan.node_affinity is None
    assert decision.plan.path == "/mnt/nfs/pvc-u-1_ns_c"


def test_shared_path_keeps_the_selected_node_for_the_helper() -> None:
    decision = decide(
        claim(storage_class_name="nfs"), klass(NFS, binding_mode="WaitForFirstConsumer")
    )
    assert isinstance(decision, Provision)
    assert decision.plan.node_name == "n1"
    assert decision.plan.node_affinity is None


ON_N2: dict[str, Any] = {
    "affinity": ((HOST, ("n2",)),),
    "annotations": {PROVISIONED_BY: ME, NODE_ANNOTATION: "n2"},
}
"""A volume()'s fields for one on node n2."""


def volume(**changes: Any) -> VolumeRecord:
    base = VolumeRecord(
        name="pvc-u-1",
        annotations={PROVISIONED_BY: ME, NODE_ANNOTATION: "n1"},
        phase="Released",
        reclaim_policy="Delete",
        storage_class_name="local",
        path="/opt/lp/pvc-u-1_ns_c",
        volume_type="hostPath",
        affinity=((HOST, ("n1",)),),
        finalizers=(VOLUME_FINALIZER,),
        capacity="1Mi",
    )
    return msgspec.structs.replace(base, **changes)


def decide_volume(v: VolumeRecord, **kw: Any) -> Any:
    rules = read_class_rules(v.storage_class_name, None, CONFIG)
    return decide_volume_action(v, rules, kw.pop("nodes", NODES), provisioner_name=ME, **kw)


def teardown(delete_volume: bool = True, remove_finalizer: bool = True, **kw: Any) -> Teardown:
    plan = {
        "volume_name": "pvc-u-1",
        "path": "/opt/lp/pvc-u-1_ns_c",
        "node_name": "n1",
        "volume_mode": "Filesystem",
        "size_bytes": 1024**2,
        "base_path": "/opt/lp",
        **kw,
    }
    return Teardown(
        TeardownPlan(**plan, delete_volume=delete_volume, remove_finalizer=remove_finalizer)
    )


FIX = "; remove the data and the PV (and its finalizer) by hand once it is safe"
VOLUME_TABLE: list[tuple[VolumeRecord, Any]] = [
    (
        volume(annotations={PROVISIONED_BY: "rancher.io/local-path"}),
        Ignore("not provisioned by us"),
    ),
    (volume(annotations={}), Ignore("not provisioned by us")),
    (volume(), teardown()),
    (volume(finalizers=()), teardown(remove_finalizer=False)),
    (volume(phase="Bound"), Ignore("phase Bound: nothing to do")),
    (volume(phase="Bound", finalizers=()), AddFinalizer()),
    (volume(phase="Available", finalizers=()), AddFinalizer()),
    (volume(phase="Failed", finalizers=()), Ignore("phase Failed: nothing to do")),
    (volume(being_deleted=True, phase="Available"), teardown(delete_volume=False)),
    (volume(being_deleted=True), teardown(delete_volume=False)),
    (
        volume(being_deleted=True, phase="Bound"),
        Ignore("deleted while bound: waiting until the claim lets go of it"),
    ),
    (volume(being_deleted=True, finalizers=()), Ignore("being deleted without our finalizer")),
    (volume(reclaim_policy="Retain"), RemoveFinalizer("reclaim policy Retain: the data is kept")),
    (
        volume(reclaim_policy="Retain", phase="Bound", being_deleted=True),
        RemoveFinalizer("reclaim policy Retain: the data is kept"),
    ),
    (
        volume(reclaim_policy="Retain", finalizers=()),
        Ignore("reclaim policy Retain: the data is kept"),
    ),
    # forged or drifted paths are never torn down
    (
        volume(path="/etc"),
        RefuseUnsafePath(
            "path /etc is not clean and strictly inside a base path configured for this volume"
            f" (/opt/lp, /data){FIX}"
        ),
    ),
    (
        volume(path="/opt/lp"),
        RefuseUnsafePath(
            "path /opt/lp is not clean and strictly inside a base path configured for this volume"
            f" (/opt/lp, /data){FIX}"
        ),
    ),
    (
        volume(path="/opt/lp/../../etc"),
        RefuseUnsafePath(
            "path /opt/lp/../../etc is not clean and strictly inside a base path"
            " configured for this"
            f" volume (/opt/lp, /data){FIX}"
        ),
    ),
    (
        volume(path="/mnt/nfs/x"),
        RefuseUnsafePath(
            "path /mnt/nfs/x is not clean and strictly inside a base path"
            " configured for this volume"
            f" (/opt/lp, /data){FIX}"
        ),
    ),
    (
        volume(path=None, volume_type=None),
        RefuseUnsafePath(f"the PV has neither a hostPath nor a local path{FIX}"),
    ),
    (
        volume(storage_class_name="deleted-class"),
        RefuseUnsafePath(
            "config.json has no entry for class deleted-class (add it back to clean up)"
        ),
    ),
    (
        volume(affinity=()),
        RefuseUnsafePath(
            "cannot find the volume's node: its node affinity has no single-valued In expression"
            f" naming its node{FIX}"
        ),
    ),
    (
        volume(
            annotations={PROVISIONED_BY: ME, NODE_ANNOTATION: "refused"},
            affinity=((HOST, ("refused",)),),
            path="/opt/lp/x",
        ),
        RefuseUnsafePath(
            "path /opt/lp/x is not clean and strictly inside a base path configured for"
            f" this volume (none){FIX}"
        ),
    ),
    # node gone: Released keeps its PV; a user-deleted PV lets go of its finalizer
    (
        volume(
            annotations={PROVISIONED_BY: ME, NODE_ANNOTATION: "n9"}, affinity=((HOST, ("n9",)),)
        ),
        NodeGone(
            "node n9 no longer exists: the data of pvc-u-1 was not removed; delete the PV to let"
            " it go without cleanup",
            remove_finalizer=False,
        ),
    ),
    (
        volume(annotations={PROVISIONED_BY: ME}, affinity=((HOST, ("n9",)),), being_deleted=True),
        NodeGone(
            "no node carries kubernetes.io/hostname=n9: the data of pvc-u-1 was not removed;"
            " delete the PV to let it go without cleanup",
            remove_finalizer=True,
        ),
    ),
]


@pytest.mark.parametrize(("v", "expected"), VOLUME_TABLE)
def test_volume_decision_table(v: VolumeRecord, expected: Any) -> None:
    assert decide_volume(v) == expected


CLAIM_REF = ClaimReference(namespace="ns", name="data-web-0", uid="c-1")
BOUND = {"phase": "Bound", "claim_ref": CLAIM_REF}
NO_N1 = {name: node for name, node in NODES.items() if name != "n1"}
RELEASED_FOR_N1 = {
    PROVISIONED_BY: ME,
    NODE_ANNOTATION: "n1",
    RELEASED_FOR_NODE_LOSS_ANNOTATION: "n1/c-1",
}
"""A PV whose node-loss release deleted its claim c-1 (the API server answered the DELETE)."""


def test_a_bound_volume_whose_node_is_gone_waits_out_the_grace_then_its_claim_is_released() -> None:
    waiting = decide_volume(volume(**BOUND), nodes=NO_N1, node_loss=NodeLoss(60, 20.0))
    assert isinstance(waiting, AwaitNode)
    assert (waiting.node_name, waiting.remaining_seconds, waiting.claim) == ("n1", 40.0, CLAIM_REF)
    assert waiting.reason == (
        "node n1 is gone: claim ns/data-web-0 is released in 40s (nodeLossGracePeriod 60s)"
        " unless the node comes back"
    )
    released = decide_volume(volume(**BOUND), nodes=NO_N1, node_loss=NodeLoss(60, 60.0))
    assert released == ReleaseClaim(
        "pvc-u-1",
        "n1",
        CLAIM_REF,
        "node n1 has been gone for 60s (nodeLossGracePeriod): releasing claim ns/data-web-0 so"
        " that its workload gets a new volume; the data stays on n1",
    )


@pytest.mark.parametrize(
    ("nodes", "node_loss"),
    [(NODES, NodeLoss(60, 0.0)), (NO_N1, None)],
    ids=["node-there", "class-without-the-parameter"],
)
def test_a_bound_volume_is_left_bound_while_its_node_is_there_or_its_class_never_releases(
    nodes: dict[str, NodeRecord], node_loss: NodeLoss | None
) -> None:
    assert decide_volume(volume(**BOUND), nodes=nodes, node_loss=node_loss) == Ignore(
        "phase Bound: nothing to do"
    )


@pytest.mark.parametrize("nodes", [NODES, NO_N1], ids=["node-back", "node-gone"])
def test_a_volume_released_for_node_loss_goes_without_a_helper_and_keeps_its_data(
    nodes: dict[str, NodeRecord],
) -> None:
    """Even with its node back: the claim was let go, and with it the data on that node."""
    marked = volume(annotations=RELEASED_FOR_N1, claim_ref=CLAIM_REF)
    decision = decide_volume(marked, nodes=nodes)
    assert isinstance(decision, LetGoOfVolume)
    assert (decision.delete_volume, decision.remove_finalizer) == (True, True)
    assert "its data stays on n1" in decision.reason
    deleted = decide_volume(msgspec.structs.replace(marked, being_deleted=True), nodes=nodes)
    assert isinstance(deleted, LetGoOfVolume) and not deleted.delete_volume


UNPROVEN_MARKS = {
    "bare-mark-of-an-older-version": ("n1", CLAIM_REF),
    "mark-of-another-claim": ("n1/c-0", CLAIM_REF),
    "mark-without-a-uid": ("n1/", CLAIM_REF),
    "no-claim-ref": ("n1/c-1", None),
}


@pytest.mark.parametrize(("mark", "claim_ref"), UNPROVEN_MARKS.values(), ids=UNPROVEN_MARKS)
@pytest.mark.parametrize("being_deleted", [False, True], ids=["released", "pv-deleted"])
def test_a_mark_that_does_not_prove_its_claim_was_released_leaves_an_ordinary_volume(
    mark: str, claim_ref: ClaimReference | None, being_deleted: bool
) -> None:
    """A release whose DELETE failed (a 5xx, no answer, a 403) and whose node came back: the
    claim deleted weeks later by its tenant is torn down as any Delete volume; with the node
    gone, it waits for it as any other (NodeGone)."""
    marked = volume(
        annotations={**RELEASED_FOR_N1, RELEASED_FOR_NODE_LOSS_ANNOTATION: mark},
        claim_ref=claim_ref,
        being_deleted=being_deleted,
    )
    assert decide_volume(marked) == teardown(delete_volume=not being_deleted)
    assert isinstance(decide_volume(marked, nodes=NO_N1), NodeGone)


def test_a_marked_volume_still_bound_is_released_again_not_let_go() -> None:
    """Its claim is still there (a pod holds it): the claim is asked to go again."""
    marked = volume(annotations=RELEASED_FOR_N1, **BOUND)
    assert isinstance(
        decide_volume(marked, nodes=NO_N1, node_loss=NodeLoss(60, 61.0)), ReleaseClaim
    )


def test_shared_volume_teardown_has_no_node() -> None:
    v = volume(
        storage_class_name="nfs",
        affinity=(),
        path="/mnt/nfs/pvc-u-1_ns_c",
        annotations={PROVISIONED_BY: ME},
    )
    assert decide_volume(v) == teardown(
        path="/mnt/nfs/pvc-u-1_ns_c", node_name=None, base_path="/mnt/nfs"
    )


def test_custom_affinity_key_maps_the_label_back_to_the_node() -> None:
    # rancher would look for a node named "disk-b" and silently skip the cleanup
    v = volume(annotations={PROVISIONED_BY: ME}, affinity=(("example.com/disk", ("disk-b",)),))
    assert decide_volume(v) == teardown(node_name="n2")
    assert resolve_volume_node(v, NODES) == ("n2", None)


def test_rancher_node_annotation_is_understood() -> None:
    v = volume(
        annotations={PROVISIONED_BY: ME, RANCHER_NODE_ANNOTATION: "n2"}, affinity=((HOST, ("n2",)),)
    )
    assert decide_volume(v) == teardown(node_name="n2")


@pytest.mark.parametrize(
    ("annotations", "affinity", "expected"),
    [
        (
            {},
            (("zone", ("z1",)),),
            (None, "2 nodes carry zone=z1: cannot tell which holds the data"),
        ),
        ({NODE_ANNOTATION: "n3"}, (("zone", ("z1",)),), ("n3", None)),
        (
            {NODE_ANNOTATION: "n1"},
            ((HOST, ("n2",)),),
            (None, "node n1 no longer carries kubernetes.io/hostname=n2"),
        ),
        (
            {},
            ((HOST, ("n1", "n2")),),
            (None, "its node affinity has no single-valued In expression naming its node"),
        ),
    ],
)
def test_resolve_volume_node(annotations: dict[str, str], affinity: Any, expected: Any) -> None:
    v = volume(annotations={PROVISIONED_BY: ME, **annotations}, affinity=affinity)
    assert resolve_volume_node(v, NODES) == expected


def test_a_directory_shared_with_a_live_volume_is_never_torn_down() -> None:
    # pathPattern ns/name: a recreated claim gets the old claim's directory
    old = volume(name="pvc-old", path="/opt/lp/ns/c")
    new = volume(name="pvc-new", path="/opt/lp/ns/c", phase="Bound")
    nested = volume(name="pvc-nested", path="/opt/lp/ns/c/sub", phase="Bound")
    elsewhere = volume(name="pvc-n2", path="/opt/lp/ns/c", **ON_N2)
    index = volume_book([old, new, nested, elsewhere])
    assert decide_volume(old, paths=index) == RefuseUnsafePath(
        f"path /opt/lp/ns/c is also used by pvc-nested, pvc-new{FIX}"
    )
    index.forget("pvc-new")
    index.forget("pvc-nested")
    assert isinstance(decide_volume(old, paths=index), Teardown)
    assert index.count_inside("n1", "/opt/lp") == 1


# -- the path book: no two volumes on one directory -------------------------------------------

SCOPED_CLASS = klass(parameters={"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"})


@pytest.mark.parametrize(
    ("other_path", "other_phase"),
    [
        ("/data/ns/c", "Released"),  # a recreated claim: the old PV awaits its teardown
        ("/data/ns/c", "Bound"),
        ("/data/ns", "Bound"),  # the new path would lie inside a live volume
        ("/data/ns/c/deeper", "Bound"),  # or contain one
    ],
)
def test_a_claim_whose_path_overlaps_a_volume_waits_for_it(
    other_path: str, other_phase: str
) -> None:
    book = volume_book([volume(name="pvc-old", path=other_path, phase=other_phase)])
    c = claim(annotations={STORAGE_PROVISIONER: ME, BASE_PATH_ANNOTATION: "/data"})
    decision = decide(c, SCOPED_CLASS, paths=book)
    assert isinstance(decision, WaitForPath)
    assert decision.blockers == ("pvc-old",)
    assert "pvc-old" in decision.reason and "/data/ns/c" in decision.reason
    book.forget("pvc-old")
    assert isinstance(decide(c, SCOPED_CLASS, paths=book), Provision)


def test_paths_in_flight_are_reserved_and_freed_when_the_provision_fails() -> None:
    book = PathBook()
    c = claim(annotations={STORAGE_PROVISIONER: ME, BASE_PATH_ANNOTATION: "/data"})
    first = decide(c, SCOPED_CLASS, paths=book)
    assert isinstance(first, Provision)
    book.reserve(first.plan.volume_name, first.plan.disk_node, first.plan.path)
    # the same claim again (a requeue): in flight, nothing to do
    assert decide(c, SCOPED_CLASS, paths=book) == Ignore("volume pvc-u-1 is being provisioned")
    # another claim rendering the same path waits
    twin = msgspec.structs.replace(c, uid="u-2")
    waiting = decide(twin, SCOPED_CLASS, paths=book)
    assert isinstance(waiting, WaitForPath)
    assert waiting.blockers == ("pvc-u-1",)
    assert "being provisioned" in waiting.reason
    book.cancel_reservation("pvc-u-1")
    assert isinstance(decide(twin, SCOPED_CLASS, paths=book), Provision)


def test_the_same_path_on_another_node_is_no_overlap() -> None:
    book = volume_book([volume(name="pvc-old", path="/data/ns/c", phase="Bound", **ON_N2)])
    c = claim(annotations={STORAGE_PROVISIONER: ME, BASE_PATH_ANNOTATION: "/data"})
    assert isinstance(decide(c, SCOPED_CLASS, paths=book), Provision)


def test_a_teardown_in_flight_or_done_is_never_started_again() -> None:
    old = volume(name="pvc-u-1")
    book = volume_book([old])
    assert isinstance(decide_volume(old, paths=book), Teardown)
    book.start_teardown("pvc-u-1")
    assert isinstance(decide_volume(old, paths=book), Ignore)
    book.finish_teardown("pvc-u-1", succeeded=False)
    assert isinstance(decide_volume(old, paths=book), Teardown)
    book.start_teardown("pvc-u-1")
    book.finish_teardown("pvc-u-1", succeeded=True)
    # the PV's own updates (the finalizer patch) keep it torn down until it is gone
    record_volume(book, old)
    assert isinstance(decide_volume(old, paths=book), Ignore)


def test_a_pv_gone_while_its_teardown_is_queued_keeps_its_path_until_the_teardown_ended() -> None:
    # A Released PV deleted by an admin (no finalizer of ours), or our own DELETE whose answer
    # was lost, while its teardown waits in a busy node's batch: the claim recreated under the
    # same name renders the same path and must not be set up where that `rm -rf` will run.
    old = volume(name="pvc-old", path="/data/ns/c", finalizers=())
    book = volume_book([old])
    assert isinstance(decide_volume(old, paths=book), Teardown)
    book.start_teardown("pvc-old")
    assert book.forget("pvc-old") is False
    recreated = claim(
        uid="u-2", annotations={STORAGE_PROVISIONER: ME, BASE_PATH_ANNOTATION: "/data"}
    )
    waiting = decide(recreated, SCOPED_CLASS, paths=book)
    assert isinstance(waiting, WaitForPath), waiting
    assert waiting.blockers == ("pvc-old",)
    assert book.helper_run_problem("pvc-old", teardown=True) is None
    # the teardown ended (failed, even: its PV is gone, nothing retries it): the path is free
    assert book.finish_teardown("pvc-old", succeeded=False) is True
    assert "pvc-old" not in book
    assert isinstance(decide(recreated, SCOPED_CLASS, paths=book), Provision)


@pytest.mark.parametrize("torn_down", [False, True])
def test_a_pv_gone_with_no_teardown_in_flight_frees_its_path_at_once(torn_down: bool) -> None:
    book = volume_book([volume(name="pvc-old", path="/data/ns/c")])
    if torn_down:
        book.start_teardown("pvc-old")
        assert book.finish_teardown("pvc-old", succeeded=True) is False  # its PV is still there
    assert book.forget("pvc-old") is True
    assert "pvc-old" not in book


def test_the_book_is_asked_again_just_before_a_helper_pod_is_built() -> None:
    book = PathBook()
    book.reserve("pvc-new", "n1", "/data/ns/c")
    assert book.helper_run_problem("pvc-new", teardown=False) is None
    problem = book.helper_run_problem("pvc-new", teardown=True)
    assert problem is not None and "being provisioned" in problem
    # an entry that came to share the path while the run queued stops it
    record_volume(book, volume(name="pvc-other", path="/data/ns"))
    problem = book.helper_run_problem("pvc-new", teardown=False)
    assert problem is not None and "pvc-other" in problem and "/data/ns/c" in problem
    book.forget("pvc-other")
    book.cancel_reservation("pvc-new")
    problem = book.helper_run_problem("pvc-new", teardown=False)
    assert problem is not None and "no longer in the book" in problem


def test_a_teardown_waits_for_no_one_but_refuses_a_path_reserved_by_a_provision() -> None:
    old = volume(name="pvc-old", path="/opt/lp/ns/c")
    book = volume_book([old])
    book.reserve("pvc-new", "n1", "/opt/lp/ns/c/inner")
    assert decide_volume(old, paths=book) == RefuseUnsafePath(
        f"path /opt/lp/ns/c is also used by pvc-new{FIX}"
    )


def test_the_base_path_is_chosen_once_and_recorded_on_the_claim() -> None:
    book = volume_book([volume(name="pvc-a", path="/data/pvc-a_ns_x")])
    first = decide(paths=book)
    assert isinstance(first, Provision)
    assert (first.plan.base_path, first.plan.record_base_path) == ("/opt/lp", True)
    # a retry after more volumes landed on /opt/lp still uses the recorded choice
    book.reserve("pvc-b", "n1", "/opt/lp/b")
    book.reserve("pvc-c", "n1", "/opt/lp/c")
    recorded = claim(annotations={STORAGE_PROVISIONER: ME, BASE_PATH_ANNOTATION: "/opt/lp"})
    again = decide(recorded, paths=book)
    assert isinstance(again, Provision)
    assert (again.plan.base_path, again.plan.record_base_path) == ("/opt/lp", False)
    # a recorded path the node does not serve (rescheduled elsewhere) is chosen again
    stale = claim(annotations={STORAGE_PROVISIONER: ME, BASE_PATH_ANNOTATION: "/elsewhere"})
    other = decide(stale, paths=book)
    assert isinstance(other, Provision)
    assert (other.plan.base_path, other.plan.record_base_path) == ("/data", True)
    # one candidate: nothing to record
    single = decide(sc=klass(parameters={"nodePath": "/opt/lp"}), paths=book)
    assert isinstance(single, Provision)
    assert single.plan.record_base_path is False


REMOVED = {PROVISIONED_BY: ME, NODE_ANNOTATION: "n1", DIRECTORY_REMOVED_ANNOTATION: "true"}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # Its teardown removed the directory and our finalizer; its DELETE was refused.
        ({"finalizers": ()}, DeleteRemovedVolume("pvc-u-1", True, False)),
        ({}, DeleteRemovedVolume("pvc-u-1", True, True)),
        # Deleted by a user after the teardown: our finalizer goes, no pod.
        ({"being_deleted": True}, DeleteRemovedVolume("pvc-u-1", False, True)),
    ],
    ids=["released", "released-with-finalizer", "being-deleted"],
)
def test_a_teardown_redone_after_its_directory_went_needs_no_pod(
    changes: dict[str, Any], expected: DeleteRemovedVolume
) -> None:
    """The pod would wait for the missing directory (or, should another volume's directory
    appear there meanwhile, start and remove it): the PV goes without one."""
    decision = decide_volume(volume(annotations=REMOVED, **changes))
    assert decision == expected


BY_ANNOTATION = klass(
    parameters={"pathPattern": '{{.PVC.Namespace}}/{{.PVC.Name}}/{{index .PVC.Annotations "dir"}}'}
)


def with_dir(size: int) -> ClaimRecord:
    """A claim whose "dir" annotation is `size` bytes of 100-byte folders."""
    folders = "/".join("d" * 99 for _ in range(size // 100 + 1))[:size].rstrip("/")
    return claim(annotations={STORAGE_PROVISIONER: ME, "dir": folders})


def test_a_path_too_long_for_the_node_is_refused_at_decision_time_naming_the_annotation() -> None:
    decision = decide(with_dir(200_000), BY_ANNOTATION)
    assert isinstance(decision, Reject), decision
    assert f"at most {MAX_VOLUME_PATH_BYTES}" in decision.reason
    assert 'the claim\'s annotation "dir"' in decision.reason
    assert "shorten that annotation" in decision.reason


@pytest.mark.parametrize("parameter", ["userPattern", "groupPattern"])
def test_a_user_or_group_longer_than_a_name_may_be_is_refused_naming_the_annotation(
    parameter: str,
) -> None:
    """VOL_USER and VOL_GROUP are environment strings of the helper: a 200 KB one never
    started it (E2BIG)."""
    owner = claim(annotations={STORAGE_PROVISIONER: ME, "owner": "u" * 200_000})
    decision = decide(owner, klass(parameters={parameter: "{{.PVC.Annotations.owner}}"}))
    assert isinstance(decision, Reject), decision
    assert decision.reason.startswith(f"{parameter} renders 200000 bytes, over the 256")
    assert f'{parameter} renders the claim\'s annotation "owner" (200000 bytes)' in decision.reason


@pytest.mark.parametrize(
    "size", [500, BATCHABLE_PATH_BYTES, 2000, MAX_VOLUME_PATH_BYTES - 20, 4000, 200_000]
)
def test_every_path_decided_is_one_its_helper_can_start(size: int) -> None:
    """Part of the proof that one tenant's path never fails another's volumes in a batch pod:
    a setup reaches a helper only as the plan of a Provision decision, and every such plan's
    path is one a node holds (a longer one is refused here, naming the annotation). A nested
    path like this one never shares a setup's pod (its parents need `prepare`), and a
    teardown's path longer than BATCHABLE_PATH_BYTES gets a pod of its own (test_batch_pods)."""
    decision = decide(with_dir(size), BY_ANNOTATION)
    path_bytes = len(f"/data/ns/c/{with_dir(size).annotations['dir']}".encode())
    if path_bytes > MAX_VOLUME_PATH_BYTES:
        assert isinstance(decision, Reject), decision
        assert 'the claim\'s annotation "dir"' in decision.reason
        return
    assert isinstance(decision, Provision), decision
    assert len(decision.plan.path.encode()) == path_bytes
    assert decision.plan.path.startswith("/data/ns/c/"), "nested: its setup has a pod of its own"


def test_block_claims_get_a_volume_only_in_a_csi_class() -> None:
    """The CSI node plugin hands a pod a loop device over a file in the volume's directory; a
    hostPath or local volume is the directory itself, and a shared path has no node plugin."""
    block = claim(volume_mode="Block")
    csi = decide(block, klass(parameters={"volumeType": "csi"}))
    assert isinstance(csi, Provision), csi
    assert (csi.plan.volume_type, csi.plan.volume_mode) == ("csi", "Block")
    refused = Reject("volumeMode Block is not supported: local paths are directories")
    assert decide(block) == refused
    assert decide(block, klass(annotations={"defaultVolumeType": "local"})) == refused
    by_claim = msgspec.structs.replace(block, annotations={**ONE_POD, "volumeType": "local"})
    assert decide(by_claim) == refused
    shared = claim(storage_class_name="nfs", selected_node=None, volume_mode="Block")
    assert decide(shared, NFS) == refused


def test_a_claim_without_a_data_source_never_enters_the_clone_and_restore_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/CONTRACTS.md counts a plain claim's walk without clones.py and snapshot_sources.py."""

    def entered(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a claim without a data source entered place_source")

    monkeypatch.setattr("provisioner.provisioning.claims.place_source", entered)
    assert isinstance(decide(), Provision)
    with pytest.raises(AssertionError, match="entered place_source"):
        decide(claim(data_source=DataSource("", "PersistentVolumeClaim", "src")))
