"""Cloning a volume on the real cluster: the copy is the source's tree (links, hard links,
holes, owners, modes, times), made on the source's node; each refusal says why on the claim;
a consumer on another node sends the claim back to the scheduler; a source deleted while its
clone is made is never handed out half copied (see provisioner/provisioning/clones.py)."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster.raw_api import manifest
from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

NODE = "node-1"
ON_NODE = {"kubernetes.io/hostname": NODE}
SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
SPARSE_BYTES = 64 << 20


def create_clone(
    setup: ProvisionerSetup,
    name: str,
    source: str,
    storage_class: str,
    *,
    size: str = "1Gi",
    kind: str = "PersistentVolumeClaim",
    api_group: str | None = None,
    namespace: str | None = None,
) -> None:
    data_source: dict[str, Any] = {"kind": kind, "name": source}
    if namespace is not None:
        data_source["namespace"] = namespace
    if api_group is not None:
        data_source["apiGroup"] = api_group
    body = {
        "metadata": {"name": name},
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
            "dataSourceRef": data_source,
        },
    }
    setup.core.create_namespaced_persistent_volume_claim(setup.namespace, manifest(body))


def started_with_class(
    make_setup: Callable[..., ProvisionerSetup],
) -> tuple[ProvisionerSetup, str, str]:
    """A running provisioner on a base path of its own, and its class `clones`."""
    base = f"/opt/clones-{uuid.uuid4().hex[:6]}"
    setup = make_setup(ConfigFiles(config=default_config(base)))
    setup.start()
    return setup, base, setup.create_class("clones")


def claim_and_consume(setup: ProvisionerSetup, name: str, storage_class: str) -> dict[str, Any]:
    setup.create_claim(name, storage_class)
    setup.create_consumer(name, name, node_selector=ON_NODE)
    return setup.wait_bound(name)


def our_events(setup: ProvisionerSetup, claim: str) -> list[dict[str, Any]]:
    """The events our provisioner wrote on this claim object (not an earlier one of its name)."""
    uid = setup.claim(claim)["metadata"]["uid"]
    return [
        event
        for event in setup.events(claim)
        if event["involvedObject"].get("uid") == uid
        and event.get("reportingComponent") == setup.name
    ]


def wait_refusal(setup: ProvisionerSetup, claim: str, text: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for event in our_events(setup, claim):
            if event["reason"] == "ProvisioningFailed" and text in event["message"]:
                return event
        return None

    event = eventually(find, 90, f"a ProvisioningFailed event on {claim} saying {text!r}")
    assert event["type"] == "Warning"
    return event


def fill(directory: Path) -> None:
    """A tree with what a copy can get wrong: links pointing out of the volume, a hard link,
    a sparse file, other owners, modes and times."""
    (directory / "dir" / "deeper").mkdir(parents=True)
    (directory / "dir" / "file").write_text("some data")
    os.chown(directory / "dir" / "file", 1234, 5678)
    (directory / "dir" / "file").chmod(0o640)
    os.link(directory / "dir" / "file", directory / "hard-link")
    (directory / "out").symlink_to("/etc/passwd")
    (directory / "dir" / "up").symlink_to("../../../../..")
    with (directory / "sparse").open("wb") as sparse:
        sparse.seek(SPARSE_BYTES // 2)
        sparse.write(b"x")
        sparse.truncate(SPARSE_BYTES)
    os.chown(directory / "dir", 42, 43, follow_symlinks=False)
    (directory / "dir").chmod(0o2751)
    os.utime(directory / "dir" / "deeper", ns=(1_000_000_000, 1_000_000_000))


def tree_digest(root: Path) -> str:
    """A checksum of the tree as a copy must keep it: names, types, owners, modes, link
    counts, times of files and directories, contents and link targets."""
    digest = hashlib.sha256()
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        if path.is_symlink():
            content = str(path.readlink())
        elif path.is_file():
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            content = ""
        row = (
            str(path.relative_to(root)),
            st.st_mode,
            st.st_uid,
            st.st_gid,
            st.st_nlink if not path.is_dir() else 0,
            st.st_mtime_ns if not path.is_symlink() else 0,
            st.st_size if not path.is_dir() else 0,
            content,
        )
        digest.update(repr(row).encode())
    return digest.hexdigest()


def test_a_clone_holds_the_sources_tree_on_its_node_and_the_source_keeps_working(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup, _, storage_class = started_with_class(make_setup)
    source = claim_and_consume(setup, "source", storage_class)
    source_dir = setup.node_path(NODE, volume_path(source))
    fill(source_dir)
    before = tree_digest(source_dir)

    create_clone(setup, "copy", "source", storage_class, size="2Gi")
    setup.create_consumer("copy", "copy", node_selector=ON_NODE)
    clone = setup.wait_bound("copy", timeout=90)

    assert volume_node(clone) == NODE
    assert clone["spec"]["capacity"]["storage"] == "2Gi"
    clone_dir = setup.node_path(NODE, volume_path(clone))
    assert clone_dir != source_dir
    assert tree_digest(clone_dir) == before
    assert tree_digest(source_dir) == before
    assert (clone_dir / "sparse").stat().st_blocks * 512 < SPARSE_BYTES // 4
    assert (clone_dir / "hard-link").stat().st_ino == (clone_dir / "dir" / "file").stat().st_ino
    assert setup.phase("source") == "Bound"
    [succeeded] = [e for e in our_events(setup, "copy") if e["reason"] == "ProvisioningSucceeded"]
    assert succeeded["type"] == "Normal"


def test_each_refusal_says_why_on_the_claim_and_makes_nothing(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup, base, storage_class = started_with_class(make_setup)
    other_class = setup.create_class("other")
    claim_and_consume(setup, "source", storage_class)
    claim_and_consume(setup, "other-class-source", other_class)
    setup.create_claim("pending-source", storage_class)

    # A snapshot is another controller's to restore: handed to us, it gets no event from us
    # and nothing is made for it.
    create_clone(
        setup,
        "from-snapshot",
        "snap",
        storage_class,
        kind="VolumeSnapshot",
        api_group="snapshot.storage.k8s.io",
    )
    setup.create_consumer("from-snapshot", "from-snapshot", node_selector=ON_NODE)
    eventually(
        lambda: setup.annotations("from-snapshot").get(STORAGE_PROVISIONER) == setup.name or None,
        60,
        "the snapshot claim to be handed to us",
    )
    refusals = {
        "missing": ("nothing-by-this-name", "1Gi", "(spec.dataSource) not found"),
        "other-class": ("other-class-source", "1Gi", "a clone must be of its source's class"),
        "too-small": ("source", "512Mi", "holds 1Gi, more than this claim requests"),
        "early": ("pending-source", "1Gi", "is not Bound yet: the clone is made once it is"),
        "elsewhere": ("source", "1Gi", "is in another namespace: a clone's source must be"),
    }
    # The API server keeps dataSourceRef.namespace (CrossNamespaceVolumeDataSource, on in the
    # harness); the claim names a source of the same name in another tenant's namespace.
    elsewhere = {"elsewhere": "kube-public"}
    for name, (source, size, _) in refusals.items():
        create_clone(setup, name, source, storage_class, size=size, namespace=elsewhere.get(name))
        setup.create_consumer(name, name, node_selector=ON_NODE)
    assert setup.claim("elsewhere")["spec"]["dataSourceRef"]["namespace"] == "kube-public"
    for name, (_, _, text) in refusals.items():
        wait_refusal(setup, name, text)
        assert setup.phase(name) == "Pending"
        assert setup.volume(f"pvc-{setup.claim(name)['metadata']['uid']}") is None

    # The snapshot claim was handed to us before the refused ones, and nothing came of it.
    assert our_events(setup, "from-snapshot") == []
    assert setup.phase("from-snapshot") == "Pending"
    base_dir = setup.node_path(NODE, base)
    made = {p.name for p in base_dir.iterdir() if not p.name.startswith(".")}
    uids = {setup.claim(n)["metadata"]["uid"] for n in [*refusals, "from-snapshot"]}
    assert not [name for name in made if any(uid in name for uid in uids)]

    # A source that binds later gets its waiting clone made at once, without a resync.
    setup.create_consumer("pending-source", "pending-source", node_selector=ON_NODE)
    setup.wait_bound("pending-source")
    clone = setup.wait_bound("early", timeout=90)
    assert volume_node(clone) == NODE


def test_a_pv_another_provisioner_made_is_not_cloned(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup, base, storage_class = started_with_class(make_setup)
    foreign_pv = f"foreign-{setup.suffix}"
    path = f"{base}/foreign"
    setup.node_path(NODE, path).mkdir(parents=True)
    setup.core.create_persistent_volume(
        manifest(
            {
                "metadata": {"name": foreign_pv},
                "spec": {
                    "storageClassName": storage_class,
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": path, "type": "Directory"},
                    "claimRef": {"namespace": setup.namespace, "name": "static"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": [NODE],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        )
    )
    try:
        body = {
            "metadata": {"name": "static"},
            "spec": {
                "storageClassName": storage_class,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": foreign_pv,
            },
        }
        setup.core.create_namespaced_persistent_volume_claim(setup.namespace, manifest(body))
        setup.wait_bound("static")
        create_clone(setup, "copy", "static", storage_class)
        setup.create_consumer("copy", "copy", node_selector=ON_NODE)
        event = wait_refusal(setup, "copy", f"volume {foreign_pv} of source claim")
        assert "only volumes this provisioner made can be cloned" in event["message"]
        assert setup.phase("copy") == "Pending"
    finally:
        setup.core.delete_persistent_volume(foreign_pv)


def test_a_consumer_on_another_node_sends_the_claim_back_to_the_scheduler(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup, _, storage_class = started_with_class(make_setup)
    source = claim_and_consume(setup, "source", storage_class)
    (setup.node_path(NODE, volume_path(source)) / "data").write_text("on node-1")

    create_clone(setup, "copy", "source", storage_class)
    setup.create_consumer("copy", "copy", node_selector={"kubernetes.io/hostname": "node-2"})
    event = wait_refusal(setup, "copy", "selected node node-2 cannot hold a clone")
    assert "its data is on node node-1" in event["message"]
    assert "pin the claim's consumer there" in event["message"]
    assert f"removed {SELECTED_NODE}" in event["message"]
    assert setup.volume(f"pvc-{setup.claim('copy')['metadata']['uid']}") is None

    # Pinned as the event says, the consumer gets its copy on the source's node.
    setup.core.delete_namespaced_pod("copy", setup.namespace, grace_period_seconds=0)
    wait_gone(
        lambda: setup.cluster.read_pod(setup.namespace, "copy"),
        60,
        "the consumer on node-2 to go",
    )
    setup.create_consumer("copy", "copy", node_selector=ON_NODE)
    clone = setup.wait_bound("copy", timeout=120)
    assert volume_node(clone) == NODE
    assert (setup.node_path(NODE, volume_path(clone)) / "data").read_text() == "on node-1"


HOLD_SETUP = ".hold-setup"
# The clone's setup (the step before its copy) waits while the base path holds HOLD_SETUP, and
# a volume's teardown while it holds `.hold-<its directory>`: the test decides the interleaving.
HELD_SETUP = DEFAULT_SETUP_SCRIPT.replace(
    "set -eu\n",
    f'set -eu\nwhile [ -e "$LPS_BASE_VIEW/{HOLD_SETUP}" ]; do sleep 0.2; done\n',
    1,
)
HELD_TEARDOWN = DEFAULT_TEARDOWN_SCRIPT.replace(
    "set -eu\n",
    'set -eu\nwhile [ -e "$LPS_BASE_VIEW/.hold-${VOL_DIR##*/}" ]; do sleep 0.2; done\n',
    1,
)


def test_a_source_deleted_while_its_clone_is_made_leaves_no_volume_and_no_directory(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/clones-{uuid.uuid4().hex[:6]}"
    files = ConfigFiles(config=default_config(base), setup=HELD_SETUP, teardown=HELD_TEARDOWN)
    setup = make_setup(files)
    setup.start()
    storage_class = setup.create_class("clones")
    source = claim_and_consume(setup, "source", storage_class)
    source_dir = setup.node_path(NODE, volume_path(source))
    fill(source_dir)
    base_dir = setup.node_path(NODE, base)
    (base_dir / HOLD_SETUP).touch()
    (base_dir / f".hold-{source_dir.name}").touch()

    create_clone(setup, "copy", "source", storage_class)
    setup.create_consumer("copy", "copy", node_selector=ON_NODE)
    clone_volume = f"pvc-{setup.claim('copy')['metadata']['uid']}"

    def setup_running() -> bool | None:
        # The setup is an init container of the clone's pod (the copy its main container).
        pod = setup.cluster.read_pod(setup.namespace, f"helper-create-{clone_volume}") or {}
        statuses = (pod.get("status") or {}).get("initContainerStatuses") or ()
        running = [s["name"] for s in statuses if "running" in (s.get("state") or {})]
        return True if running == ["helper-pod"] else None

    eventually(setup_running, 90, "the clone's setup to run (and wait)")
    # The source goes while its clone is being made; its teardown waits, its data intact.
    setup.core.delete_namespaced_pod("source", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("source", setup.namespace)
    source_volume = source["metadata"]["name"]

    def released() -> bool | None:
        volume = setup.volume(source_volume)
        return True if volume and volume.get("status", {}).get("phase") == "Released" else None

    eventually(released, 60, "the source's volume to be Released")
    (base_dir / HOLD_SETUP).unlink()

    # The copy ran on the whole tree, but its source went meanwhile: it is given back.
    event = wait_refusal(setup, "copy", "was deleted during the copy, so the copy may miss files")
    assert "giving" in event["message"]
    wait_refusal(setup, "copy", "(spec.dataSource) not found")
    assert setup.volume(clone_volume) is None
    assert setup.phase("copy") == "Pending"
    clone_dirs = [p for p in base_dir.iterdir() if p.name.startswith(clone_volume)]
    assert clone_dirs == []

    (base_dir / f".hold-{source_dir.name}").unlink()
    wait_gone(lambda: setup.volume(source_volume), 90, "the source's volume to be torn down")
    assert not source_dir.exists()


def test_a_source_directory_replaced_by_a_link_is_never_copied(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """A source's directory swapped for a link to another volume's (a tenant with a way onto
    the node, or an admin's mistake): the kubelet follows the link when it mounts the source,
    so the check must see through it, and nothing is copied."""
    setup, base, storage_class = started_with_class(make_setup)
    source = claim_and_consume(setup, "source", storage_class)
    victim = claim_and_consume(setup, "victim", storage_class)
    victim_dir = setup.node_path(NODE, volume_path(victim))
    (victim_dir / "secret").write_text("another claim's data")
    source_dir = setup.node_path(NODE, volume_path(source))
    source_dir.rename(source_dir.with_name(f".aside-{source_dir.name}"))
    source_dir.symlink_to(victim_dir.name)

    create_clone(setup, "copy", "source", storage_class)
    setup.create_consumer("copy", "copy", node_selector=ON_NODE)
    event = wait_refusal(setup, "copy", "is reached through a symbolic link")
    assert f"refusing to clone {volume_path(source)}" in event["message"]
    clone_volume = f"pvc-{setup.claim('copy')['metadata']['uid']}"
    assert setup.volume(clone_volume) is None

    def clone_dirs() -> list[Path] | None:
        base_dir = setup.node_path(NODE, base)
        return [p for p in base_dir.iterdir() if p.name.startswith(clone_volume)] or None

    wait_gone(clone_dirs, 60, "the clone's empty directory to be removed")
    assert sorted(p.name for p in victim_dir.iterdir()) == ["secret"]
