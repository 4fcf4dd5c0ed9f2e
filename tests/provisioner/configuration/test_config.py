"""config.json parsing and validation: every refusal names the key and says what to write."""

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from provisioner.configuration.class_parameters import (
    node_loss_grace_seconds,
    parse_duration,
    validate_storage_class_parameters,
)
from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_NODE,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    MAX_SCRIPT_BYTES,
    ConfigError,
    NodePathMapEntry,
    ProvisionerConfig,
    StorageClassConfig,
    check_affinity_key_agrees,
    load_config_bundle,
    load_config_directory,
    parse_config_json,
)
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord
from provisioner.provisioning.annotations import STORAGE_PROVISIONER
from provisioner.provisioning.claims import Provision, decide_claim_action

RANCHER_DEFAULT = {
    "nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/opt/local-path-provisioner"]}]
}


def local(*entries: tuple[str, object]) -> list[dict[str, object]]:
    return [{"node": node, "paths": paths} for node, paths in entries]


BAD_CONFIGS: list[tuple[object, str]] = [
    (
        {"nodePathMap": local(("a", ["/x"]), ("b", ["/y", "opt/data"]))},
        'nodePathMap[1].paths[1]: "opt/data" must be an absolute path',
    ),
    (
        {"nodePathMap": local(("a", ["/x/"]))},
        'nodePathMap[0].paths[0]: "/x/" is not written in normalised form: write "/x"',
    ),
    (
        {"nodePathMap": local(("a", ["/a//b"]))},
        'nodePathMap[0].paths[0]: "/a//b" is not written in normalised form: write "/a/b"',
    ),
    (
        {"nodePathMap": local(("a", ["/a/./b"]))},
        'nodePathMap[0].paths[0]: "/a/./b" is not written in normalised form: write "/a/b"',
    ),
    (
        {"nodePathMap": local(("a", ["/a/../b"]))},
        'nodePathMap[0].paths[0]: "/a/../b" is not written in normalised form: write "/b"',
    ),
    (
        {"nodePathMap": local(("a", ["//data"]))},
        'nodePathMap[0].paths[0]: "//data" is not written in normalised form: write "/data"',
    ),
    (
        {"nodePathMap": local(("a", ["/"]))},
        'nodePathMap[0].paths[0]: "/" is the root directory, which can never hold volumes: choose a'
        " directory such as /opt/local-path-provisioner",
    ),
    (
        {"nodePathMap": local(("a", ["/x/.."]))},
        'nodePathMap[0].paths[0]: "/x/.." is the root directory, which can never hold volumes:'
        " choose a directory such as /opt/local-path-provisioner",
    ),
    (
        {"nodePathMap": local(("a", [""]))},
        "nodePathMap[0].paths[0]: must not be empty: give an absolute directory such as"
        " /opt/local-path-provisioner",
    ),
    (
        {"nodePathMap": local(("a", ["/x\u0000y"]))},
        'nodePathMap[0].paths[0]: "/x\\u0000y" must not contain a NUL or line break',
    ),
    (
        {"nodePathMap": local(("a", ["/x\ny"]))},
        'nodePathMap[0].paths[0]: "/x\\ny" must not contain a NUL or line break',
    ),
    (
        {"nodePathMap": local(("a", ["/x"]), ("a", ["/y"]))},
        'nodePathMap[1].node: duplicate node "a" (already at nodePathMap[0]):'
        " merge the two entries",
    ),
    (
        {"nodePathMap": local(("a", ["/x", "/y", "/x"]))},
        'nodePathMap[0].paths[2]: duplicate path "/x" for node "a" (already at paths[0])',
    ),
    (
        {"nodePathMap": local(("a", ["/x", "/x/inner"]))},
        'nodePathMap[0].paths[1]: "/x/inner" lies inside the base path "/x"'
        " (nodePathMap[0].paths[0]): a volume there could be this whole base path and its"
        " teardown would remove every volume in it; use directories side by side",
    ),
    (
        {"nodePathMap": local(("a", ["/x/inner"]), (DEFAULT_NODE, ["/x"]))},
        'nodePathMap[0].paths[0]: "/x/inner" lies inside the base path "/x"'
        " (nodePathMap[1].paths[0]): a volume there could be this whole base path and its"
        " teardown would remove every volume in it; use directories side by side",
    ),
    (
        {
            "storageClassConfigs": {
                "fast": {"nodePathMap": local(("a", ["/x"]))},
                "shared": {"sharedFileSystemPath": "/x/nfs"},
            }
        },
        'storageClassConfigs["shared"].sharedFileSystemPath: "/x/nfs" lies inside the base'
        ' path "/x" (storageClassConfigs["fast"].nodePathMap[0].paths[0]): a volume there'
        " could be this whole base path and its teardown would remove every volume in it;"
        " use directories side by side",
    ),
    (
        {
            "storageClassConfigs": {
                "shared": {"sharedFileSystemPath": "/x"},
                "fast": {"nodePathMap": local(("a", ["/y"]), (DEFAULT_NODE, ["/x"]))},
            }
        },
        'storageClassConfigs["fast"].nodePathMap[1].paths[0]: "/x" is also the'
        ' sharedFileSystemPath at storageClassConfigs["shared"].sharedFileSystemPath: a'
        " directory is either a filesystem every node shares or a node's own, not both; give"
        " one of them another directory",
    ),
    (
        {"nodePathMap": local(("", ["/x"]))},
        f"nodePathMap[0].node: must name a node, or {DEFAULT_NODE} for every node not listed",
    ),
    ({"nodePathMap": [{"paths": ["/x"]}]}, "nodePathMap[0].node: is required"),
    (
        {"nodePathMap": [{"node": "a", "path": ["/x"]}]},
        "nodePathMap[0].path: unknown key (expected one of: node, paths)",
    ),
    (
        {"nodePathMaps": local(("a", ["/x"]))},
        "nodePathMaps: unknown key (expected one of: nodePathMap, sharedFileSystemPath,"
        " storageClassConfigs, setupCommand, teardownCommand, resizeCommand, cmdTimeoutSeconds)",
    ),
    (
        {"nodePathMap": local(("a", [5]))},
        'nodePathMap[0].paths[0]: must be a string or an object such as {"path": "/data",'
        ' "capacity": "100Gi"} (got 5)',
    ),
    ({"nodePathMap": local(("a", "/x"))}, 'nodePathMap[0].paths: must be a list (got "/x")'),
    ({"nodePathMap": {"node": "a"}}, 'nodePathMap: must be a list (got {"node": "a"})'),
    ({"nodePathMap": ["a"]}, 'nodePathMap[0]: must be an object (got "a")'),
    (
        {"nodePathMap": [], "sharedFileSystemPath": 7},
        "sharedFileSystemPath: must be a string (got 7)",
    ),
    (
        {**RANCHER_DEFAULT, "cmdTimeoutSeconds": "60"},
        'cmdTimeoutSeconds: must be a whole number (got "60")',
    ),
    (
        {**RANCHER_DEFAULT, "cmdTimeoutSeconds": 1.5},
        "cmdTimeoutSeconds: must be a whole number (got 1.5)",
    ),
    (
        {**RANCHER_DEFAULT, "cmdTimeoutSeconds": 0},
        "cmdTimeoutSeconds: must be a positive number of seconds, got 0",
    ),
    (
        {**RANCHER_DEFAULT, "cmdTimeoutSeconds": -5},
        "cmdTimeoutSeconds: must be a positive number of seconds, got -5",
    ),
    (
        {**RANCHER_DEFAULT, "cmdTimeoutSeconds": True},
        "cmdTimeoutSeconds: must be a whole number (got true)",
    ),
    (
        {**RANCHER_DEFAULT, "setupCommand": "/bin/sh -c setup"},
        'setupCommand: "/bin/sh -c setup" must be the path of one executable in the helper image,'
        " without arguments (it runs without a shell)",
    ),
    (
        {**RANCHER_DEFAULT, "teardownCommand": " "},
        'teardownCommand: " " must be the path of one executable in the helper image, without'
        " arguments (it runs without a shell)",
    ),
    (
        {"sharedFileSystemPath": "/nfs", "nodePathMap": local(("a", ["/x"]))},
        "sharedFileSystemPath: cannot be combined with a non-empty nodePathMap: use one of them and"
        " set nodePathMap to []",
    ),
    ({"sharedFileSystemPath": "nfs"}, 'sharedFileSystemPath: "nfs" must be an absolute path'),
    (
        {"sharedFileSystemPath": "/"},
        'sharedFileSystemPath: "/" is the root directory, which can never hold volumes: choose a'
        " directory such as /opt/local-path-provisioner",
    ),
    (
        {},
        "config.json: no storage configured: set nodePathMap, sharedFileSystemPath or"
        " storageClassConfigs",
    ),
    (
        {"nodePathMap": []},
        "config.json: no storage configured: set nodePathMap,"
        " sharedFileSystemPath or storageClassConfigs",
    ),
    (
        {**RANCHER_DEFAULT, "storageClassConfigs": {"fast": {"sharedFileSystemPath": "/nfs"}}},
        "nodePathMap: must be unset when storageClassConfigs is set (rancher would ignore it): move"
        " it into storageClassConfigs",
    ),
    (
        {
            "sharedFileSystemPath": "/nfs",
            "storageClassConfigs": {"f": {"sharedFileSystemPath": "/n"}},
        },
        "sharedFileSystemPath: must be unset when storageClassConfigs is set (rancher would ignore"
        " it): move it into storageClassConfigs",
    ),
    (
        {"storageClassConfigs": {"fast": {}}},
        'storageClassConfigs["fast"]: set either nodePathMap or'
        " sharedFileSystemPath for this class",
    ),
    (
        {"storageClassConfigs": {"fast": {"nodePathMap": local(("a", ["/x", "/x"]))}}},
        'storageClassConfigs["fast"].nodePathMap[0].paths[1]: duplicate path "/x" for node "a"'
        " (already at paths[0])",
    ),
    (
        {
            "storageClassConfigs": {
                "f.ssd": {"sharedFileSystemPath": "/n", "nodePathMap": local(("a", ["/x"]))}
            }
        },
        'storageClassConfigs["f.ssd"].sharedFileSystemPath: cannot be combined with a non-empty'
        " nodePathMap: use one of them and set nodePathMap to []",
    ),
    (
        {"storageClassConfigs": {"fast": {"nodePathMap": local(("a", ["rel"]))}}},
        'storageClassConfigs["fast"].nodePathMap[0].paths[0]: "rel" must be an absolute path',
    ),
    (
        {"storageClassConfigs": {"fast": {"nodepathmap": [], "shared": "/x"}}},
        'storageClassConfigs["fast"].shared: unknown key (expected one of: nodePathMap,'
        " sharedFileSystemPath)",
    ),
    (
        {"storageClassConfigs": {"": {"sharedFileSystemPath": "/nfs"}}},
        'storageClassConfigs[""]: a class name must not be empty',
    ),
    ({"storageClassConfigs": ["fast"]}, 'storageClassConfigs: must be an object (got ["fast"])'),
    ([RANCHER_DEFAULT], 'config.json: must be a JSON object such as {"nodePathMap": [...]}'),
]


