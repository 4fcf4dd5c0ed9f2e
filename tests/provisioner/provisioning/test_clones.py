"""Clones: which claims are clones, of what, what is refused, where the copy goes, the copy's
pod, and its scripts run on real directories."""

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_NODE,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
    parse_config_json,
)
from provisioner.helper_pods.clone_step import (
    CHECK_CONTAINER,
    CHECK_SCRIPT,
    COPY_CONTAINER,
    COPY_SCRIPT,
    SOURCE_MOUNT,
    build_action_pod,
)
from provisioner.helper_pods.pod_shapes import BASE_VIEW, PREPARE_CONTAINER, helper_steps
from provisioner.objects.node_handoff import (
    SETUP_ANNOTATION,
    HandoffError,
    NodeCloneSource,
    VolumeSetup,
)
from provisioner.objects.records import (
    ClaimRecord,
    ClaimReference,
    DataSource,
    NodeRecord,
    StorageClassRecord,
    VolumeRecord,
)
from provisioner.provisioning.annotations import PROVISIONED_BY, STORAGE_PROVISIONER
from provisioner.provisioning.claims import (
    Ignore,
    Provision,
    Reject,
    Reschedule,
    build_persistent_volume,
    decide_claim_action,
)
from provisioner.provisioning.clones import CloneSource, source_changed
from provisioner.provisioning.paths import PathBook
from provisioner.provisioning.volume_facts import record_volume

ME = "local-path-storage.io/local-path"
HOST = "kubernetes.io/hostname"
CONFIG_JSON = {
    "storageClassConfigs": {
        "local": {"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/opt/lp"]}]},
        "other": {"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/opt/lp"]}]},
        "nfs": {"sharedFileSystemPath": "/mnt/nfs"},
    }
}
CONFIG = parse_config_json(json.dumps(CONFIG_JSON))
BUNDLE = load_config_bundle(
    json.dumps(CONFIG_JSON), DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT, DEFAULT_HELPER_POD_YAML
)
NODES = {name: NodeRecord(name, {HOST: name}) for name in ("n1", "n2")}
LOCAL = StorageClassRecord("local", ME, binding_mode="WaitForFirstConsumer")
NFS = StorageClassRecord("nfs", ME, binding_mode="Immediate")
SOURCE_CLAIM = ClaimRecord(
    uid="u-src",
    namespace="ns",
    name="src",
    storage_class_name="local",
    access_modes=("ReadWriteOnce",),
    requested_storage="1Gi",
    volume_name="pvc-u-src",
)
SOURCE_VOLUME = VolumeRecord(
    name="pvc-u-src",
    annotations={PROVISIONED_BY: ME},
    phase="Bound",
    storage_class_name="local",
    path="/opt/lp/pvc-u-src_ns_src",
    volume_type="hostPath",
    affinity=((HOST, ("n1",)),),
    claim_ref=ClaimReference("ns", "src", "u-src"),
    capacity="1Gi",
)
CLONE = ClaimRecord(
    uid="u-clone",
    namespace="ns",
    name="copy",
    annotations={STORAGE_PROVISIONER: ME},
    storage_class_name="local",
    selected_node="n1",
    access_modes=("ReadWriteOnce",),
    requested_storage="2Gi",
    data_source=DataSource("", "PersistentVolumeClaim", "src"),
)
SOURCE = CloneSource(
    claim_namespace="ns",
    claim_name="src",
    claim_uid="u-src",
    volume_name="pvc-u-src",
    path="/opt/lp/pvc-u-src_ns_src",
    base_path="/opt/lp",
    node_name="n1",
    volume_type="hostPath",
)


@dataclasses.dataclass
class Sources:
    claims: tuple[ClaimRecord, ...] = (SOURCE_CLAIM,)
    volumes: tuple[VolumeRecord, ...] = (SOURCE_VOLUME,)

    def claim(self, namespace: str, name: str) -> ClaimRecord | None:
        return next((c for c in self.claims if (c.namespace, c.name) == (namespace, name)), None)

    def volume(self, name: str) -> VolumeRecord | None:
        return next((v for v in self.volumes if v.name == name), None)


