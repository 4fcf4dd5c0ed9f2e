"""Clones and expansion on a real node: the clone step's two containers and the resize helper run
by the real kubelet, on data a pod really wrote there.

Cloning needs GNU cp in the helper image (busybox's cannot keep holes or reflinks): the
cluster's registry holds busybox with GNU cp added, and the default busybox fails as
docs/volumes.md says.
"""

from __future__ import annotations

import pytest

from localcluster import LocalCluster
from localcluster.raw_api import call_json, manifest
from provisioner.helper_pods.clone_step import CHECK_CONTAINER, COPY_CONTAINER
from tests.faults.support import unique_base_path
from tests.provisioner.e2e.real_nodes.support import (
    Serve,
    assert_ran_under_containerd_from_the_registry,
    create_writer,
    helper_pod_yaml,
    real_nodes,
    wait_succeeded,
)
from tests.provisioner.e2e.support import ProvisionerSetup, volume_node, volume_path

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]

# A tree with a hard link, a symbolic link and a sparse file, written by the pod on the node.
WRITE_TREE = (
    "mkdir -p /data/dir && echo source data > /data/dir/file && ln /data/dir/file /data/hard"
    " && ln -s dir/file /data/link && dd if=/dev/zero of=/data/sparse bs=1 count=1 seek=33554431"
)
# Exits non-zero unless the clone holds that tree, as a pod on the node sees it.
READ_TREE = (
    'test "$(cat /data/dir/file)" = "source data" && test "$(cat /data/link)" = "source data"'
    ' && test "$(stat -c %i /data/hard)" = "$(stat -c %i /data/dir/file)"'
    ' && test "$(stat -c %s /data/sparse)" = 33554432'
)


def create_clone(setup: ProvisionerSetup, name: str, source: str, storage_class: str) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": source},
        },
    }
    setup.core.create_namespaced_persistent_volume_claim(setup.namespace, manifest(body))


def with_coreutils(cluster: LocalCluster) -> str:
    """The default helper template with the registry's busybox that has GNU cp."""
    coreutils = real_nodes(cluster).coreutils
    assert coreutils is not None
    return helper_pod_yaml(cluster, coreutils.by_tag)


def test_a_clone_on_a_real_node_holds_what_the_source_s_pod_wrote(
    cluster: LocalCluster, serving: Serve
) -> None:
    base = unique_base_path("real-clone")
    setup, recorder = serving(base, helper_pod=with_coreutils(cluster))
    storage_class = setup.create_class("clones")
    setup.create_claim("source", storage_class)
    create_writer(setup, "source", "source", "real-2", WRITE_TREE)
    source = setup.wait_bound("source", timeout=90)
    wait_succeeded(setup, ["source"])

    create_clone(setup, "copy", "source", storage_class)
    create_writer(setup, "reader", "copy", "real-2", READ_TREE)
    clone = setup.wait_bound("copy", timeout=90)
    wait_succeeded(setup, ["reader"])
    assert volume_node(clone) == "real-2"
    assert volume_path(clone) != volume_path(source)
    copied = setup.node_path("real-2", volume_path(clone))
    assert (copied / "dir" / "file").read_text() == "source data\n"
    assert (copied / "sparse").stat().st_blocks * 512 < (32 << 20) // 4, "holes kept"
    assert not setup.node_path("real-1", volume_path(clone)).exists()
    # The copy runs in the clone's one setup pod, after `prepare`, the setup and the check.
    clones = [
        pod
        for pod in recorder.pods()
        if [c["name"] for c in pod.status.get("containerStatuses") or ()] == [COPY_CONTAINER]
    ]
    assert len(clones) == 1, [pod.action for pod in recorder.pods()]
    (clone_pod,) = clones
    # (No `prepare`: the directory is named for its volume, in a base path that may be made.)
    assert [c["name"] for c in clone_pod.status["initContainerStatuses"]] == [
        "helper-pod",
        CHECK_CONTAINER,
    ]
    assert_ran_under_containerd_from_the_registry(cluster, clones, real_nodes(cluster).coreutils)


def test_cloning_with_busybox_fails_saying_the_helper_image_needs_gnu_cp(serving: Serve) -> None:
    base = unique_base_path("real-clone-busybox")
    setup, _ = serving(base)
    storage_class = setup.create_class("clones")
    setup.create_claim("source", storage_class)
    create_writer(setup, "source", "source", "real-1", "echo data > /data/file")
    setup.wait_bound("source", timeout=90)
    create_clone(setup, "copy", "source", storage_class)
    create_writer(setup, "reader", "copy", "real-1", "true")
    failed = setup.wait_event("copy", "ProvisioningFailed", timeout=90)
    assert "cloning needs GNU cp (coreutils) in the helper image" in failed["message"], failed
    assert setup.phase("copy") == "Pending"


def test_an_expansion_on_a_real_node_runs_its_resize_helper_and_grows_the_volume(
    cluster: LocalCluster, serving: Serve
) -> None:
    base = unique_base_path("real-resize")
    setup, recorder = serving(base)
    storage_class = setup.create_class("grow")
    call_json(setup.storage.patch_storage_class, storage_class, {"allowVolumeExpansion": True})
    setup.create_claim("data", storage_class, size="1Gi")
    create_writer(setup, "writer", "data", "real-1", "echo kept > /data/file")
    volume = setup.wait_bound("data", timeout=90)
    wait_succeeded(setup, ["writer"])

    setup.core.patch_namespaced_persistent_volume_claim(
        "data", setup.namespace, {"spec": {"resources": {"requests": {"storage": "3Gi"}}}}
    )
    setup.wait_event("data", "VolumeResizeSuccessful", timeout=90)
    grown = setup.volume(volume["metadata"]["name"])
    assert grown is not None and grown["spec"]["capacity"]["storage"] == "3Gi"
    path = setup.node_path("real-1", volume_path(volume))
    assert (path / "file").read_text() == "kept\n"
    resized = [pod for pod in recorder.pods() if pod.action == "resize"]
    assert len(resized) == 1, [pod.action for pod in recorder.pods()]
    assert resized[0].status.get("phase") == "Succeeded", resized[0].status
    assert_ran_under_containerd_from_the_registry(cluster, resized)
    # Its termination message, read back from the real kubelet: no quota on this filesystem.
    assert f"volume {volume['metadata']['name']}: no-quota" in setup.replicas[0].log()
