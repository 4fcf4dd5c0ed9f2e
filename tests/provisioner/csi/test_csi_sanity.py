"""csi-sanity, the CSI community's conformance suite (kubernetes-csi/csi-test, versions.env
CSI_TEST_VERSION, built by scripts/build-go-tools.sh csi-sanity), against the node plugin run
as its own process, with real bind mounts.

Two runs. The first asks the plugin's socket directly, with the stand-in Controller
(sanity_stand_ins.py) making the volumes: every Identity and Node test that applies. The second
goes through the front that advertises a Controller service, for the two whole-volume node tests
csi-sanity runs only then (create, publish, stats, unpublish, delete; the second ten times over,
publish repeated to prove it idempotent).

Every test of the two suites is accounted for: those that pass are listed, those skipped are
listed with why; a test that moves from one list to the other fails this test.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from localcluster.binaries import cache_root, read_versions
from tests.provisioner.csi.plugin_process import NODE_NAME, plugin_process, require_root
from tests.provisioner.csi.sanity_stand_ins import SanityController, serve_controller, serve_front

pytestmark = [pytest.mark.csi, pytest.mark.usefixtures("unmount_leftovers")]

PASSING = {
    "Identity Service GetPluginCapabilities should return appropriate capabilities",
    "Identity Service Probe should return appropriate information",
    "Identity Service GetPluginInfo should return appropriate information",
    "Node Service NodeGetCapabilities should return appropriate capabilities",
    "Node Service NodeGetInfo should return appropriate values",
    "Node Service NodePublishVolume should fail when no volume id is provided",
    "Node Service NodePublishVolume should fail when no target path is provided",
    "Node Service NodePublishVolume should fail when no volume capability is provided",
    "Node Service NodeUnpublishVolume should fail when no volume id is provided",
    "Node Service NodeUnpublishVolume should fail when no target path is provided",
    "Node Service NodeUnpublishVolume should remove target path",
    "Node Service NodeGetVolumeStats should fail when no volume id is provided",
    "Node Service NodeGetVolumeStats should fail when no volume path is provided",
    "Node Service NodeGetVolumeStats should fail when volume is not found",
    "Node Service NodeGetVolumeStats should fail when volume does not exist on the specified path",
    "Node Service NodePublishVolume with single node multi writer capability should fail when"
    " volume with single node single writer access mode is already mounted at a different"
    " target path",
}
WHOLE_VOLUME = {"Node Service should work", "Node Service should be idempotent"}
SKIPPED_WHY = {
    "NodeStageVolume": "no STAGE_UNSTAGE_VOLUME: a directory needs no staging",
    "NodeUnstageVolume": "no STAGE_UNSTAGE_VOLUME",
    "NodeExpandVolume": "no EXPAND_VOLUME: a directory has no size to grow on the node",
    "NodeGetVolumeHealth": "spec v1.13 alpha; we pin v1.12, whose VolumeCondition in"
    " NodeGetVolumeStats is what the kubelet reads",
    "NodeGetStorageHealth": "spec v1.13 alpha, as NodeGetVolumeHealth",
    "should work": "in the first run only: its node socket advertises no Controller service",
    "should be idempotent": "in the first run only, as `should work`",
}


@dataclass(frozen=True)
class Outcome:
    name: str
    status: str
    message: str


def csi_sanity() -> Path:
    version = read_versions()["CSI_TEST_VERSION"]
    binary = cache_root() / "bin" / f"csi-sanity-{version}"
    assert binary.is_file(), f"{binary} is missing: run scripts/build-go-tools.sh csi-sanity"
    return binary


def run_sanity(
    directory: Path,
    endpoint: Path,
    controller: Path,
    *extra: str,
    skip: str | None = "Controller Server",
) -> list[Outcome]:
    directory.mkdir()
    junit = directory / "junit.xml"
    done = subprocess.run(
        [
            str(csi_sanity()),
            f"--csi.endpoint={endpoint}",
            f"--csi.controllerendpoint={controller}",
            f"--csi.mountdir={directory}/mount",
            f"--csi.stagingdir={directory}/staging",
            f"--csi.junitfile={junit}",
            "--ginkgo.no-color",
            # Local directories have no attach limit: NodeGetInfo says 0 (none).
            "--csi.testnodevolumeattachlimit=false",
            # The Controller suites would test the stand-in, not the driver (sanity_stand_ins.py);
            # only the snapshot ones run, against the driver's own code
            # (test_csi_sanity_snapshots.py).
            *([f"--ginkgo.skip={skip}"] if skip else []),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    outcomes = [
        Outcome(
            case.get("name", "").removeprefix("[It] "),
            case.get("status", ""),
            " ".join(
                node.get("message", "") for node in case if node.tag in ("skipped", "failure")
            ),
        )
        for case in ET.parse(junit).iter("testcase")
    ]
    failed = [
        outcome for outcome in outcomes if outcome.status not in ("passed", "skipped", "pending")
    ]
    assert not failed and done.returncode == 0, (
        f"csi-sanity failed: {failed}\n{done.stdout[-6000:]}"
    )
    return outcomes


def ours(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.name.startswith(("Identity Service", "Node Service"))]


def test_csi_sanity_passes_every_identity_and_node_test_that_applies(tmp_path: Path) -> None:
    require_root()
    topology = {"kubernetes.io/hostname": NODE_NAME}
    with plugin_process(tmp_path / "plugin") as plugin:
        controller = SanityController(plugin.base_path, topology)
        controller_socket = tmp_path / "controller.sock"
        stand_in = serve_controller(controller_socket, controller)
        try:
            first = ours(run_sanity(tmp_path / "direct", plugin.socket, controller_socket))
        finally:
            stand_in.stop(None)
        front_socket = tmp_path / "front.sock"
        front = serve_front(front_socket, plugin.endpoint, controller)
        try:
            whole = run_sanity(
                tmp_path / "front",
                front_socket,
                front_socket,
                "--ginkgo.focus=Node Service should (work|be idempotent)",
            )
        finally:
            front.stop(None)

    assert {o.name for o in first if o.status == "passed"} == PASSING
    skipped = [o for o in first if o.status == "skipped"]
    unexplained = [o.name for o in skipped if not any(key in o.name for key in SKIPPED_WHY)]
    assert not unexplained, f"skipped without a reason listed here: {unexplained}"
    assert {o.name for o in whole if o.status == "passed"} == WHOLE_VOLUME
    assert not list(plugin.base_path.iterdir()), "csi-sanity's volumes were not all deleted"
