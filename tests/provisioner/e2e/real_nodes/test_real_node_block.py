"""A Block volume of a CSI class on a real node: a real kubelet (its own `losetup` on the
published file included) hands the node plugin's loop device to a pod, which writes raw bytes
through it; they land in the volume's sparse file on the node's disk; the kubelet reports the
volume's size from the plugin; a second pod on the same volume reads them back; the release
detaches the device and removes the directory by the gate's permit, with no helper pod."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from localcluster.raw_api import manifest
from provisioner.node_volumes import loop_devices
from provisioner.node_volumes.block_volumes import BLOCK_FILE
from tests.provisioner.e2e.real_nodes.support import HOSTNAME, registry_busybox
from tests.provisioner.e2e.real_nodes.test_real_node_csi import (
    TIMEOUT_SECONDS,
    CsiStack,
    csi,  # noqa: F401 (the fixture)
    delete_pod_and_wait,
    wait_for_sample,
    warnings,
)
from tests.provisioner.e2e.support import ProvisionerSetup, eventually

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]

MIB = 1 << 20
DEVICE = "/dev/xvda"
PAYLOAD = "raw through the device"
OFFSET = 4096


def create_block_pod(
    setup: ProvisionerSetup, name: str, claim: str, node: str, script: str
) -> None:
    spec: dict[str, Any] = {
        "nodeSelector": {HOSTNAME: node},
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "dnsPolicy": "Default",
        "containers": [
            {
                "name": "app",
                "image": registry_busybox(setup.cluster),
                "command": ["sh", "-c", script],
                "volumeDevices": [{"name": "data", "devicePath": DEVICE}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }
    setup.core.create_namespaced_pod(
        setup.namespace, manifest({"metadata": {"name": name}, "spec": spec})
    )


def test_a_pod_writes_a_block_volume_raw_and_another_reads_it_back(
    csi: CsiStack,  # noqa: F811 (the fixture)
) -> None:
    csi.start_plugin("real-1")
    csi.setup.create_claim("disk", csi.storage_class, size="16Mi", volume_mode="Block")
    write = (
        f"printf '{PAYLOAD}' | dd of={DEVICE} bs=512 seek={OFFSET // 512} conv=notrunc"
        " && sync && exec sleep 3600"
    )
    create_block_pod(csi.setup, "writer", "disk", "real-1", write)
    volume = csi.setup.wait_bound("disk", timeout=TIMEOUT_SECONDS)
    assert volume["spec"]["volumeMode"] == "Block"
    pod = csi.cluster.wait_for_pod_phase(
        csi.namespace, "writer", ("Running", "Failed"), timeout=TIMEOUT_SECONDS
    )
    assert pod["status"]["phase"] == "Running", (pod["status"], warnings(csi.setup, "writer"))
    file = csi.directory(volume, "real-1") / BLOCK_FILE
    # Held open to find its device by, should the test fail: the harness removes the base
    # path after a test, and a device left attached would outlive it.
    held = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        read_back(csi, file)
        csi.release("disk", volume, "real-1")
        assert f"volume {volume['metadata']['name']}: removed" in csi.plugins["real-1"].output()
        assert loop_devices.find(held) is None, "the plugin detached the device"
    except BaseException:
        while (device := loop_devices.find(held)) is not None:
            loop_devices.detach(device)  # at its last close, if still held
            if loop_devices.find(held) == device:
                break
        raise
    finally:
        os.close(held)


def read_back(stack: CsiStack, file: Path) -> None:
    """The writer's bytes in the node's file, the kubelet's size of the volume, then a second
    pod reading them through its own device."""

    def written() -> bool | None:
        with file.open("rb") as data:
            data.seek(OFFSET)
            return data.read(len(PAYLOAD)) == PAYLOAD.encode() or None

    eventually(written, 30, f"the pod's bytes in {file}")
    assert file.stat().st_size == 16 * MIB
    capacity = wait_for_sample(
        stack, "real-1", "kubelet_volume_stats_capacity_bytes", "disk", lambda v: v > 0
    )
    assert capacity == 16 * MIB

    delete_pod_and_wait(stack.setup, "writer")
    read = (
        f'test "$(dd if={DEVICE} bs=512 skip={OFFSET // 512} count=1 2>/dev/null'
        f" | head -c {len(PAYLOAD)})\" = '{PAYLOAD}'"
    )
    create_block_pod(stack.setup, "reader", "disk", "real-1", read)
    finished = stack.cluster.wait_for_pod_phase(
        stack.namespace, "reader", ("Succeeded", "Failed"), timeout=TIMEOUT_SECONDS
    )
    assert finished["status"]["phase"] == "Succeeded", (
        finished["status"],
        warnings(stack.setup, "reader"),
    )
    assert "NodePublishVolume refused" not in stack.plugins["real-1"].output()
    delete_pod_and_wait(stack.setup, "reader")
