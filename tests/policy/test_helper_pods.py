from __future__ import annotations

import pytest

from policy.helper_pods import (
    check_pinned_image,
    check_privileged,
    check_unsafe_flag,
    image_problem,
)
from provisioner.core.config import DEFAULT_HELPER_POD_YAML
from tests.policy.resources import config_map, deployment, helper_pod


def test_the_unsafe_template_flag_is_refused() -> None:
    [message] = check_unsafe_flag(deployment(args=("--allow-unsafe-helper-template",)))
    assert "--allow-unsafe-helper-template" in message
    assert "local-path-storage-policy:allowUnsafeHelperTemplate" in message


def test_the_flag_through_the_environment_is_refused_too() -> None:
    env = ({"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "true"},)
    assert check_unsafe_flag(deployment(env=env))


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