def decide(
    claim: ClaimRecord = CLONE,
    storage_class: StorageClassRecord = LOCAL,
    sources: Sources | None = None,
) -> Any:
    return decide_claim_action(
        claim,
        read_class_rules(storage_class.name, storage_class, CONFIG),
        set(),
        NODES,
        provisioner_name=ME,
        sources=sources or Sources(),
    )


def test_a_clone_is_provisioned_on_its_sources_node_with_the_source_in_its_plan() -> None:
    decision = decide()
    assert isinstance(decision, Provision)
    assert decision.plan.node_name == "n1"
    assert decision.plan.clone_source == SOURCE
    assert decision.plan.path == "/opt/lp/pvc-u-clone_ns_copy"


def test_immediate_binding_places_a_node_local_clone_on_the_sources_node() -> None:
    decision = decide(
        msgspec.structs.replace(CLONE, selected_node=None),
        msgspec.structs.replace(LOCAL, binding_mode="Immediate"),
    )
    assert isinstance(decision, Provision)
    assert decision.plan.node_name == "n1"
    assert decision.plan.node_affinity == (HOST, "n1")


def test_wait_for_first_consumer_waits_for_the_scheduler() -> None:
    decision = decide(msgspec.structs.replace(CLONE, selected_node=None))
    assert decision == Ignore("waiting for the scheduler to select a node")


def test_another_selected_node_goes_back_to_the_scheduler_saying_how_to_pin() -> None:
    decision = decide(msgspec.structs.replace(CLONE, selected_node="n2"))
    assert decision == Reschedule(
        "selected node n2 cannot hold a clone of claim ns/src (volume pvc-u-src): its data is"
        " on node n1; pin the claim's consumer there (node affinity on"
        " kubernetes.io/hostname=n1)"
    )


def test_a_shared_filesystem_clone_goes_to_any_node() -> None:
    volume = msgspec.structs.replace(
        SOURCE_VOLUME, storage_class_name="nfs", path="/mnt/nfs/pvc-u-src_ns_src", affinity=()
    )
    claim = msgspec.structs.replace(SOURCE_CLAIM, storage_class_name="nfs")
    clone = msgspec.structs.replace(CLONE, storage_class_name="nfs", selected_node="n2")
    decision = decide(clone, NFS, Sources((claim,), (volume,)))
    assert isinstance(decision, Provision)
    assert decision.plan.node_name == "n2"
    assert decision.plan.clone_source == dataclasses.replace(
        SOURCE, path="/mnt/nfs/pvc-u-src_ns_src", base_path="/mnt/nfs", node_name=None
    )


def test_a_clone_counts_against_its_nodes_budget_like_any_volume() -> None:
    budgeted = parse_config_json(
        json.dumps(
            {
                "storageClassConfigs": {
                    "local": {
                        "nodePathMap": [
                            {
                                "node": DEFAULT_NODE,
                                "paths": [{"path": "/opt/lp", "capacity": "2Gi"}],
                            }
                        ]
                    }
                }
            }
        )
    )
    book = PathBook()
    record_volume(book, SOURCE_VOLUME)

    def decide_with_budget(requested: str) -> Any:
        return decide_claim_action(
            msgspec.structs.replace(CLONE, requested_storage=requested),
            read_class_rules(LOCAL.name, LOCAL, budgeted),
            set(),
            NODES,
            provisioner_name=ME,
            paths=book,
            sources=Sources(),
        )

    assert isinstance(decide_with_budget("1Gi"), Provision)
    # The source's 1Gi is committed on n1, the only node a copy can go to.
    assert decide_with_budget("2Gi") == Reschedule(
        "node n1 has no base path with room for 2Gi: /opt/lp has 1Gi free of 2Gi (1Gi committed)"
    )


CSI_CLASS = msgspec.structs.replace(LOCAL, parameters={"volumeType": "csi"})
CSI_SOURCE_VOLUME = msgspec.structs.replace(
    SOURCE_VOLUME, volume_type="csi", csi_driver="local-path-storage.io"
)


