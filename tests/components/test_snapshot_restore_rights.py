"""The rights a restore needs (read a VolumeSnapshot and its content, list ReferenceGrants) are
granted to the provisioner only when a class is a CSI class: no other class restores."""

from __future__ import annotations

from components import rbac
from components.program import run
from tests.components.mocked_engine import run_mocked
from tests.components.test_csi_stack import CLUSTER_ROLE, csi_run, dev_with

RESTORE_RULES = [
    {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": ["get"]},
    {
        "apiGroups": ["gateway.networking.k8s.io"],
        "resources": ["referencegrants"],
        "verbs": ["list"],
    },
]


def provisioner_rules(roles: list[dict[str, object]]) -> list[object]:
    (role,) = [r for r in roles if not str(r["metadata"]["name"]).endswith(":node-plugin")]  # type: ignore[index]
    rules = role["rules"]
    assert isinstance(rules, list)
    return rules


def test_a_csi_class_grants_reading_snapshots_and_listing_reference_grants() -> None:
    rules = provisioner_rules([r.inputs for r in csi_run().of_type(CLUSTER_ROLE)])
    for rule in RESTORE_RULES:
        assert rule in rules
    contents = [r for r in rules if r["resources"] == ["volumesnapshotcontents"]]  # type: ignore[index]
    assert len(contents) == 1
    assert "get" in contents[0]["verbs"]  # type: ignore[index]
    assert len(rules) == len(rbac.CLUSTER_RULES) + len(rbac.SNAPSHOT_RULES)


def test_without_a_csi_class_nothing_of_snapshots_is_granted() -> None:
    result = run_mocked(dev_with(), run, stack="dev")
    assert result.error is None, result.error
    rules = provisioner_rules([r.inputs for r in result.of_type(CLUSTER_ROLE)])
    assert not any(rule in rules for rule in RESTORE_RULES)
