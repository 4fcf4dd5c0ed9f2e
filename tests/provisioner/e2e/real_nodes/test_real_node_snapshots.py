"""Snapshots, restores, held sizes and expansion of CSI volumes on a real node: the controller and
the node plugin (as in test_real_node_csi.py) serve two CSI classes, one on the node's plain disk
(/opt) and one on its btrfs disk (/mnt/btrfs), with the common snapshot controller running; real
kubelets run the pods that write and read the volumes.

- a snapshot and its restore hold what was written before the snapshot, not what was written
  after it, and what the restore's pod writes stays in the restore (plain disk and btrfs);
- a deleted snapshot's data leaves the node under `deletionPolicy: Delete` (on both disks: each
  round trip ends so) and stays under `Retain`;
- a tenant writing past its size on btrfs gets "Disk quota exceeded", a neighbour writes on;
- a btrfs volume grown lets its running pod write past the old size, a Block volume grown shows
  its running pod the new device size, each ending with the claim's status.capacity;
- a restore across namespaces is refused without a ReferenceGrant and allowed with one.

A Block volume written raw, its pod replaced and the bytes read back is not repeated here:
test_real_node_block.py proves exactly that on a real node.

One stack serves the whole module (its plugin on real-1 only): the snapshot classes are made
here as the stack makes them (the driver, a deletionPolicy, no parameters). Sizes are 16-40 MiB.
The node's disks are read from the host through the node's mount namespace
(/proc/<holder>/root): the btrfs disk is mounted only there.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster import LocalCluster
from localcluster.raw_api import call_json, manifest
from localcluster.real_node_config import BTRFS_MOUNT
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from provisioner.objects.snapshot_handoff import (
    SNAPSHOT_GROUP,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotSetup,
)
from tests.faults.support import HelperPodRecorder, unique_base_path
from tests.provisioner.e2e.real_nodes.support import (
    HOSTNAME,
    helper_pod_yaml,
    real_nodes,
    registry_busybox,
)
from tests.provisioner.e2e.real_nodes.test_real_node_csi import (
    TIMEOUT_SECONDS,
    CsiStack,
    create_csi_driver,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    eventually,
    wait_gone,
)

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]

NODE = "real-1"
MIB = 1 << 20
SIZE = "16Mi"
VERSION = "v1"
DEVICE = "/dev/xvda"
BTRFS_SUBVOLUME_INODE = 256
"""The inode number of every btrfs subvolume's root directory (BTRFS_FIRST_FREE_OBJECTID)."""
DISKS = ("plain", "btrfs")


