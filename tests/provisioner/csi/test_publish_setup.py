"""NodePublishVolume asks the node's volume manager (--manage-volumes) for the volume's setup
before it mounts anything: a setup that cannot be had leaves the target unmounted, and the
kubelet retries. The manager stands in here (its own tests run it for real, against the
control plane); the mounts are real."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from provisioner.configuration.config import BasePathRules
from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2
from provisioner.csi.mounts import read_mount_table
from provisioner.csi.node_server import NodeServer
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from tests.provisioner.csi.plugin_process import mount_capability

pytestmark = [pytest.mark.csi, pytest.mark.usefixtures("unmount_leftovers")]


class StandIn:
    """Makes the directory, or refuses, as told; records what it was asked."""

    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.asked: list[tuple[str, str]] = []

    def ensure_set_up(self, volume_id: str, path: str) -> None:
        self.asked.append((volume_id, path))
        if self.refuse:
            raise CsiError(grpc.StatusCode.UNAVAILABLE, "not seen yet")
        Path(path).mkdir()


def request(directory: Path, target: Path) -> csi_pb2.NodePublishVolumeRequest:
    return csi_pb2.NodePublishVolumeRequest(
        volume_id="pv-1",
        target_path=str(target),
        volume_capability=mount_capability(),
        volume_context={VOLUME_PATH_KEY: str(directory)},
    )


@pytest.mark.parametrize("refuse", [True, False])
def test_publish_mounts_only_a_volume_its_manager_set_up(tmp_path: Path, refuse: bool) -> None:
    base = tmp_path.resolve() / "base"
    base.mkdir()
    directory, target = base / "pv-1", tmp_path.resolve() / "target"
    manager = StandIn(refuse)
    server = NodeServer("n1", {str(base): BasePathRules(create=True)}, {}, volume_setups=manager)
    if refuse:
        with pytest.raises(CsiError) as refused:
            server.node_publish_volume(request(directory, target))
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert not target.exists()
    else:
        server.node_publish_volume(request(directory, target))
        assert any(entry.mount_point == str(target) for entry in read_mount_table())
        server.node_unpublish_volume(
            csi_pb2.NodeUnpublishVolumeRequest(volume_id="pv-1", target_path=str(target))
        )
    assert manager.asked == [("pv-1", str(directory))]