def test_a_clone_into_a_csi_class_hands_its_source_to_the_node_in_its_setup() -> None:
    decision = decide(storage_class=CSI_CLASS, sources=Sources(volumes=(CSI_SOURCE_VOLUME,)))
    assert isinstance(decision, Provision), decision
    assert decision.plan.volume_type == "csi"
    assert decision.plan.node_name == "n1"
    pv = build_persistent_volume(decision.plan, "local-path-storage.io")
    setup = VolumeSetup.from_json(pv["metadata"]["annotations"][SETUP_ANNOTATION])
    assert setup.clone_source == NodeCloneSource(
        volume_name="pvc-u-src",
        path="/opt/lp/pvc-u-src_ns_src",
        base_path="/opt/lp",
        claim_uid="u-src",
    )
    assert setup.path == "/opt/lp/pvc-u-clone_ns_copy"


def test_a_csi_clone_of_a_volume_the_node_plugin_did_not_make_is_refused() -> None:
    """Same class, but the source is a hostPath volume (made before the class was CSI, or
    by a claim's volumeType annotation): the node plugin has no record or lock of it."""
    decision = decide(storage_class=CSI_CLASS)
    assert isinstance(decision, Reject), decision
    assert "is a hostPath volume" in decision.reason
    assert "copies only a CSI volume" in decision.reason


def test_a_volume_setup_with_a_clone_source_reads_back_as_written() -> None:
    setup = VolumeSetup(
        "/opt/lp",
        "/opt/lp/c",
        "Filesystem",
        1 << 30,
        clone_source=NodeCloneSource("pvc-s", "/opt/lp/s", "/opt/lp", "u-s"),
    )
    assert VolumeSetup.from_json(setup.to_json()) == setup
    plain = VolumeSetup("/opt/lp", "/opt/lp/c", "Filesystem", 1)
    assert VolumeSetup.from_json(plain.to_json()).clone_source is None
    broken = json.loads(setup.to_json())
    del broken["clone_source"]["claim_uid"]
    with pytest.raises(HandoffError, match="clone_source has no claim_uid"):
        VolumeSetup.from_json(json.dumps(broken))
    broken["clone_source"] = "pvc-s"
    with pytest.raises(HandoffError, match="clone_source is not a JSON object"):
        VolumeSetup.from_json(json.dumps(broken))


def test_other_data_sources_are_left_to_whoever_serves_them_without_an_event() -> None:
    snapshot = DataSource("snapshot.storage.k8s.io", "VolumeSnapshot", "src")
    assert decide(msgspec.structs.replace(CLONE, data_source=snapshot)) == Ignore(
        "data source VolumeSnapshot is for another controller to fill"
    )
    grouped_claim = DataSource("example.com", "PersistentVolumeClaim", "src")
    assert isinstance(decide(msgspec.structs.replace(CLONE, data_source=grouped_claim)), Ignore)


def refusal(claim: ClaimRecord = CLONE, sources: Sources | None = None, **kw: Any) -> str:
    decision = decide(claim, sources=sources, **kw)
    assert isinstance(decision, Reject), decision
    return decision.reason


def test_refusals_say_why() -> None:
    other_ns = DataSource("", "PersistentVolumeClaim", "src", namespace="elsewhere")
    assert refusal(msgspec.structs.replace(CLONE, data_source=other_ns)) == (
        "source claim elsewhere/src is in another namespace: a clone's source must be a claim"
        " in its own namespace (ns); copy the data there first"
    )
    assert refusal(sources=Sources(claims=())) == (
        "source claim ns/src (spec.dataSource) not found: create it, or fix the name"
    )
    deleting = msgspec.structs.replace(SOURCE_CLAIM, being_deleted=True)
    assert "is being deleted" in refusal(sources=Sources(claims=(deleting,)))
    other_class = msgspec.structs.replace(SOURCE_CLAIM, storage_class_name="other")
    assert refusal(sources=Sources(claims=(other_class,))) == (
        "source claim ns/src is of StorageClass 'other', this claim of 'local': a clone must"
        " be of its source's class"
    )
    pending = msgspec.structs.replace(SOURCE_CLAIM, volume_name="")
    assert refusal(sources=Sources(claims=(pending,))) == (
        "source claim ns/src is not Bound yet: the clone is made once it is"
    )
    assert "which is not found" in refusal(sources=Sources(volumes=()))
    foreign = msgspec.structs.replace(SOURCE_VOLUME, annotations={PROVISIONED_BY: "rancher.io/x"})
    assert refusal(sources=Sources(volumes=(foreign,))) == (
        "volume pvc-u-src of source claim ns/src was provisioned by rancher.io/x, not"
        f" {ME}: only volumes this provisioner made can be cloned"
    )
    assert refusal(msgspec.structs.replace(CLONE, requested_storage="512Mi")) == (
        "source claim ns/src holds 1Gi, more than this claim requests: request at least 1Gi"
    )
    reuse = msgspec.structs.replace(LOCAL, parameters={"reuseExistingData": "true"})
    assert "sets reuseExistingData" in refusal(storage_class=reuse)


