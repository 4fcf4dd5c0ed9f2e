from __future__ import annotations

import pytest

from policy.storage_paths import DEFAULT_SYSTEM_PATHS, check_resource, path_problem
from tests.policy.resources import config_map, storage_class


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc",
        "/etc/local-path",
        "/proc/x",
        "/sys/x",
        "/dev/disk",
        "/boot/x",
        "/usr/local/data",
        "/bin/x",
        "/sbin/x",
        "/lib/x",
        "/lib64/x",
        "/var/lib/kubelet",
        "/var/lib/kubelet/pods",
        "/var/lib/containerd/x",
        "/var/lib/docker/volumes",
        "/var/run/x",
        "/run/x",
        "/var//lib/kubelet/x",
    ],
)
def test_system_directories_and_root_are_refused(path: str) -> None:
    problem = path_problem(path)
    assert problem is not None
    assert path in problem or path == "/var//lib/kubelet/x"
    assert "choose a dedicated data directory" in problem


@pytest.mark.parametrize(
    ("path", "words"),
    [("data", "is relative"), ("/opt/../etc", "contains '..'"), ("/opt/x/..", "contains '..'")],
)
def test_relative_and_dotdot_paths_are_refused(path: str, words: str) -> None:
    assert words in (path_problem(path) or "")


@pytest.mark.parametrize(
    "path", ["/opt/local-path-provisioner", "/var/lib/local-path", "/mnt/nvme0/x", "/etcetera"]
)
def test_data_directories_pass(path: str) -> None:
    assert path_problem(path) is None


def test_the_system_path_list_is_configurable() -> None:
    assert path_problem("/srv/backups/x", [*DEFAULT_SYSTEM_PATHS, "/srv/backups"]) is not None
    assert path_problem("/etc/x", ["/srv"]) is None


def test_every_path_of_config_json_is_checked_with_its_key() -> None:
    config = {
        "storageClassConfigs": {
            "a": {"nodePathMap": [{"node": "n", "paths": ["/opt/ok", "/var/lib/kubelet/a"]}]},
            "b": {"sharedFileSystemPath": "/etc/b"},
        }
    }
    messages = check_resource(config_map(config))
    assert len(messages) == 2
    assert messages[0].startswith(
        "ConfigMap local-path-config config.json.storageClassConfigs.a.nodePathMap[0].paths[1]: "
        '"/var/lib/kubelet/a" lies in the system directory /var/lib/kubelet'
    )
    assert "config.json.storageClassConfigs.b.sharedFileSystemPath" in messages[1]


@pytest.mark.parametrize(
    "config",
    [
        {"NodePathMap": [{"Node": "n", "Paths": ["/etc/lp"]}]},
        {"NODEPATHMAP": [{"NODE": "n", "PATHS": [{"PATH": "/etc/lp"}]}]},
        # U+017F (long s) folds to "s" in the runtime's reading (Go's encoding/json matches
        # keys so too), not in str.lower(): a lower()-based walk let this path pass.
        {"\u017fharedFileSystemPath": "/etc/lp"},
        {"storageClassConfigs": {"c": {"\u017fharedFile\u017fy\u017ftemPath": "/etc/lp"}}},
    ],
)
def test_config_json_keys_match_as_the_runtime_reads_them(config: dict[str, object]) -> None:
    [message] = check_resource(config_map(config))
    assert '"/etc/lp" lies in the system directory /etc' in message


def test_top_level_shared_path() -> None:
    assert check_resource(config_map({"sharedFileSystemPath": "/run/nfs"}))


def test_class_node_path() -> None:
    [message] = check_resource(storage_class("fast", nodePath="/var/lib/docker/fast"))
    assert message.startswith('StorageClass fast parameters.nodePath: "/var/lib/docker/fast"')
    assert check_resource(storage_class("fast", nodePath="/mnt/ssd")) == []


def test_a_good_config_map_and_unrelated_json_pass() -> None:
    assert check_resource(config_map()) == []
    assert check_resource(config_map("not json")) == []


def test_a_system_path_in_the_object_form_is_refused_with_its_key() -> None:
    config = {
        "storageClassConfigs": {
            "b": {
                "nodePathMap": [
                    {
                        "node": "n",
                        "paths": [
                            {"path": "/mnt/data", "capacity": "100Gi"},
                            {"path": "/var/lib/kubelet/data", "capacity": "10Gi"},
                        ],
                    }
                ]
            },
            "c": {"nodePathMap": [{"node": "n", "paths": [{"Path": "/etc/c", "capacity": "1Gi"}]}]},
        },
    }
    messages = check_resource(config_map(config))
    assert len(messages) == 2
    assert messages[0].startswith(
        "ConfigMap local-path-config "
        "config.json.storageClassConfigs.b.nodePathMap[0].paths[1].path: "
        '"/var/lib/kubelet/data" lies in the system directory /var/lib/kubelet'
    )
    assert messages[1].startswith(
        "ConfigMap local-path-config "
        'config.json.storageClassConfigs.c.nodePathMap[0].paths[0].path: "/etc/c" lies in'
    )


def test_object_and_string_entries_with_data_directories_pass() -> None:
    config = {
        "nodePathMap": [
            {"node": "n", "paths": ["/opt/a", {"path": "/mnt/b", "capacity": "100Gi"}]},
        ]
    }
    assert check_resource(config_map(config)) == []
