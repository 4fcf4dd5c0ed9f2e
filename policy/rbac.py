"""The provisioner's RBAC stays least-privilege: no wildcards, no secrets, and pods only in
its own namespace (helper pods, through a Role). components/rbac.py is what it needs; this
catches a transformation, a hand edit or another program that widens it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policy.resources import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, ROLE, ROLE_BINDING, Resource

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
    if resource.type in (CLUSTER_ROLE_BINDING, ROLE_BINDING):
        role = str((resource.props.get("roleRef") or {}).get("name", ""))
        if role in _BROAD_ROLES:
            kind = "ClusterRoleBinding" if resource.type == CLUSTER_ROLE_BINDING else "RoleBinding"
            return [f"{kind} {resource.name} binds the built-in role {role}: {_FIX}"]
        return []
    if resource.type not in (CLUSTER_ROLE, ROLE):
        return []
    kind = "ClusterRole" if resource.type == CLUSTER_ROLE else "Role"
    messages = []
    for index, rule in enumerate(resource.props.get("rules") or ()):
        for problem in _rule_problems(rule, cluster_wide=resource.type == CLUSTER_ROLE):
            shown = {
                key: rule.get(key) for key in ("apiGroups", "resources", "verbs") if key in rule
            }
            messages.append(f"{kind} {resource.name} rules[{index}] {shown}: {problem}; {_FIX}")
    return messages
