"""helperPod.yaml validation, the helper pod built for an action, and reading its outcome."""

import copy
import json
from typing import Any

import pytest
import yaml

from provisioner.claims import TeardownPlan
from provisioner.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigError,
    load_config_bundle,
)
from provisioner.helpers import (
    HELPER_POD_LABEL,
    HELPER_POD_LABEL_VALUE,
    Failed,
    Pending,
    Running,
    Succeeded,
    build_helper_pod,
    helper_pod_name,
    interpret_helper_pod_status,
    parse_helper_template,
    pick_helper_node,
    validate_helper_template,
)
from provisioner.records import NodeRecord

HINT = "remove it, or start the provisioner with --allow-unsafe-helper-template"
DEFAULT = yaml.safe_load(DEFAULT_HELPER_POD_YAML)


def with_(path: str, value: Any) -> dict[str, Any]:
    """The default template with one field set, path like spec.containers.0.securityContext."""
    template: dict[str, Any] = copy.deepcopy(DEFAULT)
    *parents, last = path.split(".")
    node: Any = template
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[last] = value
    return template


C = "spec.containers.0"
UNSAFE_TEMPLATES: list[tuple[dict[str, Any], str]] = [
    (
        with_("spec.containers", [DEFAULT["spec"]["containers"][0]] * 2),
        "spec.containers: must hold exactly one container, not 2",
    ),
    (
        with_("spec.initContainers", [{"name": "i", "image": "x"}]),
        f"spec.initContainers: must not be set: the provisioner adds what it needs; {HINT}",
    ),
    (
        with_("spec.ephemeralContainers", [{"name": "e", "image": "x"}]),
        f"spec.ephemeralContainers: must not be set: the provisioner adds what it needs; {HINT}",
    ),
    (
        with_("spec.volumes", [{"name": "root", "hostPath": {"path": "/"}}]),
        f"spec.volumes: must not be set: the provisioner adds what it needs; {HINT}",
    ),
    (
        with_("spec.hostNetwork", True),
        f"spec.hostNetwork: must not be true: it opens the host's namespaces; {HINT}",
    ),
    (
        with_("spec.hostPID", True),
        f"spec.hostPID: must not be true: it opens the host's namespaces; {HINT}",
    ),
    (
        with_("spec.hostIPC", True),
        f"spec.hostIPC: must not be true: it opens the host's namespaces; {HINT}",
    ),
    (
        with_("spec.nodeName", "n1"),
        f"spec.nodeName: must not be set: the provisioner chooses it; {HINT}",
    ),
    (
        with_("spec.serviceAccountName", "admin"),
        f"spec.serviceAccountName: must not be set: the provisioner chooses it; {HINT}",
    ),
    (
        with_("spec.serviceAccount", "admin"),
        f"spec.serviceAccount: must not be set: the provisioner chooses it; {HINT}",
    ),
    (
        with_(f"{C}.volumeMounts", [{"name": "x", "mountPath": "/x"}]),
        f"spec.containers[0].volumeMounts: must not be set; {HINT}",
    ),
    (
        with_(f"{C}.volumeDevices", [{"name": "x", "devicePath": "/dev/x"}]),
        f"spec.containers[0].volumeDevices: must not be set; {HINT}",
    ),
    (
        with_(f"{C}.envFrom", [{"secretRef": {"name": "s"}}]),
        f"spec.containers[0].envFrom: must not be set; {HINT}",
    ),
    (
        with_(
            f"{C}.env",
            [
                {"name": "A", "value": "1"},
                {"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            ],
        ),
        f"spec.containers[0].env[1].valueFrom: must not read secrets; {HINT}",
    ),
    (
        with_(f"{C}.lifecycle", {"postStart": {"exec": {"command": ["sh"]}}}),
        f"spec.containers[0].lifecycle: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.livenessProbe", {"exec": {"command": ["true"]}}),
        f"spec.containers[0].livenessProbe: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.readinessProbe", {"exec": {"command": ["true"]}}),
        f"spec.containers[0].readinessProbe: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.startupProbe", {"exec": {"command": ["true"]}}),
        f"spec.containers[0].startupProbe: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.privileged", True),
        f"spec.containers[0].securityContext.privileged: must not be true: root"
        f" on the node; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.capabilities", {"add": ["SYS_ADMIN"]}),
        f"spec.containers[0].securityContext.capabilities.add: must not add capabilities; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.allowPrivilegeEscalation", True),
        f"spec.containers[0].securityContext.allowPrivilegeEscalation: must not be true; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.runAsUser", 0),
        f"spec.containers[0].securityContext.runAsUser: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.runAsGroup", 0),
        f"spec.containers[0].securityContext.runAsGroup: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_("spec.securityContext.runAsUser", 0),
        f"spec.securityContext.runAsUser: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_("spec.securityContext.runAsGroup", 0),
        f"spec.securityContext.runAsGroup: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_("spec.securityContext.sysctls", [{"name": "kernel.shm_rmid_forced", "value": "1"}]),
        f"spec.securityContext.sysctls: must not be set; {HINT}",
    ),
]


