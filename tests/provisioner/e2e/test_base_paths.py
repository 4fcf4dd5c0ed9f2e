"""A base path that is missing, or declared a mount point and not mounted, gets no volume, on the
real cluster (see provisioner/provisioning/base_path_checks.py); rancher's default path is still
made.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

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


@pytest.mark.parametrize("stray", [False, True], ids=["directory-on-the-disk", "stray-below"])
def test_a_teardown_through_a_mount_point_whose_disk_is_not_mounted_waits_for_the_disk(
    make_setup: Callable[..., ProvisionerSetup], tmp_path: Path, stray: bool
) -> None:
    """The disk under a declared mount point is unmounted while a volume on it is Released: its
    teardown pod cannot start (its directory is on the disk), and the look that follows sees
    only the empty mount point; or (`stray`) a directory of that name on the root filesystem,
    below the empty mount point, lets the pod start. The volume is not taken for gone, nor is
    that directory removed in its place: the PV stays, with a Warning that says the disk is not
    mounted and what to do, and its data waits on the disk; once the disk is mounted again the
    teardown is done as usual."""
    base = f"/opt/disk-{uuid.uuid4().hex[:6]}"
    setup = make_setup(config({"path": base, "mountPoint": True}, timeout=10))
    host = setup.node_path(NODE, base)
    kept = tmp_path / "disk"  # the disk itself, reachable here while it is off the node
    kept.mkdir()
    host.mkdir(parents=True)
    mounts: list[Path] = []

    def mount(*args: str) -> None:
        subprocess.run(["mount", *args], check=True)
        mounts.append(Path(args[-1]))

    try:
        mount("-t", "tmpfs", "lps-disk", str(host))
        mount("--bind", str(host), str(kept))
        setup.start()
        claim_on_node(setup, "data")
        volume = setup.wait_bound("data", timeout=90)
        pv, path = volume["metadata"]["name"], volume["spec"]["hostPath"]["path"]
        data = kept / path.removeprefix(f"{base}/") / "data.txt"
        data.write_text("on the disk")

        setup.core.delete_namespaced_pod("data", setup.namespace, grace_period_seconds=0)
        eventually(lambda: consumer_gone(setup, "data"), 60, "the consumer pod to go")
        subprocess.run(["umount", str(host)], check=True)
        mounts.remove(host)
        below = host / path.removeprefix(f"{base}/")
        if stray:
            below.mkdir()
        setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)

        def warned() -> dict[str, Any] | None:
            for event in setup.events(pv):
                if event.get("reason") == "VolumeFailedDelete" and "mount" in event["message"]:
                    return event
            return None

        event = eventually(warned, 120, f"a VolumeFailedDelete Warning on {pv}")
        assert event["type"] == "Warning"
        assert f"its base path {base} is declared a mount point" in event["message"], event
        assert "no filesystem is mounted there on this node: mount it" in event["message"]
        current = setup.volume(pv)
        assert current is not None and current["status"]["phase"] == "Released"
        assert data.read_text() == "on the disk"
        assert list(host.iterdir()) == ([below] if stray else []), "the root filesystem changed"

        mount("--bind", str(kept), str(host))
        eventually(lambda: setup.volume(pv) is None or None, 180, f"{pv} to be torn down")
        assert not data.parent.exists(), "the teardown left the volume's data on the disk"
    finally:
        for where in reversed(mounts):
            subprocess.run(["umount", str(where)], check=False)
        shutil.rmtree(host, ignore_errors=True)


def consumer_gone(setup: ProvisionerSetup, name: str) -> bool | None:
    try:
        setup.core.read_namespaced_pod(name, setup.namespace)
    except ApiException as error:
        if error.status == HTTPStatus.NOT_FOUND:
            return True
        raise
    return None
