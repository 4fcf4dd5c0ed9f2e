"""A base path that is missing, or declared a mount point and not mounted, gets no volume, on the
real cluster (see provisioner/provisioning/base_path_checks.py); rancher's default path is still
made.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.configuration.config import RANCHER_DEFAULT_PATH
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, eventually

pytestmark = pytest.mark.cluster
NODE = "node-1"
ON_NODE = {"kubernetes.io/hostname": NODE}


def config(entry: str | dict[str, Any], timeout: int = 120) -> ConfigFiles:
    return ConfigFiles(
        config={
            "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [entry]}],
            "cmdTimeoutSeconds": timeout,
        }
    )


def failed_event(setup: ProvisionerSetup, claim: str, timeout: float) -> dict[str, Any]:
    """The ProvisioningFailed event on this claim object (not on a claim of that name in
    another test's namespace)."""
    uid = setup.claim(claim)["metadata"]["uid"]

    def find() -> dict[str, Any] | None:
        for event in setup.events(claim):
            if event["involvedObject"].get("uid") == uid and (
                event.get("reason") == "ProvisioningFailed"
            ):
                return event
        return None

    return eventually(find, timeout, f"a ProvisioningFailed event on {claim}")


def claim_on_node(setup: ProvisionerSetup, name: str) -> None:
    storage_class = setup.create_class(name)
    setup.create_claim(name, storage_class)
    setup.create_consumer(name, name, node_selector=ON_NODE)


def test_a_missing_base_path_is_refused_and_not_made(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/absent-{uuid.uuid4().hex[:6]}"
    setup = make_setup(config(base, timeout=10))
    setup.start()
    claim_on_node(setup, "data")
    event = failed_event(setup, "data", 90)
    assert event["type"] == "Warning"
    assert f"the base path {base} must exist on node {NODE}" in event["message"]
    assert "create: true" in event["message"]
    # The kubelet's own words (a FailedMount event on the helper pod) come only from a real
    # kubelet: real_nodes/test_real_node_failures.py reads them in this message.
    assert setup.phase("data") == "Pending"
    for node in setup.cluster.nodes:
        assert not setup.node_path(node, base).exists(), f"{base} was made on {node}"


def test_a_declared_mount_point_that_is_not_mounted_is_refused(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/unmounted-{uuid.uuid4().hex[:6]}"
    setup = make_setup(config({"path": base, "mountPoint": True}))
    host = setup.node_path(NODE, base)
    host.mkdir(parents=True)  # the empty directory a disk is mounted on
    setup.start()
    claim_on_node(setup, "data")
    event = failed_event(setup, "data", 90)
    assert event["type"] == "Warning"
    assert f"on {NODE}:" in event["message"]
    assert f"its base path {base} is declared a mount point" in event["message"]
    assert setup.phase("data") == "Pending"
    assert list(host.iterdir()) == [], "something was made on the root filesystem"


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """Mounts a tmpfs (a stand-in for the node's data disk) and unmounts it at the end."""
    done: list[Path] = []

    def mount(where: Path) -> None:
        where.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "lps-disk", str(where)], check=True)
        done.append(where)

    yield mount
    for where in done:
        subprocess.run(["umount", str(where)], check=True)


def test_a_mounted_mount_point_and_rancher_s_default_path_get_volumes(
    make_setup: Callable[..., ProvisionerSetup], mounted: Callable[[Path], None]
) -> None:
    base = f"/opt/disk-{uuid.uuid4().hex[:6]}"
    files = config({"path": base, "mountPoint": True})
    files.config["nodePathMap"].append({"node": "node-2", "paths": [RANCHER_DEFAULT_PATH]})
    setup = make_setup(files)
    mounted(setup.node_path(NODE, base))
    setup.start()
    claim_on_node(setup, "data")
    volume = setup.wait_bound("data", timeout=90)
    assert volume["spec"]["hostPath"]["path"].startswith(f"{base}/")
    assert setup.node_path(NODE, volume["spec"]["hostPath"]["path"]).is_dir()

    storage_class = setup.create_class("default")
    setup.create_claim("other", storage_class)
    setup.create_consumer("other", "other", node_selector={"kubernetes.io/hostname": "node-2"})
    other = setup.wait_bound("other", timeout=90)
    assert other["spec"]["hostPath"]["path"].startswith(f"{RANCHER_DEFAULT_PATH}/")
