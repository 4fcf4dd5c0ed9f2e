"""csi-sanity's snapshot tests (CreateSnapshot, DeleteSnapshot, ListSnapshots [Controller
Server]) against the driver's own snapshot code: the node's SnapshotService behind the
Controller binding of services.py, reached through the front (sanity_stand_ins.py), whose
stand-in makes the source volumes and plays the gate (a permit for each snapshot of the run).
Every test of the three suites must pass, but the one SKIPPED lists with why."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.node_volumes.volume_state import VolumeState
from provisioner.objects.snapshot_handoff import SNAPSHOT_AREA
from tests.provisioner.csi.plugin_process import NODE_NAME, plugin_process, require_root
from tests.provisioner.csi.sanity_stand_ins import SnapshotSanityController, serve_front
from tests.provisioner.csi.test_csi_sanity import run_sanity

pytestmark = [pytest.mark.csi, pytest.mark.usefixtures("unmount_leftovers")]

SUITES = ("CreateSnapshot", "DeleteSnapshot", "ListSnapshots")
SKIPPED = {
    "CreateSnapshot [Controller Server] should succeed when creating a snapshot with"
    " accessibility requirements": "no SNAPSHOT_ACCESSIBILITY_CONSTRAINTS: a snapshot lives on"
    " its source's node, which the content's node label already says",
}


def test_csi_sanity_passes_every_snapshot_test(tmp_path: Path) -> None:
    require_root()
    topology = {"kubernetes.io/hostname": NODE_NAME}
    with plugin_process(tmp_path / "plugin") as plugin:
        state = VolumeState(tmp_path / "state")
        controller = SnapshotSanityController(plugin.base_path, topology, state, NODE_NAME)
        front_socket = tmp_path / "front.sock"
        front = serve_front(front_socket, plugin.endpoint, controller)
        try:
            outcomes = run_sanity(
                tmp_path / "snapshots",
                front_socket,
                front_socket,
                f"--ginkgo.focus=({'|'.join(SUITES)}) \\[Controller Server\\]",
                skip=None,
            )
        finally:
            front.stop(None)
    ours = [o for o in outcomes if any(suite in o.name for suite in SUITES)]
    assert ours, "csi-sanity ran no snapshot test"
    assert {o.name for o in ours if o.status != "passed"} == set(SKIPPED), ours
    assert len([o for o in ours if o.status == "passed"]) == 15
    area = plugin.base_path / SNAPSHOT_AREA
    assert not area.exists() or not list(area.iterdir()), (
        "csi-sanity's snapshots were not all deleted"
    )
