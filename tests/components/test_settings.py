"""Stack config parsing and validation: pure functions, no engine."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from components.args import LabelExpression, ProvisionerDeploymentArgs
from components.deployment import pod_template
from components.naming import CONFIG_NAMESPACE
from components.settings import SCALAR_DEFAULTS, parse_settings
from components.stack_values import SettingsError
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    parse_config_json,
)
from tests.components.stack_files import STACKS, engine_config, stack_engine_config, stack_file

DEFAULT_NODE = "DEFAULT_PATH_FOR_NON_LISTED_NODES"


def dev_with(**overrides: Any) -> dict[str, str]:
    """The dev stack's engine config with keys replaced (None removes a key)."""
    config = dict(stack_file("dev")["config"])
    for key, value in overrides.items():
        full_key = f"{CONFIG_NAMESPACE}:{key}"
        if value is None:
            config.pop(full_key, None)
        else:
            config[full_key] = value
    return engine_config(config)


def one_class(**fields: Any) -> list[dict[str, Any]]:
    return [{"name": "local-path", **fields}]


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_is_valid(stack: str) -> None:
    settings = parse_settings(stack_engine_config(stack))
    files = settings.deployment.config_files
    # What goes into the ConfigMap is exactly what the runtime will accept.
    parse_config_json(files.config_json)
    assert settings.render_yaml_to_directory is None


def test_dev_stack_settings() -> None:
    settings = parse_settings(stack_engine_config("dev"))
    deployment = settings.deployment
    assert deployment.namespace == "local-path-storage-system"
    assert deployment.replicas == 1
    assert deployment.provisioner_name == "local-path-storage.io/local-path"
    assert deployment.leader_election is True
    assert json.loads(deployment.config_files.config_json) == {
        "nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/opt/local-path-provisioner"]}],
        "storageClassConfigs": {},
        "cmdTimeoutSeconds": 120,
    }
    assert deployment.config_files.setup == DEFAULT_SETUP_SCRIPT
    assert deployment.config_files.teardown == DEFAULT_TEARDOWN_SCRIPT
    assert deployment.config_files.helper_pod_yaml == DEFAULT_HELPER_POD_YAML
    (local_path,) = settings.storage_classes.classes
    assert local_path.name == "local-path-storage"
    assert local_path.is_default
    assert local_path.reclaim_policy == "Delete"
    assert local_path.volume_binding_mode == "WaitForFirstConsumer"
    assert local_path.all_annotations() == {"storageclass.kubernetes.io/is-default-class": "true"}


def test_staging_stack_classes() -> None:
    settings = parse_settings(stack_engine_config("staging"))
    classes = {c.name: c for c in settings.storage_classes.classes}
    assert list(classes) == ["local-path-storage", "local-path-retain", "fast-ssd", "shared"]
    assert classes["local-path-retain"].reclaim_policy == "Retain"
    assert classes["shared"].volume_binding_mode == "Immediate"
    assert classes["fast-ssd"].parameters == {
        "nodePath": "/mnt/ssd",
        "nodeAffinityKey": "local-path-storage.io/ssd-host",
    }
    assert classes["fast-ssd"].all_annotations() == {"defaultVolumeType": "local"}
    assert classes["fast-ssd"].mount_options == ("noatime",)
    config = json.loads(settings.deployment.config_files.config_json)
    assert config["storageClassConfigs"]["shared"]["sharedFileSystemPath"] == "/mnt/nfs/local-path"
    assert {"node": "staging-control-plane", "paths": []} in config["storageClassConfigs"][
        "local-path-storage"
    ]["nodePathMap"]
    assert settings.deployment.debug is True


def test_prod_stack_deployment() -> None:
    settings = parse_settings(stack_engine_config("prod"))
    deployment = settings.deployment
    assert deployment.replicas == 2
    assert deployment.image_pull_policy == "Always"
    assert deployment.json_logs is True
    assert deployment.resources.requests() == {"cpu": "100m", "memory": "96Mi"}
    assert deployment.resources.limits() == {"memory": "256Mi"}
    retain = settings.storage_classes.classes[1]
    assert retain.allowed_topologies == (
        (LabelExpression("node-role.example.com/database", ("true",)),),
    )
    assert retain.parameters["nodeAffinityKey"] == "topology.kubernetes.io/zone-host"


