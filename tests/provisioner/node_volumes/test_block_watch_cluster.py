"""The node plugin's watch serving a Block volume against the real local control plane: a
hand-made Block CSI PV is set up by the watch (its directory, its sparse file, its loop device),
the Node service's questions are answered from the PV the watch sees (the device, found again
by a fresh lookup; the usage, by the volume's id alone), and once Released with the gate's
permit the device is detached before the directory goes. Needs root (loop devices)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from provisioner.kube.client import KubeClients
from provisioner.node_volumes.block_volumes import BLOCK_FILE
from provisioner.node_volumes.volume_watch import NodeVolumes
from provisioner.objects.node_handoff import (
    NODE_SIZE_ANNOTATION,
    REMOVAL_PERMIT_ANNOTATION,
    NodeRemoval,
    VolumeSetup,
)
from provisioner.provisioning.annotations import DIRECTORY_REMOVED_ANNOTATION
from tests.provisioner.e2e.support import eventually
from tests.provisioner.node_volumes.test_volume_watch_cluster import (
    DRIVER,
    MERGE_PATCH,
    claim,
    clients,  # noqa: F401 (the fixture)
    csi_volume,
    fake_node,
)

pytestmark = [pytest.mark.cluster, pytest.mark.csi]
MiB = 1 << 20


def devices_of(path: Path) -> list[str]:
    shown = subprocess.run(
        ["losetup", "-j", str(path)], check=False, capture_output=True, text=True
    ).stdout
    return [line.split(":", 1)[0] for line in shown.splitlines()]


def test_the_watch_sets_up_serves_and_removes_a_block_volume(
    clients: KubeClients,  # noqa: F811 (the fixture)
    cluster_namespace: str,
    tmp_path: Path,
) -> None:
    node, base, executor = fake_node(tmp_path)
    watch = NodeVolumes(clients, executor, DRIVER, base_delay=0.2, max_delay=1.0)
    name = f"pv-{uuid.uuid4().hex[:10]}"
    setup = VolumeSetup(str(base), str(base / cluster_namespace / name), "Block", 4 * MiB)
    file = Path(setup.path) / BLOCK_FILE
    volumes = "/api/v1/persistentvolumes"
    body = csi_volume(name, node, setup, cluster_namespace)
    body["spec"]["volumeMode"] = "Block"
    watch.start()
    try:
        clients.request_json("POST", volumes, body=body)
        block_claim = claim(name)
        block_claim["spec"]["volumeMode"] = "Block"
        made = clients.request_json(
            "POST",
            f"/api/v1/namespaces/{cluster_namespace}/persistentvolumeclaims",
            body=block_claim,
        )
        eventually(lambda: devices_of(file) or None, 30, f"{file} to be made and attached")
        [device] = devices_of(file)
        made_file = file.stat()
        assert made_file.st_size == 4 * MiB

        watch.ensure_set_up(name, setup.path)
        assert watch.block_device(name, setup.path) == device
        assert watch.block_usage(name) == (device, 4 * MiB, 0)

        # The node's part of an expansion: the controller grew the PV (here by hand); the
        # watch grows the file and its device, then says the size on the PV.
        clients.request_json(
            "PATCH",
            f"{volumes}/{name}",
            body={"spec": {"capacity": {"storage": "8Mi"}}},
            content_type=MERGE_PATCH,
        )

        def node_size() -> str | None:
            volume = clients.request_json("GET", f"{volumes}/{name}")
            return (volume["metadata"].get("annotations") or {}).get(NODE_SIZE_ANNOTATION)

        assert eventually(node_size, 30, "the node to say the grown size") == str(8 * MiB)
        assert file.stat().st_size == 8 * MiB
        size = subprocess.run(
            ["blockdev", "--getsize64", device], check=True, capture_output=True, text=True
        )
        assert int(size.stdout) == 8 * MiB

        clients.request_json(
            "DELETE", f"/api/v1/namespaces/{cluster_namespace}/persistentvolumeclaims/{name}"
        )

        def released() -> bool | None:
            volume = clients.request_json("GET", f"{volumes}/{name}")
            return volume.get("status", {}).get("phase") == "Released" or None

        eventually(released, 60, f"{name} to be released")
        permit = NodeRemoval(name, setup.path, name, False, True, made["metadata"]["uid"])
        clients.request_json(
            "PATCH",
            f"{volumes}/{name}",
            body={"metadata": {"annotations": {REMOVAL_PERMIT_ANNOTATION: permit.to_json()}}},
            content_type=MERGE_PATCH,
        )

        def marked() -> bool | None:
            volume = clients.request_json("GET", f"{volumes}/{name}")
            annotations = volume["metadata"].get("annotations") or {}
            return annotations.get(DIRECTORY_REMOVED_ANNOTATION) == "true" or None

        eventually(marked, 60, f"{name} to be torn down and marked")
        assert not Path(setup.path).exists()
        # No loop device is left on the file (its number may be another's by now).
        listed = subprocess.run(
            ["losetup", "--list", "--json", "-O", "NAME,BACK-INO,BACK-MAJ:MIN"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        disk = made_file.st_dev
        identity = (str(made_file.st_ino), f"{os.major(disk)}:{os.minor(disk)}")
        backing = {
            (str(row["back-ino"]).strip(), str(row["back-maj:min"]).strip())
            for row in (json.loads(listed)["loopdevices"] if listed.strip() else [])
        }
        assert identity not in backing
    finally:
        watch.stop()
        for leftover in devices_of(file):
            subprocess.run(["losetup", "-d", leftover], check=False)
        with contextlib.suppress(Exception):  # best effort: the cluster is per session
            clients.request_json("DELETE", f"{volumes}/{name}")
