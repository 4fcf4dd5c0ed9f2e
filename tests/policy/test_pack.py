"""The pack's wiring: policy names and levels, the stack's opt-ins and production flag, the
pack config's system paths, violations reported through pulumi_policy's own argument types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import PolicyResource

from policy import pack
from tests.policy.resources import config_map, deployment, storage_class

NAMES = [
    "safe-storage-paths",
    "single-default-storage-class",
    "no-unsafe-helper-template",
    "unprivileged-helper-pod",
    "pinned-helper-image",
    "least-privilege-rbac",
    "production-readiness",
    "least-privilege-node-plugin",
    "node-plugin-host-mounts",
    "provisioner-config-valid",
]


def by_name(production: bool = False) -> dict[str, Any]:
    return {policy.name: policy for policy in pack.policies(production_stack=production)}


def options() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def run_resource_policy(
    policy: ResourceValidationPolicy, resource: Any, config: dict[str, Any] | None = None
) -> list[str]:
    found: list[str] = []
    args = ResourceValidationArgs(
        resource.type, resource.props, resource.urn, "n", options(), None, config
    )

    def report(message: str, urn: str | None = None) -> None:
        found.append(message)

    policy.validate(args, report)
    return found


def test_every_policy_is_mandatory_and_production_is_advisory_until_declared() -> None:
    policies = by_name()
    assert list(policies) == NAMES
    levels = {name: policy.enforcement_level for name, policy in policies.items()}
    assert levels.pop("production-readiness") == EnforcementLevel.ADVISORY
    assert set(levels.values()) == {EnforcementLevel.MANDATORY}
    production = by_name(production=True)["production-readiness"]
    assert production.enforcement_level == EnforcementLevel.MANDATORY


def test_stack_flags_read_the_policy_namespace() -> None:
    config = {"local-path-storage-policy:production": "true", "local-path-storage:replicas": "1"}
    assert pack.stack_flag("production", config)
    assert not pack.stack_flag("allowUnpinnedHelperImage", config)


def test_a_resource_policy_reports_through_report_violation() -> None:
    policy = by_name()["safe-storage-paths"]
    found = run_resource_policy(policy, storage_class(nodePath="/etc/x"))
    assert len(found) == 1
    assert "/etc/x" in found[0]


def test_system_paths_come_from_the_pack_config() -> None:
    policy = by_name()["safe-storage-paths"]
    resource = storage_class(nodePath="/srv/backups/x")
    assert run_resource_policy(policy, resource) == []
    assert run_resource_policy(policy, resource, {"systemPaths": ["/srv/backups"]})


@pytest.mark.parametrize(
    ("name", "key", "resource"),
    [
        ("pinned-helper-image", "allowUnpinnedHelperImage", None),
        ("no-unsafe-helper-template", "allowUnsafeHelperTemplate", "deployment"),
    ],
)
def test_the_stack_opt_in_lifts_its_policy(
    monkeypatch: pytest.MonkeyPatch, name: str, key: str, resource: str | None
) -> None:
    policy = by_name()[name]
    target = (
        deployment(args=("--allow-unsafe-helper-template",))
        if resource
        else config_map(helper_pod="spec: {containers: [{name: h, image: busybox}]}")
    )
    assert run_resource_policy(policy, target)
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({f"local-path-storage-policy:{key}": "true"}))
    with pytest.raises(Exception) as lifted:  # pulumi_policy's private type
        run_resource_policy(policy, target)
    assert type(lifted.value).__name__ == "_NotApplicableError"
    assert f"local-path-storage-policy:{key} is true" in str(lifted.value.reason)  # type: ignore[attr-defined]


def test_a_stack_policy_sees_every_resource() -> None:
    policy = by_name()["single-default-storage-class"]
    assert isinstance(policy, StackValidationPolicy)
    resources = [
        PolicyResource(r.type, r.props, r.urn, "n", options(), None, None, [], {})
        for r in (storage_class("a", default=True), storage_class("b", default=True))
    ]
    found: list[tuple[str, str | None]] = []

    def report(message: str, urn: str | None = None) -> None:
        found.append((message, urn))

    policy.validate(StackValidationArgs(resources), report)
    assert [urn for _, urn in found] == ["urn::sc::b"]