def test_a_source_path_that_is_not_the_classes_is_never_copied() -> None:
    for path in ("/etc", "/opt/lp", "/opt/lp/../etc/x", "/opt/other/x"):
        escaping = msgspec.structs.replace(SOURCE_VOLUME, path=path)
        assert "is not clean and strictly inside a base path" in refusal(
            sources=Sources(volumes=(escaping,))
        )
    rebound = msgspec.structs.replace(SOURCE_VOLUME, claim_ref=ClaimReference("ns", "src", "u-old"))
    assert refusal(sources=Sources(volumes=(rebound,))) == (
        "volume pvc-u-src is not bound to source claim ns/src"
    )


def test_a_source_that_went_during_the_copy_is_seen() -> None:
    assert source_changed(SOURCE, SOURCE_CLAIM, SOURCE_VOLUME) is None
    gone = "source claim ns/src (volume pvc-u-src) was deleted during the copy"
    assert source_changed(SOURCE, None, SOURCE_VOLUME) == gone
    recreated = msgspec.structs.replace(SOURCE_CLAIM, uid="u-new")
    assert source_changed(SOURCE, recreated, SOURCE_VOLUME) == gone
    deleting = msgspec.structs.replace(SOURCE_CLAIM, being_deleted=True)
    assert "began to be deleted" in str(source_changed(SOURCE, deleting, SOURCE_VOLUME))
    released = msgspec.structs.replace(SOURCE_VOLUME, phase="Released")
    assert "released or deleted" in str(source_changed(SOURCE, SOURCE_CLAIM, released))
    assert "lost its volume" in str(source_changed(SOURCE, SOURCE_CLAIM, None))


def test_the_copy_is_a_fixed_step_after_the_setup_in_its_pod_and_sees_only_the_two_volumes() -> (
    None
):
    decision = decide()
    assert isinstance(decision, Provision)
    plan = decision.plan
    assert helper_steps("create", plan, BUNDLE.config) == ("prepare", "create", "clone")
    pod = build_action_pod("create", plan, BUNDLE, "lps", "helper-sa")
    spec = pod["spec"]
    # One pod for the whole action: prepare, the setup, the check, then the copy.
    assert pod["metadata"]["name"] == "helper-create-pvc-u-clone"
    assert spec["nodeName"] == "n1"
    assert spec["automountServiceAccountToken"] is False
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    assert set(volumes) == {"base", "source-base", "source"}
    assert volumes["source"] == {"path": SOURCE.path, "type": "Directory"}
    [prepare, setup, check] = spec["initContainers"]
    [copier] = spec["containers"]
    assert prepare["name"] == PREPARE_CONTAINER
    assert setup["args"][-2:] == ["-a", "create"]
    assert check["name"] == CHECK_CONTAINER
    assert check["command"] == ["/bin/sh", "-c", CHECK_SCRIPT, CHECK_CONTAINER]
    assert copier["name"] == COPY_CONTAINER
    assert copier["command"] == ["/bin/sh", "-c", COPY_SCRIPT, COPY_CONTAINER]
    # The copy sees the source read-only and its own directory (the subPath `prepare` made,
    # as the setup sees it), nothing of the base paths.
    data = {"name": "base", "mountPath": plan.path, "subPath": "pvc-u-clone_ns_copy"}
    assert data in setup["volumeMounts"]
    assert copier["volumeMounts"] == [
        {"name": "source", "mountPath": SOURCE_MOUNT, "readOnly": True},
        data,
    ]
    assert {m["mountPath"]: m.get("readOnly", False) for m in check["volumeMounts"]} == {
        SOURCE_MOUNT: True,
        plan.path: False,
        BASE_VIEW: True,
        "/.local-path-storage/source-base": True,
    }


