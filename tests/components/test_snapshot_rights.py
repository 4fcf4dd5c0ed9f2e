"""The rights on snapshot objects are granted only with a CSI class: only its volumes can be
snapshotted, and the node plugin (which takes the snapshots) is deployed only then."""

from __future__ import annotations

import json
from typing import Any

from components import rbac
from components.program import run
from components.settings import parse_settings
from tests.components.mocked_engine import run_mocked
from tests.components.test_settings import dev_with

CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
CONTENTS = {
    "apiGroups": ["snapshot.storage.k8s.io"],
    "resources": ["volumesnapshotcontents"],
    "verbs": ["get", "list", "watch", "patch"],
}
CONTENT_STATUS = {
    "apiGroups": ["snapshot.storage.k8s.io"],
    "resources": ["volumesnapshotcontents/status"],
    "verbs": ["patch"],
}


def classes(**parameters: str) -> str:
    entry: dict[str, Any] = {
        "name": "local-path-storage",
        "volumeBindingMode": "WaitForFirstConsumer",
        "parameters": parameters,
    }
    return json.dumps([entry])


def test_a_csi_class_grants_the_snapshot_rights() -> None:
    raw = dev_with(storageClasses=classes(volumeType="csi"))
    assert parse_settings(raw).deployment.node_plugin is not None
    result = run_mocked(raw, run, stack="dev")
    assert result.error is None, result.error
    (role,) = [
        r for r in result.of_type(CLUSTER_ROLE) if not r.name.endswith("-node-plugin-clusterrole")
    ]
    rules = role.inputs["rules"]
    assert CONTENTS in rules
    assert CONTENT_STATUS in rules
    assert len(rules) == len(rbac.CLUSTER_RULES) + len(rbac.SNAPSHOT_RULES)
    # Never more than the contents' writes the controller sends: no create, delete or update.
    assert all(
        not {"create", "delete", "update"} & set(rule["verbs"])
        for rule in rules
        if rule["apiGroups"] == ["snapshot.storage.k8s.io"]
    )


def test_classes_without_csi_grant_nothing_on_snapshots() -> None:
    raw = dev_with(storageClasses=classes(minSize="1Mi"))
    result = run_mocked(raw, run, stack="dev")
    assert result.error is None, result.error
    rules = result.one(CLUSTER_ROLE).inputs["rules"]
    assert all(rule["apiGroups"] != ["snapshot.storage.k8s.io"] for rule in rules)
