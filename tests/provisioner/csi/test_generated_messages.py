"""The committed messages (CSI, kubelet plugin registration) are what the pinned modules and
grpcio-tools generate today."""

from __future__ import annotations

import pytest

from provisioner.csi.generated import csi_pb2, pluginregistration_pb2
from scripts import generate_csi_proto

pytestmark = pytest.mark.csi


def test_the_generated_files_match_a_fresh_generation() -> None:
    stale = generate_csi_proto.stale_files()
    assert not stale, f"stale: {stale}: run python -m scripts.generate_csi_proto"


def test_the_messages_are_the_pinned_specs_with_the_condition_the_kubelet_reads() -> None:
    spec = generate_csi_proto.spec_version()
    assert f"spec {spec} by grpcio-tools" in generate_csi_proto.header(
        generate_csi_proto.CSI_SPEC, spec
    )
    assert "volume_condition" in csi_pb2.NodeGetVolumeStatsResponse.DESCRIPTOR.fields_by_name
    node = csi_pb2.DESCRIPTOR.services_by_name["Node"]
    assert {"NodePublishVolume", "NodeUnpublishVolume", "NodeGetVolumeStats"} <= set(
        node.methods_by_name
    )


def test_the_registration_api_is_the_kubelets_own_release() -> None:
    kubelet = generate_csi_proto.pinned_version("KUBERNETES_VERSION")
    module = generate_csi_proto.module_version(generate_csi_proto.PLUGIN_REGISTRATION)
    assert module == "v0." + kubelet.removeprefix("v1.")
    registration = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert registration.full_name == "pluginregistration.Registration"
    assert set(registration.methods_by_name) == {"GetInfo", "NotifyRegistrationStatus"}