def run_script(script: str, env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run(
        ["/bin/sh", "-c", script, "clone"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def check_env(base: Path, target: Path, source: Path, source_mount: Path) -> dict[str, str]:
    # Here a "mount" is the directory itself, as a bind mount would show it.
    return {
        "VOL_DIR": str(target),
        "LPS_BASE": str(base),
        "LPS_BASE_VIEW": str(base),
        "LPS_SOURCE_DIR": str(source),
        "LPS_SOURCE_BASE": str(base),
        "LPS_SOURCE_BASE_VIEW": str(base),
        "LPS_SOURCE_MOUNT": str(source_mount),
    }


def test_the_check_refuses_a_source_that_is_not_what_the_pv_says(tmp_path: Path) -> None:
    base = tmp_path / "base"
    for name in ("src", "new", "victim"):
        (base / name).mkdir(parents=True)
    assert run_script(CHECK_SCRIPT, check_env(base, base / "new", base / "src", base / "src")) == (
        0,
        "",
    )
    # The source's directory replaced by a link to another volume: the host mount followed it.
    (base / "src").rmdir()
    (base / "src").symlink_to("victim")
    code, output = run_script(
        CHECK_SCRIPT, check_env(base, base / "new", base / "src", base / "victim")
    )
    assert (code, output) == (
        1,
        f"refusing to clone {base}/src into {base}/new: {base}/src is reached through a"
        " symbolic link\n",
    )
    # What is mounted as the source is another directory than the PV's.
    (base / "src").unlink()
    (base / "src").mkdir()
    code, output = run_script(
        CHECK_SCRIPT, check_env(base, base / "new", base / "src", base / "victim")
    )
    assert code == 1
    assert f"the directory mounted for {base}/src is another one" in output


def tree_listing(root: Path) -> list[tuple[str, int, int, int, int, int, int, str]]:
    rows = []
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        content = str(path.readlink()) if path.is_symlink() else ""
        if path.is_file() and not path.is_symlink():
            content = path.read_bytes().hex()
        rows.append(
            (
                str(path.relative_to(root)),
                st.st_mode,
                st.st_uid,
                st.st_gid,
                st.st_nlink,
                st.st_mtime_ns,
                st.st_size,
                content,
            )
        )
    return rows


def test_the_copy_keeps_links_modes_times_hard_links_and_holes(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "new"
    (source / "dir").mkdir(parents=True)
    target.mkdir()
    (source / "dir" / "file").write_text("data")
    (source / "dir" / "file").chmod(0o640)
    os.chown(source / "dir" / "file", 1234, 5678)
    source.chmod(0o750)
    os.link(source / "dir" / "file", source / "hard")
    (source / "out").symlink_to("/etc/passwd")
    with (source / "sparse").open("wb") as sparse:
        sparse.truncate(8 << 20)
    os.utime(source / "dir", ns=(1_000_000_000, 1_000_000_000))
    (target / "stale").write_text("an earlier attempt's partial copy")
    env = {"VOL_DIR": str(target), "LPS_SOURCE_DIR": "/src", "LPS_SOURCE_MOUNT": str(source)}
    code, output = run_script(COPY_SCRIPT, env)
    assert code == 0, output
    assert tree_listing(target) == tree_listing(source)
    assert target.stat().st_mode == source.stat().st_mode
    assert (target / "sparse").stat().st_blocks < 8
    assert (target / "out").is_symlink()


def test_a_csi_clone_keeps_its_source_s_volume_mode() -> None:
    """A Block volume's directory holds one device file: copied into a Filesystem volume it
    would be a plain file in the pod, and a Block clone of a Filesystem source no device."""
    block_source = msgspec.structs.replace(CSI_SOURCE_VOLUME, volume_mode="Block")
    block_clone = msgspec.structs.replace(CLONE, volume_mode="Block")
    decision = decide(block_clone, CSI_CLASS, Sources(volumes=(block_source,)))
    assert isinstance(decision, Provision), decision
    assert decision.plan.clone_source is not None
    assert decision.plan.clone_source.volume_mode == "Block"
    for clone, volume in ((CLONE, block_source), (block_clone, CSI_SOURCE_VOLUME)):
        refused = decide(clone, CSI_CLASS, Sources(volumes=(volume,)))
        assert isinstance(refused, Reject), refused
        assert "a clone keeps its source's volumeMode" in refused.reason
