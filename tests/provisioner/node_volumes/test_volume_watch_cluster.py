"""The node plugin's watch against the real local control plane: a hand-made CSI PV labelled
for a (fake) node is set up on this machine by the watch, left alone while a permit is not
current, and once Released with the gate's permit torn down and marked; a PV labelled for
another node is never touched."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.csi.node_paths import node_base_paths
from provisioner.kube.client import KubeClients, create_clients
from provisioner.node_volumes.volume_executor import VolumeExecutor
from provisioner.node_volumes.volume_records import VolumeRecord
from provisioner.node_volumes.volume_state import VolumeState
from provisioner.node_volumes.volume_watch import NodeVolumes
from provisioner.objects.node_handoff import (
    NODE_LABEL,
    NODE_SIZE_ANNOTATION,
    REMOVAL_PERMIT_ANNOTATION,
    SETUP_ANNOTATION,
    VOLUME_PATH_KEY,
    NodeCloneSource,
    NodeRemoval,
    VolumeSetup,
    node_label_value,
)
from provisioner.provisioning.annotations import DIRECTORY_REMOVED_ANNOTATION
from tests.provisioner.e2e.support import eventually

pytestmark = pytest.mark.cluster
DRIVER = "local-path.test.local-path-storage.io"
MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture
def clients(cluster: LocalCluster) -> Iterator[KubeClients]:
    made = create_clients(str(cluster.kubeconfig), environ={})
    yield made
    made.close()


def csi_volume(name: str, node: str, setup: VolumeSetup, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "labels": {NODE_LABEL: node_label_value(node)},
            "annotations": {SETUP_ANNOTATION: setup.to_json()},
        },
        "spec": {
            "capacity": {"storage": "1Mi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": namespace, "name": name},
            "csi": {
                "driver": DRIVER,
                "volumeHandle": name,
                "volumeAttributes": {VOLUME_PATH_KEY: setup.path},
            },
        },
    }


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }


def fake_node(tmp_path: Path) -> tuple[str, Path, VolumeExecutor]:
    """A node of a made-up name whose one base path is a temporary directory on this machine,
    and its executor (its records in a state directory beside it)."""
    node = f"fake-{uuid.uuid4().hex[:8]}"
    base = tmp_path.resolve() / "base"
    base.mkdir()
    bundle = load_config_bundle(
        f'{{"nodePathMap": [{{"node": "{node}",'
        f' "paths": [{{"path": "{base}", "create": true}}]}}]}}',
        DEFAULT_SETUP_SCRIPT,
        DEFAULT_TEARDOWN_SCRIPT,
        DEFAULT_HELPER_POD_YAML,
    )
    executor = VolumeExecutor(
        node, bundle, node_base_paths(bundle.config, node), VolumeState(tmp_path / "state")
    )
    return node, base, executor


def test_the_watch_sets_up_and_tears_down_its_nodes_volumes(
    clients: KubeClients, cluster_namespace: str, tmp_path: Path
) -> None:
    node, base, executor = fake_node(tmp_path)
    watch = NodeVolumes(clients, executor, DRIVER, base_delay=0.2, max_delay=1.0)
    ours, theirs = f"pv-{uuid.uuid4().hex[:10]}", f"pv-{uuid.uuid4().hex[:10]}"
    setup = VolumeSetup(str(base), str(base / cluster_namespace / ours), "Filesystem", 1 << 20)
    other = VolumeSetup(str(base), str(base / "theirs"), "Filesystem", 1 << 20)
    volumes = "/api/v1/persistentvolumes"
    watch.start()
    try:
        clients.request_json("POST", volumes, body=csi_volume(ours, node, setup, cluster_namespace))
        clients.request_json(
            "POST", volumes, body=csi_volume(theirs, "another-node", other, cluster_namespace)
        )
        made = claim(ours)
        made = clients.request_json(
            "POST",
            f"/api/v1/namespaces/{cluster_namespace}/persistentvolumeclaims",
            body=made,
        )
        eventually(lambda: Path(setup.path).is_dir() or None, 30, f"{setup.path} to be made")

        def phase() -> str:
            return str(
                clients.request_json("GET", f"{volumes}/{ours}").get("status", {}).get("phase", "")
            )

        eventually(lambda: phase() == "Bound" or None, 60, f"{ours} to bind")
        uid = made["metadata"]["uid"]

        def give(removal: NodeRemoval) -> None:
            clients.request_json(
                "PATCH",
                f"{volumes}/{ours}",
                body={"metadata": {"annotations": {REMOVAL_PERMIT_ANNOTATION: removal.to_json()}}},
                content_type=MERGE_PATCH,
            )

        def seen(removal: NodeRemoval) -> bool | None:
            facts = watch.informer.get(ours)
            return (facts is not None and facts.permit == removal.to_json()) or None

        # A permit that follows another claim's release: while the volume is bound the node
        # only keeps it set up; once it is Released, refused and retried; nothing goes.
        stale = NodeRemoval(ours, setup.path, ours, False, True, "another-claim")
        give(stale)
        eventually(lambda: seen(stale), 30, "the watch to see the permit")
        clients.request_json(
            "DELETE", f"/api/v1/namespaces/{cluster_namespace}/persistentvolumeclaims/{ours}"
        )
        eventually(lambda: phase() == "Released" or None, 60, f"{ours} to be released")
        eventually(
            lambda: watch.queue.num_requeues(ours) > 0 or None, 30, "the refusal to be retried"
        )
        assert Path(setup.path).is_dir()
        give(NodeRemoval(ours, setup.path, ours, False, True, uid))

        def marked() -> bool | None:
            volume = clients.request_json("GET", f"{volumes}/{ours}")
            annotations = volume["metadata"].get("annotations") or {}
            return annotations.get(DIRECTORY_REMOVED_ANNOTATION) == "true" or None

        eventually(marked, 90, f"{ours} to be torn down and marked")
        assert not Path(setup.path).exists()
        assert not Path(other.path).exists()
    finally:
        watch.stop()
        for name in (ours, theirs):
            with contextlib.suppress(Exception):  # best effort: the cluster is per session
                clients.request_json("DELETE", f"{volumes}/{name}")


def test_a_source_s_teardown_first_sets_up_its_clones_not_set_up_yet(
    clients: KubeClients, cluster_namespace: str, tmp_path: Path
) -> None:
    """Forced: a clone's PV is saved, then its source is released with the gate's permit before
    the node came to the clone (the watch's workers are not started; the test hands the keys
    over in this order). The source's teardown sets the clone up first, so the clone holds the
    source's data, and then the source goes."""
    node, base, executor = fake_node(tmp_path)
    watch = NodeVolumes(clients, executor, DRIVER)
    source, clone = f"pv-{uuid.uuid4().hex[:10]}", f"pv-{uuid.uuid4().hex[:10]}"
    source_setup = VolumeSetup(str(base), str(base / source), "Filesystem", 1 << 20)
    volumes = "/api/v1/persistentvolumes"
    claims = f"/api/v1/namespaces/{cluster_namespace}/persistentvolumeclaims"
    watch.informer.start()
    try:
        clients.request_json(
            "POST", volumes, body=csi_volume(source, node, source_setup, cluster_namespace)
        )
        made = clients.request_json("POST", claims, body=claim(source))
        eventually(lambda: watch.informer.get(source), 30, "the watch to see the source")
        assert watch.process(source)
        (Path(source_setup.path) / "data").write_text("the source's data")
        clone_setup = VolumeSetup(
            str(base),
            str(base / clone),
            "Filesystem",
            1 << 20,
            clone_source=NodeCloneSource(
                source, source_setup.path, str(base), made["metadata"]["uid"]
            ),
        )
        clients.request_json(
            "POST", volumes, body=csi_volume(clone, node, clone_setup, cluster_namespace)
        )
        clients.request_json("DELETE", f"{claims}/{source}")
        permit = NodeRemoval(
            source, source_setup.path, source, False, True, made["metadata"]["uid"]
        )
        clients.request_json(
            "PATCH",
            f"{volumes}/{source}",
            body={"metadata": {"annotations": {REMOVAL_PERMIT_ANNOTATION: permit.to_json()}}},
            content_type=MERGE_PATCH,
        )

        def released() -> bool | None:
            facts = watch.informer.get(source)
            seen = facts is not None and facts.phase == "Released" and bool(facts.permit)
            return (seen and watch.informer.get(clone) is not None) or None

        eventually(released, 60, "the source Released with its permit, the clone seen")
        assert not Path(clone_setup.path).exists()
        assert watch.process(source)
        assert (Path(clone_setup.path) / "data").read_text() == "the source's data"
        assert not Path(source_setup.path).exists()
    finally:
        watch.informer.stop()
        watch.events.stop()
        for name in (source, clone):
            with contextlib.suppress(Exception):  # best effort: the cluster is per session
                clients.request_json("DELETE", f"{volumes}/{name}")


