from __future__ import annotations

from typing import Any

import pytest

from components import rbac as needed
from policy.rbac import check_resource
from policy.resources import Resource
from tests.policy.resources import CLUSTER_ROLE_BINDING, ROLE, cluster_role


def rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def as_rules(rules: tuple[needed.PolicyRule, ...]) -> list[dict[str, Any]]:
    return [rule([r.api_group], list(r.resources), list(r.verbs)) for r in rules]


def test_what_the_provisioner_needs_passes() -> None:
    assert check_resource(cluster_role(*as_rules(needed.CLUSTER_RULES))) == []
    assert check_resource(cluster_role(*as_rules(needed.NAMESPACE_RULES), kind=ROLE)) == []


@pytest.mark.parametrize(
    ("broad", "problem"),
    [
        (rule(["*"], ["nodes"], ["get"]), "apiGroups has a wildcard"),
        (rule([""], ["*"], ["get"]), "resources has a wildcard"),
        (rule([""], ["persistentvolumes"], ["*"]), "verbs has a wildcard"),
        (rule([""], ["secrets"], ["get"]), "it grants secrets"),
        (rule([""], ["pods"], ["get"]), "pods in every namespace"),
        (rule([""], ["pods/log"], ["get"]), "pods in every namespace"),
    ],
)
def test_broader_cluster_rules_are_refused(broad: dict[str, Any], problem: str) -> None:
    [message] = check_resource(cluster_role(*as_rules(needed.CLUSTER_RULES), broad))
    index = len(needed.CLUSTER_RULES)
    assert message.startswith(f"ClusterRole lps:provisioner rules[{index}] ")
    assert problem in message
    assert "grant only what components/rbac.py lists" in message


def test_secrets_in_its_namespace_are_refused_too() -> None:
    assert check_resource(cluster_role(rule([""], ["secrets"], ["get"]), kind=ROLE))


def test_binding_a_built_in_broad_role_is_refused() -> None:
    binding = Resource(
        CLUSTER_ROLE_BINDING,
        {"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}},
    )
    [message] = check_resource(binding)
    assert "binds the built-in role cluster-admin" in message
