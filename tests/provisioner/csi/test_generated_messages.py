"""The committed CSI messages are what the pinned spec and grpcio-tools generate today."""

from __future__ import annotations

import pytest

from provisioner.csi.generated import csi_pb2
from scripts import generate_csi_proto

pytestmark = pytest.mark.csi


def test_the_generated_files_match_a_fresh_generation() -> None:
    stale = generate_csi_proto.stale_files()
    assert not stale, f"stale: {stale}: run python -m scripts.generate_csi_proto"


def test_the_messages_are_the_pinned_specs_with_the_condition_the_kubelet_reads() -> None:
    spec = generate_csi_proto.spec_version()
    assert f"spec {spec} by grpcio-tools" in generate_csi_proto.header(spec)
    assert "volume_condition" in csi_pb2.NodeGetVolumeStatsResponse.DESCRIPTOR.fields_by_name
    node = csi_pb2.DESCRIPTOR.services_by_name["Node"]
    assert {"NodePublishVolume", "NodeUnpublishVolume", "NodeGetVolumeStats"} <= set(
        node.methods_by_name
    )