@pytest.mark.parametrize(("template", "expected"), UNSAFE_TEMPLATES)
def test_unsafe_templates_are_refused_unless_allowed(
    template: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_helper_template(yaml.safe_dump(template))
    assert str(caught.value) == f"helperPod.yaml: {expected}"
    assert caught.value.source == "helperPod.yaml"
    validate_helper_template(template, allow_unsafe=True)


BROKEN_TEMPLATES: list[tuple[str, str]] = [
    (
        "spec: [",
        "helperPod.yaml: is not valid YAML at line 1: expected the node"
        " content, but found '<stream end>'",
    ),
    (
        "- just a list",
        "helperPod.yaml: must be a Pod manifest (a YAML mapping with spec.containers)",
    ),
    ("kind: Deployment\nspec: {}", "helperPod.yaml: kind: must be a v1 Pod"),
    ("metadata: {name: x}", "helperPod.yaml: spec: is required: a Pod spec with one container"),
    ("spec: {containers: []}", "helperPod.yaml: spec.containers: must list the helper container"),
    (
        "spec: {containers: [{name: x}]}",
        "helperPod.yaml: spec.containers[0].image: is required: an image with /bin/sh",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BROKEN_TEMPLATES)
def test_broken_templates_are_refused_even_when_unsafe_is_allowed(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_helper_template(text, allow_unsafe=True)
    assert str(caught.value) == expected


def test_hardening_fields_are_welcome() -> None:
    template = with_(
        f"{C}.securityContext",
        {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    )
    template["spec"]["securityContext"] = {"fsGroup": 2000, "runAsNonRoot": True}
    template["spec"]["containers"][0]["env"] = [{"name": "TZ", "value": "UTC"}]
    template["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64Mi"}}
    validate_helper_template(template)


BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/lp"]}],'
    ' "cmdTimeoutSeconds": 90}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)
TARGET = TeardownPlan(
    volume_name="pvc-1111",
    path="/opt/lp/ns/claim",
    node_name="node-1",
    volume_mode="Filesystem",
    size_bytes=1024,
    delete_volume=True,
    remove_finalizer=True,
    vol_user="1000",
    vol_group="2000",
    vol_perm="0750",
    base_path="/opt/lp",
)


def build(action: Any = "create", target: Any = TARGET, bundle: Any = BUNDLE, **kw: Any) -> Any:
    return build_helper_pod(action, target, bundle, "lps", "helper-sa", **kw)


def test_helper_pod_forces_what_the_template_may_not_choose() -> None:
    pod = build()
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"] == {
        "name": "helper-create-pvc-1111",
        "namespace": "lps",
        "labels": {
            HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE,
            "local-path-storage.io/helper-action": "create",
            "local-path-storage.io/volume": "pvc-1111",
        },
    }
    assert spec["nodeName"] == "node-1"
    assert spec["serviceAccountName"] == "helper-sa"
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 90
    assert spec["priorityClassName"] == "system-node-critical"  # kept from the template
    # The base path, never the volume's parent: a hostPath is resolved on the host, so a
    # parent reached through a planted symlink would mount whatever it points at.
    assert spec["volumes"] == [
        {"name": "data", "hostPath": {"path": "/opt/lp", "type": "DirectoryOrCreate"}},
    ]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/opt/lp"}]
    # The validated script in force, inline: never the ConfigMap's current file.
    assert container["command"] == ["/bin/sh", "-c", DEFAULT_SETUP_SCRIPT, "setup"]
    assert container["args"] == [
        "-p",
        "/opt/lp/ns/claim",
        "-s",
        "1024",
        "-m",
        "Filesystem",
        "-a",
        "create",
    ]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "VOL_DIR": "/opt/lp/ns/claim",
        "VOL_MODE": "Filesystem",
        "VOL_SIZE_BYTES": "1024",
        "VOL_USER": "1000",
        "VOL_GROUP": "2000",
        "VOL_PERM": "0750",
    }
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["image"] == "busybox"


def test_teardown_runs_the_teardown_script() -> None:
    pod = build("delete")
    assert pod["metadata"]["name"] == "helper-delete-pvc-1111"
    command = pod["spec"]["containers"][0]["command"]
    assert command == ["/bin/sh", "-c", DEFAULT_TEARDOWN_SCRIPT, "teardown"]


def test_configured_commands_replace_the_scripts() -> None:
    bundle = load_config_bundle(
        json.dumps(
            {
                "sharedFileSystemPath": "/nfs",
                "setupCommand": "/bin/lp-setup",
                "teardownCommand": "/bin/lp-teardown",
            }
        ),
        "",
        "",
        DEFAULT_HELPER_POD_YAML,
    )
    pod = build("delete", bundle=bundle)
    assert pod["spec"]["containers"][0]["command"] == ["/bin/lp-teardown"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["data"]
    assert [m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]] == ["data"]


def test_template_env_survives_but_cannot_override_ours() -> None:
    template = with_(
        f"{C}.env", [{"name": "TZ", "value": "UTC"}, {"name": "VOL_DIR", "value": "/"}]
    )
    bundle = type(BUNDLE)(BUNDLE.config, "x", "x", template)
    env = build(bundle=bundle)["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "TZ", "value": "UTC"}
    assert [e["value"] for e in env if e["name"] == "VOL_DIR"] == ["/opt/lp/ns/claim"]


def test_shared_path_helper_goes_to_the_node_given() -> None:
    shared = TeardownPlan(
        "pvc-2", "/nfs/pvc-2_ns_c", None, "Filesystem", 0, True, False, base_path="/nfs"
    )
    assert build(target=shared, node_name="node-7")["spec"]["nodeName"] == "node-7"
    assert "nodeName" not in build(target=shared)["spec"]


def test_template_is_not_mutated() -> None:
    before = copy.deepcopy(BUNDLE.helper_pod_template)
    build()
    assert before == BUNDLE.helper_pod_template


@pytest.mark.parametrize(
    ("path", "base"),
    [
        ("relative/x", "relative"),
        ("/opt/lp", "/opt/lp"),
        ("/opt/lpx/a", "/opt/lp"),
        ("/opt/lp/a", ""),
    ],
)
def test_helper_refuses_a_path_not_strictly_inside_its_base(path: str, base: str) -> None:
    target = TeardownPlan("pvc-3", path, "n", "Filesystem", 0, True, False, base_path=base)
    with pytest.raises(ValueError, match="not strictly inside its base path"):
        build(target=target)


def test_helper_pod_names_are_short_and_deterministic() -> None:
    assert helper_pod_name("create", "pvc-0b5c3f3e-7f0e-4d39-9b52-3f7d2e3c9a11") == (
        "helper-create-pvc-0b5c3f3e-7f0e-4d39-9b52-3f7d2e3c9a11"
    )
    long_name = "imported-" + "x" * 200
    name = helper_pod_name("delete", long_name)
    assert len(name) <= 63
    assert name == helper_pod_name("delete", long_name)
    assert name != helper_pod_name("delete", long_name + "y")


def test_pick_helper_node_takes_the_first_ready_schedulable() -> None:
    nodes = [NodeRecord("c"), NodeRecord("a", ready=False), NodeRecord("b", unschedulable=True)]
    assert pick_helper_node(nodes) == "c"
    assert pick_helper_node([NodeRecord("a", ready=False)]) is None


def terminated(code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    return {"state": {"terminated": {"exitCode": code, "reason": reason, "message": message}}}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Succeeded", "containerStatuses": [terminated(0, "Completed")]}, Succeeded()),
        ({"phase": "Running", "containerStatuses": [terminated(0, "Completed")]}, Succeeded()),
        (
            {"phase": "Failed", "containerStatuses": [terminated(2, "Error", "mkdir: denied\n")]},
            Failed(2, "Error", "mkdir: denied\n"),
        ),
        ({"phase": "Running", "containerStatuses": [terminated(1)]}, Failed(1, "Error", "")),
        (
            {"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active too long"},
            Failed(None, "DeadlineExceeded", "Pod was active too long"),
        ),
        ({"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}, Running()),
        (
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": "back-off pulling busybox",
                            }
                        }
                    }
                ],
            },
            Pending("ImagePullBackOff", "back-off pulling busybox"),
        ),
        (
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes",
                    }
                ],
            },
            Pending("Unschedulable", "0/3 nodes"),
        ),
        ({"phase": "Pending"}, Pending("ContainerCreating")),
        ({}, Pending("ContainerCreating")),
    ],
)
def test_interpret_helper_pod_status(status: dict[str, Any], expected: object) -> None:
    assert interpret_helper_pod_status(status) == expected


def test_stuck_pending_reasons_fail_fast_and_logs_are_capped() -> None:
    assert Pending("ErrImagePull").stuck
    assert not Pending("ContainerCreating").stuck
    state = interpret_helper_pod_status(
        {"phase": "Failed", "containerStatuses": [terminated(1, "Error", "x" * 10000 + "tail")]}
    )
    assert isinstance(state, Failed)
    assert state.log_tail.endswith("tail")
    assert len(state.log_tail) == 4096