def test_defaults_apply_without_project_defaults() -> None:
    """Parsing does not depend on the engine filling in Pulumi.yaml's defaults."""
    bare = {
        k: v
        for k, v in stack_engine_config("dev").items()
        if k.split(":", 1)[1] in ("nodePathMap", "storageClasses")
    }
    assert parse_settings(bare) == parse_settings(stack_engine_config("dev"))


def test_other_namespaces_are_ignored() -> None:
    raw = {**stack_engine_config("dev"), "kubernetes:kubeconfig": "/tmp/kubeconfig"}
    assert parse_settings(raw) == parse_settings(stack_engine_config("dev"))


def test_config_json_is_canonical() -> None:
    """Keys match case-insensitively as in rancher; the ConfigMap gets rancher's spelling."""
    settings = parse_settings(dev_with(nodePathMap=[{"Node": DEFAULT_NODE, "PATHS": ["/data"]}]))
    assert json.loads(settings.deployment.config_files.config_json)["nodePathMap"] == [
        {"node": DEFAULT_NODE, "paths": ["/data"]}
    ]


def test_commands_and_shared_path_go_into_config_json() -> None:
    settings = parse_settings(
        dev_with(
            nodePathMap=None,
            sharedFileSystemPath="/mnt/nfs",
            setupCommand="/bin/setup",
            teardownCommand="/bin/teardown",
            cmdTimeoutSeconds=30,
        )
    )
    assert json.loads(settings.deployment.config_files.config_json) == {
        "nodePathMap": [],
        "sharedFileSystemPath": "/mnt/nfs",
        "storageClassConfigs": {},
        "setupCommand": "/bin/setup",
        "teardownCommand": "/bin/teardown",
        "cmdTimeoutSeconds": 30,
    }


def test_helper_image_replaces_the_template_image() -> None:
    settings = parse_settings(dev_with(helperImage="registry.example/busybox:1.37"))
    template = yaml.safe_load(settings.deployment.config_files.helper_pod_yaml)
    assert template["spec"]["containers"][0]["image"] == "registry.example/busybox:1.37"
    assert template["spec"]["priorityClassName"] == "system-node-critical"


def test_helper_template_as_structured_config() -> None:
    template = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {"containers": [{"name": "helper", "image": "alpine:3.21"}]},
    }
    settings = parse_settings(dev_with(helperPodTemplate=template))
    assert yaml.safe_load(settings.deployment.config_files.helper_pod_yaml) == template


def test_helper_template_as_yaml_text() -> None:
    text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: h\n    image: alpine\n"
    settings = parse_settings(dev_with(helperPodTemplate=text))
    assert settings.deployment.config_files.helper_pod_yaml == text


def test_unsafe_helper_template_can_be_allowed() -> None:
    unsafe = {"spec": {"hostNetwork": True, "containers": [{"name": "h", "image": "busybox"}]}}
    settings = parse_settings(dev_with(helperPodTemplate=unsafe, allowUnsafeHelperTemplate=True))
    assert settings.deployment.allow_unsafe_helper_template is True


def test_booleans_from_config_set_path_may_be_strings() -> None:
    settings = parse_settings(
        dev_with(
            storageClasses=one_class(isDefault="true", parameters={"allowUnsafePathPattern": True})
        )
    )
    (storage_class,) = settings.storage_classes.classes
    assert storage_class.is_default
    assert storage_class.parameters == {"allowUnsafePathPattern": "true"}


def test_render_mode_and_optional_limits() -> None:
    settings = parse_settings(
        dev_with(renderYamlToDirectory="out/manifests", memoryLimit="", cpuLimit="1")
    )
    assert settings.render_yaml_to_directory == "out/manifests"
    assert settings.deployment.resources.limits() == {"cpu": "1"}


def test_scalar_defaults_are_complete() -> None:
    settings = parse_settings(dev_with())
    assert settings.deployment.workers == SCALAR_DEFAULTS["workers"]
    assert settings.deployment.metrics_port == SCALAR_DEFAULTS["metricsPort"]


def test_the_components_defaults_are_the_stacks() -> None:
    """ProvisionerDeploymentArgs, built without stack config (as tests and the local cluster
    do), deploys what a stack that sets nothing but its storage gets."""
    deployment = parse_settings(dev_with()).deployment
    assert deployment == ProvisionerDeploymentArgs(config_files=deployment.config_files)


PREFIX = f"stack config {CONFIG_NAMESPACE}:"
NODE_MAP_WITH_RELATIVE_PATH = [
    {"node": DEFAULT_NODE, "paths": ["/opt/local-path-provisioner"]},
    {"node": "worker-1", "paths": ["data"]},
]
UNSAFE_HELPER = {
    "apiVersion": "v1",
    "kind": "Pod",
    "spec": {"hostNetwork": True, "containers": [{"name": "helper", "image": "busybox"}]},
}