@pytest.mark.parametrize(("data", "expected"), BAD_CONFIGS)
def test_bad_config_is_refused_with_its_key_and_fix(data: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_json(json.dumps(data))
    assert str(caught.value) == expected
    assert "\n" not in str(caught.value)


def test_config_error_carries_key_path_and_message() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_json(json.dumps({"nodePathMap": local(("a", ["/x"]), ("b", ["/y", "o"]))}))
    assert caught.value.key_path == "nodePathMap[1].paths[1]"
    assert caught.value.message == '"o" must be an absolute path'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"nodePathMap": [',
            "config.json: is not valid JSON: Expecting value at line 1 column 18",
        ),
        ("# comment\n{}", "config.json: is not valid JSON: Expecting value at line 1 column 1"),
        (
            '{"nodePathMap": [], "nodePathMap": []}',
            "nodePathMap: is given more than once: keep one",
        ),
        (
            '{"nodePathMap": [], "NodePathMap": []}',
            "NodePathMap: is nodePathMap given a second time (keys match"
            " case-insensitively): keep one",
        ),
        (
            '{"storageClassConfigs": {"a": {"sharedFileSystemPath": "/x"}, "a": {}}}',
            'storageClassConfigs["a"]: is given more than once: keep one',
        ),
        (
            '{"nodePathMap": [{"node": "a", "node": "b", "paths": ["/x"]}]}',
            "nodePathMap[0].node: is given more than once: keep one",
        ),
    ],
)
def test_malformed_json_is_refused(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_json(text)
    assert str(caught.value) == expected


def test_rancher_default_config_parses() -> None:
    config = parse_config_json(json.dumps(RANCHER_DEFAULT))
    assert config.node_path_map == [
        NodePathMapEntry(node=DEFAULT_NODE, paths=["/opt/local-path-provisioner"])
    ]
    assert config.cmd_timeout_seconds == 120
    assert config.setup_command is None


def test_keys_match_case_insensitively_and_null_is_unset_like_go() -> None:
    config = parse_config_json(
        '{"NODEPATHMAP": [{"Node": "a", "PATHS": ["/x"]}], "setupCommand": null,'
        ' "sharedFileSystemPath": "", "cmdtimeoutseconds": 30, "resizeCommand": "/bin/resize"}'
    )
    assert config.node_path_map[0].node == "a"
    assert config.shared_filesystem_path is None
    assert config.setup_command is None
    assert config.cmd_timeout_seconds == 30


def test_readme_spelling_of_shared_path_in_class_configs_is_accepted() -> None:
    config = parse_config_json('{"storageClassConfigs": {"nfs": {"sharedFilesystemPath": "/nfs"}}}')
    assert config.shared_path_for("nfs") == "/nfs"


def test_paths_for_follows_listed_node_default_and_refusal() -> None:
    config = parse_config_json(
        json.dumps(
            {
                "nodePathMap": local(
                    (DEFAULT_NODE, ["/opt/lp"]), ("big", ["/opt/lp", "/data1"]), ("refused", [])
                )
            }
        )
    )
    assert config.paths_for("any-class", "big") == ["/opt/lp", "/data1"]
    assert config.paths_for("any-class", "other") == ["/opt/lp"]
    assert config.paths_for("any-class", "refused") is None
    assert config.shared_path_for("any-class") is None
    assert config.all_base_paths() == {"/opt/lp", "/data1"}


def test_paths_for_without_default_refuses_unlisted_nodes() -> None:
    config = parse_config_json(json.dumps({"nodePathMap": local(("a", ["/x"]))}))
    assert config.paths_for("c", "b") is None


def test_storage_class_configs_replace_the_top_level_maps() -> None:
    config = parse_config_json(
        json.dumps(
            {
                "storageClassConfigs": {
                    "fast": {"nodePathMap": local((DEFAULT_NODE, ["/ssd"]))},
                    "nfs": {"sharedFileSystemPath": "/mnt/nfs"},
                }
            }
        )
    )
    assert config.paths_for("fast", "n1") == ["/ssd"]
    assert config.paths_for("nfs", "n1") == ["/mnt/nfs"]
    assert config.shared_path_for("nfs") == "/mnt/nfs"
    assert config.paths_for("unknown", "n1") is None
    assert config.storage_for("unknown") is None
    assert config.all_base_paths() == {"/ssd", "/mnt/nfs"}


def test_models_built_in_python_are_validated_too() -> None:
    with pytest.raises(ValueError, match=r"nodePathMap\[0\]\.paths\[0\]"):
        ProvisionerConfig(node_path_map=[NodePathMapEntry(node="a", paths=["x"])])
    with pytest.raises(ValueError, match="set either nodePathMap or sharedFileSystemPath"):
        StorageClassConfig()


def test_config_json_round_trips_in_rancher_spelling() -> None:
    config = parse_config_json(
        json.dumps(
            {
                "storageClassConfigs": {"nfs": {"sharedFileSystemPath": "/mnt/nfs"}},
                "cmdTimeoutSeconds": 30,
            }
        )
    )
    text = config.to_config_json()
    assert '"sharedFileSystemPath": "/mnt/nfs"' in text
    assert parse_config_json(text) == config


SHARED = parse_config_json('{"sharedFileSystemPath": "/mnt/nfs"}')
LOCAL = parse_config_json(
    json.dumps({"nodePathMap": local((DEFAULT_NODE, ["/opt/lp"]), ("n2", ["/ssd"]))})
)


BAD_PARAMETERS: list[tuple[ProvisionerConfig, dict[str, str], dict[str, str], str]] = [
    (
        LOCAL,
        {"nodePath": "/nowhere"},
        {},
        'parameters.nodePath: "/nowhere" is not configured for any node of class "c": add it to'
        " nodePathMap or drop the parameter",
    ),
    (
        LOCAL,
        {"nodePath": "/ssd/"},
        {},
        'parameters.nodePath: "/ssd/" is not written in normalised form: write "/ssd"',
    ),
    (
        SHARED,
        {"nodePath": "/opt/lp"},
        {},
        'parameters.nodePath: "/opt/lp" is not configured for any node of class "c": add it to'
        " nodePathMap or drop the parameter",
    ),
    (
        LOCAL,
        {"pathPattern": "{{.PVC.Namespace}}/{{.PVC.Name"},
        {},
        "parameters.pathPattern: unclosed action {{.PVC.Name: add the closing }}",
    ),
    (
        LOCAL,
        {"pathPattern": "{{.PVName}}"},
        {},
        "parameters.pathPattern: rendered path 'pvc-00000000-0000-0000-0000-000000000000' is not"
        " inside sample-namespace/sample-claim/: start the pattern with"
        ' "{{.PVC.Namespace}}/{{.PVC.Name}}/" or set allowUnsafePathPattern',
    ),
    (
        LOCAL,
        {"pathPattern": "{{.PVC.Namespace}}/../x"},
        {"allowUnsafePathPattern": "true"},
        "parameters.pathPattern: rendered path 'sample-namespace/../x' has a '..' component",
    ),
    (
        LOCAL,
        {"pathPattern": "/abs/{{.PVC.Name}}", "allowUnsafePathPattern": "true"},
        {},
        "parameters.pathPattern: rendered path '/abs/sample-claim' is"
        " absolute; it must be relative",
    ),
    (
        LOCAL,
        {"pathPattern": '{{ printf "%s" .PVC.Name }}'},
        {},
        'parameters.pathPattern: unsupported action {{ printf "%s" .PVC.Name }}: only {{.PVName}},'
        " {{.PVC.Namespace}}, {{.PVC.Name}}, {{.PVC.Labels.<key>}}, {{.PVC.Annotations.<key>}},"
        ' {{index .PVC.Labels "<key>"}}, {{index .PVC.Annotations "<key>"}} are available',
    ),
    (
        LOCAL,
        {"allowUnsafePathPattern": "yes"},
        {},
        'parameters.allowUnsafePathPattern: "yes" is not a boolean: write true or false',
    ),
    (
        LOCAL,
        {},
        {"allowUnsafePathPattern": "maybe"},
        'annotations.allowUnsafePathPattern: "maybe" is not a boolean: write true or false',
    ),
    (
        LOCAL,
        {"nodeAffinityKey": "bad key"},
        {},
        'parameters.nodeAffinityKey: "bad key" is not a valid label key such as'
        " kubernetes.io/hostname",
    ),
    (
        LOCAL,
        {"nodeAffinityKey": "Bad_Prefix/name"},
        {},
        'parameters.nodeAffinityKey: "Bad_Prefix/name" is not a valid label key such as'
        " kubernetes.io/hostname",
    ),
    (
        LOCAL,
        {"permPattern": "0999"},
        {},
        'parameters.permPattern: "0999" is not an octal mode such as 0777',
    ),
    (
        LOCAL,
        {"permPattern": "rwx"},
        {},
        'parameters.permPattern: "rwx" is not an octal mode such as 0777',
    ),
    (
        LOCAL,
        {"userPattern": "{{ .PVC.Owner }}"},
        {},
        "parameters.userPattern: unsupported action {{ .PVC.Owner }}: only {{.PVName}},"
        " {{.PVC.Namespace}}, {{.PVC.Name}}, {{.PVC.Labels.<key>}}, {{.PVC.Annotations.<key>}},"
        ' {{index .PVC.Labels "<key>"}}, {{index .PVC.Annotations "<key>"}} are available',
    ),
    (
        LOCAL,
        {},
        {"defaultVolumeType": "nfs"},
        'annotations.defaultVolumeType: "nfs" is not a volume type: use hostPath or local',
    ),
    (
        SHARED,
        {},
        {"defaultVolumeType": "local"},
        "annotations.defaultVolumeType: local volumes need node affinity, which a"
        " sharedFileSystemPath class does not give: use hostPath",
    ),
    (
        LOCAL,
        {"nodepath": "/opt/lp"},
        {},
        "parameters.nodepath: unknown parameter (known: nodePath, pathPattern, nodeAffinityKey,"
        " allowUnsafePathPattern, userPattern, groupPattern, permPattern, minSize, maxSize,"
        " reuseExistingData, nodeLossGracePeriod, volumeType)",
    ),
    (
        LOCAL,
        {"nodeLossGracePeriod": "soon"},
        {},
        "parameters.nodeLossGracePeriod: 'soon' is not a duration: write it as 24h, 90m, 1d12h"
        " or 3600s",
    ),
    (
        LOCAL,
        {"nodeLossGracePeriod": "2s"},
        {},
        'parameters.nodeLossGracePeriod: "2s" is shorter than 5s: a node that restarts must not'
        " lose its volumes' claims; write a longer period such as 10m",
    ),
    (
        SHARED,
        {"nodeLossGracePeriod": "10m"},
        {},
        'parameters.nodeLossGracePeriod: class "c" serves a sharedFileSystemPath, whose volumes'
        " no node holds alone: drop the parameter",
    ),
    (
        parse_config_json('{"storageClassConfigs": {"other": {"sharedFileSystemPath": "/n"}}}'),
        {},
        {},
        'storageClassConfigs: has no entry for class "c": add one, or claims'
        " of this class cannot be"
        " provisioned",
    ),
]


@pytest.mark.parametrize(("config", "parameters", "annotations", "expected"), BAD_PARAMETERS)
def test_bad_storage_class_parameters_are_refused(
    config: ProvisionerConfig,
    parameters: dict[str, str],
    annotations: dict[str, str],
    expected: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_storage_class_parameters("c", parameters, annotations, config)
    assert str(caught.value) == expected


@pytest.mark.parametrize(
    ("config", "parameters", "annotations"),
    [
        (LOCAL, {}, {}),
        (LOCAL, {"nodeLossGracePeriod": "10m"}, {}),
        (LOCAL, {"nodePath": "/ssd", "nodeAffinityKey": "topology.example.com/host"}, {}),
        (LOCAL, {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}/"}, {}),
        (
            LOCAL,
            {"pathPattern": '{{.PVC.Namespace}}/{{.PVC.Name}}/{{index .PVC.Labels "app"}}'},
            {},
        ),
        (LOCAL, {"pathPattern": "{{.PVName}}", "allowUnsafePathPattern": "true"}, {}),
        (LOCAL, {"pathPattern": "{{.PVName}}"}, {"allowUnsafePathPattern": "T"}),
        (
            LOCAL,
            {"permPattern": "0750", "userPattern": "1000", "groupPattern": "{{.PVC.Labels.gid}}"},
            {},
        ),
        (
            LOCAL,
            {"permPattern": '{{index .PVC.Annotations "mode"}}'},
            {"defaultVolumeType": "Local"},
        ),
        (SHARED, {"nodePath": "/mnt/nfs"}, {"defaultVolumeType": "hostPath"}),
    ],
)
def test_good_storage_class_parameters_pass(
    config: ProvisionerConfig, parameters: dict[str, str], annotations: dict[str, str]
) -> None:
    validate_storage_class_parameters("c", parameters, annotations, config)
    # and a claim of such a class is provisioned with them
    claim = ClaimRecord(
        uid="u-1",
        namespace="ns",
        name="c",
        resource_version="1",
        annotations={STORAGE_PROVISIONER: "p", "mode": "0700"},
        labels={"app": "web", "gid": "2000"},
        storage_class_name="c",
        selected_node="n2",
        access_modes=("ReadWriteOnce",),
        requested_storage="1Gi",
    )
    node = NodeRecord("n2", {"kubernetes.io/hostname": "n2", "topology.example.com/host": "h2"})
    storage_class = StorageClassRecord(
        "c", "p", parameters=parameters, annotations=annotations, binding_mode="Immediate"
    )
    decision = decide_claim_action(
        claim,
        read_class_rules(storage_class.name, storage_class, config),
        set(),
        {"n2": node},
        provisioner_name="p",
    )
    assert isinstance(decision, Provision), decision


def test_one_directory_is_served_under_one_node_affinity_key() -> None:
    config = parse_config_json(
        json.dumps(
            {
                "storageClassConfigs": {
                    "a": {"nodePathMap": local((DEFAULT_NODE, ["/x", "/y"]))},
                    "b": {"nodePathMap": local(("n1", ["/y"]))},
                    "c": {"nodePathMap": local(("n1", ["/z"]))},
                    "shared": {"sharedFileSystemPath": "/s"},
                }
            }
        )
    )
    custom = {"nodeAffinityKey": "example.com/disk"}
    earlier: dict[str, dict[str, str]] = {"a": {}}
    with pytest.raises(ConfigError) as caught:
        check_affinity_key_agrees("b", custom, earlier, config)
    assert str(caught.value) == (
        'parameters.nodeAffinityKey: "example.com/disk" differs from "kubernetes.io/hostname"'
        ' of class "a", which serves the same directory "/y": one directory is served under'
        " one nodeAffinityKey; give the classes the same key, or another directory"
    )
    # the same key written out, another directory, or a class narrowed to another directory
    check_affinity_key_agrees("b", {"nodeAffinityKey": "kubernetes.io/hostname"}, earlier, config)
    check_affinity_key_agrees("c", custom, earlier, config)
    check_affinity_key_agrees("a", {**custom, "nodePath": "/x"}, {"b": {}}, config)
    check_affinity_key_agrees("shared", custom, earlier, config)
    with pytest.raises(ConfigError):
        check_affinity_key_agrees("a", {**custom, "nodePath": "/y"}, {"b": {}}, config)


def test_bundle_with_rancher_defaults_loads() -> None:
    bundle = load_config_bundle(
        json.dumps(RANCHER_DEFAULT),
        DEFAULT_SETUP_SCRIPT,
        DEFAULT_TEARDOWN_SCRIPT,
        DEFAULT_HELPER_POD_YAML,
    )
    assert bundle.helper_pod_template["spec"]["containers"][0]["image"] == "busybox:1.37.0"
    assert bundle.setup_script == DEFAULT_SETUP_SCRIPT


def test_bundle_refuses_an_empty_script_unless_a_command_replaces_it() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_bundle(json.dumps(RANCHER_DEFAULT), "  \n", "x", DEFAULT_HELPER_POD_YAML)
    assert str(caught.value) == (
        "setup: the setup script is empty and config.json sets no setupCommand: give one of them"
    )
    with_command = {**RANCHER_DEFAULT, "setupCommand": "/usr/bin/setup"}
    load_config_bundle(json.dumps(with_command), "", "x", DEFAULT_HELPER_POD_YAML)


def test_bundle_refuses_a_script_larger_than_a_helper_pod_can_carry() -> None:
    """execve refuses an environment string over 128 KiB (MAX_ARG_STRLEN), and the helper
    gets the script in one: a larger one's pod would never start."""
    largest = "#" * (MAX_SCRIPT_BYTES - 1) + "\n"
    config = json.dumps(RANCHER_DEFAULT)
    assert load_config_bundle(config, largest, largest, DEFAULT_HELPER_POD_YAML).setup_script
    for key in ("setup", "teardown"):
        scripts = {"setup": "x", "teardown": "x", key: "#" * MAX_SCRIPT_BYTES + "\u00e9"}
        with pytest.raises(ConfigError) as caught:
            load_config_bundle(
                config, scripts["setup"], scripts["teardown"], DEFAULT_HELPER_POD_YAML
            )
        assert str(caught.value) == (
            f"{key}: the {key} script is 131062 bytes, over the 131060 a helper pod can carry"
            " (one environment variable of at most 128 KiB): move its logic into the helper"
            f" image and call it with {key}Command"
        )
    with_command = {**RANCHER_DEFAULT, "setupCommand": "/usr/bin/setup"}
    unused = "#" * (MAX_SCRIPT_BYTES + 1)
    load_config_bundle(json.dumps(with_command), unused, "x", DEFAULT_HELPER_POD_YAML)


def test_bundle_helper_template_errors_are_prefixed() -> None:
    template = DEFAULT_HELPER_POD_YAML + "  hostNetwork: true\n"
    with pytest.raises(ConfigError) as caught:
        load_config_bundle(json.dumps(RANCHER_DEFAULT), "x", "x", template)
    assert str(caught.value).startswith("helperPod.yaml: spec.hostNetwork: must not be true")
    bundle = load_config_bundle(
        json.dumps(RANCHER_DEFAULT), "x", "x", template, allow_unsafe_helper_template=True
    )
    assert bundle.helper_pod_template["spec"]["hostNetwork"] is True


def test_load_config_directory_reads_the_mounted_configmap(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(RANCHER_DEFAULT))
    (tmp_path / "setup").write_text(DEFAULT_SETUP_SCRIPT)
    (tmp_path / "teardown").write_text(DEFAULT_TEARDOWN_SCRIPT)
    with pytest.raises(ConfigError, match=r"^helperPod\.yaml: cannot read .*; the ConfigMap needs"):
        load_config_directory(tmp_path)
    (tmp_path / "helperPod.yaml").write_text(DEFAULT_HELPER_POD_YAML)
    bundle = load_config_directory(tmp_path)
    assert bundle.config.paths_for("local-path", "node-1") == ["/opt/local-path-provisioner"]


# -- the default scripts: never through a symbolic link, modes and owners honoured ----------


def run_script(script: str, vol_dir: Path, **env: str) -> tuple[int, str]:
    action = "setup" if script == DEFAULT_SETUP_SCRIPT else "teardown"
    done = subprocess.run(
        ["/bin/sh", "-c", script, action, "-p", str(vol_dir), "-s", "0", "-m", "Filesystem"],
        env={"PATH": os.environ["PATH"], "VOL_DIR": str(vol_dir), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stderr


def test_default_setup_applies_perm_user_and_group(tmp_path: Path) -> None:
    volume = tmp_path / "base" / "ns" / "claim"
    assert run_script(DEFAULT_SETUP_SCRIPT, volume, VOL_PERM="0770") == (0, "")
    assert stat.S_IMODE(volume.stat().st_mode) == 0o770
    # rancher's default without a permPattern: world-writable
    other = tmp_path / "base" / "ns" / "other"
    assert run_script(DEFAULT_SETUP_SCRIPT, other, VOL_PERM="") == (0, "")
    assert stat.S_IMODE(other.stat().st_mode) == 0o777
    if os.geteuid() == 0:
        owned = tmp_path / "base" / "ns" / "owned"
        code, _ = run_script(DEFAULT_SETUP_SCRIPT, owned, VOL_USER="1000", VOL_GROUP="2000")
        assert code == 0
        assert (owned.stat().st_uid, owned.stat().st_gid) == (1000, 2000)
        group_only = tmp_path / "base" / "ns" / "group-only"
        assert run_script(DEFAULT_SETUP_SCRIPT, group_only, VOL_GROUP="3000")[0] == 0
        assert (group_only.stat().st_uid, group_only.stat().st_gid) == (0, 3000)


def test_default_scripts_refuse_a_path_through_a_symbolic_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "x").mkdir(parents=True)
    (victim / "x" / "keep").write_text("data")
    tenant = tmp_path / "base" / "ns" / "tenant"
    assert run_script(DEFAULT_SETUP_SCRIPT, tenant)[0] == 0
    (tenant / "evil").symlink_to(victim)
    code, message = run_script(DEFAULT_SETUP_SCRIPT, tenant / "evil" / "new")
    assert code == 1
    assert f"{tenant}/evil is a symbolic link" in message
    assert sorted(p.name for p in victim.iterdir()) == ["x"]
    for target in (tenant / "evil" / "x", tenant / "evil"):
        code, message = run_script(DEFAULT_TEARDOWN_SCRIPT, target)
        assert code == 1, message
        assert "refusing" in message
    # a link higher up, found by the real path
    (tmp_path / "base" / "linked").symlink_to(victim)
    code, message = run_script(DEFAULT_TEARDOWN_SCRIPT, tmp_path / "base" / "linked" / "x")
    assert code == 1
    assert (victim / "x" / "keep").read_text() == "data"
    # the tenant's own volume goes, links inside it are removed, not followed
    assert run_script(DEFAULT_TEARDOWN_SCRIPT, tenant) == (0, "")
    assert not tenant.exists()
    assert (victim / "x" / "keep").read_text() == "data"
    # already gone: done
    assert run_script(DEFAULT_TEARDOWN_SCRIPT, tenant) == (0, "")


def test_durations() -> None:
    assert parse_duration("24h") == 86_400
    assert parse_duration("1d12h") == 129_600
    assert parse_duration("90m") == 5_400
    for bad in ("", "24", "h", "1w"):
        with pytest.raises(ValueError, match="24h, 90m"):
            parse_duration(bad)


def test_a_class_releases_claims_for_node_loss_only_when_it_says_how_long_to_wait() -> None:
    assert node_loss_grace_seconds({}) is None
    assert node_loss_grace_seconds({"nodeLossGracePeriod": "10m"}) == 600
    assert node_loss_grace_seconds({"nodeLossGracePeriod": "5s"}) == 5
