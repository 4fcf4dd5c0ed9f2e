"""The provisioner's RBAC stays least-privilege: no wildcards, no secrets, and pods only in
its own namespace (helper pods, through a Role). components/rbac.py is what it needs; this
catches a transformation, a hand edit or another program that widens it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policy.resources import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    ROLE,
    ROLE_BINDING,
    KubeObject,
    Resource,
    check_objects,
)

NAME = "least-privilege-rbac"
_BROAD_ROLES = ("cluster-admin", "admin", "edit")
_FIX = "grant only what components/rbac.py lists"


def _rule_problems(rule: Mapping[str, Any], cluster_wide: bool) -> list[str]:
    problems = []
    for field in ("apiGroups", "resources", "verbs", "nonResourceURLs"):
        if any("*" in str(value) for value in rule.get(field) or ()):
            problems.append(f"{field} has a wildcard")
    resources = [str(value) for value in rule.get("resources") or ()]
    if any(value == "secrets" or value.startswith("secrets/") for value in resources):
        problems.append("it grants secrets")
    if cluster_wide and any(value == "pods" or value.startswith("pods/") for value in resources):
        problems.append("it grants pods in every namespace (helper pods live in its own)")
    return problems


def check_resource(resource: Resource) -> list[str]:
    return check_objects(
        resource,
        {
            CLUSTER_ROLE: _role_problems,
            ROLE: _role_problems,
            CLUSTER_ROLE_BINDING: _binding_problems,
            ROLE_BINDING: _binding_problems,
        },
    )


def _binding_problems(binding: KubeObject) -> list[str]:
    """A binding (or a Patch that sets roleRef) to a built-in broad role."""
    role = str((binding.props.get("roleRef") or {}).get("name", ""))
    if role in _BROAD_ROLES:
        return [f"{binding.label} binds the built-in role {role}: {_FIX}"]
    return []


def _role_problems(role: KubeObject) -> list[str]:
    """Each rule beyond what the provisioner needs (a Patch's rules replace the role's: a list
    without merge keys is replaced whole by server-side apply)."""
    messages = []
    for index, rule in enumerate(role.props.get("rules") or ()):
        for problem in _rule_problems(rule, cluster_wide=role.kind == CLUSTER_ROLE):
            shown = {
                key: rule.get(key) for key in ("apiGroups", "resources", "verbs") if key in rule
            }
            messages.append(f"{role.label} rules[{index}] {shown}: {problem}; {_FIX}")
    return messages
