"""The provisioner's rights, pinned rule by rule."""

from __future__ import annotations

from components.rbac import CLUSTER_RULES, NAMESPACE_RULES, PolicyRule


def test_cluster_rules_are_exactly_what_provisioning_needs() -> None:
    expected = (
        PolicyRule("", ("persistentvolumeclaims",), ("get", "list", "watch", "update", "patch")),
        PolicyRule(
            "",
            ("persistentvolumes",),
            ("get", "list", "watch", "create", "delete", "update", "patch"),
        ),
        PolicyRule("storage.k8s.io", ("storageclasses",), ("get", "list", "watch")),
        PolicyRule("", ("nodes",), ("get", "list", "watch")),
        PolicyRule("", ("events",), ("create", "patch")),
    )
    assert expected == CLUSTER_RULES


def test_namespace_rules_cover_helper_pods_and_the_lease_only() -> None:
    expected = (
        PolicyRule("", ("pods",), ("create", "get", "list", "watch", "delete")),
        PolicyRule("coordination.k8s.io", ("leases",), ("get", "create", "update")),
        PolicyRule("", ("namespaces",), ("get",)),
        PolicyRule("apps", ("replicasets",), ("get",)),
    )
    assert expected == NAMESPACE_RULES


def test_no_secrets_no_logs_no_wildcards() -> None:
    for rule in (*CLUSTER_RULES, *NAMESPACE_RULES):
        assert "secrets" not in rule.resources
        assert "pods/log" not in rule.resources
        assert "*" not in (rule.api_group, *rule.resources, *rule.verbs)
        assert not {"escalate", "bind", "impersonate"} & set(rule.verbs)