BAD_CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    (
        "relative path",
        {"nodePathMap": NODE_MAP_WITH_RELATIVE_PATH},
        'nodePathMap[1].paths[0]: "data" must be an absolute path',
    ),
    (
        "root path",
        {"nodePathMap": [{"node": "worker-1", "paths": ["/"]}]},
        'nodePathMap[0].paths[0]: "/" is the root directory, which can never hold volumes: '
        "choose a directory such as /opt/local-path-provisioner",
    ),
    (
        "duplicate node",
        {"nodePathMap": [{"node": "n1", "paths": ["/a"]}, {"node": "n1", "paths": ["/b"]}]},
        'nodePathMap[1].node: duplicate node "n1" (already at nodePathMap[0]): '
        "merge the two entries",
    ),
    (
        "nodePath on no node",
        {"storageClasses": one_class(parameters={"nodePath": "/mnt/x"})},
        'storageClasses[0].parameters.nodePath: "/mnt/x" is not configured for any node of '
        'class "local-path": add it to nodePathMap or drop the parameter',
    ),
    (
        "shared path and node map",
        {"sharedFileSystemPath": "/mnt/nfs"},
        "sharedFileSystemPath: cannot be combined with a non-empty nodePathMap: "
        "use one of them and set nodePathMap to []",
    ),
    (
        "unknown volume type",
        {"storageClasses": one_class(defaultVolumeType="block")},
        'storageClasses[0].defaultVolumeType: "block" is not a volume type: use hostPath or local',
    ),
    (
        "malformed pathPattern",
        {"storageClasses": one_class(parameters={"pathPattern": "{{ .PVC.Nmespace }}/x"})},
        "storageClasses[0].parameters.pathPattern: unsupported action {{ .PVC.Nmespace }}: "
        "only {{.PVName}}, {{.PVC.Namespace}}, {{.PVC.Name}}, {{.PVC.Labels.<key>}}, "
        '{{.PVC.Annotations.<key>}}, {{index .PVC.Labels "<key>"}}, '
        '{{index .PVC.Annotations "<key>"}} are available',
    ),
    (
        "pathPattern escaping the volume",
        {
            "storageClasses": one_class(
                parameters={"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}/../../other"}
            )
        },
        "storageClasses[0].parameters.pathPattern: rendered path "
        "'sample-namespace/sample-claim/../../other' has a '..' component",
    ),
    (
        "unsafe helper template",
        {"helperPodTemplate": UNSAFE_HELPER},
        "helperPodTemplate: spec.hostNetwork: must not be true: it opens the host's namespaces; "
        "remove it, or set allowUnsafeHelperTemplate to true (trusted administrators only)",
    ),
    (
        "helper template not YAML",
        {"helperPodTemplate": "spec: [unclosed"},
        "helperPodTemplate: is not valid YAML at line 1: expected ',' or ']', "
        "but got '<stream end>'",
    ),
    (
        "misspelt key",
        {"nodePathmap": []},
        "nodePathmap: unknown key; did you mean nodePathMap?",
    ),
    ("no replicas", {"replicas": 0}, "replicas: must be at least 1, got 0"),
    (
        "namespace name",
        {"namespace": "Local_Path"},
        'namespace: "Local_Path" is not a valid namespace name '
        '(lower-case letters, digits and "-", at most 63 characters)',
    ),
    (
        "two default classes",
        {"storageClasses": [{"name": "a", "isDefault": True}, {"name": "b", "isDefault": True}]},
        'storageClasses[1].isDefault: only one class can be the default; storageClasses[0] ("a") '
        "already is",
    ),
    (
        "duplicate class",
        {"storageClasses": [{"name": "a"}, {"name": "a"}]},
        'storageClasses[1].name: "a" is already used by storageClasses[0]',
    ),
    (
        "Immediate on node-local paths",
        {"storageClasses": one_class(volumeBindingMode="Immediate")},
        "storageClasses[0].volumeBindingMode: Immediate needs a sharedFileSystemPath for this "
        "class: a node-local volume has no node until a pod is scheduled; "
        "use WaitForFirstConsumer",
    ),
    (
        "class missing from storageClassConfigs",
        {"nodePathMap": None, "storageClassConfigs": {"other": {"sharedFileSystemPath": "/nfs"}}},
        'storageClassConfigs: has no entry for class "local-path-storage": add one, '
        "or claims of this class cannot be provisioned",
    ),
    (
        "top-level paths next to storageClassConfigs",
        {"storageClassConfigs": {"local-path": {"sharedFileSystemPath": "/mnt/nfs"}}},
        "nodePathMap: must be unset when storageClassConfigs is set (rancher would ignore it): "
        "move it into storageClassConfigs",
    ),
    (
        "permPattern as a YAML number",
        {"storageClasses": one_class(parameters={"permPattern": 504})},
        'storageClasses[0].parameters.permPattern: must be a string (quote it, e.g. "0770"), '
        "got 504",
    ),
    (
        "reclaim policy",
        {"storageClasses": one_class(reclaimPolicy="Recycle")},
        'storageClasses[0].reclaimPolicy: must be one of Delete, Retain; got "Recycle"',
    ),
    (
        "no storage at all",
        {"nodePathMap": None},
        "nodePathMap: no storage configured: set nodePathMap, sharedFileSystemPath "
        "or storageClassConfigs",
    ),
    (
        "no classes",
        {"storageClasses": None},
        "storageClasses: at least one StorageClass is required, "
        "e.g. [{name: local-path, isDefault: true}]",
    ),
    ("port", {"metricsPort": 70000}, "metricsPort: must be between 1 and 65535, got 70000"),
    (
        "quantity",
        {"memoryLimit": "lots"},
        'memoryLimit: "lots" is not a Kubernetes quantity (e.g. 100m, 64Mi, 1Gi)',
    ),
    (
        "pull policy",
        {"imagePullPolicy": "Sometimes"},
        'imagePullPolicy: must be one of Always, IfNotPresent, Never; got "Sometimes"',
    ),
    (
        "misspelt class key",
        {"storageClasses": one_class(reclaimpolicy="Retain")},
        "storageClasses[0].reclaimpolicy: unknown key; did you mean reclaimPolicy?",
    ),
    (
        "unknown parameter",
        {"storageClasses": one_class(parameters={"nodepath": "/opt/local-path-provisioner"})},
        "storageClasses[0].parameters.nodepath: unknown parameter (known: nodePath, pathPattern, "
        "nodeAffinityKey, allowUnsafePathPattern, userPattern, groupPattern, permPattern, minSize,"
        " maxSize, reuseExistingData, nodeLossGracePeriod, volumeType)",
    ),
    (
        "provisioner name",
        {"provisionerName": "not a name!"},
        'provisionerName: "not a name!" is not a valid provisioner name '
        "(e.g. example.com/local-path)",
    ),
    (
        "timeout",
        {"cmdTimeoutSeconds": 0},
        "cmdTimeoutSeconds: must be a positive number of seconds, got 0",
    ),
    (
        "default-class annotation by hand",
        {
            "storageClasses": one_class(
                annotations={"storageclass.kubernetes.io/is-default-class": "true"}
            )
        },
        'storageClasses[0].annotations["storageclass.kubernetes.io/is-default-class"]: '
        "set isDefault instead",
    ),
    (
        "node affinity key",
        {"storageClasses": one_class(parameters={"nodeAffinityKey": "not a key"})},
        'storageClasses[0].parameters.nodeAffinityKey: "not a key" is not a valid label key '
        "such as kubernetes.io/hostname",
    ),
    (
        "empty setup script",
        {"setupScript": " "},
        "setupScript: the setup script is empty and config.json sets no setupCommand: "
        "give one of them",
    ),
    (
        "setup script too large for a helper pod",
        {"setupScript": "#" * 131061},
        "setupScript: the setup script is 131061 bytes, over the 131060 a helper pod can carry"
        " (one environment variable of at most 128 KiB): move its logic into the helper image"
        " and call it with setupCommand",
    ),
    ("log level", {"logLevel": "verbose"}, 'logLevel: must be one of info, debug; got "verbose"'),
    ("boolean", {"leaderElection": "yes"}, 'leaderElection: must be true or false, got "yes"'),
    (
        "node map as a string",
        {"nodePathMap": "/data"},
        "nodePathMap: must be a list of {node, paths} "
        '(edit it in the stack file or with `pulumi config set --path`), got "/data"',
    ),
    (
        "class name",
        {"storageClasses": [{"name": "Local_Path"}]},
        'storageClasses[0].name: "Local_Path" is not a valid StorageClass name '
        '(lower-case letters, digits, "-" and ".", at most 253 characters)',
    ),
    (
        "empty topology term",
        {"storageClasses": one_class(allowedTopologies=[{"matchLabelExpressions": []}])},
        "storageClasses[0].allowedTopologies[0].matchLabelExpressions: "
        "must be a non-empty list of {key, values}",
    ),
    (
        "allowUnsafePathPattern annotation",
        {"storageClasses": one_class(annotations={"allowUnsafePathPattern": "maybe"})},
        'storageClasses[0].annotations["allowUnsafePathPattern"]: "maybe" is not a boolean: '
        "write true or false",
    ),
    (
        "local volumes on a shared path",
        {
            "nodePathMap": None,
            "sharedFileSystemPath": "/mnt/nfs",
            "storageClasses": one_class(defaultVolumeType="local", volumeBindingMode="Immediate"),
        },
        "storageClasses[0].defaultVolumeType: local volumes need node affinity, which a "
        "sharedFileSystemPath class does not give: use hostPath",
    ),
    ("workers", {"workers": "many"}, 'workers: must be an integer, got "many"'),
    (
        "one directory shared and a node path",
        {
            "nodePathMap": None,
            "storageClassConfigs": {
                "local-path": {"sharedFileSystemPath": "/mnt/same"},
                "node-twin": {"nodePathMap": [{"node": "n1", "paths": ["/mnt/same"]}]},
            },
            "storageClasses": one_class(volumeBindingMode="Immediate"),
        },
        'storageClassConfigs["node-twin"].nodePathMap[0].paths[0]: "/mnt/same" is also the'
        ' sharedFileSystemPath at storageClassConfigs["local-path"].sharedFileSystemPath: a'
        " directory is either a filesystem every node shares or a node's own, not both; give"
        " one of them another directory",
    ),
    (
        "one directory under two node affinity keys",
        {
            "storageClasses": [
                {"name": "by-hostname"},
                {"name": "by-disk", "parameters": {"nodeAffinityKey": "example.com/disk"}},
            ]
        },
        'storageClasses[1].parameters.nodeAffinityKey: "example.com/disk" differs from'
        ' "kubernetes.io/hostname" of class "by-hostname", which serves the same directory'
        ' "/opt/local-path-provisioner": one directory is served under one nodeAffinityKey;'
        " give the classes the same key, or another directory",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [pytest.param(overrides, message, id=name) for name, overrides, message in BAD_CONFIGS],
)
def test_bad_config_fails_with_one_line_naming_the_key(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(dev_with(**overrides))
    assert str(caught.value) == PREFIX + message
    assert "\n" not in str(caught.value)
    assert caught.value.key_path == message.split(": ", 1)[0]


@pytest.mark.parametrize(
    ("key", "stored_in"),
    [
        ("setupScript", "the ConfigMap local-path-config"),
        ("nodePathMap", "the ConfigMap local-path-config"),
        ("image", "the provisioner Deployment"),
        ("storageClasses", "the StorageClasses"),
    ],
)
def test_a_secret_value_is_refused_naming_where_it_would_be_plaintext(
    key: str, stored_in: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(dev_with(), secret_keys=frozenset({key}))
    assert str(caught.value) == (
        f"{PREFIX}{key}: is a secret, but it would be stored in plaintext in {stored_in} and "
        f"the stack's state; set it without --secret (`pulumi config set {key} ...`) and keep "
        "credentials out of it"
    )


def test_an_unknown_key_is_named_before_a_secret_one() -> None:
    raw = {**dev_with(), f"{CONFIG_NAMESPACE}:nodePathmap": "[]"}
    with pytest.raises(SettingsError) as caught:
        parse_settings(raw, secret_keys=frozenset({"setupScript"}))
    assert caught.value.key_path == "nodePathmap"


@pytest.mark.parametrize(
    "pinned",
    [
        "registry.example/local-path-storage/provisioner@sha256:" + "0" * 64,
        "registry.example:5000/local-path-storage/provisioner:0.1.0@sha256:" + "0" * 64,
    ],
    ids=["digest", "tag-and-digest"],
)
def test_the_image_may_be_pinned_by_digest(pinned: str) -> None:
    """docs/install.md's "Pinning the image by digest": the reference reaches the pod as given."""
    deployment = parse_settings(dev_with(image=pinned)).deployment
    template: Any = pod_template(deployment, "lps")
    assert [container["image"] for container in template["spec"]["containers"]] == [pinned]
