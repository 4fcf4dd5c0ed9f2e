"""The provisioner's rights: least privilege as properties a change must keep, not a copy of
the rules (tests/components/test_deployed_rbac.py runs the provisioner under them for real)."""

from __future__ import annotations

from components.rbac import CLUSTER_RULES, NAMESPACE_RULES, PolicyRule

WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def verbs(rules: tuple[PolicyRule, ...], resource: str) -> set[str]:
    return {verb for rule in rules if resource in rule.resources for verb in rule.verbs}


def written(rules: tuple[PolicyRule, ...]) -> set[str]:
    return {resource for rule in rules if WRITES & set(rule.verbs) for resource in rule.resources}


def test_cluster_wide_it_writes_only_volumes_claims_and_events() -> None:
    assert written(CLUSTER_RULES) == {
        "persistentvolumes",
        "persistentvolumeclaims",
        "persistentvolumeclaims/status",
        "events",
    }


def test_a_claims_status_is_only_patched_for_a_granted_expansion() -> None:
    assert verbs(CLUSTER_RULES, "persistentvolumeclaims/status") == {"patch"}


def test_the_csi_driver_is_only_read_the_stack_deploys_it() -> None:
    assert verbs(CLUSTER_RULES, "csidrivers") == {"get"}
    assert "csidrivers" not in {r for rule in NAMESPACE_RULES for r in rule.resources}


def test_capacities_are_published_in_its_own_namespace_only() -> None:
    assert verbs(NAMESPACE_RULES, "csistoragecapacities") == {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
    }
    assert not verbs(CLUSTER_RULES, "csistoragecapacities")


def test_claims_and_volumes_are_patched_never_replaced() -> None:
    # An update (PUT) of a tenant's claim could undo a concurrent change to it.
    assert verbs(CLUSTER_RULES, "persistentvolumeclaims") & WRITES == {"patch"}
    assert "update" not in verbs(CLUSTER_RULES, "persistentvolumes")


def test_in_its_namespace_it_writes_only_helper_pods_its_lease_and_capacities() -> None:
    own = {"pods", "leases", "csistoragecapacities"}
    assert written(NAMESPACE_RULES) == own
    assert not own & {r for rule in CLUSTER_RULES for r in rule.resources}


def test_events_are_written_for_claims_anywhere_and_read_in_its_own_namespace_only() -> None:
    assert verbs(NAMESPACE_RULES, "events") == {"list"}, "its helper pods' kubelet warnings"
    assert verbs(CLUSTER_RULES, "events") == {"create", "patch"}


def test_nothing_is_deleted_in_bulk() -> None:
    for rule in (*CLUSTER_RULES, *NAMESPACE_RULES):
        assert "deletecollection" not in rule.verbs


def test_no_secrets_no_logs_no_wildcards() -> None:
    for rule in (*CLUSTER_RULES, *NAMESPACE_RULES):
        assert "secrets" not in rule.resources
        assert "pods/log" not in rule.resources
        assert "*" not in (rule.api_group, *rule.resources, *rule.verbs)
        assert not {"escalate", "bind", "impersonate"} & set(rule.verbs)
