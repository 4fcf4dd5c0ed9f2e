from __future__ import annotations

from typing import Any

import pytest

from policy.helper_pods import (
    check_pinned_image,
    check_privileged,
    check_unsafe_flag,
    image_problem,
)
from policy.resources import Resource
from provisioner.configuration.config import DEFAULT_HELPER_POD_YAML
from tests.policy.resources import config_map, deployment, helper_pod


def test_the_unsafe_template_flag_is_refused() -> None:
    [message] = check_unsafe_flag(deployment(args=("--allow-unsafe-helper-template",)))
    assert "--allow-unsafe-helper-template" in message
    assert "local-path-storage-policy:allowUnsafeHelperTemplate" in message


def test_the_flag_through_the_environment_is_refused_too() -> None:
    env = ({"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "true"},)
    assert check_unsafe_flag(deployment(env=env))


def workload(container: dict[str, Any], kind: str = "kubernetes:apps/v1:Deployment") -> Resource:
    spec = {"containers": [{"name": "provisioner", "image": "lps:0.1.0", **container}]}
    props = {"spec": spec} if kind.endswith(":Pod") else {"spec": {"template": {"spec": spec}}}
    return Resource(kind, {"metadata": {"name": "lps"}, **props}, "urn::lps")


UNSAFE = "runs with --allow-unsafe-helper-template"


@pytest.mark.parametrize(
    "container",
    [
        # args only: the image's ENTRYPOINT runs the provisioner
        {"args": ["start", "--allow-unsafe-helper-template"]},
        {"command": ["python", "-m", "provisioner"], "args": ["--allow-unsafe-helper-template"]},
        {"command": ["python3", "-m", "provisioner", "start", "--allow-unsafe-helper-template"]},
        {
            "command": ["/usr/local/bin/python3.11", "-u", "-X", "dev", "-mprovisioner"],
            "args": ["--allow-unsafe-helper-template"],
        },
        {"command": ["/usr/local/bin/local-path-storage-provisioner"], "args": ["--allow-unsafe"]},
        {"command": ["local-path-storage-provisioner"], "args": ["--allow-unsafe-h"]},
        {"command": ["sh", "-c", "exec local-path-storage-provisioner start --allow-unsafe"]},
        {
            "command": ["/bin/sh", "-c", "python3 -m provisioner $EXTRA && sleep 1"],
            "env": [{"name": "EXTRA", "value": "--debug --allow-unsafe"}],
        },
        {"args": ["$(EXTRA)"], "env": [{"name": "EXTRA", "value": "--allow-unsafe"}]},
        {"args": [], "env": [{"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "yes"}]},
        {"args": [], "env": [{"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "on"}]},
        {"args": [], "env": [{"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": " TRUE "}]},
        {
            "env": [
                {"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "false"},
                {"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "1"},
            ]
        },
    ],
)
def test_every_form_the_runtime_reads_as_unsafe_is_refused(container: dict[str, Any]) -> None:
    [message] = check_unsafe_flag(workload(container))
    assert UNSAFE in message and "Deployment lps container provisioner" in message


@pytest.mark.parametrize(
    "kind",
    ["kubernetes:apps/v1:StatefulSet", "kubernetes:apps/v1:DaemonSet", "kubernetes:core/v1:Pod"],
)
def test_other_workloads_running_the_provisioner_are_checked_too(kind: str) -> None:
    [message] = check_unsafe_flag(workload({"args": ["--allow-unsafe"]}, kind))
    assert UNSAFE in message


@pytest.mark.parametrize(
    ("container", "source"),
    [
        (
            {
                "env": [
                    {
                        "name": "ALLOW_UNSAFE_HELPER_TEMPLATE",
                        "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}},
                    }
                ]
            },
            "env valueFrom (configMapKeyRef)",
        ),
        ({"envFrom": [{"configMapRef": {"name": "settings"}}]}, "envFrom configMapRef settings"),
        ({"envFrom": [{"prefix": "ALLOW_", "secretRef": {"name": "s"}}]}, "envFrom secretRef s"),
        (
            {"args": ["$(FLAGS)"], "env": [{"name": "FLAGS", "valueFrom": {"secretKeyRef": {}}}]},
            "an argument uses a variable from valueFrom or envFrom",
        ),
    ],
)
def test_a_setting_from_a_source_the_policy_cannot_read_is_reported(
    container: dict[str, Any], source: str
) -> None:
    [message] = check_unsafe_flag(workload(container))
    assert "cannot be told" in message and source in message


@pytest.mark.parametrize(
    "container",
    [
        {"args": ["--allow-unsafe-helper-template=true"]},  # the runtime refuses it and exits
        {"command": ["python", "-m", "provisioner", "orphans", "--allow-unsafe"]},
        {"command": ["nginx"], "args": ["--allow-unsafe-helper-template"]},
        {"command": ["python", "-c", "import provisioner"], "args": ["--allow-unsafe"]},
        {"args": ["$(UNSET)"]},
        {"args": [], "env": [{"name": "WORKER_THREADS", "value": "many"}]},  # exits at start
        {"env": [{"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "false"}]},
        {"env": [{"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "no"}]},
        {"envFrom": [{"prefix": "APP_", "configMapRef": {"name": "settings"}}]},
        {
            "envFrom": [{"configMapRef": {"name": "settings"}}],
            "env": [
                {"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "false"},
                {"name": "LEADER_ELECTION", "value": "true"},
            ],
        },
    ],
)
def test_what_the_runtime_does_not_run_unsafe_passes(container: dict[str, Any]) -> None:
    assert check_unsafe_flag(workload(container)) == []


def test_a_sidecar_beside_the_provisioner_is_not_read_as_one() -> None:
    pod: dict[str, Any] = {
        "containers": [
            {"name": "provisioner", "command": ["local-path-storage-provisioner"], "args": []},
            {"name": "sidecar", "image": "proxy:1", "envFrom": [{"configMapRef": {"name": "p"}}]},
        ]
    }
    resource = Resource(
        "kubernetes:apps/v1:Deployment", {"spec": {"template": {"spec": pod}}}, "urn::d"
    )
    assert check_unsafe_flag(resource) == []
    pod["containers"][0]["args"] = ["--allow-unsafe"]
    [message] = check_unsafe_flag(resource)
    assert "container provisioner" in message


def test_no_flag_passes() -> None:
    assert check_unsafe_flag(deployment()) == []
    assert check_unsafe_flag(config_map()) == []


@pytest.mark.parametrize(
    ("container", "key"),
    [
        ({"securityContext": {"privileged": True}}, "securityContext.privileged"),
        (
            {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
            "securityContext.capabilities.add",
        ),
        ({"securityContext": {"runAsUser": 0}}, "securityContext.runAsUser"),
        ({"volumeMounts": [{"name": "root", "mountPath": "/host"}]}, "volumeMounts"),
    ],
)
def test_a_template_beyond_the_runtime_allow_list_is_refused(
    container: dict[str, object], key: str
) -> None:
    [message] = check_privileged(config_map(helper_pod=helper_pod(**container)))
    assert f"helperPod.yaml: spec.containers[0].{key}" in message
    assert "local-path-storage-policy:allowPrivilegedHelper" in message


def test_host_namespaces_are_refused() -> None:
    template = helper_pod().replace("spec:\n", "spec:\n  hostPID: true\n", 1)
    [message] = check_privileged(config_map(helper_pod=template))
    assert "spec.hostPID" in message


def test_the_default_template_passes() -> None:
    assert check_privileged(config_map()) == []


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("busybox", "has no tag"),
        ("busybox:latest", "is :latest"),
        ("registry.example.com:5000/tools/busybox", "has no tag"),
        ("busybox:1.37.0", None),
        ("registry.example.com:5000/busybox:1.37.0", None),
        ("busybox@sha256:" + "a" * 64, None),
    ],
)
def test_image_pinning(image: str, problem: str | None) -> None:
    found = image_problem(image)
    assert (found is None) if problem is None else (problem in (found or ""))


def test_an_unpinned_helper_image_is_reported_with_the_fix() -> None:
    [message] = check_pinned_image(config_map(helper_pod=helper_pod(image="busybox")))
    assert message.startswith(
        'ConfigMap local-path-config helperPod.yaml spec.containers[0].image: "busybox" has no tag'
    )
    assert "set helperImage to a fixed version" in message
    assert check_pinned_image(config_map()) == []


def test_the_default_helper_template_is_pinned() -> None:
    assert check_pinned_image(config_map(helper_pod=DEFAULT_HELPER_POD_YAML)) == []
