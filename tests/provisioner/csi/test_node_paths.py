"""Which directories a node's plugin may publish: only strictly inside its own base paths."""

from __future__ import annotations

import json

import grpc
import pytest

from provisioner.configuration.config import DEFAULT_NODE, BasePathRules, parse_config_json
from provisioner.csi.csi_errors import CsiError
from provisioner.csi.node_paths import (
    VolumeDirectory,
    node_base_paths,
    volume_directory,
)
from provisioner.objects.node_handoff import VOLUME_PATH_KEY

BASES = {
    "/mnt/disk1": BasePathRules(create=False),
    "/opt/local-path-provisioner": BasePathRules(create=True),
}


def storage(*entries: tuple[str, list[object]]) -> dict[str, object]:
    return {"nodePathMap": [{"node": node, "paths": paths} for node, paths in entries]}


def test_a_node_gets_its_own_entry_else_the_default_in_every_class() -> None:
    classes = {
        "fast": storage(
            (DEFAULT_NODE, ["/mnt/default"]), ("a", [{"path": "/mnt/ssd", "mountPoint": True}])
        ),
        "slow": storage((DEFAULT_NODE, ["/mnt/hdd"])),
        "elsewhere": storage(("b", ["/mnt/b-only"])),
    }
    config = parse_config_json(json.dumps({"storageClassConfigs": classes}))
    paths = node_base_paths(config, "a")
    assert list(paths) == ["/mnt/hdd", "/mnt/ssd"]
    assert paths["/mnt/ssd"].mount_point
    assert not paths["/mnt/hdd"].mount_point
    assert list(node_base_paths(config, "c")) == ["/mnt/default", "/mnt/hdd"]


def test_a_directory_strictly_inside_a_base_path_is_accepted() -> None:
    found = volume_directory({VOLUME_PATH_KEY: "/mnt/disk1/ns/pvc-1"}, BASES, "n")
    assert found == VolumeDirectory("/mnt/disk1", ("ns", "pvc-1"))
    assert found.path == "/mnt/disk1/ns/pvc-1"


@pytest.mark.parametrize(
    "path",
    [
        "/mnt/disk1",  # the base path itself: every volume of it
        "/mnt/disk1/",
        "/mnt/disk10/pvc-1",  # a sibling sharing the prefix
        "/mnt/disk1/../etc",
        "/mnt/disk1/./pvc-1",
        "/mnt/disk1//pvc-1",
        "mnt/disk1/pvc-1",
        "/etc/shadow",
        "/mnt/disk1/pvc\x00-1",
    ],
)
def test_anything_else_is_refused_as_an_invalid_argument(path: str) -> None:
    with pytest.raises(CsiError) as refused:
        volume_directory({VOLUME_PATH_KEY: path}, BASES, "n")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_context_without_the_path_says_which_key_is_missing() -> None:
    with pytest.raises(CsiError) as refused:
        volume_directory({"path": "/mnt/disk1/pvc-1"}, BASES, "n")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert VOLUME_PATH_KEY in refused.value.message


def test_a_node_without_base_paths_refuses_every_directory() -> None:
    with pytest.raises(CsiError) as refused:
        volume_directory({VOLUME_PATH_KEY: "/mnt/disk1/pvc-1"}, {}, "n")
    assert "(none)" in refused.value.message
