"""The Node service's requests checked against the spec's codes before anything is done."""

from __future__ import annotations

import grpc
import pytest

from provisioner.configuration.config import BasePathRules
from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2
from provisioner.csi.node_requests import publish_request, stats_request, unpublish_request
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from tests.provisioner.csi.plugin_process import mount_capability

BASES = {"/mnt/disk1": BasePathRules(create=False)}
CONTEXT = {VOLUME_PATH_KEY: "/mnt/disk1/pvc-1"}


def publish(**fields: object) -> csi_pb2.NodePublishVolumeRequest:
    given: dict[str, object] = {
        "volume_id": "pvc-1",
        "target_path": "/var/lib/kubelet/pods/p/volumes/v/mount",
        "volume_capability": mount_capability(),
        "volume_context": CONTEXT,
    }
    given.update(fields)
    return csi_pb2.NodePublishVolumeRequest(**given)  # type: ignore[arg-type]


def code_of(request: csi_pb2.NodePublishVolumeRequest) -> grpc.StatusCode:
    with pytest.raises(CsiError) as refused:
        publish_request(request, BASES, "n")
    return refused.value.code


def test_a_complete_request_gives_the_directory_and_the_mode() -> None:
    checked = publish_request(publish(readonly=True), BASES, "n")
    assert checked.directory.path == "/mnt/disk1/pvc-1"
    assert checked.read_only


def test_missing_fields_and_a_relative_target_are_invalid_arguments() -> None:
    request = publish()
    request.ClearField("volume_capability")
    assert code_of(request) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(publish(volume_id="")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(publish(target_path="")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(publish(target_path="relative/mount")) == grpc.StatusCode.INVALID_ARGUMENT
    no_access_type = csi_pb2.VolumeCapability(access_mode=mount_capability().access_mode)
    assert code_of(publish(volume_capability=no_access_type)) == grpc.StatusCode.INVALID_ARGUMENT


def test_a_block_publish_is_read_as_one() -> None:
    checked = publish_request(publish(volume_capability=mount_capability(block=True)), BASES, "n")
    assert checked.block
    assert checked.directory.path == "/mnt/disk1/pvc-1"
    assert not publish_request(publish(), BASES, "n").block


def test_mount_options_exceed_what_the_driver_serves() -> None:
    with_flags = mount_capability()
    with_flags.mount.mount_flags.append("noatime")
    assert code_of(publish(volume_capability=with_flags)) == grpc.StatusCode.FAILED_PRECONDITION


def test_unpublish_and_stats_need_their_fields() -> None:
    with pytest.raises(CsiError) as refused:
        unpublish_request(csi_pb2.NodeUnpublishVolumeRequest(volume_id="v"))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        unpublish_request(csi_pb2.NodeUnpublishVolumeRequest(volume_id="v", target_path="/t"))
        == "/t"
    )
    with pytest.raises(CsiError) as refused:
        stats_request(csi_pb2.NodeGetVolumeStatsRequest(volume_path="/t"))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(CsiError) as refused:
        stats_request(csi_pb2.NodeGetVolumeStatsRequest(volume_id="v", volume_path="some/path"))
    assert refused.value.code == grpc.StatusCode.NOT_FOUND
