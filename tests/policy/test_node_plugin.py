"""The CSI node plugin's two policies: its ClusterRole and its host mounts, against what the
program builds (components/node_plugin.py) and what a transformation could make of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components import node_plugin as built
from components.args import NodePluginArgs
from policy.node_plugin import ALLOWED_RIGHTS, check_role, check_stack
from policy.resources import Resource
from tests.policy.resources import CLUSTER_ROLE, config_map

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
DEFAULT_NODE = "DEFAULT_PATH_FOR_NON_LISTED_NODES"


def role(*rules: dict[str, Any], name: str = "lps:node-plugin") -> Resource:
    return Resource(CLUSTER_ROLE, {"metadata": {"name": name}, "rules": list(rules)}, "urn::role")


def rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def snapshot_rule(resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return rule(["snapshot.storage.k8s.io"], resources, verbs)


BUILT_RULES = [rule([r.api_group], list(r.resources), list(r.verbs)) for r in built.RULES]


def test_the_built_rules_are_the_allowed_ones() -> None:
    assert {(r.api_group, r.resources[0]): frozenset(r.verbs) for r in built.RULES} == dict(
        ALLOWED_RIGHTS
    )
    assert check_role(role(*BUILT_RULES)) == []


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (rule([""], ["persistentvolumes"], ["delete"]), "['delete'] on persistentvolumes"),
        (rule([""], ["persistentvolumeclaims"], ["get"]), "on persistentvolumeclaims"),
        (rule([""], ["secrets"], ["get"]), "on secrets"),
        (rule(["storage.k8s.io"], ["persistentvolumes"], ["get"]), "'storage.k8s.io'"),
        ({**rule([""], ["events"], ["create"]), "resourceNames": ["x"]}, "resourceNames"),
        (
            snapshot_rule(["volumesnapshotcontents"], ["delete"]),
            "['delete'] on volumesnapshotcontents",
        ),
        (snapshot_rule(["volumesnapshotcontents/status"], ["update"]), "['update'] on"),
        (snapshot_rule(["volumesnapshots"], ["get"]), "on volumesnapshots of"),
        (snapshot_rule(["volumesnapshotclasses"], ["list"]), "on volumesnapshotclasses"),
    ],
)
def test_a_wider_node_plugin_role_is_refused(extra: dict[str, Any], says: str) -> None:
    [message] = check_role(role(*BUILT_RULES, extra))
    assert message.startswith(f"ClusterRole lps:node-plugin rules[{len(BUILT_RULES)}]")
    assert says in message
    assert "components/node_plugin.py" in message


def test_other_cluster_roles_are_not_this_policys() -> None:
    assert check_role(role(rule([""], ["nodes"], ["get"]), name="lps:provisioner")) == []


PATHS = {
    "nodePathMap": [
        {
            "node": DEFAULT_NODE,
            "paths": [
                "/opt/local-path-provisioner",
                {"path": "/mnt/disk1/lps", "mountPoint": True},
            ],
        }
    ]
}


def daemon_set(
    host_paths: list[str],
    kubelet_root: str = "/var/lib/kubelet",
    command: tuple[str, ...] = ("local-path-storage-provisioner", "csi-node-plugin"),
    **spec: Any,
) -> Resource:
    volumes = [{"name": f"v{i}", "hostPath": {"path": p}} for i, p in enumerate(host_paths)]
    container = {
        "name": "node-plugin",
        "command": list(command),
        "args": [f"--kubelet-root={kubelet_root}"],
    }
    props = {
        "metadata": {"name": "node-plugin"},
        "spec": {"template": {"spec": {"containers": [container], "volumes": volumes, **spec}}},
    }
    return Resource(DAEMON_SET, props, "urn::ds")


BUILT_PATHS = [
    "/var/lib/kubelet",
    "/var/lib/kubelet/plugins/local-path.local-path-storage.io",
    "/opt/local-path-provisioner",
    "/mnt/disk1",
]


def test_what_the_program_mounts_passes() -> None:
    config = config_map(PATHS)
    assert check_stack([config, daemon_set(BUILT_PATHS)]) == []
    plugin = NodePluginArgs(base_directories=("/opt/local-path-provisioner", "/mnt/disk1"))
    allowed = built.allowed_host_paths(
        plugin, "local-path-storage.io/local-path", plugin.base_directories
    )
    assert allowed == set(BUILT_PATHS)


@pytest.mark.parametrize(
    "path",
    ["/", "/etc", "/var/lib", "/mnt", "/opt/local-path-provisioner-other", "/var/lib/kubelet-x"],
)
def test_a_mount_beyond_the_kubelet_and_base_paths_is_refused(path: str) -> None:
    for command in (
        ("local-path-storage-provisioner", "csi-node-plugin"),
        ("python", "-m", "provisioner.csi"),
    ):
        found = check_stack([config_map(PATHS), daemon_set([*BUILT_PATHS, path], command=command)])
        [(message, urn)] = found
        assert urn == "urn::ds"
        assert f"mounts the host's {path} " in message
        assert "kubelet's directory (/var/lib/kubelet)" in message


def test_the_parent_of_a_path_that_may_be_made_is_not_allowed() -> None:
    [(message, _)] = check_stack([config_map(PATHS), daemon_set(["/opt"])])
    assert "/opt" in message


def test_host_namespaces_are_refused() -> None:
    found = check_stack(
        [config_map(PATHS), daemon_set(BUILT_PATHS, hostNetwork=True, hostPID=True)]
    )
    assert [message.split(" with ")[1].split(":")[0] for message, _ in found] == [
        "hostNetwork",
        "hostPID",
    ]


def test_workloads_that_do_not_run_the_node_plugin_are_not_this_policys() -> None:
    resource = daemon_set(["/"])
    resource.props["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh"]
    assert check_stack([resource]) == []


def test_the_kubelet_root_from_the_environment() -> None:
    resource = daemon_set(["/var/lib/k0s/kubelet"])
    container = resource.props["spec"]["template"]["spec"]["containers"][0]
    container["args"] = []
    container["env"] = [{"name": "KUBELET_ROOT", "value": "/var/lib/k0s/kubelet"}]
    assert check_stack([config_map(json.loads(json.dumps(PATHS))), resource]) == []