@dataclass
class SnapshotStack:
    """The module's CSI stack, its two classes (by disk), and its snapshot classes."""

    csi: CsiStack
    classes: dict[str, str]
    """The StorageClass of each disk."""
    bases: dict[str, str]
    """The base path of each disk's class, as the node sees it."""
    delete_classes: dict[str, str]
    """The VolumeSnapshotClass (Delete) of each disk's class, named as the class."""
    retain_class: str
    custom: client.CustomObjectsApi
    namespaces: list[str]

    @property
    def setup(self) -> ProvisionerSetup:
        return self.csi.setup

    @property
    def namespace(self) -> str:
        return self.csi.setup.namespace

    def on_node(self, path: str) -> Path:
        """`path` of the node's mount namespace, as this machine reads it (the btrfs disk is
        mounted there alone)."""
        holder = real_nodes(self.csi.cluster).node_by_name(NODE).holder.pid
        assert holder is not None
        return Path(f"/proc/{holder}/root") / path.lstrip("/")

    def directory(self, volume: Mapping[str, Any]) -> Path:
        return self.on_node(volume["spec"]["csi"]["volumeAttributes"][VOLUME_PATH_KEY])

    # -- claims and pods ---------------------------------------------------------------------

    def claim(
        self,
        name: str,
        disk: str,
        *,
        size: str = SIZE,
        namespace: str | None = None,
        volume_mode: str = "Filesystem",
        source: Mapping[str, str] | None = None,
    ) -> None:
        spec: dict[str, Any] = {
            "storageClassName": self.classes[disk],
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
            "volumeMode": volume_mode,
        }
        if source is not None:
            spec["dataSourceRef"] = {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", **source}
        self.setup.core.create_namespaced_persistent_volume_claim(
            namespace or self.namespace, manifest({"metadata": {"name": name}, "spec": spec})
        )

    def pod(
        self,
        name: str,
        claim: str,
        script: str,
        *,
        namespace: str | None = None,
        block: bool = False,
    ) -> None:
        """A busybox pod on the node running `script` with the claim at /data (or, `block`,
        as the device DEVICE)."""
        container: dict[str, Any] = {
            "name": "app",
            "image": registry_busybox(self.csi.cluster),
            "command": ["sh", "-c", script],
        }
        if block:
            container["volumeDevices"] = [{"name": "data", "devicePath": DEVICE}]
        else:
            container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        spec = {
            "nodeSelector": {HOSTNAME: NODE},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "dnsPolicy": "Default",
            "containers": [container],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        }
        self.setup.core.create_namespaced_pod(
            namespace or self.namespace, manifest({"metadata": {"name": name}, "spec": spec})
        )

    def wait_pod(
        self, name: str, phases: tuple[str, ...], *, namespace: str | None = None
    ) -> dict[str, Any]:
        namespace = namespace or self.namespace
        pod = self.csi.cluster.wait_for_pod_phase(
            namespace, name, (*phases, "Failed"), timeout=TIMEOUT_SECONDS
        )
        assert pod["status"]["phase"] in phases, (pod["status"], warnings(self, name))
        return pod

    def run(self, name: str, claim: str, script: str, *, namespace: str | None = None) -> None:
        """A pod that must run `script` to its end with success."""
        started = time.monotonic()
        self.pod(name, claim, script, namespace=namespace)
        self.wait_pod(name, ("Succeeded",), namespace=namespace)
        print(f"pod {name}: Succeeded after {time.monotonic() - started:.1f} s")

    def bound(self, claim: str, namespace: str | None = None) -> dict[str, Any]:
        def volume_name() -> str | None:
            found = call_json(
                self.setup.core.read_namespaced_persistent_volume_claim,
                claim,
                namespace or self.namespace,
            )
            return (
                found["spec"].get("volumeName")
                if found.get("status", {}).get("phase") == "Bound"
                else None
            )

        name = eventually(volume_name, TIMEOUT_SECONDS, f"claim {claim} Bound")
        volume = self.setup.volume(name)
        assert volume is not None
        return volume

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot(self, name: str, claim: str, snapshot_class: str) -> None:
        self.custom.create_namespaced_custom_object(
            SNAPSHOT_GROUP,
            VERSION,
            self.namespace,
            "volumesnapshots",
            {
                "apiVersion": f"{SNAPSHOT_GROUP}/{VERSION}",
                "kind": "VolumeSnapshot",
                "metadata": {"name": name},
                "spec": {
                    "volumeSnapshotClassName": snapshot_class,
                    "source": {"persistentVolumeClaimName": claim},
                },
            },
        )

    def read_snapshot(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(
                SNAPSHOT_GROUP, VERSION, self.namespace, "volumesnapshots", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast("dict[str, Any]", found)

    def content(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_cluster_custom_object(
                SNAPSHOT_GROUP, VERSION, "volumesnapshotcontents", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast("dict[str, Any]", found)

    def ready(self, name: str) -> tuple[dict[str, Any], Path]:
        """Waits for the snapshot's readyToUse: (its content, where its data is on the node)."""
        started = time.monotonic()

        seen: list[dict[str, Any]] = [{}]

        def ready() -> dict[str, Any] | None:
            seen[0] = (self.read_snapshot(name) or {}).get("status") or {}
            return seen[0] if seen[0].get("readyToUse") is True else None

        try:
            status = eventually(ready, TIMEOUT_SECONDS, f"VolumeSnapshot {name} ready")
        except TimeoutError as error:
            raise AssertionError(f"{error}; its status: {seen[0]}") from error
        print(f"snapshot {name}: ready after {time.monotonic() - started:.1f} s")
        content = self.content(status["boundVolumeSnapshotContentName"])
        assert content is not None
        made = SnapshotSetup.from_json(
            content["metadata"]["annotations"][SNAPSHOT_SETUP_ANNOTATION]
        )
        return content, self.on_node(made.path)

    def delete_snapshot(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(
                SNAPSHOT_GROUP, VERSION, self.namespace, "volumesnapshots", name
            )


def warnings(stack: SnapshotStack, name: str) -> list[str]:
    return [
        f"{event.get('reason')}: {event.get('message')}"
        for event in stack.setup.events(name)
        if event.get("type") == "Warning"
    ]


def grow(stack: SnapshotStack, claim: str, size: str, size_bytes: int) -> None:
    """Asks for `size` and waits until the claim's status.capacity says it."""
    started = time.monotonic()
    stack.setup.core.patch_namespaced_persistent_volume_claim(
        claim, stack.namespace, {"spec": {"resources": {"requests": {"storage": size}}}}
    )

    def grown() -> str | None:
        capacity = stack.setup.claim(claim).get("status", {}).get("capacity", {}).get("storage")
        return capacity if capacity == size else None

    eventually(grown, TIMEOUT_SECONDS, f"claim {claim}'s status.capacity at {size}")
    volume = stack.bound(claim)
    assert volume["spec"]["capacity"]["storage"] == size
    print(
        f"claim {claim}: grown to {size} ({size_bytes} bytes) in {time.monotonic() - started:.1f} s"
    )


@pytest.fixture(scope="module")
def stack(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SnapshotStack]:
    cluster.enable_snapshots()
    bases = {
        "plain": unique_base_path("real-snap"),
        "btrfs": f"{BTRFS_MOUNT}/snap-{uuid.uuid4().hex[:6]}",
    }
    config = {
        "nodePathMap": [
            {
                "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                "paths": [{"path": base, "create": True} for base in bases.values()],
            }
        ]
    }
    setup = ProvisionerSetup(
        cluster,
        tmp_path_factory.mktemp("snapshots"),
        ConfigFiles(config=config, helper_pod=helper_pod_yaml(cluster)),
    )
    # A short name: the driver's is in the kubelet's registration socket's path (107 bytes).
    setup.name = f"example.com/t{setup.suffix}"
    recorder = HelperPodRecorder(setup).start()
    scratch = Path(tempfile.mkdtemp(prefix="csi-"))
    custom = client.CustomObjectsApi(cluster.admin_client)
    made_classes: list[str] = []
    stack: SnapshotStack | None = None
    try:
        setup.start()
        classes = {
            disk: setup.create_class(disk, parameters={"volumeType": "csi", "nodePath": base})
            for disk, base in bases.items()
        }
        for storage_class in classes.values():
            call_json(
                setup.storage.patch_storage_class, storage_class, {"allowVolumeExpansion": True}
            )
        csi = CsiStack(cluster, setup, recorder, classes["plain"], scratch)
        create_csi_driver(cluster, csi.driver)

        def snapshot_class(name: str, policy: str) -> str:
            custom.create_cluster_custom_object(
                SNAPSHOT_GROUP,
                VERSION,
                "volumesnapshotclasses",
                {
                    "apiVersion": f"{SNAPSHOT_GROUP}/{VERSION}",
                    "kind": "VolumeSnapshotClass",
                    "metadata": {"name": name},
                    "driver": csi.driver,
                    "deletionPolicy": policy,
                },
            )
            made_classes.append(name)
            return name

        delete_classes = {disk: snapshot_class(name, "Delete") for disk, name in classes.items()}
        retain_class = snapshot_class(f"retain-{setup.suffix}", "Retain")
        stack = SnapshotStack(
            csi, classes, bases, delete_classes, retain_class, custom, [setup.namespace]
        )
        csi.start_plugin(NODE)
        yield stack
    finally:
        if stack is not None:
            tear_down(stack)
        for name in made_classes:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(
                    SNAPSHOT_GROUP, VERSION, "volumesnapshotclasses", name
                )
        with contextlib.suppress(ApiException):
            cluster.storage_v1().delete_csi_driver(driver_name_for(setup.name))
        recorder.stop()
        setup.stop_all()
        setup.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)


def tear_down(stack: SnapshotStack) -> None:
    """The pods, the snapshots and the claims go while the plugin runs, so the kubelet can
    unpublish and the node can remove (a Block volume's loop device above all); a volume still
    there after the wait is left to the cluster's own removal."""
    setup = stack.setup
    try:
        remove_what_the_module_made(stack)
    except (ApiException, TimeoutError, AssertionError) as error:
        print(f"the module's objects not all removed: {error}")
    finally:
        stack.csi.stop_plugins()
    for namespace in stack.namespaces[1:]:
        with contextlib.suppress(ApiException):
            setup.core.delete_namespace(namespace)


def remove_what_the_module_made(stack: SnapshotStack) -> None:
    setup = stack.setup
    pods = [
        (namespace, pod["metadata"]["name"])
        for namespace in stack.namespaces
        for pod in call_json(setup.core.list_namespaced_pod, namespace)["items"]
    ]
    for namespace, name in pods:
        setup.core.delete_namespaced_pod(name, namespace)
    for namespace, name in pods:
        wait_gone(
            functools.partial(pod_or_none, setup, namespace, name),
            TIMEOUT_SECONDS,
            f"pod {name} gone",
        )
    for namespace in stack.namespaces:
        snapshots = cast(
            "dict[str, Any]",
            stack.custom.list_namespaced_custom_object(
                SNAPSHOT_GROUP, VERSION, namespace, "volumesnapshots"
            ),
        )
        for snapshot in snapshots["items"]:
            stack.custom.delete_namespaced_custom_object(
                SNAPSHOT_GROUP,
                VERSION,
                namespace,
                "volumesnapshots",
                snapshot["metadata"]["name"],
            )
        setup.core.delete_collection_namespaced_persistent_volume_claim(namespace)
    eventually(
        lambda: (
            not any(
                volume["spec"].get("csi", {}).get("driver") == stack.csi.driver
                for volume in call_json(setup.core.list_persistent_volume)["items"]
            )
            or None
        ),
        TIMEOUT_SECONDS,
        "the module's volumes removed by the node",
    )


def pod_or_none(setup: ProvisionerSetup, namespace: str, name: str) -> object:
    try:
        return call_json(setup.core.read_namespaced_pod, name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


@pytest.mark.parametrize("disk", DISKS)
def test_a_restore_holds_what_was_written_before_its_snapshot_and_not_after(
    stack: SnapshotStack, disk: str
) -> None:
    source, restored = f"source-{disk}", f"restored-{disk}"
    stack.claim(source, disk)
    stack.run(f"{source}-before", source, "echo before > /data/before && sync")
    volume = stack.bound(source)
    stack.snapshot(source, source, stack.delete_classes[disk])
    content, data = stack.ready(source)
    assert (data / "before").read_text() == "before\n"
    # btrfs: a subvolume snapshot; elsewhere a copy (a directory like any other).
    assert (data.stat().st_ino == BTRFS_SUBVOLUME_INODE) == (disk == "btrfs"), disk

    stack.run(f"{source}-between", source, "echo between > /data/between && sync")

    stack.claim(restored, disk, source={"name": source})
    stack.run(
        restored,
        restored,
        'test "$(cat /data/before)" = before && test ! -e /data/between'
        " && echo after > /data/after && sync",
    )
    restore = stack.bound(restored)
    assert stack.directory(restore) != stack.directory(volume)
    assert str(stack.directory(restore)).startswith(str(stack.on_node(stack.bases[disk])))
    assert (stack.directory(restore) / "after").read_text() == "after\n"
    assert (stack.directory(volume) / "between").read_text() == "between\n"
    assert not (stack.directory(volume) / "after").exists(), "the restore's write is its own"
    assert not (data / "between").exists() and not (data / "after").exists()
    if disk == "btrfs":
        assert stack.directory(restore).stat().st_ino == BTRFS_SUBVOLUME_INODE
    assert stack.csi.recorder.pods() == [], "no helper pod, ever"

    # Delete: the snapshot's data leaves the node with it.
    stack.delete_snapshot(source)
    wait_gone(
        lambda: stack.content(content["metadata"]["name"]), TIMEOUT_SECONDS, "the content gone"
    )
    assert not data.exists(), f"{data} is still on the node"


def test_a_deleted_snapshot_s_data_goes_and_a_retained_one_s_stays(
    stack: SnapshotStack,
) -> None:
    stack.claim("kept", "plain")
    stack.run("kept", "kept", "echo kept > /data/file && sync")
    stack.snapshot("deleted", "kept", stack.delete_classes["plain"])
    stack.snapshot("retained", "kept", stack.retain_class)
    deleted, deleted_data = stack.ready("deleted")
    retained, retained_data = stack.ready("retained")
    for data in (deleted_data, retained_data):
        assert (data / "file").read_text() == "kept\n"

    stack.delete_snapshot("deleted")
    stack.delete_snapshot("retained")
    wait_gone(lambda: stack.read_snapshot("deleted"), TIMEOUT_SECONDS, "snapshot deleted gone")
    wait_gone(lambda: stack.read_snapshot("retained"), TIMEOUT_SECONDS, "snapshot retained gone")
    wait_gone(
        lambda: stack.content(deleted["metadata"]["name"]), TIMEOUT_SECONDS, "Delete's content"
    )
    assert not deleted_data.exists(), "Delete: the data left the node"
    retained_name = retained["metadata"]["name"]
    assert stack.content(retained_name) is not None, "Retain: the content outlives its snapshot"
    assert (retained_data / "file").read_text() == "kept\n", "Retain: the data stays"
    # The administrator lets the content go; the data still stays (theirs to remove).
    stack.custom.delete_cluster_custom_object(
        SNAPSHOT_GROUP, VERSION, "volumesnapshotcontents", retained_name
    )
    wait_gone(lambda: stack.content(retained_name), TIMEOUT_SECONDS, "the retained content")
    assert (retained_data / "file").read_text() == "kept\n"


def test_a_tenant_past_its_size_on_btrfs_gets_disk_quota_exceeded_and_a_neighbour_writes_on(
    stack: SnapshotStack,
) -> None:
    stack.claim("tenant", "btrfs")
    # The pod succeeds only if its write of twice its size failed with EDQUOT.
    stack.run(
        "tenant",
        "tenant",
        "dd if=/dev/zero of=/data/fill bs=1M count=32 conv=fsync 2>&1 | tee /dev/stderr"
        " | grep -q 'Disk quota exceeded'",
    )
    tenant = stack.directory(stack.bound("tenant"))
    assert (tenant / "fill").stat().st_size <= 16 * MIB
    stack.claim("neighbour", "btrfs")
    stack.run("neighbour", "neighbour", "dd if=/dev/zero of=/data/blob bs=1M count=8 conv=fsync")
    neighbour = stack.directory(stack.bound("neighbour"))
    assert neighbour.parent == tenant.parent == stack.on_node(stack.bases["btrfs"])
    assert (neighbour / "blob").stat().st_size == 8 * MIB
    assert (tenant / "fill").stat().st_size <= 16 * MIB


def test_a_grown_btrfs_volume_takes_more_than_its_old_size_from_its_running_pod(
    stack: SnapshotStack,
) -> None:
    stack.claim("grows", "btrfs")
    # The pod waits for the test's word, given once the claim has grown.
    stack.pod(
        "grows",
        "grows",
        "until [ -f /data/go ]; do sleep 0.2; done;"
        " dd if=/dev/zero of=/data/big bs=1M count=24 conv=fsync",
    )
    stack.wait_pod("grows", ("Running",))
    directory = stack.directory(stack.bound("grows"))
    grow(stack, "grows", "40Mi", 40 * MIB)
    (directory / "go").write_text("")
    stack.wait_pod("grows", ("Succeeded",))
    assert (directory / "big").stat().st_size == 24 * MIB


def test_a_grown_block_volume_shows_its_running_pod_the_new_device_size(
    stack: SnapshotStack,
) -> None:
    stack.claim("device", "plain", volume_mode="Block")
    # The pod checks the old size, then waits for the new one (it succeeds only on seeing it).
    size = f"blockdev --getsize64 {DEVICE}"
    stack.pod(
        "device",
        "device",
        f'test "$({size})" = {16 * MIB} || exit 3;'
        f' until [ "$({size})" = {32 * MIB} ]; do sleep 0.2; done',
        block=True,
    )
    stack.wait_pod("device", ("Running",))
    volume = stack.bound("device")
    grow(stack, "device", "32Mi", 32 * MIB)
    stack.wait_pod("device", ("Succeeded",))
    # Released here: its loop device must not outlive the module.
    stack.csi.release("device", volume, NODE)


def test_a_restore_across_namespaces_needs_a_reference_grant(stack: SnapshotStack) -> None:
    elsewhere = f"restores-{stack.setup.suffix}"
    stack.csi.cluster.create_namespace(elsewhere)
    stack.namespaces.append(elsewhere)
    stack.claim("shared", "plain")
    stack.run("shared", "shared", "echo shared > /data/file && sync")
    stack.snapshot("shared", "shared", stack.delete_classes["plain"])
    stack.ready("shared")

    stack.claim(
        "across",
        "plain",
        namespace=elsewhere,
        source={"name": "shared", "namespace": stack.namespace},
    )
    stack.pod("across", "across", 'test "$(cat /data/file)" = shared', namespace=elsewhere)
    expected = (
        f"a ReferenceGrant in {stack.namespace} must allow PersistentVolumeClaims of {elsewhere}"
    )

    def refusal() -> dict[str, Any] | None:
        for event in stack.setup.events("across"):
            if (
                event["involvedObject"].get("namespace") == elsewhere
                and event["involvedObject"].get("kind") == "PersistentVolumeClaim"
                and expected in event.get("message", "")
            ):
                return event
        return None

    event = eventually(refusal, TIMEOUT_SECONDS, f"a Warning on the claim saying {expected!r}")
    assert (event["type"], event["reason"]) == ("Warning", "ProvisioningFailed"), event
    claim = call_json(stack.setup.core.read_namespaced_persistent_volume_claim, "across", elsewhere)
    assert claim["status"]["phase"] == "Pending"

    stack.custom.create_namespaced_custom_object(
        "gateway.networking.k8s.io",
        "v1beta1",
        stack.namespace,
        "referencegrants",
        {
            "apiVersion": "gateway.networking.k8s.io/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": {"name": "restores"},
            "spec": {
                "from": [{"group": "", "kind": "PersistentVolumeClaim", "namespace": elsewhere}],
                "to": [{"group": SNAPSHOT_GROUP, "kind": "VolumeSnapshot"}],
            },
        },
    )
    started = time.monotonic()
    stack.wait_pod("across", ("Succeeded",), namespace=elsewhere)
    print(f"restore across namespaces: read after {time.monotonic() - started:.1f} s once granted")
    restored = stack.bound("across", elsewhere)
    assert (stack.directory(restored) / "file").read_text() == "shared\n"