def test_a_grown_pv_gets_its_size_applied_and_said_by_the_node(
    clients: KubeClients, cluster_namespace: str, tmp_path: Path
) -> None:
    """The node's part of an expansion: the controller grows the PV's capacity (here by hand),
    the watch applies the size (a plain directory: only its record) and says so on the PV
    (NODE_SIZE_ANNOTATION), once; a PV never grown gets no such write."""
    node, base, executor = fake_node(tmp_path)
    watch = NodeVolumes(clients, executor, DRIVER, base_delay=0.2, max_delay=1.0)
    name = f"pv-{uuid.uuid4().hex[:10]}"
    setup = VolumeSetup(str(base), str(base / name), "Filesystem", 1 << 20)
    volumes = "/api/v1/persistentvolumes"

    def node_size() -> str | None:
        volume = clients.request_json("GET", f"{volumes}/{name}")
        return (volume["metadata"].get("annotations") or {}).get(NODE_SIZE_ANNOTATION)

    watch.start()
    try:
        clients.request_json("POST", volumes, body=csi_volume(name, node, setup, cluster_namespace))
        eventually(lambda: executor.state.read(name), 30, f"{name} to be set up")
        assert node_size() is None
        clients.request_json(
            "PATCH",
            f"{volumes}/{name}",
            body={"spec": {"capacity": {"storage": "3Mi"}}},
            content_type=MERGE_PATCH,
        )
        eventually(lambda: node_size() == str(3 << 20) or None, 30, "the node to say 3Mi")
        assert executor.state.read(name) == VolumeRecord("set-up", setup.path, 3 << 20)
    finally:
        watch.stop()
        with contextlib.suppress(Exception):  # best effort: the cluster is per session
            clients.request_json("DELETE", f"{volumes}/{name}")
